"""Is it good, and did it get better: percent of peak, spreads, trials, the compare verdict
and its gate, and autotuning apart. Every test runs on a committed capture, or on a copy
of one changed by the test (its kernel times scaled, a kernel renamed, trials made from
one capture with a known spread), named as such."""

import copy
import gc
import gzip
import json
import math
import random
import shutil
import statistics
import sys
import time

import msgspec
import pytest

import parse_hatchet as ph
from conftest import ROOT, run
from summary import compare, stats, views
from summary.records import Kernel, Summary

FIXTURES = ROOT / "tests" / "fixtures"
TREE = FIXTURES / "h200-softmax-python.hatchet"  # make profile of the example, 20 + 1 launches
HOOK = FIXTURES / "h200-softmax-python-hook-bf16-256x131072.hatchet"  # -k triton: bytes
AMD = FIXTURES / "amd-gfx950-vecadd-shadow.hatchet"


def summary(*paths):
    return json.loads(ph.to_json(ph.summaries([str(p) for p in paths])[0][0].summary))


def records(side):
    """A side's summaries, given as summary.json's objects, as records."""
    filled = [
        {
            "proton_artifact_dir": "",
            **s,
            "proton_kernels": [{"mean_us": None, "share": 0.0, **k} for k in s["proton_kernels"]],
        }
        for s in side
    ]
    return [msgspec.convert(s, Summary) for s in filled]


def diff(base, now, *args):
    """compare.diff of two sides given as summary.json's objects, as summary.json has it."""
    return msgspec.to_builtins(compare.diff(records(base), records(now), *args))


def strict_json(text):
    return json.loads(text)


def cli(*args):
    return run(sys.executable, ROOT / "parse_hatchet.py", *args)


def scaled(src, dst, factor, kernel=None, rename=None):
    """A copy of the tree src at dst, the times of kernel's leaves (every kernel's, where
    None) multiplied by factor, and kernel renamed where rename is given."""
    tree = json.loads(src.read_text())

    def walk(node):
        name = node["frame"]["name"]
        if not node.get("children") and (kernel is None or name == kernel):
            if "time (ns)" in node["metrics"]:
                node["metrics"]["time (ns)"] *= factor
            node["frame"]["name"] = rename or name
        for child in node.get("children", []):
            walk(child)

    walk(tree[0])
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(tree))
    return dst


def trials(folder, *factors, kernel=None):
    """A run of trials made from one capture: trial K's kernel times scaled by factor K."""
    for k, factor in enumerate(factors, 1):
        scaled(TREE, folder / f"trial{k}" / "proton.hatchet", factor, kernel)
    return folder


# Percent of peak, from the capture's own device record.


def test_the_peak_bandwidth_is_the_device_s_published_one():
    # memory clock x bus width x transfers per clock: 3,201 MHz x 6,016 bits x 2 on the
    # H200 (4.8 TB/s); 1,900 MHz x 8,192 bits x 4 on the 256-CU MI355X (8 TB/s).
    (h200,) = summary(TREE)["proton_device"]
    (mi355x,) = summary(AMD)["proton_device"]
    assert round(h200["peak_gbyte_per_s"] / 1e3, 1) == 4.8
    assert mi355x["sm_count"] == 256 and round(mi355x["peak_gbyte_per_s"] / 1e3) == 8


def test_a_kernel_that_recorded_bytes_shows_its_share_of_the_peak():
    rows = {k["name"]: k for k in summary(HOOK)["proton_kernels"]}
    normalize = rows["softmax_normalize_kernel [256x131072 bfloat16]"]
    assert normalize["gbyte_per_s"] == pytest.approx(4546, abs=1)
    assert normalize["peak_gbyte_per_s"] == pytest.approx(3201 * 6016 * 2 / 8 / 1e3)
    assert normalize["pct_of_peak_bw"] == pytest.approx(4546 / 4814.4, abs=1e-3)
    torch_kernels = [k for k in rows.values() if "[" not in k["name"]]
    assert torch_kernels and all("pct_of_peak_bw" not in k for k in torch_kernels)  # no bytes


def ceiling(folder, l2_bytes=50 * 2**20, arch="90", sm_count=132, bus=6016):
    """A recorded `make ceiling` of an H200: the copy's GB/s at each size, and its L2."""
    sizes = [
        {"bytes": 2**n, "copy_gbps": 1000.0 * n, "read_gbps": 1100.0 * n} for n in (20, 27, 28)
    ]
    record = {"device": "NVIDIA H200", "arch": arch, "sm_count": sm_count, "l2_bytes": l2_bytes}
    record["memory_bus_bits"] = bus
    (folder / "ceiling").mkdir(exist_ok=True)
    (folder / "ceiling" / "h200.json").write_text(json.dumps({**record, "sizes": sizes}))
    return folder / "ceiling"


def test_the_table_shows_percent_of_peak_and_of_the_measured_copy_at_the_launch_s_size(tmp_path):
    p = cli(HOOK, "--table", "--top", "2", "--ceiling", ceiling(tmp_path))
    head, first = p.stdout.splitlines()[2:4]  # after the headline and a blank line
    assert head.endswith("GB/s % peak BW % ceiling  kernel")
    # 256 x 131072 bf16 read and written: 128 MiB a launch, the 2^27 size's 27,000 GB/s.
    assert " 4546       94%       17%  softmax_normalize_kernel" in first
    assert "L2-resident" not in first
    assert "% peak" not in cli(TREE, "--table").stdout  # no bytes recorded: no such column


def test_a_launch_that_fits_the_l2_is_said_to_be_l2_resident(tmp_path):
    s = strict_json(cli(HOOK, "--ceiling", ceiling(tmp_path, l2_bytes=2**28)).stdout)
    assert all(k["l2_resident"] for k in s["proton_kernels"] if "gbyte_per_s" in k)
    p = cli(HOOK, "--table", "--ceiling", ceiling(tmp_path, l2_bytes=2**28))
    assert "softmax_normalize_kernel [256x131072 bfloat16] [L2-resident]" in p.stdout
    for other_model in (dict(arch="100"), dict(bus=5120)):  # a B200; an H100, as an H200's arch
        other = strict_json(cli(HOOK, "--ceiling", ceiling(tmp_path, **other_model)).stdout)
        assert all("pct_of_ceiling_bw" not in k for k in other["proton_kernels"])


def test_above_the_peak_is_shown_not_clamped(tmp_path):
    # A reread served by L2 moves fewer bytes through memory than launch_metadata says.
    fast = scaled(
        HOOK, tmp_path / "fast.hatchet", 0.5, "softmax_normalize_kernel [256x131072 bfloat16]"
    )
    rows = {k["name"]: k for k in summary(fast)["proton_kernels"]}
    assert rows["softmax_normalize_kernel [256x131072 bfloat16]"]["pct_of_peak_bw"] > 1.8


# Spread per kernel, from traces.


def test_each_kernel_s_spread_from_its_launches_in_a_trace():
    path = FIXTURES / "h200-softmax-python.chrome_trace"
    events = json.loads(path.read_text())["traceEvents"]
    durations = sorted(e["dur"] for e in events if e["name"] == "softmax_kernel")
    deciles = statistics.quantiles(durations, n=10, method="inclusive")  # linear, closest ranks
    (row,) = [k for k in summary(path)["proton_kernels"] if k["name"] == "softmax_kernel"]
    assert (row["min_us"], row["max_us"]) == (durations[0], durations[-1])
    assert row["median_us"] == pytest.approx(statistics.median(durations))
    assert row["p90_us"] == pytest.approx(deciles[8])
    head = cli(path, "--table").stdout.splitlines()[2]
    assert "median us" in head and "p90 us" in head
    assert "median_us" not in summary(TREE)["proton_kernels"][0]  # a tree has no launches


# Trials.


def test_trials_report_each_kernel_s_spread_across_them_and_trial1_s_keys(tmp_path):
    run_ = trials(tmp_path / "run", 1.0, 1.1, 0.9)
    s = json.loads(cli(run_).stdout)
    base = summary(TREE)
    assert s["proton_trials"]["n"] == 3
    assert s["proton_gpu_time_ms"] == pytest.approx(base["proton_gpu_time_ms"])  # trial1's
    assert s["proton_kernel_count"] == base["proton_kernel_count"]  # never a sum of trials
    (k,) = [k for k in s["proton_trials"]["kernels"] if k["name"] == "softmax_kernel"]
    (one,) = [k["total_ms"] for k in base["proton_kernels"] if k["name"] == "softmax_kernel"]
    times = [one * f for f in (1.0, 1.1, 0.9)]
    assert k["mean_ms"] == pytest.approx(statistics.fmean(times), rel=1e-3)
    assert (k["min_ms"], k["max_ms"]) == (
        pytest.approx(times[2], rel=1e-3),
        pytest.approx(times[1], rel=1e-3),
    )
    assert k["cv"] == pytest.approx(statistics.stdev(times) / statistics.fmean(times), rel=1e-6)
    assert "3 trials" in cli(run_, "--table").stdout


def test_a_first_trial_that_stands_apart_is_named(tmp_path):
    # Trial 1 10% slower than the others, which lie within 1%: more than 3% outside.
    line = cli(trials(tmp_path / "apart", 1.1, 1.0, 1.01), "--table").stdout
    assert "3 trials: each kernel's ms in each, across them; trial 1 stands apart: " in line
    assert (
        "trial 1 stands apart"
        not in cli(trials(tmp_path / "near", 1.02, 1.0, 1.01), "--table").stdout
    )


def test_two_trials_a_side_print_intervals_however_wide(tmp_path):
    # Two trials far apart, 2 degrees of freedom: an interval past 1e+100 fits its columns.
    base, now = trials(tmp_path / "base", 1.0, 1e-3), trials(tmp_path / "now", 1.0, 1.0)
    p = cli(now, "--diff", base, "--table", "--fail-above", "1")
    rows = p.stdout.splitlines()[3:5]
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert all(len(r.split()) >= 8 and r.split()[5] == "2/2" for r in rows), rows


def test_a_single_trial_has_no_cv():
    kernel = Kernel(name="k", readable_name="k", launches=1, total_ms=0.5, mean_us=500.0, share=1)
    trial = Summary(proton_artifact_dir="run", proton_kernels=[kernel])
    assert views.spread_trials([trial]).kernels[0].cv is None


# Compare: rows matched by what they are, the verdict, the gate.

REAL = FIXTURES / "h200-trials"  # make profile TRIALS=3 on the H200, around an edit


def sides(*paths):
    """Each path's summaries, one for each trial."""
    return [[json.loads(ph.to_json(s.summary)) for s in ph.summaries([str(p)])[0]] for p in paths]


def rows(d):
    return [d["total"], *d["kernels"], *d["callsites"]]


def frame(name, *children, **metrics):
    return {"frame": {"name": name}, "metrics": metrics, "children": list(children)}


def capture(path, *launches):
    """A tree capture at path: each launch (frames, kernel, ms) under ROOT, 10 launches."""
    root = frame("ROOT")
    for frames, kernel, ms in launches:
        node = root
        for name in frames:
            found = [c for c in node["children"] if c["frame"]["name"] == name]
            node["children"] += [] if found else [frame(name)]
            node = found[0] if found else node["children"][-1]
        node["children"].append(frame(kernel, count=10, **{"time (ns)": ms * 1e6}))
    path.write_text(json.dumps([root, {}]))
    return path


MAIN = ["/workspace/mine.py:30@<module>"]


def drawn(seed, factor=1.0):
    """Two sides of 5 trials each, every kernel's time drawn log-normally around trial1 of
    the real base run, with the spread its 3 real trials show (at least 1%); now's
    largest kernel x factor."""
    real = sides(REAL / "base")[0]
    spread = {
        k["name"]: max(k["cv"], 0.01)
        for k in msgspec.to_builtins(views.spread_trials(records(real)))["kernels"]
    }
    largest, rng = real[0]["proton_kernels"][0]["name"], random.Random(seed)

    def trial(f):
        scale = {
            k: math.exp(rng.gauss(0, s)) * (f if k == largest else 1) for k, s in spread.items()
        }
        s = copy.deepcopy(real[0])
        for k in s["proton_kernels"]:
            k["total_ms"] *= scale[k["name"]]
        for site in s["proton_callsites"]:
            for k in site["kernels"]:
                k["ms"] *= scale[k["name"]]
            site["ms"] = sum(k["ms"] for k in site["kernels"])
        return s

    return [trial(1.0) for _ in range(5)], [trial(factor) for _ in range(5)]


def test_an_a_a_run_passes_and_a_5_percent_slower_kernel_fails():
    # At the defaults: the 5% is 0.0064 ms of this kernel, past the 0.005 ms floor.
    gate, quiet, caught = compare.Gate(fail_above=1), 0, 0
    for seed in range(20):
        d = diff(*drawn(seed), "base", gate, True)
        quiet += not d["regressions"] and all(
            r["verdict"] not in ("slower", "faster") for r in rows(d)
        )
        d = diff(*drawn(seed, 1.05), "base", gate, True)
        (k,) = [r for r in d["kernels"] if r["name"] == "softmax_kernel"]
        caught += k["verdict"] == "slower" and k["regression"]
    assert quiet >= 19 and caught >= 19, (quiet, caught)


def test_real_trials_judge_a_slower_kernel_past_their_noise():
    # An edit that gives each program 8 rows in one warp: slower, past a 5% gate.
    p = cli(REAL / "slower", "--diff", REAL / "base", "--fail-above", "5")
    d = json.loads(p.stdout)["proton_diff"]
    (k,) = [k for k in d["kernels"] if k["name"] == "softmax_kernel"]
    assert p.returncode == 3 and k["verdict"] == "slower" and k["low"] > 2.2
    assert (d["method"], d["alpha"], d["rows_judged"], d["interleaved"]) == (
        "welch log bonferroni",
        0.05,
        11,
        False,
    )
    assert d["first_line"].startswith(f"{compare.NOT_INTERLEAVED}; softmax_kernel: 2.286x slower")
    failed = [line for line in p.stderr.splitlines() if "regression:" in line]
    assert len(failed) == len(d["regressions"]) == 4 and "softmax_kernel" in failed[0]
    assert all("past --fail-above 5" in line for line in failed)


def test_the_floor_is_the_least_growth_failed_and_the_ms_within_which_a_row_is_same():
    # A 0.002 ms kernel made 2x slower, tightly: within the 0.005 ms floor, same.
    tiny, doubled = [0.002, 0.00201, 0.00199], [0.004, 0.00401, 0.00399]
    assert compare.judge(tiny, doubled, 1, compare.Gate(fail_above=5)).verdict == "same"
    row = compare.judge(tiny, doubled, 1, compare.Gate(fail_above=5, min_ms=0))
    assert row.verdict == "slower" and row.regression


def test_unsettled_rows_are_those_the_gate_could_still_fail():
    # 2.5% slower, its interval reaching past 1%: unsettled; 2% slower at 0.2 ms, its
    # interval's growth never the floor's 0.005 ms: inconclusive, but no round can fail it.
    assert [r.label() for r in compare.unsettled(judged(1.0, 1.025, 1))] == ["k", "GPU time"]
    d = judged(0.2, 0.98, 1)
    assert d.kernels[0].verdict == "inconclusive" and compare.unsettled(d) == []
    assert compare.unsettled(judged(1.0, 1.025, None)) == []  # no gate: nothing to fail
    # 2% slower on trials of 0.7%: slower, its interval 1.006-1.034 not yet past 1.01.
    d = judged(1.0, 1.02, 1, [1.0, 1.01, 0.99, 1.005, 0.995])
    assert d.kernels[0].verdict == "slower" and not d.regressions
    assert [r.label() for r in compare.unsettled(d)] == ["k", "GPU time"]


def test_from_10_trials_a_side_one_slow_trial_moves_no_interval():
    # Yuen's 20%-trimmed means: a trial 15% slow among ten leaves the interval near 1.
    base = [1.0 + 0.002 * i for i in range(-5, 5)]
    now = [*base[:9], 1.15]
    ln_r, low, high = stats.interval(base, now, 11)
    assert abs(ln_r) < 0.002 and 0.98 < low < 1 < high < 1.02
    welch = stats.interval(base[:9], now[:9] + [1.15], 11)  # 9 trials: Welch's means
    assert welch[2] > 1.05
    assert (
        compare.diff(*[records(trials_of_k(1.0, 1, base))] * 2, "b", compare.Gate(), True).method
        == "yuen 20% trimmed log bonferroni"
    )


def test_t_quantiles_are_student_s():
    # Tables of Student's t (Abramowitz and Stegun 26.10; Welch's degrees need not be whole).
    assert stats.t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert stats.t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert stats.t_quantile(0.995, 10) == pytest.approx(3.1693, abs=1e-4)
    assert stats.t_quantile(0.9995, 120) == pytest.approx(3.3735, abs=1e-4)
    assert 2.7764 < stats.t_quantile(0.975, 3.5) < 3.1824  # between 4 and 3 degrees


def test_the_interval_is_welch_s_on_log_times():
    base, now = [1.0, 1.02, 0.98], [1.10, 1.13, 1.08, 1.12]
    ln_r, low, high = stats.interval(base, now, 1)
    logs = [[math.log(x) for x in side] for side in (base, now)]
    se = math.sqrt(sum(statistics.variance(s) / len(s) for s in logs))
    assert ln_r == pytest.approx(statistics.fmean(logs[1]) - statistics.fmean(logs[0]))
    parts = [statistics.variance(s) / len(s) for s in logs]
    v = sum(parts) ** 2 / (parts[0] ** 2 / 2 + parts[1] ** 2 / 3)  # Welch-Satterthwaite
    assert 2 < v < 5 and math.log(low) == pytest.approx(ln_r - stats.t_quantile(0.975, v) * se)
    wider = stats.interval(base, now, 10)
    assert wider[1] < low and wider[2] > high  # Bonferroni over more rows
    assert stats.interval([1.0, 1.0], [2.0, 2.0], 5) == (math.log(2), 2.0, 2.0)  # no spread


@pytest.mark.parametrize(
    "base, now, verdict",
    [
        ([1.0, 1.002, 0.998], [1.0, 1.002, 0.998], "same"),
        ([1.0, 1.001, 0.999], [1.1, 1.101, 1.099], "slower"),
        ([1.0, 1.001, 0.999], [0.9, 0.901, 0.899], "faster"),
        ([1.0, 1.2, 0.8], [1.1, 1.3, 0.9], "inconclusive"),
        ([1.0, 0.0, 1.0], [1.0, 1.0, 1.0], "inconclusive"),  # a trial it did not run in
        ([1.0], [1.015], "same"),
        ([1.0], [1.03], "slower"),
        ([0.0], [0.5], "slower"),  # from nothing in the base: judged, and gated
    ],
)
def test_verdicts(base, now, verdict):
    found = compare.judge(base, now, 1, compare.Gate(fail_above=2, min_ms=0))
    assert found.verdict == verdict
    assert found.regression == (verdict == "slower")


def test_one_run_a_side_judges_the_change_alone(tmp_path):
    # 6.5% slower: within 2% and the 5% allowed for drift, but past --fail-above 1, which
    # then is the band.
    cur = scaled(TREE, tmp_path / "cur.hatchet", 1.065, "softmax_kernel")
    p = cli(
        cur,
        "--diff",
        TREE,
        "--fail-above",
        "1",
        "--min-ms",
        "0",
        "--table",
        "--markdown",
        tmp_path / "c.md",
    )
    first = p.stdout.splitlines()[0].removeprefix(f"{compare.NOT_INTERLEAVED}; ")
    assert p.returncode == 3 and first.startswith("softmax_kernel: 1.065x slower")
    assert compare.ONE_RUN in first and compare.ONE_RUN in p.stderr
    assert compare.ONE_RUN in (tmp_path / "c.md").read_text().splitlines()[0]
    assert cli(cur, "--diff", TREE, "--fail-above", "2", "--min-ms", "0").returncode == 0


def test_new_gpu_time_counts_through_the_total(tmp_path):
    base = capture(tmp_path / "base.hatchet", (MAIN, "k", 0.1))
    extra = MAIN + ["/workspace/mine.py:40@more"]
    now = capture(tmp_path / "now.hatchet", (MAIN, "k", 0.1), (extra, "extra", 0.5))
    p = cli(now, "--diff", base, "--fail-above", "10")
    d = json.loads(p.stdout)["proton_diff"]
    assert p.returncode == 3 and d["regressions"] == ["GPU time"]
    assert d["total"]["ratio"] == pytest.approx(6.0) and "regression: GPU time" in p.stderr
    assert {r["name"]: r["verdict"] for r in d["kernels"]} == {"k": "same", "extra": "new"}


def test_runs_with_nothing_in_common_are_refused(tmp_path):
    other = capture(tmp_path / "other.hatchet", (["/w/other.py:1@go"], "other_kernel", 0.1))
    p = cli(other, "--diff", TREE, "--fail-above", "10")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "nothing" not in p.stdout
    assert "no kernel or call site in common" in p.stderr


def test_other_devices_are_refused_unless_any_device():
    p = cli(AMD, "--diff", TREE, "--table")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "devices differ" in p.stderr
    p = cli(AMD, "--diff", TREE, "--table", "--any-device", "--top", "3")
    table = p.stdout.split("\n\n")[0].splitlines()
    assert p.returncode == 0 and all("devices differ" in line for line in table[:2] + table[3:])


def test_an_h100_and_an_h200_are_other_devices():
    # One arch (90) and one SM count: the memory bus tells them apart.
    h100, h200 = (FIXTURES / f"{card}-softmax-python-hook.hatchet" for card in ("h100", "h200"))
    p = cli(h200, "--diff", h100)
    assert (
        p.returncode == 2
        and "6016-bit memory bus) now, CUDA 90 (132 SMs, 5120-bit memory bus) in the base"
        in p.stderr
    )


def test_a_deleted_line_moves_no_call_site_onto_another(tmp_path):
    # A 0.02 ms check at line 10 deleted: the 1 ms loop moves from line 20 to 19.
    check, loop = ["/workspace/mine.py:10@main"], ["/workspace/mine.py:20@main"]
    base = capture(
        tmp_path / "base.hatchet", (MAIN + check, "check", 0.02), (MAIN + loop, "loop", 1)
    )
    now = capture(tmp_path / "now.hatchet", (MAIN + ["/workspace/mine.py:19@main"], "loop", 1))
    p = cli(now, "--diff", base, "--fail-above", "10")
    d = json.loads(p.stdout)["proton_diff"]
    assert p.returncode == 0 and not d["regressions"]
    verdicts = {r["callsite"]: r["verdict"] for r in d["callsites"]}
    assert verdicts == {
        "mine.py:30 <module> > mine.py:20->19 main": "same",
        "mine.py:30 <module> > mine.py:10 main": "gone",
    }


def site(line, kernel, ms=1.0):
    return {
        "callsite": f"mine.py:{line} main",
        "frames": [["mine.py", line, "main", 1]],
        "source": None,
        "kernels": [{"name": kernel, "launches": 1, "ms": ms}],
        "ms": ms,
    }


def test_call_sites_tied_on_everything_are_ambiguous():
    k = {"name": "k", "readable_name": "k", "launches": 2, "total_ms": 2.0}
    base = [{"proton_kernels": [k], "proton_callsites": [site(10, "k"), site(30, "k")]}]
    now = [{"proton_kernels": [k], "proton_callsites": [site(20, "k", 2.0)]}]
    d = diff(base, now, "b", compare.Gate(), True)
    verdicts = sorted((r["callsite"], r["verdict"], r["n_base"], r["n"]) for r in d["callsites"])
    # Lines 10 and 30 are as near 20: none of them is judged.
    assert verdicts == [
        ("mine.py:10 main", "ambiguous", 1, 0),
        ("mine.py:20 main", "ambiguous", 0, 1),
        ("mine.py:30 main", "ambiguous", 1, 0),
    ]
    assert d["rows_judged"] == 2  # the GPU time and k


def test_call_sites_are_told_apart_by_kernels_then_lines():
    k = {"name": "k", "readable_name": "k", "launches": 3, "total_ms": 3.0}
    base = [
        {"proton_kernels": [k], "proton_callsites": [site(10, "k"), site(12, "j"), site(30, "k")]}
    ]
    # A line added above all three; the site that launched j launches k now.
    now = [
        {"proton_kernels": [k], "proton_callsites": [site(11, "k"), site(13, "k"), site(31, "k")]}
    ]
    d = diff(base, now, "b", compare.Gate(), True)
    expected = ["mine.py:10->11 main", "mine.py:12->13 main", "mine.py:30->31 main"]
    assert sorted(r["callsite"] for r in d["callsites"]) == expected


def test_the_gate_needs_the_interval_past_its_percent(tmp_path):
    # Each side's trials spread +-15%: 1.2x slower is not surely past 10%.
    base = trials(tmp_path / "base", 0.85, 1.0, 1.15)
    cur = trials(tmp_path / "cur", 0.85 * 1.2, 1.2, 1.15 * 1.2)
    p = cli(cur, "--diff", base, "--fail-above", "10")
    (row,) = [
        r for r in json.loads(p.stdout)["proton_diff"]["kernels"] if r["name"] == "softmax_kernel"
    ]
    assert p.returncode == 0 and row["verdict"] == "inconclusive" and row["low"] < 1.1


def test_min_ms_is_how_much_a_regression_grew(tmp_path):
    small = "at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel"
    kernel = next(k["name"] for k in summary(TREE)["proton_kernels"] if small in k["readable_name"])
    cur = scaled(TREE, tmp_path / "cur.hatchet", 2.0, kernel)  # 0.0127 -> 0.0254 ms
    assert cli(cur, "--diff", TREE, "--fail-above", "10", "--min-ms", "0.02").returncode == 0
    assert cli(cur, "--diff", TREE, "--fail-above", "10", "--min-ms", "0.01").returncode == 3
    assert cli(cur, "--diff", TREE, "--fail-above", "0", "--min-ms", "0").returncode == 3
    same = shutil.copy(TREE, tmp_path / "same.hatchet")
    assert cli(TREE, "--diff", same, "--fail-above", "0", "--min-ms", "0").returncode == 0


def test_without_a_gate_a_regression_exits_0_and_says_so_first(tmp_path):
    cur = scaled(TREE, tmp_path / "cur.hatchet", 2.0, "softmax_kernel")
    p = cli(cur, "--diff", TREE, "--table", "--markdown", tmp_path / "c.md")
    assert p.returncode == 0 and p.stdout.startswith(
        f"{compare.NOT_INTERLEAVED}; softmax_kernel: 2.000x slower (0.128 -> 0.257 ms)"
    )
    md = (tmp_path / "c.md").read_text()
    assert "| softmax\\_kernel | 0.1283 | 0.2566 | 2.000 |  | 1/1 | slower |" in md
    assert "Gate: none." in md


def test_no_traceback_from_any_kernel_name(tmp_path):
    odd = "k\nforged line | [4x8]"
    base = scaled(TREE, tmp_path / "base.hatchet", 1.0, "softmax_kernel", rename=odd)
    cur = scaled(TREE, tmp_path / "cur.hatchet", 2.0, "softmax_kernel", rename=odd)
    p = cli(cur, "--diff", base, "--table", "--fail-above", "5", "--markdown", tmp_path / "c.md")
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert p.stdout.startswith(f"{compare.NOT_INTERLEAVED}; k\\nforged line | [4x8]: 2.000x")
    assert "k\\\\nforged line \\| \\[4x8\\]" in (tmp_path / "c.md").read_text()


def test_new_and_gone_kernels(tmp_path):
    cur = scaled(TREE, tmp_path / "cur.hatchet", 1.0, "softmax_kernel", rename="my_kernel")
    d = json.loads(cli(cur, "--diff", TREE).stdout)["proton_diff"]
    verdicts = {r["name"]: (r["verdict"], r["n_base"], r["n"]) for r in d["kernels"]}
    assert verdicts["my_kernel"] == ("new", 0, 1) and verdicts["softmax_kernel"] == ("gone", 1, 0)


def test_a_kernel_whose_shape_changed_is_still_itself(tmp_path):
    name = "softmax_normalize_kernel [256x131072 bfloat16]"
    new = "softmax_normalize_kernel [512x65536 bfloat16]"
    cur = scaled(HOOK, tmp_path / "cur.hatchet", 1.0, name, rename=new)
    d = json.loads(cli(cur, "--diff", HOOK).stdout)["proton_diff"]
    names = [r["name"] for r in d["kernels"]]
    assert "softmax_normalize_kernel [256x131072 bfloat16 -> 512x65536 bfloat16]" in names
    assert all(r["verdict"] not in ("new", "gone") for r in d["kernels"])
    # A side whose launch_metadata named no shape (HOOK unset) says so.
    cur = scaled(HOOK, tmp_path / "bare.hatchet", 1.0, name, rename="softmax_normalize_kernel")
    d = json.loads(cli(cur, "--diff", HOOK).stdout)["proton_diff"]
    names = [r["name"] for r in d["kernels"]]
    assert "softmax_normalize_kernel [256x131072 bfloat16 -> no shape]" in names


def test_two_shapes_in_one_capture_stay_two_rows():
    rows_ = [
        {
            "name": "k [4x8 float32]",
            "readable_name": "k [4x8 float32]",
            "launches": 1,
            "total_ms": 1.0,
        },
        {
            "name": "k [8x8 float32]",
            "readable_name": "k [8x8 float32]",
            "launches": 1,
            "total_ms": 2.0,
        },
    ]
    side = [{"proton_kernels": rows_}]
    d = diff(side, side, "b", compare.Gate(), True)
    assert sorted(r["name"] for r in d["kernels"]) == ["k [4x8 float32]", "k [8x8 float32]"]


def test_an_unread_capture_wins_over_a_regression(tmp_path):
    cur = tmp_path / "cur"
    scaled(TREE, cur / "proton.hatchet", 1.5, "softmax_kernel")
    (cur / "broken.hatchet").write_text("[{")
    p = cli(cur, "--diff", TREE, "--fail-above", "10")
    assert p.returncode == 1 and "broken.hatchet" in p.stderr


def test_make_compare_runs_the_diff_of_the_latest_two_runs():
    p = run("make", "-n", "--no-print-directory", "compare", "FAIL_ABOVE=5", "MIN_MS=0.05")
    assert p.returncode == 0
    runs = "'profiling_results/profile/latest' 'profiling_results/profile/previous'"
    assert f"--compare {runs} --fail-above '5' --min-ms '0.05'" in p.stdout
    p = run("make", "-n", "--no-print-directory", "profile", "TRIALS=3", "HOOK=triton")
    assert "--hook 'triton' --trials '3'" in p.stdout


# Autotuning apart.


def test_autotuning_launches_are_a_call_site_of_their_own(tmp_path):
    # Triton's autotuner, as under Proton's python context: the tuning launches go through
    # Autotuner._bench and triton.testing.do_bench, the chosen config's through run alone.
    site = "/workspace/mine.py:12@main"
    tuner = "/opt/venv/lib/python3.12/site-packages/triton/runtime/autotuner.py"
    testing = "/opt/venv/lib/python3.12/site-packages/triton/testing.py"
    jit = "/opt/venv/lib/python3.12/site-packages/triton/runtime/jit.py:744@run"
    kernel = "axpy_kernel [BLOCK=1024]"
    tree = [
        frame(
            "ROOT",
            frame(
                "/workspace/mine.py:30@<module>",
                frame(
                    site,
                    frame(
                        f"{tuner}:255@run",
                        frame(
                            f"{tuner}:180@_bench",
                            frame(
                                f"{testing}:150@do_bench",
                                frame(
                                    f"{tuner}:165@kernel_call",
                                    frame(jit, frame(kernel, count=100, **{"time (ns)": 400_000})),
                                ),
                            ),
                        ),
                    ),
                    frame(
                        f"{tuner}:260@run",
                        frame(jit, frame(kernel, count=10, **{"time (ns)": 30_000})),
                    ),
                ),
            ),
        ),
        {},
    ]
    path = tmp_path / "tuned.hatchet"
    path.write_text(json.dumps(tree))
    s = summary(path)
    sites = {c["callsite"]: c["kernels"][0]["launches"] for c in s["proton_callsites"]}
    assert sites == {
        "mine.py:30 <module> > mine.py:12 main": 10,
        "mine.py:30 <module> > mine.py:12 main [autotuning]": 100,
    }
    (tuning,) = [c for c in s["proton_callsites"] if c.get("autotuning")]
    assert tuning["frames"] == [["mine.py", 30, "<module>", 1], ["mine.py", 12, "main", 1]]
    assert s["proton_kernel_count"] == 110  # aorta's keys: every leaf


def tuned(dst, factor, tuning=False):
    """A copy of the real autotuned capture, axpy_kernel's launches outside the tuner (or,
    with tuning, its tuning launches) x factor."""
    tree = json.loads(gzip.decompress((FIXTURES / "h200-autotuned.hatchet.gz").read_bytes()))

    def walk(node, under):
        under = under or node["frame"]["name"].endswith("@_bench")
        if node["frame"]["name"].startswith("axpy_kernel") and under == tuning:
            node["metrics"]["time (ns)"] *= factor
        for child in node.get("children", []):
            walk(child, under)

    walk(tree[0], False)
    dst.write_text(json.dumps(tree))
    return dst


def test_an_autotuned_kernel_is_judged_outside_the_tuner(tmp_path):
    base = FIXTURES / "h200-autotuned.hatchet.gz"
    p = cli(tuned(tmp_path / "slow.hatchet", 2.0), "--diff", base, "--fail-above", "10")
    d = json.loads(p.stdout)["proton_diff"]
    (k,) = [k for k in d["kernels"] if k["name"] == "axpy_kernel"]
    assert p.returncode == 3 and k["base_ms"] == pytest.approx(0.2101, abs=1e-4)
    assert "; axpy_kernel: 2.000x slower" in d["first_line"] and "axpy_kernel" in d["regressions"]
    p = cli(
        tuned(tmp_path / "tuning.hatchet", 2.0, tuning=True), "--diff", base, "--fail-above", "10"
    )
    d = json.loads(p.stdout)["proton_diff"]
    (k,) = [k for k in d["kernels"] if k["name"] == "axpy_kernel"]
    (tuning,) = [s for s in d["callsites"] if s.get("tuning")]
    assert p.returncode == 0 and k["verdict"] == "same" and d["total"]["verdict"] == "same"
    assert tuning["verdict"] == "slower" and not tuning["regression"]


# make ab of the example on an H100, 5 trials a side in rounds AB, BA, ...: with no edit,
# and with softmax_kernel given 8192-element tiles of 1 KiB a thread (paths made neutral).
AB = FIXTURES / "h100-ab-aa", FIXTURES / "h100-ab-edit"


def test_an_a_a_run_on_the_h100_passes_a_1_percent_gate_with_no_row_slower_or_faster():
    run = AB[0]
    p = cli(run / "now", "--diff", run / "base", "--fail-above", "1")
    d = json.loads(p.stdout)["proton_diff"]
    assert p.returncode == 0 and d["interleaved"] and d["regressions"] == []
    verdicts = {r["verdict"] for r in [d["total"], *d["kernels"], *d["callsites"]]}
    assert not verdicts & {"slower", "faster"}


def test_a_slower_kernel_on_the_h100_is_slower_and_fails_a_5_percent_gate():
    run = AB[1]
    p = cli(run / "now", "--diff", run / "base", "--fail-above", "5")
    d = json.loads(p.stdout)["proton_diff"]
    (k,) = [r for r in d["kernels"] if r["name"] == "softmax_kernel"]
    assert p.returncode == 3 and k["verdict"] == "slower" and k["low"] > 2
    assert d["first_line"].startswith("softmax_kernel: 2.165x slower")
    assert "regression: softmax_kernel: 2.165x slower" in p.stderr


def test_swapped_sides_of_one_ab_run_are_refused_naming_the_right_order(tmp_path):
    run = AB[1].relative_to(ROOT)  # its order file: base and now, trial by trial; a path
    # short enough that the line names it whole, wherever the checkout is
    for given, base in (("base", "now"), ("now", "now")):
        p = cli(run / given, "--diff", run / base, "--markdown", tmp_path / "c.md")
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1
        assert p.stderr.endswith(f"out of order: compare {run}/now --diff {run}/base\n")
    assert not (tmp_path / "c.md").exists()


def test_a_base_that_holds_the_run_compared_is_refused(tmp_path):
    run = FIXTURES / "h200-trials" / "slower"
    for base in (run, run / "trial1"):  # itself, or a trial of it
        p = cli(run, "--diff", base, "--markdown", tmp_path / "c.md")
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
        assert "the run compared: name an earlier run" in p.stderr
    assert not (tmp_path / "c.md").exists()
    one = tmp_path / "one"  # a run, and the summary.json saved in it
    one.mkdir()
    capture = shutil.copy(FIXTURES / "h200-softmax-python.hatchet", one)
    assert cli(one, "-o", one / "summary.json").returncode == 0
    for now, base in ((one, one / "summary.json"), (one / "summary.json", one)):
        p = cli(now, "--diff", base)
        assert p.returncode == 2 and "the run compared: name an earlier run" in p.stderr
    other = shutil.copy(capture, tmp_path / "other.hatchet")
    assert cli(other, "--diff", one / "summary.json").returncode == 0


def test_the_first_line_names_the_band_the_rows_were_judged_at():
    run = AB[0]
    p = cli(run / "now", "--diff", run / "base", "--fail-above", "1")
    assert json.loads(p.stdout)["proton_diff"]["first_line"].startswith(
        "no change beyond the noise, 1% and 0.005 ms (11 rows judged)"
    )


def test_first_line_rule_12_runs_of_other_rank_counts_get_none(tmp_path):
    # Summed, two ranks against one read as 2x slower: refused, never judged.
    two = FIXTURES / "h200-two-ranks"
    rank0 = shutil.copy(two / "proton.rank0.hatchet", tmp_path)
    p = cli(two, "--diff", rank0, "--fail-above", "5")
    (error,) = [line for line in p.stderr.splitlines() if "error:" in line]
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stdout == ""
    assert "ranks differ: 1 in the base, 2 now" in error
    again = shutil.copytree(two, tmp_path / "again")
    assert cli(two, "--diff", again, "--fail-above", "5").returncode == 0


def test_first_line_rule_8_names_the_new_or_gone_kernel_that_moves_the_most(tmp_path):
    # A call site 5% faster, and a new kernel at a new call site that adds more.
    loop = ["/workspace/mine.py:20@main"]
    base = capture(tmp_path / "base.hatchet", (MAIN + loop, "loop", 1.0))
    extra = MAIN + ["/workspace/mine.py:40@more"]
    now = capture(tmp_path / "now.hatchet", (MAIN + loop, "loop", 0.95), (extra, "extra", 0.2))
    d = json.loads(cli(now, "--diff", base).stdout)["proton_diff"]
    assert d["total"]["verdict"] == "slower"
    assert "; extra: new (0.000 -> 0.200 ms)" in d["first_line"]
    d = json.loads(cli(now, "--diff", base, "--min-ms", "0.3").stdout)["proton_diff"]
    assert "extra" not in d["first_line"]  # less than --min-ms: not in the story


def test_matching_call_sites_grows_as_n_log_n():
    # Sites of one file and function, each side's lines shifted and kernels varied: 4x the
    # sites costs about 5x the time by n log n (quadratic matching would cost 16x).
    def side(n, shift):
        sites = [
            {
                "callsite": "",
                "frames": [["mine.py", 3 * i + shift, "main", 1]],
                "source": None,
                "kernels": [{"name": f"k{i % 7}", "launches": 1, "ms": 1.0}],
                "ms": 1.0,
            }
            for i in range(n)
        ]
        return records([{"proton_kernels": [], "proton_callsites": sites}])

    def seconds(n):
        sides = [compare.site_times(side(n, shift)) for shift in (0, 1)]
        gc.collect()
        gc.disable()  # a collection's pause, which falls where it will, is no matching's cost
        try:
            start = time.perf_counter()
            pairs, tied = compare.matched_sites(*sides)
            taken = time.perf_counter() - start
        finally:
            gc.enable()
        assert len(pairs) == n and not tied
        return taken

    # Interleaved rounds, the fastest of each kept: another process's load falls on both.
    times = {500: [], 2000: []}
    for _ in range(5):
        for n, taken in times.items():
            taken.append(seconds(n))
    small, large = min(times[500]), min(times[2000])
    assert large < 1.0 and large / small < 10, (small, large)


def test_t_quantiles_match_mpmath_to_1e_12_and_are_fast():
    from mpmath import betainc, findroot, mp, mpf

    rng = random.Random(3)
    cases = [(rng.randint(1, 10_000), rng.choice([1, 2, 3])) for _ in range(60)]
    cases = [(m, rng.uniform(1, 10) if k == 1 else rng.randint(1, 10_000)) for m, k in cases]
    cases += [(m, v) for m in (1, 11, 10_000) for v in (1, 1.5, 2, 5.5, 6, 30, 10_000)]
    mp.dps = 30

    def exact(p, v, near):  # the t whose upper tail is 1 - p, by mpmath
        v = mpf(v)
        tail = lambda x: betainc(v / 2, 0.5, 0, v / (v + x * x), regularized=True) / 2  # noqa: E731
        return findroot(lambda x: tail(x) - (1 - mpf(p)), mpf(near))

    for m, v in cases:
        t = stats.t_quantile(1 - 0.025 / m, v)
        assert abs(t - exact(1 - 0.025 / m, v, t)) <= 1e-12 * t, (m, v)
    start = time.perf_counter()
    for i in range(1000):
        stats.t_quantile(1 - 0.025 / (1 + i * 10), 1 + i * 9.99)
    assert time.perf_counter() - start < 0.1 * 3  # 0.1 s here; a loaded machine slower


# docs/summary.md's "The first line and the headline": a test for each rule. One run a
# side of hand-made captures: a loop at mine.py:20 (1 ms) and a check at mine.py:10; or
# trials a side of one kernel k, spread about 1.6%, compared as make ab's rounds are.
LOOP, CHECK = MAIN + ["/workspace/mine.py:20@main"], MAIN + ["/workspace/mine.py:10@main"]
SPREAD = [1.0, 1.02, 0.98, 1.01, 0.99]


def first_line(tmp_path, loop_ms, *args, check_ms=0.1, extra=None):
    """The first line of now against base, the caveat of runs not interleaved its start."""
    base = capture(tmp_path / "base.hatchet", (LOOP, "loop", 1.0), (CHECK, "check", 0.1))
    launches = [(LOOP, "loop", loop_ms), (CHECK, "check", check_ms)] + ([extra] if extra else [])
    now = capture(tmp_path / "now.hatchet", *launches)
    p = cli(now, "--diff", base, *args, "--table")
    summary = json.loads(cli(now, "--diff", base, *args).stdout)
    assert p.stdout.splitlines()[0] == summary["headline"] == summary["proton_diff"]["first_line"]
    assert summary["headline"].startswith(f"{compare.NOT_INTERLEAVED}; ")
    return summary["headline"].removeprefix(f"{compare.NOT_INTERLEAVED}; ")


def trials_of_k(ms, factor=1.0, spread=SPREAD):
    k = {"name": "k", "readable_name": "k", "launches": 1}
    return [{"proton_kernels": [{**k, "total_ms": ms * factor * x}]} for x in spread]


def judged(ms, factor, pct, spread=SPREAD):
    """The comparison of k's trials, now's x factor, interleaved, at --fail-above pct."""
    sides = [records(trials_of_k(ms, f, spread)) for f in (1.0, factor)]
    return compare.diff(*sides, "base", compare.Gate(fail_above=pct), True)


def test_first_line_rule_1_without_a_comparison_the_headline_is_the_largest_kernel():
    s = json.loads(cli(HOOK).stdout)
    k = s["proton_kernels"][0]
    assert cli(HOOK, "--table").stdout.splitlines()[0] == s["headline"]
    assert s["headline"].startswith(f"{k['readable_name']}: {k['share']:.1%} of ")
    assert f"{k['launches']} launches of {k['mean_us']:.2f} us" in s["headline"]
    assert f"{k['gbyte_per_s']:.0f} GB/s ({k['pct_of_peak_bw']:.0%} of peak)" in s["headline"]
    intra = cli(FIXTURES / "h200-intra.hatchet", "--table").stdout.splitlines()[0]
    assert intra == "no timed kernel; 4 scopes timed inside kernels"


def test_first_line_rule_2_runs_not_interleaved_say_so_first_and_allow_for_drift(tmp_path):
    assert first_line(tmp_path, 1.0)  # its caveat first
    assert not judged(1.0, 1.0, None).first_line.startswith("not interleaved")
    # 3% slower on trials of 0.1% spread: slower interleaved, within the drift otherwise.
    base, now = [1.0, 1.001, 0.999], [1.03, 1.031, 1.029]
    assert compare.judge(base, now, 1, compare.Gate()).verdict == "slower"
    assert compare.judge(base, now, 1, compare.Gate(), compare.DRIFT).verdict == "same"


def test_first_line_rule_3_the_largest_regression_leads_one_change_counted_once(tmp_path):
    line = first_line(tmp_path, 1.5, "--fail-above", "10")
    assert line.startswith("loop: 1.500x slower (1.000 -> 1.500 ms): past --fail-above 10")
    assert "(1 regression over 3 rows)" in line  # the kernel, its call site and the GPU time
    line = first_line(tmp_path, 1.5, "--fail-above", "10", check_ms=0.2)
    assert "(2 regressions over 5 rows)" in line


def test_first_line_rule_4_else_the_judged_change_that_moves_the_most_ms(tmp_path):
    line = first_line(tmp_path, 0.5, "--fail-above", "10", check_ms=0.05)
    assert line.startswith("loop: 2.000x faster (1.000 -> 0.500 ms): none failed --fail-above 10")


def test_first_line_rule_5_the_gpu_time_leads_only_where_no_row_changed(tmp_path):
    extra = (MAIN + ["/workspace/mine.py:40@more"], "extra", 0.5)
    line = first_line(tmp_path, 1.0, "--fail-above", "10", extra=extra)
    assert line.startswith("GPU time: 1.455x slower (1.100 -> 1.600 ms): past --fail-above 10")


def test_first_line_rule_6_no_change_or_inconclusive_while_a_row_could_fail(tmp_path):
    line = first_line(tmp_path, 1.01)
    assert line.startswith("no change beyond the noise, 2% and 0.005 ms (5 rows judged)")
    line = judged(1.0, 1.025, 1).first_line  # 2.5% slower, the interval reaching 1.01
    assert line.startswith("inconclusive: no row settled beyond the noise, 1% and 0.005 ms")
    line = judged(1.0, 1.025, 50).first_line  # which no gate of 50% could fail
    assert line.startswith("no change beyond the noise, 2% and 0.005 ms (2 rows judged)")


def test_first_line_rule_7_names_min_ms_where_it_keeps_a_row_out():
    # 0.020 -> 0.024 ms, surely past 5% but grown 0.004 ms, under the 0.005 ms floor.
    d = judged(0.02, 1.2, 5, [1, 1.05, 0.95, 1.025, 0.975])
    assert d.regressions == [] and d.kernels[0].low > 1.05
    assert d.first_line.startswith("k: 1.200x slower (0.020 -> 0.024 ms, interval 1.120-1.286)")
    assert d.first_line.endswith("; 2 rows past --fail-above 5 grew under --min-ms 0.005")


def test_first_line_rule_9_says_what_more_trials_would_do_for_inconclusive_rows():
    line = judged(1.0, 1.025, 1).first_line
    assert line.endswith("; 2 rows inconclusive: about 18 TRIALS a side would settle them")
    line = judged(1.0, 1.011, 1).first_line  # its estimate on the band's edge
    assert line.endswith("; 2 rows inconclusive: too near an edge for 50 TRIALS a side to settle")
    line = judged(1.0, 1.025, 50).first_line
    assert line.endswith("inconclusive: none the gate could fail (--fail-above 50, --min-ms 0.005)")
    sides = [records(trials_of_k(1.0, 1, s)) for s in ([1.0, 1.01, 0.99], [1.0, 0.0, 1.0])]
    line = compare.diff(*sides, "b", compare.Gate(fail_above=5), True).first_line
    assert line.endswith("; 2 rows inconclusive: a trial at 0 ms, which no trials settle")


def test_first_line_rule_10_ends_with_every_caveat(tmp_path):
    line = first_line(tmp_path, 1.0, "--any-device")
    assert line.endswith(f"; {compare.ONE_RUN}") and "noise unmeasured" in compare.ONE_RUN
    p = cli(AMD, "--diff", TREE, "--any-device")
    assert json.loads(p.stdout)["headline"].endswith(
        "; devices differ: HIP gfx950 (256 SMs, 8192-bit memory bus) now, CUDA 90 (132 SMs, "
        "6016-bit memory bus) in the base (--any-device)"
    )


def test_first_line_rule_11_the_gate_names_the_exit_status_it_leads_to(tmp_path):
    cur = tmp_path / "cur"
    scaled(TREE, cur / "proton.hatchet", 1.5, "softmax_kernel")
    p = cli(cur, "--diff", TREE, "--fail-above", "10", "--markdown", tmp_path / "c.md")
    gate = (tmp_path / "c.md").read_text().splitlines()[-1]
    assert p.returncode == 3 and gate.endswith("past --fail-above 10, exit 3.")
    (cur / "broken.hatchet").write_text("[{")
    p = cli(cur, "--diff", TREE, "--fail-above", "10", "--markdown", tmp_path / "c.md")
    gate = (tmp_path / "c.md").read_text().splitlines()[-1]
    assert p.returncode == 1 and "exit 3" not in gate and "but exit 1: " in gate
    assert gate.endswith("broken.hatchet not read.")

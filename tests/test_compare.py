"""Is it good, and did it get better: percent of peak, spreads, trials, the compare verdict
and its gate, and autotuning apart. Every test runs on a committed capture, or on a copy
of one changed by the test (its kernel times scaled, a kernel renamed, trials made from
one capture with a known spread), named as such."""

import json
import statistics
import sys

import pytest

import parse_hatchet as ph
from conftest import ROOT, run
from summary import compare

FIXTURES = ROOT / "tests" / "fixtures"
TREE = FIXTURES / "h200-softmax-python.hatchet"  # make profile of the example, 20 + 1 launches
HOOK = FIXTURES / "h200-softmax-python-hook-bf16-256x131072.hatchet"  # -k triton: bytes
AMD = FIXTURES / "amd-gfx950-vecadd-shadow.hatchet"


def summary(*paths):
    return ph.summaries([str(p) for p in paths])[0][0].summary


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


def ceiling(folder, l2_bytes=50 * 2**20, arch="90", sm_count=132):
    """A recorded `make ceiling` of an H200: the copy's GB/s at each size, and its L2."""
    sizes = [
        {"bytes": 2**n, "copy_gbps": 1000.0 * n, "read_gbps": 1100.0 * n} for n in (20, 27, 28)
    ]
    record = {"device": "NVIDIA H200", "arch": arch, "sm_count": sm_count, "l2_bytes": l2_bytes}
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
    other = strict_json(cli(HOOK, "--ceiling", ceiling(tmp_path, arch="100")).stdout)
    assert all("pct_of_ceiling_bw" not in k for k in other["proton_kernels"])  # another model


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


def test_a_single_trial_has_no_cv():
    assert compare.spread([0.5])["cv"] is None


# Compare: the verdict and the gate.


def test_the_verdict_line_comes_first(tmp_path):
    cur = scaled(TREE, tmp_path / "cur.hatchet", 1 / 1.14, "softmax_kernel")
    p = cli(cur, "--diff", TREE, "--table")
    assert p.returncode == 0
    assert (
        p.stdout.splitlines()[0]
        == "softmax_kernel: 1.14x faster (0.128 -> 0.113 ms, noise unknown)"
    )


@pytest.mark.parametrize(
    "factor, fail_above, status", [(1.2, 10, 3), (1.05, 10, 0), (1.2, 25, 0), (0.5, 10, 0)]
)
def test_the_gate_fails_a_regression_past_its_percent(tmp_path, factor, fail_above, status):
    cur = scaled(TREE, tmp_path / "cur.hatchet", factor, "softmax_kernel")
    p = cli(cur, "--diff", TREE, "--fail-above", fail_above, "--table")
    assert p.returncode == status, p.stderr
    d = json.loads(cli(cur, "--diff", TREE, "--fail-above", fail_above).stdout)["proton_diff"]
    (row,) = [r for r in d["kernels"] if r["name"] == "softmax_kernel"]
    assert row["verdict"] == ("slower" if factor > 1.02 else "faster")
    assert bool(d["regressions"]) == (status == 3)


def test_without_a_gate_a_regression_exits_0(tmp_path):
    cur = scaled(TREE, tmp_path / "cur.hatchet", 2.0, "softmax_kernel")
    assert cli(cur, "--diff", TREE).returncode == 0


def test_the_noise_of_trials_on_both_sides_widens_the_gate(tmp_path):
    # Each side's trials spread +-15% (cv 0.15); 1.2x slower is within the combined noise.
    base = trials(tmp_path / "base", 0.85, 1.0, 1.15)
    cur = trials(tmp_path / "cur", 0.85 * 1.2, 1.2, 1.15 * 1.2)
    p = cli(cur, "--diff", base, "--fail-above", "10")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)["proton_diff"]
    (row,) = [r for r in d["kernels"] if r["name"] == "softmax_kernel"]
    assert row["noise"] == pytest.approx((0.15**2 + 0.15**2) ** 0.5, rel=1e-3)
    assert row["verdict"] == "same" and row["ratio"] == pytest.approx(1.2)


def test_noise_is_unknown_unless_both_sides_have_trials(tmp_path):
    base = trials(tmp_path / "base", 0.9, 1.0, 1.1)
    cur = scaled(TREE, tmp_path / "cur.hatchet", 1.2, "softmax_kernel")
    d = json.loads(cli(cur, "--diff", base).stdout)["proton_diff"]
    assert all(r["noise"] is None for r in d["kernels"] + d["callsites"])
    assert compare.verdict([1.0, 1.1], [1.0], None, 0.01)["noise"] is None


def test_where_same_ends():
    # Unknown noise: within 2%. Known noise: within it.
    assert compare.verdict([1.0], [1.019], None, 0.01)["verdict"] == "same"
    assert compare.verdict([1.0], [1.021], None, 0.01)["verdict"] == "slower"
    noisy = compare.verdict([0.8, 1.0, 1.2], [0.95, 1.15, 1.35], None, 0.01)  # 1.15x
    assert noisy["noise"] > 0.15 and noisy["verdict"] == "same"


def test_min_ms_reads_the_larger_side(tmp_path):
    # 2x slower, both sides under --min-ms: ignored; a kernel that grows past it: judged.
    assert not compare.verdict([0.004], [0.008], 10, 0.01)["regression"]
    assert compare.verdict([0.006], [0.012], 10, 0.01)["regression"]
    small = "at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel"
    kernel = next(k["name"] for k in summary(TREE)["proton_kernels"] if small in k["readable_name"])
    cur = scaled(TREE, tmp_path / "cur.hatchet", 2.0, kernel)  # 0.0127 -> 0.0254 ms
    assert cli(cur, "--diff", TREE, "--fail-above", "10", "--min-ms", "0.05").returncode == 0
    assert cli(cur, "--diff", TREE, "--fail-above", "10", "--min-ms", "0.01").returncode == 3


def test_an_unread_capture_wins_over_a_regression(tmp_path):
    cur = tmp_path / "cur"
    scaled(TREE, cur / "proton.hatchet", 1.5, "softmax_kernel")
    (cur / "broken.hatchet").write_text("[{")
    p = cli(cur, "--diff", TREE, "--fail-above", "10")
    assert p.returncode == 1 and "broken.hatchet" in p.stderr


def test_new_and_gone_kernels(tmp_path):
    cur = scaled(TREE, tmp_path / "cur.hatchet", 1.0, "softmax_kernel", rename="my_kernel")
    d = json.loads(cli(cur, "--diff", TREE).stdout)["proton_diff"]
    verdicts = {r["name"]: r["verdict"] for r in d["kernels"]}
    assert verdicts["my_kernel"] == "new" and verdicts["softmax_kernel"] == "gone"


def test_a_kernel_whose_shape_changed_is_still_itself(tmp_path):
    name = "softmax_normalize_kernel [256x131072 bfloat16]"
    cur = scaled(
        HOOK,
        tmp_path / "cur.hatchet",
        1.0,
        name,
        rename="softmax_normalize_kernel [512x65536 bfloat16]",
    )
    d = json.loads(cli(cur, "--diff", HOOK).stdout)["proton_diff"]
    names = [r["name"] for r in d["kernels"]]
    assert "softmax_normalize_kernel [256x131072 bfloat16 -> 512x65536 bfloat16]" in names
    assert all(r["verdict"] not in ("new", "gone") for r in d["kernels"])


def test_two_shapes_in_one_capture_stay_two_rows():
    rows = [
        {"name": "k [4x8 float32]", "readable_name": "k [4x8 float32]", "total_ms": 1.0},
        {"name": "k [8x8 float32]", "readable_name": "k [8x8 float32]", "total_ms": 2.0},
    ]
    d = compare.diff([{"proton_kernels": rows}], [{"proton_kernels": rows}], "b", None, 0.0)
    assert [r["name"] for r in d["kernels"]] == ["k [4x8 float32]", "k [8x8 float32]"]


def test_make_compare_runs_the_diff_of_the_latest_two_runs():
    p = run("make", "-n", "--no-print-directory", "compare", "FAIL_ABOVE=5", "MIN_MS=0.05")
    assert p.returncode == 0
    assert (
        "parse_hatchet.py' 'profiling_results/profile/latest' --diff 'profiling_results/profile/previous'"
        in p.stdout
    )
    assert "--fail-above '5'" in p.stdout and "--min-ms '0.05'" in p.stdout
    p = run("make", "-n", "--no-print-directory", "profile", "TRIALS=3", "HOOK=triton")
    assert "--hook 'triton' --trials '3'" in p.stdout


# Autotuning apart.


def frame(name, *children, **metrics):
    return {"frame": {"name": name}, "metrics": metrics, "children": list(children)}


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
    assert s["proton_kernel_count"] == 110  # aorta's keys: every leaf


def test_real_trials_judge_a_slower_kernel_past_their_noise():
    # Two runs of make profile TRIALS=3 on the H200, around an edit that gives each
    # program 8 rows in one warp: slower beyond the trials' noise, past a 5% gate.
    runs = FIXTURES / "h200-trials"
    p = cli(runs / "slower", "--diff", runs / "base", "--fail-above", "5")
    d = json.loads(p.stdout)["proton_diff"]
    verdicts = {k["name"]: k["verdict"] for k in d["kernels"]}
    assert p.returncode == 3 and verdicts["softmax_kernel"] == "slower"
    assert d["regressions"][0] == "softmax_kernel" and len(d["regressions"]) == 3  # + 2 sites

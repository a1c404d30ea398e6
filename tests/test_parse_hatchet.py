"""parse_hatchet.py: aorta's five keys on real and synthetic trees, the per-kernel and
per-call-site views, and the command line's output files and exit codes."""

import json
import os
import pickle
import signal
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import parse_hatchet as ph
from conftest import ROOT, run
from summary import Refused, files, text
from summary.records import Summary
from summary.run import MAX_FRAMES, demangle, frame_of, short_names

FIXTURES = Path(__file__).parent / "fixtures"


def leaf(name, ns=None, count=1, **metrics):
    m = {"count": count, **({"time (ns)": ns} if ns is not None else {}), **metrics}
    if count is None:
        del m["count"]
    return {"frame": {"name": name, "type": "function"}, "metrics": m, "children": []}


def node(name, *children):
    return {"frame": {"name": name, "type": "function"}, "metrics": {}, "children": list(children)}


def tree(*children, device=None):
    return [node("ROOT", *children), device or {}]


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def summary(path):
    done, problem, _ = ph.summaries([str(path)])
    return json.loads(ph.to_json(done[0].summary)), problem


def cli(*args):
    return run(sys.executable, ROOT / "parse_hatchet.py", *args)


# aorta's own expectations for the real AMD capture.


def test_real_amd_capture():
    s, problem = summary(FIXTURES / "amd-gfx950-vecadd-shadow.hatchet")
    assert problem is None
    assert s["proton_kernel_count"] == 12
    assert s["proton_gpu_time_ms"] == pytest.approx(0.054402)
    assert s["proton_top_kernel_ms"] == pytest.approx(0.01752)
    assert s["proton_top_kernels"][0] == "add_kernel"
    assert s["proton_context"] == "shadow" and s["proton_callsites"] == []
    (device,) = s["proton_device"]
    assert device == {
        "type": "HIP",
        "id": "0",
        "arch": "gfx950",
        "sm_count": 256,
        "clock_mhz": 2200.0,
        "memory_clock_mhz": 1900.0,
        "memory_bus_bits": 8192,
        "peak_gbyte_per_s": 8000.0,  # Proton's specs: gfx950, 8.0 TB/s
    }
    reduce = next(k for k in s["proton_kernels"] if "reduce_kernel" in k["name"])
    assert reduce["readable_name"] == "at::native::reduce_kernel<512, 1, at::native::ReduceOp<…>>"


# The rules, one synthetic tree each.


@pytest.mark.parametrize(
    "metrics, ms",
    [
        ({"time (ns)": 2_000_000}, 2.0),
        ({"time (us)": 2000}, 2.0),
        ({"time (ms)": 2}, 2.0),
        ({"time (s)": 0.002}, 2.0),
        ({"Time (NS)": 2_000_000}, 2.0),
        ({"cpu_time (ns)": 5, "time (ns) (inc)": 7, "time (ms)": 2}, 2.0),
        ({"time (ns)": -1, "time (us)": "nan", "time (ms)": 2}, 2.0),  # unusable, then next
        ({"time (ms)": "2"}, 2.0),  # aorta reads numeric strings
        ({"time (ns)": 10**400, "time (ms)": 2}, 2.0),  # past a float's range: the next
    ],
)
def test_time_metric(tmp_path, metrics, ms):
    k = {"frame": {"name": "k"}, "metrics": {"count": 1, **metrics}, "children": []}
    s, _ = summary(write(tmp_path / "t.hatchet", tree(k)))
    assert s["proton_gpu_time_ms"] == pytest.approx(ms)


def test_a_leaf_without_usable_time_is_no_kernel(tmp_path):
    t = tree(leaf("k", 1000), leaf("untimed"), leaf("neg", -5), leaf("text", "soon"))
    s, _ = summary(write(tmp_path / "t.hatchet", t))
    assert [k["name"] for k in s["proton_kernels"]] == ["k"]


def test_sums_by_name_across_call_paths_and_files(tmp_path):
    write(tmp_path / "a" / "rank0.hatchet", tree(node("f", leaf("k", 1000, 2)), leaf("k", 500, 1)))
    write(tmp_path / "b.hatchet", tree(leaf("k", 250, 4), leaf("j", 100)))
    s, _ = summary(tmp_path)
    assert s["proton_kernel_count"] == 8
    assert s["proton_gpu_time_ms"] == pytest.approx(0.00185)
    assert s["proton_top_kernel_ms"] == pytest.approx(0.00175)
    assert s["proton_top_kernels"] == ["k", "j"]


@pytest.mark.parametrize("count", [None, "many", -1, float("nan")])
def test_unreadable_count_drops_the_count_only(tmp_path, count):
    t = tree(leaf("a", 1000, 3), leaf("b", 500, count))
    s, _ = summary(write(tmp_path / "t.hatchet", t))
    assert "proton_kernel_count" not in s
    assert s["proton_gpu_time_ms"] == pytest.approx(0.0015)
    assert next(k for k in s["proton_kernels"] if k["name"] == "b")["launches"] is None


def test_ties_keep_first_seen_order_and_top_five(tmp_path):
    names = ["c", "f", "a", "e", "b", "d", "g"]  # in no order of their names
    t = tree(*(leaf(n, 100 if n != "g" else 900) for n in names))
    s, _ = summary(write(tmp_path / "t.hatchet", t))
    assert s["proton_top_kernels"] == ["g", "c", "f", "a", "e"]
    assert len(s["proton_kernels"]) == 7


def test_root_is_never_a_kernel(tmp_path):
    t = [{"frame": {"name": "ROOT"}, "metrics": {"count": 0, "time (ns)": 0}, "children": []}]
    s, problem = summary(write(tmp_path / "t.hatchet", t))
    assert s == {"proton_artifact_dir": str(tmp_path)}
    assert "ROOT only" in problem


def test_inner_nodes_are_walked_not_counted(tmp_path):
    inner = node("f", leaf("k", 100))
    inner["metrics"] = {"count": 9, "time (ns)": 5000}
    frameless = {"children": [leaf("j", 200, 2)]}  # walked all the same, as aorta does
    s, _ = summary(write(tmp_path / "t.hatchet", tree(inner, frameless)))
    assert s["proton_kernel_count"] == 3 and s["proton_gpu_time_ms"] == pytest.approx(0.0003)


def test_counts_past_2_53_are_read_as_aorta_reads_them(tmp_path):
    s, _ = summary(write(tmp_path / "t.hatchet", tree(leaf("k", 100, 2**60 + 1))))
    assert s["proton_kernel_count"] == int(float(2**60 + 1)) == 2**60


def test_bytes_and_flops_give_rates(tmp_path):
    t = tree(leaf("k", 1_000_000, 2, bytes=4_000_000_000, flops32=10**12, flops16=10**12))
    (k,) = summary(write(tmp_path / "t.hatchet", t))[0]["proton_kernels"]
    assert k["gbyte_per_s"] == pytest.approx(4000)
    # As Proton defines them: one FLOP/s figure a width, never summed across widths.
    assert k["flop32_per_s"] == k["flop16_per_s"] == pytest.approx(1e15)
    assert "flop_per_s" not in k
    assert k["mean_us"] == pytest.approx(500) and k["share"] == 1.0


def test_callsites_collapse_library_frames(tmp_path):
    lib = "/usr/lib/python3.12/site-packages/triton/runtime/jit.py:744@run"
    t = tree(
        node(
            "<frozen runpy>:198@_run_module_as_main",
            node(
                "/workspace/app/train.py:40@<module>",
                node("/workspace/app/train.py:30@main", node(lib, leaf("kern", 3000, 3))),
                node("/workspace/app/train.py:31@main", leaf("torch_k", 1000)),
                node("/workspace/app/train.py:30@main", leaf("kern", 1000, 1)),
            ),
        )
    )
    s, _ = summary(write(tmp_path / "t.hatchet", t))
    assert s["proton_context"] == "python"
    sites = {site["callsite"]: site for site in s["proton_callsites"]}
    assert set(sites) == {
        "train.py:40 <module> > train.py:30 main",
        "train.py:40 <module> > train.py:31 main",
    }
    main30 = sites["train.py:40 <module> > train.py:30 main"]
    assert main30["kernels"] == [
        {"name": "kern", "readable_name": "kern", "launches": 4, "ms": pytest.approx(0.004)}
    ]


@pytest.mark.parametrize(
    "raw, short",
    [
        ("add_kernel", "add_kernel"),
        ("softmax_kernel [4096x1024 float32]", "softmax_kernel [4096x1024 float32]"),
        (
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_",
            "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<…>, std::array<…>>",
        ),
        ("_Znot_really_mangled", "_Znot_really_mangled"),
    ],
)
def test_readable_names(raw, short):
    assert demangle(raw) == short


# The command line.


def test_cli_prints_one_json_object():
    p = cli(FIXTURES / "amd-gfx950-vecadd-shadow.hatchet")
    assert p.returncode == 0 and p.stderr == ""
    s = json.loads(p.stdout)
    assert s["proton_artifact_dir"] == str(FIXTURES)
    assert list(s)[:5] == [
        "proton_artifact_dir",
        "proton_kernel_count",
        "proton_gpu_time_ms",
        "proton_top_kernel_ms",
        "proton_top_kernels",
    ]


def test_cli_output_table_and_folded(tmp_path):
    fixture = FIXTURES / "amd-gfx950-vecadd-shadow.hatchet"
    out, fold = tmp_path / "s.json", tmp_path / "stacks.folded"
    p = cli(fixture, "-o", out, "--table", "--folded", fold, "--top", "2")
    assert p.returncode == 0
    assert json.loads(out.read_text())["proton_kernel_count"] == 12
    head, rows = p.stdout.split("\n\n")[:2]
    assert head == json.loads(out.read_text())["headline"]  # the first line, as the JSON says
    assert head == "add_kernel: 32.2% of 0.0544 ms of GPU time, 6 launches of 2.92 us"
    rows = rows.splitlines()
    assert rows[0].split()[:3] == ["ms", "share", "launches"] and len(rows) == 4
    assert "add_kernel" in rows[1] and "aorta" in rows[3]  # says what launches counts
    assert "add_kernel 17520\n" in fold.read_text()
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


@pytest.mark.parametrize(
    "files, message",
    [
        ({"t.hatchet": ""}, "no readable capture"),
        ({"t.hatchet": "{not json"}, "no readable capture"),
        ({"t.hatchet": json.dumps(tree())}, "ROOT only"),
        ({"proton.chrome_trace": "{}"}, "not a Proton tree or trace"),
        (
            {
                "proton.chrome_trace": json.dumps(
                    {
                        "traceEvents": [
                            {"ph": "B", "ts": 1, "dur": 2, "name": "k"},
                            {"ph": "X", "ts": 1, "dur": -2, "name": "k"},
                            {"ph": "X", "ts": "soon", "dur": 2, "name": "k"},
                        ]
                    }
                )
            },
            "the trace's 3 events include no complete event",
        ),
        (
            {"t.hatchet": json.dumps(tree(leaf("k", -5), leaf("j", float("inf"))))},
            "no timed kernel: 2 leaves have a time that is no finite number",
        ),
        ({}, "no capture (.hatchet, .hatchet_msgpack, .chrome_trace): Triton 3.6 writes none"),
        (
            {"t.hatchet": json.dumps(tree(leaf("k", None, 1, **{"time (cycles)": 5})))},
            "leaves carry no `time (ns|us|ms|s)` metric (found: time (cycles))",
        ),
    ],
)
def test_cli_exit_1_when_no_kernel(tmp_path, files, message):
    for name, content in files.items():
        write(tmp_path / name, content)
    good = tmp_path / "summary.json"
    good.write_text("earlier good result")
    p = cli(tmp_path, "-o", good)
    assert p.returncode == 1
    assert json.loads(p.stdout) == {"proton_artifact_dir": str(tmp_path)}
    assert p.stderr.count("\n") == 1 and message in p.stderr
    assert good.read_text() == "earlier good result"


def test_cli_names_a_bad_file_beside_good_ones_and_exits_1(tmp_path):
    write(tmp_path / "a.hatchet", "[{broken")
    write(tmp_path / "b.hatchet", tree(leaf("k", 1000)))
    out = tmp_path / "s.json"
    p = cli(tmp_path, "-o", out)
    assert p.returncode == 1  # a caller (CI, a sweep) sees that not everything was read
    s = json.loads(out.read_text())  # the summary is written all the same
    assert s["proton_top_kernels"] == ["k"]
    (unread,) = s["proton_unread"]
    assert unread["file"] == str(tmp_path / "a.hatchet") and "not valid JSON" in unread["why"]
    assert "warning: skipped" in p.stderr and "a.hatchet" in p.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["/no/such/path"], "/no/such/path: no such file or directory"),
        ([], "the following arguments are required: PATH"),
        (["x", "--top", "0"], "expected a whole number from 1 to"),
        (["x", "--colour"], "unrecognized arguments: --colour"),
        (["x", "--top", "9" * 5000], "expected a whole number from 1 to 1000000000, got '99999"),
        ([""], "an empty path names nothing"),
    ],
)
def test_cli_usage_errors(capsys, args, message):
    # The parser in this process; the end-to-end runs above cover the command itself.
    try:
        status = ph.main(args)
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err and len(err) < 300


# The H200 captures of this repository's softmax.py (make profile, make trace, -k triton
# at a long-row shape, shadow context), against sums taken straight from the files.


def tree_leaves(node):
    if not node.get("children"):
        yield node
    for child in node.get("children", []):
        yield from tree_leaves(child)


# make profile of softmax.py on the H200: its launch loop, through softmax() and launch().
LOOP = (
    "softmax.py:291 <module> > softmax.py:282 main > softmax.py:202 softmax > softmax.py:172 launch"
)


def test_h200_python_tree_against_its_leaves():
    path = FIXTURES / "h200-softmax-python.hatchet"
    raw = [n for n in tree_leaves(json.loads(path.read_text())[0]) if n["frame"]["name"] != "ROOT"]
    s, problem = summary(path)
    assert problem is None and s["proton_context"] == "python"
    assert s["proton_kernel_count"] == sum(n["metrics"]["count"] for n in raw) == 26
    assert s["proton_gpu_time_ms"] == pytest.approx(
        sum(n["metrics"]["time (ns)"] for n in raw) / 1e6
    )
    ours = [n for n in raw if n["frame"]["name"] == "softmax_kernel"]
    assert sorted(n["metrics"]["count"] for n in ours) == [1, 20]
    assert s["proton_top_kernels"][0] == "softmax_kernel"
    sites = {site["callsite"]: site for site in s["proton_callsites"]}
    # The launch site is the line of softmax() that launches, Triton's frames collapsed.
    loop = sites[LOOP]
    assert loop["kernels"][0]["launches"] == 20 and loop["source"] is None  # no such file here
    check = sites["softmax.py:291 <module> > softmax.py:276 main"]  # err = ... torch.softmax
    assert any("softmax_warp_forward" in k["name"] for k in check["kernels"])


def test_h200_hook_capture_names_shapes_and_rates():
    s, _ = summary(FIXTURES / "h200-softmax-python-hook-bf16-256x131072.hatchet")
    names = {k["name"]: k for k in s["proton_kernels"]}
    partials = names["softmax_partials_kernel [256x131072 bfloat16]"]
    normalize = names["softmax_normalize_kernel [256x131072 bfloat16]"]
    assert partials["launches"] == normalize["launches"] == 21
    # bytes from launch_metadata: one read, and one read plus one write, of 64 MiB.
    assert partials["gbyte_per_s"] == pytest.approx(21 * 2**26 / (partials["total_ms"] * 1e6))
    assert normalize["gbyte_per_s"] == pytest.approx(21 * 2**27 / (normalize["total_ms"] * 1e6))


def test_h200_shadow_capture_has_no_call_sites():
    s, _ = summary(FIXTURES / "h200-softmax-shadow.hatchet")
    assert s["proton_context"] == "shadow" and s["proton_callsites"] == []
    assert s["proton_kernel_count"] == 26 and s["proton_device"][0]["arch"] == "90"


def test_h200_trace_timeline():
    path = FIXTURES / "h200-softmax-python.chrome_trace"
    events = json.loads(path.read_text())["traceEvents"]
    s, problem = summary(path)
    assert problem is None
    # Traces alone: the five keys count kernel events.
    assert s["proton_kernel_count"] == len(events) == 26
    assert s["proton_gpu_time_ms"] == pytest.approx(0.175487)
    loop = s["proton_timeline"][0]
    assert loop["callsite"] == LOOP
    # Taken by hand from the 20 events of that call stack; no other kernel ran between.
    assert loop["launches"] == 20
    assert loop["kernel_ms"] == pytest.approx(0.121023)
    assert loop["span_ms"] == pytest.approx(2.065347)
    assert loop["busy"] == pytest.approx(0.121023 / 2.065347)
    assert loop["median_idle_us"] == pytest.approx(92.576)
    assert [e["launches"] for e in s["proton_timeline"]] == [20, 4, 1, 1]
    assert "proton_gpu_busy" not in s  # start-up included, the whole trace's figure meant nothing


def test_h200_two_ranks():
    # make profile NPROC=2 on one H200: each rank's sums taken by hand from its file.
    folder = FIXTURES / "h200-two-ranks"
    s, problem = summary(folder)
    assert problem is None
    assert s["proton_ranks"] == [
        {
            "rank": 0,
            "gpu_time_ms": pytest.approx(0.176959),
            "kernel_count": 26,
            "files": [str(folder / "proton.rank0.hatchet")],
        },
        {
            "rank": 1,
            "gpu_time_ms": pytest.approx(0.178367),
            "kernel_count": 26,
            "files": [str(folder / "proton.rank1.hatchet")],
        },
    ]
    assert s["proton_kernel_count"] == 52  # aorta's totals: over both files
    assert s["proton_gpu_time_ms"] == pytest.approx(0.176959 + 0.178367)
    assert s["proton_rank_imbalance"] == pytest.approx(0.178367 / ((0.176959 + 0.178367) / 2))
    table = cli(folder, "--table").stdout
    assert "     0     0.1770       26     1.00  proton.rank0.hatchet" in table
    assert "rank imbalance (the busiest rank's GPU time over the mean): 1.00" in table


def test_a_rank_s_launches_are_its_own_files_whatever_another_rank_s_say(tmp_path):
    write(tmp_path / "proton.rank0.hatchet", tree(leaf("k", 1000, None)))
    write(tmp_path / "proton.rank1.hatchet", tree(leaf("k", 1000, 3)))
    s, _ = summary(tmp_path)
    assert [r["kernel_count"] for r in s["proton_ranks"]] == [None, 3]
    assert "proton_kernel_count" not in s  # aorta's: left out where any count is unreadable


def test_h200_two_ranks_trace_has_a_timeline_per_rank():
    s, _ = summary(FIXTURES / "h200-two-ranks-trace")
    assert [r["gpu_time_ms"] for r in s["proton_ranks"]] == [
        pytest.approx(0.185022),
        pytest.approx(0.18592),
    ]
    loops = [e for e in s["proton_timeline"] if e["launches"] == 20]
    assert sorted(e["rank"] for e in loops) == [0, 1]  # the largest first, across ranks
    assert loops[0]["kernel_ms"] >= loops[1]["kernel_ms"]
    assert all(e["callsite"].endswith("softmax.py:478 softmax") for e in loops)


def test_h200_intra_tree():
    # make intra: the scopes' cycles under both launch sites' kernel nodes, summed.
    path = FIXTURES / "h200-intra.hatchet"
    s, problem = summary(path)
    assert problem is None  # scopes found: exit 0, though no kernel has a time
    assert not {"proton_kernel_count", "proton_gpu_time_ms", "proton_top_kernels"} & set(s)
    cycles = {
        "load": 6000257 + 91753562,
        "max": 16329995 + 335362973,
        "exp_sum": 17341139 + 338979431,
        "store": 4177493 + 77034027,
    }
    rows = {row["scope"]: row for row in s["proton_scopes"]}
    assert {k: r["cycles"] for k, r in rows.items()} == cycles
    assert rows["max"]["normalized_cycles"] == pytest.approx(1993.4075927734375 + 40937.86291503906)
    assert rows["max"]["share"] == pytest.approx(cycles["max"] / sum(cycles.values()))
    assert {r["kernel"] for r in rows.values()} == {"softmax_kernel"}


def test_h200_intra_trace():
    # make intra-trace, gzipped: 2 launches x 4096 CTAs x 2 warps x 4 scopes.
    s, problem = summary(FIXTURES / "h200-intra.chrome_trace.gz")
    assert problem is None
    rows = {row["scope"]: row for row in s["proton_scopes"]}
    assert {k: r["events"] for k, r in rows.items()} == dict.fromkeys(rows, 16384)
    assert rows["max"]["cycles"] == pytest.approx(49236337)
    assert rows["max"]["median_cycles"] == 2680 and rows["max"]["p90_cycles"] == 5086
    assert rows["load"]["median_cycles"] == 849 and rows["store"]["median_cycles"] == 383
    (spread,) = s["proton_sm_spread"]
    assert spread["launches"] == 2 and spread["sms"] == 132
    low, mid, high = spread["ctas_per_sm"]
    assert low <= 4096 / 132 <= high  # 4096 CTAs a launch over 132 SMs


def trace(*launches):
    """A trace of (site, start us, duration us, stream) launches."""
    return {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k_{site}",
                "ts": ts,
                "dur": dur,
                "tid": tid,
                "args": {
                    "call_stack": [
                        "ROOT",
                        "/app/run.py:9@<module>",
                        f"/app/run.py:{site}@main",
                        f"k_{site}",
                    ]
                },
            }
            for site, ts, dur, tid in launches
        ]
    }


def test_timeline_counts_any_kernel_as_busy(tmp_path):
    # Site 20 at [0,10] [30,40] [60,70]; site 21 on another stream at [10,20] [35,45].
    t = trace((20, 0, 10, 1), (20, 30, 10, 1), (20, 60, 10, 1), (21, 10, 10, 2), (21, 35, 10, 2))
    s, _ = summary(write(tmp_path / "t.chrome_trace", t))
    a, b = s["proton_timeline"]
    assert a["callsite"] == "run.py:9 <module> > run.py:20 main"
    assert (a["launches"], a["kernel_ms"], a["span_ms"]) == (3, 0.03, 0.07)
    assert a["busy"] == pytest.approx(45 / 70) and a["median_idle_us"] == pytest.approx(12.5)
    assert b["busy"] == pytest.approx(25 / 35) and b["median_idle_us"] == pytest.approx(10)
    one = summary(write(tmp_path / "one.chrome_trace", trace((20, 5, 0, 1))))[0]["proton_timeline"]
    assert one[0]["busy"] == 1.0 and one[0]["median_idle_us"] is None


def test_table_diagnoses_a_launch_bound_loop(tmp_path):
    t = trace(*((20, 100 * i, 10, 1) for i in range(5)))
    p = cli(write(tmp_path / "t.chrome_trace", t), "--table")
    assert p.returncode == 0
    assert (
        "run.py:9 <module> > run.py:20 main: the GPU was idle 88% of the span of its 5 "
        "launches, a median 90.0 us between launches against 10.0 us of kernel each"
    ) in p.stdout


def test_the_diagnosis_names_its_rank_and_skips_gaps_shorter_than_a_kernel():
    # Two ranks sharing one H200: rank 0's loop waits on its host (a median 30.7 us gap
    # against 6.0 us kernels); rank 1's launches queue back to back (1.1 us against 6.3),
    # its idle time spent while rank 0 held the GPU.
    p = cli(FIXTURES / "h200-two-ranks-trace", "--table")
    diagnoses = [line for line in p.stdout.splitlines() if "launch cost bounds it" in line]
    assert len(diagnoses) == 1 and diagnoses[0].startswith("rank 0: softmax.py:585 <module>"), (
        diagnoses
    )


def test_source_lines_only_from_python_files(tmp_path):
    app = tmp_path / "app.py"
    app.write_text("import x\n\ny = launch(x)   \n")
    secret = tmp_path / "secret.txt"
    secret.write_text("line one\nline two\nline three\n")
    t = tree(
        *(
            node(f"{tmp_path / name}:3@main", leaf(f"k{i}", 1000))
            for i, name in enumerate(["app.py", "secret.txt", "gone.py"])
        )
    )
    s, _ = summary(write(tmp_path / "t.hatchet", t))
    sources = {site["callsite"]: site["source"] for site in s["proton_callsites"]}
    assert sources == {
        "app.py:3 main": "y = launch(x)",
        "secret.txt:3 main": None,
        "gone.py:3 main": None,
    }
    p = cli(tmp_path / "t.hatchet", "--table")
    assert "app.py:3 main  y = launch(x)" in p.stdout and "line three" not in p.stdout


def test_diff_per_kernel_and_call_site(tmp_path):
    base = write(
        tmp_path / "base.hatchet", tree(node("/a/m.py:1@f", leaf("k", 4000), leaf("j", 1000)))
    )
    new = write(
        tmp_path / "new.hatchet", tree(node("/a/m.py:1@f", leaf("k", 2000), leaf("j", 1500)))
    )
    p = cli(new, "--diff", base, "--min-ms", "0")  # no floor: these rows move 0.0015 ms
    d = json.loads(p.stdout)["proton_diff"]
    assert (d["total"]["base_ms"], d["total"]["ms"]) == (0.005, pytest.approx(0.0035))
    assert [(r["name"], r["ratio"]) for r in d["kernels"]] == [("k", 0.5), ("j", 1.5)]
    (site,) = d["callsites"]
    assert site["callsite"] == "m.py:1 f" and site["ratio"] == pytest.approx(0.7)
    assert (site["base_ms"], site["ms"], site["verdict"]) == (0.005, 0.0035, "faster")
    assert "against" in cli(new, "--diff", base, "--table").stdout
    traced = write(tmp_path / "t.chrome_trace", trace((20, 0, 10, 1)))
    p = cli(new, "--diff", traced)
    assert p.returncode == 2 and "--diff compares captures of one kind" in p.stderr


def test_a_tree_deeper_than_the_recursion_limit(tmp_path):
    # A recursion 100,000 frames deep: decoded, and its chain kept as one repeated frame.
    depth = 100_000
    text = "".join(
        '{"frame": {"name": "/w/rec.py:7@f"}, "metrics": {}, "children": [' for _ in range(depth)
    )
    text = f'[{{"frame": {{"name": "ROOT"}}, "metrics": {{}}, "children": [{text}'
    text += '{"frame": {"name": "k"}, "metrics": {"count": 1, "time (ns)": 5}, "children": []}'
    text += "]}" * depth + "]}, {}]"
    p = cli(write(tmp_path / "deep.hatchet", text))
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["proton_kernel_count"] == 1
    assert s["proton_callsites"][0]["callsite"] == f"rec.py:7 f (x{depth})"


# Hostile inputs and outputs: one line, the documented exit code, nothing replaced.


def strict(text):
    """JSON as a strict parser reads it: NaN and Infinity refused."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


GOOD = tree(leaf("k", 1000, 2))


def test_output_replaces_a_regular_file_with_the_umask_s_mode(tmp_path):
    capture, out = write(tmp_path / "t.hatchet", GOOD), tmp_path / "s.json"
    out.write_text("old")
    out.chmod(0o600)
    p = run(
        "sh",
        "-c",
        'umask 027 && "$0" "$1" "$2" -o "$3"',
        sys.executable,
        ROOT / "parse_hatchet.py",
        capture,
        out,
    )
    assert p.returncode == 0, p.stderr
    assert strict(out.read_text())["proton_kernel_count"] == 2
    assert out.stat().st_mode & 0o777 == 0o640
    assert sorted(f.name for f in tmp_path.iterdir()) == ["s.json", "t.hatchet"]  # no temporary


def test_output_through_a_link_writes_its_target(tmp_path):
    capture, target = write(tmp_path / "t.hatchet", GOOD), tmp_path / "real.json"
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    assert cli(capture, "-o", tmp_path / "link.json").returncode == 0
    assert (tmp_path / "link.json").is_symlink()
    assert strict(target.read_text())["proton_kernel_count"] == 2


def test_output_to_a_pipe_is_written_directly(tmp_path):
    # A stand-in for /dev/null and /dev/stdout: not a regular file, so not replaced.
    import threading

    capture, fifo = write(tmp_path / "t.hatchet", GOOD), tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    p = cli(capture, "-o", fifo)
    reader.join(timeout=30)
    assert p.returncode == 0 and strict(got[0])["proton_kernel_count"] == 2
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    p = cli(capture, "-o", "/dev/stdout")
    assert p.returncode == 0 and strict(p.stdout)["proton_kernel_count"] == 2


@pytest.mark.parametrize("flag", ["-o", "--folded"])
def test_an_input_is_never_written_over(tmp_path, flag):
    capture = write(tmp_path / "t.hatchet", GOOD)
    before = capture.read_text()
    (tmp_path / "alias.json").symlink_to(capture)
    for target in (capture, tmp_path / "alias.json"):
        p = cli(capture, flag, target)
        assert (
            p.returncode == 2 and p.stderr.count("\n") == 1 and "is one of the inputs" in p.stderr
        )
    p = cli(
        capture, "--diff", write(tmp_path / "base.hatchet", GOOD), flag, tmp_path / "base.hatchet"
    )
    assert p.returncode == 2
    assert capture.read_text() == before


def test_only_regular_files_are_read(tmp_path):
    write(tmp_path / "a.hatchet", GOOD)
    os.mkfifo(tmp_path / "b.hatchet")  # would block a reader for ever
    p = run(sys.executable, ROOT / "parse_hatchet.py", tmp_path)  # conftest's 600 s timeout
    assert p.returncode == 1 and strict(p.stdout)["proton_kernel_count"] == 2
    assert "skipped" in p.stderr and "b.hatchet: not a regular file" in p.stderr
    p = cli(tmp_path / "b.hatchet")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not a regular file" in p.stderr
    p = cli("")
    assert p.returncode == 2 and "an empty path names nothing" in p.stderr


def test_links_to_one_file_count_once(tmp_path):
    write(tmp_path / "a.hatchet", GOOD)
    (tmp_path / "b.hatchet").symlink_to(tmp_path / "a.hatchet")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.hatchet").symlink_to(tmp_path / "a.hatchet")
    p = cli(tmp_path)
    assert p.returncode == 0 and strict(p.stdout)["proton_kernel_count"] == 2
    assert p.stderr.count("the same file as") == 2


def test_combined_captures_are_named(tmp_path):
    # Two captures of one name in different folders: added up, and stderr says which.
    write(tmp_path / "a" / "proton.hatchet", GOOD)
    write(tmp_path / "b" / "proton.hatchet", GOOD)
    p = cli(tmp_path)
    assert strict(p.stdout)["proton_kernel_count"] == 4
    assert (
        f"combined 2 captures: {tmp_path}/a/proton.hatchet, {tmp_path}/b/proton.hatchet" in p.stderr
    )


def test_trees_and_traces_of_different_runs_are_not_combined(tmp_path):
    write(tmp_path / "proton.hatchet", GOOD)
    write(tmp_path / "proton.chrome_trace", trace((20, 0, 10, 1)))
    p = cli(tmp_path)
    assert p.returncode == 2 and p.stdout == "" and "trees and traces together" in p.stderr


def test_json_never_holds_nan_or_infinity(tmp_path):
    t = tree(leaf("k", 0, 2, bytes=4096), leaf("nan", "nan"), leaf("inf", float("inf")))
    p = cli(write(tmp_path / "t.hatchet", t))
    assert p.returncode == 0
    (k,) = strict(p.stdout)["proton_kernels"]
    assert k["gbyte_per_s"] is None and k["total_ms"] == 0


def test_names_cannot_reach_a_terminal_or_forge_lines(tmp_path):
    nasty = "k\x1b[2J\r\nfake;frame\ud800"
    t = tree(node("/w/app.py:3@main", leaf(nasty, 1000)))
    fold = tmp_path / "f.folded"
    p = cli(write(tmp_path / "t.hatchet", t), "--table", "--folded", fold)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\r" not in p.stdout and "k\\x1b[2J\\r\\nfake" in p.stdout
    (line,) = fold.read_text().splitlines()
    assert line == "app.py:3 main;k\\x1b[2J\\r\\nfake\\x3bframe\\ud800 1000"
    p = cli(tmp_path / "t.hatchet")  # the JSON keeps the name, as escapes
    assert strict(p.stdout)["proton_kernels"][0]["name"] == nasty


def test_a_closed_stdout_is_one_line(tmp_path):
    import subprocess

    capture = write(tmp_path / "t.hatchet", GOOD)
    p = subprocess.Popen(
        [sys.executable, ROOT / "parse_hatchet.py", capture],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # the reader is gone before the JSON is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 2
    assert err.count("\n") == 1 and "cannot write to stdout" in err


def test_call_sites_are_keyed_by_full_path(tmp_path):
    t = tree(
        node("/w/a/model.py:10@forward", leaf("k", 1000)),
        node("/w/b/model.py:10@forward", leaf("k", 3000)),
        node("/w/a/util.py:4@step", leaf("k", 2000)),
    )
    s, _ = summary(write(tmp_path / "t.hatchet", t))
    sites = {site["callsite"]: site["ms"] for site in s["proton_callsites"]}
    assert sites == {
        "a/model.py:10 forward": 0.001,
        "b/model.py:10 forward": 0.003,
        "util.py:4 step": 0.002,
    }


@pytest.mark.parametrize(
    "file, mine",
    [
        ("/workspace/venv/lib/python3.12/site-packages/mymodel/layers.py", True),  # a user package
        ("/workspace/project/torch/model.py", True),  # a folder named torch
        ("/workspace/project/lib/python_utils.py", True),
        ("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", False),
        ("/usr/lib/python3/dist-packages/triton/runtime/jit.py", False),
        ("/usr/lib/python3.12/runpy.py", False),  # Python itself
        ("<frozen runpy>", False),
        ("/workspace/triton-softmax/proton_launch.py", False),  # this repository's launcher
    ],
)
def test_only_python_triton_and_torch_frames_are_collapsed(file, mine):
    assert bool(frame_of(f"{file}:12@f")) == mine


def test_gzipped_captures_are_read(tmp_path):
    import gzip

    path = tmp_path / "t.hatchet.gz"
    path.write_bytes(gzip.compress(json.dumps(GOOD).encode()))
    assert strict(cli(path).stdout)["proton_kernel_count"] == 2


def test_unnamed_trace_events_count_nowhere(tmp_path):
    t = trace((20, 0, 10, 1), (20, 30, 10, 1), (20, 60, 10, 1))
    t["traceEvents"][1]["name"] = ""
    s, _ = summary(write(tmp_path / "t.chrome_trace", t))
    assert s["proton_kernel_count"] == 2 and s["proton_timeline"][0]["launches"] == 2


def test_no_diagnosis_for_a_line_that_is_no_loop(tmp_path):
    # Three different kernels milliseconds apart (torch loading its kernels on first use):
    # no launch-bound loop, whatever the busy share says.
    events = [(21, 0, 10, 1), (21, 9000, 10, 1), (21, 18000, 10, 1)]
    t = trace(*events)
    for e, name in zip(t["traceEvents"], ["a", "b", "c"], strict=True):
        e["name"] = name
    p = cli(write(tmp_path / "t.chrome_trace", t), "--table")
    assert p.returncode == 0 and "launch cost bounds it" not in p.stdout
    slow = trace(*((20, 5000 * i, 10, 1) for i in range(5)))  # one kernel, 5 ms apart
    assert "launch cost" not in cli(write(tmp_path / "s.chrome_trace", slow), "--table").stdout


def test_timeline_matches_a_brute_force_on_random_traces(tmp_path):
    # The one-pass timeline against interval arithmetic done the slow, obvious way.
    import random

    rng = random.Random(7)
    launches = [
        (rng.choice([20, 21, 22]), rng.uniform(0, 500), rng.uniform(0, 20), rng.choice([1, 2]))
        for _ in range(300)
    ]
    s, _ = summary(write(tmp_path / "t.chrome_trace", trace(*launches)))

    def covered(a, b):  # how much of [a, b] some launch covers, by sampling finely
        spans = [(ts, ts + d) for _, ts, d, _ in launches]
        step = (b - a) / 20000
        return sum(
            step for i in range(20000) if any(x <= a + (i + 0.5) * step < y for x, y in spans)
        )

    for entry in s["proton_timeline"]:
        site = int(entry["callsite"].rsplit(":", 1)[1].split()[0])
        mine = sorted((ts, ts + d) for k, ts, d, _ in launches if k == site)
        first, last = mine[0][0], max(end for _, end in mine)
        assert entry["busy"] == pytest.approx(covered(first, last) / (last - first), abs=2e-3)


def test_diff_matches_call_sites_moved_by_an_edit(tmp_path):
    def capture(name, lines, ns):
        return write(
            tmp_path / name,
            tree(
                node(
                    "/w/run.py:50@<module>",
                    *(
                        node(f"/w/run.py:{line}@main", leaf(f"k{line % 2}", n))
                        for line, n in zip(lines, ns, strict=True)
                    ),
                )
            ),
        )

    base = capture("base.hatchet", [10, 12], [4000, 1000])
    new = capture("new.hatchet", [11, 13], [2000, 1000])  # a line added above both
    p = cli(new, "--diff", base)
    d = strict(p.stdout)["proton_diff"]
    assert [(r["callsite"], r["ratio"]) for r in d["callsites"]] == [
        ("run.py:50 <module> > run.py:10->11 main", 0.5),
        ("run.py:50 <module> > run.py:12->13 main", 1.0),
    ]
    assert d["base"] == str(base)
    table = cli(new, "--diff", base, "--table").stdout
    assert f"against {base}:" in table and "run.py:10->11 main" in table


def test_times_that_add_up_past_a_float_s_range(tmp_path):
    big = {"time (ms)": 1e308}  # each finite; their sum is not
    t = tree(leaf("k\ud800", None, 1, **big), leaf("j", None, 1, **big))
    p = cli(write(tmp_path / "t.hatchet", t))
    assert p.returncode == 1 and "add up to infinity" in p.stderr and "Traceback" not in p.stderr
    assert strict(p.stdout) == {"proton_artifact_dir": str(tmp_path)}


def test_closed_standard_streams(tmp_path):
    write(tmp_path / "a.hatchet", GOOD)
    write(tmp_path / "b.hatchet", "{broken")  # a warning on stderr
    script = ROOT / "parse_hatchet.py"
    p = run("sh", "-c", f'"{sys.executable}" "{script}" "{tmp_path}" >&-')
    assert (
        p.returncode == 2 and "cannot write to stdout" in p.stderr and "Traceback" not in p.stderr
    )
    p = run("sh", "-c", f'"{sys.executable}" "{script}" "{tmp_path}" 2>&-')
    assert p.returncode == 1 and strict(p.stdout)["proton_kernel_count"] == 2  # no warning in it


def test_stderr_lines_escape_file_names(tmp_path):
    write(tmp_path / "a\x1b[31m\nFAKE.hatchet", GOOD)
    write(tmp_path / "b.hatchet", GOOD)
    p = cli(tmp_path)
    assert p.returncode == 0 and p.stderr.count("\n") == 1 and "\\x1b[31m\\nFAKE" in p.stderr


@pytest.mark.parametrize("target", ["", "missing/", "."])
def test_an_output_that_names_no_file_is_refused(tmp_path, target):
    p = run(
        sys.executable,
        ROOT / "parse_hatchet.py",
        write(tmp_path / "t.hatchet", GOOD),
        "-o",
        target,
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "names no file to write" in p.stderr and p.stdout == ""
    assert sorted(f.name for f in tmp_path.iterdir()) == ["t.hatchet"]


def test_short_names_of_paths_that_share_long_tails():
    tail = "/x" * 5000 + "/model.py"
    names = short_names([f"/a{tail}", f"/b{tail}", "/w/util.py"])
    assert names[f"/a{tail}"] == f"a{tail}" and names["/w/util.py"] == "util.py"


def test_the_parse_speed_table_is_the_committed_results():
    # make bench-parse writes both from one run; neither may be edited alone.
    import importlib.util

    spec = importlib.util.spec_from_file_location("parse_speed", ROOT / "bench" / "parse_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    doc, results = bench.DOC.read_text(), bench.RESULTS.read_text()
    assert bench.BEGIN in doc and len(results.splitlines()) == 7
    assert bench.with_table(doc, results) == doc


# Proton's outputs beyond one tree or one trace.


def test_a_trace_of_several_json_documents_reads_them_all():
    # The H200 capture of a CUDA graph replayed 50 times: one document per stream.
    path = FIXTURES / "h200-graph-replay.chrome_trace"
    s, problem = summary(path)
    assert problem is None
    assert s["proton_kernel_count"] == 53 + 2  # every document's events
    names = {k["name"]: k["launches"] for k in s["proton_kernels"]}
    assert names["softmax_kernel"] == 51  # as the tree of the same run counted
    (replayed,) = [c for c in s["proton_callsites"] if "CUDA graph" in c["callsite"]]
    assert replayed["kernels"] == [
        {
            "name": "softmax_kernel",
            "readable_name": "softmax_kernel",
            "launches": 50,
            "ms": pytest.approx(replayed["ms"]),
        }
    ]


def test_graph_replays_are_attributed_to_the_capture_site():
    # Hand-made in Triton 3.8's shape: replay path > <captured_at> > capture path > kernel.
    s, problem = summary(FIXTURES / "handmade-graph-replay.hatchet")
    assert problem is None and s["proton_kernel_count"] == 51
    sites = {c["callsite"]: c["kernels"][0]["launches"] for c in s["proton_callsites"]}
    assert sites == {
        "graph.py:30 <module> > graph.py:20 main": 1,
        "graph.py:20 main [a CUDA graph captured here, replayed at graph.py:30 <module> > "
        "graph.py:25 main]": 50,
    }
    # The frames as data: where it was captured, and where it was replayed, apart.
    (replayed,) = [c for c in s["proton_callsites"] if "replayed_at" in c]
    assert replayed["frames"] == [["graph.py", 20, "main", 1]]
    assert replayed["replayed_at"] == [["graph.py", 30, "<module>", 1], ["graph.py", 25, "main", 1]]
    assert "a CUDA graph captured here" in text.table(msgspec.convert(s, Summary), 5)


def test_msgpack_gives_the_five_keys_of_the_same_tree():
    keys = [
        "proton_kernel_count",
        "proton_gpu_time_ms",
        "proton_top_kernel_ms",
        "proton_top_kernels",
    ]
    json_s, _ = summary(FIXTURES / "handmade-graph-replay.hatchet")
    msgpack_s, problem = summary(FIXTURES / "handmade-graph-replay.hatchet_msgpack")
    assert problem is None and [msgpack_s[k] for k in keys] == [json_s[k] for k in keys]


def test_a_msgpack_tree_deeper_than_msgspec_decodes_is_named_in_one_line(tmp_path):
    path = tmp_path / "deep.hatchet_msgpack"  # [{"children": [{"children": [... {}]}]}]
    path.write_bytes(b"\x91" + b"\x81\xa8children\x91" * 100_000 + b"\x80")
    p = cli(path)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert (
        p.stderr.count("\n") == 1
        and "nested deeper than msgspec decodes: capture it as .hatchet" in p.stderr
    )


def test_phases_are_read_as_part_of_their_run_and_rank(tmp_path):
    folder = FIXTURES / "handmade-phases"
    s, _ = summary(folder)
    assert s["proton_kernel_count"] == 3 and s["proton_gpu_time_ms"] == pytest.approx(0.006)
    (rank,) = s["proton_ranks"]
    assert rank["rank"] == 0 and len(rank["files"]) == 3
    base = write(tmp_path / "base.hatchet", tree(leaf("k", 3000, 3)))
    d = strict(cli(folder, "--diff", base).stdout)["proton_diff"]
    ((k, ratio),) = [(r["name"], r["ratio"]) for r in d["kernels"]]
    assert k == "k" and ratio == pytest.approx(2.0)


def test_suffixed_metrics_and_cpu_time_never_change_the_five_keys():
    s, problem = summary(FIXTURES / "handmade-suffixed-metrics.hatchet")
    assert problem is None
    assert s["proton_top_kernels"] == ["k"] and s["proton_kernel_count"] == 2  # j: (exc) only
    assert s["proton_gpu_time_ms"] == pytest.approx(0.004)
    assert s["proton_cpu_scopes"] == [
        {"scope": "step", "cpu_ms": 3.0, "gpu_ms": pytest.approx(0.004)}
    ]


def test_ranks_on_one_clock_where_traces_say_when_it_started():
    s, _ = summary(FIXTURES / "handmade-base-time")
    r0, r1 = s["proton_ranks"]
    assert r0["first_kernel_start_ns"] == 1_760_000_000_000_000_000 + 100_000
    assert r1["last_kernel_end_ns"] == 1_760_000_000_002_000_000 + 210_000
    assert s["proton_rank_start_skew"] == {"rank": 1, "ms": 2.0}
    assert "rank 1 starts its GPU work last, 2.000 ms after the first" in text.table(
        msgspec.convert(s, Summary), 5
    )
    s, _ = summary(FIXTURES / "h200-two-ranks-trace")
    assert s["proton_rank_start_skew"] is None
    assert "ranks' clocks are not comparable" in text.table(msgspec.convert(s, Summary), 5)


PROVENANCE = {
    "triton": "3.9.0",
    "torch": "2.13.0",
    "backend_asked": "auto",
    "backend_used": "cupti",
    "mode_asked": None,
    "mode_used": None,
    "run_id": "a1",
    "world_size": 2,
}


def test_a_run_s_provenance_is_in_its_summary(tmp_path):
    write(tmp_path / "proton.rank0.hatchet", GOOD)
    write(tmp_path / "proton.rank1.part_0.hatchet", GOOD)
    write(tmp_path / "provenance.json", PROVENANCE)
    assert strict(cli(tmp_path).stdout)["proton_provenance"] == PROVENANCE
    # A capture named alone: the provenance.json beside it.
    assert strict(cli(tmp_path / "proton.rank0.hatchet").stdout)["proton_provenance"] == PROVENANCE
    (tmp_path / "provenance.json").unlink()
    assert strict(cli(tmp_path).stdout)["proton_provenance"] is None


def test_captures_of_two_runs_are_refused(tmp_path):
    # Two run folders given together, or a folder that holds both, as OUT/profile does.
    for run_id in ("a1", "b2"):
        write(tmp_path / run_id / "proton.hatchet", GOOD)
        write(tmp_path / run_id / "provenance.json", {**PROVENANCE, "run_id": run_id})
    for args in ([tmp_path / "a1", tmp_path / "b2"], [tmp_path]):
        p = cli(*args)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and "never mixes runs" in p.stderr


@pytest.mark.parametrize("text", ["[1]", "x" * 70000, "\xff"])
def test_a_bad_provenance_file_is_named_not_trusted(tmp_path, text):
    write(tmp_path / "proton.hatchet", GOOD)
    write(tmp_path / "provenance.json", text)
    p = cli(tmp_path)
    s = strict(p.stdout)
    assert p.returncode == 1 and s["proton_provenance"] is None and "Traceback" not in p.stderr
    assert s["proton_unread"][0]["file"] == str(tmp_path / "provenance.json")


# Faults: nothing dropped silently, bounded memory and time.


def test_a_missing_rank_is_named(tmp_path):
    write(tmp_path / "proton.rank0.hatchet", GOOD)
    p = cli(tmp_path, "--world-size", "2")
    assert p.returncode == 1 and "no capture of rank 1" in p.stderr
    assert strict(p.stdout)["proton_unread"] == [
        {"file": None, "rank": 1, "why": "no capture of rank 1"}
    ]
    assert cli(tmp_path, "--world-size", "1").returncode == 0


def test_a_gzip_copy_beside_its_capture_is_read_once(tmp_path):
    import gzip

    capture = write(tmp_path / "proton.hatchet", GOOD)
    (tmp_path / "proton.hatchet.gz").write_bytes(gzip.compress(capture.read_bytes()))
    p = cli(tmp_path)
    s = strict(p.stdout)
    assert p.returncode == 0 and s["proton_kernel_count"] == 2
    assert s["proton_unread"][0]["same_as"] == str(capture) and "gzip copy" in p.stderr


def limited(megabytes):
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))


def test_ctrl_c_while_a_deep_tree_decodes_is_one_line(tmp_path):
    import subprocess
    import time

    depth = 300_000
    text = "[" + '{"frame": {"name": "/w/r.py:7@f"}, "children": [' * depth + "]}" * depth + "]"
    capture = write(tmp_path / "deep.hatchet", text)
    p = subprocess.Popen(
        [sys.executable, ROOT / "parse_hatchet.py", capture],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    status = Path(f"/proc/{p.pid}/status")  # signalled mid-run: once it holds 300 MB
    while p.poll() is None and "VmRSS:" in (text := status.read_text()):
        if int(text.split("VmRSS:")[1].split()[0]) > 300_000:
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (130, 1) and "Traceback" not in err and "Fatal" not in err
    assert err.count("\n") == 1


def test_a_lone_surrogate_in_a_mangled_name(tmp_path):
    p = cli(write(tmp_path / "t.hatchet", tree(leaf("_Zk\ud800", 1000))), "--table")
    assert p.returncode == 0 and "Traceback" not in p.stderr


def test_a_folder_whose_name_is_not_utf_8(tmp_path):
    # Linux names are bytes: Python holds those that are not UTF-8 as lone surrogates.
    folder = tmp_path / os.fsdecode(b"caf\xe9")
    p = cli(write(folder / "t.hatchet", GOOD))
    assert p.returncode == 0 and strict(p.stdout)["proton_artifact_dir"] == str(folder)


def test_unreadable_folders(tmp_path, monkeypatch):
    write(tmp_path / "a.hatchet", GOOD)
    (tmp_path / "locked").mkdir()
    real = os.scandir

    def scandir(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found = files.find([str(tmp_path)])
    assert found.files == [tmp_path / "a.hatchet"]
    assert found.skipped == [
        {
            "file": str(tmp_path / "locked"),
            "why": "a folder that cannot be listed: permission denied",
        }
    ]
    with pytest.raises(Refused, match="locked: permission denied"):
        files.find([str(tmp_path / "locked")])


def test_diff_against_a_base_of_scopes_only_or_nothing(tmp_path):
    new = write(tmp_path / "new.hatchet", GOOD)
    scopes = write(
        tmp_path / "base" / "s.hatchet",
        tree(node("k", {"frame": {"name": "load"}, "metrics": {"cycles": 5}, "children": []})),
    )
    good = tmp_path / "s.json"
    good.write_text("earlier")
    for base in (scopes, tmp_path / "empty"):
        base.mkdir(exist_ok=True) if base.name == "empty" else None
        p = cli(new, "--diff", base, "-o", good)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and "--diff" in p.stderr
        assert (
            strict(p.stdout) == {"proton_artifact_dir": str(tmp_path)}
            and good.read_text() == "earlier"
        )


def test_output_names_of_255_bytes_and_dash(tmp_path):
    capture = write(tmp_path / "t.hatchet", GOOD)
    out = tmp_path / ("s" * 250 + ".json")
    assert (
        cli(capture, "-o", out).returncode == 0
        and strict(out.read_text())["proton_kernel_count"] == 2
    )
    p = run(sys.executable, ROOT / "parse_hatchet.py", capture, "-o", "-", cwd=tmp_path)
    assert strict(p.stdout)["proton_kernel_count"] == 2 and not (tmp_path / "-").exists()


def test_top_limits_every_table_and_warnings_print_paths(tmp_path):
    for r in range(4):
        write(tmp_path / f"proton.rank{r}.hatchet", GOOD)
    write(tmp_path / "other.hatchet", GOOD)
    p = cli(tmp_path, "--table", "--top", "2")
    assert "proton.rank1.hatchet" in p.stdout and "proton.rank2.hatchet" not in p.stdout
    assert "PosixPath" not in p.stderr and f"{tmp_path}/other.hatchet" in p.stderr


def test_top_limits_scope_rows():
    s, _ = summary(FIXTURES / "h200-intra.hatchet")
    assert len(text.scopes_table(msgspec.convert(s, Summary), 2)) == 1 + 2
    assert [line.split()[-1] for line in text.scopes_table(msgspec.convert(s, Summary), 2)[1:]] == [
        "exp_sum",
        "max",
    ]


def test_a_deep_chain_costs_its_depth_not_its_square(tmp_path):
    # A kernel under every one of 3,000 nested frames: each call site shows its innermost
    # frames below a count of the rest, so the output grows with the depth.
    depth, k = 3_000, json.dumps(leaf("k", 5))
    text = '[{"frame": {"name": "ROOT"}, "children": ['
    text += "".join(
        f'{{"frame": {{"name": "/w/r.py:{n}@f"}}, "children": [{k}, ' for n in range(depth)
    )
    text += k + "]}" * depth + "]}, {}]"
    p = cli(write(tmp_path / "deep.hatchet", text), "--folded", tmp_path / "f.txt")
    s = strict(p.stdout)
    assert p.returncode == 0 and len(s["proton_callsites"]) == depth
    deepest = max(s["proton_callsites"], key=lambda c: len(c["callsite"]))["callsite"]
    assert deepest.startswith(f"[{depth - MAX_FRAMES} outer frames] > r.py:")
    assert deepest.count(" > ") == MAX_FRAMES
    assert len((tmp_path / "f.txt").read_text()) < depth * MAX_FRAMES * 20


def test_a_capture_or_folder_named_twice_is_read_once():
    ranks = FIXTURES / "h200-two-ranks"
    once = strict(cli(ranks).stdout)["proton_gpu_time_ms"]
    p = cli(ranks, f"{ranks}/")
    assert p.returncode == 0 and strict(p.stdout)["proton_gpu_time_ms"] == pytest.approx(once)
    rank0 = ranks / "proton.rank0.hatchet"
    p = cli(rank0, rank0)
    assert (
        strict(p.stdout)["proton_kernel_count"] == strict(cli(rank0).stdout)["proton_kernel_count"]
    )
    assert "the same file as" in p.stderr


def test_trials_are_one_run_read_alone_and_numbered_from_1(tmp_path):
    for k in (1, 2):
        write(tmp_path / "run" / f"trial{k}" / "proton.hatchet", GOOD)
    write(tmp_path / "other" / "proton.hatchet", GOOD)
    p = cli(tmp_path / "run", tmp_path / "other")
    assert p.returncode == 2 and "a run of trials" in p.stderr and p.stderr.count("\n") == 1
    (tmp_path / "run" / "trial2").rename(tmp_path / "run" / "trial3")
    p = cli(tmp_path / "run")
    assert p.returncode == 2 and "trial folders not numbered 1 to N" in p.stderr


def test_a_bad_link_in_a_folder_is_skipped_and_named(tmp_path):
    write(tmp_path / "proton.hatchet", GOOD)
    (tmp_path / "loop").symlink_to("loop")
    p = cli(tmp_path)
    assert p.returncode == 1 and strict(p.stdout)["proton_kernel_count"] == 2
    assert "skipped" in p.stderr and "loop" in p.stderr


def test_output_never_replaces_a_run_s_provenance_or_gzip_copy(tmp_path):
    import gzip

    capture = write(tmp_path / "proton.hatchet", GOOD)
    (tmp_path / "proton.hatchet.gz").write_bytes(gzip.compress(capture.read_bytes()))
    write(tmp_path / "provenance.json", {"run_id": "x"})
    for target in ("provenance.json", "proton.hatchet.gz"):
        before = (tmp_path / target).read_bytes()
        p = cli(tmp_path, "-o", tmp_path / target)
        assert p.returncode == 2 and "is one of the inputs" in p.stderr
        assert (tmp_path / target).read_bytes() == before


def test_many_missing_ranks_are_one_line(tmp_path):
    write(tmp_path / "proton.rank0.hatchet", GOOD)
    p = cli(tmp_path, "--world-size", "65536")
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert "no capture of rank 1, 2, 3, 4, 5, 6, 7, 8 and 65527 more" in p.stderr


@pytest.mark.parametrize("flag", ["--fail-above", "--min-ms"])
def test_a_gate_without_a_diff_is_a_usage_error(flag):
    p = cli(FIXTURES / "h200-two-ranks", flag, "5")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--diff" in p.stderr


def test_h200_autotuned_capture_keeps_the_tuning_launches_apart():
    # make profile of tests/payloads/autotuned.py on the H200: the autotuner's benchmark
    # launches under a call site of their own, the 20 launches after it under theirs.
    s, problem = summary(FIXTURES / "h200-autotuned.hatchet.gz")
    assert problem is None
    sites = {c["callsite"]: c for c in s["proton_callsites"]}
    axpy = "autotuned.py:93 <module> > autotuned.py:{} main > autotuned.py:56 axpy"
    steady, tuning = sites[axpy.format(85)], sites[axpy.format(81) + " [autotuning]"]
    assert [(k["name"], k["launches"]) for k in steady["kernels"]] == [("axpy_kernel", 20)]
    assert any(k["name"] == "axpy_kernel" and k["launches"] > 1000 for k in tuning["kernels"])


def test_h200_hook_capture_of_the_example_has_its_share_of_the_peak():
    s, _ = summary(FIXTURES / "h200-softmax-python-hook.hatchet")
    (k,) = [k for k in s["proton_kernels"] if k["name"].startswith("softmax_kernel")]
    assert k["name"] == "softmax_kernel [4096x1024 float32]" and k["launches"] == 21
    assert k["gbyte_per_s"] == pytest.approx(21 * 2 * 2**24 / (k["total_ms"] * 1e6))
    peak = s["proton_device"][0]["peak_gbyte_per_s"]
    assert k["pct_of_peak_bw"] == pytest.approx(k["gbyte_per_s"] / peak)


# Runs as Proton writes them, which once cost too much or read wrongly.

H200 = {"arch": "90", "bus_width": 6144, "clock_rate": 1980000, "memory_clock_rate": 2619000}


def test_a_kernel_on_two_gpus_of_one_model_keeps_its_percent_of_peak(tmp_path):
    launch = {"bytes": 10**9, "device_type": "CUDA"}
    t = tree(
        leaf("k", 10**6, 1, device_id="0", **launch),
        leaf("k", 10**6, 1, device_id="1", **launch),
        device={"CUDA": {"0": {**H200, "num_sms": 132}, "1": {**H200, "num_sms": 132}}},
    )
    (k,) = summary(write(tmp_path / "t.hatchet", t))[0]["proton_kernels"]
    assert k["gbyte_per_s"] == pytest.approx(1000) and k["pct_of_peak_bw"] > 0
    other = {"CUDA": {"0": {**H200, "num_sms": 132}, "1": {**H200, "num_sms": 114}}}
    (k,) = summary(write(tmp_path / "u.hatchet", [t[0], other]))[0]["proton_kernels"]
    assert k["pct_of_peak_bw"] is None  # two models: no one peak


def test_plain_flops_get_a_percent_of_peak_and_widths_are_never_summed(tmp_path):
    device = {"CUDA": {"0": {**H200, "num_sms": 132}}}
    hooked = {"device_id": "0", "device_type": "CUDA"}
    t = tree(leaf("k", 10**6, 1, flops=10**12, **hooked), device=device)
    (k,) = summary(write(tmp_path / "t.hatchet", t))[0]["proton_kernels"]
    assert k["flop_per_s"] == pytest.approx(1e15) and 0 < k["pct_of_peak_flops"] < 10
    p = cli(tmp_path / "t.hatchet", "--table")
    assert "FLOP/s" in p.stdout and "% peak FLOP" in p.stdout and "% peak BW" not in p.stdout


def test_the_timeline_costs_its_launches_whatever_their_names(tmp_path):
    # 40,000 launches from one line, each named by its shape: once launches x names (418 s).
    events = trace(*((20, 10 * i, 5, 1) for i in range(40_000)))
    for i, e in enumerate(events["traceEvents"]):
        e["name"] = f"k [{i}x1024 float32]"
    path = write(tmp_path / "t.chrome_trace", events)
    p = subprocess.run(
        [sys.executable, ROOT / "parse_hatchet.py", path], capture_output=True, timeout=120
    )
    assert p.returncode == 0 and json.loads(p.stdout)["proton_timeline"][0]["launches"] == 40_000


def test_ranks_and_their_timelines_cost_their_files_not_the_square(tmp_path):
    # 60,000 one-launch rank traces, in process: once files x files (minutes).
    per_file = [(r, Path(f"/r/proton.rank{r}.chrome_trace"), 0.001, 1) for r in range(60_000)]
    traced = [(path, r, [(1.0 * r, 2.0 * r, 0, "k")], 10**9) for r, path, *_ in per_file]
    code = "import pickle, sys; from summary import views; views.sum_ranks(*pickle.load(sys.stdin.buffer))"
    data = pickle.dumps((per_file, traced))
    p = subprocess.run([sys.executable, "-c", code], input=data, cwd=ROOT, timeout=60)
    assert p.returncode == 0


def test_table_of_ranks_where_one_launched_nothing(tmp_path):
    base = {"baseTimeNanoseconds": 10**18}
    write(tmp_path / "proton.rank0.chrome_trace", {**trace((20, 0, 10, 1)), **base})
    write(tmp_path / "proton.rank1.chrome_trace", {"traceEvents": [], **base})
    p = cli(tmp_path, "--table")
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert [line.split()[0] for line in p.stdout.splitlines() if line.startswith("     ")][-2:]


@pytest.mark.parametrize(
    "names", [["trial01", "trial02", "trial10"], ["trial1", "trial2", "trial3"]]
)
def test_trial_folders_are_one_run_s_trials_by_number(tmp_path, names):
    for n, name in enumerate(names, 1):
        write(tmp_path / name / "proton.hatchet", tree(leaf("k", 1000 * n, 2)))
    if names[-1] == "trial10":  # 1, 2, 10: not numbered 1 to N
        p = cli(tmp_path)
        assert p.returncode == 2 and "not numbered 1 to N" in p.stderr
        (tmp_path / "trial10").rename(tmp_path / "trial03")
    s = strict(cli(tmp_path).stdout)
    (k,) = s["proton_trials"]["kernels"]
    assert s["proton_trials"]["n"] == 3 and (k["min_ms"], k["max_ms"]) == (0.001, 0.003)


def test_two_folders_of_one_trial_number_are_refused(tmp_path):
    for name in ("trial1", "trial01"):
        write(tmp_path / name / "proton.hatchet", GOOD)
    p = cli(tmp_path)
    assert p.returncode == 2 and "two folders are trial 1" in p.stderr


def test_a_run_stopped_in_its_second_trial_names_that_trial(tmp_path):
    write(tmp_path / "trial1" / "proton.hatchet", GOOD)
    (tmp_path / "trial2").mkdir()
    p = cli(tmp_path)
    s = strict(p.stdout)
    assert p.returncode == 1 and s["proton_kernel_count"] == 2
    (entry,) = s["proton_unread"]
    assert entry == {
        "file": str(tmp_path / "trial2"),
        "why": "no capture: the trial did not finish",
    }


def test_a_capture_a_link_to_it_and_its_gzip_copy_count_once(tmp_path):
    import gzip

    capture = write(tmp_path / "x.hatchet", GOOD)
    (tmp_path / "a.hatchet").symlink_to(capture)  # sorts first: the link is read
    (tmp_path / "x.hatchet.gz").write_bytes(gzip.compress(capture.read_bytes()))
    p = cli(tmp_path)
    assert p.returncode == 0 and strict(p.stdout)["proton_kernel_count"] == 2


def test_a_rank_with_no_run_id_beside_one_that_has_is_not_summed(tmp_path):
    write(tmp_path / "a" / "proton.rank0.hatchet", GOOD)
    write(tmp_path / "a" / "provenance.json", {"run_id": "20261206T000000Z-1"})
    write(tmp_path / "b" / "proton.rank1.hatchet", GOOD)
    p = cli(tmp_path)
    assert p.returncode == 1 and "never mixes runs" in p.stderr and p.stderr.count("\n") == 1


def test_the_documented_exit_statuses_are_the_script_s_own():
    import re

    doc = (ROOT / "docs" / "summary.md").read_text()
    table = doc[doc.index("Exit status, each failure") :].split("\n\n")[1]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)}
    statuses = ph.__doc__[ph.__doc__.index("Exit status:") :]
    assert documented == {
        int(code) for code in re.findall(r"\b(\d+) (?:summarised|usage|a |ended)", statuses)
    }
    source = (ROOT / "parse_hatchet.py").read_text()
    returned = {
        int(c) for c in re.findall(r"return (\d+)\b|, (\d+)\)$", source, re.M) for c in c if c
    }
    assert returned | {0, 3} == documented  # 3: where the diff finds a regression


def test_a_capture_with_no_rank_in_its_name_is_rank_0_s_under_world_size(tmp_path):
    p = cli(write(tmp_path / "proton.hatchet", GOOD), "--world-size", "2")
    assert p.returncode == 1 and "no capture of rank 1 was read" in p.stderr
    assert strict(p.stdout)["proton_unread"] == [
        {"file": None, "rank": 1, "why": "no capture of rank 1"}
    ]


def test_mistaken_outputs_and_ceilings_are_one_line(tmp_path):
    capture = write(tmp_path / "t.hatchet", GOOD)
    p = cli(capture, "-o", tmp_path / "no" / "s.json")
    assert (
        p.returncode == 2
        and p.stderr == f"parse_hatchet: error: no folder {tmp_path / 'no'} to write in\n"
    )
    p = cli(capture, "--ceiling", capture)  # a capture given for make ceiling's record
    assert (
        p.returncode == 2 and p.stderr.count("\n") == 1 and "not make ceiling's records" in p.stderr
    )


def test_a_make_ab_run_folder_is_never_summed_as_one_run():
    # base and now: 5 trials each, one provenance; by its path from the checkout, which the
    # advised command is split into words by, and holds no space
    run = (FIXTURES / "h100-ab-aa").relative_to(ROOT)
    for given in ([run], [run / "now", "--diff", run]):
        p = cli(*given)
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr == (
            f"parse_hatchet: error: {run} holds both sides of a make ab run: "
            f"compare {run}/now --diff {run}/base\n"
        )
    advised = cli(*p.stderr.split(": compare ")[1].split())  # now against base
    assert json.loads(advised.stdout)["proton_diff"]["base"] == f"{run}/base"


def test_outputs_of_one_run_never_share_a_file(tmp_path):
    capture = write(tmp_path / "t.hatchet", GOOD)
    s, page = tmp_path / "s.json", tmp_path / "p.html"
    (tmp_path / "link.json").symlink_to(s)
    for given in (
        ["-o", s, "--folded", s],
        ["-o", tmp_path / "link.json", "--html", s],
        ["--folded", page, "--html", page],
        ["--diff", capture, "-o", s, "--markdown", s],
        ["--diff", capture, "--html", page, "--markdown", page],
        ["--diff", capture, "--markdown", "-"],  # stdout: the JSON's
        ["--diff", capture, "--table", "--markdown", "-"],
        ["--table", "-o", "-"],
    ):
        p = run(sys.executable, ROOT / "parse_hatchet.py", capture, *given, cwd=tmp_path)
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, given
        assert "name one file" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["link.json", "t.hatchet"]  # nothing written


def test_markdown_dash_is_stdout(tmp_path):
    capture, base = write(tmp_path / "t.hatchet", GOOD), write(tmp_path / "b.hatchet", GOOD)
    given = [capture, "--diff", base, "-o", tmp_path / "s.json", "--markdown", "-"]
    p = run(sys.executable, ROOT / "parse_hatchet.py", *given, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("**not interleaved")
    assert "; no change beyond the noise" in p.stdout.splitlines()[0]
    assert "| k | " in p.stdout and not (tmp_path / "-").exists()

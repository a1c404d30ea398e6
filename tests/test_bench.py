"""The committed benchmark results: the keys the sweep promises, and a docs/performance.md
whose generated part is exactly what bench/report.py makes of them."""

import json
import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402

RESULTS = report.whole_runs()
CANDIDATES = {"softmax.py", "torch.softmax", "torch.compile", "liger", "copy"}
OPTIONAL = {"quack"}  # a peer only where asked for (make bench QUACK=1)
PATHS = {"fused", "whole rows", "few rows", "tiles", "lagged tiles"}


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_results_hold_the_promised_keys(path):
    r = json.loads(path.read_text())
    assert {"device", "torch", "triton", "points", "host", "profiling"} <= set(r)
    for host in r["host"]:
        assert set(host["us"]) <= set(report.HOST_CALLS)  # each named in the host table
        assert CANDIDATES | {"kernel[grid]", "compiled[grid]"} <= set(host["us"])
        assert set(host["vs_torch"]) == set(host["us"]) and host["vs_torch"]["torch.softmax"] == 1
    assert {
        "run_wall_s",
        "profile_wall_s",
        "profile_vs_run",
        "proton_kernel_us",
        "device_us",
    } <= set(r["profiling"])
    for p in r["points"]:
        assert p["correct"] and p["path"] in PATHS and p.get("set", "rows") in ("rows", "logits")
        expected = CANDIDATES - ({"torch.compile"} if p.get("set") == "logits" else set())
        assert expected <= set(p["device_us"]) | set(p["notes"]) <= expected | OPTIONAL
        assert set(p["loop_us"]) == set(p["device_us"]) == set(p["device_us_spread"])
        for name, (low, high) in p["device_us_spread"].items():
            assert low <= p["device_us"][name] <= high


def test_the_performance_page_is_generated_from_the_first_results():
    page = (ROOT / "docs" / "performance.md").read_text()
    results = json.loads(RESULTS[0].read_text())
    assert report.section(results, RESULTS[0]) in page
    assert all(f"| {p['rows']} x {p['cols']} |" in page for p in results["points"])
    for dtype in {p["dtype"] for p in results["points"]}:
        assert (RESULTS[0].parent / f"{RESULTS[0].stem}-{dtype}.png").is_file()


def logits_point(kind, rows, cols, quack=None, note=None):
    dev = {"softmax.py": 10.0, "torch.softmax": 20.0, "copy": 9.0}
    if quack:
        dev["quack"] = quack
    notes = {"quack": note} if note else {}
    return dict(
        set=kind,
        dtype="bfloat16",
        rows=rows,
        cols=cols,
        path="tiles",
        device_us=dev,
        loop_us=dict(dev),
        notes=notes,
    )


def test_logits_points_have_a_table_and_a_plot_of_their_own(tmp_path):
    # QuACK's time where it ran, why not where it did not; the rows table and plots keep
    # the rows points alone.
    results = json.loads(RESULTS[0].read_text())
    results["points"] = [
        logits_point("rows", 4096, 1024),
        logits_point("logits", 16, 128256, quack=8.0),
        logits_point("logits", 4096, 50257, note="ValueError: N % 8"),
        logits_point("logits", 1, 151936, note="wrong: max_abs_err=nan"),
    ]
    text = report.section(results, tmp_path / "gpu.json")
    assert "| bfloat16 | 16 x 128256 | tiles | 10.0 | 0.90 | 1.12 | 0.80 | 0.80 |" in text
    assert "| bfloat16 | 4096 x 50257 | tiles | 10.0 | 0.90 | refuses | refuses |" in text
    assert "| bfloat16 | 1 x 151936 | tiles | 10.0 | 0.90 | wrong | wrong |" in text
    assert "| bfloat16 | 4096 x 1024 | tiles | 10.0 / " in text  # the rows table
    assert "| bfloat16 | 16 x 128256 | tiles | 10.0 / " not in text
    report.plot(results, tmp_path / "gpu")
    assert {f.name for f in tmp_path.iterdir()} == {"gpu-bfloat16.png", "gpu-logits.png"}


def test_the_markdown_beside_a_run_holds_both_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "update_page", lambda text: None)
    results = json.loads(RESULTS[0].read_text())
    results["points"] = [logits_point("rows", 4096, 1024), logits_point("logits", 16, 128256)]
    (tmp_path / "gpu.json").write_text(json.dumps(results))
    report.write_all(tmp_path / "gpu.json")
    text = (tmp_path / "gpu.md").read_text()
    assert "| bfloat16 | 4096 x 1024 | tiles | 10.0 / " in text
    assert "| bfloat16 | 16 x 128256 | tiles | 10.0 | 0.90 | - | - |" in text


def parts(tmp_path, **changes):
    """The committed whole run cut into two parts, as `make bench POINTS=...` writes them:
    logits (synthetic points) and the rest; changes made to the logits part (a subset of
    None: none, as a whole run has)."""
    whole = json.loads(RESULTS[0].read_text())
    whole.pop("merged_from", None)
    whole["points"] = [p for p in whole["points"] if p.get("set", "rows") == "rows"]
    rest = {"backward": [], **whole, "subset": ["rows", "backward", "host", "profiling"]}
    logits = {k: whole[k] for k in report.SAME if k in whole}
    logits.update({"subset": ["logits"], "points": [logits_point("logits", 16, 128256)]})
    logits.update(changes)
    if logits["subset"] is None:
        del logits["subset"]
    paths = [tmp_path / "gpu-rows-backward-host-profiling.json", tmp_path / "gpu-logits.json"]
    for path, run in zip(paths, (rest, logits), strict=True):
        path.write_text(json.dumps(run))
    return whole, paths


def test_subset_runs_merge_into_a_whole_run(tmp_path, monkeypatch):
    pages = []
    monkeypatch.setattr(report, "update_page", pages.append)
    whole, paths = parts(tmp_path)
    assert report.main(["--merge", *map(str, paths)]) == 0
    merged = json.loads((tmp_path / f"{report.slug(whole['device'])}.json").read_text())
    assert "subset" not in merged and merged["merged_from"] == [p.name for p in paths]
    assert merged["points"] == whole["points"] + [logits_point("logits", 16, 128256)]
    assert merged["host"] == whole["host"] and merged["profiling"] == whole["profiling"]
    assert "| bfloat16 | 16 x 128256 | tiles |" in pages[0]


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"triton": "3.7.0"}, "differs from .* in triton"),
        ({"subset": ["logits", "rows"]}, "not rows, logits, backward, host, profiling, each once"),
        ({"subset": None}, "is a whole run"),
        ({"subset": "logits"}, "not a list of names"),
        ({"points": {"a": 1}}, "is not a sweep's results"),
        ({"device": 7}, "is not a sweep.s results"),
    ],
)
def test_parts_of_other_runs_are_refused(tmp_path, capsys, changes, says):
    _, paths = parts(tmp_path, **changes)
    assert report.main(["--merge", *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(says, err)
    assert not (tmp_path / "nvidia-h200.json").exists()


GOOD = logits_point("logits", 16, 128256)


@pytest.mark.parametrize(
    "points, says",
    [
        (
            [{k: v for k, v in GOOD.items() if k != "device_us"}],
            "gpu-logits.json: its point 1 lacks device_us",
        ),
        ([GOOD, {**GOOD, "loop_us": {"quack": 1.0}}], "its point 2 has no device and loop times"),
        ([{**GOOD, "dtype": "float64"}], "its point 1 has no dtype, rows and cols of a sweep"),
        ([{**GOOD, "device_us": {"softmax.py": 1.0, "copy": 1.0}}], "its point 1 has no peer's"),
        ([7], "its point 1 is not an object"),
        (
            [GOOD, GOOD],
            "gpu-logits.json repeats the logits point bfloat16 16 x 128256 of .*gpu-logits",
        ),
        ([GOOD, logits_point("rows", 4096, 256)], "its rows point bfloat16 4096 x 256 is outside"),
    ],
    ids=["no device_us", "no loop times", "no dtype", "no peer", "no object", "twice", "outside"],
)
def test_a_part_whose_points_the_report_cannot_read_is_refused(tmp_path, capsys, points, says):
    # Each in one line and exit 2, naming the part and the point as the tables name it.
    _, paths = parts(tmp_path, points=points)
    assert report.main(["--merge", *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(says, err), err
    assert not list(tmp_path.glob("nvidia-*.json"))


@pytest.mark.parametrize(
    "subset, changes, says",
    [
        (["host", "logits"], {}, "gpu-logits.json: its subset host, logits lacks host"),
        (["host", "logits"], {"host": [{"rows": 4}]}, "make no report: KeyError: 'us'"),
    ],
)
def test_a_part_without_what_its_subset_brings_is_refused(tmp_path, capsys, subset, changes, says):
    whole, paths = parts(tmp_path, subset=subset, **changes)
    rest = json.loads(paths[0].read_text())
    rest["subset"].remove("host")
    paths[0].write_text(json.dumps(rest))
    assert report.main(["--merge", *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_peers_left_out_are_named_at_each_point_as_the_tables_name_it(tmp_path):
    results = json.loads(RESULTS[0].read_text())
    results["points"] = [
        logits_point("logits", 4096, 50257, note="ValueError: N % 8"),
        logits_point("logits", 1, 151936, note="wrong: max_abs_err=nan"),
        logits_point("logits", 16, 50257, note="ValueError: N % 8"),
    ]
    text = report.section(results, tmp_path / "gpu.json")
    said = "quack refused bfloat16 4096 x 50257, bfloat16 16 x 50257; quack got wrong bfloat16 1 x 151936."
    assert f"Left out: {said}" in text


def test_the_host_part_states_each_bound_at_each_shape(tmp_path):
    results = json.loads(RESULTS[0].read_text())
    calls = [
        "softmax.py",
        "torch.softmax",
        "softmax_op.softmax",
        "softmax_op.softmax, requires_grad",
    ]
    us = dict(zip(calls, [12.0, 6.0, 12.6, 40.0], strict=True))
    results["host"] = [
        dict(rows=rows, cols=cols, us=us, vs_torch={c: t / 6.0 for c, t in us.items()})
        for rows, cols in ((4, 64), (32, 4096))
    ]
    results["step"] = {"us": {"eager": 249.0, "compiled": 129.9}}
    text = report.section(results, tmp_path / "gpu.json")
    assert "| a call | 4 x 64: us | vs torch.softmax | 32 x 4096: us | vs torch.softmax |" in text
    assert "| `softmax_op.softmax`, no autograd | 12.6 | 2.10x | 12.6 | 2.10x |" in text
    bound = "`softmax()` 2.00x `torch.softmax`, `softmax_op.softmax` +0.6 us over it, 40.0 us"
    assert f"at 4 x 64, {bound}" in text and f"at 32 x 4096, {bound}" in text
    assert "249.0 us eager, 129.9 us compiled whole" in text


def test_a_merge_never_overwrites_its_parts(tmp_path, capsys):
    whole, paths = parts(tmp_path)
    named = paths[1].with_name(f"{report.slug(whole['device'])}.json")
    paths[1].rename(named)
    assert report.main(["--merge", str(paths[0]), str(named)]) == 2
    assert "would overwrite its part" in capsys.readouterr().err
    assert json.loads(named.read_text())["subset"] == ["logits"]


# The benchmark's own arithmetic, on CPU: what it times is faked, what it makes of it is not.


def test_host_costs_take_each_round_s_ratio_to_torch(monkeypatch):
    import sweep

    # The host slows down in round 2: the ratio within each round is what stays.
    times = {"torch.softmax": iter([10.0, 20.0, 10.0]), "softmax.py": iter([21.0, 40.0, 19.0])}
    monkeypatch.setattr(sweep, "loop_us", lambda fn, calls, sync: fn())
    fns = {name: (lambda it=it: next(it)) for name, it in times.items()}
    median, spread, ratios = sweep.host_costs(fns, n=3, calls=1, sync=lambda: None)
    assert median == {"torch.softmax": 10.0, "softmax.py": 21.0}
    assert spread["softmax.py"] == [19.0, 40.0]
    assert ratios == {"torch.softmax": 1.0, "softmax.py": 2.0}  # not 21 / 10


def test_profiling_cost_reads_the_latest_run_s_summary(tmp_path):
    import sweep

    def timed(command):  # make run: 2 s; make profile: 2.5 s, its run in OUT/profile/latest
        out = next((word[4:] for word in command if word.startswith("OUT=")), None)
        if out:
            run = Path(out, "profile", "20261205T000000Z-1")
            run.mkdir(parents=True, exist_ok=True)
            kernels = [{"name": "softmax_kernel [4096x1024 float32]", "mean_us": 6.5}]
            (run / "summary.json").write_text(json.dumps({"proton_kernels": kernels}))
            latest = Path(out, "profile", "latest")
            latest.unlink(missing_ok=True)
            latest.symlink_to(run.name)
        return 2.5 if out else 2.0

    cost = sweep.profiling_cost(6.0, timed=timed, repeats=3)
    assert cost["profile_vs_run"] == 1.25 and cost["proton_kernel_us"] == 6.5
    assert cost["device_us"] == 6.0 and cost["run_wall_s_spread"] == [2.0, 2.0]

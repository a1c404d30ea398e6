"""The page of a summary (summary/page.py, parse_hatchet.py --html): written beside the JSON
as every output is, self-contained, showing what summary.json says, of a size that opens
on a large trace. tests/test_page_browser.py looks at it in a real browser."""

import ast
import json
import re
import shutil
import sys
from html import escape

import pytest

import parse_hatchet as ph
from conftest import ROOT, run
from summary import page, text
from summary.records import from_json

FIXTURES = ROOT / "tests" / "fixtures"
HOOK = FIXTURES / "h200-softmax-python-hook.hatchet"
# Every fixture that is one run (h200-trials and make ab's runs hold two, each one of them;
# a .json is no capture).
TWO = {
    "h200-trials": ("base", "slower"),
    "h100-ab-aa": ("base", "now"),
    "h100-ab-edit": ("base", "now"),
}
RUNS = [p for p in sorted(FIXTURES.iterdir()) if p.name not in TWO and p.suffix != ".json"] + [
    FIXTURES / name / side for name, sides in TWO.items() for side in sides
]


def summarized(tmp_path, *args):
    """summary.json of parse_hatchet.py ARGS, with the headline the terminal prints first
    where the summary has none of its own."""
    out = tmp_path / "summary.json"
    assert ph.main([*map(str, args), "-o", str(out)]) in (0, 3)
    summary = json.loads(out.read_text())
    if "headline" not in summary:
        table = cli(*args, "--table")
        summary["headline"] = table.stdout.splitlines()[0]
    return summary


def drawn(summary):
    """The page of summary.json's object, read back into its records as --html does."""
    return page.page(from_json(json.dumps(summary)))


def cli(*args):
    """parse_hatchet.py ARGS, as a user runs it."""
    return run(sys.executable, ROOT / "parse_hatchet.py", *args)


def figure_data(html: str, key: str) -> list:
    """The traces of the page's figure whose element has id key, as plotly was given them."""
    call = re.search(rf'Plotly\.newPlot\(\s*"{key}",\s*(\[.*?\]),\s*\{{', html, re.S)
    assert call, f"no figure {key} on the page"
    return json.loads(call[1])


def test_html_writes_the_page_beside_the_json_and_fetches_nothing(tmp_path):
    p = cli(
        HOOK,
        "-o",
        tmp_path / "s.json",
        "--html",
        tmp_path / "p.html",
    )
    assert p.returncode == 0 and p.stderr == ""
    html = (tmp_path / "p.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in html
    assert not re.search(r"""<(script|link|img)\b[^>]*\b(src|href)\s*=""", html, re.I)
    summary = json.loads((tmp_path / "s.json").read_text())
    for key in ("proton_kernel_count", "proton_artifact_dir", "proton_device"):
        assert f"<th>{key}</th>" in html or f"<th>{key.removeprefix('proton_')}</th>" in html
    assert summary["proton_artifact_dir"] in html


def test_a_page_not_written_is_named_in_one_line_and_the_status_stays_the_summary_s(tmp_path):
    p = cli(
        HOOK,
        "-o",
        tmp_path / "s.json",
        "--html",
        tmp_path / "no" / "p.html",
    )
    assert p.returncode == 0
    assert (
        p.stderr
        == f"parse_hatchet: no page written to {tmp_path / 'no' / 'p.html'}: no folder {tmp_path / 'no'} to write in\n"
    )
    assert json.loads((tmp_path / "s.json").read_text())["proton_kernel_count"] == 26


def test_the_page_never_replaces_the_json_or_an_input(tmp_path):
    same = cli(
        HOOK,
        "-o",
        tmp_path / "s.json",
        "--html",
        tmp_path / "s.json",
    )
    assert same.returncode == 2 and "name one file" in same.stderr
    copy = tmp_path / "c.hatchet"
    copy.write_bytes(HOOK.read_bytes())
    p = cli(copy, "--html", copy, "-o", tmp_path / "s.json")
    assert (
        p.returncode == 0
        and "no page written" in p.stderr
        and copy.read_bytes() == HOOK.read_bytes()
    )


def test_plotly_is_imported_only_when_a_page_is_written(tmp_path):
    code = (
        "import sys, parse_hatchet as ph; ph.main([sys.argv[1], '-o', sys.argv[2]]);"
        "print('plotly' in sys.modules)"
    )
    p = run(sys.executable, "-c", code, HOOK, tmp_path / "s.json")
    assert p.stdout == "False\n"


def test_the_headline_is_shown_verbatim_and_the_gate_in_its_words(tmp_path):
    trials = FIXTURES / "h200-trials"
    args = [trials / "slower", "--diff", trials / "base", "--fail-above", "5"]
    summary = summarized(tmp_path, *args)
    html = drawn(summary)
    assert f'<h1 id="headline" class="fail">{escape(summary["headline"])}</h1>' in html
    stderr = cli(*args).stderr.splitlines()
    regressions = summary["proton_diff"]["regressions"]
    assert regressions and len(stderr) == len(regressions)  # one line each, exit 3
    gate = [f"Gate: 1 regression ({len(regressions)} rows) past --fail-above 5, exit 3."]
    gate += [line.removeprefix("parse_hatchet: ") for line in stderr]
    assert re.findall(r'<p class="gate">(.*?)</p>', html) == [escape(line) for line in gate]
    traces = figure_data(html, "compare")
    d = summary["proton_diff"]
    compared = [d["total"], *d["kernels"], *d["callsites"]]
    diamonds = [t for t in traces if t.get("marker", {}).get("symbol") == "diamond"]
    assert len(diamonds) == sum(r["ratio"] is not None for r in compared)
    trials = [t for t in traces if t.get("marker", {}).get("symbol") == "circle"]  # now's
    assert (
        [len(t["x"]) for t in trials]
        == [len(r["times_ms"]) for r in compared]
        == [3] * len(compared)
    )
    assert trials[0]["x"] == pytest.approx(
        [t / compared[0]["base_ms"] for t in compared[0]["times_ms"]]
    )


def test_a_gate_passed_is_said_so(tmp_path):
    trials = FIXTURES / "h200-trials"
    again = shutil.copytree(trials / "base", tmp_path / "again")
    summary = summarized(tmp_path, trials / "base", "--diff", again, "--fail-above", "5")
    html = drawn(summary)
    assert '<h1 id="headline" class="pass">' in html
    assert re.findall(r'<p class="gate">(.*?)</p>', html) == ["Gate: passed --fail-above 5."]


def test_first_line_rule_1_leaves_out_the_autotuner_s_launches(tmp_path):
    # The autotuner flushes the cache before each config it times: 154 ms of a fill kernel
    # that is not the run's; the run's own axpy_kernel took 0.21 ms of 0.34.
    summary = summarized(tmp_path, FIXTURES / "h200-autotuned.hatchet.gz")
    assert summary["headline"].startswith(
        "axpy_kernel: 61.1% of 0.3437 ms of GPU time outside [autotuning], 21 launches of"
    )
    fill = summary["proton_kernels"][0]  # aorta's keys count every launch, as before
    assert (
        summary["proton_top_kernels"][0] == fill["name"] and fill["tuning_ms"] == fill["total_ms"]
    )
    html = drawn(summary)
    why = re.search(r'<p class="caption" id="why">(.*?)</p>', html)[1]
    assert escape(fill["readable_name"]) in why and "[autotuning]" in why
    assert 'id="why"' not in drawn(summarized(tmp_path, HOOK))  # where they agree, no word


def test_kernel_bars_are_the_time_outside_the_autotuner_and_say_its_launches(tmp_path):
    summary = summarized(tmp_path, FIXTURES / "h200-autotuned.hatchet.gz")
    (bars,) = figure_data(drawn(summary), "kernels")
    assert bars["customdata"][0] == "axpy_kernel" and bars["x"][0] == max(bars["x"])
    assert bars["x"][0] == pytest.approx(0.611, abs=1e-3)  # of the time outside the tuner
    launches = next(k["launches"] for k in summary["proton_kernels"] if k["name"] == "axpy_kernel")
    assert bars["text"][0].startswith(f"{launches - 3325} launches + 3325 tuning, 44.1 ms")
    fill = bars["customdata"].index(escape(summary["proton_kernels"][0]["readable_name"]))
    assert bars["x"][fill] == 0 and "+ 2662 tuning, 154 ms" in bars["text"][fill]


def test_percent_of_peak_and_of_the_ceiling_where_the_run_has_one(tmp_path):
    # The example's default run on an H100 and that H100's measured copy (make ceiling).
    ceiling = FIXTURES / "h100-ceiling.json"
    summary = summarized(
        tmp_path, FIXTURES / "h100-softmax-python-hook.hatchet", "--ceiling", ceiling
    )
    top = summary["proton_kernels"][0]
    # 147% of the nominal peak, and about all of the copy of as many bytes: L2 serves both.
    assert (
        top["l2_resident"] and top["pct_of_peak_bw"] > 1.4 and 0.9 < top["pct_of_ceiling_bw"] < 1.1
    )
    bars = {t["name"]: t for t in figure_data(drawn(summary), "kernels")}
    assert bars["% of the nominal peak"]["x"][0] == top["pct_of_peak_bw"]
    measured = bars["% of the measured ceiling"]
    assert measured["x"][0] == top["pct_of_ceiling_bw"]
    assert measured["text"][0] == f"{top['pct_of_ceiling_bw']:.0%} L2-resident"


def test_the_icicle_is_the_call_sites_tree_with_their_source_lines(tmp_path):
    summary = summarized(tmp_path, HOOK)
    summary["proton_callsites"][0]["source"] = "softmax_kernel[grid](y, x)"
    (icicle,) = figure_data(drawn(summary), "callsites")
    assert icicle["type"] == "icicle" and sum(icicle["values"]) == pytest.approx(
        sum(s["ms"] for s in summary["proton_callsites"])
    )
    leaf = icicle["ids"].index(
        "all\nsoftmax.py:291 <module>\nsoftmax.py:282 main\nsoftmax.py:202 softmax\n"
        "softmax.py:172 launch\n\0softmax_kernel [4096x1024 float32]"
    )
    assert "softmax_kernel[grid](y, x)" in icicle["customdata"][leaf]


def test_timeline_bins_hold_each_call_site_s_kernel_time(tmp_path):
    summary = summarized(tmp_path, FIXTURES / "h200-softmax-python.chrome_trace")
    for e in summary["proton_timeline"]:
        assert len(e["busy_by_bin"]) == 200
        assert sum(e["busy_by_bin"]) * e["bin_us"] / 1e3 == pytest.approx(e["kernel_ms"], rel=0.02)
    html = drawn(summary)
    assert "bins of 10.3 us" in html and "the host's launch cost bounds it" in html


@pytest.mark.parametrize("name", ["h200-softmax-python.chrome_trace", "h200-two-ranks-trace"])
def test_every_timeline_row_is_on_one_time_axis_and_one_launch_is_one_mark(tmp_path, name):
    summary = summarized(tmp_path, FIXTURES / name)
    timeline = summary["proton_timeline"]
    for e in timeline:  # ms from the first launch of its process
        assert e["end_ms"] - e["start_ms"] == pytest.approx(e["span_ms"])
    assert min(e["start_ms"] for e in timeline) == 0.0
    rows = figure_data(drawn(summary), "timeline")
    assert len(rows) == len(timeline) and {e["launches"] for e in timeline} > {1}
    for e, row in zip(timeline, rows, strict=True):
        if e["launches"] == 1:  # a tick at its middle, its duration wide
            assert row["error_x"]["value"] * 2 == pytest.approx(e["kernel_ms"])
            assert row["x"] == [pytest.approx(e["start_ms"] + e["kernel_ms"] / 2)]
        else:  # its bins in ms on the axis every row shares, not in % of its own span
            assert row["x"][0] - e["bin_us"] / 2e3 == pytest.approx(e["start_ms"])
            assert row["x"][-1] + e["bin_us"] / 2e3 == pytest.approx(e["end_ms"])


def test_rows_that_share_a_name_get_distinct_labels(tmp_path):
    summary = summarized(tmp_path, HOOK)
    kernels = summary["proton_kernels"]
    kernels[1]["readable_name"] = kernels[2]["readable_name"] = kernels[0]["readable_name"]
    axis = page.draw_kernels(from_json(json.dumps(summary))).figure["layout"]["yaxis"]
    assert len(set(axis["ticktext"])) == len(axis["ticktext"]) == len(kernels)


def compared(tmp_path, *extra):
    trials = FIXTURES / "h200-trials"
    return summarized(tmp_path, trials / "slower", "--diff", trials / "base", *extra)


def test_the_comparison_is_on_a_log_axis_with_the_gate_s_threshold(tmp_path):
    summary = compared(tmp_path, "--fail-above", "5")
    fig = page.draw_comparison(from_json(json.dumps(summary))).figure
    assert fig["layout"]["xaxis"]["type"] == "log"
    lines = {t["name"]: t["x"] for t in fig["data"] if t.get("mode") == "lines"}
    assert lines == {"a ratio of 1": [1, 1], "--fail-above 5": [1.05, 1.05]}
    fig = page.draw_comparison(from_json(json.dumps(compared(tmp_path)))).figure
    assert [t["name"] for t in fig["data"] if t.get("mode") == "lines"] == ["a ratio of 1"]


def test_new_and_gone_rows_are_drawn(tmp_path):
    summary = compared(tmp_path)
    d = summary["proton_diff"]
    new = {**d["kernels"][0], "verdict": "new", "ratio": None, "low": None, "high": None}
    d["kernels"] += [new, {**new, "verdict": "gone"}]
    d["kernels"] = [{**r, "base_times_ms": None, "times_ms": None} for r in d["kernels"]]
    traces = page.draw_comparison(from_json(json.dumps(summary))).figure["data"]
    at = {t["y"][0]: t["hovertemplate"] for t in traces if t.get("mode") == "markers"}
    assert at[len(d["kernels"]) - 1].startswith("new") and at[len(d["kernels"])].startswith("gone")


def test_the_comparison_and_trials_count_the_rows_they_cut(tmp_path):
    summary = compared(tmp_path)
    summary["proton_diff"]["kernels"] *= 40
    summary["proton_diff"]["callsites"] *= 31
    summary["proton_trials"]["kernels"] *= 32
    read = from_json(json.dumps(summary))
    n = len(summary["proton_diff"]["kernels"])
    assert page.draw_comparison(read).caption[1:] == [
        f"and {n - 30} more kernels in summary.json",
        f"and {len(summary['proton_diff']['callsites']) - 30} more call sites in summary.json",
    ]
    rest = len(summary["proton_trials"]["kernels"]) - 30
    assert page.draw_trials(read).caption == [f"and {rest} more kernels in summary.json"]


def test_the_first_screen_leads_with_the_verdict_and_the_kernels_ahead_of_aorta_s_keys(tmp_path):
    html = drawn(compared(tmp_path, "--fail-above", "5"))
    order = [html.index(s) for s in ('id="headline"', 'class="gate"', '"compare"', '"kernels"')]
    assert order == sorted(order) and order[-1] < html.index('id="facts"')


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_every_fixture_has_a_page(tmp_path, path):
    html = drawn(summarized(tmp_path, path))
    assert "Plotly.newPlot" in html and "<h2>" in html


def test_the_page_of_a_trace_of_200_call_sites_and_200000_launches_is_at_most_10_mb(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from parse_speed import loop_trace

    trace = tmp_path / "loop.chrome_trace"
    trace.write_text(json.dumps(loop_trace(200, 200_000)))
    assert (
        ph.main([str(trace), "-o", str(tmp_path / "s.json"), "--html", str(tmp_path / "p.html")])
        == 0
    )
    assert len(json.loads((tmp_path / "s.json").read_text())["proton_timeline"]) == 200
    assert (tmp_path / "p.html").stat().st_size <= 10 * 2**20


def test_a_name_with_a_lone_surrogate_is_drawn(tmp_path):
    # A frame's path that is not UTF-8 reaches Python as lone surrogates (orjson, plotly's
    # engine where installed, refuses them).
    tree = [{"frame": {"name": "ROOT"}, "metrics": {}, "children": []}]
    tree[0]["children"].append({"frame": {"name": "k\udc80"}, "metrics": {"time (ns)": 10}})
    path = tmp_path / "t.hatchet"
    path.write_text(json.dumps(tree))
    p = cli(path, "--html", tmp_path / "p.html")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "k\\udc80" in (tmp_path / "p.html").read_text()


def test_a_page_draws_at_most_its_largest_call_sites_and_ranks_and_counts_the_rest(tmp_path):
    summary = summarized(tmp_path, HOOK)
    site = summary["proton_callsites"][0]
    summary["proton_callsites"] = [
        {**site, "frames": [["mine.py", i, "f", 1], ["mine.py", i, "g", 1]], "ms": 1 / (i + 1)}
        for i in range(5000)
    ]
    summary["proton_ranks"] = [
        {"rank": r, "gpu_time_ms": 1.0, "kernel_count": 1, "files": []} for r in range(5000)
    ]
    html = drawn(summary)
    assert len(html) < 6 * 2**20  # 4.6 MiB of plotly.js, and 200 of each drawn
    assert "and 4800 more call sites in summary.json" in html
    assert "and 4800 more ranks in summary.json" in html


@pytest.mark.parametrize("module", ["summary/text.py", "summary/page.py"])
def test_renderers_read_records_and_parse_no_text(module):
    # The text table, Markdown and page draw what the records hold: none imports the
    # comparison's or the views' logic, uses re, or splits a call site's text apart.
    tree = ast.parse((ROOT / module).read_text())
    imported = {
        alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
    }
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"re", "summary.compare", "summary.views", "summary.run"} - {
        "summary.run" if module.endswith("text.py") else ""
    }
    calls = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    assert not calls & {"split", "rsplit", "partition", "rpartition", "findall", "sub"}


@pytest.mark.parametrize("run_", RUNS, ids=[str(p.relative_to(FIXTURES)) for p in RUNS])
def test_summary_json_reads_back_into_the_records_it_was_written_from(run_, tmp_path):
    done, problem, _ = ph.summaries([str(run_)])
    written = ph.to_json(done[0].summary)
    assert problem is None and ph.to_json(from_json(written)) == written


def test_a_saved_summary_draws_its_page_and_compares(tmp_path):
    saved = tmp_path / "summary.json"
    assert ph.main([str(HOOK), "-o", str(saved)]) == 0
    p = cli(saved, "--html", tmp_path / "p.html", "--table")
    assert p.returncode == 0 and p.stdout == cli(HOOK, "--table").stdout
    assert 'id="callsites"' in (tmp_path / "p.html").read_text()
    p = cli(HOOK, "--diff", saved, "--table")
    assert p.returncode == 0 and "; no change beyond the noise" in p.stdout.splitlines()[0]
    assert cli(saved, "--folded", tmp_path / "f.txt").returncode == 0
    assert (tmp_path / "f.txt").read_text() == text.folded_stacks(
        ph.summaries([str(HOOK)])[0][0].summary
    )
    (tmp_path / "bad.json").write_text("[1]")
    p = cli(tmp_path / "bad.json")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not a summary.json" in p.stderr


def test_a_saved_comparison_and_run_of_trials_keep_what_they_hold(tmp_path):
    edit = FIXTURES / "h100-ab-edit"
    compared, trials = tmp_path / "compared.json", tmp_path / "trials.json"
    assert ph.main([str(edit / "now"), "--diff", str(edit / "base"), "-o", str(compared)]) == 0
    assert ph.main([str(FIXTURES / "h200-trials" / "base"), "-o", str(trials)]) == 0
    again = tmp_path / "again.json"
    assert cli(compared, "-o", again, "--html", tmp_path / "p.html").returncode == 0
    first, second = json.loads(compared.read_text()), json.loads(again.read_text())
    assert second["proton_diff"] == first["proton_diff"]
    assert second["headline"] == first["headline"] and "slower" in second["headline"]
    assert "slower" in (tmp_path / "p.html").read_text()
    assert (
        json.loads(cli(trials).stdout)["proton_trials"]
        == json.loads(trials.read_text())["proton_trials"]
    )
    for args in ((trials, "--diff", FIXTURES / "h200-trials" / "slower"), (HOOK, "--diff", trials)):
        p = cli(*args)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert "is a run of trials, saved" in p.stderr

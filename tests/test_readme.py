"""The README's quoted output and figures, tied to what they quote: the committed
captures, the committed parse-speed results, and the softmax.py those captures ran."""

import ast
import json
import re

import pytest
from conftest import ROOT

import parse_hatchet as ph
import softmax as sm

README = (ROOT / "README.md").read_text()
FIXTURES = ROOT / "tests" / "fixtures"
QUOTES = re.findall(r"<!-- capture: (\S+) --top (\d+) -->\n```\n(.*?)```", README, re.S)


def test_every_capture_quote_is_found():
    assert len(QUOTES) == 5


@pytest.mark.parametrize("name, top, block", QUOTES, ids=[q[0] for q in QUOTES])
def test_quoted_tables_are_what_parse_hatchet_prints_for_the_capture(name, top, block):
    summary, _, problem = ph.summarize(ph.find_captures([FIXTURES / name]), str(FIXTURES))
    assert problem is None
    assert block in ph.table(summary, int(top))


def enclosing_functions(path):
    """line -> the name of the innermost function holding it (<module> outside any)."""
    where = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            for line in range(node.lineno, node.end_lineno + 1):
                if node.lineno >= where.get(line, ("", 0))[1]:
                    where[line] = (node.name, node.lineno)
    return lambda line: where.get(line, ("<module>", 0))[0]


def test_the_captures_frames_are_lines_of_this_softmax_py():
    # When softmax.py changes under them, the captures (and the README) are out of date.
    function_at = enclosing_functions(ROOT / "softmax.py")
    lines = (ROOT / "softmax.py").read_text().splitlines()
    frames = set()
    for path in [*FIXTURES.glob("h200-softmax-python.*"), *FIXTURES.glob("h200-two-ranks*/*")]:
        frames |= set(re.findall(r"softmax\.py:(\d+)@([\w<>]+)", path.read_text()))
    assert frames
    for line, func in frames:
        assert function_at(int(line)) == func, f"softmax.py:{line} is not in {func}"
        if func == "softmax":  # the launch site: the compiled kernel's call
            assert "run(out, x, " in lines[int(line) - 1]


def test_the_run_output_is_what_make_run_prints(capsys):
    block = re.search(r"Output\n\(`make run` on a CPU machine\):\n\n```\n(.*?)```", README, re.S)
    assert sm.main([]) == 0
    assert capsys.readouterr().out == block[1]


def test_the_parse_speed_table_is_the_committed_results():
    results = (ROOT / "bench" / "results" / "parse-speed.txt").read_text().splitlines()
    for line in results:
        shape, size, unit, mib, load, parse, ratio = re.match(
            r"parse_speed: (.*), (\d+) (nodes|events), ([\d.]+) MiB: json.load ([\d.]+) s, "
            r"parse_hatchet.py ([\d.]+) s, ratio ([\d.]+)",
            line,
        ).groups()
        row = f"| {shape} | {int(size):,} {unit}, {mib} MiB | {load} s | {parse} s | {ratio} |"
        assert row in README
        assert float(ratio) <= 2.0


def test_the_performance_figures_are_the_committed_benchmark():
    results = json.loads((ROOT / "bench" / "results" / "nvidia-h200.json").read_text())
    host = results["host_us"]
    assert f"| us | {host['softmax.py']:.1f} | {host['torch.softmax']:.1f} |" in README
    vs_torch = results["host_vs_torch"]
    assert f"| vs torch.softmax | {vs_torch['softmax.py']:.2f}x | 1.00x |" in README

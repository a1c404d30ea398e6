"""compare.md (--markdown) rendered as GitHub renders it: each row's name reads as it is."""

import json
import sys
from html.parser import HTMLParser

from markdown_it import MarkdownIt

from conftest import ROOT, run
from test_compare import MAIN, capture

AB_EDIT = ROOT / "tests" / "fixtures" / "h100-ab-edit"


class Cells(HTMLParser):
    """The text a reader sees in each table cell (td) and in the bold first line."""

    def __init__(self):
        super().__init__()
        self.cells, self.bold, self.inside = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "strong") and self.inside is None:
            self.inside = self.cells if tag == "td" else self.bold
            self.inside.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "strong"):
            self.inside = None

    def handle_data(self, data):
        if self.inside is not None:
            self.inside[-1] += data


def rendered(now, base, tmp_path):
    """The comparison's JSON, and its Markdown's cells and bold text as GitHub shows them."""
    md, out = tmp_path / "compare.md", tmp_path / "s.json"
    p = run(sys.executable, ROOT / "parse_hatchet.py", now, "--diff", base, "-o", out,
            "--markdown", md)  # fmt: skip
    assert p.returncode == 0, p.stderr
    cells = Cells()
    cells.feed(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md.read_text()))
    return json.loads(out.read_text())["proton_diff"], cells


def rows(d):
    return [d["total"], *d["kernels"], *d["callsites"]]


def test_each_row_of_a_make_ab_run_renders_as_its_name(tmp_path):
    d, cells = rendered(AB_EDIT / "now", AB_EDIT / "base", tmp_path)
    names = [r.get("readable_name") or r["callsite"] for r in rows(d)]
    assert any("<module>" in n for n in names) and any("_" in n for n in names)
    assert cells.cells[::7] == names and cells.bold == [d["first_line"]]


def test_markup_in_names_survives_and_new_and_gone_rows_are_listed(tmp_path):
    site = [*MAIN, "/workspace/mine.py:40@<lambda>", "/workspace/mine.py:50@__call__"]
    odd = "k<T*> | `x` __y__ [z](w) &amp; ~~s~~ \\*"
    base = capture(tmp_path / "base.hatchet", (site, odd, 1.0), (MAIN, "gone_k", 0.2))
    now = capture(tmp_path / "now.hatchet", (site, odd, 1.0), (MAIN, "new_k", 0.3))
    d, cells = rendered(now, base, tmp_path)
    names = [r.get("readable_name") or r["callsite"] for r in rows(d)]
    assert odd in names and any("<lambda> > " in n and "__call__" in n for n in names)
    assert cells.cells[::7] == names
    verdicts = dict(zip(cells.cells[::7], cells.cells[6::7], strict=True))
    assert verdicts["gone_k"] == "gone" and verdicts["new_k"] == "new"

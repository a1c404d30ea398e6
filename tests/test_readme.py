"""The README and docs/: quoted output tied to the committed captures it quotes (compared
against the capture alone, never against today's source lines), links that lead somewhere,
and a README short enough to read: make profile's output on its first screen."""

import re

import pytest
from conftest import ROOT

import parse_hatchet as ph

README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIXTURES = ROOT / "tests" / "fixtures"
QUOTE = re.compile(r"<!-- capture: (\S+) --top (\d+) -->\n```\n(.*?)```", re.S)
QUOTES = [(page, *q) for page in PAGES for q in QUOTE.findall(page.read_text())]


def test_the_readme_is_short_and_shows_make_profile_on_its_first_screen():
    lines = README.splitlines()
    assert len(lines) <= 250
    first = "\n".join(lines[:80])
    assert "make profile" in first and "<!-- capture: " in first and "```" in first
    assert "## Profile your own kernel" in README and (ROOT / "LICENSE").is_file()


def test_every_capture_quote_is_found():
    assert {q[1] for q in QUOTES} >= {"h200-softmax-python.hatchet", "h200-two-ranks"}


@pytest.mark.parametrize(
    "page, name, top, block", QUOTES, ids=[f"{q[0].name}:{q[1]}" for q in QUOTES]
)
def test_quoted_tables_are_what_parse_hatchet_prints_for_the_capture(page, name, top, block):
    summary, _, problem = ph.summarize(ph.find_captures([FIXTURES / name]), str(FIXTURES))
    assert problem is None
    assert block in ph.table(summary, int(top)), f"{page.name} quotes {name} wrongly"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_lead_to_files(page):
    for target in re.findall(r"\]\(([\w./-]*[A-Za-z][\w./-]*)(?:#[\w-]*)?\)", page.read_text()):
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"

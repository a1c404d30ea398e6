"""The README and docs/: quoted output tied to the committed captures it quotes (compared
against the capture alone, never against today's source lines), links that lead somewhere,
and a README short enough to read: make profile's output and a compare verdict on its
first screen."""

import json
import re
import shutil
import sys

import pytest

import parse_hatchet as ph
from conftest import ROOT, example_files, run
from summary import text

README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIXTURES = ROOT / "tests" / "fixtures"
QUOTE = re.compile(r"<!-- capture: (\S+) --top (\d+) -->\n```\n(.*?)```", re.S)
QUOTES = [(page, *q) for page in PAGES for q in QUOTE.findall(page.read_text())]
PAGE = re.compile(r"<!-- page: (\S+) -->\n!\[[^\]]+\]\((\S+\.png)\)")
COMPARE = re.compile(
    r"<!-- compare: (\S+) against (\S+) --top (\d+) --fail-above (\d+) -->\n```\n(.*?)```", re.S
)
COMPARES = [(page, c) for page in PAGES for c in COMPARE.findall(page.read_text())]
# A copy of the example's files may delete them: links into them may dangle there.
EXAMPLE = {ROOT / path for path in example_files()}


def test_the_readme_is_short_and_shows_make_profile_on_its_first_screen():
    lines = README.splitlines()
    assert len(lines) <= 250
    first = "\n".join(lines[:80])
    assert "make profile" in first and "<!-- capture: " in first and "<!-- compare: " in first
    assert "## Profile your own kernel" in README and (ROOT / "LICENSE").is_file()


def test_every_capture_quote_is_found():
    assert {q[1] for q in QUOTES} >= {"h200-softmax-python-hook.hatchet", "h200-two-ranks"}


@pytest.mark.parametrize(
    "page, name, top, block", QUOTES, ids=[f"{q[0].name}:{q[1]}" for q in QUOTES]
)
def test_quoted_tables_are_what_parse_hatchet_prints_for_the_capture(page, name, top, block):
    (done, *_), problem, _ = ph.summaries([str(FIXTURES / name)])
    summary = done.summary
    assert problem is None
    assert block in text.table(summary, int(top)), f"{page.name} quotes {name} wrongly"


@pytest.mark.parametrize("page, quote", COMPARES, ids=[f"{c[0].name}:{c[1][0]}" for c in COMPARES])
def test_the_quoted_verdict_is_what_make_compare_prints_for_its_two_runs(page, quote, tmp_path):
    # make compare FAIL_ABOVE=PCT of two run folders of trials, as make profile leaves them.
    now, before, top, pct, block = quote
    runs = tmp_path / "profiling_results" / "profile"
    shutil.copytree(FIXTURES / before, runs / "previous")
    shutil.copytree(FIXTURES / now, runs / "latest")
    p = run(
        sys.executable,
        ROOT / "parse_hatchet.py",
        "profiling_results/profile/latest",
        "--diff",
        "profiling_results/profile/previous",
        "--table",
        "--top",
        top,
        "--fail-above",
        pct,
        cwd=tmp_path,
    )
    assert p.returncode == 3 and p.stdout.startswith(block), f"{page.name}: {p.stdout}"


def test_the_first_image_is_the_page_of_the_capture_its_marker_names():
    # bench/page_load.py --screenshot writes the fixture and the page's headline into the PNG.
    from PIL import Image

    ((fixture, image),) = PAGE.findall(README)
    assert README.index("![") == README.index("<!-- page: ") + len(f"<!-- page: {fixture} -->\n")
    assert "bench/page_load.py --screenshot" in README and "--html FILE" in README
    shot = Image.open(ROOT / image)
    assert shot.text["page"] == fixture and 800 <= shot.width <= 1600
    assert (ROOT / image).stat().st_size < 2**19  # a README's picture, not a page's weight
    summary = run(sys.executable, ROOT / "parse_hatchet.py", ROOT / fixture)
    assert shot.text["headline"] == json.loads(summary.stdout).get("headline", "")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_lead_to_files(page):
    for target in re.findall(r"\]\(([\w./-]*[A-Za-z][\w./-]*)(?:#[\w-]*)?\)", page.read_text()):
        path = (page.parent / target).resolve()
        gone = any(path == listed or listed in path.parents for listed in EXAMPLE)
        assert path.exists() or gone, f"{page.name} links to missing {target}"

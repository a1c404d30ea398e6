"""The page as a user sees it: real fixtures' pages opened from the file in headless
Chromium (Debian's chromium and chromium-driver, driven through Selenium with the
system's chromedriver, so that nothing is downloaded). Elsewhere than CI, without the
browser, the tests skip in one line; in CI (.ci/run installs it) a skip is a failure."""

import io
import json
import os
import shutil

import pytest

from summary.page import TOP
from test_page import FIXTURES, drawn, summarized

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TRIALS, AB = FIXTURES / "h200-trials", FIXTURES / "h100-ab-edit"
PAGES = {
    "hook": [FIXTURES / "h200-softmax-python-hook.hatchet"],
    "autotuned": [FIXTURES / "h200-autotuned.hatchet.gz"],
    "trace": [FIXTURES / "h200-softmax-python.chrome_trace"],  # sites of 1 and of 20 launches
    "two-ranks": [FIXTURES / "h200-two-ranks"],
    "ranked-trace": [FIXTURES / "h200-two-ranks-trace"],
    "trials-compared": [TRIALS / "slower", "--diff", TRIALS / "base", "--fail-above", "5"],
    "ab-compared": [AB / "now", "--diff", AB / "base", "--fail-above", "5"],
}
FOLD = 900  # the window's height: what a user sees before scrolling
# A page's own file and what it makes of itself; anything else left the file.
LOCAL = ("file:", "data:", "blob:", "about:")


@pytest.fixture(scope="module")
def browser():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        why = f"no {', '.join(missing)}: apt-get install chromium chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the page's browser test cannot run in CI: {why}")
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def opened(driver, path):
    """Opens the page at path and waits until plotly has drawn every figure on it."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.as_uri())
    drawn = "return [...document.querySelectorAll('.plotly-graph-div')].every(d => d._fullLayout)"
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(drawn))


def tops(driver, selector):
    """The top of each element the CSS selector finds, in pixels from the page's top."""
    script = "return [...document.querySelectorAll(arguments[0])].map(e => e.getBoundingClientRect().top)"
    return driver.execute_script(script, selector)


def sizes(driver, selector):
    """The width and height of each element the CSS selector finds."""
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; })"
    )
    return driver.execute_script(script, selector)


@pytest.mark.parametrize("args", PAGES.values(), ids=PAGES.keys())
def test_the_page_of_a_real_run_is_drawn_offline_with_no_error(browser, tmp_path, args):
    from PIL import Image

    summary = summarized(tmp_path, *args)
    (tmp_path / "report.html").write_text(drawn(summary))
    browser.get_log("browser"), browser.get_log("performance")  # another page's, dropped
    opened(browser, tmp_path / "report.html")
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    requests = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    urls = [
        m["params"]["request"]["url"]
        for m in requests
        if m["method"] == "Network.requestWillBeSent"
    ]
    assert urls and all(url.startswith(LOCAL) for url in urls), urls
    headline = browser.find_element("id", "headline").text
    assert headline == summary["headline"]
    check_first_screen(browser, summary)
    bars = sizes(browser, "#kernels .barlayer .point path")
    assert len(bars) >= min(len(summary["proton_kernels"]), TOP)
    assert max(w for w, _ in bars) > 100 and all(h > 5 for _, h in bars)
    frames = sizes(browser, "#callsites g.slice")
    assert len(frames) > len(summary["proton_callsites"]) and all(w * h > 0 for w, h in frames)
    shot = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    assert len(shot.getcolors(maxcolors=2**24)) > 16


def check_first_screen(browser, summary):
    """Above the fold: the headline, and the kernels with their percent of peak, or for a
    comparison its verdict and figure; aorta's keys after them."""
    browser.execute_script("window.scrollTo(0, 0)")
    (headline,) = tops(browser, "#headline")
    (facts,) = tops(browser, "#facts")
    first = "#compare" if "proton_diff" in summary else "#kernels"
    (figure,) = tops(browser, f"{first} .cartesianlayer")
    assert headline < figure < FOLD - 150 and figure < facts  # a few rows of it shown
    if "proton_diff" in summary:
        assert all(top < FOLD for top in tops(browser, ".gate"))
        return
    rows = tops(browser, "#kernels .barlayer .point path")
    assert min(rows) < FOLD
    if any(k.get("pct_of_peak_bw") for k in summary["proton_kernels"][:3]):
        (peak,) = [
            e
            for e in browser.find_elements("css selector", "#kernels .annotation-text")
            if e.text == "% of peak GB/s"
        ]
        assert peak.rect["y"] < FOLD
    tuned = [k for k in summary["proton_kernels"] if k["total_ms"] == k.get("tuning_ms")]
    assert not any(summary["headline"].startswith(k["readable_name"]) for k in tuned)
    ticks = tops(browser, "#timeline .scatterlayer .point")  # a one-launch call site's mark
    assert len(ticks) == sum(e["launches"] == 1 for e in summary.get("proton_timeline", []))

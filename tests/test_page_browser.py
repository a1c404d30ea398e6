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
TRIALS = FIXTURES / "h200-trials"
PAGES = {
    "hook": [FIXTURES / "h200-softmax-python-hook.hatchet"],
    "autotuned": [FIXTURES / "h200-autotuned.hatchet.gz"],
    "ranked-trace": [FIXTURES / "h200-two-ranks-trace"],
    "trials-compared": [TRIALS / "slower", "--diff", TRIALS / "base", "--fail-above", "5"],
}
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
    bars = sizes(browser, "#kernels .barlayer .point path")
    assert len(bars) >= min(len(summary["proton_kernels"]), TOP)
    assert max(w for w, _ in bars) > 100 and all(h > 5 for _, h in bars)
    frames = sizes(browser, "#callsites g.slice")
    assert len(frames) > len(summary["proton_callsites"]) and all(w * h > 0 for w, h in frames)
    shot = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    assert len(shot.getcolors(maxcolors=2**24)) > 16

"""What the page (parse_hatchet.py --html) costs: the seconds it adds to a summary on the
CPU (whole processes with and without --html, interleaved), its size, and how long
headless Chromium takes to open it until every figure is drawn; on the README's capture
and on a generated trace of 200 call sites and 200,000 launches.

    python bench/page_load.py        (needs Debian's chromium and chromium-driver)
    python bench/page_load.py --screenshot

Prints a line for each capture and writes the lines to bench/page-load.txt. With
--screenshot, instead remakes docs/report.png, the README's picture of the page of the
capture its `<!-- page: FIXTURE -->` marker names, the fixture and the page's headline
written into the PNG, where tests/test_readme.py reads them.
"""

import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from parse_speed import loop_trace  # noqa: E402

RESULTS = HERE / "page-load.txt"
SCREENSHOT = ROOT / "docs" / "report.png"
WIDTH = 1100  # pixels: the page's figures as a README shows them, near full size
MARKER = re.compile(r"<!-- page: (\S+) -->")
REPEATS = 7
# Resolves once plotly has drawn every figure, with the milliseconds since navigation began.
DRAWN = """const done = arguments[arguments.length - 1];
const figures = () => [...document.querySelectorAll('.plotly-graph-div')];
(function poll() {
  if (figures().length && figures().every(d => d._fullLayout)) done(performance.now());
  else requestAnimationFrame(poll);
})();"""


def wall(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def added_seconds(capture, folder):
    """Medians of REPEATS interleaved pairs: the summary alone, and with its page."""
    base = [sys.executable, str(ROOT / "parse_hatchet.py"), str(capture), "-o", f"{folder}/s.json"]
    alone, paged = [], []
    for _ in range(REPEATS):
        alone.append(wall(base))
        paged.append(wall([*base, "--html", f"{folder}/report.html"]))
    return statistics.median(alone), statistics.median(paged)


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def load_ms(driver, page):
    """Medians of REPEATS loads of page, from navigation until every figure is drawn."""
    times = []
    for _ in range(REPEATS):
        driver.get("about:blank")
        driver.get(page.as_uri())
        times.append(driver.execute_async_script(DRAWN))
    return statistics.median(times)


def screenshot(driver):
    """docs/report.png: the page of the README's fixture as Chromium draws it, made in a
    run folder of its own at a neutral path (the page names its folder), removed after."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    fixture = MARKER.search((ROOT / "README.md").read_text())[1]
    run = Path("/tmp/run")
    run.mkdir()  # FileExistsError where one is there already: never another's folder
    try:
        shutil.copy(ROOT / fixture, run)
        cmd = [sys.executable, str(ROOT / "parse_hatchet.py"), str(run), "-o", str(run / "s.json")]
        subprocess.run([*cmd, "--html", str(run / "report.html")], check=True)
        headline = json.loads((run / "s.json").read_text()).get("headline", "")
        driver.set_window_size(WIDTH, 4000)  # taller than the page: drawn once, then cut
        driver.get((run / "report.html").as_uri())
        driver.execute_async_script(DRAWN)
        height = driver.execute_script("return document.body.getBoundingClientRect().bottom + 16")
        png = Image.open(io.BytesIO(driver.get_screenshot_as_png())).crop(
            (0, 0, WIDTH, int(height))
        )
    finally:
        shutil.rmtree(run)
    info = PngInfo()
    info.add_text("page", fixture)
    info.add_text("headline", headline)
    png.convert("RGB").save(SCREENSHOT, pnginfo=info, optimize=True)
    print(f"{SCREENSHOT.relative_to(ROOT)}: {png.size[0]}x{png.size[1]}, the page of {fixture}")


def main():
    if sys.argv[1:] == ["--screenshot"]:
        driver = browser()
        try:
            return screenshot(driver)
        finally:
            driver.quit()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "loop.chrome_trace"
        trace.write_text(json.dumps(loop_trace(200, 200_000)))
        captures = {
            "h200-softmax-python-hook.hatchet": ROOT
            / "tests/fixtures/h200-softmax-python-hook.hatchet",
            "loop trace, 200 sites, 200,000 launches": trace,
        }
        driver, lines = browser(), []
        driver.set_script_timeout(120)
        try:
            for name, capture in captures.items():
                folder = Path(tmp) / str(len(lines))
                folder.mkdir()
                alone, paged = added_seconds(capture, folder)
                size = (folder / "report.html").stat().st_size / 2**20
                loaded = load_ms(driver, folder / "report.html")
                lines.append(
                    f"{name}: summary {alone:.2f} s, with the page {paged:.2f} s "
                    f"(+{paged - alone:.2f} s); page {size:.1f} MiB; "
                    f"drawn in Chromium in {loaded / 1e3:.2f} s"
                )
                print(lines[-1], flush=True)
        finally:
            driver.quit()
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""The committed benchmark results: the keys the sweep promises, and a docs/performance.md
whose generated part is exactly what bench/report.py makes of them."""

import json
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402

RESULTS = report.whole_runs()
CANDIDATES = {"softmax.py", "torch.softmax", "torch.compile", "liger", "copy"}
OPTIONAL = {"quack"}  # a peer only where asked for (make bench QUACK=1)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_results_hold_the_promised_keys(path):
    r = json.loads(path.read_text())
    assert {"device", "torch", "triton", "points", "host_us", "host_vs_torch", "profiling"} <= set(
        r
    )
    assert set(r["host_us"]) - {"kernel[grid]", "compiled[grid]", "op"} == CANDIDATES
    assert set(r["host_vs_torch"]) == set(r["host_us"]) and r["host_vs_torch"]["torch.softmax"] == 1
    assert {"run_wall_s", "profile_wall_s", "profile_vs_run", "proton_kernel_us",
            "device_us"} <= set(r["profiling"])  # fmt: skip
    for p in r["points"]:
        assert p["correct"] and p["path"] in ("fused", "tiles", "lagged tiles")
        assert CANDIDATES <= set(p["device_us"]) | set(p["notes"]) <= CANDIDATES | OPTIONAL
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

"""make ceiling (bench/ceiling.py), on CPU: the file it writes, what it says without a GPU
or a folder to write in; the summary's use of it is tested with the summary's."""

import importlib.util
import json

import pytest

from conftest import ROOT


@pytest.fixture
def ceiling():
    """bench/ceiling.py, loaded as a test runs: importing Triton at collection would settle
    its interpreter before the example's tests choose it."""
    spec = importlib.util.spec_from_file_location("ceiling", ROOT / "bench" / "ceiling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CEILINGS = sorted((ROOT / "tests" / "fixtures").glob("*-ceiling.json"))  # make ceiling's own


@pytest.mark.parametrize("path", CEILINGS, ids=lambda p: p.name)
def test_a_recorded_ceiling_holds_each_size_s_rates(path):
    r = json.loads(path.read_text())
    assert set(r) == {
        "device",
        "arch",
        "sm_count",
        "memory_bus_bits",
        "l2_bytes",
        "triton",
        "torch",
        "sizes",
    }
    assert isinstance(r["device"], str) and isinstance(r["arch"], str)  # as Proton names them
    assert r["sm_count"] > 0 and r["l2_bytes"] > 0
    sizes = [s["bytes"] for s in r["sizes"]]
    assert sizes == [2**k for k in range(20, 20 + len(sizes))]  # 1 MiB up, none skipped
    for s in r["sizes"]:
        assert set(s) == {"bytes", "copy_gbps", "read_gbps"}
        assert s["copy_gbps"] > 0 and s["read_gbps"] > 0


def test_ceiling_writes_the_measurement_under_out(ceiling, tmp_path, monkeypatch, capsys):
    recorded = json.loads(CEILINGS[0].read_text())
    monkeypatch.setattr(ceiling.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ceiling, "measure", lambda: recorded)
    assert ceiling.main(["--out", str(tmp_path)]) == 0
    written = tmp_path / "ceiling" / f"{ceiling.slug(recorded['device'])}.json"
    assert json.loads(written.read_text()) == recorded
    assert [p.name for p in written.parent.iterdir()] == [written.name]  # no temporary left
    assert f"wrote {written}" in capsys.readouterr().out


def test_ceiling_without_a_gpu_says_so_in_one_line(ceiling, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ceiling.torch.cuda, "is_available", lambda: False)
    assert ceiling.main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "ceiling").exists()


def test_ceiling_names_a_folder_it_cannot_write(ceiling, tmp_path, monkeypatch, capsys):
    recorded = json.loads(CEILINGS[0].read_text())
    monkeypatch.setattr(ceiling.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ceiling, "measure", lambda: recorded)
    (tmp_path / "ceiling").write_text("a file where the folder goes")
    assert ceiling.main(["--out", str(tmp_path)]) == 2
    assert "ceiling: error: cannot write" in capsys.readouterr().err


def test_the_documented_headline_of_the_h100_run_with_its_ceiling_is_what_the_summary_says():
    import re
    import subprocess
    import sys

    doc = (ROOT / "docs" / "summary.md").read_text()
    name, ceiling_name, quoted = re.search(
        r"<!-- headline: (\S+) --ceiling (\S+) -->\n\s*```\n\s*(.*?)\n", doc
    ).groups()
    fixtures = ROOT / "tests" / "fixtures"
    argv = [sys.executable, ROOT / "parse_hatchet.py", fixtures / name]
    p = subprocess.run(
        [*argv, "--ceiling", fixtures / ceiling_name], capture_output=True, text=True
    )
    assert p.returncode == 0 and json.loads(p.stdout)["headline"] == quoted

"""aorta's checks of an example directory (ROCm/aorta's tests/test_examples.py), run on this
repository: aorta is not on PyPI, so they are carried here, rewritten without its loader.

The payload exit convention is the one that matters most: Triton 3.6's Proton command line
catches Exception, not SystemExit, so a script that raises SystemExit(0) on success exits 0
having written no profile."""

import ast
import subprocess

import pytest
import yaml

from conftest import ROOT
from summary import recipe as rc

# The files a payload is, as aorta selects them: every top-level *.py (each a script, an
# example may be deleted or added), and the tests' own payloads.
SCRIPTS = sorted([*ROOT.glob("*.py"), *(ROOT / "tests" / "payloads").glob("*.py")])
IDS = [str(path.relative_to(ROOT)) for path in SCRIPTS]
# Spelled in pieces, so that this file does not hold them itself.
HOST_PATHS = ("/" + "home/", "/" + "apps/")


def tracked_files():
    """The files git tracks; outside a git checkout (a container's copy), every file but
    the local environment's and the results'."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
        ).stdout
        return [ROOT / name for name in listed.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skipped = {".git", ".venv", "profiling_results", "__pycache__", ".pytest_cache"}
        return [
            path
            for path in ROOT.rglob("*")
            if path.is_file() and not skipped & set(path.relative_to(ROOT).parts)
        ]


def test_no_file_carries_a_host_path():
    # An example must run on someone else's machine: /workspace/... for neutral paths.
    found = [
        f"{path.relative_to(ROOT)} ({needle})"
        for path in tracked_files()
        if path.is_file()
        for needle in HOST_PATHS
        if needle.encode() in path.read_bytes()
    ]
    assert not found, f"host paths in: {', '.join(found)}"


def test_the_readme_names_the_collector():
    assert "proton" in (ROOT / "README.md").read_text(encoding="utf-8").lower()


def test_the_recipe_is_a_probe_that_collects_proton_only():
    data = yaml.safe_load((ROOT / "recipe.yaml").read_text(encoding="utf-8"))
    assert data["mode"] == "probe"
    assert list(data["collect"]) == ["proton"]
    assert data["collect"]["proton"], "collect.proton sets no options"
    rc.options(data)  # and aorta would accept them


def test_there_is_a_payload():
    assert any(path.parent == ROOT for path in SCRIPTS)


def main_guard(path):
    """The statements under `if __name__ == "__main__":`, or []."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "__name__" in ast.dump(node.test):
            return node.body
    return []


def exit_of_main_guard(path, returned):
    """Run only the guard, with nothing defined but a main() that returns `returned` (so
    that no import of the script runs, and this stays a CPU test); the SystemExit code, or
    None when the block returns normally."""
    module = ast.Module(body=main_guard(path), type_ignores=[])
    ast.fix_missing_locations(module)
    try:
        exec(compile(module, str(path), "exec"), {"main": lambda: returned})
    except SystemExit as e:
        return 1 if e.code is None else e.code
    return None


@pytest.mark.parametrize("path", SCRIPTS, ids=IDS)
def test_every_script_has_a_main_guard(path):
    assert main_guard(path), f'{path.name} has no if __name__ == "__main__": block'


@pytest.mark.parametrize("path", SCRIPTS, ids=IDS)
def test_success_returns_normally(path):
    assert exit_of_main_guard(path, 0) is None, f"{path.name} raises SystemExit on success"


@pytest.mark.parametrize("path", SCRIPTS, ids=IDS)
@pytest.mark.parametrize("code", [1, 2])
def test_failure_exits_with_main_s_status(path, code):
    assert exit_of_main_guard(path, code) == code

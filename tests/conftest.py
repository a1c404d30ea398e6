import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def example_files():
    """The example's files: .ci/example, or, in a copy that deleted the list with them, the
    README's quote of it."""
    listed = ROOT / ".ci" / "example"
    if listed.exists():
        return listed.read_text().split()
    quote = r"<!-- example files: \.ci/example -->\n```\n(.*?)```"
    found = re.search(quote, (ROOT / "README.md").read_text(), re.S)
    return found[1].split() if found else []


# True when kernels will run on a GPU; on CPU scripts fall back to Triton's interpreter.
HAS_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


def pytest_xdist_auto_num_workers(config):
    """make test's -n auto: a worker per core on CPU, but one run in this process where a
    GPU is, whose tests time kernels that workers sharing it would slow."""
    return 0 if HAS_GPU else None


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU; run `make test-gpu` on one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run(*args, env=None, cwd=ROOT):
    """Run a command the way a user would, returning the finished process."""
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def recipe(tmp_path, trials=None, proton="{}"):
    """The shipped recipe with proton's keys (YAML) set, in a file of its own."""
    data = yaml.safe_load((ROOT / "recipe.yaml").read_text())
    data["collect"]["proton"].update(yaml.safe_load(proton))
    data["trials"] = data["trials"] if trials is None else trials
    path = tmp_path / f"recipe-{len(list(tmp_path.glob('recipe-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path

"""The tooling stands apart from the example: it names no example script beyond SCRIPT's
default, and no tooling test imports or runs one, so that a copy made for another
kernel can delete softmax.py and its files without breaking anything else."""

import re

from conftest import ROOT

TOOLING = ["Makefile", "profile.sh", "recipe.py", "recipe.yaml", "proton_launch.py",
           "parse_hatchet.py", "Dockerfile", ".ci/run"]  # fmt: skip
EXAMPLE = re.compile(r"\bsoftmax\.py\b|\blong_rows\b|^\s*(import|from)\s+softmax\b", re.M)


def test_the_tooling_names_no_example():
    for name in TOOLING:
        text = (ROOT / name).read_text()
        if name == "Makefile":  # SCRIPT's default runs the example
            text = text.replace("SCRIPT ?= softmax.py\n", "")
        if name == ".ci/run":  # it deletes and edits the example, to check the split
            continue
        assert not EXAMPLE.search(text), f"{name} names the example"


def test_the_tooling_tests_neither_import_nor_run_the_example():
    example = {"test_softmax", "test_long_rows", "test_bench", "test_tooling"}
    for path in (ROOT / "tests").rglob("*.py"):
        if path.stem in example or path.stem.startswith(("test_softmax", "softmax_")):
            continue
        text = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(softmax|long_rows)\b", text, re.M), path
        # Captures' frames name softmax.py as data; a command would name it alone.
        assert not re.search(r"""["'](\./)?(softmax|long_rows)\.py["']|SCRIPT=softmax""", text), (
            path
        )

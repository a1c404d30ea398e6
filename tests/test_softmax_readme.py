"""The example's output as the README quotes it: what `make run` prints on a CPU machine."""

import re

import softmax as sm
from conftest import ROOT


def test_the_run_output_is_what_make_run_prints(capsys):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"Output \(`make run` on a CPU machine\):\n\n```\n(.*?)```", readme, re.S)
    assert sm.main([]) == 0
    assert capsys.readouterr().out == block[1]

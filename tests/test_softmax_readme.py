"""The example's output as the README quotes it: what `make run` prints on a CPU machine."""

import re

import softmax as sm
from conftest import ROOT

# The error's last digits depend on the CPU's vector width (torch picks its kernels by it):
# the README quotes one machine's figure, and any figure under the check's tolerance reads.
ERR = re.compile(r"max_abs_err=\S+")


def test_the_run_output_is_what_make_run_prints(capsys):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"Output \(`make run` on a CPU machine\):\n\n```\n(.*?)```", readme, re.S)
    assert sm.main([]) == 0
    out = capsys.readouterr().out
    assert ERR.sub("max_abs_err=?", out) == ERR.sub("max_abs_err=?", block[1])
    assert float(ERR.search(out)[0].split("=")[1]) < 1e-6

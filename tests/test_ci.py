"""make ab as a CI job runs it: ONLY's kernels judged alone, traces compared only across
--any-device, the workload payload, bench/gpu.sh's ci step, and docs/ci.md's workflow run
step by step against a pull request in a git checkout of its own, through the fake Proton."""

import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

import test_ab
from conftest import HAS_GPU, ROOT, run
from summary import Refused
from summary.plan import Host, Options, make_plan, parse
from summary.recipe import load

FIXTURES = ROOT / "tests" / "fixtures"
TRIALS = FIXTURES / "h200-trials"  # the slower run's softmax_kernel is 2.3x the base's
TRACE = FIXTURES / "h200-softmax-python.chrome_trace"
WORKLOAD = ROOT / "tests" / "payloads" / "workload.py"


def cli(*args):
    return run(sys.executable, ROOT / "parse_hatchet.py", *args)


def test_only_judges_and_gates_the_kernels_it_finds_alone(tmp_path):
    out = tmp_path / "c.json"
    gated = [TRIALS / "slower", "--diff", TRIALS / "base", "--fail-above", "5", "-o", out]
    assert cli(*gated).returncode == 3  # softmax_kernel, its call site and the GPU time
    whole = json.loads(out.read_text())
    p = cli(*gated, "--only", "elementwise")
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())["proton_diff"]
    judged = [k["name"] for k in d["kernels"]]
    assert judged and all("elementwise" in name for name in judged)
    assert (
        d["rows_judged"]
        == 1 + len(judged) + len(d["callsites"])
        < whole["proton_diff"]["rows_judged"]
    )
    kernels = [k for k in whole["proton_kernels"] if "elementwise" in k["name"]]  # trial 1
    assert d["total"]["times_ms"][0] == pytest.approx(sum(k["total_ms"] for k in kernels))
    assert d["first_line"].endswith("; only kernels matching elementwise judged")
    assert len(json.loads(out.read_text())["proton_kernels"]) == len(whole["proton_kernels"])


@pytest.mark.parametrize(
    "regex, line", [("(", "is no regular expression"), ("^nothing$", "finds no kernel")]
)
def test_an_only_that_is_no_regex_or_finds_nothing_is_one_line_exit_2(regex, line):
    p = cli(TRIALS / "slower", "--diff", TRIALS / "base", "--only", regex)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1
    assert line in p.stderr


def test_an_only_that_leaves_nothing_in_common_is_named_in_the_refusal():
    # axpy_kernel runs in the autotuned capture alone: filtered, the runs share nothing.
    autotuned, hook = (
        FIXTURES / "h200-autotuned.hatchet.gz",
        FIXTURES / "h200-softmax-python-hook.hatchet",
    )
    p = cli(autotuned, "--diff", hook, "--only", "axpy")
    assert p.returncode == 2 and p.stderr.endswith("in common (with --only axpy)\n"), p.stderr


def test_make_ab_and_make_compare_pass_only_and_refuse_a_bad_one_before_any_trial(tmp_path):
    for target in ("ab", "compare"):
        p = run("make", "-n", "--no-print-directory", target, "ONLY=^tri$$", f"OUT={tmp_path}")
        assert "--only '^tri$'" in p.stdout, p.stderr
    repo = test_ab.checkout(tmp_path)
    p = test_ab.ab(tmp_path, "--rev", "HEAD", "--only", "(")
    assert p.returncode == 2 and p.stderr.startswith("profile.sh: error: --only '('")
    assert p.stderr.count("\n") == 1 and not (tmp_path / "ran.log").exists()
    assert not (repo / "profiling_results").exists()


def test_traces_compare_only_with_any_device_which_the_first_line_says(tmp_path):
    base = shutil.copy(TRACE, tmp_path)
    p = cli(TRACE, "--diff", base)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "devices unchecked: a trace records none" in p.stderr
    p = cli(TRACE, "--diff", base, "--any-device", "--table")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].endswith(
        "; devices unchecked: a trace records none (--any-device)"
    )
    assert "(devices differ)" not in p.stdout  # unchecked, not known to differ


def test_an_a_b_run_of_traces_without_any_device_is_refused_before_any_trial(tmp_path):
    host = Host(str(ROOT), str(tmp_path), "s", gpu=True, git_prefix="")
    recipe = load(str(ROOT / "recipe.yaml"), {"data": "trace"})
    argv = ["--rev", "HEAD", "--", "python3", "mine.py"]
    with pytest.raises(Refused, match="a trace records no device"):
        make_plan(parse("python3", argv), recipe, host)
    assert make_plan(parse("python3", ["--any-device", *argv]), recipe, host).trials
    assert make_plan(Options(command=("python3", "mine.py")), recipe, host).kind == "trace"


# The workload payload: torch alone.


def test_the_workload_without_a_gpu_says_so_in_one_line_and_exits_0(tmp_path):
    spec = importlib.util.spec_from_file_location("workload", WORKLOAD)
    spec.loader.exec_module(module := importlib.util.module_from_spec(spec))
    assert len(module.CONFIGS) == 3 and hasattr(module.scale_add_kernel, "configs")
    if HAS_GPU:
        return
    alone = tmp_path / "workload.py"  # no other file of the repository beside it
    shutil.copy(WORKLOAD, alone)
    p = run(sys.executable, alone, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout == ""
    assert p.stderr == "workload: needs a CUDA or ROCm GPU: nothing run\n"


@pytest.mark.gpu
def test_gpu_make_profile_of_the_workload(tmp_path):
    script = "SCRIPT=tests/payloads/workload.py"
    p = run("make", "-s", "profile", f"OUT={tmp_path}", script, "ARGS=--iters 5")
    assert p.returncode == 0 and "workload: PASS" in p.stdout, p.stdout + p.stderr
    s = json.loads((tmp_path / "profile" / "latest" / "summary.json").read_text())
    names = [k["name"] for k in s["proton_kernels"]]
    assert [n for n in names if n.startswith("triton_")], names  # Inductor's
    assert [n for n in names if re.search("gemm|Cijk|cutlass", n)], names  # cuBLAS's
    assert [n for n in names if n.startswith("scale_add_kernel")], names
    assert any(site["autotuning"] for site in s["proton_callsites"])


# bench/gpu.sh ci, through a make that records what it is asked.

FAKE_MAKE = """#!/usr/bin/env bash
echo "$*" >>"$MAKE_LOG"
for word; do [[ $word != OUT=* ]] || out=${word#OUT=}; done
mkdir -p "$out/ab/run" && ln -sfn run "$out/ab/latest"
echo "A/A of ${*: -1}" >"$out/ab/run/compare.md" && echo {} >"$out/ab/run/compare.json"
"""


def gpu_sh(tmp_path, step):
    """bench/gpu.sh STEP through FAKE_MAKE, which logs into tmp_path/make.log."""
    (bin_ := tmp_path / "bin").mkdir()
    (bin_ / "make").write_text(FAKE_MAKE)
    (bin_ / "make").chmod(0o755)
    env = {
        "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}",
        "MAKE_LOG": str(tmp_path / "make.log"),
        "OUT": str(tmp_path / "out"),
        "PARTS": str(tmp_path / "parts"),
    }
    return run(ROOT / "bench" / "gpu.sh", step, env=env)


def test_gpu_sh_ci_times_an_a_a_make_ab_of_the_example_and_of_the_workload(tmp_path):
    p = gpu_sh(tmp_path, "ci")
    assert p.returncode == 0, p.stdout + p.stderr
    asked = (tmp_path / "make.log").read_text().splitlines()
    assert asked == [
        f"ab REV={tmp_path}/parts/aa FAIL_ABOVE=1 OUT={tmp_path}/parts/ci-example",
        f"ab REV={tmp_path}/parts/aa FAIL_ABOVE=1 OUT={tmp_path}/parts/ci-workload "
        "SCRIPT=tests/payloads/workload.py",
    ]
    steps = (tmp_path / "out" / "steps.txt").read_text()
    assert re.fullmatch(r"ci-example rc=0 seconds=\d+\nci-workload rc=0 seconds=\d+\n", steps)
    for name in ("example", "workload"):
        assert {f.name for f in (tmp_path / "out" / f"ci-{name}").iterdir()} == {
            "compare.md",
            "compare.json",
        }


def test_gpu_sh_targets_runs_the_readmes_targets_each_into_a_folder_of_its_own(tmp_path):
    p = gpu_sh(tmp_path, "targets")
    assert p.returncode == 0, p.stdout + p.stderr
    results = f"{tmp_path}/parts/targets"
    assert (tmp_path / "make.log").read_text().splitlines() == [
        f"profile OUT={results}/profile",
        f"profile NPROC=2 OUT={results}/profile-nproc2",
        f"ab TRIALS=3 REV={tmp_path}/parts/aa OUT={results}/ab",
        f"trace OUT={results}/trace",
        f"intra OUT={results}/intra",
    ]
    assert (tmp_path / "parts" / "aa" / "Makefile").is_file()  # make ab's base, a copy
    assert (tmp_path / "out" / "targets" / "ab" / "ab" / "latest" / "compare.md").is_file()


# docs/ci.md's workflow, its run: steps in a pull request's checkout.

TOOLING = ["Makefile", "profile.sh", "profile_run.py", "proton_launch.py", "parse_hatchet.py"]


def workflow():
    text = (ROOT / "docs" / "ci.md").read_text()
    return yaml.safe_load(re.search(r"<!-- workflow: .*?-->\n```yaml\n(.*?)```", text, re.S)[1])


def pull_request(tmp_path, change):
    """A checkout of main at origin/main's tip, then a pull request's commit: the largest
    kernel 2x slower, nothing that runs, or a script of its own; the tooling beside, untracked."""
    repo = test_ab.checkout(tmp_path)
    assert run("git", "update-ref", "refs/remotes/origin/main", "HEAD", cwd=repo).returncode == 0
    if change == "nothing":
        test_ab.helper(repo, "base", test_ab.TREE)
        (repo / "notes.txt").write_text("")
    elif change == "a script":
        shutil.copy(repo / "mine.py", repo / "new.py")
    commit = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "pr"]
    assert run("git", "add", ".", cwd=repo).returncode == 0 and run(*commit, cwd=repo)
    for name in [*TOOLING, "recipe.yaml", "requirements.txt", "requirements-dev.txt"]:
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "summary", repo / "summary")
    installed = (venv := Path(sys.executable).parent.parent) / ".installed"
    if installed.exists():  # make setup's stamp newer than the copies: no setup runs
        for name in ("requirements.txt", "requirements-dev.txt"):
            os.utime(repo / name, (installed.stat().st_mtime - 60,) * 2)
    return repo, venv


@pytest.mark.parametrize(
    "change, status", [("slower", 3), ("nothing", 0), ("a script", 2)], ids=str
)
def test_the_workflow_s_steps_gate_the_pull_request_and_summarise_it(tmp_path, change, status):
    repo, venv = pull_request(tmp_path, change)
    summary = tmp_path / "step-summary.md"
    env = test_ab.helpers().environment(test_ab.GPU)
    env = {k: v for k, v in env.items() if v is not None}
    recipe = test_ab.helpers().recipe(tmp_path, proton="{mode: env}")
    env |= {"GITHUB_STEP_SUMMARY": summary, "VENV": venv, "RECIPE": recipe, "TRIALS": "3"}
    env["SCRIPT"] = "new.py" if change == "a script" else "mine.py"
    steps, ran = workflow()["jobs"]["ab"]["steps"], []
    for step in steps:
        if "run" in step and (not ran or not ran[-1].returncode or step.get("if") == "always()"):
            command = step["run"].replace("${{ github.base_ref }}", "main")
            ran.append(run("bash", "-e", "-c", command, env=env, cwd=repo))
    gate, summarised = ran
    assert summarised.returncode == 0, summarised.stderr
    latest = repo / "profiling_results" / "ab" / "latest"
    if status == 2:  # the base has no such script: one line, before any trial
        said = [line for line in gate.stderr.splitlines() if line.startswith("profile.sh")]
        assert re.fullmatch(r"profile\.sh: error: [0-9a-f]{40} has no new\.py", *said)
        assert not latest.exists() and summary.read_text() == ""
    else:
        assert summary.read_text() == (latest / "compare.md").read_text()
        (uploaded,) = repo.glob(steps[-1]["with"]["path"])  # the run's folder, not latest
        assert uploaded.name == latest.readlink().name and (uploaded / "compare.json").is_file()
        assert steps[-1]["if"] == "always()"
    assert gate.returncode == (2 if status else 0)  # make's own 2, then profile.sh's status
    assert (f"ab] Error {status}" in gate.stderr) == bool(status), gate.stderr

"""make ab and make compare's run folders, end to end on CPU: a user's script in a git
checkout of its own, profiled as the working tree has it against a revision, a folder or
another script, through the fake Proton the profile tests use; the order of trials, both
sides' folders, the recorded order, the compare beside them, an interruption."""

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run
from summary.text import escape

FAKE = ROOT / "tests" / "payloads" / "fake_proton.py"  # writes a given capture as Proton would
PY = sys.executable
TREE = ROOT / "tests" / "fixtures" / "amd-gfx950-vecadd-shadow.hatchet"  # add_kernel on top

PROFILE = ROOT / "profile.sh"
GPU = {"PROFILE_ASSUME_GPU": "1"}  # the fake Proton needs none
SLOWER = "add_kernel"  # the capture's largest kernel, 2x in the working tree's capture


def helpers():
    """test_profile's helpers, imported as a test runs: imported while the tests are
    collected, Triton would come before the example's tests choose its interpreter."""
    import test_profile

    return test_profile


def checkout(tmp_path):
    """A git checkout whose mine.py runs the fake Proton on the capture that helper.py,
    imported from mine.py's own folder, names; the working tree's helper names a capture
    whose largest kernel is 2x slower. Each run appends its capture's name to ran.log."""
    repo = tmp_path / "repo"
    repo.mkdir()
    tree = json.loads(TREE.read_text())
    doubled(tree[0])
    (tmp_path / "slower.hatchet").write_text(json.dumps(tree))
    (repo / "mine.py").write_text(
        "import runpy, sys\nimport helper\n\n"
        f"with open({str(tmp_path / 'ran.log')!r}, 'a') as f:\n    f.write(helper.NAME + '\\n')\n"
        f"sys.argv = [{str(FAKE)!r}, helper.CAPTURE, *sys.argv[1:]]\n"
        f"runpy.run_path({str(FAKE)!r}, run_name='__main__')\n"
    )
    helper(repo, "base", TREE)
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        assert run(*git, cwd=repo).returncode == 0
    helper(repo, "now", tmp_path / "slower.hatchet")
    return repo


def helper(repo, name, capture):
    (repo / "helper.py").write_text(f"NAME = {name!r}\nCAPTURE = {str(capture)!r}\n")


def doubled(node):
    if not node.get("children") and node["frame"]["name"] == SLOWER:
        node["metrics"]["time (ns)"] *= 2
    for child in node.get("children", []):
        doubled(child)


def ab(tmp_path, *options, script="mine.py", cwd=None, env=None):
    """profile.sh's A/B run of script in env mode, from the checkout."""
    args = ["--recipe", helpers().recipe(tmp_path, proton="{mode: env}"), *options]
    env = helpers().environment({**GPU, **(env or {})})
    env = {k: v for k, v in env.items() if v is not None}
    return run(PROFILE, *args, "--", PY, script, env=env, cwd=cwd or tmp_path / "repo")


def test_make_ab_interleaves_trials_of_both_sides_and_compares_them(tmp_path):
    repo = checkout(tmp_path)
    p = ab(tmp_path, "--rev", "HEAD", "--trials", "3", "--fail-above", "10")
    assert p.returncode == 3, p.stderr  # the working tree's add_kernel is 2x slower
    runs = repo / "profiling_results" / "ab"
    (run_,) = [f for f in runs.iterdir() if f.name not in ("latest", "previous")]
    assert os.readlink(runs / "latest") == run_.name
    order = "base trial1\nnow trial1\nnow trial2\nbase trial2\nbase trial3\nnow trial3\n"
    assert (run_ / "order").read_text() == order
    # Each side imported its own helper.py: the base's from the revision, unpacked; each
    # ran once first, its capture set aside, never one of the compared trials.
    ran = (tmp_path / "ran.log").read_text().split()
    assert ran == ["base", "now"] + [line.split()[0] for line in order.splitlines()]
    assert all((run_ / "warmup" / side / "proton.hatchet").is_file() for side in ("base", "now"))
    assert "warm-up: each side ran once first, its capture set aside" in p.stderr
    assert "3 trials a side, compared 1 time\n" in p.stderr  # settled: no more rounds
    assert all(
        (run_ / side / f"trial{k}" / "proton.hatchet").is_file()
        for side in ("base", "now")
        for k in (1, 2, 3)
    )
    assert (run_ / "tree" / "helper.py").read_text().startswith("NAME = 'base'")
    d = json.loads((run_ / "compare.json").read_text())["proton_diff"]
    assert (d["total"]["n_base"], d["total"]["n"]) == (3, 3)
    assert d["interleaved"] and "not interleaved" not in d["first_line"]
    assert d["first_line"].startswith("add_kernel: 2.000x slower") and d["regressions"]
    assert (run_ / "compare.md").read_text().startswith(f"**{escape(d['first_line'])}**")
    assert (run_ / "report.html").read_text().startswith("<!DOCTYPE html>")  # its page
    # Each side's provenance, written from the run's plan, reaches the compare and its page.
    compared = json.loads((run_ / "compare.json").read_text())
    for side, record in [("now", compared["proton_provenance"]), ("base", d["base_provenance"])]:
        made = json.loads((run_ / side / "provenance.json").read_text())
        assert made["run_id"] == run_.name and record.items() >= made.items()
    assert "base provenance: run_id" in (run_ / "report.html").read_text()
    assert "regression: add_kernel" in p.stderr and p.stdout.startswith(d["first_line"])
    assert run("git", "status", "--porcelain", cwd=repo).stdout.split() == [
        "M",
        "helper.py",
        "??",
        "profiling_results/",
    ]


def test_make_ab_against_a_folder_from_a_subfolder_runs_the_copy_s_script_at_its_place(tmp_path):
    repo = checkout(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    for tree, name in ((repo, "now-top"), (copy, "copy-top")):
        (tree / "sub").mkdir()
        shutil.copy(tree / "mine.py", tree / "sub")
        helper(tree, name, TREE)  # found at its tree's top, first on PYTHONPATH
    p = ab(tmp_path, "--rev", "../../copy", "--trials", "1", cwd=repo / "sub")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "ran.log").read_text().split() == ["copy-top", "now-top"] * 2


def test_make_ab_against_a_folder_or_a_script(tmp_path):
    repo = checkout(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    helper(copy, "copy", TREE)
    assert ab(tmp_path, "--rev", copy, "--trials", "1").returncode == 0
    (repo / "base.py").write_text((repo / "mine.py").read_text().replace("helper.NAME", "'script'"))
    p = ab(tmp_path, "--base-script", "base.py", "--trials", "2", "--min-ms", "0")
    assert p.returncode == 0, p.stderr
    ran = (tmp_path / "ran.log").read_text().split()
    assert ran == ["copy", "now"] * 2 + ["script", "now"] * 2 + ["now", "script"]
    assert "one run a side" not in p.stdout.splitlines()[0]


def test_make_ab_refuses_a_revision_without_the_script_or_outside_git(tmp_path):
    repo = checkout(tmp_path)
    p = ab(tmp_path, "--rev", "HEAD~1")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "HEAD~1" in p.stderr
    (repo / "new.py").write_text("")
    p = ab(tmp_path, "--rev", "HEAD", script="new.py")
    assert p.returncode == 2 and "HEAD has no new.py" in p.stderr
    outside = tmp_path / "outside"
    shutil.copytree(repo, outside, ignore=shutil.ignore_patterns(".git"))
    p = ab(tmp_path, "--rev", "HEAD", cwd=outside)
    assert p.returncode == 2 and "neither a folder nor a revision" in p.stderr
    assert "here (git: fatal: not a git repository" in p.stderr  # git's reason, as it said
    assert p.stderr.count("\n") == 1
    assert (
        not (repo / "profiling_results").exists() and not (outside / "profiling_results").exists()
    )


@pytest.mark.parametrize(
    "options, line",
    [
        (["--fail-above", "abc"], "--fail-above takes a number >= 0, not abc"),
        (["--min-ms", "-1"], "--min-ms takes a number >= 0, not -1"),
        (["--backend", "instrumentation"], "an A/B run compares times, not the instrumentation"),
        (["--max-trials", "4"], "--max-trials is below the 5 trials a side the run starts with"),
        (["--max-trials", "ten"], "--max-trials takes 1 to 999"),
    ],
)
def test_a_usage_error_is_one_line_before_any_trial_and_leaves_no_run_folder(
    tmp_path, options, line
):
    repo = checkout(tmp_path)
    p = ab(tmp_path, "--rev", "HEAD", *options)
    assert p.returncode == 2 and p.stderr.startswith(f"profile.sh: error: {line}")
    assert p.stderr.count("\n") == 1
    assert not (tmp_path / "ran.log").exists() and not (repo / "profiling_results").exists()


def test_rows_left_unsettled_get_more_rounds_up_to_max_trials_and_every_look_counts(tmp_path):
    repo = checkout(tmp_path)
    count = tmp_path / "count"  # the working tree's add_kernel: 1x and 2x by turns
    (repo / "helper.py").write_text(
        f"NAME = 'now'\nwith open({str(count)!r}, 'a+') as f:\n    f.write('.')\n"
        f"    f.seek(0)\n    CAPTURE = ({str(TREE)!r}, {str(tmp_path / 'slower.hatchet')!r})"
        "[len(f.read()) % 2]\n"
    )
    p = ab(tmp_path, "--rev", "HEAD", "--trials", "2", "--max-trials", "5", "--fail-above", "10")
    assert p.returncode in (0, 3), p.stderr
    assert "unsettled after 2 trials a side: " in p.stderr and "; rounds up to 4\n" in p.stderr
    assert "unsettled after 4 trials a side: " in p.stderr and "; rounds up to 5\n" in p.stderr
    assert "5 trials a side, compared 3 times\n" in p.stderr
    (run_,) = (repo / "profiling_results" / "ab").glob("2*")
    assert (run_ / "order").read_text().count("\n") == 10 and len(count.read_text()) == 6
    d = json.loads((run_ / "compare.json").read_text())["proton_diff"]
    assert (d["total"]["n_base"], d["total"]["n"]) == (5, 5)
    assert d["kernels"][0]["verdict"] == "inconclusive"  # at 5 trials, the most, still
    assert d["alpha_divisor"] == 4  # its third look's share of the rate: 1/4
    lows = []  # the final comparison's interval spends what its third look may: alpha / 4
    for divisor in ("4", "1"):
        again = run(
            PY,
            ROOT / "parse_hatchet.py",
            run_ / "now",
            "--diff",
            run_ / "base",
            "--alpha-divisor",
            divisor,
        )
        lows.append(json.loads(again.stdout)["proton_diff"]["kernels"][0]["low"])
    assert lows[0] == d["kernels"][0]["low"] != lows[1]


def test_a_side_that_imports_the_other_side_s_code_stops_before_any_timed_round(tmp_path):
    repo = checkout(tmp_path)
    (repo / "src" / "kernels").mkdir(parents=True)  # on PYTHONPATH by its absolute path
    (repo / "src" / "kernels" / "__init__.py").write_text("")
    (repo / "mine.py").write_text("import kernels\n" + (repo / "mine.py").read_text())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "src"]
    assert run("git", "add", "src", "mine.py", cwd=repo).returncode == 0
    assert run(*git, cwd=repo).returncode == 0
    p = ab(tmp_path, "--rev", "HEAD", env={"PYTHONPATH": str(repo / "src")})
    assert p.returncode == 2 and p.stderr.endswith(
        f"profile.sh: error: the base imported kernels from {repo}/src/kernels/__init__.py, "
        "the working tree: an editable install (pip install -e) or an absolute PYTHONPATH "
        "puts it first\n"
    )
    assert (tmp_path / "ran.log").read_text().split() == ["base", "now"]  # the warm-up alone
    (run_,) = (repo / "profiling_results" / "ab").glob("2*")
    assert sorted(f.name for f in run_.iterdir()) == ["tree", "warmup"]


def venv(folder, module, text=""):
    """A virtual environment at folder that sees this one's packages, with module (a path
    under its site-packages) written there; its python."""
    assert run(PY, "-m", "venv", "--without-pip", folder).returncode == 0
    python = folder / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(run(python, "-c", where).stdout.strip())
    outer = "import sys; print('\\n'.join(p for p in sys.path if p.endswith('-packages')))"
    (site / "outer.pth").write_text(run(PY, "-c", outer).stdout)  # as make setup's .pth
    (site / module).parent.mkdir(parents=True, exist_ok=True)
    (site / module).write_text(text)
    return python


def ab_with(tmp_path, python, *options):
    """ab() of mine.py run by python."""
    args = ["--recipe", helpers().recipe(tmp_path, proton="{mode: env}"), *options]
    env = {k: v for k, v in helpers().environment(GPU).items() if v is not None}
    return run(PROFILE, *args, "--", python, "mine.py", env=env, cwd=tmp_path / "repo")


def test_a_package_the_tree_holds_imported_installed_stops_before_any_timed_round(tmp_path):
    # pip install . (not -e) puts a copy in site-packages that both sides import alike.
    repo = checkout(tmp_path)
    (repo / "src" / "kernels").mkdir(parents=True)
    (repo / "src" / "kernels" / "__init__.py").write_text("")
    python = venv(tmp_path / "venv", "kernels/__init__.py")
    (repo / "mine.py").write_text("import kernels\n" + (repo / "mine.py").read_text())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "src"]
    assert run("git", "add", "src", "mine.py", cwd=repo).returncode == 0
    assert run(*git, cwd=repo).returncode == 0
    p = ab_with(tmp_path, python, "--rev", "HEAD", "--trials", "1")
    assert p.returncode == 2 and p.stderr.endswith(
        "/kernels/__init__.py: an installed copy runs on both sides: uninstall it, "
        "PYTHONPATH=src if there\n"
    ), p.stderr
    assert "error: the base imported kernels from " in p.stderr
    assert (tmp_path / "ran.log").read_text().split() == ["base", "now"]  # the warm-up alone


def test_an_interpreter_whose_venv_is_in_the_checkout_runs_an_a_b(tmp_path):
    # make setup's .venv lies in the checkout: what is installed there is neither side's.
    repo = checkout(tmp_path)
    python = venv(repo / ".venv", "installed_here.py")
    (repo / "mine.py").write_text("import installed_here\n" + (repo / "mine.py").read_text())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "import"]
    assert run(*git, cwd=repo).returncode == 0  # the base's script imports it too
    p = ab_with(tmp_path, python, "--rev", "HEAD", "--trials", "1")
    assert p.returncode == 0, p.stderr


def test_an_interrupted_make_ab_writes_no_compare_and_keeps_latest(tmp_path):
    repo = checkout(tmp_path)
    assert ab(tmp_path, "--rev", "HEAD", "--trials", "1").returncode == 0
    runs = repo / "profiling_results" / "ab"
    latest = os.readlink(runs / "latest")
    started = tmp_path / "started"
    args = [
        "--recipe",
        helpers().recipe(tmp_path, proton="{mode: env}"),
        "--rev",
        "HEAD",
        "--trials",
        "2",
    ]
    p = subprocess.Popen(
        [PROFILE, *args, "--", PY, "mine.py", "wait", started, "60"],
        cwd=repo,
        env={
            k: v for k, v in {**os.environ, **helpers().environment(GPU)}.items() if v is not None
        },
        preexec_fn=helpers().defaults,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        helpers().wait_for(started)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130
    finally:
        p.kill()
        p.communicate()
    stopped = [f for f in runs.iterdir() if f.name not in ("latest", "previous", latest)]
    assert len(stopped) == 1 and not (stopped[0] / "compare.json").exists()
    assert os.readlink(runs / "latest") == latest


def test_an_a_b_run_s_compare_gets_the_world_size_and_the_ceiling(tmp_path):
    checkout(tmp_path)
    results = tmp_path / "results"
    (results / "ceiling").mkdir(parents=True)
    options = ["--results", results, "--rev", "HEAD", "--world-size", "2", "--dry-run"]
    p = ab(tmp_path, *options)
    assert p.returncode == 0, p.stderr
    compare = shlex.split(p.stdout.splitlines()[-1])
    assert compare[-4:] == ["--world-size", "2", "--ceiling", f"{results}/ceiling"]
    assert "--diff" in compare and not list((results).glob("ab*"))


def test_profile_sh_s_compare_honours_dry_run(tmp_path):
    trials = ROOT / "tests" / "fixtures" / "h200-trials"
    out = tmp_path / "out"
    args = ["--results", out, "--compare", trials / "slower", trials / "base", "--dry-run"]
    p = run(PROFILE, *args, "--world-size", "2", "--", PY)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    head, command = p.stdout.splitlines()
    assert head.startswith(f"# run folder: {out}/compare/")
    assert shlex.split(command)[:5] == [
        PY,
        str(ROOT / "parse_hatchet.py"),
        str(trials / "slower"),
        "--diff",
        str(trials / "base"),
    ]
    assert shlex.split(command)[-2:] == ["--world-size", "2"]
    assert not out.exists()  # no folder made, no latest moved


def test_make_compare_writes_a_run_folder_of_its_own(tmp_path):
    trials = ROOT / "tests" / "fixtures" / "h200-trials"
    now, base = tmp_path / "now", tmp_path / "base"
    shutil.copytree(trials / "slower", now)
    shutil.copytree(trials / "base", base)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    p = run(
        PROFILE,
        "--results",
        tmp_path / "out",
        "--compare",
        now,
        base,
        "--fail-above",
        "5",
        "--",
        PY,
    )
    assert p.returncode == 3 and p.stdout.startswith("not interleaved: ")
    runs = tmp_path / "out" / "compare"
    (folder,) = [f for f in runs.iterdir() if f.name not in ("latest", "previous")]
    assert os.readlink(runs / "latest") == folder.name
    assert sorted(f.name for f in folder.iterdir()) == ["compare.json", "compare.md", "report.html"]
    assert "not interleaved" in (folder / "compare.md").read_text().splitlines()[0]
    assert sorted(str(p) for p in tmp_path.rglob("*") if "out" not in p.parts) == before
    os.remove(runs / "latest")
    (runs / "latest").mkdir()  # the user's own: never replaced
    p = run(PROFILE, "--results", tmp_path / "out", "--compare", now, base, "--", PY)
    assert p.returncode == 2 and "is not a link" in p.stderr and len(list(runs.iterdir())) == 2
    p = run(PROFILE, "--results", tmp_path / "out", "--compare", now, tmp_path / "no", "--", PY)
    assert p.returncode == 2 and p.stderr == f"profile.sh: error: --compare: no run {tmp_path}/no\n"
    assert len(list(runs.iterdir())) == 2  # no run folder made for it
    p = run("make", "-n", "--no-print-directory", "compare", "FAIL_ABOVE=5", "ANY_DEVICE=1")
    assert (
        "--compare 'profiling_results/profile/latest' 'profiling_results/profile/previous'"
        in p.stdout
    )
    assert "--fail-above '5'" in p.stdout and "--any-device" in p.stdout


def test_make_ab_passes_rev_or_base_script_and_the_gate_to_profile_sh():
    p = run("make", "-n", "--no-print-directory", "ab", "REV=v1", "FAIL_ABOVE=1", "TRIALS=7")
    assert (
        "--trials '7'" in p.stdout and "--rev 'v1'" in p.stdout and "--fail-above '1'" in p.stdout
    )
    assert "--max-trials" not in p.stdout  # profile.sh's default, 20
    p = run("make", "-n", "--no-print-directory", "ab", "FAIL_ABOVE=1", "MAX_TRIALS=40")
    assert "--max-trials '40'" in p.stdout
    p = run("make", "-n", "--no-print-directory", "ab", "BASE_SCRIPT=-old.py", "ANY_DEVICE=1")
    assert "--base-script './-old.py'" in p.stdout and "--any-device" in p.stdout
    assert "--rev" not in p.stdout and "--trials" not in p.stdout  # 5, profile.sh's default


@pytest.mark.parametrize(
    "variables, line",
    [
        (["FAIL_ABOVE=abc"], "profile.sh: error: --fail-above takes a number >= 0, not abc"),
        (["BASE=" + str(TREE.parent / "h200-graph-replay.chrome_trace")], "captures of one kind"),
    ],
)
def test_a_usage_error_of_make_compare_leaves_no_run_folder(tmp_path, variables, line):
    out = tmp_path / "out"
    p = run("make", "-s", "compare", f"OUT={out}", f"CUR={TREE}", f"BASE={TREE}", *variables)
    assert p.returncode == 2 and line in p.stderr.splitlines()[0]
    assert not out.exists()


def fake_tar(tmp_path, body):
    """A tar first on PATH that runs body (bash): git archive's unpacking, stood in for."""
    (bin_ := tmp_path / "bin").mkdir()
    (bin_ / "tar").write_text(f"#!/usr/bin/env bash\n{body}\n")
    (bin_ / "tar").chmod(0o755)
    return {"PATH": f"{bin_}{os.pathsep}{helpers().environment()['PATH']}"}


def test_a_revision_that_cannot_be_unpacked_is_one_line_and_leaves_no_run_folder(tmp_path):
    repo = checkout(tmp_path)
    p = ab(tmp_path, "--rev", "HEAD", env=fake_tar(tmp_path, "cat >/dev/null; exit 2"))
    assert p.returncode == 2 and p.stderr.endswith(
        "profile.sh: error: HEAD could not be unpacked (git archive, then tar)\n"
    )
    assert not (repo / "profiling_results").exists()


def test_a_signal_while_the_revision_unpacks_ends_the_run_as_in_a_trial(tmp_path):
    repo, started = checkout(tmp_path), tmp_path / "started"
    args = ["--recipe", helpers().recipe(tmp_path, proton="{mode: env}"), "--rev", "HEAD"]
    env = {**os.environ, **helpers().environment(GPU)}
    env |= fake_tar(tmp_path, f"touch {shlex.quote(str(started))}; exec sleep 60")
    p = subprocess.Popen(
        [PROFILE, *args, "--", PY, "mine.py"],
        cwd=repo,
        env={k: v for k, v in env.items() if v is not None},
        preexec_fn=helpers().defaults,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        helpers().wait_for(started)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 143
    finally:
        with contextlib.suppress(ProcessLookupError):  # the stand-in tar, were it left
            os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
    assert err.endswith("stopped by SIGTERM: HEAD was not unpacked\n"), err
    assert not (repo / "profiling_results").exists()  # the half-made tree and its folders


def test_a_lost_rank_is_said_once_a_trial_however_many_looks(tmp_path):
    checkout(tmp_path)
    p = ab(tmp_path, "--rev", "HEAD", "--trials", "2", "--world-size", "2", "--fail-above", "5")
    lost = [line for line in p.stderr.splitlines() if "no capture of rank 1" in line]
    assert len(lost) == 2 and lost[0] != lost[1], p.stderr  # each trial's, named, once

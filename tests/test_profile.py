"""profile.sh, its driver (profile_run.py, summary/plan.py, summary/recipe.py) and
proton_launch.py, run as a user runs them: the recipe read and checked as aorta checks it,
the plan made from it (its dry runs), what profile.sh refuses, the run folders it makes
(latest, previous, --output, trials, provenance), the signals it forwards, and the ranks
and environment proton_launch.py gives a script.
Real runs use a fake env-mode payload (tests/payloads/fake_proton.py) that writes a given
capture where Proton would; the GPU tests at the end run real payloads through make."""

import contextlib
import functools
import importlib.util
import json
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import triton
import yaml

import profile_run
import proton_launch
from conftest import ROOT, recipe, run
from summary import plan as pl

PROFILE = ROOT / "profile.sh"
LAUNCH = str(ROOT / "proton_launch.py")
FIXTURES = Path(__file__).parent / "fixtures"
TREE = FIXTURES / "amd-gfx950-vecadd-shadow.hatchet"  # 12 launches, add_kernel on top
TRACE = FIXTURES / "h200-two-ranks-trace" / "proton.rank0.chrome_trace"  # one rank's trace
PY = sys.executable
MINE = ["--", "python", "mine.py"]  # a user's script: dry runs never open it
STAMP = re.compile(r"\d{8}T\d{6}Z-\d+")
# What the machine may have exported that would change a run: unset unless a test sets it.
INHERITED = (
    "CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES CDPATH PROFILE_ASSUME_GPU"
    " RANK LOCAL_RANK TORCHELASTIC_RUN_ID SLURM_PROCID SLURM_TASK_PID OMPI_COMM_WORLD_RANK"
    " PMI_RANK PMIX_RANK OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID SLURM_LOCALID PYTHONSAFEPATH"
).split()


def environment(env=None):
    # The venv's bin first: the python3 that profile.sh falls back to under a launcher.
    path = f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}"
    return {**dict.fromkeys(INHERITED), "PATH": path, **(env or {})}


def profile(*args, env=None, cwd=ROOT, at=PROFILE):
    """profile.sh (at) run to its end; a None value in env unsets that variable."""
    env = environment(env)
    unset = [f"--unset={k}" for k, v in env.items() if v is None]
    given = {k: v for k, v in env.items() if v is not None}
    return run("env", *unset, at, *args, env=given, cwd=cwd)


def words(text, folder="RUN"):
    """A command line of the tables below as words: PY, LAUNCH, SUMMARISER and RUN (the
    run's folder) spelled out."""
    named = {"PY": PY, "LAUNCH": LAUNCH, "SUMMARISER": str(ROOT / "parse_hatchet.py")}
    return [named.get(word, word).replace("RUN", folder) for word in shlex.split(text)]


def dry_run(*args, **kw):
    """What a dry run prints: the run's folder, the device variables' moves, each trial's
    command as words, and the summariser's."""
    p = profile("--dry-run", *args, **kw)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    head, *lines, last = [x for x in p.stdout.splitlines() if not x.startswith("# provenance: ")]
    assert head.startswith("# run folder: "), p.stdout
    moves = [line for line in lines if line.startswith(("unset ", "export "))]
    commands = [shlex.split(line) for line in lines if line not in moves]
    folder = shlex.split(head.removeprefix("# run folder: "))[0]
    return SimpleNamespace(folder=folder, moves=moves, commands=commands, last=shlex.split(last))


def one_line_refusal(p, message):
    assert p.returncode == 2 and p.stdout == "", p.stdout
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr


MISTAKEN = {
    "missing": (lambda path: None, "no such file or directory"),
    "bad-yaml": (lambda path: path.write_text("collect: [unclosed"), "not valid YAML"),
    "a-list": (lambda path: path.write_text("- a list"), "no collect.proton mapping"),
    "not-utf8": (lambda path: path.write_bytes(b"collect: {proton: {mode: \xff}}"), "not UTF-8"),
    "escape": (lambda path: path.write_text('collect: {proton: {"\\e[31m": a}}'), "'\\x1b[31m'"),
    "folder": (lambda path: path.mkdir(), "is a directory"),
}


@pytest.mark.parametrize("mistake", MISTAKEN)
def test_mistaken_recipes_are_refused_by_profile_sh_in_one_line(tmp_path, mistake):
    make, message = MISTAKEN[mistake]
    make(tmp_path / "r.yaml")
    p = profile("--recipe", tmp_path / "r.yaml", "--dry-run", *MINE)
    one_line_refusal(p, message)
    assert p.stderr.startswith(f"profile.sh: error: {tmp_path}/r.yaml: ") and len(p.stderr) < 400


def executable(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_an_interpreter_without_pyyaml_is_refused_in_one_line(tmp_path):
    code = "import runpy, sys; sys.modules['yaml'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    bare = executable(tmp_path / "python3", f'#!/bin/sh\nexec "{PY}" -c "{code}" "$@"\n')
    one_line_refusal(profile("--dry-run", "--", bare, "mine.py"), "has no PyYAML to read it with")


def test_the_recipe_is_read_without_importing_from_the_current_folder(tmp_path):
    # ./profile.sh runs from its checkout: a yaml.py there is not imported (the driver's
    # folder goes after the installed packages on sys.path).
    for name in ("profile.sh", "profile_run.py", "summary/__init__.py", "summary/plan.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    for name in ("recipe.py", "run.py"):  # the plan's imports
        shutil.copy2(ROOT / "summary" / name, tmp_path / "summary")
    (tmp_path / "yaml.py").write_text("raise SystemExit('the yaml.py here ran')\n")
    p = run("./profile.sh", "--recipe", ROOT / "recipe.yaml", "--dry-run", *MINE, cwd=tmp_path)
    assert p.returncode == 0 and "ran" not in p.stderr, p.stderr


def test_pyyaml_on_pythonpath_is_found(tmp_path):
    # An interpreter that sees no site-packages: PyYAML only through PYTHONPATH, which -I
    # would hide.
    bare = executable(tmp_path / "bin" / "python3", f'#!/bin/sh\nexec "{PY}" -S "$@"\n')
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / "yaml").symlink_to(Path(yaml.__file__).parent)
    args = ["--recipe", ROOT / "recipe.yaml", "--dry-run", "--", bare, "mine.py"]
    p = profile(*args, env={"PYTHONPATH": str(tmp_path / "path")}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr


# profile.sh: what it refuses before anything runs.


@pytest.mark.parametrize(
    "row",
    [
        "--frobnicate -> unknown argument: --frobnicate (see --help)",
        " -> no command: give one after --",
        "--recipe -> --recipe needs a value",
        "--results '' -- python mine.py -> --results needs a value, not an empty one",
        "--rev -- python mine.py -> --rev needs a value",
        *[
            f"--trials {n} -- python mine.py -> --trials takes 1 to 999"
            for n in "0 1000 x 07".split()
        ],
        "--max-trials 8 -- python mine.py -> --max-trials needs an A/B run: --rev or --base",
        "-- bash -c true -> must run a .py script through its interpreter or launcher",
        "-- mine.py -> must run a .py script through its interpreter or launcher",
        "-- /no/python3 mine.py -> no interpreter /no/python3",
        "--data csv -- python mine.py -> --data: 'csv' is not one of tree, trace",
        "--backend gdb -- python mine.py -> --backend: 'gdb' is not one of auto",
        "--context full -- python mine.py -> --context: 'full' is not one of shadow, python",
        "--hook torch -- python mine.py -> --hook: 'torch' is not one of triton",
    ],
)
def test_usage_errors_are_one_line(row):
    args, message = row.split(" -> ")
    one_line_refusal(profile("--dry-run", *shlex.split(args)), message)


@pytest.mark.parametrize("word", ["exec", "source", ".", "eval", "die"])
def test_a_shell_builtin_or_function_as_the_command_is_refused_before_anything_runs(tmp_path, word):
    # A shell's own word names no program: refused before any folder is made.
    args = ["--recipe", ROOT / "recipe.yaml", "--", word, "python", "mine.py"]
    p = profile(*args, env={"PROFILE_ASSUME_GPU": "1"}, cwd=tmp_path)
    one_line_refusal(p, f"the command must start with a program, not {word}")
    assert list(tmp_path.iterdir()) == []


# profile.sh takes --output '' for no --output at all: the run goes to the results folder.
def test_an_empty_output_name_is_refused(tmp_path):
    one_line_refusal(profile("--output", "", "--dry-run", *MINE, cwd=tmp_path), "--output")


def test_cdpath_does_not_change_where_profile_sh_finds_its_files(tmp_path):
    # With CDPATH, `cd checkout` would go to the decoy, and print its name.
    (tmp_path / "checkout").symlink_to(ROOT)
    (tmp_path / "decoy" / "checkout").mkdir(parents=True)
    args = ["--recipe", ROOT / "recipe.yaml", "--dry-run", "--backend", "instrumentation"]
    p = run("env", f"CDPATH={tmp_path}/decoy", "checkout/profile.sh", *args, *MINE, cwd=tmp_path)
    assert p.returncode == 0 and f" {tmp_path}/checkout/proton_launch.py " in p.stdout, p.stderr


# profile.sh: the commands it builds, as its dry runs print them.

CLI = "LAUNCH -n RUN/proton -c python -d tree"  # one launch path, whatever the run
OPTS = "-n RUN/proton -c python -d tree"
JOB = "torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint host0:29500"


def test_dry_run_of_the_shipped_recipe(tmp_path):
    d = dry_run("--recipe", ROOT / "recipe.yaml", *MINE, "--n", "4096", cwd=tmp_path)
    assert re.fullmatch(rf"profiling_results/profile/{STAMP.pattern}", d.folder)
    assert d.moves == [] and d.commands == [words(f"python {CLI} mine.py --n 4096", d.folder)]
    summarise = "python SUMMARISER RUN -o RUN/summary.json --html RUN/report.html --table"
    assert d.last == words(summarise, d.folder)
    assert list(tmp_path.iterdir()) == []  # a dry run creates nothing


@pytest.mark.parametrize(
    "args, kind",
    [("", "profile"), ("--data trace", "trace"), ("--backend instrumentation", "intra")]
    + [("--backend instrumentation --data trace", "intra-trace")],
)
def test_each_kind_of_run_has_its_folder_which_a_dry_run_does_not_make(tmp_path, args, kind):
    d = dry_run("--results", tmp_path / "r", *args.split(), *MINE)
    assert re.fullmatch(rf"{tmp_path}/r/{kind}/{STAMP.pattern}", d.folder)
    assert dry_run("--output", tmp_path / "o", *args.split(), *MINE).folder == f"{tmp_path}/o"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "row",
    [
        f"cli-alone | {{backend: cupti, hook: triton}} | | PY mine.py --iters 3 | PY {CLI} -b cupti -k triton mine.py --iters 3",
        f"roctracer-cli | {{backend: roctracer}} | | python mine.py | python {CLI} -b roctracer mine.py",
        "overrides | {} | --context shadow --data trace | python mine.py | python LAUNCH -n RUN/proton -c shadow -d trace mine.py",
        f"backend-mode | {{backend: cupti, backend_mode: pcsampling}} | | python mine.py | python LAUNCH {OPTS} -b cupti --mode pcsampling mine.py",
        f"intra-mode | {{backend: instrumentation, granularity: warp}} | | python mine.py | python LAUNCH {OPTS} -b instrumentation --mode default:granularity=warp mine.py",
        f"make-intra | {{}} | --backend instrumentation | python mine.py | python LAUNCH {OPTS} -b instrumentation --mode default mine.py",
        f"env | {{mode: env}} | | python mine.py a | python LAUNCH --env {OPTS} mine.py a",
        f"torchrun | {{}} | | torchrun --nproc-per-node 2 mine.py | torchrun --nproc-per-node 2 LAUNCH --ranked {OPTS} mine.py",
        f"torchrun-env | {{mode: env}} | --hook triton | torchrun --nproc-per-node 2 mine.py | torchrun --nproc-per-node 2 LAUNCH --ranked --env {OPTS} -k triton mine.py",
        f"torch-run | {{}} | | PY -m torch.distributed.run --nproc_per_node=4 mine.py | PY -m torch.distributed.run --nproc_per_node=4 LAUNCH --ranked {OPTS} mine.py",
        f"two-hosts | {{}} | | {JOB} mine.py --rows 8192 | {JOB} LAUNCH --ranked {OPTS} mine.py --rows 8192",
        f"srun | {{}} | | srun -N 2 torchrun mine.py | srun -N 2 torchrun LAUNCH --ranked {OPTS} mine.py",
    ],
    ids=lambda row: row.split(" |")[0],
)
def test_the_command_of_each_kind_of_run(tmp_path, row):
    # proton_launch.py, --ranked under a launcher, --env in env mode.
    _, proton, flags, command, expected = map(str.strip, row.split("|"))
    d = dry_run("--recipe", recipe(tmp_path, proton=proton), *flags.split(), "--", *words(command))
    assert d.commands == [words(expected, d.folder)]


def test_the_summary_reads_the_measured_ceilings_where_make_ceiling_left_them(tmp_path):
    results = tmp_path / "results"
    assert "--ceiling" not in dry_run("--results", results, *MINE).last
    (results / "ceiling").mkdir(parents=True)
    assert dry_run("--results", results, *MINE).last[-2:] == ["--ceiling", f"{results}/ceiling"]


def test_dry_run_words_keep_their_spaces_and_can_be_pasted(tmp_path):
    python = executable(tmp_path / "my python" / "python3", f'#!/bin/sh\nexec "{PY}" "$@"\n')
    d = dry_run("--results", tmp_path / "my results", "--", python, "my script.py", "a b", "")
    assert d.folder.startswith(f"{tmp_path}/my results/profile/")
    assert d.commands == [[str(python), *words(CLI, d.folder), "my script.py", "a b", ""]]
    assert d.last[:3] == [str(python), str(ROOT / "parse_hatchet.py"), d.folder]
    # Words shlex cannot read back ($'...' for a newline): bash gives each back as it was.
    odd = ["it's", "$HOME", "*", "tab\there", "new\nline", "back\\slash", '"q"']
    p = profile("--dry-run", "--results", tmp_path / "r\n*", "--", PY, "mine.py", *odd)
    assert p.returncode == 0, p.stderr
    for line in [x for x in p.stdout.splitlines() if not x.startswith("# ")]:
        back = run("bash", "-c", f'set -- {line}\nprintf "%s\\0" "$@"').stdout.split("\0")[:-1]
        assert back[0] == PY and any(f"{tmp_path}/r\n*/profile/" in w for w in back), line
        assert back[-len(odd) :] == odd or back[-1] == "--table", line


@pytest.mark.parametrize(
    "trials, flags, expected",
    [(None, ["--trials", "3"], 3), (2, [], 2), (2, ["--trials", "1"], 1), (None, [], 1)],
)
def test_each_trial_has_its_command_and_folder(tmp_path, trials, flags, expected):
    d = dry_run("--recipe", recipe(tmp_path, trials), *flags, *MINE, cwd=tmp_path)
    names = [f"{d.folder}/trial{k}/proton" for k in range(1, expected + 1)]
    found = [command[command.index("-n") + 1] for command in d.commands]
    assert found == (names if expected > 1 else [f"{d.folder}/proton"])
    assert d.last[2:5] == [d.folder, "-o", f"{d.folder}/summary.json"]  # one, of the run
    assert not (tmp_path / "profiling_results").exists()


@pytest.mark.parametrize(
    "command, given, world",
    [
        ("torchrun --nproc-per-node 2 mine.py", "2", "2"),
        (f"{JOB} mine.py", "16", "16"),  # a launcher's world of many hosts, as the user names it
        # Given, never parsed back out of the launcher's words: unknown without --world-size.
        ("torchrun --nproc-per-node 2 mine.py", None, None),
        ("PY -m torch.distributed.run --nproc_per_node=4 mine.py", None, None),
        ("python mine.py", None, None),
    ],
)
def test_the_world_size_reaches_the_summariser_as_given(command, given, world):
    option = ["--world-size", given] if given else []
    found = dry_run(*option, "--", *words(command), env={"WORLD_SIZE": "9"}).last
    assert (found[found.index("--world-size") + 1] if "--world-size" in found else None) == world


@pytest.mark.parametrize("value", ["0", "65537", "x", "02", "-1"])
def test_a_world_size_that_is_no_count_of_ranks_is_refused(value):
    one_line_refusal(profile("--dry-run", "--world-size", value, *MINE), "--world-size takes 1 to")


@pytest.mark.parametrize(
    "row",
    [
        "amd | | HIP_VISIBLE_DEVICES=1 | unset HIP_VISIBLE_DEVICES; export ROCR_VISIBLE_DEVICES=1",
        "amd | | HIP_VISIBLE_DEVICES=2,3 CUDA_VISIBLE_DEVICES=0 | unset HIP_VISIBLE_DEVICES; unset CUDA_VISIBLE_DEVICES; export ROCR_VISIBLE_DEVICES=2,3",
        "amd | | HIP_VISIBLE_DEVICES=1 ROCR_VISIBLE_DEVICES=4 | unset HIP_VISIBLE_DEVICES; export ROCR_VISIBLE_DEVICES=4",
        "amd | | CUDA_VISIBLE_DEVICES=0 | unset CUDA_VISIBLE_DEVICES; export ROCR_VISIBLE_DEVICES=0",
        "amd | | ROCR_VISIBLE_DEVICES=4 | ",
        # A cluster may export AMD's variables on an NVIDIA host; instrumentation and cupti
        # intercept no AMD queue; an AMD backend does, on whatever host.
        "nvidia | | HIP_VISIBLE_DEVICES=1 CUDA_VISIBLE_DEVICES=2 | ",
        "1 | | HIP_VISIBLE_DEVICES=1 CUDA_VISIBLE_DEVICES=2 | ",
        "amd | --backend instrumentation | HIP_VISIBLE_DEVICES=1 | ",
        "amd | --backend cupti | HIP_VISIBLE_DEVICES=1 | ",
        "nvidia | --backend rocprofiler | CUDA_VISIBLE_DEVICES=1 | unset CUDA_VISIBLE_DEVICES; export ROCR_VISIBLE_DEVICES=1",
        "1 | --backend roctracer | CUDA_VISIBLE_DEVICES=1 | unset CUDA_VISIBLE_DEVICES; export ROCR_VISIBLE_DEVICES=1",
    ],
)
def test_device_variables_move_to_rocr_where_an_amd_backend_reads_them(row):
    host, flags, env, expected = map(str.strip, row.split("|"))
    env = dict(pair.split("=") for pair in env.split())
    moves = dry_run(*flags.split(), *MINE, env={**env, "PROFILE_ASSUME_GPU": host}).moves
    assert moves == (expected.split("; ") if expected else [])


# Real runs, with a fake env-mode payload standing in for the script and Proton.

FAKE = ROOT / "tests" / "payloads" / "fake_proton.py"  # writes a given capture as Proton would


def fake_args(tmp_path, *words, start=(PY,), options=(), trials=None, proton="{}"):
    """profile.sh's arguments for FAKE with words, started by start, in env mode."""
    r = recipe(tmp_path, trials, "{mode: env, " + proton[1:])
    return ["--recipe", r, *options, "--", *start, FAKE, *words]


def fake_run(tmp_path, *words, env=None, **kw):
    """profile.sh run from tmp_path, its results in tmp_path/profiling_results."""
    env = {"PROFILE_ASSUME_GPU": "1", **(env or {})}
    return profile(*fake_args(tmp_path, *words, **kw), env=env, cwd=tmp_path)


def runs(tmp_path, kind="profile"):
    """The run folders of kind, oldest first, and where latest and previous point."""
    folder = tmp_path / "profiling_results" / kind
    names = sorted(p.name for p in folder.iterdir() if STAMP.fullmatch(p.name))
    links = [folder / "latest", folder / "previous"]
    return [folder / n for n in names], *[os.readlink(n) if n.is_symlink() else None for n in links]


def summary(folder):
    return json.loads((Path(folder) / "summary.json").read_text())


def with_umask(mask, call, *args, **kw):
    old = os.umask(mask)
    try:
        return call(*args, **kw)
    finally:
        os.umask(old)


def test_a_good_capture_is_summarised_in_the_run_s_folder_with_the_umask_s_mode(tmp_path):
    p = with_umask(0o027, fake_run, tmp_path, TREE)
    assert p.returncode == 0, p.stderr
    (folder,), latest, previous = runs(tmp_path)
    assert latest == folder.name and previous is None
    assert (folder / "summary.json").stat().st_mode & 0o777 == 0o640
    assert (folder / "report.html").read_text().startswith("<!DOCTYPE html>")  # its page
    s = summary(folder)
    assert s["proton_kernel_count"] == 12 and s["proton_top_kernels"][0] == "add_kernel"
    assert s["proton_artifact_dir"] == str(folder.resolve())
    assert "add_kernel" in p.stdout  # the kernel table
    assert p.stdout.endswith(f"wrote profiling_results/profile/{folder.name}/summary.json\n")


def test_a_trace_goes_to_the_trace_runs(tmp_path):
    assert fake_run(tmp_path, TRACE, options=["--data", "trace"]).returncode == 0
    (folder,), latest, _ = runs(tmp_path, "trace")
    assert latest == folder.name and summary(folder)["proton_timeline"][0]["launches"] == 20


def test_each_run_has_a_new_folder_latest_the_newest_previous_the_one_before(tmp_path):
    for _ in range(3):
        assert fake_run(tmp_path, TREE).returncode == 0
    folders, latest, previous = runs(tmp_path)
    assert len(folders) == 3 and all((f / "summary.json").is_file() for f in folders)
    # Links by the folder's name alone: the results can move.
    assert (latest, previous) == (folders[2].name, folders[1].name)
    assert summary(tmp_path / "profiling_results/profile/latest")["proton_kernel_count"] == 12


@pytest.mark.parametrize("name", ["latest", "previous"])
@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_latest_or_previous_that_is_not_a_link_is_refused_and_kept(tmp_path, name, kind):
    theirs = tmp_path / "profiling_results" / "profile" / name
    theirs.parent.mkdir(parents=True)
    theirs.mkdir() if kind == "folder" else theirs.write_text("notes")
    p = fake_run(tmp_path, "wait", tmp_path / "ran", "0", TREE)
    one_line_refusal(p, f"profiling_results/profile/{name} is not a link: move it away")
    assert [f.name for f in theirs.parent.iterdir()] == [name] and not (tmp_path / "ran").exists()
    assert theirs.is_dir() if kind == "folder" else theirs.read_text() == "notes"


@pytest.mark.parametrize(
    "word, status, message",
    [("fail", 7, "the command exited 7; no summary written"), ("root.hatchet", 1, "no timed")]
    + [("none", 1, "the run wrote no profile (Triton 3.6 ")],
)
def test_a_failed_run_leaves_latest_where_it_was(tmp_path, word, status, message):
    assert fake_run(tmp_path, TREE).returncode == 0
    root_only = [{"frame": {"name": "ROOT"}, "metrics": {}, "children": []}, {}]
    (tmp_path / "root.hatchet").write_text(json.dumps(root_only))  # no kernel in it
    p = fake_run(tmp_path, tmp_path / word)
    assert p.returncode == status and message in p.stderr, p.stderr
    assert status != 1 or "proton.start()" in p.stderr
    (good, failed), latest, previous = runs(tmp_path)
    assert (latest, previous) == (good.name, None)
    assert failed.is_dir() and not (failed / "summary.json").exists()


def checkout(tmp_path, summariser=None):
    """A copy of the tooling in a folder whose path holds a space, with summariser (the
    text of a parse_hatchet.py) in place of the summary's where given."""
    copy = tmp_path / "my checkout"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "summary", copy / "summary", ignore=ignore)
    for (
        name
    ) in "Makefile profile.sh profile_run.py recipe.yaml proton_launch.py parse_hatchet.py".split():
        shutil.copy2(ROOT / name, copy / name)
    for name in ("requirements.txt", "requirements-dev.txt", ".venv"):
        (copy / name).symlink_to(ROOT / name)
    if summariser:
        (copy / "parse_hatchet.py").write_text(summariser)
    return copy


def test_the_summariser_s_own_line_is_relayed_when_it_fails(tmp_path):
    # parse_hatchet.py may fail for a reason of its own after writing summary.json:
    # profile.sh says nothing of an unread capture, and latest stays.
    assert fake_run(tmp_path, TREE).returncode == 0
    failing = (
        "import sys\n"
        "open(sys.argv[sys.argv.index('-o') + 1], 'w').write('{}')\n"
        "sys.exit('parse_hatchet.py: error: the table failed')\n"
    )
    at = checkout(tmp_path, failing) / "profile.sh"
    p = profile(*fake_args(tmp_path, TREE), env={"PROFILE_ASSUME_GPU": "1"}, cwd=tmp_path, at=at)
    assert p.returncode == 1 and p.stderr == "parse_hatchet.py: error: the table failed\n"
    (good, _), latest, _ = runs(tmp_path)
    assert latest == good.name


def test_an_interruption_between_the_link_renames_leaves_latest_and_previous_apart(
    tmp_path, monkeypatch
):
    # A rename that stops the driver once it has renamed the first link into place.
    for name in ("first", "second", "third"):
        (tmp_path / name).mkdir()
    plan = functools.partial(pl.Plan, "profile", links=str(tmp_path))
    for name in ("first", "second"):
        profile_run.link(plan(str(tmp_path / name)))
    replace = os.replace

    def once(*args):
        replace(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", once)
    with pytest.raises(KeyboardInterrupt):
        profile_run.link(plan(str(tmp_path / "third")))
    latest, previous = (os.readlink(tmp_path / name) for name in ("latest", "previous"))
    assert (latest, previous) == ("third", "first")  # the run that succeeded is latest


def test_make_profile_works_in_a_checkout_whose_path_holds_a_space(tmp_path):
    copy, out = checkout(tmp_path), tmp_path / "my results"
    variables = [f"RECIPE={recipe(tmp_path, proton='{mode: env}')}", f"OUT={out}"]
    shutil.copy(TREE, copy)  # ARGS splits at whitespace: the capture named from the checkout
    variables += [f"SCRIPT={FAKE}", f"ARGS={TREE.name}"]
    setup = ["-o", ".venv/.installed"]  # made already: its stamp's age is the checkout's
    p = run("make", "-s", *setup, "profile", *variables, env={"PROFILE_ASSUME_GPU": "1"}, cwd=copy)
    assert p.returncode == 0, p.stderr
    latest = out / "profile" / "latest"
    assert summary(latest)["proton_kernel_count"] == 12
    assert json.loads((latest / "provenance.json").read_text())["backend_asked"] == "auto"


def defaults():
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def start(args, cwd, **kw):
    """profile.sh started in a session of its own, with the signals it traps at their
    defaults (a pytest in the background has SIGINT ignored, which bash could not trap)."""
    env = {**os.environ, **environment({"PROFILE_ASSUME_GPU": "1"})}
    env = {k: v for k, v in env.items() if v is not None}
    kw = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    return subprocess.Popen([PROFILE, *args], cwd=cwd, env=env, preexec_fn=defaults, **kw)


def wait_for(path, seconds=60):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_two_runs_started_at_once_have_folders_of_their_own(tmp_path):
    both = [start(fake_args(tmp_path, "wait", tmp_path / k, "1", TREE), tmp_path) for k in "ab"]
    try:
        assert [p.wait(timeout=60) for p in both] == [0, 0]
    finally:
        for p in both:
            p.kill()
    folders, latest, _ = runs(tmp_path)
    assert len(folders) == 2 and latest in {f.name for f in folders}
    assert all(summary(f)["proton_kernel_count"] == 12 for f in folders)  # not mixed


def test_output_writes_into_a_new_folder_without_links(tmp_path):
    out = tmp_path / "out\n" / "deeper\n"  # its parent made too, its name kept whole
    p = fake_run(tmp_path, TREE, options=["--output", out])
    assert p.returncode == 0, p.stderr
    assert {"proton.hatchet", "summary.json"} <= {f.name for f in out.iterdir()}
    assert summary(out)["proton_artifact_dir"] == str(out.resolve())
    assert not (tmp_path / "profiling_results").exists()  # no latest, no other folder


@pytest.mark.parametrize(
    "holds", ["empty", "file", "hidden", "folder", "is-a-file", "dangling-link"]
)
def test_output_that_exists_is_refused_and_left_as_it_was(tmp_path, holds):
    args = fake_args(tmp_path, "wait", tmp_path / "ran", "0", TREE)
    out = tmp_path / "out"
    if holds == "is-a-file":
        out.write_text("mine")
    elif holds == "dangling-link":
        out.symlink_to(tmp_path / "nowhere")
    else:
        out.mkdir()
        if holds != "empty":
            theirs = out / {"file": "notes.txt", "hidden": ".keep", "folder": "sub"}[holds]
            theirs.mkdir() if holds == "folder" else theirs.write_text("mine")
    before = sorted((p, p.is_file() and p.read_text()) for p in tmp_path.rglob("*"))
    p = profile("--output", out, *args, env={"PROFILE_ASSUME_GPU": "1"}, cwd=tmp_path)
    one_line_refusal(p, f"--output {out} exists: name a new folder (nothing is cleared)")
    assert sorted((p, p.is_file() and p.read_text()) for p in tmp_path.rglob("*")) == before


def test_two_runs_given_one_output_folder_cannot_share_it(tmp_path):
    # The first run's mkdir claims the folder: the second is refused, not mixed in.
    out, started = tmp_path / "out", tmp_path / "started"
    first = start(["--output", out, *fake_args(tmp_path, "wait", started, "1", TREE)], tmp_path)
    try:
        wait_for(started)
        second = fake_run(
            tmp_path, FIXTURES / "h200-softmax-python.hatchet", options=["--output", out]
        )
        assert first.wait(timeout=60) == 0
    finally:
        first.kill()
    one_line_refusal(second, f"--output {out} exists")
    assert summary(out)["proton_top_kernels"][0] == "add_kernel"


@pytest.mark.parametrize("where", ["--results", "--output"])
def test_a_folder_that_cannot_be_made_is_refused_before_the_workload_runs(tmp_path, where):
    (tmp_path / "file").write_text("mine")
    options = [where, tmp_path / "file" / "x"]
    p = fake_run(tmp_path, "wait", tmp_path / "ran", "0", TREE, options=options)
    one_line_refusal(p, f"cannot make {tmp_path}/file/x")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("where", ["--results", "--output"])
def test_a_folder_named_with_a_leading_dash_is_a_folder_not_an_option(tmp_path, where):
    p = fake_run(tmp_path, TREE, options=[where, "-n"])
    assert p.returncode == 0, p.stderr
    run_folder = tmp_path / "-n" / ("profile/latest" if where == "--results" else "")
    assert summary(run_folder)["proton_kernel_count"] == 12


def test_a_recipe_named_with_a_leading_dash_is_read_as_the_recipe(tmp_path):
    shutil.copy(recipe(tmp_path, proton="{backend: cupti}"), tmp_path / "-h")
    d = dry_run("--recipe", "-h", *MINE, cwd=tmp_path)
    assert d.commands == [words(f"python {CLI} -b cupti mine.py", d.folder)]


def test_results_may_hold_spaces_and_odd_characters(tmp_path):
    results = tmp_path / "it's a $HOME [1] *\n"
    p = fake_run(tmp_path, TREE, options=["--results", results])
    assert p.returncode == 0, p.stderr
    # A control character is shown as ?, as ls shows it: the line stays one line.
    assert (
        p.stdout.endswith("/summary.json\n")
        and f"wrote {tmp_path}/it's a $HOME [1] *?/" in p.stdout
    )
    latest = results / "profile" / "latest"
    assert STAMP.fullmatch(os.readlink(latest)) and summary(latest)["proton_kernel_count"] == 12


def test_a_refusal_naming_a_path_with_control_characters_is_one_line(tmp_path):
    (tmp_path / "file").write_text("mine")
    p = fake_run(tmp_path, TREE, options=["--results", tmp_path / "file" / "a\nb\x1b[31m"])
    one_line_refusal(p, f"cannot make {tmp_path}/file/a?b?[31m/profile/")


def test_a_dry_run_of_a_long_launcher_line_is_quick():
    # 50,000 launcher words once took a process each, over a minute in all.
    began = time.monotonic()
    dry_run("--", "env", *["-u"] * 50000, "python", "mine.py")
    assert time.monotonic() - began < 10


@pytest.mark.parametrize("how", [{"options": ["--trials", "2"]}, {"trials": 2}])
def test_trials_write_their_folders_and_one_summary_of_the_first(tmp_path, how):
    p = fake_run(tmp_path, TREE, **how)
    assert p.returncode == 0, p.stderr
    (folder,), latest, _ = runs(tmp_path)
    assert {"summary.json", "trial1", "trial2"} <= {f.name for f in folder.iterdir()}
    assert all((folder / f"trial{k}" / "proton.hatchet").is_file() for k in (1, 2))
    s = summary(folder)
    assert s["proton_trials"]["n"] == 2 and s["proton_artifact_dir"] == str(folder.resolve())
    # The five keys are the first trial's, not the trials added up.
    assert s["proton_kernel_count"] == 12 and s["proton_top_kernels"][0] == "add_kernel"


def test_each_run_has_one_provenance_named_by_its_folder_with_the_umask_s_mode(tmp_path):
    p = with_umask(0o027, fake_run, tmp_path, TREE, proton="{backend: cupti}")
    assert p.returncode == 0 and "no provenance written" not in p.stderr, p.stderr
    (folder,), _, _ = runs(tmp_path)
    made = json.loads((folder / "provenance.json").read_text())
    assert made["run_id"] == folder.name and made["backend_asked"] == "cupti"
    assert made["triton"] == triton.__version__ and made["backend_used"] is None  # env mode
    assert (folder / "provenance.json").stat().st_mode & 0o777 == 0o640
    assert [f.name for f in folder.rglob("*provenance*")] == ["provenance.json"]
    assert summary(folder)["proton_provenance"].items() >= made.items()


def test_env_mode_exports_aorta_s_names_imports_proton_first_and_moves_amd_s_devices(tmp_path):
    seen = tmp_path / "seen.json"
    proton = "{backend: rocprofiler, backend_mode: periodic_flushing, hook: triton}"
    env = {"PROFILE_ASSUME_GPU": "amd", "HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}
    p = fake_run(tmp_path, "env", seen, TREE, proton=proton, env=env)
    assert p.returncode == 0, p.stderr
    moved = "unset HIP_VISIBLE_DEVICES unset CUDA_VISIBLE_DEVICES export ROCR_VISIBLE_DEVICES=1"
    assert f"profile.sh: warning: AMD: {moved}\n" in p.stderr
    (folder,), _, _ = runs(tmp_path)
    name = str(folder.relative_to(tmp_path))
    exported = f"DIR={name} NAME={name}/proton CONTEXT=python DATA=tree BACKEND=rocprofiler"
    exported = dict(f"AORTA_PROTON_{pair}".split("=") for pair in exported.split())
    exported.update(AORTA_PROTON_MODE="periodic_flushing", AORTA_PROTON_HOOK="triton")
    exported["ROCR_VISIBLE_DEVICES"] = "1"
    assert json.loads(seen.read_text()) == {"preloaded": True, "env": exported}


HIDDEN = [{f"{var}_VISIBLE_DEVICES": v} for var in ("CUDA", "HIP", "ROCR") for v in ("", "-1")]
GPU_HERE = os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd")
NO_GPU = pytest.param(
    {"PROFILE_ASSUME_GPU": None}, marks=pytest.mark.skipif(GPU_HERE, reason="GPU")
)


@pytest.mark.parametrize("env", [NO_GPU, *HIDDEN], ids=repr)
def test_no_gpu_or_one_hidden_by_a_device_variable_is_refused_before_anything_runs(tmp_path, env):
    p = fake_run(tmp_path, "wait", tmp_path / "ran", "0", TREE, env=env)
    one_line_refusal(p, "no GPU visible: Proton needs one (check the script alone with: make run)")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "profiling_results").exists()


# Signals: they reach the workload; profile.sh waits for it and leaves no summary.


def stopped_by(tmp_path, sig, group):
    """profile.sh's exit status, the signal it says stopped it, and whether the workload
    outlived it, once sig reached it mid-run (group: and its workload, as a terminal
    signals its foreground group)."""
    started = tmp_path / "started"
    p = start(fake_args(tmp_path, "wait", started, "60", TREE), tmp_path, start_new_session=True)
    try:
        wait_for(started)
        os.killpg(p.pid, sig) if group else p.send_signal(sig)
        status, alive = p.wait(timeout=30), Path(f"/proc/{started.read_text()}").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):  # what outlived it holds its stderr
            os.killpg(p.pid, signal.SIGKILL)
    said = re.search(r"stopped by SIG(\w+): the command ended;", p.stderr.read())
    return status, said and f"SIG{said[1]}", alive


@pytest.mark.parametrize(
    "sig, group, status",
    [(signal.SIGINT, True, 130), (signal.SIGINT, False, 130), (signal.SIGTERM, False, 143)]
    + [(signal.SIGHUP, False, 129)],
    ids=["INT-to-the-group", "INT-to-profile.sh", "TERM-to-profile.sh", "HUP-to-profile.sh"],
)
def test_a_signal_ends_the_workload_and_profile_sh_waits_for_it(tmp_path, sig, group, status):
    assert fake_run(tmp_path, TREE).returncode == 0  # latest, which must not move
    assert stopped_by(tmp_path, sig, group) == (status, sig.name, False)  # the workload gone
    (done, stopped), latest, previous = runs(tmp_path)
    left = sorted(f.name for f in stopped.iterdir())
    # Waited for: the workload's own ending (it writes its capture) came first.
    assert (tmp_path / "started.ended").read_text().startswith(sig.name)
    assert left == ["proton.hatchet"] and (latest, previous) == (done.name, None)
    time.sleep(1)
    assert sorted(f.name for f in stopped.iterdir()) == left  # nothing came after


def test_ctrl_c_on_a_terminal_reaches_the_workload_once(tmp_path):
    # The terminal sends SIGINT to its foreground group, the workload included: profile.sh,
    # in that group, forwards no second one, which would cut short what the workload does
    # on the first (Proton's command line writes its capture in finalize).
    started = tmp_path / "started"
    args, env = (
        fake_args(tmp_path, "wait", started, "60", TREE),
        {**os.environ, "PROFILE_ASSUME_GPU": "1"},
    )
    argv = [str(PROFILE), *map(str, args)]
    assert fake_run(tmp_path, TREE).returncode == 0  # latest, which must not move
    # As for `make test &` from a script: pytest with SIGINT ignored, which bash could not
    # trap; the child restores it, whatever the caller's mask.
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    pid, fd = pty.fork()  # profile.sh the foreground job of a terminal of its own
    if pid == 0:  # the child only replaces itself: nothing of pytest's may run here
        try:
            os.chdir(tmp_path)  # its results in tmp_path, as every test's
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    signal.signal(signal.SIGINT, handler)
    shown = b""
    try:
        wait_for(started)
        os.write(fd, b"\x03")  # Ctrl-C
        with contextlib.suppress(OSError):  # EIO: the terminal closed
            while chunk := os.read(fd, 65536):
                shown += chunk
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert status == 130 and b"stopped by SIGINT" in shown, shown
    assert (tmp_path / "started.ended").read_text() == "SIGINT"
    (done, stopped), latest, _ = runs(tmp_path)
    assert latest == done.name and not (stopped / "summary.json").exists()


def test_the_workload_reads_the_terminal(tmp_path):
    main, terminal = pty.openpty()
    p = start(fake_args(tmp_path, "read", TREE), tmp_path, stdin=terminal)
    os.close(terminal)
    try:
        os.write(main, b"typed\n")
        out, err = p.communicate(timeout=60)
    finally:
        os.close(main)
        p.kill()
    assert p.returncode == 0 and "read: typed" in out, err


# Ranks: each rank's capture, and the summary of those read.


def test_a_rank_not_read_keeps_the_summary_and_exits_1(tmp_path):
    launcher = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    p = fake_run(tmp_path, TREE, start=launcher)  # rank 1 writes no capture, unseen:
    assert p.returncode == 0, p.stderr  # the world size is unknown, and the summary says so
    assert summary(runs(tmp_path)[0][0])["proton_provenance"]["world_size"] is None
    shutil.rmtree(tmp_path / "profiling_results")
    p = fake_run(tmp_path, TREE, start=launcher, options=["--world-size", "2"])
    assert p.returncode == 1, p.stderr
    assert p.stderr.splitlines()[-1].startswith("parse_hatchet")  # its own line says which
    (folder,), latest, _ = runs(tmp_path)
    s = summary(folder)
    assert latest is None and [r["rank"] for r in s["proton_unread"]] == [1]
    assert [Path(f).name for r in s["proton_ranks"] for f in r["files"]] == ["proton.rank0.hatchet"]


@pytest.mark.parametrize(
    "env, rank",
    [
        ("RANK=3", 3),
        ("SLURM_PROCID=12", 12),
        ("OMPI_COMM_WORLD_RANK=2", 2),
        ("PMI_RANK=4", 4),
        ("PMIX_RANK=6", 6),
        # srun started torchrun, which started this rank: torchrun's RANK.
        ("RANK=1 SLURM_PROCID=12 TORCHELASTIC_RUN_ID=x", 1),
        # srun started this process: a RANK left exported in the shell is stale.
        ("RANK=0 SLURM_PROCID=5 SLURM_TASK_PID=100", 5),
        (f"RANK=0 SLURM_PROCID=5 SLURM_TASK_PID={os.getppid()}", 5),  # through a shell
        # mpirun inside a Slurm batch job: the job's SLURM_PROCID is not this rank's.
        ("OMPI_COMM_WORLD_RANK=2 SLURM_PROCID=0", 2),
        # Another launcher under srun (one a host) sets RANK for each process.
        ("RANK=7 SLURM_PROCID=1 SLURM_TASK_PID=42", 7),
    ],
)
def test_each_launcher_s_rank(env, rank):
    env = dict(pair.split("=") for pair in env.split())
    assert proton_launch.global_rank(env, pid=100) == rank


@pytest.mark.parametrize(
    "env, local",
    [
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "SLURM_LOCALID": "0"}, "1"),
        ({"SLURM_LOCALID": "3"}, "3"),
        ({"MPI_LOCALRANKID": "2"}, "2"),
        ({"LOCAL_RANK": "5", "SLURM_LOCALID": "3"}, "5"),  # torchrun's own: kept
        ({}, None),
    ],
)
def test_local_rank_is_exported_where_unset(env, local):
    proton_launch.export_local_rank(env)
    assert env.get("LOCAL_RANK") == local


def test_the_launcher_keeps_the_script_s_words_as_given(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint(sys.argv[1:], *map(os.environ.get, sys.argv[2:4]))\n")
    unset = [f"--unset={k}" for k in INHERITED]  # the ranks below alone
    launch = ["env", *unset, "SLURM_LOCALID=1", "PMI_RANK=2", PY, LAUNCH, "--ranked", "--env"]
    p = run(*launch, "-n", tmp_path / "p", script, "--", "AORTA_PROTON_NAME", "LOCAL_RANK", "--")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"['--', 'AORTA_PROTON_NAME', 'LOCAL_RANK', '--'] {tmp_path}/p.rank2 1\n"


@pytest.mark.parametrize(
    "row",
    [
        "raise SystemExit(3) | PY LAUNCH --env s.py | 3 | ",
        "raise SystemExit('why') | PY LAUNCH --env s.py | 1 | why",  # as Python prints it
        "import sys; sys.exit() | PY LAUNCH --env s.py | 0 | ",
        "pass | PY LAUNCH --env missing.py | 2 | proton_launch: error: no such .py script: 'missing.py'",
        "pass | PY LAUNCH --env | 2 | proton_launch: error: the following arguments are required: SCRIPT.py",
        "pass | PY LAUNCH -c full s.py | 2 | proton_launch: error: argument -c: invalid choice: 'full'",
        "pass | PY LAUNCH --ranked --env s.py | 2 | proton_launch: error: --ranked, but none of",
        "pass | PY LAUNCH -n | 2 | proton_launch: error: argument -n: expected one argument",
        # Too long, not ASCII, negative, empty.
        *[
            f"pass | RANK={rank} PY LAUNCH --ranked --env s.py | 2 | proton_launch: error: RANK must be a whole number"
            for rank in ("9" * 5000, "\u0661", "-1", "''")
        ],
    ],
    ids=lambda row: row[:60],
)
def test_the_launcher_exits_with_the_script_s_status_or_2_in_one_line(tmp_path, row):
    body, command, status, err = map(str.strip, row.split("|"))
    (tmp_path / "s.py").write_text(body + "\n")
    unset = [f"--unset={k}" for k in INHERITED]  # no rank but the row's
    p = run("env", *unset, *words(command), cwd=tmp_path)
    assert p.returncode == int(status), p.stderr
    assert p.stderr.startswith(err) and p.stderr.count("\n") == bool(err), p.stderr


@pytest.mark.parametrize("arch", ["gfx942:sramecc+:xnack-", "gfx950", "gfx90a"])
def test_instrumentation_refuses_an_amd_arch_it_cannot_compile_for(monkeypatch, capsys, arch):
    from triton.runtime import driver

    active = SimpleNamespace(get_current_target=lambda: SimpleNamespace(backend="hip", arch=arch))
    monkeypatch.setattr(driver, "_active", active, raising=False)
    monkeypatch.setattr(type(driver), "active", property(lambda self: self._active))
    if arch == "gfx90a":
        with pytest.raises(SystemExit) as exit_:
            proton_launch.check_instrumentable()
        assert exit_.value.code == 2
        assert "compiles for gfx942 and gfx950 only, not gfx90a" in capsys.readouterr().err
    else:
        proton_launch.check_instrumentable()


def test_typed_modes_from_aorta_s_strings(capsys):
    mode = proton_launch.typed_mode(
        "default:granularity=warp:sampling_strategy=selective:sampling_options=0:buffer_size=64"
    )
    assert type(mode).__name__ == "Default" and mode.sampling_options == "0"
    assert mode.buffer_size == 64 and mode.granularity.name == "WARP"
    assert type(proton_launch.typed_mode("mma:granularity=cta")).__name__ == "MMA"
    assert proton_launch.typed_mode("pcsampling") == "pcsampling"  # other backends: as given
    for bad in ("default:granularity", "default:nofield=1", "default:buffer_size=x"):
        with pytest.raises(SystemExit) as exit_:
            proton_launch.typed_mode(bad)
        assert exit_.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_the_provenance_is_written_without_importing_torch_or_triton(tmp_path):
    # Importing torch cost a GPU run seconds; the versions are the packages' metadata.
    driver = [PY, "-X", "importtime", ROOT / "profile_run.py", PY]
    p = run(*driver, *fake_args(tmp_path, TREE), env={"PROFILE_ASSUME_GPU": "1"}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (folder,), _, _ = runs(tmp_path)
    assert json.loads((folder / "provenance.json").read_text())["torch"] == torch.__version__
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines()}
    assert not {name.split(".")[0] for name in imported} & {"torch", "triton"}


# check_launch_metadata: a script's launch_metadata, from one launch, on the CPU.


@functools.cache
def payload(name):
    """A payload imported as a user's test imports the script it checks."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "payloads" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_launch_metadata_is_called_with_the_launch_s_arguments():
    add = payload("vector_add")
    x = torch.randn(3000, device=add.DEVICE)
    got = proton_launch.check_launch_metadata(add.vector_add_kernel, lambda: add.vector_add(x, x))
    assert got == {"name": "vector_add_kernel [3000]", "bytes": 3 * 3000 * 4}


def test_launch_metadata_of_an_autotuned_kernel_sees_its_config_and_name():
    axpy = payload("autotuned")
    x = torch.randn(3000, device=axpy.DEVICE)
    got = proton_launch.check_launch_metadata(axpy.axpy_kernel, lambda: axpy.axpy(2.0, x, x))
    block = axpy.axpy_kernel.best_config.kwargs["BLOCK"] if not axpy.INTERPRET else 1024
    assert got == {"name": f"axpy_kernel [BLOCK={block}]", "bytes": 3 * 3000 * 4}


@pytest.mark.parametrize(
    "returned, message",
    [
        ({"name": 3, "bytes": 1}, "a dict whose name is a str"),
        ([("name", "k")], "a dict whose name is a str"),
        ({"name": "k", "bytes": -1}, "bytes must be a finite number >= 0"),
        ({"name": "k", "bytes": True}, "bytes must be a finite number >= 0"),
        ({"name": "k", "flops16": float("nan")}, "flops16 must be a finite number >= 0"),
        ({"name": "k", "flops": float("inf")}, "flops must be a finite number >= 0"),
        ({"name": "k", "flop16": 1}, "returns none of bytes, flops, flops8, flops16"),
    ],
    ids=repr,
)
def test_a_launch_metadata_proton_could_not_use_is_named(monkeypatch, returned, message):
    add = payload("vector_add")
    kernel = add.vector_add_kernel
    if hasattr(kernel, "kwargs"):  # the interpreter's kernel keeps it with its options
        monkeypatch.setitem(kernel.kwargs, "launch_metadata", lambda grid, meta, args: returned)
    else:
        monkeypatch.setattr(kernel, "launch_metadata", lambda grid, meta, args: returned)
    x = torch.randn(10, device=add.DEVICE)
    with pytest.raises(ValueError, match=re.escape(message)):
        proton_launch.check_launch_metadata(kernel, lambda: add.vector_add(x, x))
    assert "run" not in vars(kernel)  # the kernel launches as before


def test_a_compiled_kernel_without_launch_metadata_is_a_value_error():
    # As Triton's compiled @triton.jit kernel keeps it: an attribute, None when not given.
    class Compiled:
        fn, arg_names, launch_metadata = staticmethod(lambda x: None), ["x"], None

        def run(self, *args, grid, warmup, **options):
            pass

    kernel = Compiled()
    launch = lambda: kernel.run(1, grid=(1,), warmup=False)  # noqa: E731
    with pytest.raises(ValueError, match="no launch_metadata"):
        proton_launch.check_launch_metadata(kernel, launch)


# On the GPU, end to end through make, with the tests' own payloads.

PAYLOAD, N, ITERS = "tests/payloads/vector_add.py", 1000000, 5


def make(target, out, *variables, script=PAYLOAD, args=f"--n {N} --iters {ITERS}"):
    p = run("make", "-s", target, f"OUT={out}", f"SCRIPT={script}", f"ARGS={args}", *variables)
    assert p.returncode == 0, p.stdout + p.stderr
    return p, summary(out / target / "latest")


def ours(s, name="vector_add_kernel"):
    return [k for k in s["proton_kernels"] if k["name"].startswith(name)]


@pytest.mark.gpu
@pytest.mark.parametrize("hook", [[], ["HOOK=triton"]], ids=["", "hook"])
def test_gpu_make_profile_counts_every_launch_and_with_the_hook_its_bandwidth(tmp_path, hook):
    p, s = make("profile", tmp_path, *hook)
    (kernel,) = ours(s)
    assert "vector_add: PASS" in p.stdout and kernel["launches"] == ITERS + 1
    if hook:  # named by the payload's launch_metadata, with the bytes it moves
        assert kernel["name"] == f"vector_add_kernel [{N}]" and kernel["gbyte_per_s"] > 0
        assert "pct_of_peak_bw" in kernel


@pytest.mark.gpu
def test_gpu_make_profile_of_two_ranks(tmp_path):
    p, s = make("profile", tmp_path, "NPROC=2")
    assert "vector_add[rank 1]: PASS" in p.stdout
    assert [r["rank"] for r in s["proton_ranks"]] == [0, 1] and s["proton_unread"] == []


@pytest.mark.gpu
def test_gpu_make_intra(tmp_path):
    _, s = make("intra", tmp_path, args="--iters 2")
    assert {scope["scope"] for scope in s["proton_scopes"]} == {"load", "store"}


@pytest.mark.gpu
def test_gpu_a_cuda_graph_s_replays_are_counted_alike_in_tree_and_trace(tmp_path):
    launches = {}
    for target in ("profile", "trace"):
        _, s = make(target, tmp_path, script="tests/payloads/graph_replay.py", args="--replays 50")
        launches[target] = sum(k["launches"] for k in ours(s, "scale_kernel"))
    assert launches["profile"] >= 50 and launches["trace"] == launches["profile"], launches


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", ["", "-1"])
def test_gpu_hidden_by_a_device_variable_is_refused(tmp_path, hidden):
    p = profile("--output", tmp_path / "o", "--", PY, PAYLOAD, env={"CUDA_VISIBLE_DEVICES": hidden})
    one_line_refusal(p, "no GPU visible")


def test_a_message_pack_capture_is_the_run_s_capture(tmp_path):
    p = fake_run(tmp_path, FIXTURES / "handmade-graph-replay.hatchet_msgpack")
    assert p.returncode == 0, p.stderr
    (run,), _, _ = runs(tmp_path)
    assert summary(run)["proton_kernel_count"] > 0


def test_the_imports_make_ab_checks_leave_out_the_main_module_and_files_of_no_place(tmp_path):
    # multiprocessing names the launcher __mp_main__ once imported (Inductor's and Triton's
    # workers import it): in a base's trial that was the working tree's launcher.
    # torch.classes names its file "_classes.py", a path relative to nothing: left out too.
    (tmp_path / "mine.py").write_text(
        "import multiprocessing.spawn, sys, types\nimport helper\n"
        "sys.modules['rel'] = types.ModuleType('rel')\nsys.modules['rel'].__file__ = 'rel.py'\n"
    )
    (tmp_path / "rel.py").write_text("")
    (tmp_path / "helper.py").write_text("")
    p = subprocess.run(
        [sys.executable, LAUNCH, "--env", "--imports", str(tmp_path / "imports.json"), "mine.py"],
        cwd=tmp_path, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": ""},
        check=False,
    )  # fmt: skip
    found = json.loads((tmp_path / "imports.json").read_text())
    own, installed = found["own"], found["installed"]
    assert p.returncode == 0 and "helper" in own, (p.stderr, found)
    assert not {"__mp_main__", "rel"} & (set(own) | set(installed))
    assert "multiprocessing" in installed and "multiprocessing.spawn" not in installed


def test_the_launcher_under_pythonsafepath_keeps_pythonpath_s_first_folder(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.py").write_text("import helper\n")
    env = os.environ | {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(tmp_path / "lib")}
    p = subprocess.run(
        [sys.executable, LAUNCH, "--env", "sub/mine.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr

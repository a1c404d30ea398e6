"""profile.sh, recipe.py and proton_launch.py: the command profile.sh builds, what it
refuses, and how it checks a capture. The post-run checks use a fake env-mode payload
that writes a given capture."""

import contextlib
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
import triton
import yaml
from conftest import ROOT, run

import proton_launch
import recipe as rc

PROFILE = ROOT / "profile.sh"
LAUNCH = ROOT / "proton_launch.py"
FIXTURES = Path(__file__).parent / "fixtures"
TRACE = FIXTURES / "h200-two-ranks-trace" / "proton.rank0.chrome_trace"  # one rank's trace
PY = sys.executable
MINE = ["--", "python", "mine.py"]  # a user's script: dry runs never open it
CLEAN = {"HIP_VISIBLE_DEVICES": None, "ROCR_VISIBLE_DEVICES": None, "CUDA_VISIBLE_DEVICES": None}


def profile(*args, env=None, cwd=ROOT):
    env = {**CLEAN, **(env or {})}
    unset = [k for k, v in env.items() if v is None]
    # Unset what the test leaves out, so the machine's own variables do not leak in.
    command = ["env", *(f"-u{k}" for k in unset), str(PROFILE), *args]
    return run(*command, env={k: v for k, v in env.items() if v is not None}, cwd=cwd)


def recipe(tmp_path, **proton):
    data = yaml.safe_load((ROOT / "recipe.yaml").read_text())
    data["collect"]["proton"].update(proton)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def dry_run(*args, **kw):
    """The lines of the command a dry run prints (not the summariser's, which it adds),
    without the run's id, new each run."""
    p = profile("--dry-run", *args, **kw)
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stdout.splitlines() if not line.startswith("# then: ")]
    return [re.sub(r" --run-id [0-9A-Za-z-]+", "", line) for line in lines]


def summariser(*args, **kw):
    """The summariser's command line a dry run prints, as words."""
    p = profile("--dry-run", *args, **kw)
    assert p.returncode == 0, p.stderr
    (line,) = [line for line in p.stdout.splitlines() if line.startswith("# then: ")]
    return shlex.split(line.removeprefix("# then: "))


def test_shipped_recipe_is_the_aorta_recipe():
    data = yaml.safe_load((ROOT / "recipe.yaml").read_text())
    assert data["schema_version"] == 1 and data["mode"] == "probe"
    assert data["trials"] == 1 and data["timeout_per_trial"] == 1800
    assert data["mitigation_axis"] == ["none"] and data["diagnostic_axis"] == ["none"]
    assert data["env_passthrough_mode"] == "inherit"
    proton = {"mode": "cli", "backend": "auto", "context": "python", "data": "tree"}
    assert data["collect"] == {"proton": proton}


# recipe.py: aorta's rules, in this process.


def options(**proton):
    return rc.options({"collect": {"proton": proton}})


def test_defaults_and_overrides_are_aorta_s():
    assert options() == {"mode": "cli", "backend": "auto", "context": "shadow", "data": "tree"}
    assert options(context=" Python ")["context"] == "python"  # stripped and lower-cased
    assert rc.options({"collect": {"proton": {}}}, "trace", "cupti")["data"] == "trace"


@pytest.mark.parametrize(
    "proton, mode",
    [
        ({"backend": "instrumentation"}, None),
        ({"backend": "instrumentation", "instrumentation_mode": "default"}, "default"),
        ({"backend": "instrumentation", "granularity": "warp"}, "default:granularity=warp"),
        (
            {"backend": "instrumentation", "instrumentation_mode": "mma", "granularity": "cta"},
            "mma:granularity=cta",
        ),  # fmt: skip
        ({"backend": "cupti", "backend_mode": "pcsampling"}, "pcsampling"),
    ],
)
def test_proton_mode_is_rendered_as_aorta_renders_it(proton, mode):
    assert options(**proton).get("proton_mode") == mode


@pytest.mark.parametrize(
    "proton, message",
    [
        ({"colour": "red"}, "unknown key collect.proton.colour"),
        ({"context": 3}, "collect.proton.context must be a string, got 3"),
        ({"data": True}, "collect.proton.data must be a string, got True"),
        ({"data": [1, 2]}, "collect.proton.data must be a string, got a list"),
        ({"mode": "daemon"}, "collect.proton.mode: 'daemon' is not one of cli, env"),
        ({"backend": "nsys"}, "collect.proton.backend: 'nsys' is not one of auto"),
        ({"context": "full"}, "collect.proton.context: 'full' is not one of shadow, python"),
        ({"data": "csv"}, "collect.proton.data: 'csv' is not one of tree, trace"),
        ({"hook": "torch"}, "collect.proton.hook: 'torch' is not one of triton"),
        ({"backend": "roctracer"}, "backend roctracer in cli mode captures an empty tree"),
        ({"granularity": "warp"}, "collect.proton.granularity need backend instrumentation"),
        ({"backend": "instrumentation", "instrumentation_mode": "fast"}, "'fast' is not one of"),
        (
            {"backend": "instrumentation", "backend_mode": "pcsampling", "granularity": "warp"},
            "backend_mode conflicts with granularity",
        ),  # fmt: skip
        ({"backend_mode": "pcsampling"}, "backend_mode needs a pinned backend"),
        (
            {"mode": "env", "backend": "roctracer", "backend_mode": "pcsampling"},
            "'pcsampling' is not one of periodic_flushing for backend roctracer",
        ),  # fmt: skip
        ({"mode": "x" * 10**6}, "collect.proton.mode: 'xxxxxxxx"),
    ],
)
def test_refused_recipes(proton, message):
    with pytest.raises(rc.Refused, match=None) as refused:
        options(**proton)
    assert message in str(refused.value) and len(str(refused.value)) < 300


@pytest.mark.parametrize("backend", ["auto", "rocprofiler", "roctracer"])
def test_rocprof_next_to_proton_is_refused(backend):
    data = {"collect": {"proton": {"mode": "env", "backend": backend}, "rocprof": {}}}
    with pytest.raises(rc.Refused, match="both intercept HSA queues"):
        rc.options(data)
    data["collect"]["proton"]["backend"] = "instrumentation"
    assert rc.options(data)["backend"] == "instrumentation"


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "no such file or directory"),
        ("collect: [unclosed", "not valid YAML"),
        ("- a list", "no collect.proton mapping"),
        ("collect:\n  rocprof: {}\n", "no collect.proton mapping"),
        (b"collect: {proton: {mode: \xff}}", "not UTF-8 text"),
        # An alias bomb: nine levels of nine, refused in one short line, at once.
        (
            "a: &a [x,x,x,x,x,x,x,x,x]\n"
            + "".join(
                f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=False)
            )
            + "collect: {proton: {mode: *i}}\n",
            "collect.proton.mode must be a string, got a list",
        ),  # fmt: skip
    ],
)
def test_unreadable_recipes_are_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "r.yaml"
    if text is not None:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert rc.main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err and len(err) < 400


def test_recipe_is_read_without_importing_from_the_current_folder(tmp_path):
    # profile.sh reads the recipe in isolated mode: a yaml.py here is not imported.
    (tmp_path / "yaml.py").write_text("raise SystemExit('the yaml.py here ran')\n")
    p = profile("--recipe", ROOT / "recipe.yaml", "--dry-run", *MINE, cwd=tmp_path)
    assert p.returncode == 0 and "ran" not in p.stderr, p.stderr


# profile.sh: the command it builds.


def test_dry_run_of_the_shipped_recipe(tmp_path):
    out = tmp_path / "res"
    lines = dry_run("--output", out, "--", "python", "mine.py", "--n", "4096")
    assert lines == [
        f"python -m triton.profiler.proton -n {out}/proton --context python --data tree "
        "mine.py --n 4096"
    ]
    assert not out.exists()  # a dry run creates nothing


def test_the_command_comes_from_the_caller():
    p = profile("--dry-run")
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1
    assert "no command: give one after --" in p.stderr
    p = profile("--help")
    assert p.returncode == 0 and "-- COMMAND" in p.stdout and "mine.py" in p.stdout


def test_dry_run_variants(tmp_path):
    out = tmp_path / "o"
    cmd = ["--output", out, "--", PY, "mine.py", "--iters", "3"]
    line = dry_run("--recipe", recipe(tmp_path, backend="cupti", hook="triton"), *cmd)
    assert shlex.split(line[0]) == [
        PY, "-m", "triton.profiler.proton", "-n", f"{out}/proton", "-b", "cupti",
        "--context", "python", "--data", "tree", "-k", "triton", "mine.py", "--iters", "3",
    ]  # fmt: skip
    env_lines = dry_run("--recipe", recipe(tmp_path, mode="env"), *cmd)
    assert env_lines == [
        f"export AORTA_PROTON_DIR={out}",
        f"export AORTA_PROTON_NAME={out}/proton",
        "export AORTA_PROTON_CONTEXT=python",
        "export AORTA_PROTON_DATA=tree",
        f"{PY} mine.py --iters 3",
    ]
    pinned = dry_run("--recipe", recipe(tmp_path, mode="env", backend="roctracer"), *cmd)
    assert "export AORTA_PROTON_BACKEND=roctracer" in pinned
    assert pinned[-1] == f"{PY} mine.py --iters 3"


def test_dry_run_keeps_spaces_and_can_be_pasted(tmp_path):
    out = tmp_path / "with space"
    python = tmp_path / "my python" / "python3"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nexec "{PY}" "$@"\n')
    python.chmod(0o755)
    lines = dry_run("--output", out, "--", python, "my script.py", "a b", "")
    assert shlex.split(lines[0]) == [
        str(python), "-m", "triton.profiler.proton", "-n", f"{out}/proton",
        "--context", "python", "--data", "tree", "my script.py", "a b", "",
    ]  # fmt: skip


def test_instrumentation_goes_through_the_launcher_with_its_mode(tmp_path):
    r = recipe(tmp_path, backend="instrumentation", instrumentation_mode="default",
               granularity="warp")  # fmt: skip
    (line,) = dry_run("--recipe", r, "--output", tmp_path, "--", PY, "mine.py")
    assert shlex.split(line) == [
        PY, str(LAUNCH), "-n", f"{tmp_path}/proton", "-b", "instrumentation", "--context",
        "python", "--data", "tree", "--mode", "default:granularity=warp", "mine.py",
    ]  # fmt: skip
    (line,) = dry_run("--backend", "instrumentation", "--output", tmp_path, *MINE)  # make intra
    assert f"{LAUNCH} -n {tmp_path}/proton -b instrumentation" in line
    env = dry_run("--recipe", recipe(tmp_path, mode="env", backend="instrumentation",
                                     granularity="warp"), *MINE)  # fmt: skip
    assert "export AORTA_PROTON_MODE=default:granularity=warp" in env


def test_dry_run_of_a_two_host_torchrun_job(tmp_path):
    # What a cluster user runs on each host: every rank writes its own capture.
    job = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", "host0:29500", "mine.py", "--rows", "8192"]  # fmt: skip
    lines = dry_run("--output", tmp_path / "shared", "--", *job)
    launch = [str(LAUNCH), "-n", f"{tmp_path}/shared/proton", "--context", "python", "--data",
              "tree", "mine.py", "--rows", "8192"]  # fmt: skip
    assert shlex.split(lines[0]) == [*job[:9], *launch]
    assert shlex.split(lines[1].removeprefix("# each rank runs: ")) == launch
    assert lines[2].startswith(f"# and writes {tmp_path}/shared/proton.rank<R>.hatchet (R from")
    srun = dry_run("--output", tmp_path, "--", "srun", "-N", "2", "torchrun", "mine.py")
    assert shlex.split(srun[0])[:4] == ["srun", "-N", "2", "torchrun"]
    env = dry_run("--recipe", recipe(tmp_path, mode="env"), "--", *job)  # each rank's name
    assert shlex.split(env[-3])[9:13] == [str(LAUNCH), "-n", f"{ROOT}/profiling_results/proton",
                                          "--env"]  # fmt: skip


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"HIP_VISIBLE_DEVICES": "1"},
            ["unset HIP_VISIBLE_DEVICES", "export ROCR_VISIBLE_DEVICES=1"],
        ),
        (
            {"HIP_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "0"},
            [
                "unset HIP_VISIBLE_DEVICES",
                "unset CUDA_VISIBLE_DEVICES",
                "export ROCR_VISIBLE_DEVICES=2\\,3",
            ],
        ),
        ({"HIP_VISIBLE_DEVICES": "1", "ROCR_VISIBLE_DEVICES": "4"}, ["unset HIP_VISIBLE_DEVICES"]),
        (
            {"ROCR_VISIBLE_DEVICES": "4", "CUDA_VISIBLE_DEVICES": "0"},
            ["unset CUDA_VISIBLE_DEVICES"],
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "0"},
            ["unset CUDA_VISIBLE_DEVICES", "export ROCR_VISIBLE_DEVICES=0"],
        ),
    ],
)
def test_device_variables_move_to_rocr_on_amd(env, expected):
    p = profile("--dry-run", *MINE, env={**env, "PROFILE_ASSUME_GPU": "amd"})
    assert p.returncode == 0
    assert p.stdout.splitlines()[:-2] == expected
    assert ("warning" in p.stderr) == bool(expected)


@pytest.mark.parametrize("host", ["nvidia", "1"])
@pytest.mark.parametrize(
    "env",
    [{"ROCR_VISIBLE_DEVICES": "4"}, {"HIP_VISIBLE_DEVICES": "1"}, {"ROCR_VISIBLE_DEVICES": "0"}],
)
def test_the_gpu_selection_stays_where_no_amd_backend_reads_it(env, host):
    # A cluster's environment may set AMD's variables on an NVIDIA host too.
    env = {**env, "CUDA_VISIBLE_DEVICES": "2", "PROFILE_ASSUME_GPU": host}
    p = profile("--dry-run", *MINE, env=env)
    assert p.returncode == 0 and "unset" not in p.stdout and "warning" not in p.stderr


def test_an_amd_backend_alone_establishes_amd(tmp_path):
    r = recipe(tmp_path, mode="env", backend="rocprofiler")
    lines = dry_run("--recipe", r, *MINE, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert lines[:2] == ["unset CUDA_VISIBLE_DEVICES", "export ROCR_VISIBLE_DEVICES=1"]
    # The instrumentation backend intercepts no queue: aorta leaves its variables alone.
    r = recipe(tmp_path, backend="instrumentation")
    lines = dry_run("--recipe", r, *MINE, env={"HIP_VISIBLE_DEVICES": "1"})
    assert not lines[0].startswith("unset")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--output"], "--output needs a directory"),
        (["--output", "", *MINE], "--output needs a directory, not an empty name"),
        (["--output", "README.md", *MINE], "--output README.md: not a directory"),
        (["--frobnicate"], "unknown argument: --frobnicate"),
        (["--data", "csv", *MINE], "--data: 'csv' is not one of tree, trace"),
        (["--backend", "gdb", *MINE], "--backend: 'gdb' is not one of auto"),
        (["--", "bash", "-c", "true"], "must run a .py script (e.g. -- python mine.py)"),
        (["--", "mine.py"], "must start with the script's interpreter or launcher"),
        (["--", "/no/python3", "mine.py"], "no interpreter /no/python3"),
        (["--recipe", "/no/such.yaml", *MINE], "no such file or directory"),
    ],
)
def test_usage_errors_are_one_line(args, message):
    p = profile("--dry-run", *args)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr


def test_a_python_without_pyyaml_is_a_usage_error(tmp_path):
    bare = tmp_path / "python3"  # an interpreter that cannot import yaml
    bare.write_text(f'#!/bin/sh\n[ "$1" = -I ] && shift\nexec "{PY}" -c "import runpy, sys; '
                    "sys.modules['yaml'] = None; sys.argv = sys.argv[1:]; "
                    "runpy.run_path(sys.argv[0], run_name='__main__')\" \"$@\"\n")  # fmt: skip
    bare.chmod(0o755)
    p = profile("--dry-run", "--", bare, "mine.py")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "has no PyYAML" in p.stderr


def test_cdpath_does_not_change_where_profile_sh_looks(tmp_path):
    p = profile("--dry-run", *MINE, env={"CDPATH": str(tmp_path)})
    assert p.returncode == 0 and p.stdout.count("\n") == 2


@pytest.mark.skipif(any(map(os.path.exists, ("/dev/nvidiactl", "/dev/kfd"))),
                    reason="a GPU driver is here (the hidden GPU is tested on it)")  # fmt: skip
def test_no_gpu_is_refused_at_once(tmp_path):
    p = profile("--output", tmp_path, "--", PY, "-c", "raise SystemExit('ran')", "x.py")
    assert p.returncode == 2
    assert "no GPU visible: Proton needs one" in p.stderr and "ran" not in p.stderr


# After the run, with a fake env-mode payload standing in for Proton.

FAKE = """
import os, shutil, sys, time
what = sys.argv[1]
if what == "fail":
    raise SystemExit(7)
if what == "wait":  # stands for a long run: says it started, then writes late
    open(sys.argv[2], "w").write(str(os.getpid()))
    try:
        time.sleep(float(sys.argv[3]))
    except KeyboardInterrupt:  # takes its time to end, as Proton writing a capture does
        print("interrupted,", flush=True)
        time.sleep(2.5)
        print("finished", flush=True)
        raise SystemExit(130)
if what == "read":  # reads the terminal (stdin)
    print("read:", sys.stdin.readline().strip())
if what != "none":
    ext = ".chrome_trace" if os.environ["AORTA_PROTON_DATA"] == "trace" else ".hatchet"
    for capture in sys.argv[1:]:
        if os.path.isfile(capture):
            rank = os.path.basename(capture).partition(".rank")[2].partition(".")[0]
            name = os.environ["AORTA_PROTON_NAME"] + (f".rank{rank}" if rank else "")
            shutil.copy(capture, name + ext)
"""
TREE = FIXTURES / "amd-gfx950-vecadd-shadow.hatchet"


def fake_args(tmp_path, *captures, options=(), out=None):
    payload = tmp_path / "payload.py"
    payload.write_text(FAKE)
    out = tmp_path / "out" if out is None else out
    r = recipe(tmp_path, mode="env")
    return ["--recipe", r, "--output", out, *options, "--", PY, payload, *captures], out


def fake_run(tmp_path, *captures, options=(), out=None):
    args, out = fake_args(tmp_path, *captures, options=options, out=out)
    return profile(*args, env={"PROFILE_ASSUME_GPU": "1"}), out


def test_good_capture_writes_summary(tmp_path):
    p, out = fake_run(tmp_path, FIXTURES / "amd-gfx950-vecadd-shadow.hatchet")
    assert p.returncode == 0, p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["proton_kernel_count"] == 12
    assert summary["proton_top_kernels"][0] == "add_kernel"
    assert summary["proton_artifact_dir"] == str(out)
    assert "add_kernel" in p.stdout  # the kernel table


def test_data_trace_without_editing_the_recipe(tmp_path):
    line = dry_run("--data", "trace", "--output", tmp_path, *MINE)[0]
    assert "--context python --data trace mine.py" in line
    p, out = fake_run(tmp_path, TRACE,
                      options=["--data", "trace"])  # fmt: skip
    assert p.returncode == 0, p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["proton_timeline"][0]["launches"] == 20
    assert "the host's launch cost bounds it" in p.stdout


def test_only_this_tool_s_files_are_cleared_and_only_this_run_s_summarised(tmp_path):
    # An earlier run of more ranks, of phases, of the other data kind: cleared, not
    # counted. Files of the same stem that this tool never writes: left alone.
    out = tmp_path / "out"
    out.mkdir()
    stale = ["proton.rank7.chrome_trace", "proton.chrome_trace", "proton.hatchet",
             "proton.part_0.hatchet", "proton.rank1.part_2.chrome_trace",
             "proton.hatchet_msgpack", "proton.provenance.json", "proton.rank7.provenance.json",
             "summary.json"]  # fmt: skip
    theirs = ["proton.rank0.baseline.hatchet", "proton.rankings.hatchet", "proton.txt",
              "proton.rank1.hatchet.bak", "notes.json"]  # fmt: skip
    tree = (FIXTURES / "amd-gfx950-vecadd-shadow.hatchet").read_bytes()
    for file in stale + theirs:
        (out / file).write_bytes(tree)
    p, _ = fake_run(tmp_path, TRACE, options=["--data", "trace"])
    assert p.returncode == 0, p.stderr
    # Gone, or written anew by this run (its provenance, its summary).
    assert not [f for f in stale if (out / f).exists() and (out / f).read_bytes() == tree]
    assert all((out / file).read_bytes() == tree for file in theirs)
    summary = json.loads((out / "summary.json").read_text())
    assert "add_kernel" not in summary["proton_top_kernels"]


def test_root_only_tree_is_an_error(tmp_path):
    tree = tmp_path / "root.hatchet"
    tree.write_text(json.dumps([{"frame": {"name": "ROOT"}, "metrics": {}, "children": []}, {}]))
    p, out = fake_run(tmp_path, tree)
    assert p.returncode == 1
    assert "no timed kernel" in p.stderr and "proton.start()" in p.stderr
    assert not (out / "summary.json").exists()


def test_missing_capture_is_an_error(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "proton.hatchet").write_text("[]")  # an earlier run's file
    (tmp_path / "out" / "summary.json").write_text("{}")  # and its summary
    p, out = fake_run(tmp_path, "none")
    assert p.returncode == 1
    assert "the run wrote no profile" in p.stderr and "sys.exit" in p.stderr
    assert not (out / "summary.json").exists()


def test_failing_payload_passes_its_exit_code_on(tmp_path):
    p, out = fake_run(tmp_path, "fail")
    assert p.returncode == 7
    assert "the command exited 7" in p.stderr
    assert not (out / "summary.json").exists()


def test_summary_has_the_umask_s_mode(tmp_path):
    old = os.umask(0o022)
    try:
        p, out = fake_run(tmp_path, FIXTURES / "amd-gfx950-vecadd-shadow.hatchet")
    finally:
        os.umask(old)
    assert p.returncode == 0 and (out / "summary.json").stat().st_mode & 0o777 == 0o644


# proton_launch.py: what it does besides starting Proton, in this process.


@pytest.mark.parametrize(
    "env, name",
    [
        ({}, "out/proton"),
        ({"RANK": "3"}, "out/proton.rank3"),
        ({"SLURM_PROCID": "12"}, "out/proton.rank12"),
        ({"RANK": "1", "SLURM_PROCID": "12"}, "out/proton.rank1"),  # torchrun's global rank
    ],
)
def test_each_rank_names_its_capture(env, name):
    assert proton_launch.rank_name("out/proton", env) == name


def test_a_bad_rank_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        proton_launch.rank_name("out/proton", {"RANK": "-1"})
    assert exit_.value.code == 2 and "RANK must be a whole number" in capsys.readouterr().err


def test_env_mode_exports_the_rank_s_name_and_runs_the_script(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint(os.environ['AORTA_PROTON_NAME'], sys.argv[1:])\n"
                      "raise SystemExit(3)\n")  # fmt: skip
    p = run(PY, LAUNCH, "--env", "-n", tmp_path / "proton", script, "a", "--b",
            env={"RANK": "2"})  # fmt: skip
    assert p.returncode == 3 and p.stdout == f"{tmp_path}/proton.rank2 ['a', '--b']\n"


@pytest.mark.parametrize(
    "arch, refused", [("gfx942:sramecc+:xnack-", False), ("gfx950", False), ("gfx90a", True)]
)
def test_instrumentation_refuses_an_amd_arch_it_cannot_compile_for(monkeypatch, capsys, arch,
                                                                   refused):  # fmt: skip
    from triton.runtime import driver

    target = SimpleNamespace(backend="hip", arch=arch)
    monkeypatch.setattr(driver, "_active", SimpleNamespace(get_current_target=lambda: target),
                        raising=False)  # fmt: skip
    monkeypatch.setattr(type(driver), "active", property(lambda self: self._active))
    if refused:
        with pytest.raises(SystemExit) as exit_:
            proton_launch.check_instrumentable()
        assert exit_.value.code == 2
        assert "compiles for gfx942 and gfx950 only, not gfx90a" in capsys.readouterr().err
    else:
        proton_launch.check_instrumentable()


def test_typed_modes_from_aorta_s_strings():
    mode = proton_launch.typed_mode("default:granularity=warp:sampling_strategy=selective:"
                                    "sampling_options=0")  # fmt: skip
    assert type(mode).__name__ == "Default" and mode.sampling_options == "0"
    assert proton_launch.typed_mode("pcsampling") == "pcsampling"  # other backends: as given
    with pytest.raises(SystemExit):
        proton_launch.typed_mode("default:granularity")


# On the GPU, end to end through make, with a payload of the tests' own.

PAYLOAD = "tests/payloads/vector_add.py"
N, ITERS = 98432, 10


def make(target, out, *variables, script=PAYLOAD, args=f"--n {N} --iters {ITERS}"):
    return run("make", "-s", target, f"OUT={out}", f"SCRIPT={script}", f"ARGS={args}", *variables)


def _check_capture(p, out, hook):
    assert p.returncode == 0, p.stdout + p.stderr
    assert "vector_add: PASS" in p.stdout
    assert (out / "proton.hatchet").is_file()
    summary = json.loads((out / "summary.json").read_text())
    (top,) = [k for k in summary["proton_kernels"] if k["name"].startswith("vector_add_kernel")]
    assert top["launches"] == ITERS + 1
    assert ("gbyte_per_s" in top) == hook
    if hook:  # named by the payload's launch_metadata, with the bytes it moves
        assert top["name"] == f"vector_add_kernel [{N}]"
        assert top["gbyte_per_s"] > 0
    sites = summary["proton_callsites"]
    ours = [s for s in sites if any(k["name"].startswith("vector_add") for k in s["kernels"])]
    # The checked launch and the loop: two sites, each a line of vector_add(), not a launcher's.
    assert sorted(k["launches"] for s in ours for k in s["kernels"]) == [1, ITERS]
    assert len(ours) == 2 and all(s["callsite"].endswith(" vector_add") for s in ours)


@pytest.mark.gpu
def test_gpu_make_profile(tmp_path):
    p = make("profile", tmp_path)
    _check_capture(p, tmp_path / "profile", hook=False)
    made = json.loads((tmp_path / "profile" / "summary.json").read_text())["proton_provenance"]
    assert made["triton"] == triton.__version__ and made["device"] and made["run_id"]
    assert made["backend_asked"] == "auto" and made["backend_used"] in ("cupti", "roctracer",
                                                                       "rocprofiler")  # fmt: skip


@pytest.mark.gpu
def test_gpu_make_profile_with_the_triton_hook(tmp_path):
    p = make("profile", tmp_path, f"RECIPE={recipe(tmp_path, hook='triton')}")
    _check_capture(p, tmp_path / "profile", hook=True)


@pytest.mark.gpu
def test_gpu_make_profile_of_two_ranks(tmp_path):
    p = make("profile", tmp_path, "NPROC=2", args="--iters 3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("PASS") == 2 and "vector_add[rank 1]: PASS" in p.stdout
    summary = json.loads((tmp_path / "profile" / "summary.json").read_text())
    assert [r["rank"] for r in summary["proton_ranks"]] == [0, 1]
    assert [r["files"] for r in summary["proton_ranks"]] == [
        [str(tmp_path / "profile" / f"proton.rank{r}.hatchet")] for r in (0, 1)
    ]


@pytest.mark.gpu
def test_gpu_make_intra(tmp_path):
    p = make("intra", tmp_path, args="--iters 2")
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((tmp_path / "intra" / "summary.json").read_text())
    scopes = {s["scope"]: s for s in summary["proton_scopes"]}
    assert set(scopes) == {"load", "store"}
    assert sum(s["share"] for s in scopes.values()) == pytest.approx(1.0)
    made = summary["proton_provenance"]
    assert made["backend_used"] == "instrumentation" and made["mode_used"].startswith("default")


GRAPH, REPLAYS = "tests/payloads/graph_replay.py", 50


@pytest.mark.gpu
def test_gpu_a_cuda_graph_s_replays_are_counted_in_tree_and_trace(tmp_path):
    launches = {}
    for target in ("profile", "trace"):
        p = make(target, tmp_path, script=GRAPH, args=f"--replays {REPLAYS}")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "graph_replay: PASS" in p.stdout
        summary = json.loads((tmp_path / target / "summary.json").read_text())
        ours = [k for k in summary["proton_kernels"] if k["name"].startswith("scale_kernel")]
        launches[target] = sum(k["launches"] for k in ours)
    assert launches["profile"] >= REPLAYS and launches["trace"] == launches["profile"], launches


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", ["", "-1"])
def test_gpu_hidden_by_a_device_variable_is_refused(tmp_path, hidden):
    p = profile("--output", tmp_path, "--", PY, PAYLOAD, env={"CUDA_VISIBLE_DEVICES": hidden})
    assert p.returncode == 2 and "no GPU visible" in p.stderr


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda path: os.mkfifo(path), "not a regular file"),  # would block the read
        (
            lambda path: path.write_text("collect: {proton: {mode: " + "9" * 5001 + "}}"),
            "not valid YAML",
        ),  # fmt: skip
        (lambda path: path.write_text("[" * 5000), "not valid YAML"),
        (
            lambda path: path.write_text('collect: {proton: {"\\e[31m\\nX": a}}'),
            "unknown key collect.proton.\\x1b[31m\\nX",
        ),  # fmt: skip
    ],
    ids=["fifo", "huge-int", "deep", "escape"],
)
def test_hostile_recipes_are_one_line(tmp_path, capsys, make, message):
    path = tmp_path / "r.yaml"
    make(path)
    assert rc.main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err, err


def test_the_launcher_refuses_a_bad_rank_or_a_missing_script(tmp_path):
    p = run(PY, LAUNCH, "--env", "-n", tmp_path / "x", "missing.py")
    assert p.returncode == 2 and "no such script" in p.stderr and "Traceback" not in p.stderr
    script = tmp_path / "s.py"
    script.write_text("")
    for rank in ("9" * 5000, "\u0661", "-1"):  # too long, an Arabic-Indic digit, negative
        p = run(PY, LAUNCH, "--env", "-n", tmp_path / "x", script, env={"RANK": rank})
        assert p.returncode == 2 and "RANK must be a whole number" in p.stderr


# A run and its output folder, its signals, its command and its ranks.


def test_a_second_run_into_the_same_folder_is_refused(tmp_path):
    started, out = tmp_path / "started", tmp_path / "out"
    args, _ = fake_args(tmp_path, "wait", started, "3", TREE)
    first = popen(args)
    try:
        wait_for(started)
        p, _ = fake_run(tmp_path, TREE)
        assert p.returncode == 2 and p.stderr.count("\n") == 1
        assert "is in use by another profile.sh run" in p.stderr
        assert first.wait(timeout=60) == 0  # its capture was neither cleared nor mixed
        assert json.loads((out / "summary.json").read_text())["proton_kernel_count"] == 12
    finally:
        first.kill()
    p, _ = fake_run(tmp_path, TREE)  # the lock went with the first run
    assert p.returncode == 0, p.stderr


def popen(args, **kw):
    env = {**os.environ, "PROFILE_ASSUME_GPU": "1"}
    return subprocess.Popen([str(PROFILE), *map(str, args)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # fmt: skip


def wait_for(path, seconds=60):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize(
    "sig, group, status",
    [(signal.SIGTERM, False, 143), (signal.SIGINT, True, 130), (signal.SIGTERM, True, 143)],
    ids=["TERM-to-profile.sh", "INT-to-the-group", "TERM-to-the-group"],
)
def test_a_signal_ends_the_workload_and_profile_sh_waits_for_it(tmp_path, sig, group, status):
    started, out = tmp_path / "started", tmp_path / "out"
    out.mkdir()
    (out / "theirs.txt").write_text("kept")
    args, _ = fake_args(tmp_path, "wait", started, "3", TREE)
    p = popen(args, start_new_session=True)  # a group of its own, as make's under a terminal
    try:
        wait_for(started)
        workload = int(started.read_text())
        if group:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        assert p.wait(timeout=30) == status
        assert gone(workload)  # ended, and waited for
        assert "stopped by SIG" in p.stderr.read()
        time.sleep(3.5)  # as long as the workload would have run: it writes nothing now
        assert sorted(f.name for f in out.iterdir()) == [".profile.lock", "theirs.txt"]
    finally:
        p.kill()


def test_the_workload_can_read_the_terminal(tmp_path):
    args, _ = fake_args(tmp_path, "read", TREE)
    p = popen(args, stdin=subprocess.PIPE)
    stdout, stderr = p.communicate("typed\n", timeout=60)
    assert p.returncode == 0 and "read: typed" in stdout, stderr


@pytest.mark.parametrize("builtin", ["exec", "source", ".", "eval", "die"])
def test_a_shell_builtin_as_the_command_is_refused(builtin):
    p = profile("--dry-run", "--", builtin, "python", "mine.py")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "must start with a program, not the shell's" in p.stderr


def test_an_output_name_keeps_its_trailing_newline(tmp_path):
    p, out = fake_run(tmp_path, TREE, out=tmp_path / "res\n")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "res\n" / "summary.json").is_file() and not (tmp_path / "res").exists()


def test_an_unwritable_output_folder_is_refused_before_the_workload_runs(tmp_path):
    if os.geteuid() == 0:  # root writes through modes: a folder no one can write in
        out = Path("/sys/kernel")
        if not out.is_dir():
            pytest.skip("no /sys/kernel")
    else:
        out = tmp_path / "ro"
        out.mkdir(mode=0o555)
    p, _ = fake_run(tmp_path, "wait", tmp_path / "ran", "0", TREE, out=out)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cannot write into" in p.stderr
    assert not (tmp_path / "ran").exists()


def test_pyyaml_on_pythonpath_is_found_and_the_current_folder_still_ignored(tmp_path):
    import yaml as real

    # An interpreter that sees no site-packages: PyYAML only through PYTHONPATH.
    bare = tmp_path / "bin" / "python3"
    bare.parent.mkdir()
    bare.write_text(f'#!/bin/sh\nexec "{PY}" -S "$@"\n')
    bare.chmod(0o755)
    path = tmp_path / "path"
    path.mkdir()
    (path / "yaml").symlink_to(Path(real.__file__).parent)
    (tmp_path / "yaml.py").write_text("raise SystemExit('the yaml.py here ran')\n")
    p = profile("--recipe", ROOT / "recipe.yaml", "--dry-run", "--", bare, "mine.py",
                env={"PYTHONPATH": str(path)}, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0 and "ran" not in p.stderr, p.stderr


@pytest.mark.parametrize(
    "command, env, world",
    [
        (["torchrun", "--nproc-per-node", "2", "mine.py"], {}, "2"),
        ([PY, "-m", "torch.distributed.run", "--nproc_per_node=4", "mine.py"], {}, "4"),
        (["torchrun", "--standalone", "--nproc-per-node=3", "mine.py"], {"WORLD_SIZE": "9"}, "3"),
        (["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "mine.py"], {}, None),
        (["torchrun", "--nproc-per-node", "gpu", "mine.py"], {}, None),
        (["mpirun", "-np", "3", PY, "mine.py"], {"WORLD_SIZE": "3"}, "3"),
        ([PY, "mine.py"], {"WORLD_SIZE": "3"}, None),  # one process: no rank to miss
    ],
)
def test_the_world_size_reaches_the_summariser_where_the_launcher_says_it(command, env, world):
    words = summariser("--", *command, env=env)
    assert (words[words.index("--world-size") + 1] if "--world-size" in words else None) == world


def test_a_capture_or_rank_not_read_keeps_the_summary_and_exits_1(tmp_path):
    # profile.sh beside a summariser that writes its summary and says a rank was missing.
    for name in ("profile.sh", "recipe.py", "proton_launch.py", "recipe.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "parse_hatchet.py").write_text(
        "import sys\nout = sys.argv[sys.argv.index('-o') + 1]\n"
        "open(out, 'w').write('{\"proton_unread\": [\"rank 1\"]}')\n"
        "print('parse_hatchet: rank 1 wrote no capture', file=sys.stderr)\nraise SystemExit(1)\n"
    )
    payload = tmp_path / "payload.py"
    payload.write_text(FAKE)
    out = tmp_path / "out"
    args = ["--recipe", recipe(tmp_path, mode="env"), "--output", out, "--", PY, payload, TREE]
    p = run(tmp_path / "profile.sh", *args, env={"PROFILE_ASSUME_GPU": "1"}, cwd=tmp_path)
    assert p.returncode == 1 and "summary.json says which" in p.stderr.splitlines()[-1]
    assert json.loads((out / "summary.json").read_text()) == {"proton_unread": ["rank 1"]}


@pytest.mark.parametrize(
    "env, rank",
    [
        ({}, None),
        ({"RANK": "3"}, 3),
        ({"SLURM_PROCID": "12"}, 12),
        ({"OMPI_COMM_WORLD_RANK": "2"}, 2),
        ({"PMI_RANK": "4"}, 4),
        ({"PMIX_RANK": "6"}, 6),
        # srun started torchrun, which started this rank: torchrun's RANK.
        ({"RANK": "1", "SLURM_PROCID": "12", "TORCHELASTIC_RUN_ID": "x"}, 1),
        # srun started this process: a RANK left exported in the shell is stale.
        ({"RANK": "0", "SLURM_PROCID": "5", "SLURM_TASK_PID": "100"}, 5),
        ({"RANK": "0", "SLURM_PROCID": "5", "SLURM_TASK_PID": "99"}, 5),  # through a shell
        # mpirun inside a Slurm batch job: the job's SLURM_PROCID is not this rank's.
        ({"OMPI_COMM_WORLD_RANK": "2", "SLURM_PROCID": "0"}, 2),
        # Another launcher under srun (one a host) sets RANK for each process.
        ({"RANK": "7", "SLURM_PROCID": "1", "SLURM_TASK_PID": "42"}, 7),
    ],
)
def test_each_launcher_s_rank(env, rank):
    assert proton_launch.global_rank(env, pid=100, ppid=99) == rank


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
    script.write_text("import os, sys\nprint(sys.argv[1:], os.environ.get('LOCAL_RANK'))\n")
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_RANK"}
    p = subprocess.run([PY, LAUNCH, "--env", "-n", tmp_path / "proton", script, "--", "-n", "x",
                        "--"], env={**env, "SLURM_LOCALID": "1"}, capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 0 and p.stdout == "['--', '-n', 'x', '--'] 1\n", p.stderr


# Provenance: what made each capture, and the run it belongs to.


def test_each_run_s_captures_carry_its_provenance_and_id(tmp_path):
    ids = []
    for _ in range(2):
        p, out = fake_run(tmp_path, TREE)
        assert p.returncode == 0, p.stderr
        record = json.loads((out / "proton.provenance.json").read_text())
        assert set(record) == {"triton", "torch", "device", "backend_asked", "backend_used",
                               "mode_asked", "mode_used", "run_id"}  # fmt: skip
        assert record["triton"] == triton.__version__ and record["backend_asked"] == "auto"
        assert record["backend_used"] is None  # an env-mode payload chose its own
        assert json.loads((out / "summary.json").read_text())["proton_provenance"] == record
        ids.append(record["run_id"])
    assert ids[0] and ids[0] != ids[1]


def test_each_rank_writes_its_own_provenance(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("")
    p = run(PY, LAUNCH, "--env", "-n", tmp_path / "proton", "--run-id", "r1", "-b", "cupti",
            script, env={"RANK": "2"})  # fmt: skip
    assert p.returncode == 0, p.stderr
    record = json.loads((tmp_path / "proton.rank2.provenance.json").read_text())
    assert record["run_id"] == "r1" and record["backend_asked"] == "cupti"
    p = run(PY, LAUNCH, "--provenance", "-n", tmp_path / "cli", "-b", "cupti", "--run-id", "r2")
    assert p.returncode == 0, p.stderr
    record = json.loads((tmp_path / "cli.provenance.json").read_text())
    assert record["backend_used"] == "cupti" and record["run_id"] == "r2"


def test_provenance_is_replaced_atomically_with_the_umask_s_mode(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("old")
    (tmp_path / "linked.provenance.json").symlink_to(target)
    old = os.umask(0o027)
    try:
        proton_launch.write_provenance(str(tmp_path / "plain"), {"run_id": "x"})
        proton_launch.write_provenance(str(tmp_path / "linked"), {"run_id": "y"})
    finally:
        os.umask(old)
    assert (tmp_path / "plain.provenance.json").stat().st_mode & 0o777 == 0o640
    assert json.loads(target.read_text()) == {"run_id": "y"}  # written through the link
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        "elsewhere.json", "linked.provenance.json", "plain.provenance.json"
    ]  # fmt: skip


def test_provenance_is_written_with_sigterm_and_sigint_held_off(tmp_path, monkeypatch):
    # A signal between the temporary file and its rename would leave the temporary file:
    # both wait until the file is in place.
    held = []
    real_replace = os.replace

    def replace(src, dst):
        held.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        real_replace(src, dst)

    monkeypatch.setattr(proton_launch.os, "replace", replace)
    proton_launch.write_provenance(str(tmp_path / "p"), {"run_id": "x"})
    assert {signal.SIGTERM, signal.SIGINT} <= held[0]
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def in_terminal(args):
    """profile.sh started on a terminal of its own, as the foreground job: (pid, the
    terminal's other end)."""
    argv, env = [str(PROFILE), *map(str, args)], {**os.environ, "PROFILE_ASSUME_GPU": "1"}
    pid, fd = pty.fork()
    if pid == 0:  # the child only replaces itself: nothing of pytest's may run here
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    return pid, fd


def finish(pid, fd):
    """What the terminal showed, and the exit status."""
    shown = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the terminal closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(fd)
    return shown.decode(errors="replace"), os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_on_a_terminal_the_workload_reads_it(tmp_path):
    args, _ = fake_args(tmp_path, "read", TREE)
    pid, fd = in_terminal(args)
    os.write(fd, b"typed\n")
    shown, status = finish(pid, fd)
    assert status == 0 and "read: typed" in shown, shown


def test_ctrl_c_on_a_terminal_ends_the_workload_once(tmp_path):
    started, out = tmp_path / "started", tmp_path / "out"
    args, _ = fake_args(tmp_path, "wait", started, "30", TREE)
    pid, fd = in_terminal(args)
    try:
        wait_for(started)
        os.write(fd, b"\x03")  # Ctrl-C: SIGINT to the terminal's foreground group
        shown, status = finish(pid, fd)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert status == 130 and gone(int(started.read_text())), shown
    # The workload got one interrupt, from the terminal: its exit was not cut short.
    assert "stopped by SIGINT" in shown and "interrupted,\r\nfinished" in shown, shown
    assert sorted(f.name for f in out.iterdir()) == [".profile.lock"]


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_lock_file_that_is_not_a_file_is_refused(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    if kind == "link":
        (out / ".profile.lock").symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(out / ".profile.lock")  # opening it to write would block
    p, _ = fake_run(tmp_path, TREE)
    assert p.returncode == 2 and "not a regular file" in p.stderr
    assert not (tmp_path / "elsewhere").exists()

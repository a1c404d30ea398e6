"""profile.sh and recipe.yaml: the command it builds, what it refuses, and how it checks
a capture. The post-run checks use a fake env-mode payload that writes a given tree."""

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run

PROFILE = ROOT / "profile.sh"
FIXTURES = Path(__file__).parent / "fixtures"
PY = sys.executable
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
    p = profile("--dry-run", *args, **kw)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_shipped_recipe_is_the_aorta_recipe():
    data = yaml.safe_load((ROOT / "recipe.yaml").read_text())
    assert data["schema_version"] == 1 and data["mode"] == "probe"
    assert data["ticket"] == "PROFILING-TRITON-SOFTMAX"
    assert data["trials"] == 1 and data["timeout_per_trial"] == 1800
    assert data["mitigation_axis"] == ["none"] and data["diagnostic_axis"] == ["none"]
    assert data["env_passthrough_mode"] == "inherit"
    proton = {"mode": "cli", "backend": "auto", "context": "python", "data": "tree"}
    assert data["collect"] == {"proton": proton}


def test_dry_run_of_the_shipped_recipe(tmp_path):
    out = tmp_path / "res"
    lines = dry_run("--output", out)
    assert lines == [
        f"python -m triton.profiler.proton -n {out}/proton --context python --data tree "
        "softmax.py --rows 4096 --cols 1024 --iters 20"
    ]
    assert not out.exists()  # a dry run creates nothing


def test_dry_run_variants(tmp_path):
    out = tmp_path / "o"
    cmd = ["--output", out, "--", PY, "softmax.py", "--iters", "3"]
    line = dry_run("--recipe", recipe(tmp_path, backend="cupti", hook="triton"), *cmd)
    assert shlex.split(line[0]) == [
        PY, "-m", "triton.profiler.proton", "-n", f"{out}/proton", "-b", "cupti",
        "--context", "python", "--data", "tree", "-k", "triton", "softmax.py", "--iters", "3",
    ]  # fmt: skip
    env_lines = dry_run("--recipe", recipe(tmp_path, mode="env"), *cmd)
    assert env_lines == [
        f"export AORTA_PROTON_DIR={out}",
        f"export AORTA_PROTON_NAME={out}/proton",
        "export AORTA_PROTON_CONTEXT=python",
        "export AORTA_PROTON_DATA=tree",
        f"{PY} softmax.py --iters 3",
    ]
    pinned = dry_run("--recipe", recipe(tmp_path, mode="env", backend="roctracer"), *cmd)
    assert "export AORTA_PROTON_BACKEND=roctracer" in pinned
    assert pinned[-1] == f"{PY} softmax.py --iters 3"


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
        ({"CUDA_VISIBLE_DEVICES": "0"}, []),  # NVIDIA: left alone
    ],
)
def test_device_variables_move_to_rocr_on_amd(env, expected):
    p = profile("--dry-run", env=env)
    assert p.returncode == 0
    assert p.stdout.splitlines()[:-1] == expected
    assert ("warning" in p.stderr) == bool(expected)


def test_an_amd_backend_alone_establishes_amd(tmp_path):
    r = recipe(tmp_path, mode="env", backend="rocprofiler")
    lines = dry_run("--recipe", r, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert lines[:2] == ["unset CUDA_VISIBLE_DEVICES", "export ROCR_VISIBLE_DEVICES=1"]


@pytest.mark.parametrize(
    "proton, message",
    [
        ({"colour": "red"}, "unknown key collect.proton.colour"),
        ({"context": 3}, "collect.proton.context must be a string, got 3"),
        ({"data": True}, "collect.proton.data must be a string"),
        ({"mode": "daemon"}, "collect.proton.mode: 'daemon' is not one of cli, env"),
        ({"backend": "nsys"}, "collect.proton.backend: 'nsys' is not one of auto"),
        ({"context": "full"}, "collect.proton.context: 'full' is not one of shadow, python"),
        ({"data": "csv"}, "collect.proton.data: 'csv' is not one of tree, trace"),
        ({"hook": "torch"}, "collect.proton.hook: 'torch' is not one of triton"),
        ({"backend": "roctracer"}, "backend roctracer in cli mode captures an empty tree"),
        ({"granularity": "warp"}, "collect.proton.granularity is read by aorta only"),
    ],
)
def test_refused_recipes(tmp_path, proton, message):
    p = profile("--recipe", recipe(tmp_path, **proton), "--dry-run")
    assert p.returncode == 2
    assert p.stdout == "" and p.stderr.count("\n") == 1
    assert message in p.stderr


@pytest.mark.parametrize("backend", ["auto", "rocprofiler", "roctracer"])
def test_rocprof_next_to_proton_is_refused(tmp_path, backend):
    path = recipe(tmp_path, mode="env", backend=backend)
    data = yaml.safe_load(path.read_text())
    data["collect"]["rocprof"] = {}
    path.write_text(yaml.safe_dump(data))
    p = profile("--recipe", path, "--dry-run")
    assert p.returncode == 2 and "both intercept HSA queues" in p.stderr
    data["collect"]["proton"]["backend"] = "instrumentation"
    path.write_text(yaml.safe_dump(data))
    assert profile("--recipe", path, "--dry-run").returncode == 0


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "no such file or directory"),
        ("collect: [unclosed", "not valid YAML"),
        ("- a list", "no collect.proton mapping"),
        ("collect:\n  rocprof: {}\n", "no collect.proton mapping"),
    ],
)
def test_missing_or_malformed_recipe(tmp_path, text, message):
    path = tmp_path / "r.yaml"
    if text is not None:
        path.write_text(text)
    p = profile("--recipe", path, "--dry-run")
    assert p.returncode == 2 and message in p.stderr and p.stderr.count("\n") == 1


def test_usage_errors():
    assert profile("--output").returncode == 2
    p = profile("--frobnicate")
    assert p.returncode == 2 and "unknown argument: --frobnicate" in p.stderr
    p = profile("--recipe", ROOT / "recipe.yaml", "--", "bash", "-c", "true", "--dry-run")
    assert p.returncode == 2 and "needs a command that starts with its Python" in p.stderr


def test_no_gpu_is_refused_at_once(tmp_path):
    p = profile("--output", tmp_path, "--", PY, "-c", "raise SystemExit('ran')")
    assert p.returncode == 2
    assert "no GPU visible: Proton needs one" in p.stderr and "ran" not in p.stderr


# After the run, with a fake env-mode payload standing in for Proton.

FAKE = """
import os, shutil, sys
if sys.argv[1] == "fail":
    raise SystemExit(7)
if sys.argv[1] != "none":
    ext = ".chrome_trace" if os.environ["AORTA_PROTON_DATA"] == "trace" else ".hatchet"
    shutil.copy(sys.argv[1], os.environ["AORTA_PROTON_NAME"] + ext)
"""


def fake_run(tmp_path, tree, *options):
    payload = tmp_path / "payload.py"
    payload.write_text(FAKE)
    out = tmp_path / "out"
    r = recipe(tmp_path, mode="env")
    args = ["--recipe", r, "--output", out, *options, "--", PY, payload, tree]
    return profile(*args, env={"PROFILE_ASSUME_GPU": "1"}), out


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="fixtures missing")
def test_good_capture_writes_summary(tmp_path):
    p, out = fake_run(tmp_path, FIXTURES / "amd-gfx950-vecadd-shadow.hatchet")
    assert p.returncode == 0, p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["proton_kernel_count"] == 12
    assert summary["proton_top_kernels"][0] == "add_kernel"
    assert summary["proton_artifact_dir"] == str(out)
    assert "add_kernel" in p.stdout  # the kernel table


def test_data_trace_without_editing_the_recipe(tmp_path):
    line = dry_run("--data", "trace", "--output", tmp_path)[0]
    assert "--context python --data trace softmax.py" in line
    p = profile("--data", "csv", "--dry-run")
    assert p.returncode == 2 and "--data: 'csv' is not one of tree, trace" in p.stderr
    p, out = fake_run(tmp_path, FIXTURES / "h200-softmax-python.chrome_trace", "--data", "trace")
    assert p.returncode == 0, p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["proton_timeline"][0]["launches"] == 20
    assert "the host's launch cost bounds it" in p.stdout


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
    p, out = fake_run(tmp_path, "none")
    assert p.returncode == 1
    assert "the run wrote no profile" in p.stderr and "sys.exit" in p.stderr


def test_failing_payload_passes_its_exit_code_on(tmp_path):
    p, out = fake_run(tmp_path, "fail")
    assert p.returncode == 7
    assert "the command exited 7" in p.stderr
    assert not (out / "summary.json").exists()


# On the GPU, end to end through make.


def _check_capture(p, out, hook):
    assert p.returncode == 0, p.stdout + p.stderr
    assert "softmax: PASS" in p.stdout
    assert (out / "proton.hatchet").is_file()
    summary = json.loads((out / "summary.json").read_text())
    top = summary["proton_kernels"][0]
    assert top["name"].startswith("softmax_kernel")
    assert top["launches"] == 20 + 1
    assert ("gbyte_per_s" in top) == hook
    if hook:  # named by softmax.py's launch_metadata, with the bytes it moves
        assert top["name"] == "softmax_kernel [4096x1024 float32]"
        assert top["gbyte_per_s"] > 100
    sites = summary["proton_callsites"]
    ours = [s for s in sites if any(k["name"].startswith("softmax_kernel") for k in s["kernels"])]
    assert sorted(k["launches"] for s in ours for k in s["kernels"]) == [1, 20]
    torch_site = [
        s for s in sites if any("softmax_warp_forward" in k["name"] for k in s["kernels"])
    ]
    assert len(ours) == 2 and len(torch_site) == 1 and torch_site[0] not in ours


@pytest.mark.gpu
def test_gpu_make_profile(tmp_path):
    out = tmp_path / "results"
    p = run("make", "-s", "profile", f"OUT={out}")
    _check_capture(p, out, hook=False)


@pytest.mark.gpu
def test_gpu_make_profile_with_the_triton_hook(tmp_path):
    out = tmp_path / "results"
    p = run("make", "-s", "profile", f"OUT={out}", f"RECIPE={recipe(tmp_path, hook='triton')}")
    _check_capture(p, out, hook=True)


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", ["", "-1"])
def test_gpu_hidden_by_a_device_variable_is_refused(tmp_path, hidden):
    p = profile("--output", tmp_path, env={"CUDA_VISIBLE_DEVICES": hidden})
    assert p.returncode == 2 and "no GPU visible" in p.stderr

"""The container path, checked without Docker: the Dockerfile's contract and the
docker commands make would run for each GPU kind."""

import os
import re
import shlex
import shutil

import pytest

from conftest import ROOT, run

DOCKERFILE = (ROOT / "Dockerfile").read_text()
# The image is named after the checkout's folder, lowercased, other characters as "-".
PROJECT = re.sub(r"[^a-z0-9_.-]", "-", ROOT.name.lower())


def test_dockerfile_pins_a_rocm_base_and_installs_no_torch():
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE, re.M)[1]
    assert base.startswith("rocm/pytorch:rocm") and "latest" not in base
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", DOCKERFILE, re.M)
    runs = " ".join(re.findall(r"^RUN (.*)$", DOCKERFILE, re.M))
    assert "make setup" in runs and not re.search(r"\b(torch|triton)\b", runs)
    assert "PIP_NO_CACHE_DIR=1" in DOCKERFILE
    assert re.search(r'^CMD \["make", "run"\]$', DOCKERFILE, re.M)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "profiling_results", ".git"} <= set(ignored)


def make_n(*args):
    p = run("make", "--no-print-directory", "-n", *args)
    assert p.returncode == 0, p.stderr
    return shlex.split(p.stdout.replace("\\\n", " "))  # joined where make continued a line


ROCM = [
    "--device=/dev/kfd",
    "--device=/dev/dri",
    "--group-add",
    "video",
    "--ipc=host",
    "--security-opt",
    "seccomp=unconfined",
]


@pytest.mark.parametrize("target", ["docker-run", "docker-profile", "docker-test"])
def test_docker_flags_for_each_gpu_kind(target):
    rocm = make_n(target)
    rocm = rocm[rocm.index("docker") :]  # docker-profile checks OUT first
    assert rocm[:3] == ["docker", "run", "--rm"] and rocm[3:10] == ROCM
    assert rocm[10:14] == ["-v", f"{ROOT}:/work", "-w", "/work"]
    assert rocm[14] == f"{PROJECT}:rocm"
    nvidia = make_n(target, "GPU=nvidia")
    nvidia = nvidia[nvidia.index("docker") :]
    assert nvidia[3:6] == ["--gpus", "all", "--ipc=host"] and "/dev/kfd" not in " ".join(nvidia)
    assert f"{PROJECT}:nvidia" in nvidia


def test_docker_build_picks_the_base_image():
    rocm_base = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE, re.M)[1]
    rocm = make_n("docker-build")
    assert rocm[:4] == ["docker", "build", "--build-arg", f"BASE_IMAGE={rocm_base}"]
    assert rocm[4:] == ["-t", f"{PROJECT}:rocm", str(ROOT)]  # wherever make runs
    nvidia = make_n("docker-build", "GPU=nvidia")
    assert nvidia[3].startswith("BASE_IMAGE=pytorch/pytorch:") and "cuda" in nvidia[3]
    custom = make_n("docker-build", "BASE_IMAGE=rocm/pytorch@sha256:abc", "IMAGE=me/x:1")
    assert custom[3] == "BASE_IMAGE=rocm/pytorch@sha256:abc" and custom[5] == "me/x:1"


@pytest.mark.parametrize("how", ["-C", "-f"])
def test_a_checkout_whose_path_holds_a_space_is_mounted_and_built_whole(tmp_path, how):
    checkout = tmp_path / "my dir" / "p"
    checkout.mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", checkout)
    where = [how, checkout if how == "-C" else checkout / "Makefile"]
    assert make_n(*where, "docker-build")[-3:] == ["-t", "p:rocm", str(checkout)]
    docker = make_n(*where, "docker-run")
    assert docker[docker.index("-v") + 1] == f"{checkout}:/work"
    p = run("make", "--no-print-directory", *where, "help")
    assert p.returncode == 0 and "make docker-build" in p.stdout, p.stderr


def test_docker_profile_hands_results_back_and_quotes_every_value(tmp_path):
    # A docker that writes down the words it was given, one per NUL.
    (tmp_path / "docker").write_text('#!/bin/sh\nprintf "%s\\0" "$@" > "$WORDS"\n')
    (tmp_path / "docker").chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "WORDS": str(tmp_path / "words")}
    out = ROOT / "my res"  # inside the checkout, given by its full path
    p = run(
        "make",
        "-s",
        "docker-profile",
        f"OUT={out}",
        "ARGS=--n '4; touch /tmp/x'",
        "TRIALS=3",
        env=env,
    )
    assert p.returncode == 0, p.stderr
    words = (tmp_path / "words").read_text().split("\0")[:-1]
    script, owner, given, *args = words[words.index("-c") + 1 :]
    assert "make profile" in script and 'chown -R "$owner" -- "$out"' in script
    assert owner == f"{os.getuid()}:{os.getgid()}" and given == "my res"  # as the container sees it
    assert "OUT=my res" in args and "ARGS=--n '4; touch /tmp/x'" in args and "TRIALS=3" in args


@pytest.mark.parametrize("out", ["/", "..", "/tmp/elsewhere"])
def test_docker_profile_refuses_an_out_the_container_cannot_see(out):
    p = run("make", "--no-print-directory", "docker-profile", f"OUT={out}")
    assert p.returncode == 2 and "OUT must lie inside" in p.stderr

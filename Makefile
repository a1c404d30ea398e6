# Every target runs in .venv, made from PYTHON: the interpreter that already holds the
# platform's torch and triton (a ROCm or CUDA container's own builds) where there is one.
PYTHON ?= python3
VENV ?= .venv
# Installed only where PYTHON cannot import them already (a CPU machine, say).
TORCH ?= torch==2.13.0
TRITON ?= triton==3.9.0
# The script run, profiled and traced, and its arguments: ARGS is split on whitespace
# into words, each passed as it is (no globbing); for words holding spaces, run
# ./profile.sh -- python mine.py ... instead. The defaults run the example.
SCRIPT ?= softmax.py
ROWS ?= 4096
COLS ?= 1024
ITERS ?= 20
DTYPE ?= float32
ARGS ?= --rows $(ROWS) --cols $(COLS) --dtype $(DTYPE) --iters $(ITERS)
# intra-trace records every warp's scopes: its launches after the checked one.
TRACE_ITERS ?= 1
TRACE_ARGS ?= --rows $(ROWS) --cols $(COLS) --dtype $(DTYPE) --iters $(TRACE_ITERS)
# Processes, one a GPU: more than 1 starts SCRIPT through torch's launcher.
NPROC ?= 1
RECIPE ?= recipe.yaml
OUT ?= profiling_results
PYTEST_ARGS ?=
# make bench: a subset of its points (rows, logits, backward, host, profiling); QUACK=1 adds QuACK.
POINTS ?=
QUACK ?=
# make bench-report MERGE='part.json part.json': subset runs joined into one whole run.
MERGE ?=
# The container: GPU=rocm (default) or nvidia picks the base image and docker's flags.
GPU ?= rocm
ROCM_BASE ?= rocm/pytorch:rocm7.14_ubuntu24.04_py3.12_pytorch_release_2.11.0
NVIDIA_BASE ?= pytorch/pytorch:2.11.0-cuda12.8-cudnn9-devel
BASE_IMAGE ?= $(if $(filter nvidia,$(GPU)),$(NVIDIA_BASE),$(ROCM_BASE))
# The image is named after this checkout's folder, as docker allows: a copy names its own.
PROJECT ?= $(shell basename -- $(call q,$(CURDIR)) | tr 'A-Z' 'a-z' | tr -c 'a-z0-9_.\n-' -)
IMAGE ?= $(PROJECT):$(GPU)

# A value as one shell word, whatever it holds: single-quoted, each ' written as '\''.
q = '$(subst ','\'',$(1))'

PY := $(VENV)/bin/python
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.PHONY: help setup run profile trace intra intra-trace view bench bench-report bench-parse \
  test test-gpu lint clean docker-build docker-run docker-profile docker-test

help: ## list the targets
	@awk -F ':.*## ' '/^[a-z-]+:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: SCRIPT ARGS (default ROWS COLS DTYPE ITERS) TRACE_ARGS (TRACE_ITERS) NPROC"
	@echo "             RECIPE OUT PYTHON VENV TORCH TRITON PYTEST_ARGS POINTS QUACK"
	@echo "             GPU (rocm|nvidia) ROCM_BASE NVIDIA_BASE BASE_IMAGE PROJECT IMAGE"

setup: $(VENV)/.installed ## make .venv: the platform's torch and triton, plus requirements-dev.txt

# --system-site-packages lets .venv see a system interpreter's torch; the .pth file does
# the same when PYTHON is itself a virtual environment (as in ROCm's images), whose
# packages --system-site-packages would not reach.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	@echo "setup: $(VENV) from $(PYTHON), seeing its torch and triton; installing what is missing"
	$(call q,$(PYTHON)) -m venv --system-site-packages $(call q,$(VENV))
	$(call q,$(PYTHON)) -c 'import site; print("\n".join(site.getsitepackages()))' \
	  > "$$($(call q,$(PY)) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/platform.pth"
	$(call q,$(PY)) -c 'import torch' 2>/dev/null || { echo "setup: installing $(TORCH) (CPU machines: a minute)"; \
	  $(call q,$(PY)) -m pip install -q $(call q,$(TORCH)); }
	$(call q,$(PY)) -c 'import triton' 2>/dev/null || { echo "setup: installing $(TRITON)"; \
	  $(call q,$(PY)) -m pip install -q $(call q,$(TRITON)); }
	@echo "setup: installing requirements-dev.txt (PyYAML, llnl-hatchet, cxxfilt, msgspec, pytest, linters)"
	$(call q,$(PY)) -m pip install -q -r requirements-dev.txt
	touch $(call q,$@)

# SCRIPT and its arguments, each word quoted, started by its interpreter or by torch's
# launcher with NPROC processes, each capture then named after its rank.
argv = $(foreach word,$(1),$(call q,$(word)))
START = $(if $(filter 1,$(NPROC)),$(call q,$(PY)),$(call q,$(PY)) -m torch.distributed.run \
  --standalone --nproc-per-node $(call q,$(NPROC)))
COMMAND = $(START) $(call q,$(SCRIPT)) $(call argv,$(ARGS))
PROFILE = ./profile.sh --recipe $(call q,$(RECIPE))

run: setup ## run SCRIPT with ARGS (the example: its kernel checked)
	$(call q,$(PY)) $(call q,$(SCRIPT)) $(call argv,$(ARGS))

profile: setup ## run SCRIPT under Proton as RECIPE says; results in OUT/profile (NPROC)
	$(PROFILE) --output $(call q,$(OUT)/profile) -- $(COMMAND)

trace: setup ## the same as a trace: every launch on a timeline; results in OUT/trace
	$(PROFILE) --output $(call q,$(OUT)/trace) --data trace -- $(COMMAND)

intra: setup ## cycles of the scopes inside the kernel (instrumentation backend); OUT/intra
	$(PROFILE) --output $(call q,$(OUT)/intra) --backend instrumentation -- $(COMMAND)

# Shadow context: a Python call stack on each of the trace's events would quadruple it.
intra-trace: setup ## every warp's scopes on a timeline (TRACE_ARGS); OUT/intra-trace
	$(PROFILE) --output $(call q,$(OUT)/intra-trace) --backend instrumentation --data trace \
	  --context shadow -- $(START) $(call q,$(SCRIPT)) $(call argv,$(TRACE_ARGS))

# function_line keeps python-context names to "line@function" instead of full paths.
view: setup ## print make profile's tree (proton-viewer -m time/ms)
	@dir=$(call q,$(OUT)/profile); f=$$dir/proton.hatchet; [[ -f $$f ]] || f=$$dir/proton.rank0.hatchet; \
	  [[ -f $$f ]] || { echo "make view: no capture in $$dir: run make profile first" >&2; exit 1; }; \
	  $(call q,$(PY)) -m triton.profiler.viewer -m time/ms -f function_line "$$f"

bench: setup $(VENV)/.bench $(if $(QUACK),$(VENV)/.bench-quack) ## GPU only: the example against peers, into bench/results (POINTS=logits,..., QUACK=1)
	$(call q,$(PY)) bench/sweep.py $(if $(POINTS),--points $(call q,$(POINTS))) $(if $(QUACK),--quack)

# QuACK pulls CUDA libraries: asked for only, and never on a ROCm image.
$(VENV)/.bench-quack: bench/requirements-quack.txt
	$(call q,$(PY)) -m pip install -q -r bench/requirements-quack.txt
	touch $(call q,$@)

$(VENV)/.bench: bench/requirements.txt
	$(call q,$(PY)) -m pip install -q -r bench/requirements.txt
	touch $(call q,$@)

bench-report: setup ## redraw bench/results' tables, plots and docs/performance.md (no GPU; MERGE=parts)
	$(call q,$(PY)) bench/report.py $(if $(MERGE),--merge $(foreach f,$(MERGE),$(call q,$(f))))

bench-parse: setup ## parse_hatchet.py's speed on large trees and traces against json.load
	$(call q,$(PY)) bench/parse_speed.py

# PYTEST_ARGS reaches pytest as one word, through PYTEST_ADDOPTS, which pytest splits.
test: setup ## run the CPU tests (GPU tests skip themselves)
	PYTEST_ADDOPTS=$(call q,$(PYTEST_ARGS)) $(call q,$(PY)) -m pytest

test-gpu: setup ## run only the GPU tests
	PYTEST_ADDOPTS=$(call q,$(PYTEST_ARGS)) $(call q,$(PY)) -m pytest -m gpu

lint: setup ## ruff, shellcheck and hadolint
	$(call q,$(VENV)/bin/ruff) check .
	$(call q,$(VENV)/bin/ruff) format --check .
	$(call q,$(VENV)/bin/shellcheck) profile.sh .ci/run
	$(call q,$(VENV)/bin/hadolint) Dockerfile

# Removes only what lies inside this checkout, outside .git, and holds nothing git tracks:
# a VENV or OUT elsewhere (/, .., ~, another absolute path) is refused, not deleted.
# Where git cannot tell (no .git, as in the container), only the default names go.
clean: ## remove .venv, caches and profiling results
	@top=$(call q,$(CURDIR)); git=0; git -C "$$top" rev-parse --is-inside-work-tree >/dev/null 2>&1 && git=1; \
	for path in $(call q,$(VENV)) $(call q,$(OUT)); do \
	  real=$$(realpath -m -- "$$path"); \
	  if [[ $$path == "~"* || $$real != "$$top"/?* || $$real == "$$top/.git" || $$real == "$$top/.git/"* ]] || \
	    { ((git)) && [[ -n $$(git -C "$$top" ls-files -- "$$real" | head -c1) ]]; } || \
	    { ((!git)) && [[ $$real != "$$top/.venv" && $$real != "$$top/profiling_results" ]]; }; then \
	    echo "make clean: refusing to delete $$path: not this checkout's own .venv or results" >&2; exit 2; \
	  fi; \
	done
	rm -rf -- $(call q,$(VENV)) .pytest_cache .ruff_cache $(call q,$(OUT))
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# The container runs as root (it needs the GPU devices); the results are handed back to
# whoever ran make. OUT must lie in this checkout, which the container mounts at /work.
ROCM_FLAGS := --device=/dev/kfd --device=/dev/dri --group-add video --ipc=host \
  --security-opt seccomp=unconfined
NVIDIA_FLAGS := --gpus all --ipc=host
DOCKER_RUN = docker run --rm $(if $(filter nvidia,$(GPU)),$(NVIDIA_FLAGS),$(ROCM_FLAGS)) \
  -v $(call q,$(CURDIR)):/work -w /work $(call q,$(IMAGE))
MAKE_VARS = SCRIPT=$(call q,$(SCRIPT)) ARGS=$(call q,$(ARGS)) NPROC=$(call q,$(NPROC))

docker-build: ## build IMAGE from BASE_IMAGE (GPU=nvidia for the CUDA image)
	docker build --build-arg BASE_IMAGE=$(call q,$(BASE_IMAGE)) -t $(call q,$(IMAGE)) .

docker-run: ## make run in the container (SCRIPT, ARGS)
	$(DOCKER_RUN) make run $(MAKE_VARS)

docker-profile: ## make profile in the container; results in ./OUT/profile, owned by you
	@top=$(call q,$(CURDIR)); real=$$(realpath -m -- $(call q,$(OUT))); [[ $$real == "$$top"/?* ]] || \
	  { echo "make docker-profile: OUT must lie inside $$top, the folder the container sees" >&2; exit 2; }
	$(DOCKER_RUN) sh -c 'owner=$$0 out=$$1; shift; make profile "$$@"; s=$$?; chown -R "$$owner" -- "$$out"; exit $$s' \
	  "$$(id -u):$$(id -g)" $(call q,$(OUT)) OUT=$(call q,$(OUT)) RECIPE=$(call q,$(RECIPE)) $(MAKE_VARS)

docker-test: ## make test in the container (GPU tests included)
	$(DOCKER_RUN) make test

# Every target runs in VENV, made from PYTHON: the interpreter that already holds the
# platform's torch and triton (a ROCm or CUDA container's own builds) where there is one.
PYTHON ?= python3
VENV ?= .venv
# Installed only where PYTHON cannot import them already (a CPU machine, say).
TORCH ?= torch==2.13.0
TRITON ?= triton==3.9.0
# The script that run, profile and trace start, and its arguments, split on whitespace,
# one word each ($ is make's: write $$). The example's arguments apply to it alone.
EXAMPLE := softmax.py
SCRIPT ?= $(EXAMPLE)
ROWS ?= 4096
COLS ?= 1024
DTYPE ?= float32
ITERS ?= 20
ARGS ?= $(if $(filter $(EXAMPLE),$(SCRIPT)),--rows $(ROWS) --cols $(COLS) --dtype $(DTYPE) --iters $(ITERS))
# intra-trace records every warp's scopes: its launches after the checked one.
TRACE_ITERS ?= 1
TRACE_ARGS ?= $(if $(filter $(EXAMPLE),$(SCRIPT)),--rows $(ROWS) --cols $(COLS) --dtype $(DTYPE) --iters $(TRACE_ITERS))
# Processes, one for each GPU: more than 1 start SCRIPT through torch's launcher.
NPROC ?= 1
RECIPE ?= recipe.yaml
# Each run gets OUT/<target>/<UTC time>-<pid>; OUT/<target>/latest and previous.
OUT ?= profiling_results
# HOOK=triton records each launch's bytes and flops; TRIALS=N runs the script N times.
HOOK ?=
TRIALS ?=
# make compare: CUR against BASE (runs or captures), failing past FAIL_ABOVE percent (ANY_DEVICE=1:
# runs of different devices). make ab: REV, a revision or a copy of the tree; TRIALS 5 a side,
# doubled while a row FAIL_ABOVE could fail is unsettled, up to MAX_TRIALS (default 20).
CUR ?= $(OUT)/profile/latest
BASE ?= $(OUT)/profile/previous
FAIL_ABOVE ?=
MIN_MS ?=
# ONLY=regex judges and gates only the kernels whose name it finds ($ is make's: write $$).
ONLY ?=
ANY_DEVICE ?=
REV ?= HEAD
MAX_TRIALS ?=
BASE_SCRIPT ?=
PYTEST_ARGS ?=
# make bench: a subset of its points (rows, logits, backward, host, profiling); QUACK=1
# adds QuACK. make bench-report MERGE='a.json b.json' joins subset runs into one.
POINTS ?=
QUACK ?=
MERGE ?=
# The container: GPU=rocm (default) or nvidia picks the base image and docker's flags.
GPU ?= rocm
ROCM_BASE ?= rocm/pytorch:rocm7.14_ubuntu24.04_py3.12_pytorch_release_2.11.0
NVIDIA_BASE ?= pytorch/pytorch:2.11.0-cuda12.8-cudnn9-devel
BASE_IMAGE ?= $(if $(filter nvidia,$(GPU)),$(NVIDIA_BASE),$(ROCM_BASE))
# The image is named after this checkout's folder, as docker allows: a copy names its own.
PROJECT ?= $(shell basename -- $(call q,$(HERE)) | tr 'A-Z' 'a-z' | tr -c 'a-z0-9_.\n-' -)
IMAGE ?= $(PROJECT):$(GPU)

# A value as one shell word, whatever it holds: single-quoted, each ' written as '\'' and
# each newline as $'\n' (make would cut a recipe line at a newline).
define newline


endef
q = '$(subst $(newline),'$$'\n'',$(subst ','\'',$(1)))'
# A path no program takes for an option: ./ before a leading - (the same file).
path = $(if $(filter -%,$(firstword $(1))),./)$(1)
# This Makefile's folder, wherever make runs (-C, -f): MAKEFILE_LIST holds only its name
# yet, which $(dir) would split at a space.
HERE := $(shell f=$(call q,$(MAKEFILE_LIST)); [ -f "$$f" ] && dirname -- "$$(realpath -s -- "$$f")")
ifeq ($(HERE),)
$(error read this Makefile alone (no MAKEFILES, no -f before it): its folder is unknown)
endif
# A target's name: make would split it at a space, and make a leading ~ a home folder.
ifneq ($(words $(VENV))$(filter ~%,$(VENV)),1)
$(error VENV must be one path without spaces or a leading ~, not '$(VENV)')
endif
PY := $(call q,$(VENV)/bin/python)
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.PHONY: help setup run profile trace intra intra-trace view compare ab bench bench-report \
  ceiling bench-parse test test-gpu lint format clean docker-build docker-run docker-profile \
  docker-test

help: ## list the targets and the variables
	@awk -F ':.*## ' '/^[a-z-]+:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(call q,$(HERE)/Makefile)
	@echo "  variables, each overridable (make VAR=value): comments in the Makefile say what for"
	@awk '/^[A-Z_]+ \?=/ {printf " %s", $$1} END {print ""}' $(call q,$(HERE)/Makefile) | fold -s -w 88

setup: $(VENV)/.installed ## make VENV: the platform's torch and triton, plus requirements-dev.txt

# --system-site-packages lets VENV see a system interpreter's torch; the .pth file does
# the same when PYTHON is itself a virtual environment (as in ROCm's images).
$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(call q,$(PYTHON)) -m venv --system-site-packages $(call q,$(VENV))
	$(call q,$(PYTHON)) -c 'import site; print("\n".join(site.getsitepackages()))' \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/platform.pth"
	$(PY) -c 'import torch' 2>/dev/null || $(PY) -m pip install -q $(call q,$(TORCH))
	$(PY) -c 'import triton' 2>/dev/null || $(PY) -m pip install -q $(call q,$(TRITON))
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $(call q,$@)

# SCRIPT and its words, started by its interpreter or by torch's launcher; after --, so
# that torchrun takes none of the script's options (--n) for a prefix of its own.
argv = $(foreach word,$(1),$(call q,$(word)))
START = $(if $(filter 1,$(NPROC)),$(PY),$(PY) -m torch.distributed.run --standalone \
  --nproc-per-node $(call q,$(NPROC)) --)
# The world size is given, never read back out of the launcher's words: NPROC's ranks.
WORLD = $(if $(filter-out 1,$(NPROC)),--world-size $(call q,$(NPROC)))
PROFILE = $(call q,$(HERE)/profile.sh) --recipe $(call q,$(RECIPE)) --results $(call q,$(OUT)) \
  $(if $(HOOK),--hook $(call q,$(HOOK))) $(if $(TRIALS),--trials $(call q,$(TRIALS))) $(WORLD)
GATE = $(if $(FAIL_ABOVE),--fail-above $(call q,$(FAIL_ABOVE))) \
  $(if $(MIN_MS),--min-ms $(call q,$(MIN_MS))) $(if $(ONLY),--only $(call q,$(ONLY))) \
  $(if $(ANY_DEVICE),$(if $(filter-out x1,x$(ANY_DEVICE)),$(error ANY_DEVICE takes 1 or nothing: \
  not $(ANY_DEVICE)),--any-device))
# profile.sh's options for each target that runs SCRIPT under it. Shadow context for
# intra-trace: a Python call stack on each of the trace's events would quadruple it.
PROFILES = profile trace intra intra-trace ab
PROFILE_trace = --data trace
PROFILE_intra = --backend instrumentation
PROFILE_intra-trace = --backend instrumentation --data trace --context shadow
PROFILE_ab = $(if $(BASE_SCRIPT),--base-script $(call q,$(call path,$(BASE_SCRIPT))), \
  --rev $(call q,$(REV))) $(GATE) $(if $(MAX_TRIALS),--max-trials $(call q,$(MAX_TRIALS)))
# A copy without the example names its own SCRIPT.
HAS_SCRIPT = @[[ -f $(call q,$(SCRIPT)) ]] || { echo "make $@: no script "$(call q,$(SCRIPT))": \
  set SCRIPT=your.py" >&2; exit 2; }

run: setup ## run SCRIPT with ARGS, without Proton
	$(HAS_SCRIPT)
	$(PY) $(call q,$(call path,$(SCRIPT))) $(call argv,$(ARGS))

profile: ## run SCRIPT under Proton as RECIPE says (NPROC, HOOK, TRIALS): OUT/profile
trace: ## the same as a trace, every launch on a timeline: OUT/trace
intra: ## cycles of the scopes inside the kernel (instrumentation backend): OUT/intra
intra-trace: ## every warp's scopes on a timeline (TRACE_ARGS): OUT/intra-trace
ab: ## SCRIPT now against REV (HEAD) or BASE_SCRIPT, interleaved, then compared: OUT/ab
$(PROFILES): setup
	$(HAS_SCRIPT)
	$(PROFILE) $(PROFILE_$@) -- $(START) $(call q,$(call path,$(SCRIPT))) \
	  $(call argv,$(if $(filter intra-trace,$@),$(TRACE_ARGS),$(ARGS)))

# function_line keeps python-context names to "line@function" instead of full paths.
view: setup ## print the latest profile's tree (proton-viewer -m time/ms)
	@f=$$(find -L $(call q,$(call path,$(OUT))/profile/latest) -name '*.hatchet' 2>/dev/null | sort | head -n 1) || :; \
	  [[ -n $$f ]] || { echo "make view: no capture in "$(call q,$(OUT)/profile/latest)": run make profile" >&2; exit 2; }; \
	  $(PY) -m triton.profiler.viewer -m time/ms -f function_line "$$f"

compare: setup ## CUR against BASE (latest and previous profile): verdicts; FAIL_ABOVE, MIN_MS, ONLY: OUT/compare
	@for run in $(call q,$(CUR)) $(call q,$(BASE)); do [[ -e $$run ]] || { echo "make compare:" \
	  "no run $$run: run make profile twice first, or set CUR= and BASE=" >&2; exit 2; }; done
	$(call q,$(HERE)/profile.sh) --results $(call q,$(OUT)) \
	  --compare $(call q,$(call path,$(CUR))) $(call q,$(call path,$(BASE))) $(GATE) $(WORLD) -- $(PY)

bench: setup $(VENV)/.bench $(if $(QUACK),$(VENV)/.bench-quack) ## GPU only: the example against its peers, into bench/results (POINTS, QUACK)
	$(PY) bench/sweep.py $(if $(POINTS),--points $(call q,$(POINTS))) $(if $(QUACK),--quack)

# QuACK pulls CUDA libraries: installed only when asked for.
$(VENV)/.bench $(VENV)/.bench-quack: $(VENV)/.bench%: bench/requirements%.txt
	$(PY) -m pip install -q -r $(call q,$<) && touch $(call q,$@)

bench-report: setup ## redraw bench/results' tables, plots and docs/performance.md (MERGE)
	$(PY) bench/report.py $(if $(MERGE),--merge $(call argv,$(MERGE)))

ceiling: setup ## GPU only: copy and read GB/s from 1 MiB to 4 GiB: OUT/ceiling/<device>.json
	$(PY) $(call q,$(HERE)/bench/ceiling.py) --out $(call q,$(OUT))

bench-parse: setup ## parse_hatchet.py's speed on large captures against json.load
	$(PY) bench/parse_speed.py

test: ## the CPU tests (GPU tests skip themselves), a worker per core
test-gpu: ## only the GPU tests
# PYTEST_ARGS reaches pytest as one word, through PYTEST_ADDOPTS, which pytest splits; after
# -n auto (pytest-xdist: a worker per core, none where a GPU is), so that -n 0 overrides it.
# Each file's tests in one worker: a module's fixture (a compile, a browser) made once.
test test-gpu: setup
	PYTEST_ADDOPTS=$(call q,-n auto --dist loadfile $(PYTEST_ARGS)) $(PY) -m pytest \
	  $(if $(filter test-gpu,$@),-m gpu)

RUFF = $(call q,$(VENV)/bin/ruff)
lint: setup ## ruff (lint and format), shellcheck, hadolint
	$(RUFF) check . && $(RUFF) format --check . || { echo "make lint: make format fixes" \
	  "the formatting and what ruff can fix itself" >&2; false; }
	$(call q,$(VENV)/bin/shellcheck) profile.sh .ci/run bench/gpu.sh && $(call q,$(VENV)/bin/hadolint) Dockerfile

format: setup ## ruff check --fix, then ruff format: what make lint would have you fix
	$(RUFF) check --fix --exit-zero . && $(RUFF) format .

# Deletes only what lies in this checkout, outside .git, and holds nothing git tracks; where
# git cannot tell (no .git, as in the container), only the default names.
clean: ## remove VENV, caches and OUT; refuses (exit 2) anything else
	@top=$(call q,$(HERE)); git=0; git -C "$$top" rev-parse 2>/dev/null && git=1; \
	for path in $(call q,$(VENV)) $(call q,$(OUT)); do \
	  real=$$(realpath -m -- "$${path:-/}" 2>/dev/null || echo /); \
	  if [[ $$path == "~"* || $$real != "$$top"/?* || $$real == "$$top/.git"?(/*) ]] || \
	    { ((git)) && [[ -n $$(git -C "$$top" ls-files -- "$$real" | head -c1) ]]; } || \
	    { ((!git)) && [[ $$real != "$$top"/@(.venv|profiling_results) ]]; }; then \
	    echo "make clean: refusing to delete $${path:-an empty path}: not this checkout's own results or .venv" >&2; exit 2; \
	  fi; \
	done; \
	rm -rf -- $(call q,$(VENV)) $(call q,$(OUT)) "$$top/.pytest_cache" "$$top/.ruff_cache"; \
	find "$$top" -name .git -prune -o -name __pycache__ -type d -prune -exec rm -rf -- {} +

# The container runs as root (it needs the GPU devices); docker-profile hands the results back
# to whoever ran make. OUT must lie in this checkout, mounted at /work, and is given relative.
DOCKER_RUN = docker run --rm $(if $(filter nvidia,$(GPU)),--gpus all --ipc=host,--device=/dev/kfd \
  --device=/dev/dri --group-add video --ipc=host --security-opt seccomp=unconfined) \
  -v $(call q,$(HERE)):/work -w /work $(call q,$(IMAGE))
MAKE_VARS = SCRIPT=$(call q,$(SCRIPT)) ARGS=$(call q,$(ARGS)) NPROC=$(call q,$(NPROC)) \
  HOOK=$(call q,$(HOOK)) TRIALS=$(call q,$(TRIALS))

docker-build: ## build IMAGE from BASE_IMAGE (GPU=nvidia for the CUDA image)
	docker build --build-arg BASE_IMAGE=$(call q,$(BASE_IMAGE)) -t $(call q,$(IMAGE)) $(call q,$(HERE))

docker-run: ## make run in the container (SCRIPT, ARGS)
	$(DOCKER_RUN) make run $(MAKE_VARS)

docker-profile: ## make profile in the container; results in OUT, owned by you
	out=$$(realpath -m --relative-to=$(call q,$(HERE)) -- $(call q,$(OUT))); [[ $$out != @(.|..|../*) ]] || \
	  { echo "make docker-profile: OUT must lie inside "$(call q,$(HERE))", the folder the container sees" >&2; exit 2; }; \
	$(DOCKER_RUN) sh -c 'owner=$$0 out=$$1; shift; make profile "$$@"; s=$$?; chown -R "$$owner" -- "$$out"; exit $$s' \
	  "$$(id -u):$$(id -g)" "$$out" OUT="$$out" RECIPE=$(call q,$(RECIPE)) $(MAKE_VARS)

docker-test: ## make test in the container (GPU tests included)
	$(DOCKER_RUN) make test

# Every target runs in .venv, made from PYTHON: the interpreter that already holds the
# platform's torch and triton (a ROCm or CUDA container's own builds) where there is one.
PYTHON ?= python3
VENV ?= .venv
# Installed only where PYTHON cannot import them already (a CPU machine, say).
TORCH ?= torch==2.13.0
TRITON ?= triton==3.9.0
ROWS ?= 4096
COLS ?= 1024
ITERS ?= 20
DTYPE ?= float32
RECIPE ?= recipe.yaml
OUT ?= profiling_results
PYTEST_ARGS ?=
# The container: GPU=rocm (default) or nvidia picks the base image and docker's flags.
GPU ?= rocm
ROCM_BASE ?= rocm/pytorch:rocm7.14_ubuntu24.04_py3.12_pytorch_release_2.11.0
NVIDIA_BASE ?= pytorch/pytorch:2.11.0-cuda12.8-cudnn9-devel
BASE_IMAGE ?= $(if $(filter nvidia,$(GPU)),$(NVIDIA_BASE),$(ROCM_BASE))
IMAGE ?= triton-softmax:$(GPU)
ROCM_FLAGS := --device=/dev/kfd --device=/dev/dri --group-add video --ipc=host \
  --security-opt seccomp=unconfined
NVIDIA_FLAGS := --gpus all --ipc=host
DOCKER_RUN = docker run --rm $(if $(filter nvidia,$(GPU)),$(NVIDIA_FLAGS),$(ROCM_FLAGS)) \
  -v "$(CURDIR):/work" -w /work $(IMAGE)

PY := $(VENV)/bin/python
SHELL := bash
.DEFAULT_GOAL := help
.PHONY: help setup run profile trace view bench bench-report bench-parse test test-gpu lint clean \
  docker-build docker-run docker-profile docker-test

help: ## list the targets
	@awk -F ':.*## ' '/^[a-z-]+:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: PYTHON VENV TORCH TRITON ROWS COLS ITERS DTYPE RECIPE OUT PYTEST_ARGS"
	@echo "             GPU (rocm|nvidia) ROCM_BASE NVIDIA_BASE BASE_IMAGE IMAGE"

setup: $(VENV)/.installed ## make .venv: the platform's torch and triton, plus requirements-dev.txt

# --system-site-packages lets .venv see a system interpreter's torch; the .pth file does
# the same when PYTHON is itself a virtual environment (as in ROCm's images), whose
# packages --system-site-packages would not reach.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PYTHON) -c 'import site; print("\n".join(site.getsitepackages()))' \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/platform.pth"
	$(PY) -c 'import torch' 2>/dev/null || $(PY) -m pip install -q '$(TORCH)'
	$(PY) -c 'import triton' 2>/dev/null || $(PY) -m pip install -q '$(TRITON)'
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

run: setup ## check the kernel against torch.softmax (ROWS COLS ITERS DTYPE)
	$(PY) softmax.py --rows $(ROWS) --cols $(COLS) --iters $(ITERS) --dtype $(DTYPE)

profile: setup ## run softmax.py under Proton as RECIPE says; results in OUT
	./profile.sh --recipe '$(RECIPE)' --output '$(OUT)' -- \
	  $(PY) softmax.py --rows $(ROWS) --cols $(COLS) --iters $(ITERS) --dtype $(DTYPE)

trace: setup ## the same run captured as a trace (every launch on a timeline); results in OUT
	./profile.sh --recipe '$(RECIPE)' --output '$(OUT)' --data trace -- \
	  $(PY) softmax.py --rows $(ROWS) --cols $(COLS) --iters $(ITERS) --dtype $(DTYPE)

# function_line keeps python-context names to "line@function" instead of full paths.
view: setup ## print the last capture's tree (proton-viewer -m time/ms)
	$(PY) -m triton.profiler.viewer -m time/ms -f function_line '$(OUT)/proton.hatchet'

bench: setup $(VENV)/.bench ## GPU only: device, loop and host time against peers, into bench/results
	$(PY) bench/sweep.py

$(VENV)/.bench: bench/requirements.txt
	$(PY) -m pip install -q -r bench/requirements.txt
	touch $@

bench-report: setup ## redraw bench/results' tables, plots and README section (no GPU)
	$(PY) bench/report.py

bench-parse: setup ## parse_hatchet.py's speed on large trees of two shapes against json.load
	$(PY) bench/parse_speed.py

test: setup ## run the CPU tests (GPU tests skip themselves)
	$(PY) -m pytest $(PYTEST_ARGS)

test-gpu: setup ## run only the GPU tests
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

lint: setup ## ruff, shellcheck and hadolint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/shellcheck $(wildcard *.sh) .ci/run
	$(VENV)/bin/hadolint Dockerfile

docker-build: ## build IMAGE from BASE_IMAGE (GPU=nvidia for the CUDA image)
	docker build --build-arg BASE_IMAGE='$(BASE_IMAGE)' -t '$(IMAGE)' .

docker-run: ## make run in the container
	$(DOCKER_RUN) make run ROWS=$(ROWS) COLS=$(COLS) ITERS=$(ITERS) DTYPE=$(DTYPE)

# The container runs as root (it needs the GPU devices); the results are handed back
# to whoever ran make.
docker-profile: ## make profile in the container; results in ./OUT, owned by you
	$(DOCKER_RUN) sh -c 'make profile OUT=$(OUT) RECIPE=$(RECIPE) ROWS=$(ROWS) COLS=$(COLS) \
	  ITERS=$(ITERS) DTYPE=$(DTYPE); s=$$?; chown -R $(shell id -u):$(shell id -g) $(OUT); exit $$s'

docker-test: ## make test in the container (GPU tests included)
	$(DOCKER_RUN) make test

clean: ## remove .venv, caches and profiling results
	rm -rf $(VENV) .pytest_cache .ruff_cache $(OUT)
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# This checkout in a pinned ROCm PyTorch image (NVIDIA: make docker-build GPU=nvidia).
# torch and triton come from the image and are never installed here: pip would replace
# the ROCm builds with CUDA ones.
ARG BASE_IMAGE=rocm/pytorch:rocm7.14_ubuntu24.04_py3.12_pytorch_release_2.11.0
FROM ${BASE_IMAGE}

WORKDIR /work
COPY requirements.txt requirements-dev.txt Makefile ./
# The Makefile's .venv, made once at build time outside /work (which docker-run mounts
# over): it sees the image's torch and triton and holds only the light dependencies.
ENV VENV=/opt/venv PIP_NO_CACHE_DIR=1
RUN make setup PYTHON=python3
COPY . .
CMD ["make", "run"]

"""An autotuned Triton kernel that the tooling's tests profile: out = a * x + y, checked
against torch.

    python autotuned.py [--n 1000000] [--iters 10]

Triton's autotuner times each config on the device the first time a key is met, then
launches the fastest. The interpreter has no device to time on, so there the kernel has
one config: check one config on a CPU, tune on the GPU. launch_metadata names each
launch with the config that ran it (the args it receives hold the constexprs), so that a
profile tells the configs apart; parse_hatchet.py shows the tuning launches as a call
site of their own, marked as autotuning.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments.
"""

import argparse
import os
import sys

import torch

# The interpreter is picked when the @triton.jit function below is defined.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
BLOCKS = [1024] if INTERPRET else [1024, 4096]
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in BLOCKS for w in (4, 8)[: len(BLOCKS)]]


def launch_metadata(grid: tuple, metadata: object, args: dict) -> dict:
    """The kernel's name with its config, and the bytes it moves (x and y read, out written)."""
    config = f"BLOCK={args['BLOCK']}"
    return {
        "name": f"{metadata.name} [{config}]",
        "bytes": 3 * args["n"] * args["x_ptr"].element_size(),
    }


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit(launch_metadata=launch_metadata)
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


def axpy(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)  # noqa: E731 - per config
    axpy_kernel[grid](x_ptr=x, y_ptr=y, out_ptr=out, a=a, n=x.numel())
    return out


def count(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 9 and int(text) > 0):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text[:30]!r}")
    return int(text)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2
        print(f"autotuned: error: {message[:200]}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=count, default=1_000_000, help="elements (default 1000000)")
    parser.add_argument("--iters", type=count, default=10, help="launches after the check")
    args = parser.parse_args(argv)
    if not INTERPRET:  # several ranks may share a GPU
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.manual_seed(0)
    x, y = torch.randn(args.n, device=DEVICE), torch.randn(args.n, device=DEVICE)
    if not torch.allclose(axpy(2.0, x, y), 2.0 * x + y):
        print("autotuned: FAIL result differs from torch", file=sys.stderr)
        return 1
    for _ in range(0 if INTERPRET else args.iters):
        axpy(2.0, x, y)
    if not INTERPRET:
        torch.cuda.synchronize()
    print(f"autotuned: PASS (config {axpy_kernel.best_config})")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

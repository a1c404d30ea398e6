"""A small Triton script that the tooling's tests profile: z = x + y, checked against torch.

    python vector_add.py [--n 98432] [--iters 10]

It follows the rules a script keeps for profile.sh to profile it well: the interpreter is
picked before Triton is imported where no GPU is visible; one checked launch, then --iters
more; success returns normally; each rank takes the GPU its LOCAL_RANK names; the kernel's
launch_metadata gives its name and bytes (-k triton); its scopes are guarded by a constexpr
false only in the interpreter, and cost nothing unless Proton's instrumentation backend
compiles the kernel (make intra).
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
import triton.profiler.language as pl  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
BLOCK = 1024
SCOPES = tl.constexpr(not INTERPRET)  # the interpreter cannot run Proton's scope calls


def _launch_metadata(grid, kernel, args):
    n = args["n"]
    return {"name": f"vector_add_kernel [{n}]", "bytes": 3 * n * args["x_ptr"].element_size()}


@triton.jit(launch_metadata=_launch_metadata)
def vector_add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    if SCOPES:
        pl.enter_scope("load")
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    if SCOPES:
        pl.exit_scope("load")
        pl.enter_scope("store")
    tl.store(z_ptr + offsets, x + y, mask=mask)
    if SCOPES:
        pl.exit_scope("store")


def vector_add(x, y):
    z = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), BLOCK),)
    vector_add_kernel[grid](x_ptr=x, y_ptr=y, z_ptr=z, n=x.numel(), BLOCK=BLOCK)
    return z


def _count(text):
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 9 and int(text) > 0):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text[:30]!r}")
    return int(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2
        print(f"vector_add: error: {message[:200]}", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=_count, default=98432, help="elements (default 98432)")
    parser.add_argument("--iters", type=_count, default=10, help="launches after the check")
    args = parser.parse_args(argv)
    rank, world = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE", "1")
    tag = f"vector_add[rank {rank}]" if world != "1" else "vector_add"
    if not INTERPRET:  # several ranks may share a GPU
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())

    torch.manual_seed(0)
    x = torch.randn(args.n, device=DEVICE)
    y = torch.randn(args.n, device=DEVICE)
    if not torch.equal(vector_add(x, y), x + y):
        print(f"{tag}: FAIL result differs from torch", file=sys.stderr)
        return 1
    if not INTERPRET:  # the interpreter's launches are neither profiled nor timed
        for _ in range(args.iters):
            vector_add(x, y)
        torch.cuda.synchronize()
    print(f"{tag}: PASS")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

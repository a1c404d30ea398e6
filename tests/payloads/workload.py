"""A workload of the kernels a model launches, for make profile and make ab on a GPU: an MLP
compiled by Inductor (torch.compile: Triton kernels of its own beside cuBLAS's), a matmul by
cuBLAS (hipBLAS on ROCm), and a Triton kernel autotuned over three configs, its pick cached;
each checked against eager torch once, then run --iters times. It needs torch (and its
Triton) alone.

    python workload.py [--iters 20]

Exit status: 0 PASS, or no GPU (one line says so: nothing runs); 1 FAIL; 2 bad arguments.
"""

import argparse
import os
import sys
import warnings

import torch
import triton
import triton.language as tl

ROWS, WIDTH = 4096, 1024
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((512, 4), (1024, 4), (4096, 8))]


# cache_results keeps the pick on disk: every process after the first runs the config the first
# chose, where a kernel tuned afresh in each trial is noise a comparison of trials would see.
@triton.autotune(configs=CONFIGS, key=["n"], cache_results=True)
@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * x + y, mask=mask)


def scale_add(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)  # noqa: E731 - per config
    scale_add_kernel[grid](x, y, out, a, x.numel())
    return out


def count(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 9 and int(text) > 0):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text[:30]!r}")
    return int(text)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2
        print(f"workload: error: {message[:200]}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=count, default=20, help="runs after the check (20)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("workload: needs a CUDA or ROCm GPU: nothing run", file=sys.stderr)
        return 0
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.manual_seed(0)
    warnings.filterwarnings("ignore", "TensorFloat32")  # float32 kept exact for the checks
    mlp = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(), torch.nn.Linear(4 * WIDTH, WIDTH)
    ).cuda()
    compiled = torch.compile(mlp)
    x, w = torch.randn(ROWS, WIDTH, device="cuda"), torch.randn(WIDTH, WIDTH, device="cuda")
    with torch.no_grad():
        checks = {
            "mlp": (compiled(x), mlp(x)),
            "matmul": (torch.mm(x, w), (x.double() @ w.double()).float()),
            "scale_add": (scale_add(2.0, x, x), 3.0 * x),
        }
        for name, (got, want) in checks.items():
            if not torch.allclose(got, want, rtol=1e-3, atol=1e-2):
                print(f"workload: FAIL {name} differs from eager torch", file=sys.stderr)
                return 1
        for _ in range(args.iters):
            scale_add(2.0, torch.mm(compiled(x), w), x)
    torch.cuda.synchronize()
    print(f"workload: PASS (scale_add_kernel's config {scale_add_kernel.best_config})")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

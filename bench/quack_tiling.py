"""QuACK's tiling of 16-bit rows against softmax.py's and long_rows.py's, on a GPU: bf16
4096 x 1024 and 1024 x 65536.

    python bench/quack_tiling.py [--out bench/results/ab]

QuACK (quack-kernels 0.6.5, quack/softmax.py) gives a row of 1024 16-bit columns 32
threads of a 128-thread CTA: 4 rows a CTA, a warp a row, 32 columns a thread in 16-byte
vectors. softmax.py's plan gives it a program of 2 warps, 16 columns a thread. Timed here:
softmax.py's plan, its kernel at QuACK's 4 rows and 4 warps, and QuACK where installed.
At 65536 columns QuACK's cluster of 4 CTAs of 256 threads takes 16384 columns each, as
long_rows.py's 4 programs of 8 warps do: the tiling is the same, the reduction across the
row's CTAs differs (distributed shared memory, where long_rows.py trades global slots).

Timed as bench/lone_row.py times, by CUDA-graph replay in interleaved rounds. Writes
<out>/<device>-quack-tiling.json. Exit status: 0 done, 1 a wrong result, 2 no GPU.
"""

import argparse
import json
import sys

import lone_row  # first: it puts the repository on sys.path and imports softmax.py

# isort: split
import torch
import triton

import long_rows
import softmax as sm
import sweep


def tiled(x: torch.Tensor, block_m: int, num_warps: int) -> torch.Tensor:
    """softmax.py's kernel over x's rows, block_m rows a program on num_warps warps."""
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.shape[0], block_m),)
    sm.softmax_kernel[grid](out, x, *x.shape, *x.stride(), block_m, x.shape[1], num_warps=num_warps)
    return out


def candidates(x: torch.Tensor) -> dict:
    if x.shape[1] <= sm.MAX_FUSED_COLS:
        fns = {"softmax.py": lambda: sm.softmax(x), "4 rows, 4 warps": lambda: tiled(x, 4, 4)}
    else:
        fns = {"long_rows.py": lambda: long_rows.softmax(x)}
    if (quack := sweep.quack()) is not None:
        fns["quack"] = lambda: quack(x)
    return fns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(lone_row.ROOT / "bench" / "results" / "ab"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("quack_tiling: no GPU", file=sys.stderr)
        return 2
    points = []
    for rows, cols in ((4096, 1024), (1024, 65536)):
        points.append(lone_row.measure(torch.bfloat16, rows, cols, candidates))
        print(json.dumps(points[-1]), flush=True)
    wrong = [p for p in points for e in p["max_abs_err"].values()
             if isinstance(e, float) and e > sm.TOLERANCE[torch.bfloat16]]  # fmt: skip
    lone_row.save(points, args.out, "quack-tiling")
    return 1 if wrong else 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

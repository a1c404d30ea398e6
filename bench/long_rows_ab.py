"""long_rows.py against its candidate, bench/long_rows_next.py, at the logits points,
interleaved: each round times both by CUDA-graph replay, the order alternating, and the
medians, their spread and the ratio go to a JSON file. Both are checked against
torch.softmax first. On a GPU, one dtype a run keeps it under 10 minutes:

    AB_DTYPES=bfloat16 AB_OUT=ab-bf16.json python bench/long_rows_ab.py

AB_DRY=1 runs it on a CPU (the interpreter) at tiny shapes with a fake timer, to check
the script itself.
"""

import itertools
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import softmax as sm  # noqa: E402 - first: it picks Triton's interpreter where no GPU is

# isort: split
import torch  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

# isort: split
import long_rows as today  # noqa: E402
import long_rows_next as candidate  # noqa: E402

DRY = os.environ.get("AB_DRY") == "1"
VOCABS = (40, 50) if DRY else (32000, 50257, 128256, 151936, 256000)
ROWS = (1, 3) if DRY else (1, 16, 256, 4096, 8192)
ROUNDS = int(os.environ.get("AB_ROUNDS", "5"))
DTYPES = [getattr(torch, d) for d in os.environ.get("AB_DTYPES", "bfloat16,float32").split(",")]


def path_of(x: torch.Tensor) -> str:
    """Which of the candidate's paths x takes."""
    peeled = not candidate.aligned(x) and candidate.peel(x) is not None
    p = candidate.plan(*x.shape, x.element_size(), candidate.aligned(x) or peeled, x.device.index)
    if p.kernel is sm.softmax_kernel:
        return "whole rows"
    if p.lag:
        return "lagged"
    by = "ticket" if p.ticket else "program id"
    return f"held by {by}, {p.n_tiles} tiles" + (", peeled" if peeled else "")


def main() -> int:
    results = []
    for dtype, cols, rows in itertools.product(DTYPES, VOCABS, ROWS):
        x = torch.randn(rows, cols, device=sm.DEVICE).to(dtype)
        ref = torch.softmax(x.float(), dim=1)
        modules = {"today": today, "next": candidate}
        for name, module in modules.items():
            err = (module.softmax(x).float() - ref).abs().max().item()
            if not err <= sm.TOLERANCE[dtype]:
                print(f"{name}: {dtype} {rows} x {cols} differs by {err:.3e}", file=sys.stderr)
                return 1
        seen = {name: [] for name in modules}
        for r in range(ROUNDS):
            for name in sorted(modules, reverse=r % 2 == 1):
                run = modules[name].softmax
                seen[name].append(1.0 if DRY else do_bench_cudagraph(lambda f=run, t=x: f(t)))
        ms = {name: statistics.median(times) for name, times in seen.items()}
        row = {
            "dtype": str(dtype).removeprefix("torch."),
            "rows": rows,
            "cols": cols,
            "path": path_of(x),
            "today_us": ms["today"] * 1e3,
            "next_us": ms["next"] * 1e3,
            "speedup": ms["today"] / ms["next"],
            "spread_us": {name: [min(t) * 1e3, max(t) * 1e3] for name, t in seen.items()},
        }
        results.append(row)
        print(
            f"{row['dtype']:8} {rows:5} x {cols:6}  {row['path']:32} today {row['today_us']:9.1f}"
            f" us  next {row['next_us']:9.1f} us  x{row['speedup']:.3f}",
            flush=True,
        )
    device = "cpu" if DRY else torch.cuda.get_device_name()
    out = Path(os.environ.get("AB_OUT", "ab-long-rows.json"))
    out.write_text(json.dumps({"device": device, "points": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

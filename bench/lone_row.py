"""A lone vocabulary row (1 to 16 rows of 32000 to 256000 columns): long_rows.py's held
kernel against few_rows.py's two launches (partials, then merge), with and without
programmatic dependent launch (PDL), and QuACK where installed, on a GPU.

    python bench/lone_row.py [--out bench/results/ab]

long_rows.py takes few_rows.py's launches for FEW_ROWS rows or fewer of FEW_ELEMENTS in
all, on GPUs with PDL; the held kernel is what it launches for more rows, timed here by
planning with FEW_ROWS at 0. 256 rows show what the plan keeps them from.

Every candidate is timed by CUDA-graph replay (do_bench_cudagraph), interleaved in each
round, the order turned round in alternate rounds; medians and [min, max] over rounds.
Writes <out>/<device>-lone-row.json. Exit status: 0 done, 1 a wrong result, 2 no GPU.
"""

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import softmax as sm  # noqa: E402 - first: it picks Triton's interpreter where no GPU is

# isort: split
import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

import few_rows  # noqa: E402
import long_rows  # noqa: E402
import report  # noqa: E402
import sweep  # noqa: E402

SHAPES = [(m, v) for m in (1, 16) for v in sweep.VOCABS] + [(256, 128256)]
DTYPES = [torch.bfloat16, torch.float32]
ROUNDS = 9


def held(x: torch.Tensor) -> torch.Tensor:
    """long_rows.softmax(x) planned as for more than FEW_ROWS rows: the held kernel."""
    few, long_rows.FEW_ROWS = long_rows.FEW_ROWS, 0
    long_rows.plan.cache_clear()
    try:
        return long_rows.softmax(x)
    finally:
        long_rows.FEW_ROWS = few
        long_rows.plan.cache_clear()


def two_launches(x: torch.Tensor, pdl: bool) -> torch.Tensor:
    """few_rows.py's launches with the tiles long_rows.py's plan picks for x's rows."""
    out = torch.empty_like(x)
    p = long_rows.plan(*x.shape, x.element_size(), True, x.device.index)
    few_rows.launch(x, out, p.block_n, p.num_warps, pdl)
    return out


def candidates(x: torch.Tensor) -> dict:
    fns = {
        "held": lambda: held(x),
        "partials, then merge": lambda: two_launches(x, False),
        "partials, then merge (PDL)": lambda: two_launches(x, True),
        "long_rows.py": lambda: long_rows.softmax(x),
    }
    if (quack := sweep.quack()) is not None:
        fns["quack"] = lambda: quack(x)
    return fns


def measure(dtype: torch.dtype, rows: int, cols: int, pick: Callable = candidates) -> dict:
    """pick(x)'s candidates at rows x cols of dtype: each one's error, then their times."""
    x = torch.randn(rows, cols, device="cuda").to(dtype)
    ref = torch.softmax(x.float(), dim=1)
    fns, errors = pick(x), {}
    for name, fn in list(fns.items()):
        try:
            errors[name] = (fn().float() - ref).abs().max().item()
        except Exception as e:  # noqa: BLE001 - a design that fails is recorded, not fatal
            errors[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
            del fns[name]
    seen = {name: [] for name in fns}
    for r in range(ROUNDS):
        for name in list(fns)[:: 1 if r % 2 == 0 else -1]:
            seen[name].append(do_bench_cudagraph(fns[name], rep=10, return_mode="median") * 1e3)
    us = {name: round(statistics.median(v), 2) for name, v in seen.items()}
    best_ours = min(v for n, v in us.items() if n != "quack")
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "rows": rows,
        "cols": cols,
        "device_us": us,
        "spread_us": {name: [round(min(v), 2), round(max(v), 2)] for name, v in seen.items()},
        "of_quack": {n: round(us["quack"] / v, 3) for n, v in us.items()} if "quack" in us else {},
        "over_held": {n: round(us["held"] / v, 3) for n, v in us.items()} if "held" in us else {},
        "best_of_ours_us": best_ours,
        "max_abs_err": errors,
    }


def save(points: list, out: str, name: str) -> None:
    """points, with the device and versions they were measured on, in out/<device>-name.json."""
    device = torch.cuda.get_device_name()
    record = {
        "device": device,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "rounds": ROUNDS,
        "method": "CUDA-graph replay (do_bench_cudagraph), candidates interleaved in each round, "
        "order turned round in alternate rounds; medians, [min, max] over rounds",
        "points": points,
    }
    path = Path(out) / f"{report.slug(device)}-{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{Path(sys.argv[0]).stem}: wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ab"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("lone_row: no GPU", file=sys.stderr)
        return 2
    points = []
    for dtype in DTYPES:
        for rows, cols in SHAPES:
            points.append(measure(dtype, rows, cols))
            print(json.dumps(points[-1]), flush=True)
    wrong = [p for p in points for e in p["max_abs_err"].values()
             if isinstance(e, float) and e > sm.TOLERANCE[getattr(torch, p["dtype"])]]  # fmt: skip
    save(points, args.out, "lone-row")
    return 1 if wrong else 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

"""A lone vocabulary row (1 to 16 rows of 32000 to 151936 columns): long_rows.py's held
kernel against two designs that need no zeroed slots, and QuACK where installed, on a GPU.

    python bench/lone_row.py [--out bench/results/ab]

long_rows.py's held kernel zeroes each row's slots (a memset before the kernel, in every
graph replay too), then each program publishes its tile's partial by an atomic exchange
and waits on its row's slots with atomic reads. The two designs here write each tile's
partial unconditionally, so nothing is zeroed, and merge in a second launch, as
FlashInfer's merge of attention states does:

- partials, then merge: two launches; the second merges the row's partials (the online
  softmax merge) and writes its tile, read again from L2.
- the same with programmatic dependent launch (PDL): the merge is launched while the
  partials run (launch_pdl), loads its tile, then waits for them (gdc_wait).

Every candidate is timed by CUDA-graph replay (do_bench_cudagraph), interleaved in each
round, the order turned round in alternate rounds; medians and [min, max] over rounds.
Writes <out>/<device>-lone-row.json. Exit status: 0 done, 1 a wrong result, 2 no GPU.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import softmax as sm  # noqa: E402 - first: it picks Triton's interpreter where no GPU is

# isort: split
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

import long_rows  # noqa: E402
import report  # noqa: E402
import sweep  # noqa: E402

try:  # Triton 3.4 and later, NVIDIA Hopper and later
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:
    gdc_launch_dependents = gdc_wait = None

SHAPES = [(1, 32000), (1, 128256), (16, 128256), (1, 151936), (16, 151936), (256, 128256)]
DTYPES = [torch.bfloat16, torch.float32]
ROUNDS = 9
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def partials_kernel(part_ptr, in_ptr, n_cols, row_stride, n_tiles, BLOCK_N: tl.constexpr,
                    PDL: tl.constexpr):  # fmt: skip
    k = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()  # the merge may start now: it waits before reading partials
    row, tile = (k // n_tiles).to(tl.int64), k % n_tiles
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(in_ptr + row * row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    m = tl.max(x.to(tl.float32), axis=0)
    s = tl.sum(tl.exp2((x.to(tl.float32) - m) * LOG2E), axis=0)
    tl.store(part_ptr + 2 * k, m)
    tl.store(part_ptr + 2 * k + 1, s)


@triton.jit
def merge_kernel(out_ptr, in_ptr, part_ptr, n_cols, row_stride, n_tiles,
                 BLOCK_N: tl.constexpr, TILES: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    k = tl.program_id(0)
    row, tile = (k // n_tiles).to(tl.int64), k % n_tiles
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    if PDL:
        gdc_wait()  # every partial written and visible
    t = tl.arange(0, TILES)
    live = t < n_tiles
    first = row * n_tiles
    m_t = tl.load(part_ptr + 2 * (first + t), mask=live, other=-float("inf"))
    s_t = tl.load(part_ptr + 2 * (first + t) + 1, mask=live, other=0.0)
    row_max = tl.max(m_t, axis=0)
    row_sum = tl.sum(s_t * tl.exp(m_t - row_max), axis=0)
    y = tl.exp(x.to(tl.float32) - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def two_launches(x: torch.Tensor, pdl: bool) -> torch.Tensor:
    """Partials, then merge, with the tiles long_rows.py's plan picks for x."""
    n_rows, n_cols = x.shape
    p = long_rows.plan(n_rows, n_cols, x.element_size(), True, x.device.index)
    out = torch.empty_like(x)
    parts = torch.empty(2 * n_rows * p.n_tiles, dtype=torch.float32, device=x.device)
    grid = (n_rows * p.n_tiles,)
    common = dict(n_cols=n_cols, row_stride=x.stride(0), n_tiles=p.n_tiles, BLOCK_N=p.block_n)
    partials_kernel[grid](parts, x, **common, PDL=pdl, num_warps=p.num_warps)
    tiles = triton.next_power_of_2(p.n_tiles)
    launch = dict(launch_pdl=True) if pdl else {}
    merge_kernel[grid](out, x, parts, **common, TILES=tiles, PDL=pdl, num_warps=p.num_warps,
                       **launch)  # fmt: skip
    return out


def candidates(x: torch.Tensor) -> dict:
    fns = {
        "long_rows.py": lambda: long_rows.softmax(x),
        "partials, then merge": lambda: two_launches(x, False),
    }
    if gdc_wait is not None:
        fns["partials, then merge (PDL)"] = lambda: two_launches(x, True)
    if (quack := sweep.quack()) is not None:
        fns["quack"] = lambda: quack(x)
    return fns


def measure(dtype: torch.dtype, rows: int, cols: int) -> dict:
    x = torch.randn(rows, cols, device="cuda").to(dtype)
    ref = torch.softmax(x.float(), dim=1)
    fns, errors = candidates(x), {}
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
        "best_of_ours_us": best_ours,
        "max_abs_err": errors,
    }


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
    path = Path(args.out) / f"{report.slug(device)}-lone-row.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"lone_row: wrote {path}")
    return 1 if wrong else 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

"""A few long rows in two launches: each tile's max and sum, then their merge, overlapped
by programmatic dependent launch (PDL). long_rows.py takes it for a few rows on NVIDIA GPUs
that have PDL (compute capability 9 and later).

    python few_rows.py --cols 151936       (softmax.py's check, 1 x 151936 by default)

long_rows.py's held kernel zeroes each row's slots before it launches and waits on them
with atomics inside the kernel: at a lone row, that memset and that wait, not the bytes,
set its time. Here each program writes its tile's partial unconditionally, so nothing is
zeroed and no program spins on atomics, and a second launch merges a row's partials (the
online softmax merge) and writes each tile, as FlashInfer merges attention states. With PDL
(launch_pdl) the merge launches while the partials run, loads its tile, then waits in
gdc_wait for them; its tile is read a second time, from the L2 where the rows fit it.
Elsewhere (AMD, older GPUs, the interpreter, a wrap_triton launch) the merge follows the
partials in stream order.
"""

import sys
from collections.abc import Callable

# softmax.py first: it picks Triton's interpreter where there is no GPU, before Triton loads.
import softmax as fused
from softmax import launch_metadata, scope

# isort: split
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# softmax()'s own tiles (long_rows.py passes its plan's): 8192 columns, 64 a thread.
BLOCK_N = 8192
NUM_WARPS = 4
MAX_TILES = 1024  # the most tiles a row: the merge loads every partial of its row at once
LOG2E = tl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * LOG2E)


def partials_launch_metadata(grid: tuple, metadata: object, args: dict) -> dict:
    """launch_metadata's record, half the bytes: the partials read the input, the merge
    writes the output (its second read of the input hits the L2 where the rows fit it)."""
    record = launch_metadata(grid, metadata, args)
    return {**record, "bytes": record["bytes"] // 2}


@triton.jit(launch_metadata=partials_launch_metadata)
def softmax_partials_kernel(
    part_ptr,
    in_ptr,
    n_rows,
    n_cols,
    in_row_stride,
    in_col_stride,
    n_tiles,
    BLOCK_N: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program k reduces tile k % n_tiles of row k // n_tiles to its max and sum, written
    # unconditionally: nothing to zero, nothing to wait on. n_rows is for launch_metadata.
    if PDL:
        gdc_launch_dependents()  # the merge may launch now: it waits before it reads these
    k = tl.program_id(0)
    row = (k // n_tiles).to(tl.int64)
    cols = k % n_tiles * BLOCK_N + tl.arange(0, BLOCK_N)
    scope("", "load")
    at = in_ptr + row * in_row_stride + cols * in_col_stride
    x = tl.load(at, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    scope("load", "partials")
    m = tl.max(x, axis=0)
    # A tile of -inf adds 0, not exp(-inf - -inf) = NaN; a NaN stays NaN.
    s = tl.sum(tl.exp2((x - tl.where(m == -float("inf"), 0.0, m)) * LOG2E), axis=0)
    part = part_ptr + 2 * k.to(tl.int64)  # 2 * k passes 2**31 from 2**30 tiles
    tl.store(part, m)
    tl.store(part + 1, s)
    scope("partials", "")


@triton.jit(launch_metadata=partials_launch_metadata)
def softmax_merge_kernel(
    out_ptr,
    in_ptr,
    part_ptr,
    n_rows,
    n_cols,
    in_row_stride,
    in_col_stride,
    n_tiles,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program k loads its tile again, merges its row's partials (the online softmax
    # merge), and writes the tile. Launched with PDL, it loads while the partials still
    # run, and gdc_wait returns once they have all finished and their stores are seen.
    # tl.exp, not exp2, as in the held kernel's store and as measured (bench/lone_row.py).
    k = tl.program_id(0)
    row = (k // n_tiles).to(tl.int64)
    cols = k % n_tiles * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    scope("", "load")
    x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask)
    scope("load", "wait")
    if PDL:
        gdc_wait()
    scope("wait", "merge")
    t = 2 * (row * n_tiles + tl.arange(0, TILES))
    live = tl.arange(0, TILES) < n_tiles
    m_t = tl.load(part_ptr + t, mask=live, other=-float("inf"))
    s_t = tl.load(part_ptr + t + 1, mask=live, other=0.0)
    row_max = tl.max(m_t, axis=0)
    row_sum = tl.sum(s_t * tl.exp(m_t - row_max), axis=0)
    scope("merge", "store")
    y = tl.exp(x.to(tl.float32) - row_max) * (1.0 / row_sum)
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    scope("store", "")


def has_pdl(props: object) -> bool:
    """Whether launches on a GPU of these properties (torch.cuda.get_device_properties)
    may overlap by PDL: an NVIDIA GPU from Hopper on (ROCm reports gfx9 as major 9)."""
    return torch.version.hip is None and props.major >= 9


def launch(
    rows: torch.Tensor,
    out: torch.Tensor,
    block_n: int,
    num_warps: int,
    pdl: bool,
    wrap: Callable | None = None,
) -> None:
    """The partials, then the merge, over rows (2-D, at most MAX_TILES tiles of block_n
    columns a row) into out (contiguous, of rows' size), overlapped by PDL where pdl,
    through wrap(kernel) where given (wrap_triton: it passes no launch_pdl on)."""
    n_rows, n_cols = map(int, rows.shape)
    n_tiles = triton.cdiv(n_cols, block_n)
    pdl = pdl and wrap is None
    partials, merge = softmax_partials_kernel, softmax_merge_kernel
    if wrap is not None:
        partials, merge = wrap(partials), wrap(merge)
    # Each tile's max and sum, written on every call: nothing zeroed.
    parts = torch.empty(2 * n_rows * n_tiles, dtype=torch.float32, device=rows.device)
    args = dict(
        in_ptr=rows,
        part_ptr=parts,
        n_rows=n_rows,
        n_cols=n_cols,
        in_row_stride=rows.stride(0),
        in_col_stride=rows.stride(1),
        n_tiles=n_tiles,
        BLOCK_N=block_n,
        PDL=pdl,
        num_warps=num_warps,
    )
    grid = (n_rows * n_tiles,)
    partials[grid](**args)
    tiles = triton.next_power_of_2(n_tiles)
    merge[grid](**args, out_ptr=out, TILES=tiles, **({"launch_pdl": True} if pdl else {}))


def softmax(x: torch.Tensor) -> torch.Tensor:
    """softmax.softmax() by these two launches alone, for rows of up to MAX_TILES tiles:
    the same checks, and a new contiguous tensor of x's shape and dtype."""
    fused.check(x, max_cols=MAX_TILES * BLOCK_N)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel():
        with fused.launching(x):
            pdl = x.is_cuda and has_pdl(torch.cuda.get_device_properties(x.device))
            launch(fused.as_rows(x), out, BLOCK_N, NUM_WARPS, pdl)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return fused.main(
        ["--rows", "1", "--cols", "151936", *argv], softmax, max_cols=MAX_TILES * BLOCK_N
    )


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

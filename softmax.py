"""Fused row softmax in Triton, checked against torch.softmax.

    python softmax.py --rows 4096 --cols 1024 --iters 20

Each row is read from memory once and written once: max, exponentials, sum and division
happen on-chip. A row too long for one program is cut into tiles of up to 32 KiB held by as
many programs, which trade their tile's max and sum, then write their part of the row.
Where the GPU cannot hold a row's tiles at once, and in the interpreter, each program
writes a tile reduced a little earlier instead, read a second time (from L2).

With no GPU visible (or TRITON_INTERPRET=1) the kernels run in Triton's CPU interpreter.
Under a launcher such as torchrun, each process uses the GPU its LOCAL_RANK names.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments or an input too large.
"""

import argparse
import contextlib
import functools
import os
import sys
from typing import NamedTuple

import torch

# The interpreter is picked when the @triton.jit functions below are defined, so the
# choice has to be made before Triton is imported.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.profiler.language as pl  # noqa: E402
from triton import knobs  # noqa: E402

INTERPRET = knobs.runtime.interpret
DEVICE = "cpu" if INTERPRET else "cuda"
_HIP = torch.version.hip is not None
HIP = tl.constexpr(_HIP)  # read inside kernels, which see only constexpr globals
LOG2E = tl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * LOG2E)

# Max absolute error allowed against torch.softmax (computed in float32). float32 cannot
# be exact: our reductions add in a different order. The half types are compared after
# rounding our float32 result to 8 (bfloat16) or 11 (float16) significant bits; outputs
# lie in [0, 1], where one unit in the last place is at most 2**-8 or 2**-11.
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 2**-8, torch.float16: 2**-11}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Rows up to this many columns are held whole in one program's registers; longer rows are cut
# into tiles of TILE_BYTES (8192 float32 or 16384 half columns), TILE_PER_THREAD elements a
# thread (4 or 8 warps of 32 threads). Rows that cannot be loaded 16 bytes at a time (_aligned)
# take a register for each 16-bit element: their tiles are 8192 columns in every dtype. Short
# rows are grouped so that a program holds at least TILE_ELEMS elements, about ELEMS_PER_THREAD
# a thread. Swept on the H200: fewer elements a program leave too few loads in flight, more add
# warps or registers that only wait. The tests lower them to exercise each path.
MAX_FUSED_COLS = 16384
TILE_BYTES = 32768
TILE_PER_THREAD = 64
HALF_TILE_REGS = 48  # maxnreg for held, aligned 16-bit tiles (NVIDIA): 5 programs of 8 warps an SM
# Lagged tiles: a program writes the tile a row plus LAG_PER_SM tickets an SM below its
# own: late enough for that row to be reduced, soon enough to re-read it from L2.
LAG_PER_SM = 2
MERGE_TILES = 1024  # partials merged at a time: TILES, a power of two, at most this
COUNTER_STRIDE = tl.constexpr(32)  # int32s: each row's arrival counter on its own 128 bytes
TILE_ELEMS = 1024
ELEMS_PER_THREAD = 16
# The interpreter runs a program at a time with NumPy: few, large programs are fastest.
INTERPRETER_TILE_ELEMS = 2**16


def _launch_metadata(grid, metadata, args):
    """What Proton's `-k triton` hook records for a launch: a readable name and the
    bytes a softmax must move (its input read once, its output written once)."""
    x = args["in_ptr"]
    rows, cols = args["n_rows"], args["n_cols"]
    dtype = str(x.dtype).removeprefix("torch.")
    return {
        "name": f"{metadata.name} [{rows}x{cols} {dtype}]",
        "bytes": 2 * rows * cols * x.element_size(),
    }


# SCOPES is True only while Proton's instrumentation backend compiles the kernel: each pl
# scope then records its start and end cycles (`make intra`). Otherwise the `if` is decided
# at compile time and the scopes leave no trace in the compiled code.


@triton.jit(launch_metadata=_launch_metadata)
def softmax_kernel(
    out_ptr, in_ptr, n_rows, n_cols, in_row_stride, in_col_stride, out_row_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SCOPES: tl.constexpr,
):  # fmt: skip
    # One program holds BLOCK_M whole rows: a [BLOCK_M, BLOCK_N] tile, padded with -inf
    # past the last column so padding adds exp(-inf) = 0 to the sum.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows = rows.to(tl.int64)  # row offsets of large inputs pass 2**31 elements
    if SCOPES:
        pl.enter_scope("load")
    x = tl.load(
        in_ptr + rows[:, None] * in_row_stride + cols[None, :] * in_col_stride,
        mask=mask,
        other=-float("inf"),
    ).to(tl.float32)
    if SCOPES:
        pl.exit_scope("load")
        pl.enter_scope("max")
    # Subtracting the row max keeps exp() at or below 1: no overflow for large inputs.
    row_max = tl.max(x, axis=1)
    if SCOPES:
        pl.exit_scope("max")
        pl.enter_scope("exp_sum")
    num = tl.exp(x - row_max[:, None])
    den = tl.sum(num, axis=1)
    if SCOPES:
        pl.exit_scope("exp_sum")
        pl.enter_scope("store")
    out = out_ptr + rows[:, None] * out_row_stride + cols[None, :]
    tl.store(out, (num / den[:, None]).to(out_ptr.dtype.element_ty), mask=mask)
    if SCOPES:
        pl.exit_scope("store")


@triton.jit
def _unseen(x, ALIGNED: tl.constexpr):
    """x, through inline assembly with side effects (is_pure=False), which Triton and
    LLVM neither merge nor move. Each use of a 16-bit tile then converts its pairs of
    values, as loaded, to float32 afresh; otherwise the compiler keeps the float32 values
    of one conversion alive instead, in twice the registers. Only for tiles loaded 16
    bytes at a time (ALIGNED), whose values come in pairs; PTX, so on AMD, x. Never run
    in the interpreter, which has no inline assembly."""
    if tl.constexpr(ALIGNED and x.dtype.primitive_bitwidth == 16 and not HIP):
        bits = tl.inline_asm_elementwise(
            "mov.b32 $0, $1;", "=r,r", [x.to(tl.int16, bitcast=True)], dtype=tl.int16,
            is_pure=False, pack=2,
        )  # fmt: skip
        return bits.to(x.dtype, bitcast=True)
    else:
        return x


@triton.jit(launch_metadata=_launch_metadata)
def softmax_long_rows_kernel(
    out_ptr, in_ptr, max_ptr, sum_ptr, counter_ptr, n_rows, n_cols, in_row_stride,
    in_col_stride, out_row_stride, n_tiles,
    BLOCK_N: tl.constexpr, TILES: tl.constexpr, ALIGNED: tl.constexpr, SCOPES: tl.constexpr,
):  # fmt: skip
    # A row of n_tiles tiles is held by n_tiles programs, a tile each, in registers.
    # Programs take tickets in the order they start: ticket k is tile k % n_tiles of row
    # k // n_tiles. So only the newest row can have tiles not started, and at most
    # n_tiles - 1 programs wait at once: a GPU that holds n_tiles programs (_plan: one an
    # SM) always has room for the next, and every row completes. That assumes no other
    # kernel fills the SMs meanwhile (another stream, MPS).
    # The tile's start joins the row's scalar address: a few registers a thread fewer.
    ticket = tl.atomic_add(counter_ptr, 1)
    row = (ticket // n_tiles).to(tl.int64)
    start = (ticket % n_tiles) * BLOCK_N
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols - start
    if SCOPES:
        pl.enter_scope("load")
    # ALIGNED, the tile waits in its own dtype: a half tile in half the registers of its
    # float32 values, so more programs fit an SM, with more loads in flight.
    x = tl.load(in_ptr + row * in_row_stride + start * in_col_stride + cols * in_col_stride,
                mask=mask, other=-float("inf"))  # fmt: skip
    if SCOPES:
        pl.exit_scope("load")
        pl.enter_scope("partials")
    m = tl.max(x.to(tl.float32), axis=0)
    # A tile of nothing but -inf has m = -inf, and its exponentials are 0, not
    # exp(-inf - -inf) = NaN. exp2 of a scaled difference: three instructions an element,
    # where tl.exp takes six.
    base = tl.where(m == -float("inf"), 0.0, m)
    e = tl.exp2((_unseen(x, ALIGNED).to(tl.float32) - base) * LOG2E)
    tl.store(max_ptr + ticket, m)
    tl.store(sum_ptr + ticket, tl.sum(e, axis=0))
    if SCOPES:
        pl.exit_scope("partials")
        pl.enter_scope("wait")
    # Release publishes this tile's partials with its arrival; acquire, all the others'.
    arrived = counter_ptr + (1 + row) * COUNTER_STRIDE
    seen = tl.atomic_add(arrived, 1, sem="acq_rel") + 1
    while seen < n_tiles:
        seen = tl.atomic_add(arrived, 0, sem="acquire")
    if SCOPES:
        pl.exit_scope("wait")
        pl.enter_scope("merge")
    # The row's max M and sum S = sum(s_t * exp(m_t - M)) from its tiles' maxima m_t and
    # sums s_t: volatile loads, after the acquire that made them visible.
    t = tl.arange(0, TILES)
    m_t = tl.load(max_ptr + row * n_tiles + t, mask=t < n_tiles, other=-float("inf"), volatile=True)
    s_t = tl.load(sum_ptr + row * n_tiles + t, mask=t < n_tiles, other=0.0, volatile=True)
    row_max = tl.max(m_t, axis=0)
    row_sum = tl.sum(s_t * tl.exp(m_t - row_max), axis=0)
    if SCOPES:
        pl.exit_scope("merge")
        pl.enter_scope("store")
    if ALIGNED:
        # exp(x - M) * (1 / S), converting the tile again. tl.exp here, not exp2: with it,
        # Triton 3.6's ptxas converts and writes a few elements at a time; with exp2, it
        # converts the whole tile first, in 16 more registers a thread (3.8's: 64 either way).
        y = tl.exp(_unseen(x, ALIGNED).to(tl.float32) - row_max) * (1.0 / row_sum)
    else:
        # Loaded an element a register, the tile takes as many registers as its float32
        # exponentials: those waited instead, and are scaled, not computed again.
        y = e * (tl.exp(m - row_max) / row_sum)
    out = out_ptr + row * out_row_stride + start + cols
    tl.store(out, y.to(out_ptr.dtype.element_ty), mask=mask)
    if SCOPES:
        pl.exit_scope("store")


@triton.jit(launch_metadata=_launch_metadata)
def softmax_long_rows_lagged_kernel(
    out_ptr, in_ptr, max_ptr, sum_ptr, counter_ptr, n_rows, n_cols, in_row_stride,
    in_col_stride, out_row_stride, n_tiles, lag,
    BLOCK_N: tl.constexpr, TILES: tl.constexpr, SCOPES: tl.constexpr,
):  # fmt: skip
    # Tiles are numbered row by row. The program that takes ticket k reduces tile k to
    # its max and sum, then writes tile k - lag. As lag is at least a row's tiles, every
    # tile of that row has a lower ticket than k: taken by a program already running,
    # which reduces it before it waits itself (the merge below waits for nothing). So no
    # launch can deadlock, on any number of SMs; and lag tiles ago, the tile is in L2.
    ticket = tl.atomic_add(counter_ptr, 1)
    if ticket < n_rows * n_tiles:
        row = (ticket // n_tiles).to(tl.int64)
        cols = (ticket % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
        if SCOPES:
            pl.enter_scope("load")
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=cols < n_cols,
                    other=-float("inf")).to(tl.float32)  # fmt: skip
        if SCOPES:
            pl.exit_scope("load")
            pl.enter_scope("partials")
        m = tl.max(x, axis=0)  # a tile of -inf adds 0 and a NaN stays NaN, as held
        tl.store(max_ptr + ticket, m)
        tl.store(sum_ptr + ticket, tl.sum(tl.exp(x - tl.where(m == -float("inf"), 0.0, m)), 0))
        # The row's last tile to arrive (acq_rel: it sees the others' partials) merges
        # them, once a row, into the row's first slots, and arrives again (release).
        if tl.atomic_add(counter_ptr + (1 + row) * COUNTER_STRIDE, 1, sem="acq_rel") == n_tiles - 1:
            row_max = tl.full((), -float("inf"), tl.float32)
            row_sum = tl.full((), 0.0, tl.float32)
            for first in range(0, n_tiles, TILES):  # an online max and sum, TILES at a time
                t = row * n_tiles + first + tl.arange(0, TILES)
                live = first + tl.arange(0, TILES) < n_tiles
                m_t = tl.load(max_ptr + t, mask=live, other=-float("inf"), volatile=True)
                s_t = tl.load(sum_ptr + t, mask=live, other=0.0, volatile=True)
                new_max = tl.maximum(row_max, tl.max(m_t, axis=0))
                base = tl.where(new_max == -float("inf"), 0.0, new_max)  # no -inf - -inf
                row_sum = row_sum * tl.exp(row_max - base) + tl.sum(s_t * tl.exp(m_t - base), 0)
                row_max = new_max
            tl.store(max_ptr + row * n_tiles, row_max)
            tl.store(sum_ptr + row * n_tiles, row_sum)
            tl.atomic_add(counter_ptr + (1 + row) * COUNTER_STRIDE, 1, sem="release")
        if SCOPES:
            pl.exit_scope("partials")
    done = ticket - lag
    if done >= 0:
        row = (done // n_tiles).to(tl.int64)
        cols = (done % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        if SCOPES:
            pl.enter_scope("wait")
        # Acquire: once the row is merged (n_tiles + 1 arrivals), its max and sum are seen.
        seen = tl.atomic_add(counter_ptr + (1 + row) * COUNTER_STRIDE, 0, sem="acquire")
        while seen <= n_tiles:
            seen = tl.atomic_add(counter_ptr + (1 + row) * COUNTER_STRIDE, 0, sem="acquire")
        if SCOPES:
            pl.exit_scope("wait")
            pl.enter_scope("store")
        row_max = tl.load(max_ptr + row * n_tiles, volatile=True)
        row_sum = tl.load(sum_ptr + row * n_tiles, volatile=True)
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask)
        y = tl.exp(x.to(tl.float32) - row_max) * (1.0 / row_sum)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
        if SCOPES:
            pl.exit_scope("store")


def launch_config(n_rows, n_cols, n_sms, warp_size, tile_elems=TILE_ELEMS):
    """Tile shape and warps for rows held whole on a device of n_sms SMs (CUs on AMD):
    (BLOCK_M rows of BLOCK_N columns a program, num_warps); None for longer rows."""
    if n_cols > MAX_FUSED_COLS:
        return None
    block_n = triton.next_power_of_2(n_cols)
    # Short rows share a program, so that each program still loads a full tile; but
    # keep at least two programs per SM, or part of the GPU sits idle.
    most = max(1, n_rows // (2 * n_sms))
    block_m = max(1, min(tile_elems // block_n, 1 << (most.bit_length() - 1)))
    num_warps = block_m * block_n // (ELEMS_PER_THREAD * warp_size)
    return block_m, block_n, max(1, min(16, num_warps))


class Plan(NamedTuple):
    """How softmax() launches for one shape: the kernel, its tile of BLOCK_M rows by
    BLOCK_N columns, its warps and grid; for long rows, the tiles a row is cut into
    (n_tiles, padded to a power of two in TILES), the lag in tiles between reducing a
    tile and writing it, and the registers a thread (maxnreg; 0: the compiler's choice)."""

    kernel: str
    block_m: int
    block_n: int
    num_warps: int
    grid: tuple
    n_tiles: int = 1
    tiles: int = 1
    lag: int = 0
    maxnreg: int = 0


@functools.lru_cache(maxsize=1024)
def _plan(n_rows, n_cols, itemsize, aligned, device):
    """The Plan for a shape of itemsize-byte elements on a device index; aligned as
    _aligned says of the input."""
    if INTERPRET:  # one 'SM', and large programs: few programs to interpret
        n_sms, warp_size, tile_elems = 1, 32, INTERPRETER_TILE_ELEMS
    else:
        props = torch.cuda.get_device_properties(device)
        n_sms, warp_size, tile_elems = props.multi_processor_count, props.warp_size, TILE_ELEMS
    fused = launch_config(n_rows, n_cols, n_sms, warp_size, tile_elems)
    if fused:
        block_m, block_n, num_warps = fused
        return Plan(
            "softmax_kernel", block_m, block_n, num_warps, (triton.cdiv(n_rows, block_m), 1, 1)
        )
    # Long rows. A program per tile holds its tile in registers while the row's other
    # tiles are reduced, when the GPU can hold every tile of a row at once: one program
    # an SM always fits. Otherwise, and in the interpreter, which runs one program at a
    # time, each program writes a tile reduced lag tickets earlier.
    tile = TILE_BYTES // (itemsize if aligned else 4)
    num_warps = max(1, tile // (TILE_PER_THREAD * warp_size))
    n_tiles = triton.cdiv(n_cols, tile)
    tiles = triton.next_power_of_2(min(n_tiles, MERGE_TILES))
    if not INTERPRET and n_tiles <= min(n_sms, MERGE_TILES):
        grid = (n_rows * n_tiles, 1, 1)
        regs = HALF_TILE_REGS if aligned and itemsize == 2 and not _HIP else 0
        return Plan("softmax_long_rows_kernel", 1, tile, num_warps, grid, n_tiles, tiles, 0, regs)
    lag = n_tiles + LAG_PER_SM * n_sms
    grid = (n_rows * n_tiles + lag, 1, 1)
    return Plan("softmax_long_rows_lagged_kernel", 1, tile, num_warps, grid, n_tiles, tiles, lag)


# `kernel[grid](...)` binds and specialises every argument and builds a cache key on each
# call: about twice torch.softmax's host time (bench/results). So, as in Triton's fused-
# softmax tutorial, a key's first call compiles the kernel with kernel.warmup(...) (or finds
# it in Triton's cache), and later calls find it by the key and launch compiled[grid](...).
_launches = {}  # _key(x) -> _launch(x, ...): how softmax(x) launches
MAX_LAUNCHES = 4096
_HERE = contextlib.nullcontext()
_FPSAN = hasattr(knobs.compilation, "fpsan_homomorphic_casts")  # Triton 3.9+
_one_gpu = INTERPRET  # one GPU visible, so no tensor is off the current one: set by _launch


def _key(x):
    """What softmax(x)'s launch depends on: x's device, dtype, shape, strides and negation
    bit; the current device, of several; what Triton specialises on (16-byte alignment, on
    AMD a storage under 2 GiB) and the modes a session may switch (debug, instrumentation,
    3.9's float sanitizer). Other compile knobs count as they were at the key's first call."""
    return (x.device, _one_gpu or torch.cuda.current_device(), x.dtype, x.shape, x.stride(),
            x.is_neg(), x.data_ptr() % 16 == 0, _HIP and x.untyped_storage().nbytes() < 2**31,
            knobs.runtime.debug, knobs.compilation.instrumentation_mode,
            _FPSAN and knobs.compilation.fpsan_homomorphic_casts)  # fmt: skip


def _per_call_hooks():
    """Whether a hook is set that kernel[grid] consults on its calls and a compiled kernel
    skips, or that can keep warmup() from returning a kernel (jit_cache_hook)."""
    runtime = knobs.runtime
    return bool(
        softmax_kernel.pre_run_hooks
        or softmax_long_rows_kernel.pre_run_hooks
        or softmax_long_rows_lagged_kernel.pre_run_hooks
        or runtime.jit_cache_hook
        or getattr(runtime, "add_stages_inspection_hook", None)  # Triton 3.7+
    )


def _aligned(x):
    """Whether x's rows load 16 bytes at a time: a column stride of 1, a row stride and
    length of multiples of 16 elements (what Triton specialises integers on), data on 16."""
    rows, cols = x.stride()
    return cols == 1 and rows % 16 == 0 and x.shape[1] % 16 == 0 and x.data_ptr() % 16 == 0


def _prepare(out, x, device, precompile):
    """(run, workspaces, fixed) for tensors of out's and x's key: softmax(x) is run(out, x,
    *workspaces(x), *fixed), fixed being every argument that follows from the key."""
    n_rows, n_cols = x.shape
    in_row_stride, in_col_stride = x.stride()
    aligned = _aligned(x)
    plan = _plan(n_rows, n_cols, x.element_size(), aligned, device)
    scopes = bool(knobs.compilation.instrumentation_mode) and not INTERPRET
    if plan.kernel == "softmax_kernel":
        kernel, workspaces = softmax_kernel, lambda x: ()
        fixed = (n_rows, n_cols, in_row_stride, in_col_stride, n_cols, plan.block_m,
                 plan.block_n, scopes)  # fmt: skip
    else:

        def workspaces(x):
            # Each tile's max and sum; the ticket counter and each row's arrivals, 128 bytes
            # apart (faster on the H200), zeroed on every call, CUDA-graph replays included.
            partial_max = torch.empty((n_rows, plan.n_tiles), dtype=torch.float32, device=x.device)
            partial_sum = torch.empty_like(partial_max)
            counters = partial_max.new_zeros((n_rows + 1, COUNTER_STRIDE.value), dtype=torch.int32)
            return partial_max, partial_sum, counters

        if plan.kernel == "softmax_long_rows_kernel":
            kernel, lag, held = softmax_long_rows_kernel, (), (aligned,)
        else:
            kernel, lag, held = softmax_long_rows_lagged_kernel, (plan.lag,), ()
        fixed = (n_rows, n_cols, in_row_stride, in_col_stride, n_cols, plan.n_tiles, *lag,
                 plan.block_n, plan.tiles, *held, scopes)  # fmt: skip
    # maxnreg only where set: Triton's AMD backend refuses the option.
    options = {"num_warps": plan.num_warps, **({"maxnreg": plan.maxnreg} if plan.maxnreg else {})}
    if precompile:
        args = (out, x, *workspaces(x), *fixed)
        run = kernel.warmup(*args, grid=plan.grid, **options)[plan.grid]
    else:
        run = functools.partial(kernel[plan.grid], **options)
    return run, workspaces, fixed


def _guarded(device, copy, run, out, x, *args):
    """run(out, x, *args) under device (None: the current one), on a copy of x if copy."""
    with _HERE if device is None else torch.cuda.device(device):
        run(out, x.clone(memory_format=torch.contiguous_format) if copy else x, *args)


def _launch(x, keep):
    """Checks x (ValueError); _prepare's (run, workspaces, fixed) for it, run wrapped by
    _guarded where needed, kept by _key(x) if keep, unless a per-call hook is set."""
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_nested:
        raise ValueError(f"softmax expects a dense torch.Tensor, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got {x.ndim}-D")
    if x.dtype not in TOLERANCE:
        raise ValueError(f"softmax supports float32, float16 and bfloat16, not {x.dtype}")
    if not (x.is_cuda if DEVICE == "cuda" else x.is_cpu):
        raise ValueError(f"softmax expects a tensor on {DEVICE}, got one on {x.device}")
    n_rows, n_cols = x.shape
    if n_rows > 2**31 - 2**16 or n_cols >= 2**31:  # row and column indices are 32-bit
        raise ValueError(f"softmax: {n_rows} x {n_cols} is too large for 32-bit indices")
    if not n_rows or not n_cols:
        return lambda *args: None, lambda x: (), ()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    global _one_gpu  # CUDA is up (out is on it): its device count is final
    _one_gpu = INTERPRET or torch.cuda.device_count() == 1
    # A negated view (z.conj().imag) or one past 2**31 elements launches on a copy, as out.
    copy = x.is_neg() or (n_cols - 1) * x.stride(1) >= 2**31
    device = x.get_device()
    here = INTERPRET or device == torch.cuda.current_device()
    hooks = _per_call_hooks()
    with _HERE if here else torch.cuda.device(device):
        run, workspaces, fixed = _prepare(out, out if copy else x, device, not (INTERPRET or hooks))
    if copy or not here:
        run = functools.partial(_guarded, None if here else device, copy, run)
    if keep and not hooks:
        if len(_launches) >= MAX_LAUNCHES:  # many shapes: start again rather than grow
            _launches.clear()
        _launches[_key(x)] = run, workspaces, fixed  # with _one_gpu final
    return run, workspaces, fixed


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor of any strides, on the GPU (in
    Triton's interpreter, on the CPU). No autograd: the result has no grad_fn.

    Returns a new contiguous tensor of x's shape and dtype; x is not modified.
    float32, float16 and bfloat16 inputs; arithmetic is in float32.
    """
    try:  # A key's first call checks x and compiles; later ones allocate out and launch.
        key = _key(x)
    except (AttributeError, RuntimeError):  # no strides or data: _launch says what x is
        key = None
    launch = None if key is None or _per_call_hooks() else _launches.get(key)
    run, workspaces, fixed = launch or _launch(x, key is not None)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)  # whatever x's strides
    run(out, x, *workspaces(x), *fixed)
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One short line and exit 2, instead of argparse's usage block.
        message = message[:200] if message[:200].isprintable() else repr(message[:200])[1:-1]
        print(f"softmax: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _whole(low, high):
    """An argparse type: a whole number in [low, high)."""

    def parse(text):
        shown = text if len(text) <= 30 else f"{text[:30]}..."  # a message stays one short line
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {shown!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {shown}")
        if value >= high:
            raise argparse.ArgumentTypeError(f"must be below {high}, got {shown}")
        return value

    return parse


def _free_bytes():
    if DEVICE == "cuda":
        return torch.cuda.mem_get_info()[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _ranks():
    """(rank, world size, local rank) as torchrun exports them; (0, 1, 0) alone."""
    values = [os.environ.get(name, default) for name, default in
              (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"))]  # fmt: skip
    if not all(v.isascii() and v.isdigit() and len(v) <= 9 for v in values) or int(values[1]) < 1:
        print("softmax: error: RANK and LOCAL_RANK must be whole numbers >= 0, WORLD_SIZE >= 1",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    return tuple(map(int, values))


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0])
    count = _whole(1, 2**31)
    parser.add_argument("--rows", type=count, default=4096, help="rows (default 4096)")
    parser.add_argument("--cols", type=count, default=1024, help="columns (default 1024)")
    parser.add_argument(
        "--iters", type=count, default=20, help="launches after the checked one (default 20)"
    )
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    parser.add_argument("--seed", type=_whole(0, 2**63), default=0, help="input seed (default 0)")
    args = parser.parse_args(argv)
    dtype = DTYPES[args.dtype]
    rank, world, local_rank = _ranks()
    # Each line names the rank when there are several, so that their output can be told apart.
    tag = f"softmax[rank {rank}]" if world > 1 else "softmax"
    if not INTERPRET:  # several ranks may share a GPU
        torch.cuda.set_device(local_rank % torch.cuda.device_count())

    # Input, output and the float32 reference with its temporaries, refused up front
    # rather than failing halfway with an out-of-memory traceback.
    need = args.rows * args.cols * (2 * dtype.itemsize + 3 * 4)
    free = _free_bytes()
    if need > free:
        print(
            f"{tag}: error: {args.rows} x {args.cols} {args.dtype} needs about "
            f"{need / 2**30:.1f} GiB, more than the {free / 2**30:.1f} GiB free on {DEVICE}",
            file=sys.stderr,
        )
        return 2

    if INTERPRET:
        # No profiler sees interpreted launches and their timing means nothing, so the
        # checked launch is the only one.
        print(f"{tag}: device=cpu (Triton interpreter: one launch, --iters not run)")
    else:
        print(f"{tag}: device={torch.cuda.get_device_name()}")
    print(f"{tag}: rows={args.rows} cols={args.cols} iters={args.iters}")

    torch.manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, device=DEVICE).to(dtype)
    y = softmax(x)
    ref = torch.softmax(x.float(), dim=1)
    err = (y.float() - ref).abs().max().item()
    print(f"{tag}: max_abs_err={err:.3e}")
    # Written so that NaN fails: every comparison with NaN is False.
    if not (err <= TOLERANCE[dtype]):
        print(f"{tag}: FAIL result differs from torch.softmax", file=sys.stderr)
        return 1

    if not INTERPRET:
        for _ in range(args.iters):
            softmax(x)
        torch.cuda.synchronize()
    print(f"{tag}: PASS")
    return 0


if __name__ == "__main__":
    # Success returns normally: Triton 3.6's Proton CLI writes no profile after any
    # SystemExit, even SystemExit(0).
    status = main()
    if status:
        raise SystemExit(status)

"""softmax.py's long rows, past MAX_FUSED_COLS columns: cut into tiles across programs.

    python long_rows.py --cols 100000       (softmax.py's check, 8 x 131072 by default)

A row longer than softmax.py's MAX_FUSED_COLS is a split-row reduction across programs,
as split-K splits a matrix product's reduction: each program reduces one tile of the row
to its max m_t and its sum of exponentials s_t, and the row's max M and sum
S = sum_t s_t * exp(m_t - M) follow from those partials alone: the online softmax merge
(Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018). Three paths
merge them, none able to deadlock (docs/kernel.md says why each is fast):

- softmax_long_rows_kernel, where the GPU holds a row's tiles at once: each program keeps
  its tile in registers while the row's partials arrive, as packed 64-bit slots, then
  writes it: read once. Programs take their tile by atomic ticket, in the order they
  start, as decoupled look-back takes its dynamic partition index (Merrill & Garland,
  2016), or by program id where the GPU holds every program of the launch at once, as a
  cooperative launch guarantees.
- few_rows.py's partials kernel, then its merge kernel, for a few rows that fit the L2 on
  NVIDIA GPUs with programmatic dependent launch (PDL): no slots to zero and no spin
  on atomics; the merge launches while the partials run, as FlashInfer merges attention
  states, and reads its tile again from L2.
- softmax_long_rows_lagged_kernel elsewhere (rows of more tiles than SMs, the
  interpreter): each program writes the tile reduced a fixed number of tickets earlier,
  read a second time from L2.

Float32 rows of up to WHOLE_ROW_COLS columns, where there are enough of them to fill the
GPU, are held whole by one program of 16 warps, in softmax.py's kernel.
"""

import functools
import os
import sys
from collections.abc import Callable
from typing import NamedTuple

# few_rows.py imports softmax.py first, which picks Triton's interpreter where there is no
# GPU, before Triton loads.
import few_rows
import softmax as fused
from softmax import launch_metadata, scope

# isort: split
import torch
import triton
import triton.language as tl

# A tile is TILE_BYTES (8192 float32 or 16384 half columns), 64 elements for each thread.
# Rows that load an element at a time (neither aligned() nor peel()-able) take a register
# for each 16-bit element: their tiles are 8192 columns in every dtype. Swept on the H200.
TILE_BYTES = 32768
TILE_PER_THREAD = 64
# A small batch of 16-bit rows, whose tiles would leave SMs idle, is cut into tiles of
# SMALL_TILE_BYTES where every tile still has an SM: on an H100, a lone row of 32000 to
# 256000 bf16 or fp16 columns 3-17% faster, the one size that gained at every length;
# float32 rows gained at some lengths and lost at others, and keep theirs.
SMALL_TILE_BYTES = 16384
# Held 16-bit tiles loaded 16 bytes at a time, compiled for 48 registers per thread
# (Triton's maxnreg, NVIDIA only): 5 programs of 8 warps fit an SM instead of 4, so more
# loads are in flight.
HALF_TILE_REGS = 48
# Lagged tiles: a program writes the tile a row plus LAG_PER_SM tickets per SM below
# its own: late enough for that row to be reduced, soon enough to read it again from L2.
LAG_PER_SM = 2
# At most FEW_ROWS rows of FEW_ELEMENTS in all that load 16 bytes at a time (aligned or
# peeled), on a GPU with PDL, take few_rows.py's two launches, not the held kernel: on an
# H100 1.07-1.29x faster at 1 and 16 rows of 32000 to 151936 columns and 1 of 256000, in
# bf16 and fp32; 0.95x at 16 x 256000 bf16, 0.69-0.72x at 256 rows (bench/results/ab).
FEW_ROWS = 16
FEW_ELEMENTS = 3 * 2**20
MERGE_TILES = 1024  # partials merged at a time: TILES, a power of two, at most this
# Held rows' slots, 16 int64s to 128 bytes: each row's on lines of its own, as the lagged
# kernel's counters (that spacing measured faster on the H200), and the ticket on the
# first line, alone.
LINE_SLOTS = tl.constexpr(16)
# Float32 rows of up to WHOLE_ROW_COLS columns, at least WHOLE_ROWS_PER_SM of them for
# each SM, each held whole by one program of WHOLE_ROW_WARPS warps.
WHOLE_ROW_COLS = 32768
WHOLE_ROWS_PER_SM = 8
WHOLE_ROW_WARPS = 16
COUNTER_STRIDE = tl.constexpr(32)  # int32s: each row's arrival counter on its own 128 bytes
LOG2E = tl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * LOG2E)
AMD = tl.constexpr(torch.version.hip is not None)  # kernels read only constexpr globals
PTX = tl.constexpr(not AMD and not fused.INTERPRET)  # inline PTX: compiled for NVIDIA


@triton.jit
def _unseen(x, VECTORS: tl.constexpr):  # noqa: ANN202 - a tensor of Triton's, as given
    """x, through an optimisation barrier: inline assembly with side effects
    (is_pure=False), which Triton and LLVM neither merge nor move. Each use of a 16-bit
    tile then converts its pairs of values, as loaded, to float32 afresh (rematerialised);
    otherwise the compiler keeps the float32 values of one conversion alive instead, in
    twice the registers. Only for tiles loaded 16 bytes at a time (VECTORS), whose values
    come in pairs; PTX, so on AMD and in the interpreter (which has no inline assembly), x."""
    if tl.constexpr(VECTORS and x.dtype.primitive_bitwidth == 16 and PTX):
        bits = tl.inline_asm_elementwise(
            "mov.b32 $0, $1;",
            "=r,r",
            [x.to(tl.int16, bitcast=True)],
            dtype=tl.int16,
            is_pure=False,
            pack=2,
        )
        return bits.to(x.dtype, bitcast=True)
    else:
        return x


@triton.jit
def _edges(row_start, n_cols, tile, CHUNK: tl.constexpr):  # noqa: ANN202 - Triton's tensors
    """A row's head (before its first whole chunk of CHUNK elements) and tail (after its
    last), fewer than CHUNK elements each: their offsets from in_ptr, and which are
    there, for the row's first tile alone."""
    body = (row_start + CHUNK - 1) // CHUNK * CHUNK
    body_end = (row_start + n_cols) // CHUNK * CHUNK
    i = tl.arange(0, 2 * CHUNK)
    at = tl.where(i < CHUNK, row_start, tl.maximum(body, body_end) - CHUNK) + i
    end = tl.where(tile == 0, row_start + n_cols, row_start)
    return at, (at < end) & ((i >= CHUNK) | (at < body))


@triton.jit
def _merged(slots, tile, m, s, n_tiles, TILES: tl.constexpr):  # noqa: ANN202
    """The row's max and sum, once this tile's max m and sum s are in slots[tile] and
    every other tile's in its own: the online softmax merge of the row's partials."""
    # A slot holds a tile's max and sum as their float32 bits, high and low, and is 0
    # while empty: no tile's pair is (+0.0, +0.0), as its sum is at least exp(0) = 1 of
    # its max unless that max is -inf or NaN. The slot is the data it publishes, so
    # relaxed atomics suffice; and atomic reads stay inside the loop, where compiled for
    # gfx942 a volatile load is hoisted out of it: a wait that never ends.
    bits = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (
        s.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    )
    tl.atomic_xchg(slots + tile, bits, sem="relaxed")
    scope("partials", "wait")
    t = tl.arange(0, TILES)
    live = t < n_tiles
    seen = tl.atomic_add(slots + t, 0, mask=live, sem="relaxed")
    while tl.sum(((seen == 0) & live).to(tl.int32), axis=0) > 0:
        # Only the slots still empty are read again.
        again = tl.atomic_add(slots + t, 0, mask=live & (seen == 0), sem="relaxed")
        seen = tl.where(seen == 0, again, seen)
    scope("wait", "merge")
    m_t = tl.where(live, (seen >> 32).to(tl.int32).to(tl.float32, bitcast=True), -float("inf"))
    s_t = tl.where(live, seen.to(tl.int32).to(tl.float32, bitcast=True), 0.0)
    row_max = tl.max(m_t, axis=0)
    return row_max, tl.sum(s_t * tl.exp(m_t - row_max), axis=0)


@triton.jit(launch_metadata=launch_metadata)
def softmax_long_rows_kernel(
    out_ptr,
    in_ptr,
    slot_ptr,
    n_rows,
    n_cols,
    in_row_stride,
    in_col_stride,
    lead,
    out_row_shift,
    n_tiles,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
    VECTORS: tl.constexpr,
    PEELED: tl.constexpr,
    TICKET: tl.constexpr,
):
    # TICKET: ticket k is tile k % n_tiles of row k // n_tiles. As tickets come in start
    # order, only the newest row can have tiles not started, and at most n_tiles - 1
    # programs wait at once: a GPU that holds n_tiles programs (plan: one per SM) always
    # has room for the next, and every row completes. Otherwise the GPU holds every
    # program at once (plan: one per SM), in any order, and k is the program's id. Both
    # assume no other kernel fills the SMs meanwhile (another stream, MPS).
    if TICKET:
        k = tl.atomic_add(slot_ptr, 1, sem="relaxed").to(tl.int32)  # orders nothing else
    else:
        k = tl.program_id(0)
    row = (k // n_tiles).to(tl.int64)
    tile = k % n_tiles
    cols = tl.arange(0, BLOCK_N)
    if PEELED:
        # in_ptr is on 16 bytes, row 0 starts `lead` elements in. Tiles cover the row's
        # whole 16-byte chunks: their offsets and bounds multiples of CHUNK, as Triton
        # sees, so it loads (and, where out's rows lie on the same chunks, out_row_shift
        # and lead then multiples of 16, stores) 16 bytes at a time.
        CHUNK: tl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth
        row_start = lead + row * in_row_stride
        start = (row_start + CHUNK - 1) // CHUNK * CHUNK + tile * BLOCK_N
        src = in_ptr + start + cols
        mask = cols < (row_start + n_cols) // CHUNK * CHUNK - start
        # Out's row r is in's row r shifted by r * (n_cols - in_row_stride) - lead.
        out_start = row * out_row_shift - lead + start
    else:
        start = tile * BLOCK_N
        src = in_ptr + row * in_row_stride + start * in_col_stride + cols * in_col_stride
        mask = cols < n_cols - start
        out_start = row * n_cols + start
    scope("", "load")
    # Loaded 16 bytes at a time (VECTORS), the tile waits in its own dtype: a half tile in
    # half the registers of its float32 values, so more programs fit an SM, with more
    # loads in flight.
    x = tl.load(src, mask=mask, other=-float("inf"))
    scope("load", "partials")
    m = tl.max(x.to(tl.float32), axis=0)
    if PEELED:  # the head and the tail, an element at a time
        at, edge = _edges(row_start, n_cols, tile, CHUNK)
        x_edge = tl.load(in_ptr + at, mask=edge, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x_edge, axis=0))
    # A tile of nothing but -inf has m = -inf, and its exponentials are 0, not
    # exp(-inf - -inf) = NaN. exp2 of a scaled difference: three instructions an element,
    # where tl.exp takes six.
    base = tl.where(m == -float("inf"), 0.0, m)
    e = tl.exp2((_unseen(x, VECTORS).to(tl.float32) - base) * LOG2E)
    s = tl.sum(e, axis=0)
    if PEELED:
        s += tl.sum(tl.exp2((x_edge - base) * LOG2E), axis=0)
    row_max, row_sum = _merged(slot_ptr + LINE_SLOTS + row * TILES, tile, m, s, n_tiles, TILES)
    scope("merge", "store")
    if VECTORS:
        # exp(x - M) * (1 / S), converting the tile again. tl.exp here, not exp2: with it,
        # Triton 3.6's ptxas converts and writes a few elements at a time; with exp2, it
        # converts the whole tile first, in 16 more registers per thread (3.8's: 64 either way).
        y = tl.exp(_unseen(x, VECTORS).to(tl.float32) - row_max) * (1.0 / row_sum)
    else:
        # Loaded an element a register, the tile takes as many registers as its float32
        # exponentials: those waited instead, and are scaled, not computed again.
        y = e * (tl.exp(m - row_max) / row_sum)
    tl.store(out_ptr + out_start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    if PEELED:
        # Loaded again (from L2), not held through the wait: half the spills at 48 registers.
        at, edge = _edges(row_start, n_cols, tile, CHUNK)
        x_edge = tl.load(in_ptr + at, mask=edge, other=-float("inf")).to(tl.float32)
        y_edge = tl.exp(x_edge - row_max) * (1.0 / row_sum)
        tl.store(out_ptr + out_start - start + at, y_edge.to(out_ptr.dtype.element_ty), mask=edge)
    scope("store", "")


@triton.jit(launch_metadata=launch_metadata)
def softmax_long_rows_lagged_kernel(
    out_ptr,
    in_ptr,
    max_ptr,
    sum_ptr,
    counter_ptr,
    n_rows,
    n_cols,
    in_row_stride,
    in_col_stride,
    n_tiles,
    lag,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
):
    # The program that takes ticket k reduces tile k to its max and sum, then writes tile
    # k - lag. As lag is at least a row's tiles, every tile of that row has a lower ticket
    # than k: taken by a program already running, which reduces it before it waits itself
    # (the merge below waits for nothing). So no launch can deadlock, on any number of
    # SMs; and lag tiles ago, the tile is in L2.
    ticket = tl.atomic_add(counter_ptr, 1)
    if ticket < n_rows * n_tiles:
        row = (ticket // n_tiles).to(tl.int64)
        cols = (ticket % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
        scope("", "load")
        x = tl.load(
            in_ptr + row * in_row_stride + cols * in_col_stride,
            mask=cols < n_cols,
            other=-float("inf"),
        ).to(tl.float32)
        scope("load", "partials")
        m = tl.max(x, axis=0)  # a tile of -inf adds 0 and a NaN stays NaN, as held
        tl.store(max_ptr + ticket, m)
        tl.store(sum_ptr + ticket, tl.sum(tl.exp(x - tl.where(m == -float("inf"), 0.0, m)), 0))
        # The row's last tile to arrive (acq_rel: it sees the others' partials) merges them
        # into the row's first slots, and arrives again (release): a last-block reduction.
        if tl.atomic_add(counter_ptr + (1 + row) * COUNTER_STRIDE, 1, sem="acq_rel") == n_tiles - 1:
            row_max = tl.full((), -float("inf"), tl.float32)
            row_sum = tl.full((), 0.0, tl.float32)
            for first in range(0, n_tiles, TILES):  # the online merge, TILES at a time
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
        scope("partials", "")
    done = ticket - lag
    if done >= 0:
        row = (done // n_tiles).to(tl.int64)
        cols = (done % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        scope("", "wait")
        # Acquire: once the row is merged (n_tiles + 1 arrivals), its max and sum are seen.
        seen = tl.atomic_add(counter_ptr + (1 + row) * COUNTER_STRIDE, 0, sem="acquire")
        while seen <= n_tiles:
            seen = tl.atomic_add(counter_ptr + (1 + row) * COUNTER_STRIDE, 0, sem="acquire")
        scope("wait", "store")
        row_max = tl.load(max_ptr + row * n_tiles, volatile=True)
        row_sum = tl.load(sum_ptr + row * n_tiles, volatile=True)
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask)
        y = tl.exp(x.to(tl.float32) - row_max) * (1.0 / row_sum)
        tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
        scope("store", "")


class Plan(NamedTuple):
    """How a long-row shape launches: the kernel, tiles of block_n columns, warps and
    grid; the tiles a row is cut into (n_tiles; tiles, n_tiles padded to a power of two,
    at most MERGE_TILES, and held, to at least a line of slots), the lag in tickets
    between reducing a tile and writing it (0: held), maxnreg (0: the compiler's choice)
    and whether held tiles are taken by ticket (else by program id). Whole rows launch
    softmax.py's kernel, a row a program: block_n its padded columns, one tile a row."""

    kernel: triton.JITFunction
    block_n: int
    num_warps: int
    grid: tuple[int]
    n_tiles: int
    tiles: int
    lag: int = 0
    maxnreg: int = 0
    ticket: bool = True


def aligned(rows: torch.Tensor) -> bool:
    """Whether rows (2-D) load 16 bytes at a time: a column stride of 1, a row stride and
    length of multiples of 16 elements (what Triton specialises integers on), data on 16.
    A traced (fake) tensor has no data: its storage is taken as aligned, as torch's are."""
    row_stride, col_stride = rows.stride()
    multiples = row_stride % 16 == 0 and rows.shape[1] % 16 == 0
    return col_stride == 1 and multiples and misalignment(rows) == 0


def misalignment(rows: torch.Tensor) -> int:
    """How many bytes past a multiple of 16 rows' data starts."""
    try:
        return rows.data_ptr() % 16
    except RuntimeError:  # no data while torch.compile traces
        return rows.storage_offset() * rows.element_size() % 16


def peel(rows: torch.Tensor) -> int | None:
    """Where rows (2-D) that are not aligned() still load 16 bytes at a time, peeled: the
    elements between the 16 bytes their first row starts in and that start. None where
    they cannot: a column stride other than 1, or those 16 bytes begin before the storage."""
    lead = misalignment(rows) // rows.element_size()
    if rows.stride(1) != 1 or lead > rows.storage_offset():
        return None
    return lead


def usable_sms(n_sms: int, env: dict = os.environ) -> int:
    """Of a device's n_sms SMs, how many this process may hold programs on at once. Under
    MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of them (a share set only by the MPS daemon is
    not seen here). On AMD, a CU mask (HSA_CU_MASK, ROC_GLOBAL_CU_MASK) hides how many a
    queue gets: 0, so that no row is held."""
    if AMD and (env.get("HSA_CU_MASK") or env.get("ROC_GLOBAL_CU_MASK")):
        return 0
    share = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    if share is None:
        return n_sms
    try:
        percent = float(share)
    except ValueError:  # a share MPS would refuse: nothing is assumed held
        return 0
    return int(n_sms * min(max(percent, 0.0), 100.0) // 100)


@functools.cache
def plan(
    n_rows: int,
    n_cols: int,
    itemsize: int,
    vectors: bool,
    device: int | None,
) -> Plan:
    """The Plan for rows of n_cols itemsize-byte elements that load 16 bytes at a time
    (vectors: aligned(), or peeled where peel() finds a lead) or not, on a GPU
    (device: its index) or in the interpreter (device: None). Float32 rows of up to
    WHOLE_ROW_COLS columns are held whole, a row a program, where there are
    WHOLE_ROWS_PER_SM for each SM. Longer rows are held where the SMs this process may use
    hold every tile of a row at once (one program per SM always fits), taken by program id
    where they hold every tile of every row; the interpreter runs one program at a time,
    so it never holds a tile (a whole row waits for nothing). That assumes no other kernel
    fills the SMs meanwhile: held launches on several streams can wait on each other's
    programs. Held rows take few_rows.py's launches where FEW_ROWS's comment says."""
    n_sms, warp_size, pdl = 0, 32, False
    if device is not None:
        props = torch.cuda.get_device_properties(device)
        n_sms, warp_size = usable_sms(props.multi_processor_count), props.warp_size
        pdl = few_rows.has_pdl(props)
    if itemsize == 4 and n_cols <= WHOLE_ROW_COLS and n_rows >= WHOLE_ROWS_PER_SM * n_sms:
        block_n = triton.next_power_of_2(n_cols)
        return Plan(fused.softmax_kernel, block_n, WHOLE_ROW_WARPS, (n_rows,), 1, 1, ticket=False)
    element = itemsize if vectors else 4  # bytes a register holds
    tile = TILE_BYTES // element
    if element == 2 and n_rows * triton.cdiv(n_cols, SMALL_TILE_BYTES // 2) <= n_sms:
        tile = SMALL_TILE_BYTES // 2
    num_warps = max(1, tile // (TILE_PER_THREAD * warp_size))
    n_tiles = triton.cdiv(n_cols, tile)
    tiles = triton.next_power_of_2(min(n_tiles, MERGE_TILES))
    if n_tiles <= min(n_sms, MERGE_TILES):
        grid = (n_rows * n_tiles,)
        few = n_rows <= FEW_ROWS and n_rows * n_cols <= FEW_ELEMENTS
        if pdl and few and vectors:
            return Plan(few_rows.softmax_partials_kernel, tile, num_warps, grid, n_tiles, tiles)
        regs = HALF_TILE_REGS if vectors and itemsize == 2 and not AMD else 0
        ticket = n_rows * n_tiles > n_sms
        tiles = max(tiles, LINE_SLOTS.value)
        return Plan(
            softmax_long_rows_kernel, tile, num_warps, grid, n_tiles, tiles, 0, regs, ticket
        )
    lag = n_tiles + LAG_PER_SM * max(1, n_sms)
    grid = (n_rows * n_tiles + lag,)
    return Plan(softmax_long_rows_lagged_kernel, tile, num_warps, grid, n_tiles, tiles, lag)


def launch(rows: torch.Tensor, out: torch.Tensor, wrap: Callable | None = None) -> None:
    """The long-row kernel over rows (2-D) into out (contiguous, of rows' size), through
    wrap(kernel) where given: torch.library.wrap_triton in softmax_op.py's op."""
    n_rows, n_cols = map(int, rows.shape)  # ints, also where torch.compile traces SymInts
    is_aligned = aligned(rows)
    lead = None if is_aligned else peel(rows)
    vectors = is_aligned or lead is not None
    p = plan(n_rows, n_cols, rows.element_size(), vectors, rows.device.index)
    if p.kernel is few_rows.softmax_partials_kernel:  # where plan() took it, the GPU has PDL
        few_rows.launch(rows, out, p.block_n, p.num_warps, True, wrap)
        return
    kernel = p.kernel if wrap is None else wrap(p.kernel)
    args = dict(
        out_ptr=out,
        in_ptr=rows,
        n_rows=n_rows,
        n_cols=n_cols,
        in_row_stride=rows.stride(0),
        in_col_stride=rows.stride(1),
        BLOCK_N=p.block_n,
        num_warps=p.num_warps,
    )
    if p.kernel is fused.softmax_kernel:
        kernel[p.grid](**args, BLOCK_M=1)
        return
    args.update(n_tiles=p.n_tiles, TILES=p.tiles)
    if p.lag:
        # Each tile's max and sum; the ticket counter and each row's arrivals, 128 bytes
        # apart (faster on the H200), zeroed on every call, CUDA-graph replays included.
        partial_max = torch.empty((n_rows, p.n_tiles), dtype=torch.float32, device=rows.device)
        counters = torch.zeros((n_rows + 1, COUNTER_STRIDE), dtype=torch.int32, device=rows.device)
        kernel[p.grid](
            **args,
            max_ptr=partial_max,
            sum_ptr=torch.empty_like(partial_max),
            counter_ptr=counters,
            lag=p.lag,
        )
        return
    peeled = lead is not None
    if peeled:  # from the 16 bytes the first row starts in, on 16 as Triton sees
        rows = rows.as_strided(rows.shape, rows.stride(), rows.storage_offset() - lead)
        args["in_ptr"] = rows
    if p.maxnreg and wrap is None:  # an NVIDIA option, which wrap_triton does not pass on
        args["maxnreg"] = p.maxnreg
    # The ticket, then each row's slots, zeroed (empty) on every call, CUDA-graph
    # replays included.
    slots = torch.zeros(LINE_SLOTS.value + n_rows * p.tiles, dtype=torch.int64, device=rows.device)
    kernel[p.grid](
        **args,
        slot_ptr=slots,
        lead=lead or 0,
        out_row_shift=n_cols - rows.stride(0),
        VECTORS=vectors,
        PEELED=peeled,
        TICKET=p.ticket,
    )


def softmax(x: torch.Tensor) -> torch.Tensor:
    """softmax.softmax() for rows of any length: the same checks, and a new contiguous
    tensor of x's shape and dtype."""
    fused.check(x, max_cols=2**31 - 1)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel():
        with fused.launching(x):
            launch(fused.as_rows(x), out)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return fused.main(["--rows", "8", "--cols", "131072", *argv], softmax, max_cols=2**31 - 1)


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

"""Fused row softmax in Triton, checked against torch.softmax.

    python softmax.py --rows 4096 --cols 1024 --iters 20

Each row is read from memory once and written once: the row max, the exponentials,
their sum and the division all happen on-chip. Rows too long for one program are
split into tiles: a first kernel reduces each tile to its max and its sum of
exponentials, a second merges those partials and writes the row (two reads, one write).

With no GPU visible (or TRITON_INTERPRET=1) the same kernels run in Triton's CPU
interpreter. Exit status: 0 PASS, 1 FAIL, 2 bad arguments or an input too large.
"""

import argparse
import functools
import os
import sys

import torch

# The interpreter is picked when the @triton.jit functions below are defined, so the
# choice has to be made before Triton is imported.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402
from triton.runtime import driver  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
_HIP = torch.version.hip is not None

# Max absolute error allowed against torch.softmax (computed in float32). float32 cannot
# be exact: our reductions add in a different order. The half types are compared after
# rounding our float32 result to 8 (bfloat16) or 11 (float16) significant bits; outputs
# lie in [0, 1], where one unit in the last place is at most 2**-8 or 2**-11.
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 2**-8, torch.float16: 2**-11}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Rows up to this many columns are held whole in one program's registers. Longer rows
# take the two-kernel tiled path; the tests lower both numbers to exercise it on CPU.
MAX_FUSED_COLS = 16384
TILE_COLS = 4096
# Short rows are grouped so that one program's tile holds at least this many elements,
# at about ELEMS_PER_THREAD a thread. Both were swept on the H200 (1024 beat 2048 by 3 to
# 8% at 512 and 1024 columns): fewer elements per program leave loads too few to hide
# memory latency, more add warps that only wait. The tiled path did best at 32 a thread.
TILE_ELEMS = 1024
ELEMS_PER_THREAD = 16


def _launch_metadata(grid, metadata, args):
    """What Proton's `-k triton` hook records for a launch: a readable name and the
    bytes this kernel must move (it reads its input once, and writes once if it stores)."""
    x = args["in_ptr"]
    rows, cols = args["n_rows"], args["n_cols"]
    dtype = str(x.dtype).removeprefix("torch.")
    writes = "out_ptr" in args
    return {
        "name": f"{metadata.name} [{rows}x{cols} {dtype}]",
        "bytes": rows * cols * x.element_size() * (2 if writes else 1),
    }


@triton.jit(launch_metadata=_launch_metadata)
def softmax_kernel(
    out_ptr, in_ptr, n_rows, n_cols, in_row_stride, in_col_stride, out_row_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # One program holds BLOCK_M whole rows: a [BLOCK_M, BLOCK_N] tile, padded with -inf
    # past the last column so padding adds exp(-inf) = 0 to the sum.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows = rows.to(tl.int64)  # row offsets of large inputs pass 2**31 elements
    x = tl.load(
        in_ptr + rows[:, None] * in_row_stride + cols[None, :] * in_col_stride,
        mask=mask,
        other=-float("inf"),
    ).to(tl.float32)
    # Subtracting the row max keeps exp() at or below 1: no overflow for large inputs.
    num = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = num / tl.sum(num, axis=1)[:, None]
    out = out_ptr + rows[:, None] * out_row_stride + cols[None, :]
    tl.store(out, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(launch_metadata=_launch_metadata)
def softmax_partials_kernel(
    max_ptr, sum_ptr, in_ptr, n_rows, n_cols, in_row_stride, in_col_stride, n_tiles,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    # Pass 1 of a long row: each program reduces one tile to its max m and to
    # sum(exp(x - m)). Programs are (row, tile), so every tile of every row runs at once.
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(
        in_ptr + row * in_row_stride + cols * in_col_stride,
        mask=cols < n_cols,
        other=-float("inf"),
    ).to(tl.float32)
    m = tl.max(x, axis=0)
    # A tile of nothing but -inf has m = -inf and exp(-inf - -inf) = NaN; its true share
    # of the row's sum is 0.
    s = tl.where(m == -float("inf"), 0.0, tl.sum(tl.exp(x - m), axis=0))
    tl.store(max_ptr + row * n_tiles + tile, m)
    tl.store(sum_ptr + row * n_tiles + tile, s)


@triton.jit(launch_metadata=_launch_metadata)
def softmax_normalize_kernel(
    out_ptr, in_ptr, max_ptr, sum_ptr, n_rows, n_cols, in_row_stride, in_col_stride,
    out_row_stride, n_tiles,
    BLOCK_N: tl.constexpr, TILES: tl.constexpr,
):  # fmt: skip
    # Pass 2: merge the row's partials into its max M and sum S = sum(s_t * exp(m_t - M)),
    # then write exp(x - M) / S for this program's tile. Programs run in the reverse order
    # of pass 1, so the first ones re-read tiles that pass 1 touched last, still in L2.
    row = (n_rows - 1 - tl.program_id(0)).to(tl.int64)
    tile = n_tiles - 1 - tl.program_id(1)
    t = tl.arange(0, TILES)
    m_t = tl.load(max_ptr + row * n_tiles + t, mask=t < n_tiles, other=-float("inf"))
    s_t = tl.load(sum_ptr + row * n_tiles + t, mask=t < n_tiles, other=0.0)
    m = tl.max(m_t, axis=0)
    s = tl.sum(s_t * tl.exp(m_t - m), axis=0)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask)
    y = tl.exp(x.to(tl.float32) - m) / s
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def launch_config(n_rows, n_cols, n_sms, warp_size):
    """Tile shape and warps for a shape on a device with n_sms SMs (CUs on AMD).

    Returns (BLOCK_M, BLOCK_N, num_warps); BLOCK_M == 0 selects the tiled two-kernel path.
    """
    if n_cols > MAX_FUSED_COLS:
        return 0, TILE_COLS, max(1, TILE_COLS // (2 * ELEMS_PER_THREAD * warp_size))
    block_n = triton.next_power_of_2(n_cols)
    # Short rows share a program, so that each program still loads a full tile; but
    # keep at least two programs per SM, or part of the GPU sits idle.
    most = max(1, n_rows // (2 * n_sms))
    block_m = max(1, min(TILE_ELEMS // block_n, 1 << (most.bit_length() - 1)))
    num_warps = block_m * block_n // (ELEMS_PER_THREAD * warp_size)
    return block_m, block_n, max(1, min(16, num_warps))


@functools.lru_cache(maxsize=1024)
def _plan(n_rows, n_cols, device):
    """launch_config for a shape on a device index, with the grid and, for the tiled
    path, the tile count and the power of two above it:
    (BLOCK_M, BLOCK_N, num_warps, grid, n_tiles, TILES). Worked out once per shape:
    on every call it cost microseconds of host time (triton.cdiv alone is a
    ConstexprFunction in Triton 3.9)."""
    if INTERPRET:  # no SMs: one program per 'SM' keeps its program count (and time) low
        n_sms, warp_size = 1, 32
    else:
        props = torch.cuda.get_device_properties(device)
        n_sms, warp_size = props.multi_processor_count, props.warp_size
    block_m, block_n, num_warps = launch_config(n_rows, n_cols, n_sms, warp_size)
    if block_m:
        return block_m, block_n, num_warps, (triton.cdiv(n_rows, block_m), 1, 1), 0, 0
    n_tiles = triton.cdiv(n_cols, block_n)
    return 0, block_n, num_warps, (n_rows, n_tiles, 1), n_tiles, triton.next_power_of_2(n_tiles)


# Launching through Triton, `kernel[grid](...)`, binds and specialises every argument
# and builds a cache key on each call: about 16 us of host time on the H200, for a
# kernel that runs 6 us at the default shape, so back-to-back calls left the GPU idle
# most of the time. Instead, the first call for a key has Triton compile (or find in
# its cache) the kernel for those arguments, and every call does only what the last
# step of Triton's JITFunction.run does: call that kernel's launcher, passing Triton's
# launch hooks (Proton's `-k triton` among them) as Triton passes them.
_kernels = {}


def _key(x, device, strides, plan):
    """What the compiled kernels of a softmax(x) call depend on, or finer; the device
    index first.

    Every launch argument follows from x's device, dtype, shape and strides and from
    the plan (out and the partials are new, contiguous allocations). Triton further
    specialises pointers on 16-byte alignment and, on AMD, on a storage under 2 GiB
    (buffer loads); and compiles in the global options that JITFunction.run reads on
    every launch (debugging, Proton's instrumentation mode, 3.9's float sanitizer).
    """
    return (
        device,
        x.dtype,
        *x.shape,
        *strides,
        plan,
        x.data_ptr() % 16 == 0,
        _HIP and x.untyped_storage().nbytes() < 2**31,
        knobs.runtime.debug,
        knobs.compilation.instrumentation_mode,
        getattr(knobs.compilation, "fpsan_homomorphic_casts", None),
    )


def _launch(kernel, key, grid, num_warps, *args):
    """kernel[grid](*args, num_warps=num_warps): every parameter positionally, the
    constexprs last, as the launcher takes them."""
    if INTERPRET:
        kernel[grid](*args, num_warps=num_warps)
        return
    compiled = _kernels.get((kernel, key))
    if compiled is None:
        compiled = _kernels[kernel, key] = kernel.warmup(*args, grid=grid, num_warps=num_warps)
    stream = driver.active.get_current_stream(key[0])
    enter, exit = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    if _hooked(enter) or _hooked(exit):
        metadata = compiled.launch_metadata(grid, stream, *args)
    else:  # nothing would read the metadata: skip building it, and the empty calls
        metadata = enter = exit = None
    compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, metadata, enter, exit,
                 *args)  # fmt: skip


def _hooked(hook):
    """Whether a launch hook would call anything: Triton 3.5+ keeps a chain of them."""
    return hook is not None and getattr(hook, "calls", True)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor of any strides.

    Returns a new contiguous tensor of x's shape and dtype; x is not modified.
    float32, float16 and bfloat16 inputs; arithmetic is in float32.
    """
    if x.ndim != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got {x.ndim}-D")
    if x.dtype not in TOLERANCE:
        raise ValueError(f"softmax supports float32, float16 and bfloat16, not {x.dtype}")
    n_rows, n_cols = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if not n_rows or not n_cols:
        return out
    strides = in_row_stride, in_col_stride = x.stride()
    # Column offsets are 32-bit; a strided view whose last column lies past 2**31
    # elements is copied first.
    if (n_cols - 1) * in_col_stride >= 2**31:
        x = x.contiguous()
        strides = in_row_stride, in_col_stride = x.stride()
    # Triton launches on the current device; torch on the tensor's, and so do we.
    device = x.get_device()
    if not INTERPRET and device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return softmax(x)
    block_m, block_n, num_warps, grid, n_tiles, tiles = plan = _plan(n_rows, n_cols, device)
    key = _key(x, device, strides, plan)
    if block_m:
        _launch(
            softmax_kernel, key, grid, num_warps,
            out, x, n_rows, n_cols, in_row_stride, in_col_stride, n_cols, block_m, block_n,
        )  # fmt: skip
        return out
    partial_max = torch.empty((n_rows, n_tiles), dtype=torch.float32, device=x.device)
    partial_sum = torch.empty_like(partial_max)
    _launch(
        softmax_partials_kernel, key, grid, num_warps,
        partial_max, partial_sum, x, n_rows, n_cols, in_row_stride, in_col_stride, n_tiles,
        block_n,
    )  # fmt: skip
    _launch(
        softmax_normalize_kernel, key, grid, num_warps,
        out, x, partial_max, partial_sum, n_rows, n_cols, in_row_stride, in_col_stride,
        n_cols, n_tiles, block_n, tiles,
    )  # fmt: skip
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line and exit 2, instead of argparse's usage block.
        print(f"softmax: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _count(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _free_bytes():
    if DEVICE == "cuda":
        return torch.cuda.mem_get_info()[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=_count, default=4096, help="rows (default 4096)")
    parser.add_argument("--cols", type=_count, default=1024, help="columns (default 1024)")
    parser.add_argument(
        "--iters", type=_count, default=20, help="launches after the checked one (default 20)"
    )
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    args = parser.parse_args(argv)
    dtype = DTYPES[args.dtype]

    # Input, output and the float32 reference with its temporaries, refused up front
    # rather than failing halfway with an out-of-memory traceback.
    need = args.rows * args.cols * (2 * dtype.itemsize + 3 * 4)
    free = _free_bytes()
    if need > free:
        print(
            f"softmax: error: {args.rows} x {args.cols} {args.dtype} needs about "
            f"{need / 2**30:.1f} GiB, more than the {free / 2**30:.1f} GiB free on {DEVICE}",
            file=sys.stderr,
        )
        return 2

    if INTERPRET:
        # No profiler sees interpreted launches and their timing means nothing, so the
        # checked launch is the only one.
        print("softmax: device=cpu (Triton interpreter: one launch, --iters not run)")
    else:
        print(f"softmax: device={torch.cuda.get_device_name()}")
    print(f"softmax: rows={args.rows} cols={args.cols} iters={args.iters}")

    torch.manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, device=DEVICE).to(dtype)
    y = softmax(x)
    ref = torch.softmax(x.float(), dim=1)
    err = (y.float() - ref).abs().max().item()
    print(f"softmax: max_abs_err={err:.3e}")
    # Written so that NaN fails: every comparison with NaN is False.
    if not (err <= TOLERANCE[dtype]):
        print("softmax: FAIL result differs from torch.softmax", file=sys.stderr)
        return 1

    if not INTERPRET:
        for _ in range(args.iters):
            softmax(x)
        torch.cuda.synchronize()
    print("softmax: PASS")
    return 0


if __name__ == "__main__":
    # Success returns normally: Triton 3.6's Proton CLI writes no profile after any
    # SystemExit, even SystemExit(0).
    status = main()
    if status:
        raise SystemExit(status)

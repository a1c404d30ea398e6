"""Fused row softmax in Triton, checked against torch.softmax.

    python softmax.py --rows 4096 --cols 1024 --iters 20

Each row is read from memory once and written once: one program holds whole rows, and
the max, exponentials, sum and division happen on-chip, as in Triton's fused-softmax
tutorial. Rows too long for one program are split across several (long_rows.py).

With no GPU visible the kernels run in Triton's CPU interpreter. Under a launcher such
as torchrun, each process uses the GPU its LOCAL_RANK names.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments or an input too large.
"""

import argparse
import functools
import os
import sys
import threading

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
HIP = torch.version.hip is not None

# Max absolute error allowed against torch.softmax (computed in float32). float32 cannot
# be exact: our reductions add in a different order. The half types are compared after
# rounding our float32 result to 8 (bfloat16) or 11 (float16) significant bits; outputs
# lie in [0, 1], where one unit in the last place is at most 2**-8 or 2**-11.
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 2**-8, torch.float16: 2**-11}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Rows up to MAX_FUSED_COLS columns are held whole by one program. Short rows are grouped
# so that a program holds at least TILE_ELEMS elements, ELEMS_PER_THREAD a thread: swept on
# the H200, fewer leave too few loads in flight, more add warps or registers that only wait.
# The interpreter runs a program at a time with NumPy: few, large programs are fastest.
MAX_FUSED_COLS = 16384
TILE_ELEMS = 1024
ELEMS_PER_THREAD = 16
INTERPRETER_TILE_ELEMS = 2**16


def launch_metadata(grid, metadata, args):
    """What Proton's `-k triton` hook records for a launch: a readable name and the
    bytes a softmax must move (its input read once, its output written once)."""
    x, rows, cols = args["in_ptr"], args["n_rows"], args["n_cols"]
    name = f"{metadata.name} [{rows}x{cols} {str(x.dtype).removeprefix('torch.')}]"
    return {"name": name, "bytes": 2 * rows * cols * x.element_size()}


@triton.jit
def scope(SCOPES: tl.constexpr, ended: tl.constexpr, started: tl.constexpr):
    """Ends the scope `ended` and starts `started` ("" for none) where SCOPES: true only
    while Proton's instrumentation backend compiles the kernel (make intra), each scope
    then recording its start and end cycles. Otherwise this compiles to nothing."""
    if SCOPES:
        if ended != "":
            pl.exit_scope(ended)
        if started != "":
            pl.enter_scope(started)


@triton.jit(launch_metadata=launch_metadata)
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
    scope(SCOPES, "", "load")
    x = tl.load(in_ptr + rows[:, None] * in_row_stride + cols[None, :] * in_col_stride,
                mask=mask, other=-float("inf")).to(tl.float32)  # fmt: skip
    scope(SCOPES, "load", "max")
    # Subtracting the row max keeps exp() at or below 1: no overflow for large inputs.
    row_max = tl.max(x, axis=1)
    scope(SCOPES, "max", "exp_sum")
    num = tl.exp(x - row_max[:, None])
    den = tl.sum(num, axis=1)
    scope(SCOPES, "exp_sum", "store")
    out = out_ptr + rows[:, None] * out_row_stride + cols[None, :]
    tl.store(out, (num / den[:, None]).to(out_ptr.dtype.element_ty), mask=mask)
    scope(SCOPES, "store", "")


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


# `kernel[grid](...)` binds and specialises every argument and builds a cache key on each
# call: about twice torch.softmax's host time (bench/results). So, as Triton's fused-softmax
# tutorial does, a key's first call compiles with kernel.warmup(...) and later calls find
# the compiled kernel by key and launch it: compiled[grid](...).
_launches = {}  # _key(x) -> _compile(x)
MAX_LAUNCHES = 4096
_one_gpu = INTERPRET  # one GPU visible, so every tensor is on the current one: set by _compile
_interpreting = threading.Lock()  # the interpreter patches triton.language while it runs


def _key(x):
    """What x's compiled launch depends on: its device, dtype, shape and strides; what
    Triton specialises on (16-byte alignment, on AMD a storage under 2 GiB) and the modes
    a session may switch (debug, instrumentation, 3.9's float sanitizer)."""
    return (x.device, x.dtype, x.shape, x.stride(), x.data_ptr() % 16 == 0,
            HIP and x.untyped_storage().nbytes() < 2**31, knobs.runtime.debug,
            knobs.compilation.instrumentation_mode,
            getattr(knobs.compilation, "fpsan_homomorphic_casts", None))  # fmt: skip


def _hooked(kernel):
    """Whether a hook is set that kernel[grid] runs on each call and compiled[grid] would
    skip, or that can keep warmup() from returning a kernel (jit_cache_hook)."""
    inspection = getattr(knobs.runtime, "add_stages_inspection_hook", None)  # Triton 3.7+
    return bool(kernel.pre_run_hooks or knobs.runtime.jit_cache_hook or inspection)


def _one_at_a_time(run, *args):
    with _interpreting:
        run(*args)


def _compile(x):
    """(kernel, run, workspaces, fixed, copy) for x's key, softmax(x) being run(out, x,
    *workspaces(x), *fixed) on x.contiguous() if copy. Checks x (ValueError)."""
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_nested:
        raise ValueError(f"softmax expects a dense torch.Tensor, got {type(x).__name__}")
    if x.ndim != 2 or x.dtype not in TOLERANCE or x.device.type != DEVICE:
        raise ValueError(f"softmax expects a 2-D float32, float16 or bfloat16 tensor on "
                         f"{DEVICE}, got a {x.ndim}-D {x.dtype} one on {x.device}")  # fmt: skip
    n_rows, n_cols = x.shape
    if n_rows > 2**31 - 2**16 or n_cols >= 2**31:  # row and column indices are 32-bit
        raise ValueError(f"softmax: {n_rows} x {n_cols} is too large for 32-bit indices")
    global _one_gpu  # CUDA is up (x is on it): its device count is final
    _one_gpu = INTERPRET or torch.cuda.device_count() == 1
    if not n_rows or not n_cols:
        return softmax_kernel, lambda *args: None, lambda x: (), (), False
    if (n_cols - 1) * x.stride(1) >= 2**31:  # column offsets past 32 bits: launch on a copy
        return (*_compile(x.contiguous())[:4], True)
    if INTERPRET:  # one 'SM', and large programs: few programs to interpret
        n_sms, warp_size, tile_elems = 1, 32, INTERPRETER_TILE_ELEMS
    else:
        props = torch.cuda.get_device_properties(x.device)
        n_sms, warp_size, tile_elems = props.multi_processor_count, props.warp_size, TILE_ELEMS
    scopes = bool(knobs.compilation.instrumentation_mode) and not INTERPRET
    if config := launch_config(n_rows, n_cols, n_sms, warp_size, tile_elems):
        block_m, block_n, num_warps = config
        grid, options = (triton.cdiv(n_rows, block_m), 1, 1), {"num_warps": num_warps}
        kernel, workspaces = softmax_kernel, lambda x: ()
        fixed = (n_rows, n_cols, *x.stride(), n_cols, block_m, block_n, scopes)
    else:  # imported here: long rows are for those who need them
        import long_rows

        kernel, grid, options, workspaces, fixed = long_rows.launch(x, n_sms, warp_size, scopes)
    if INTERPRET or _hooked(kernel):
        run = functools.partial(kernel[grid], **options)
    else:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        run = kernel.warmup(out, x, *workspaces(x), *fixed, grid=grid, **options)[grid]
    if INTERPRET:
        run = functools.partial(_one_at_a_time, run)
    return kernel, run, workspaces, fixed, False


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor of any strides, on the GPU (in
    Triton's interpreter, on the CPU). No autograd: the result has no grad_fn.

    Returns a new contiguous tensor of x's shape and dtype; x is not modified.
    float32, float16 and bfloat16 inputs; arithmetic is in float32.
    """
    try:  # a negated view (z.conj().imag) to its values: the kernel reads what is stored
        x = x.resolve_neg()
        key = _key(x)
    except (AttributeError, RuntimeError):  # no strides or data: _compile says what x is
        key = None
    if key and not _one_gpu and x.is_cuda and x.get_device() != torch.cuda.current_device():
        with torch.cuda.device(x.device):  # where Triton compiles and launches, not torch
            return softmax(x)
    launch = _launches.get(key)
    if launch is None or _hooked(launch[0]):
        launch = _compile(x)
        if key and not _hooked(launch[0]):
            if len(_launches) >= MAX_LAUNCHES:  # many shapes: start again rather than grow
                _launches.clear()
            _launches[key] = launch
    _, run, workspaces, fixed, copy = launch
    if copy:
        x = x.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)  # whatever x's strides
    run(out, x, *workspaces(x), *fixed)  # the launch
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one short line and exit 2, not argparse's usage block
        message = message[:150] if message[:150].isprintable() else repr(message[:150])[1:-1]
        print(f"softmax: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4096, help="(default 4096)")
    parser.add_argument("--cols", type=int, default=1024, help="(default 1024)")
    parser.add_argument("--iters", type=int, default=20, help="launches after the checked one")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    args = parser.parse_args(argv)
    for name, high in ("rows", 2**31), ("cols", 2**31), ("iters", 2**31), ("seed", 2**63):
        low = 0 if name == "seed" else 1
        if not low <= (value := getattr(args, name)) < high:
            parser.error(f"argument --{name}: must be in [{low}, {high}), got {value}")
    dtype = DTYPES[args.dtype]
    ranks = [
        os.environ.get(name, d)
        for name, d in zip(("RANK", "LOCAL_RANK", "WORLD_SIZE"), "001", strict=True)
    ]
    if not all(r.isascii() and r.isdigit() and len(r) < 10 for r in ranks) or ranks[2] == "0":
        print("softmax: error: RANK, LOCAL_RANK, WORLD_SIZE must be whole numbers, WORLD_SIZE > 0",
              file=sys.stderr)  # fmt: skip
        return 2
    rank, local_rank, world = map(int, ranks)
    # Each line names the rank when there are several, so that their output can be told apart.
    tag = f"softmax[rank {rank}]" if world > 1 else "softmax"
    if not INTERPRET:  # several ranks may share a GPU
        torch.cuda.set_device(local_rank % torch.cuda.device_count())

    # The input, output and float32 reference, refused up front rather than failing
    # halfway with an out-of-memory traceback.
    need = args.rows * args.cols * (2 * dtype.itemsize + 3 * 4)
    if INTERPRET:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    else:
        free = torch.cuda.mem_get_info()[0]
    if need > free:
        print(f"{tag}: error: {args.rows} x {args.cols} {args.dtype} needs about "
              f"{need / 2**30:.1f} GiB, more than the {free / 2**30:.1f} GiB free on {DEVICE}",
              file=sys.stderr)  # fmt: skip
        return 2

    if INTERPRET:  # no profiler sees interpreted launches, and their timing means nothing
        print(f"{tag}: device=cpu (Triton interpreter: one launch, --iters not run)")
    else:
        print(f"{tag}: device={torch.cuda.get_device_name()}")
    print(f"{tag}: rows={args.rows} cols={args.cols} iters={args.iters}")
    torch.manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, device=DEVICE).to(dtype)
    err = (softmax(x).float() - torch.softmax(x.float(), dim=1)).abs().max().item()
    print(f"{tag}: max_abs_err={err:.3e}")
    if not err <= TOLERANCE[dtype]:  # written so that NaN fails
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

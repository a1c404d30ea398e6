"""Fused row softmax in Triton, checked against torch.softmax.

    python softmax.py --rows 4096 --cols 1024 --iters 20

softmax(x) normalises x's last dimension, each row read once and written once: one
program holds whole rows, max, exponentials, sum and division on chip, as in Triton's
fused-softmax tutorial. Longer rows are split across programs (long_rows.py); traced or
differentiated, softmax() is a PyTorch op (softmax_op.py). With no GPU visible the kernels
run in Triton's CPU interpreter; under torchrun each process takes its LOCAL_RANK's GPU.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments or an input too large.
"""

import argparse
import os
import sys

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
MAX_FUSED_COLS = 16384
TILE_ELEMS = 1024
ELEMS_PER_THREAD = 16
INTERPRETER_TILE_ELEMS = 2**16


def launch_metadata(grid, metadata, args):
    """What Proton's `-k triton` hook records: a name, and the bytes read once, written once."""
    x, rows, cols = args["in_ptr"], args["n_rows"], args["n_cols"]
    name = f"{metadata.name} [{rows}x{cols} {str(x.dtype).removeprefix('torch.')}]"
    return {"name": name, "bytes": 2 * rows * cols * x.element_size()}


@triton.jit
def scope(SCOPES: tl.constexpr, ended: tl.constexpr, started: tl.constexpr):
    """Ends scope `ended` and starts `started` ("" for none) where SCOPES, true only under
    Proton's instrumentation backend (make intra): each records its cycles. Else nothing."""
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


def device_config(device):
    """(n_sms, warp_size, tile_elems) of device: in the interpreter one 'SM', large tiles."""
    if INTERPRET:
        return 1, 32, INTERPRETER_TILE_ELEMS
    props = torch.cuda.get_device_properties(device)
    return props.multi_processor_count, props.warp_size, TILE_ELEMS


def plan(x, scopes):
    """(kernel, grid, options, workspaces, fixed) for x's rows (2-D): softmax is kernel[grid](
    out, x, *workspaces(x), *fixed, **options). Reads no data: traced (fake) tensors too."""
    n_rows, n_cols = map(int, x.shape)
    n_sms, warp_size, tile_elems = device_config(x.device)
    if config := launch_config(n_rows, n_cols, n_sms, warp_size, tile_elems):
        block_m, block_n, num_warps = config
        fixed = (n_rows, n_cols, *map(int, x.stride()), n_cols, block_m, block_n, scopes)
        grid = (triton.cdiv(n_rows, block_m), 1, 1)  # compiled[grid] reads all three
        return softmax_kernel, grid, {"num_warps": num_warps}, lambda x: (), fixed
    import long_rows  # here: long rows are for those who need them

    return long_rows.launch(x, n_sms, warp_size, scopes)


# Eager calls bypass the op and `kernel[grid](...)`, which binds and specialises every
# argument on each call: as in Triton's fused-softmax tutorial, a key's first call compiles
# with kernel.warmup(...), later ones find it by key and launch it: compiled[grid](...).
_launches = {}  # _key(x) -> softmax_op.compile_launch(x)
MAX_LAUNCHES = 4096
_one_gpu = INTERPRET  # one GPU visible, so every tensor is on the current one


def _key(x):
    """What x's compiled launch depends on: device, dtype, shape, strides; what Triton
    specialises on (16-byte alignment, on AMD a storage under 2 GiB); modes of a session."""
    return (x.device, x.dtype, x.shape, x.stride(), x.data_ptr() % 16 == 0,
            HIP and x.untyped_storage().nbytes() < 2**31, knobs.runtime.debug,
            knobs.compilation.instrumentation_mode,
            getattr(knobs.compilation, "fpsan_homomorphic_casts", None))  # fmt: skip


def _hooked(kernel):
    """Whether a hook is set that compiled[grid] would skip, or that keeps warmup() from
    returning a kernel (jit_cache_hook): kernel[grid] then launches, on every call."""
    inspection = getattr(knobs.runtime, "add_stages_inspection_hook", None)  # Triton 3.7+
    return bool(kernel.pre_run_hooks or knobs.runtime.jit_cache_hook or inspection)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a float32, float16 or bfloat16 tensor of any rank
    and strides, on the GPU (in Triton's interpreter, on the CPU), computed in float32.
    Returns a new contiguous tensor of x's shape and dtype. Traced by torch.compile or
    where x requires grad, it is softmax_op.py's op, with a backward."""
    global _one_gpu  # set once CUDA is up (a first key compiled): its device count is final
    traced = torch.compiler.is_compiling()
    if traced or getattr(x, "requires_grad", False) and torch.is_grad_enabled():
        return softmax_op.through_op(x)
    try:  # a negated view (z.conj().imag) to its values: the kernel reads what is stored
        x = x.resolve_neg()
        key = _key(x)
    except (AttributeError, RuntimeError):  # no strides or data: the check says what x is
        key = None
    if key and not _one_gpu and x.is_cuda and x.get_device() != torch.cuda.current_device():
        with torch.cuda.device(x.device):  # where Triton compiles and launches, not torch
            return softmax(x)
    launch = _launches.get(key)
    if launch is None or _hooked(launch[0]):
        launch = softmax_op.compile_launch(x)  # checks x (ValueError), compiles
        _one_gpu = INTERPRET or torch.cuda.device_count() == 1  # CUDA is up: final
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


# A key's first call and the op: last, as softmax_op.py imports this module.
import softmax_op  # noqa: E402


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one short line and exit 2, not argparse's usage block
        message = message[:150] if message[:150].isprintable() else repr(message[:150])[1:-1]
        print(f"softmax: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0])
    bounds = {"rows": (4096, 1, 2**31), "cols": (1024, 1, 2**31), "iters": (20, 1, 2**31),
              "seed": (0, 0, 2**63)}  # fmt: skip
    for name, (default, _, _) in bounds.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=f"(default {default})")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    args = parser.parse_args(argv)
    for name, (_, low, high) in bounds.items():
        if not low <= (value := getattr(args, name)) < high:
            parser.error(f"argument --{name}: must be in [{low}, {high}), got {value}")
    ranks = [os.environ.get(f"{n}RANK", "0") for n in ("", "LOCAL_")]
    ranks.append(os.environ.get("WORLD_SIZE", "1"))
    if not all(r.isascii() and r.isdigit() and len(r) < 10 for r in ranks) or ranks[2] == "0":
        parser.error("RANK, LOCAL_RANK, WORLD_SIZE must be whole numbers, WORLD_SIZE > 0")
    rank, local_rank, world = map(int, ranks)
    tag = f"softmax[rank {rank}]" if world > 1 else "softmax"  # several ranks told apart
    if not INTERPRET:  # several ranks may share a GPU
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    # Input, output and float32 reference refused up front, not halfway out of memory.
    dtype = DTYPES[args.dtype]
    need = args.rows * args.cols * (2 * dtype.itemsize + 3 * 4)
    page = os.sysconf("SC_PAGE_SIZE")
    free = page * os.sysconf("SC_AVPHYS_PAGES") if INTERPRET else torch.cuda.mem_get_info()[0]
    if need > free:
        print(f"{tag}: error: {args.rows} x {args.cols} {args.dtype} needs about "
              f"{need / 2**30:.1f} GiB, more than the {free / 2**30:.1f} GiB free on {DEVICE}",
              file=sys.stderr)  # fmt: skip
        return 2
    interpreted = "cpu (Triton interpreter: one launch, --iters not run)"  # none timed
    print(f"{tag}: device={interpreted if INTERPRET else torch.cuda.get_device_name()}")
    print(f"{tag}: rows={args.rows} cols={args.cols} iters={args.iters}")
    torch.manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, device=DEVICE).to(dtype)
    err = (softmax(x).float() - torch.softmax(x.float(), dim=1)).abs().max().item()
    print(f"{tag}: max_abs_err={err:.3e}")
    if not err <= TOLERANCE[dtype]:  # written so that NaN fails
        print(f"{tag}: FAIL result differs from torch.softmax", file=sys.stderr)
        return 1
    for _ in range(0 if INTERPRET else args.iters):
        softmax(x)
    if not INTERPRET:
        torch.cuda.synchronize()
    print(f"{tag}: PASS")
    return 0


if __name__ == "__main__":
    # Success returns normally: Triton 3.6's Proton CLI writes no profile after SystemExit(0).
    status = main()
    if status:
        raise SystemExit(status)

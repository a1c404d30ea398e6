"""Fused row softmax in Triton, checked against torch.softmax.

    python softmax.py --rows 4096 --cols 1024 --iters 20

softmax(x) normalises x's last dimension, each row read and written once: one program
holds whole rows, takes their max, exponentials, sum and quotient on chip, and launches as
Triton's fused-softmax tutorial (02) does. Rows of up to 16384 columns: long_rows.py splits
longer ones, softmax_op.py makes an op for autograd and torch.compile. With no GPU it runs
in Triton's interpreter; under torchrun each process takes its LOCAL_RANK's GPU.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments or an input too large.
"""

import argparse
import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

import torch

# Triton picks its interpreter when the @triton.jit functions below are defined, so the
# choice is made before Triton is imported.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.profiler.language import enter_scope, exit_scope  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"

# Max absolute error against torch.softmax in float32, which adds in another order; in a
# half type, one unit in the last place of outputs in [0, 1]: 2**-11 float16, 2**-8 bfloat16.
TOLERANCE = {torch.float32: 1e-6, torch.float16: 2**-11, torch.bfloat16: 2**-8}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# One program holds rows of up to MAX_FUSED_COLS columns, short rows grouped up to
# TILE_ELEMS elements, BYTES_PER_THREAD for each thread (16 half, 8 float32): swept on the
# H200 and the H100, fewer leave too few loads in flight, more add warps or registers.
MAX_FUSED_COLS = 16384
TILE_ELEMS = 1024
BYTES_PER_THREAD = 32
# The interpreter runs each program in Python: few large programs run fastest there.
INTERPRETER_TILE_ELEMS = 2**16
# Proton's scopes: nothing unless its instrumentation is on (make intra); not interpreted.
SCOPES = tl.constexpr(not INTERPRET)
_interpreting = threading.Lock()  # interpreted launches take turns: see launching()
_compiled: dict[tuple, tuple[Callable, tuple] | None] = {}  # by shape, dtype and GPU: compiled()


def launch_metadata(grid: tuple, metadata: object, args: dict) -> dict:
    """What Proton's launch hook (-k triton) records: a name with shape and dtype, and the
    bytes moved: input read once, output written once."""
    x, rows, cols = args["in_ptr"], args["n_rows"], args["n_cols"]
    name = f"{metadata.name} [{rows}x{cols} {str(x.dtype).removeprefix('torch.')}]"
    return {"name": name, "bytes": 2 * rows * cols * x.element_size()}


@triton.jit
def scope(ended: tl.constexpr, started: tl.constexpr):
    """Ends the scope `ended` and starts `started` ("" for none)."""
    if SCOPES:
        if ended != "":
            exit_scope(ended)  # by name: Inductor's copy of a kernel gets functions, not modules
        if started != "":
            enter_scope(started)


@triton.jit(launch_metadata=launch_metadata)
def softmax_kernel(
    out_ptr,
    in_ptr,
    n_rows,
    n_cols,
    in_row_stride,
    in_col_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # One program holds BLOCK_M whole rows: a [BLOCK_M, BLOCK_N] tile, padded with -inf
    # past the last column, so that the padding adds exp(-inf) = 0 to each sum.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows = rows.to(tl.int64)  # offsets of large inputs pass 2**31 elements
    scope("", "load")
    at = in_ptr + rows[:, None] * in_row_stride + cols[None, :] * in_col_stride
    x = tl.load(at, mask=mask, other=-float("inf")).to(tl.float32)
    scope("load", "max")
    # Subtracting the row's max keeps every exp() at or below 1: no overflow.
    row_max = tl.max(x, axis=1)
    scope("max", "exp_sum")
    num = tl.exp(x - row_max[:, None])
    den = tl.sum(num, axis=1)
    scope("exp_sum", "store")
    out = out_ptr + rows[:, None] * n_cols + cols[None, :]
    # Streamed (.cs: evicted first), as Liger's kernel stores, so that the output does
    # not push out of the L2 an input that fits it. Without it, an interleaved make ab
    # at 4096 x 1024 float32 on an H100 measured the kernel 1.165x slower (1.137-1.194):
    # bench/results/ab/nvidia-h100-streamed-store.json.
    y = (num / den[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(out, y, mask=mask, cache_modifier=".cs")
    scope("store", "")


class Plan(NamedTuple):
    """How rows of one shape launch: BLOCK_M rows of BLOCK_N columns per program."""

    block_m: int
    block_n: int
    num_warps: int
    grid: tuple[int]


@functools.cache
def plan(n_rows: int, n_cols: int, device: int | None, itemsize: int) -> Plan:
    """The Plan for rows of itemsize-byte columns on GPU `device`, or interpreted (None)."""
    if device is None:
        n_sms, warp_size, tile_elems = 1, 32, INTERPRETER_TILE_ELEMS
    else:
        props = torch.cuda.get_device_properties(device)
        n_sms, warp_size, tile_elems = props.multi_processor_count, props.warp_size, TILE_ELEMS
    block_n = triton.next_power_of_2(n_cols)
    # Short rows share a program, so that each program still loads a full tile; but at
    # least two programs for each SM (a CU on AMD), or part of the GPU sits idle.
    most = max(1, n_rows // (2 * n_sms))
    block_m = max(1, min(tile_elems // block_n, 1 << (most.bit_length() - 1)))
    per_thread = BYTES_PER_THREAD // itemsize
    num_warps = max(1, min(16, block_m * block_n // (per_thread * warp_size)))
    return Plan(block_m, block_n, num_warps, (triton.cdiv(n_rows, block_m),))


def check(x: torch.Tensor, max_cols: int = MAX_FUSED_COLS) -> None:
    """Raises ValueError unless x is a tensor softmax() takes."""
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_nested:
        raise ValueError(f"softmax expects a dense torch.Tensor, got {type(x).__name__}")
    if x.ndim < 1 or x.dtype not in TOLERANCE or x.device.type != DEVICE:
        raise ValueError(
            f"softmax expects a float32, float16 or bfloat16 tensor of 1-D or more on "
            f"{DEVICE}, got a {x.ndim}-D {x.dtype} one on {x.device}"
        )
    if x.shape[-1] > max_cols:
        raise ValueError(
            f"softmax: rows of {x.shape[-1]} columns are longer than one program holds "
            f"({max_cols}): long_rows.py takes them"
        )
    # A program's first row, program_id * BLOCK_M, and the BLOCK_M after it are 32-bit.
    if x.numel() // max(1, x.shape[-1]) > 2**31 - 2**16:
        raise ValueError(f"softmax: {tuple(x.shape)} has too many rows for 32-bit indices")


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """x's rows, 2-D: a view where x's strides allow one within 32-bit column offsets, else a
    contiguous copy; a negated view (z.conj().imag) as the values it shows: what is stored."""
    rows = x.resolve_neg().reshape(-1, x.shape[-1])  # a copy only where no view exists
    if (rows.shape[1] - 1) * rows.stride(1) >= 2**31:  # column offsets are 32-bit
        rows = rows.contiguous()
    return rows


def launch(rows: torch.Tensor, out: torch.Tensor, wrap: Callable | None = None) -> None:
    """softmax_kernel over rows (2-D) into out (contiguous), through wrap(kernel) if given."""
    n_rows, n_cols = map(int, rows.shape)  # ints, also where torch.compile traces SymInts
    p = plan(n_rows, n_cols, rows.device.index, rows.element_size())
    kernel = softmax_kernel if wrap is None else wrap(softmax_kernel)
    strides = rows.stride()
    kernel[p.grid](out, rows, n_rows, n_cols, *strides, p.block_m, p.block_n, num_warps=p.num_warps)


def launching(x: torch.Tensor) -> contextlib.AbstractContextManager:
    """Where x's kernels launch: on x's GPU; interpreted, one at a time (each patches tl)."""
    return _interpreting if INTERPRET else torch.cuda.device(x.device)


def compiled(x: torch.Tensor) -> tuple[Callable, tuple] | None:
    """softmax_kernel compiled once (warmup) for contiguous 16-byte aligned rows of x's shape
    and dtype on the current GPU: compiled[grid] and the arguments after out_ptr, in_ptr.
    None where softmax() refuses x, or where this Triton's compiled launch is not one known
    to take all the kernel's arguments in order, as the tutorial passes them (3.3 to 3.9)."""
    key = (x.shape, x.dtype, x.get_device())
    if key not in _compiled and x.numel():  # an empty x launches nothing
        _compiled[key] = None
        with contextlib.suppress(ValueError):  # where check(x) refuses x
            check(x)
            n_rows, n_cols = x.numel() // x.shape[-1], x.shape[-1]
            p = plan(n_rows, n_cols, key[2], x.element_size())
            args = (n_rows, n_cols, n_cols, 1, p.block_m, p.block_n)
            kernel = softmax_kernel.warmup(x, x, *args, num_warps=p.num_warps, grid=p.grid)
            if (3, 3) <= tuple(map(int, triton.__version__.split(".")[:2])) < (3, 10):
                _compiled[key] = kernel[(*p.grid, 1, 1)], args
    return _compiled.get(key)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a float32, float16 or bfloat16 tensor of any rank
    and strides, rows of up to MAX_FUSED_COLS, in float32: a new contiguous tensor like x."""
    # What a model passes, a contiguous tensor on the current GPU, launches as the tutorial
    # does: compiled once, no argument bound, as kernel[grid] binds each at each call.
    if (
        not INTERPRET  # which has no compiled kernel
        and type(x) is torch.Tensor  # no subclass
        and x.layout == torch.strided  # dense: a sparse tensor has no is_contiguous()
        and not x.is_nested
        and x.is_contiguous()  # its own rows, columns 1 apart
        and not x.is_neg()
        and x.data_ptr() % 16 == 0  # as aligned as the tensors it was compiled for
        and x.get_device() == torch.cuda.current_device()
        and (tutorial := compiled(x))
    ):
        run, args = tutorial
        out = torch.empty_like(x)
        run(out, x, *args)
        return out
    check(x)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel():
        with launching(x):
            launch(as_rows(x), out)
    return out


class _Parser(argparse.ArgumentParser):  # for the check: one launch, then the timed ones
    def error(self, message: str) -> None:  # one line and exit 2, not argparse's usage
        message = message[:150] if message[:150].isprintable() else repr(message[:150])[1:-1]
        print(f"softmax: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def free_bytes() -> int:
    """Memory free where the input goes: the host's in the interpreter, else the GPU's."""
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return host if INTERPRET else torch.cuda.mem_get_info()[0]


def too_large(rows: int, cols: int, dtype: torch.dtype, floats: int = 3) -> str | None:
    """Why rows x cols of dtype, `floats` float32 copies and 128 B a row do not fit, or None."""
    need, free = rows * (cols * (2 * dtype.itemsize + 4 * floats) + 128), free_bytes()
    name, more = str(dtype).removeprefix("torch."), f"more than the {free / 2**30:.1f} GiB"
    why = f"{rows} x {cols} {name} needs about {need / 2**30:.1f} GiB, {more} free on {DEVICE}"
    return None if need <= free else why


def arguments(argv: list[str] | None, max_cols: int) -> tuple[argparse.Namespace, list[int]]:
    """The check's arguments, and the launcher's rank, local rank and world size."""
    parser = _Parser(description=__doc__.split("\n\n")[0])
    bounds = {"rows": (4096, 1, 2**31), "cols": (1024, 1, 2**31), "iters": (20, 1, 2**31)}
    bounds["seed"] = (0, 0, 2**63)
    for name, (default, _, _) in bounds.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=f"(default {default})")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    args = parser.parse_args(argv)
    for name, (_, low, high) in bounds.items():
        if not low <= (value := getattr(args, name)) < high:
            parser.error(f"argument --{name}: must be in [{low}, {high}), got {value}")
    if (cols := args.cols) > max_cols:
        parser.error(f"rows of more than {max_cols} columns: python long_rows.py --cols {cols}")
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE")  # a launcher's; with none, 0, 0 and 1
    ranks = [os.environ.get(name, "1" if name == "WORLD_SIZE" else "0") for name in names]
    if not all(r.isascii() and r.isdigit() and len(r) < 10 for r in ranks) or ranks[2] == "0":
        parser.error("RANK, LOCAL_RANK, WORLD_SIZE must be whole numbers, WORLD_SIZE > 0")
    return args, [int(r) for r in ranks]


def main(argv: list | None = None, run: Callable = softmax, max_cols: int = MAX_FUSED_COLS) -> int:
    """The check of run (softmax, or a caller's) on rows of up to max_cols columns."""
    args, (rank, local_rank, world) = arguments(argv, max_cols)
    tag = f"softmax[rank {rank}]" if world > 1 else "softmax"  # several ranks told apart
    if not INTERPRET:  # several ranks may share a GPU
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dtype = DTYPES[args.dtype]
    if why := too_large(args.rows, args.cols, dtype):
        print(f"{tag}: error: {why}", file=sys.stderr)
        return 2
    interpreted = "cpu (Triton interpreter: one launch, --iters not run)"
    print(f"{tag}: device={interpreted if INTERPRET else torch.cuda.get_device_name()}")
    print(f"{tag}: rows={args.rows} cols={args.cols} iters={args.iters}")
    torch.manual_seed(args.seed)
    x = torch.randn(args.rows, args.cols, device=DEVICE).to(dtype)
    err = (run(x).float() - torch.softmax(x.float(), dim=1)).abs().max().item()
    print(f"{tag}: max_abs_err={err:.3e}")
    if not err <= TOLERANCE[dtype]:  # written so that NaN fails
        print(f"{tag}: FAIL result differs from torch.softmax", file=sys.stderr)
        return 1
    for _ in range(0 if INTERPRET else args.iters):  # interpreted launches time nothing
        run(x)
    if not INTERPRET:
        torch.cuda.synchronize()
    print(f"{tag}: PASS")
    return 0


if __name__ == "__main__":
    # Success returns normally: Triton 3.6's Proton CLI writes no profile after SystemExit.
    status = main()
    if status:
        raise SystemExit(status)

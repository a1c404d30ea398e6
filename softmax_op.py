"""How softmax.py's softmax() launches beyond a cached key: a key's first eager call
compiled, and softmax as a PyTorch op that torch.compile traces and autograd differentiates.

    python softmax_op.py [--rows R] [--cols C] [--dtype D]   (its gradient against torch's)

The op is registered with torch.library.triton_op, its kernels launched through
wrap_triton, so that a compiled graph holds them (no graph break), and its backward with
register_autograd: dx = y * (dy - sum(dy * y)) over the last dimension, the softmax's
Jacobian diag(y) - y y^T applied to dy. Rows one program holds (softmax.py's
MAX_FUSED_COLS) take a fused Triton kernel, which reads y and dy once and writes dx once;
longer rows take torch's own softmax backward. Eager calls of softmax() go through the op
only where autograd needs it: the dispatcher and Triton's plain launch cost the host more.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments.
"""

import functools
import sys
import threading

# Run as a script, this module is also the softmax_op that softmax.py imports, so that its
# ops are registered once (not where a runner executes it in a namespace of its own, as
# Proton's CLI does). softmax.py first: it picks Triton's interpreter where there is no GPU.
_this = sys.modules.get(__name__, sys)
if vars(_this) is globals():
    sys.modules.setdefault("softmax_op", _this)
import softmax  # noqa: E402

# isort: split
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from torch.library import triton_op, wrap_triton  # noqa: E402

_interpreting = threading.Lock()  # the interpreter patches triton.language while it runs


def check(x):
    """Raises ValueError unless x is a tensor softmax() takes."""
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_nested:
        raise ValueError(f"softmax expects a dense torch.Tensor, got {type(x).__name__}")
    if x.ndim < 1 or x.dtype not in softmax.TOLERANCE or x.device.type != softmax.DEVICE:
        raise ValueError(f"softmax expects a float32, float16 or bfloat16 tensor of 1-D or "
                         f"more on {softmax.DEVICE}, got a {x.ndim}-D {x.dtype} one on "
                         f"{x.device}")  # fmt: skip
    if x.numel() // max(1, x.shape[-1]) > 2**31 - 2**16 or x.shape[-1] >= 2**31:
        raise ValueError(f"softmax: {tuple(x.shape)} is too large for 32-bit indices")


def _one_at_a_time(run, *args):
    with _interpreting:
        run(*args)


def compile_launch(x):
    """(kernel, run, workspaces, fixed, copy) for x's key: softmax(x) is run(out, x,
    *workspaces(x), *fixed), on x.contiguous() if copy. Checks x (ValueError)."""
    check(x)
    if not x.numel():
        return softmax.softmax_kernel, lambda *args: None, lambda x: (), (), False
    try:  # the kernels read x's rows through a 2-D view of its data
        rows = x.view(-1, x.shape[-1])
    except RuntimeError:  # the leading dimensions have no one row stride
        rows = None
    if rows is None or (rows.shape[1] - 1) * rows.stride(1) >= 2**31:  # or 32-bit column
        return (*compile_launch(x.contiguous())[:4], True)  # offsets overflow: on a copy
    scopes = bool(softmax.knobs.compilation.instrumentation_mode) and not softmax.INTERPRET
    kernel, grid, options, workspaces, fixed = softmax.plan(rows, scopes)
    if softmax.INTERPRET or softmax._hooked(kernel):
        run = functools.partial(kernel[grid], **options)
    else:
        out = torch.empty_like(rows)
        run = kernel.warmup(out, rows, *workspaces(rows), *fixed, grid=grid, **options)[grid]
    if softmax.INTERPRET:
        run = functools.partial(_one_at_a_time, run)
    return kernel, run, workspaces, fixed, False


def _rows(t):
    """t as rows of its last dimension, a view where the strides allow; a copy where its
    column offsets would pass 32 bits."""
    rows = t.reshape(-1, t.shape[-1])
    return rows.contiguous() if (rows.shape[1] - 1) * rows.stride(1) >= 2**31 else rows


@triton_op("triton_softmax::softmax", mutates_args=())
def softmax_op(x: torch.Tensor) -> torch.Tensor:
    """softmax.py's kernels launched through wrap_triton, so that a traced graph holds
    them; without maxnreg, a launch option wrap_triton does not pass on."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel():
        rows = _rows(x)
        kernel, grid, options, workspaces, fixed = softmax.plan(rows, False)
        options.pop("maxnreg", None)
        wrap_triton(kernel)[grid](out, rows, *workspaces(rows), *fixed, **options)
    return out


def through_op(x):
    """softmax(x) through the op: what torch.compile traces and autograd differentiates."""
    check(x)
    return softmax_op(x.resolve_neg())


@triton.jit
def softmax_backward_kernel(
    dx_ptr, y_ptr, dy_ptr, n_rows, n_cols, y_row_stride, y_col_stride, dy_row_stride,
    dy_col_stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # As the forward: one program holds BLOCK_M whole rows of y and dy, padded with 0.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows = rows.to(tl.int64)
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :] * y_col_stride,
                mask=mask, other=0.0).to(tl.float32)  # fmt: skip
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :] * dy_col_stride,
                 mask=mask, other=0.0).to(tl.float32)  # fmt: skip
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows[:, None] * n_cols + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


@triton_op("triton_softmax::softmax_backward", mutates_args=())
def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx for the gradient dy of y = softmax(x)."""
    if y.shape[-1] > softmax.MAX_FUSED_COLS:  # rows no program holds: torch's backward
        return torch._softmax_backward_data(dy, y, -1, y.dtype)
    dx = torch.empty_like(y, memory_format=torch.contiguous_format)
    if dx.numel():
        y_rows, dy_rows = _rows(y), _rows(dy)
        n_rows, n_cols = map(int, y_rows.shape)
        n_sms, warp_size, tile_elems = softmax.device_config(y.device)
        block_m, block_n, num_warps = softmax.launch_config(
            n_rows, n_cols, n_sms, warp_size, tile_elems
        )
        wrap_triton(softmax_backward_kernel)[(triton.cdiv(n_rows, block_m),)](
            dx, y_rows, dy_rows, n_rows, n_cols, *map(int, y_rows.stride()),
            *map(int, dy_rows.stride()), BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps,
        )  # fmt: skip
    return dx


def _save_output(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, dy):
    return softmax_backward(ctx.saved_tensors[0], dy)


torch.library.register_autograd("triton_softmax::softmax", _backward, setup_context=_save_output)


def main(argv=None):
    parser = softmax._Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64, help="(default 64)")
    parser.add_argument("--cols", type=int, default=1000, help="(default 1000)")
    parser.add_argument("--dtype", choices=softmax.DTYPES, default="float32")
    args = parser.parse_args(argv)
    if not (0 < args.rows < 2**20 and 0 < args.cols < 2**20):
        parser.error("argument --rows, --cols: must be in [1, 1048576)")
    dtype = softmax.DTYPES[args.dtype]
    x = torch.randn(args.rows, args.cols, device=softmax.DEVICE).to(dtype).requires_grad_()
    dy = torch.randn_like(x)
    (dx,) = torch.autograd.grad(softmax.softmax(x), x, dy)
    xf = x.detach().float().requires_grad_()
    (ref,) = torch.autograd.grad(torch.softmax(xf, -1), xf, dy.float())
    err = (dx.float() - ref).abs().max().item()
    print(f"softmax_op: gradient max_abs_err={err:.3e}")
    if not err <= 4 * softmax.TOLERANCE[dtype]:  # written so that NaN fails
        print("softmax_op: FAIL gradient differs from torch.softmax's", file=sys.stderr)
        return 1
    print("softmax_op: PASS")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

"""softmax(x) for a model: any rank, strides and row length, with autograd and torch.compile.

    python softmax_op.py [--rows R] [--cols C] [--dtype D]   (its gradient against torch's)

Eager calls without autograd launch softmax.py's kernel (long_rows.py's for rows it cannot
hold) directly. Where autograd needs a backward, or torch.compile traces the call, softmax
is the PyTorch op triton_softmax::softmax: registered with torch.library.triton_op, its
kernels launched through wrap_triton so that a compiled graph holds them (no graph break),
and its backward with register_autograd: dx = y * (dy - sum(dy * y)) over the last
dimension, the softmax's Jacobian diag(y) - y y^T applied to dy. Rows one program holds
take a fused Triton kernel for it, which reads y and dy once and writes dx once; longer
rows take torch's own softmax backward.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments or an input too large.
"""

import sys

# softmax.py first: it picks Triton's interpreter where there is no GPU, before Triton loads.
import softmax as fused

# isort: split
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

import long_rows


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a float32, float16 or bfloat16 tensor of any
    rank, strides and row length, computed in float32: a new contiguous tensor of x's
    shape and dtype, differentiable, and traced whole by torch.compile."""
    grad = torch.is_grad_enabled() and getattr(x, "requires_grad", False)
    if grad or torch.compiler.is_compiling():
        fused.check(x, max_cols=2**31 - 1)
        return softmax_op(x)
    if isinstance(x, torch.Tensor) and x.ndim and x.shape[-1] > fused.MAX_FUSED_COLS:
        return long_rows.softmax(x)
    return fused.softmax(x)  # which refuses what it does not take


@triton_op("triton_softmax::softmax", mutates_args=())
def softmax_op(x: torch.Tensor) -> torch.Tensor:
    """The kernels launched through wrap_triton, so that a traced graph holds them."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel():
        kernels = fused if x.shape[-1] <= fused.MAX_FUSED_COLS else long_rows
        with fused.launching(x):
            kernels.launch(fused.as_rows(x), out, wrap_triton)
    return out


@triton.jit
def softmax_backward_kernel(
    dx_ptr,
    y_ptr,
    dy_ptr,
    n_rows,
    n_cols,
    y_row_stride,
    y_col_stride,
    dy_row_stride,
    dy_col_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # As the forward: one program holds BLOCK_M whole rows of y and dy, padded with 0.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows = rows.to(tl.int64)
    y_at = y_ptr + rows[:, None] * y_row_stride + cols[None, :] * y_col_stride
    dy_at = dy_ptr + rows[:, None] * dy_row_stride + cols[None, :] * dy_col_stride
    y = tl.load(y_at, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_at, mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    dx_at = dx_ptr + rows[:, None] * n_cols + cols[None, :]
    tl.store(dx_at, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton_op("triton_softmax::softmax_backward", mutates_args=())
def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx for the gradient dy of y = softmax(x)."""
    if y.shape[-1] > fused.MAX_FUSED_COLS:  # rows no program holds: torch's backward
        return torch._softmax_backward_data(dy, y, -1, y.dtype)
    dx = torch.empty_like(y, memory_format=torch.contiguous_format)
    if dx.numel():
        y_rows, dy_rows = fused.as_rows(y), fused.as_rows(dy)
        n_rows, n_cols = map(int, y_rows.shape)
        # Two tiles a program, y's and dy's, each thread holding 16 elements of each in
        # every dtype, as of a 16-bit row (float32 4096 x 1024 on an H100: 16.6 us, 2.9 TB/s
        # of y, dy and dx; docs/performance.md).
        p = fused.plan(n_rows, n_cols, y.device.index, itemsize=2)
        with fused.launching(y):
            wrap_triton(softmax_backward_kernel)[p.grid](
                dx_ptr=dx,
                y_ptr=y_rows,
                dy_ptr=dy_rows,
                n_rows=n_rows,
                n_cols=n_cols,
                y_row_stride=y_rows.stride(0),
                y_col_stride=y_rows.stride(1),
                dy_row_stride=dy_rows.stride(0),
                dy_col_stride=dy_rows.stride(1),
                BLOCK_M=p.block_m,
                BLOCK_N=p.block_n,
                num_warps=p.num_warps,
            )
    return dx


def _save_output(
    ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: torch.Tensor
) -> None:
    ctx.save_for_backward(output)


def _backward(ctx: torch.autograd.function.FunctionCtx, dy: torch.Tensor) -> torch.Tensor:
    return softmax_backward(ctx.saved_tensors[0], dy)


torch.library.register_autograd("triton_softmax::softmax", _backward, setup_context=_save_output)


def main(argv: list[str] | None = None) -> int:
    parser = fused._Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64, help="(default 64)")
    parser.add_argument("--cols", type=int, default=1000, help="(default 1000)")
    parser.add_argument("--dtype", choices=fused.DTYPES, default="float32")
    args = parser.parse_args(argv)
    if not (0 < args.rows < 2**31 and 0 < args.cols < 2**31):
        parser.error("argument --rows, --cols: must be in [1, 2147483648)")
    dtype = fused.DTYPES[args.dtype]
    # x, y, dy and dx; x in float32 with its gradient and torch's y, dy and dx.
    if why := fused.too_large(args.rows, args.cols, dtype, floats=6):
        print(f"softmax_op: error: {why}", file=sys.stderr)
        return 2
    x = torch.randn(args.rows, args.cols, device=fused.DEVICE).to(dtype).requires_grad_()
    dy = torch.randn_like(x)
    (dx,) = torch.autograd.grad(softmax(x), x, dy)
    xf = x.detach().float().requires_grad_()
    (ref,) = torch.autograd.grad(torch.softmax(xf, -1), xf, dy.float())
    err = (dx.float() - ref).abs().max().item()
    print(f"softmax_op: gradient max_abs_err={err:.3e}")
    if not err <= 4 * fused.TOLERANCE[dtype]:  # written so that NaN fails
        print("softmax_op: FAIL gradient differs from torch.softmax's", file=sys.stderr)
        return 1
    print("softmax_op: PASS")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

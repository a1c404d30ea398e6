"""A model's use of softmax_op.softmax under torch.compile, for `make profile SCRIPT=`: attention
weights softmax(q k^T / sqrt(d)) in a module compiled whole (fullgraph), checked once
against the same module in eager mode with torch.softmax, then run --iters more times.

    python tests/softmax_compiled.py [--rows 1024] [--cols 1024] [--iters 20]

Where there is no GPU it runs the module in eager mode through Triton's interpreter:
Inductor cannot compile Triton kernels for the interpreter. Exit status: 0 PASS, 1 FAIL,
2 bad arguments.
"""

import os
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import softmax  # noqa: E402 - first: it picks Triton's interpreter where there is no GPU

# isort: split
import torch  # noqa: E402

from softmax_op import softmax as normalise  # noqa: E402


class Scores(torch.nn.Module):
    """Attention weights of rows queries against cols keys, as a model computes them."""

    def __init__(self, dim: int, normalise: Callable) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.normalise = normalise

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return self.normalise(self.proj(q) @ k.t() / k.shape[-1] ** 0.5)


def main(argv: list[str] | None = None) -> int:
    parser = softmax._Parser(description=__doc__.split("\n\n")[0])
    for name, default in ("rows", 1024), ("cols", 1024), ("iters", 20):
        parser.add_argument(f"--{name}", type=int, default=default, help=f"(default {default})")
    args = parser.parse_args(argv)
    if not all(0 < v < 2**16 for v in (args.rows, args.cols, args.iters)):
        parser.error("argument --rows, --cols, --iters: must be in [1, 65536)")
    if not softmax.INTERPRET:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.manual_seed(0)
    ours = Scores(64, normalise).to(softmax.DEVICE)
    theirs = Scores(64, lambda t: torch.softmax(t, -1)).to(softmax.DEVICE)
    theirs.load_state_dict(ours.state_dict())
    model = ours if softmax.INTERPRET else torch.compile(ours, fullgraph=True)
    q = torch.randn(args.rows, 64, device=softmax.DEVICE)
    k = torch.randn(args.cols, 64, device=softmax.DEVICE)
    err = (model(q, k) - theirs(q, k)).abs().max().item()
    print(f"softmax_compiled: {'eager' if softmax.INTERPRET else 'compiled'} max_abs_err={err:.3e}")
    if not err <= 1e-5:  # Inductor may round the scores otherwise; written so NaN fails
        print("softmax_compiled: FAIL result differs from torch.softmax", file=sys.stderr)
        return 1
    with torch.no_grad():
        for _ in range(0 if softmax.INTERPRET else args.iters):
            model(q, k)
    if not softmax.INTERPRET:
        torch.cuda.synchronize()
    print("softmax_compiled: PASS")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

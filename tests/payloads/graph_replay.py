"""A small Triton kernel captured in a CUDA graph and replayed, as a launch-bound caller
runs one: y = 2x, checked against torch.

    python graph_replay.py [--n 98432] [--replays 50]

The kernel is launched once (compiled and checked), captured in torch.cuda.graph, and
the graph replayed --replays times. Proton, started before the script (profile.sh
starts it), sees the replays' launches. With no GPU visible the kernel runs once in
Triton's interpreter, which has no graphs.
Exit status: 0 PASS, 1 FAIL, 2 bad arguments.
"""

import argparse
import os
import sys

import torch

# The interpreter is picked when the @triton.jit function below is defined.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
BLOCK = 1024


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def scale(x, y):
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)


def _count(text):
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 9 and int(text) > 0):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text[:30]!r}")
    return int(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2
        print(f"graph_replay: error: {message[:200]}", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=_count, default=98432, help="elements (default 98432)")
    parser.add_argument("--replays", type=_count, default=50, help="graph replays (default 50)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    x = torch.randn(args.n, device=DEVICE)
    y = torch.empty_like(x)
    scale(x, y)  # compiled here: a graph cannot capture a compilation
    if not torch.equal(y, 2 * x):
        print("graph_replay: FAIL result differs from torch", file=sys.stderr)
        return 1
    if not INTERPRET:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            scale(x, y)
        y.zero_()
        for _ in range(args.replays):
            graph.replay()
        torch.cuda.synchronize()
        if not torch.equal(y, 2 * x):
            print("graph_replay: FAIL replayed result differs from torch", file=sys.stderr)
            return 1
    print(f"graph_replay: PASS ({0 if INTERPRET else args.replays} replays)")
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

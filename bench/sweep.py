"""softmax.py against torch.softmax, torch.compile (Inductor), Liger-Kernel and a copy of
the same bytes, on a GPU: device time, loop time and host cost per call.

    python bench/sweep.py [--out bench/results]        (or: make bench)

For every point, in rounds that interleave the candidates (the machine is shared and
its speed drifts), it records:

- device_us: the GPU time of one call, by CUDA-graph replay (do_bench_cudagraph), so no
  host cost leaks in. Replay leaves the input in L2 when it fits (60 MiB on an H200), as
  when the layer before has just written it.
- loop_us: wall time per call over back-to-back calls with one synchronize at the end:
  what a caller sees, host cost included.

Then, once: the backward against torch's; host, the loop time per call at 4 x 64 and 32
x 4096, where the host's cost is all a caller sees, and a small model's step; and what
profiling costs (`make profile` against `make run`, and Proton's kernel time against the
graph-replayed one). Medians are kept, with [min, max] over the rounds.
Writes <out>/<device>.json, then the table, plots and docs/performance.md (bench/report.py).
Exit status: 0 done, 1 softmax.py gave a wrong result, 2 no GPU.
"""

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402
import softmax as sm  # noqa: E402 - first: it picks Triton's interpreter where no GPU is

# isort: split
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from torch.library import triton_op  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

import few_rows  # noqa: E402
import long_rows  # noqa: E402
import softmax_op  # noqa: E402
from summary.files import write_output  # noqa: E402

SHAPES = [(4096, c) for c in (256, 512, 1024, 2048, 4096, 8192, 16384)]
SHAPES += [(65536, 2048), (1024, 65536), (512, 131072), (256, 262144), (64, 1048576)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Logits: tokens x vocabulary, from decoding (1 to 16 rows) to prefill and training.
VOCABS = (32000, 50257, 128256, 151936, 256000)
LOGITS = [(m, v) for v in VOCABS for m in (1, 16, 256, 4096)]
LOGIT_DTYPES = [torch.bfloat16, torch.float32]
# The backward against torch's: dtype, rows, cols.
BACKWARD = [
    (torch.float32, 4096, 1024),
    (torch.bfloat16, 4096, 4096),
    (torch.bfloat16, 4096, 16384),
    (torch.bfloat16, 1024, 65536),
]
POINTS = report.POINTS
ROUNDS = 5
# Host cost: a decoding step's few rows, and a batch's; HOST_CALLS a round, HOST_ROUNDS.
HOST_SHAPES = [(4, 64), (32, 4096)]
HOST_ROUNDS = 15
LOOP_CALLS = 200
HOST_CALLS = 2000
STEP_SOFTMAXES = 4
STEP_CALLS = 500


@triton.jit
def copy_kernel(dst_ptr, src_ptr, n, BLOCK: tl.constexpr):
    # The copy line: the same bytes read once and written once. A kernel of our own:
    # replayed from a graph, torch's copy_ of 512 MiB or more read far slower than the
    # same copy outside a graph (cause not established).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def quack():
    """QuACK's softmax (quack-kernels, bench/requirements-quack.txt) where asked for and
    importable; else None."""
    try:
        from quack.softmax import softmax_fwd
    except ImportError as e:
        print(f"sweep: QuACK left out: {e}", file=sys.stderr)
        return None
    return softmax_fwd


def candidates(x, peers=(), inductor=True):
    """Name to a call computing the softmax of x's rows (or copying x), as users call
    each; torch.compile's where inductor. A peer that refuses the shape (Liger past 65536
    columns, QuACK's rows of a length not a multiple of 16 bytes) or gets it wrong is left
    out, with a note saying why."""
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    dst = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 4096),)
    fns = {
        "softmax.py": lambda: ours(x),
        "torch.softmax": lambda: torch.softmax(x, dim=1),
        "torch.compile": lambda: compiled_softmax(x),
        "liger": lambda: LigerSoftmaxFunction.apply(x),
        **{name: functools.partial(fn, x) for name, fn in peers},
        "copy": lambda: copy_kernel[grid](dst, x, x.numel(), BLOCK=4096, num_warps=8),
    }
    if not inductor:
        del fns["torch.compile"]
    ref = torch.softmax(x.float(), dim=1)
    notes = {}
    for name, fn in list(fns.items()):
        try:
            y = fn()  # compiles, and proves the candidate accepts the shape
        except Exception as e:  # noqa: BLE001 - any refusal: recorded, not fatal
            notes[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
            del fns[name]
            continue
        if name not in ("softmax.py", "copy"):  # softmax.py's own error is the point's
            err = (y.float() - ref).abs().max().item()
            if not err <= sm.TOLERANCE[x.dtype]:  # a wrong result is not timed
                notes[name] = f"wrong: max_abs_err={err:.3e}"
                del fns[name]
    return fns, notes


@torch.compile(dynamic=False)
def compiled_softmax(x):
    return torch.softmax(x, dim=1)


def ours(x):
    """softmax.py's softmax for x's rows: the fused kernel, or long_rows.py's."""
    return (sm.softmax if x.shape[-1] <= sm.MAX_FUSED_COLS else long_rows.softmax)(x)


def path(x):
    """The kernel softmax.py launches for x's rows."""
    if x.shape[-1] <= sm.MAX_FUSED_COLS:
        return "fused"
    vectors = long_rows.aligned(x) or long_rows.peel(x) is not None
    plan = long_rows.plan(*x.shape, x.element_size(), vectors, x.device.index)
    if plan.kernel is sm.softmax_kernel:
        return "whole rows"
    if plan.kernel is few_rows.softmax_partials_kernel:
        return "few rows"
    return "lagged tiles" if plan.lag else "tiles"


def loop_us(fn, calls, sync=torch.cuda.synchronize):
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def rounds(fns, measure, n=ROUNDS):
    """measure(fn) for every candidate, n times, candidates interleaved."""
    seen = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            seen[name].append(measure(fn))
    return seen


def median(seen):
    return {name: statistics.median(v) for name, v in seen.items()}


def spread(seen):
    return {name: [min(v), max(v)] for name, v in seen.items()}


def point(dtype, rows, cols, peers=(), kind="rows"):
    x = torch.randn(rows, cols, device="cuda").to(dtype)
    err = (ours(x).float() - torch.softmax(x.float(), dim=1)).abs().max().item()
    # Inductor compiles each shape for seconds: the logits' peers are torch, Liger, QuACK.
    fns, notes = candidates(x, peers, inductor=kind == "rows")
    device = rounds(fns, lambda fn: do_bench_cudagraph(fn, rep=10, return_mode="median") * 1e3)
    loop = rounds(fns, lambda fn: loop_us(fn, LOOP_CALLS))
    return {
        "set": kind,
        "dtype": str(dtype).removeprefix("torch."),
        "rows": rows,
        "cols": cols,
        "path": path(x),
        "max_abs_err": err,
        "correct": err <= sm.TOLERANCE[dtype],
        "device_us": median(device),
        "device_us_spread": spread(device),
        "loop_us": median(loop),
        "loop_us_spread": spread(loop),
        "notes": notes,
    }


def backward_point(dtype, rows, cols):
    """Device time of softmax_op's backward against torch's softmax backward, both on the
    same y and dy, by graph replay in interleaved rounds."""
    y = softmax_op.softmax(torch.randn(rows, cols, device="cuda").to(dtype))
    dy = torch.randn_like(y)
    fns = {
        "softmax.py": lambda: softmax_op.softmax_backward(y, dy),
        "torch": lambda: torch._softmax_backward_data(dy, y, -1, dtype),
    }
    xf = y.float().log().requires_grad_()  # softmax(log y) is y: torch's gradient in float32
    (ref,) = torch.autograd.grad(torch.softmax(xf, -1), xf, dy.float())
    err = (fns["softmax.py"]().float() - ref).abs().max().item()
    device = rounds(fns, lambda fn: do_bench_cudagraph(fn, rep=10, return_mode="median") * 1e3)
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "rows": rows,
        "cols": cols,
        "max_abs_err": err,
        "correct": err <= 2 * sm.TOLERANCE[dtype],
        "device_us": median(device),
        "device_us_spread": spread(device),
    }


@triton_op("bench::empty", mutates_args=())
def empty_op(x: torch.Tensor) -> torch.Tensor:
    """A triton_op that launches nothing: what PyTorch's dispatch of such an op costs."""
    return torch.empty_like(x)


def host_candidates(rows, cols):
    """The calls host_costs times on a rows x cols input, where the GPU waits for the host:
    the peers; softmax.py's softmax(), and its two launches alone, each into a new
    output: kernel[grid](...), the general path's, and compiled[grid](...), the one
    softmax() gives what a model passes (the kernel compiled ahead by warmup, as Triton's
    tutorial 02 launches it); softmax_op.softmax without autograd and with it
    (requires_grad: the op, its autograd node and saved output), the op called directly,
    beside an op that launches nothing (empty op) and the output's allocation alone
    (empty_like): the op's dispatch is empty op less that."""
    x = torch.randn(rows, cols, device="cuda")
    fns, _ = candidates(x)
    p = sm.plan(rows, cols, x.device.index, x.element_size())
    args = (x, rows, cols, cols, 1, p.block_m, p.block_n)
    fns["kernel[grid]"] = lambda: sm.softmax_kernel[p.grid](
        torch.empty_like(x), *args, num_warps=p.num_warps
    )
    compiled = sm.softmax_kernel.warmup(x, *args, grid=p.grid, num_warps=p.num_warps)
    compiled = compiled[(*p.grid, 1, 1)]  # a compiled kernel's grid has all three dimensions
    fns["compiled[grid]"] = lambda: compiled(torch.empty_like(x), *args)
    graded = x.clone().requires_grad_()
    fns["softmax_op.softmax"] = lambda: softmax_op.softmax(x)
    fns["softmax_op.softmax, requires_grad"] = lambda: softmax_op.softmax(graded)
    fns["op"] = lambda: softmax_op.softmax_op(x)
    fns["empty op"] = lambda: empty_op(x)
    fns["empty_like"] = lambda: torch.empty_like(x)
    return fns


def model_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A small model's step, launch-bound: STEP_SOFTMAXES softmaxes, a product before each."""
    for _ in range(STEP_SOFTMAXES):
        x = softmax_op.softmax(x @ w)
    return x


def step_costs(n=HOST_ROUNDS, calls=STEP_CALLS):
    """Loop time per step of model_step on 16 x 64 inputs, eager against compiled whole
    by torch.compile(mode="reduce-overhead"), which replays the step as one CUDA graph;
    medians of n interleaved rounds, with [min, max]."""
    x, w = torch.randn(16, 64, device="cuda"), torch.randn(64, 64, device="cuda") / 8
    compiled = torch.compile(model_step, mode="reduce-overhead", dynamic=False)
    fns = {"eager": lambda: model_step(x, w), "compiled": lambda: compiled(x, w)}
    for _ in range(3):  # reduce-overhead records its graph on the third call
        err = (compiled(x, w) - model_step(x, w)).abs().max().item()
    seen = rounds(fns, lambda fn: loop_us(fn, calls), n)
    return dict(softmaxes=STEP_SOFTMAXES, max_abs_err=err, us=median(seen), us_spread=spread(seen))


def host_costs(fns, n=HOST_ROUNDS, calls=HOST_CALLS, sync=torch.cuda.synchronize):
    """Loop time per call of each of fns, in n interleaved rounds. The host's speed drifts
    between rounds: each one's ratio to torch.softmax is taken within the round, then their
    median kept."""
    seen = rounds(fns, lambda fn: loop_us(fn, calls, sync), n)
    torch_us = seen["torch.softmax"]
    ratios = {
        name: statistics.median(a / b for a, b in zip(v, torch_us, strict=True))
        for name, v in seen.items()
    }
    return median(seen), spread(seen), ratios


def wall_s(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def profiling_cost(device_us, timed=wall_s, repeats=10):
    """`make run` and `make profile` at the default shape, interleaved (which goes first
    turned round in alternate rounds), medians of repeats; and Proton's mean time of the
    timed loop's kernel (from the latest run's summary) against graph replay's."""
    with tempfile.TemporaryDirectory() as out:
        runs, profiles = [], []
        for i in range(repeats):
            order = [
                (runs, ["make", "-s", "run"]),
                (profiles, ["make", "-s", "profile", f"OUT={out}"]),
            ]
            for seen, command in order[:: 1 if i % 2 == 0 else -1]:
                seen.append(timed(command))
        summary = json.loads(Path(out, "profile", "latest", "summary.json").read_text())
    kernel = next(k for k in summary["proton_kernels"] if k["name"].startswith("softmax_kernel"))
    run, profile = statistics.median(runs), statistics.median(profiles)
    return {
        "run_wall_s": run,
        "profile_wall_s": profile,
        "profile_vs_run": profile / run,
        "run_wall_s_spread": [min(runs), max(runs)],
        "profile_wall_s_spread": [min(profiles), max(profiles)],
        "proton_kernel_us": kernel["mean_us"],
        "device_us": device_us,
    }


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--points",
        default=",".join(POINTS),
        help=f"a subset of {','.join(POINTS)}; a subset's JSON is named after "
        "it, and only a whole run rewrites the report",
    )
    parser.add_argument("--quack", action="store_true", help="QuACK as a peer, if importable")
    args = parser.parse_args()
    args.points = args.points.split(",")
    if not args.points or not set(args.points) <= set(POINTS):
        parser.error(f"--points: a comma-separated subset of {','.join(POINTS)}")
    return args


def kernel_points(points, peers):
    """The rows' and logits' points asked for, each printed as it comes."""
    todo = [(d, r, c, "rows") for d in DTYPES for r, c in SHAPES] if "rows" in points else []
    if "logits" in points:
        todo += [(d, m, v, "logits") for d in LOGIT_DTYPES for m, v in LOGITS]
    measured = []
    for dtype, rows, cols, kind in todo:
        measured.append(point(dtype, rows, cols, peers, kind))
        print(report.progress_line(measured[-1]), flush=True)
        torch.cuda.empty_cache()
    return measured


def other_points(results, points):
    """The backward, host and profiling points asked for, into results."""
    if "backward" in points:
        results["backward"] = [backward_point(*b) for b in BACKWARD]
        print(f"sweep: backward {json.dumps(results['backward'])}", flush=True)
    if "host" in points:
        results["host"], results["host_rounds"] = [], HOST_ROUNDS
        for rows, cols in HOST_SHAPES:
            us, us_spread, vs_torch = host_costs(host_candidates(rows, cols))
            results["host"].append(dict(rows=rows, cols=cols, us=us, us_spread=us_spread))
            results["host"][-1]["vs_torch"] = vs_torch
            print(f"sweep: host us per call at {rows} x {cols} {json.dumps(us)}", flush=True)
            print(f"sweep: host vs torch.softmax {json.dumps(vs_torch)}", flush=True)
        results["step"] = step_costs()
        print(f"sweep: model step {json.dumps(results['step'])}", flush=True)
    if "profiling" in points:
        default = point(torch.float32, 4096, 1024)["device_us"]["softmax.py"]
        results["profiling"] = profiling_cost(default)
        print(f"sweep: profiling {json.dumps(results['profiling'])}", flush=True)


def main():
    if not torch.cuda.is_available():
        print("sweep: error: no GPU visible; the benchmark times real kernels", file=sys.stderr)
        return 2
    args = arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.recompile_limit = 64  # one Inductor graph per shape and dtype
    peers = [("quack", fn)] if args.quack and (fn := quack()) else []
    results = {
        "device": torch.cuda.get_device_name(),
        "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "rounds": ROUNDS,
        "loop_calls": LOOP_CALLS,
        "host_calls": HOST_CALLS,
        "points": kernel_points(args.points, peers),
    }
    other_points(results, args.points)
    whole = set(args.points) == set(POINTS)
    if not whole:
        results["subset"] = args.points
    name = report.slug(results["device"]) + ("" if whole else "-" + "-".join(args.points))
    path = args.out / f"{name}.json"
    write_output(path, json.dumps(results, indent=1) + "\n")
    if whole:
        report.write_all(path)
    if not all(p["correct"] for p in results["points"] + results.get("backward", [])):
        return 1
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

"""softmax.py against torch.softmax, torch.compile (Inductor), Liger-Kernel and a copy of
the same bytes, on a GPU: device time, loop time and host cost per call.

    python bench/sweep.py [--out bench/results]        (or: make bench)

For every point, in rounds that interleave the candidates (the machine is shared and
its speed drifts), it records:

- device_us: the GPU time of one call, by CUDA-graph replay (do_bench_cudagraph), so no
  host cost leaks in. Replay leaves the input in L2 when it fits (60 MB on an H200), as
  when the layer before has just written it.
- loop_us: wall time per call over back-to-back calls with one synchronize at the end:
  what a caller sees, host cost included.

Then, once: host_us, the loop time per call on a tiny input (the host's cost alone),
and what profiling costs (`make profile` against `make run`, and Proton's kernel time
against the graph-replayed one). Medians are kept, with [min, max] over the rounds.
Writes <out>/<device>.json, then the table, plots and docs/performance.md (bench/report.py).
Exit status: 0 done, 1 softmax.py gave a wrong result, 2 no GPU.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("sweep: error: no GPU visible; the benchmark times real kernels", file=sys.stderr)
    raise SystemExit(2)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402

import long_rows  # noqa: E402
import softmax as sm  # noqa: E402
import softmax_op  # noqa: E402
from parse_hatchet import write_output  # noqa: E402

SHAPES = [(4096, c) for c in (256, 512, 1024, 2048, 4096, 8192, 16384)]
SHAPES += [(65536, 2048), (1024, 65536), (512, 131072), (256, 262144), (64, 1048576)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PATHS = {sm.softmax_kernel: "fused", long_rows.softmax_long_rows_kernel: "tiles",
         long_rows.softmax_long_rows_lagged_kernel: "lagged tiles"}  # fmt: skip
ROUNDS = 5
HOST_ROUNDS = 15
LOOP_CALLS = 200
HOST_CALLS = 2000


@triton.jit
def copy_kernel(dst_ptr, src_ptr, n, BLOCK: tl.constexpr):
    # The copy line: the same bytes read once and written once. A kernel of our own:
    # replayed from a graph, torch's copy_ of 512 MiB or more read far slower than the
    # same copy outside a graph (cause not established).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def candidates(x):
    """Name to a call computing the softmax of x's rows (or copying x), as users call
    each. Liger refuses rows longer than 65536 columns: it is then left out."""
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    dst = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 4096),)
    fns = {
        "softmax.py": lambda: sm.softmax(x),
        "torch.softmax": lambda: torch.softmax(x, dim=1),
        "torch.compile": lambda: compiled_softmax(x),
        "liger": lambda: LigerSoftmaxFunction.apply(x),
        "copy": lambda: copy_kernel[grid](dst, x, x.numel(), BLOCK=4096, num_warps=8),
    }
    notes = {}
    for name, fn in list(fns.items()):
        try:
            fn()  # compiles, and proves the candidate accepts the shape
        except Exception as e:  # noqa: BLE001 - any refusal: recorded, not fatal
            notes[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
            del fns[name]
    return fns, notes


@torch.compile(dynamic=False)
def compiled_softmax(x):
    return torch.softmax(x, dim=1)


def loop_us(fn, calls):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
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


def point(dtype, rows, cols):
    x = torch.randn(rows, cols, device="cuda").to(dtype)
    err = (sm.softmax(x).float() - torch.softmax(x.float(), dim=1)).abs().max().item()
    fns, notes = candidates(x)
    device = rounds(fns, lambda fn: do_bench_cudagraph(fn, rep=10, return_mode="median") * 1e3)
    loop = rounds(fns, lambda fn: loop_us(fn, LOOP_CALLS))
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "rows": rows,
        "cols": cols,
        "path": PATHS[softmax_op.compile_launch(x)[0]],  # the kernel softmax(x) launches
        "max_abs_err": err,
        "correct": err <= sm.TOLERANCE[dtype],
        "device_us": median(device),
        "device_us_spread": spread(device),
        "loop_us": median(loop),
        "loop_us_spread": spread(loop),
        "notes": notes,
    }


def host_costs():
    """Loop time per call on a 4 x 64 input, where the GPU waits for the host; with
    softmax.py's kernel launched as kernel[grid](...) too, Triton's plain launch, and
    as the compiled[grid](...) softmax() keeps, into a new output each call, which is
    softmax()'s call less its lookup of the input's key. The host's speed drifts between
    rounds: its ratios to torch.softmax are taken within each round, then their median
    kept."""
    x = torch.randn(4, 64, device="cuda")
    fns, _ = candidates(x)
    out = torch.empty_like(x)
    props = torch.cuda.get_device_properties(x.device)
    block_m, block_n, num_warps = sm.launch_config(4, 64, props.multi_processor_count,
                                                   props.warp_size)  # fmt: skip
    args = (out, x, 4, 64, 64, 1, 64, block_m, block_n, False)
    grid = (triton.cdiv(4, block_m),)
    fns["kernel[grid]"] = lambda: sm.softmax_kernel[grid](*args, num_warps=num_warps)
    _, run, _, fixed, _ = softmax_op.compile_launch(x)
    fns["compiled[grid]"] = lambda: run(torch.empty_like(x), x, *fixed)
    seen = rounds(fns, lambda fn: loop_us(fn, HOST_CALLS), HOST_ROUNDS)
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


def profiling_cost(device_us):
    """`make run` and `make profile` at the default shape, interleaved, medians of 3;
    and Proton's mean time of the timed loop's kernel against graph replay's."""
    with tempfile.TemporaryDirectory() as out:
        runs, profiles = [], []
        for _ in range(3):
            runs.append(wall_s(["make", "-s", "run"]))
            profiles.append(wall_s(["make", "-s", "profile", f"OUT={out}"]))
        summary = json.loads(Path(out, "profile", "summary.json").read_text())
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.recompile_limit = 64  # one Inductor graph per shape and dtype

    results = {
        "device": torch.cuda.get_device_name(),
        "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "rounds": ROUNDS,
        "loop_calls": LOOP_CALLS,
        "host_calls": HOST_CALLS,
        "points": [],
    }
    for dtype in DTYPES:
        for rows, cols in SHAPES:
            p = point(dtype, rows, cols)
            results["points"].append(p)
            print(report.progress_line(p), flush=True)
            torch.cuda.empty_cache()
    results["host_us"], results["host_us_spread"], results["host_vs_torch"] = host_costs()
    results["host_rounds"] = HOST_ROUNDS
    print(f"sweep: host us per call {json.dumps(results['host_us'])}", flush=True)
    default = next(p for p in results["points"] if p["dtype"] == "float32" and p["cols"] == 1024)
    results["profiling"] = profiling_cost(default["device_us"]["softmax.py"])
    print(f"sweep: profiling {json.dumps(results['profiling'])}", flush=True)

    path = args.out / f"{report.slug(results['device'])}.json"
    write_output(path, json.dumps(results, indent=1) + "\n")
    report.write_all(path)
    if not all(p["correct"] for p in results["points"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

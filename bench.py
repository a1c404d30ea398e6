"""Benchmark softmax.py against torch.softmax and a copy of the same bytes, on a GPU.

    python bench.py [--out bench/results]

Writes <out>/<device>.json, <out>/<device>.md (the README's table) and a plot per
dtype, <out>/<device>-<dtype>.png. GB/s counts the bytes a softmax must move: the input
read once and the output written once. Times are triton.testing.do_bench medians, with
L2 flushed between repetitions. Then it measures what profiling costs: softmax.py's
wall time alone and under profile.sh, and Proton's kernel time against do_bench's.
Exit status: 0 done, 1 a kernel gave a wrong result, 2 no GPU.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
    print("bench: error: no GPU visible; the benchmark times real kernels", file=sys.stderr)
    raise SystemExit(2)

import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import softmax as sm  # noqa: E402
from parse_hatchet import write_atomic  # noqa: E402

HERE = Path(__file__).resolve().parent
SHAPES = [(4096, c) for c in (256, 512, 1024, 2048, 4096, 8192, 16384)]
SHAPES += [(65536, 2048), (1024, 65536), (512, 131072), (256, 262144)]


def gbps(fn, nbytes):
    return 2 * nbytes / do_bench(fn, return_mode="median") / 1e6


def copy_1gib():
    src = torch.empty(2**28, device="cuda")  # 1 GiB of float32
    dst = torch.empty_like(src)
    return gbps(lambda: dst.copy_(src), src.numel() * 4)


def point(dtype, rows, cols):
    x = torch.randn(rows, cols, device="cuda").to(dtype)
    y = torch.empty_like(x)
    nbytes = x.numel() * x.element_size()
    err = (sm.softmax(x).float() - torch.softmax(x.float(), dim=1)).abs().max().item()
    kernel = gbps(lambda: sm.softmax(x), nbytes)
    library = gbps(lambda: torch.softmax(x, dim=1), nbytes)
    copy = gbps(lambda: y.copy_(x), nbytes)
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "rows": rows,
        "cols": cols,
        "path": "tiled"
        if sm.launch_config(rows, cols, *sm._device_shape(x.device))[0] == 0
        else "fused",  # fmt: skip
        "max_abs_err": err,
        "correct": err <= sm.TOLERANCE[dtype],
        "kernel_gbps": kernel,
        "torch_gbps": library,
        "copy_gbps": copy,
        "vs_torch": kernel / library,
        "vs_copy": kernel / copy,
    }


def profiling_cost():
    """softmax.py's wall time alone and under profile.sh, and Proton's kernel time for
    the default shape next to do_bench's (flushed L2) and a warm back-to-back loop's."""
    cmd = [sys.executable, str(HERE / "softmax.py")]
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        plain = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run(
            [str(HERE / "profile.sh"), "--output", out, "--", *cmd], check=True, capture_output=True
        )
        profiled = time.perf_counter() - start
        summary = json.loads(Path(out, "summary.json").read_text())
    kernel = next(k for k in summary["proton_kernels"] if k["name"].startswith("softmax_kernel"))
    x = torch.randn(4096, 1024, device="cuda")
    flushed_us = do_bench(lambda: sm.softmax(x), return_mode="median") * 1e3
    sm.softmax(x)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(100):
        sm.softmax(x)
    end.record()
    torch.cuda.synchronize()
    return {
        "run_wall_s": plain,
        "profile_wall_s": profiled,
        "profile_vs_run": profiled / plain,
        "proton_kernel_us": kernel["mean_us"],
        "do_bench_us": flushed_us,
        "warm_loop_us": begin.elapsed_time(end) * 1e3 / 100,
        "proton_vs_do_bench": kernel["mean_us"] / flushed_us,
    }


def markdown(results):
    lines = [
        "| dtype | rows x cols | path | softmax.py GB/s | torch.softmax GB/s | copy GB/s "
        "| vs torch | vs copy |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in results["points"]:
        lines.append(
            f"| {p['dtype']} | {p['rows']} x {p['cols']} | {p['path']} | {p['kernel_gbps']:.0f} "
            f"| {p['torch_gbps']:.0f} | {p['copy_gbps']:.0f} | {p['vs_torch']:.2f} "
            f"| {p['vs_copy']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(results, stem):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for dtype in sorted({p["dtype"] for p in results["points"]}):
        fig, ax = plt.subplots(figsize=(7, 4))
        for rows in sorted({p["rows"] for p in results["points"]}):
            pts = [p for p in results["points"] if p["dtype"] == dtype and p["rows"] == rows]
            cols = [p["cols"] for p in pts]
            mark = dict(marker="o", linestyle="-" if len(pts) > 1 else "none")
            ax.plot(cols, [p["kernel_gbps"] for p in pts], color="C0", **mark)
            ax.plot(cols, [p["torch_gbps"] for p in pts], color="C1", **mark)
            ax.plot(cols, [p["copy_gbps"] for p in pts], color="0.5", **{**mark, "marker": "x"})
            for p in pts:
                if rows != 4096:
                    ax.annotate(f"{rows} rows", (p["cols"], p["kernel_gbps"]), fontsize=7)
        ax.plot([], [], "o-", color="C0", label="softmax.py")
        ax.plot([], [], "o-", color="C1", label="torch.softmax")
        ax.plot([], [], "x-", color="0.5", label="copy of the same bytes")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("columns (4096 rows unless marked)")
        ax.set_ylabel("GB/s (input read + output written)")
        ax.set_title(f"{results['device']}, {dtype}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(f"{stem}-{dtype}.png", dpi=120)
        plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "bench" / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    name = torch.cuda.get_device_name()
    results = {
        "device": name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_1gib_gbps": copy_1gib(),
        "points": [],
    }
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for rows, cols in SHAPES:
            p = point(dtype, rows, cols)
            results["points"].append(p)
            print(
                f"bench: {p['dtype']:>8} {rows:>6} x {cols:<6} {p['kernel_gbps']:6.0f} GB/s "
                f"({p['vs_torch']:.2f}x torch, {p['vs_copy']:.2f} of copy)"
                + ("" if p["correct"] else f" WRONG max_abs_err={p['max_abs_err']:.2e}"),
                flush=True,
            )
            torch.cuda.empty_cache()
    results["profiling"] = profiling_cost()
    print(f"bench: profiling {json.dumps(results['profiling'])}")

    stem = args.out / name.lower().replace(" ", "-")
    write_atomic(stem.with_suffix(".json"), json.dumps(results, indent=2) + "\n")
    write_atomic(stem.with_suffix(".md"), markdown(results))
    plot(results, stem)
    print(f"bench: wrote {stem}.json, {stem}.md and {stem}-<dtype>.png")
    if not all(p["correct"] for p in results["points"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

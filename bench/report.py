"""Tables, plots and docs/performance.md from a sweep's JSON; no GPU needed.

    python bench/report.py [bench/results/<device>.json ...]   (or: make bench-report)
    python bench/report.py --merge PART.json PART.json ...     (make bench-report MERGE=...)

With no argument, every JSON under bench/results/. Writes beside each JSON a Markdown
table (<device>.md) and one plot per dtype (<device>-<dtype>.png, and -logits.png), and
rewrites docs/performance.md between its performance markers from the first JSON given.
--merge joins subset runs (`make bench POINTS=...`, for machines that limit a job's
time) of one device and software, whose subsets together make a whole run, into the
whole run's JSON (it names its parts under "merged_from"), then reports it.
Exit status: 0 done, 2 no results, or parts that do not make one whole run.
"""

import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from summary.files import write_output  # noqa: E402

PEERS = ["torch.softmax", "torch.compile", "liger", "quack"]  # quack: where asked for
CANDIDATES = ["softmax.py", *PEERS, "copy"]
BEGIN, END = "<!-- performance: begin -->", "<!-- performance: end -->"
PAGE = ROOT / "docs" / "performance.md"
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
POINTS = ("rows", "logits", "backward", "host", "profiling")  # a whole run's subsets
SAME = ("device", "l2_bytes", "torch", "triton", "rounds", "loop_calls", "host_calls")
# What the report reads of each point, and of a part each subset's run brings.
POINT_KEYS = ("dtype", "rows", "cols", "path", "device_us", "loop_us")
BRINGS = {"backward": "backward", "host": "host", "profiling": "profiling"}
# The host table's rows: each call as its caller writes it.
HOST_CALLS = {
    "softmax.py": "softmax.py's `softmax()`",
    "torch.softmax": "`torch.softmax`",
    "torch.compile": "`torch.compile` (Inductor)",
    "liger": "Liger",
    "copy": "a copy kernel's `kernel[grid](...)`",
    "kernel[grid]": "`softmax_kernel[grid](...)` alone: the general path's launch",
    "compiled[grid]": "`compiled[grid](...)` alone: `softmax()`'s launch",
    "softmax_op.softmax": "`softmax_op.softmax`, no autograd",
    "softmax_op.softmax, requires_grad": "`softmax_op.softmax` of a tensor that `requires_grad`",
    "op": "the op `softmax_op.softmax_op`, called directly",
    "empty op": "a `triton_op` that launches nothing",
    "empty_like": "`torch.empty_like` alone",
}


def slug(device):
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def gbps(p, us):
    """The bytes a softmax must move, input read once and output written once, per us."""
    return 2 * p["rows"] * p["cols"] * ITEMSIZE[p["dtype"]] / us / 1e3


def ratios(p):
    """softmax.py's device time against the best peer's and the copy's (above 1: faster)."""
    dev = p["device_us"]
    best = min(dev[c] for c in PEERS if c in dev)
    return best / dev["softmax.py"], dev["copy"] / dev["softmax.py"]


def progress_line(p):
    peer, copy = ratios(p)
    wrong = "" if p["correct"] else f"  WRONG max_abs_err={p['max_abs_err']:.2e}"
    return (
        f"sweep: {p['dtype']:>8} {p['rows']:>6} x {p['cols']:<6} {p['path']:5}  device "
        f"{p['device_us']['softmax.py']:8.1f} us ({peer:.2f}x best peer, {copy:.2f} of copy)  "
        f"loop {p['loop_us']['softmax.py']:8.1f} us "
        f"(torch.softmax {p['loop_us']['torch.softmax']:.1f})" + wrong
    )


def cell(values, name, fmt="{:.1f}"):
    return fmt.format(values[name]) if name in values else "-"


def named(p):
    """A point as the tables name it: its dtype, rows and columns."""
    return f"{p['dtype']} {p['rows']} x {p['cols']}"


def points(results, kind):
    """The points of one set: "rows" (results before logits had a set of their own) or
    "logits" (tokens x vocabulary)."""
    return [p for p in results["points"] if p.get("set", "rows") == kind]


def table(results):
    head = (
        f"| dtype | rows x cols | path | device us: {' / '.join(CANDIDATES)} | softmax.py "
        f"GB/s | vs best peer | of copy | loop us: {' / '.join(CANDIDATES[:-1])} |"
    )
    lines = [head, "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for p in points(results, "rows"):
        peer, copy = ratios(p)
        device = " / ".join(cell(p["device_us"], c) for c in CANDIDATES)
        loop = " / ".join(cell(p["loop_us"], c) for c in CANDIDATES[:-1])
        # Replayed from a graph, an input that fits in L2 is read from it, not from memory.
        cached = 2 * p["rows"] * p["cols"] * ITEMSIZE[p["dtype"]] <= results.get("l2_bytes", 0)
        rate = f"{gbps(p, p['device_us']['softmax.py']):.0f}" + (" (L2)" if cached else "")
        lines.append(
            f"| {p['dtype']} | {p['rows']} x {p['cols']} | {p['path']} | {device} "
            f"| {rate} | {peer:.2f} | {copy:.2f} | {loop} |"
        )
    return "\n".join(lines) + "\n"


def left_out(p, name):
    """Why a peer has no time at a point: it refused the shape, or got it wrong."""
    note = p.get("notes", {}).get(name)
    if note is None:
        return "-"
    return "wrong" if note.startswith("wrong") else "refuses"


def logits_table(results):
    """The logits points: fractions of the copy's speed, softmax.py against QuACK (where
    it ran) and the best other peer, and loop time beside device time."""
    lines = [
        "| dtype | tokens x vocabulary | path | softmax.py us | of copy | QuACK of copy "
        "| vs QuACK | vs best peer | loop us: softmax.py / torch.softmax / quack |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in points(results, "logits"):
        dev = p["device_us"]
        ours = dev["softmax.py"]
        peer, copy = ratios(p)
        ran = "quack" in dev
        quack = f"{dev['copy'] / dev['quack']:.2f}" if ran else left_out(p, "quack")
        vs = f"{dev['quack'] / ours:.2f}" if ran else left_out(p, "quack")
        loop = " / ".join(cell(p["loop_us"], c) for c in ("softmax.py", "torch.softmax", "quack"))
        lines.append(
            f"| {p['dtype']} | {p['rows']} x {p['cols']} | {p['path']} | {ours:.1f} | {copy:.2f} "
            f"| {quack} | {vs} | {peer:.2f} | {loop} |"
        )
    return "\n".join(lines) + "\n"


def logits_part(results, stem):
    if not points(results, "logits"):
        return ""
    return f"""
Logits, tokens x vocabulary, from decoding (1 and 16 rows, where loop time shows the
host's cost) to prefill and training; "vs QuACK" is QuACK's device time over softmax.py's
(above 1: softmax.py faster), where QuACK ran and was right. The path is long_rows.py's
plan as the run made it: "few rows" is few_rows.py's two launches, "tiles" the held
kernel (on an NVIDIA GPU from Hopper on, a run with "tiles" at 1 and 16 rows of up to
151936 columns predates few_rows.py, which docs/kernel.md times against it there):

{logits_table(results)}
![logits]({stem}-logits.png)
"""


def section(results, json_path):
    """docs/performance.md's generated part, markers included; links relative to docs/."""
    json_path = Path(json_path).resolve()
    rel = Path(os.path.relpath(json_path, PAGE.parent))
    shown = json_path.relative_to(ROOT) if json_path.is_relative_to(ROOT) else json_path
    stem = rel.with_suffix("")
    prof = results["profiling"]
    plots = " ".join(
        f"![{d}]({stem}-{d}.png)"
        for d in dict.fromkeys(p["dtype"] for p in points(results, "rows"))
    )
    return f"""{BEGIN}
Measured by `make bench` on an {results["device"]} (torch {results["torch"]}, Triton
{results["triton"]}), {results["rounds"]} rounds with the candidates interleaved, medians
kept (the [min, max] of each is in [`{shown}`]({rel})). GB/s counts the bytes a softmax
must move: the input read once and the output written once.

- **Device time** is one call's GPU time, by CUDA-graph replay
  (`triton.testing.do_bench_cudagraph`): no host cost leaks in. Replay leaves the input
  in L2 when it fits, as when the layer before has just written it.
- **Loop time** is the wall time per call over {results["loop_calls"]} back-to-back calls with one
  synchronize: what a caller sees. Where it is well above device time, the call is
  bound by the host's launch cost, not by the kernel.
- **copy** is a Triton kernel that reads and writes the same bytes, launched through
  Triton's own `kernel[grid](...)`: its device time is the ceiling, and its loop time
  shows what Triton's ordinary launch costs the host.
- **(L2)** marks a rate measured on an input and output that fit in the L2 cache
  ({results.get("l2_bytes", 0) / 2**20:.0f} MiB here): replayed, the input is read from it,
  and the rate can pass the memory's own peak.

{table(results)}{logits_part(results, stem)}
{host_part(results)}{backward_part(results)}
Profiling's cost at the default shape, whole processes (start-up, compilation and the
check included): `make profile` took {prof["profile_wall_s"]:.1f} s against
{prof["run_wall_s"]:.1f} s for `make run` ({prof["profile_vs_run"]:.2f}x, medians of 10
alternating rounds);
Proton measured the kernel at {prof["proton_kernel_us"]:.2f} us a launch against
{prof["device_us"]:.2f} us by graph replay.
{left_out_part(results)}

{plots}

A caller bound by launch cost (small inputs, loop time well above device time) gains
most by giving each call more work: batch rows from several inputs into one call, or
capture the steady-state sequence of calls in a CUDA graph (`torch.cuda.graphs`,
`torch.compile(mode="reduce-overhead")`), which replays every launch without the host.

Run it on your GPU with `make bench`: it writes `bench/results/<device>.json`, its table
and plots, and rewrites this page. `make bench POINTS=logits QUACK=1` runs a subset
(rows, logits, backward, host, profiling; QuACK as a peer where asked for) into a JSON
of its own, for machines that limit a job's time; `make bench-report MERGE='a.json b.json'`
joins subsets that together make a whole run. `make bench-report` redraws them all from
the JSONs, without a GPU.
{END}"""


def host_part(results):
    """Host cost per call at each shape measured, each call's ratio to torch.softmax, and
    the bounds: softmax() at most 2x torch.softmax, softmax_op.softmax within 1 us of it."""
    host = results["host"]
    calls = [c for c in HOST_CALLS if all(c in h["us"] for h in host)]
    shapes = " | ".join(f"{h['rows']} x {h['cols']}: us | vs torch.softmax" for h in host)
    lines = [f"| a call | {shapes} |", "| --- |" + " ---: | ---: |" * len(host)]
    for c in calls:
        cells = " | ".join(f"{h['us'][c]:.1f} | {h['vs_torch'][c]:.2f}x" for h in host)
        lines.append(f"| {HOST_CALLS[c]} | {cells} |")
    bounds = []
    for h in host:
        us, at = h["us"], f"at {h['rows']} x {h['cols']}"
        bound = f"{at}, `softmax()` {h['vs_torch']['softmax.py']:.2f}x `torch.softmax`"
        if "softmax_op.softmax" in us:
            more = us["softmax_op.softmax"] - us["softmax.py"]
            grad = us["softmax_op.softmax, requires_grad"]
            bound += f", `softmax_op.softmax` {more:+.1f} us over it, {grad:.1f} us with autograd"
        bounds.append(bound)
    rounds = results.get("host_rounds", results["rounds"])
    step = results.get("step", {}).get("us")
    stepped = step and (
        f"\nA small model's step, four products and four `softmax_op.softmax` calls on 16 x "
        f"64 inputs (`model_step`), loop time: {step['eager']:.1f} us eager, "
        f'{step["compiled"]:.1f} us compiled whole by `torch.compile(mode="reduce-overhead")`.\n'
    )
    return f"""Host cost per call (loop time, the GPU waiting on the host), us, in {rounds}
interleaved rounds of {results["host_calls"]} calls; the ratios to torch.softmax are taken
within each round (the host's speed drifts between rounds), then their median kept:

{chr(10).join(lines)}

Against its design limits, `softmax()` at most 2x `torch.softmax` and `softmax_op.softmax`
within 1 us of `softmax()` without autograd: {"; ".join(bounds)}. (`softmax()` tests
that a model's input is what its kernel was compiled for, allocates the output, as
torch.softmax does, and launches the kernel compiled ahead, as Triton's tutorial 02
does; any other input is checked and launched by `kernel[grid](...)`, which binds and
specializes its arguments at each call.)
{stepped or ""}"""


def backward_part(results):
    """The backward's device time against torch's, where the run holds it."""
    if not (backward := results.get("backward")):
        return ""
    lines = ["| dtype | rows x cols | softmax_op us | torch us | speedup |"]
    lines.append("| --- | --- | ---: | ---: | ---: |")
    for b in backward:
        ours, theirs = b["device_us"]["softmax.py"], b["device_us"]["torch"]
        shape = f"{b['dtype']} | {b['rows']} x {b['cols']}"
        lines.append(f"| {shape} | {ours:.1f} | {theirs:.1f} | {theirs / ours:.2f} |")
    return f"""
The backward (`softmax_op.softmax_backward`) against torch's on the same y and dy,
device time by graph replay, in the same rounds:

{chr(10).join(lines)}
"""


def left_out_part(results):
    """The peers left out at some points, each point named as the tables name it."""
    left = {}
    for p in results["points"]:
        for peer, note in p.get("notes", {}).items():
            how = "got wrong" if note.startswith("wrong") else "refused"
            left.setdefault(f"{peer} {how}", []).append(named(p))
    said = "; ".join(f"{k} {', '.join(v)}" for k, v in left.items())
    return f"Left out: {said}." if left else ""


def plot(results, stem):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"softmax.py": "C0", "torch.softmax": "C1", "torch.compile": "C2", "liger": "C3"}
    styles["quack"] = "C4"  # where asked for
    for dtype in dict.fromkeys(p["dtype"] for p in points(results, "rows")):
        pts = [p for p in points(results, "rows") if p["dtype"] == dtype]
        fig, (dev_ax, loop_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
        for name, color in {**styles, "copy": "0.5"}.items():
            have = [p for p in pts if name in p["device_us"]]
            cols = [p["cols"] for p in have]
            mark, style = "x" if name == "copy" else "o", dict(color=color, label=name, ls="none")
            dev_ax.plot(cols, [gbps(p, p["device_us"][name]) for p in have], mark, **style)
            if name != "copy":
                loop_ax.plot(cols, [p["loop_us"][name] for p in have], mark, **style)
        for p in pts:
            if p["rows"] != 4096:
                dev_ax.annotate(
                    f"{p['rows']} rows",
                    (p["cols"], gbps(p, p["device_us"]["copy"])),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(3, 4),
                )
        dev_ax.set_ylabel("GB/s by device time (input read + output written)")
        dev_ax.set_ylim(bottom=0)
        loop_ax.set_ylabel("loop time per call, us (host included)")
        loop_ax.set_yscale("log")
        for ax in (dev_ax, loop_ax):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("columns (4096 rows unless marked)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"{results['device']}, {dtype}")
        fig.tight_layout()
        fig.savefig(f"{stem}-{dtype}.png", dpi=100)
        plt.close(fig)
    if logits := points(results, "logits"):
        plot_logits(plt, results, logits, stem)


def plot_logits(plt, results, logits, stem):
    """Fraction of the copy's speed against the vocabulary, a line for each token count:
    softmax.py solid, QuACK dashed where it ran; a panel a dtype."""
    dtypes = list(dict.fromkeys(p["dtype"] for p in logits))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4.5), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        pts = [p for p in logits if p["dtype"] == dtype]
        vocabs = sorted({p["cols"] for p in pts})
        for i, rows in enumerate(sorted({p["rows"] for p in pts})):
            for name, style in (("softmax.py", "-o"), ("quack", "--x")):
                have = [p for p in pts if p["rows"] == rows and name in p["device_us"]]
                x = [vocabs.index(p["cols"]) for p in have]
                y = [p["device_us"]["copy"] / p["device_us"][name] for p in have]
                if have:
                    ax.plot(x, y, style, color=f"C{i}", label=f"{name}, {rows} rows")
        ax.set_xticks(range(len(vocabs)), [str(v) for v in vocabs])
        ax.set_xlabel("vocabulary (columns)")
        ax.set_ylabel("fraction of a copy's speed, device time")
        ax.set_ylim(0, 1.2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title(dtype)
    fig.suptitle(f"{results['device']}, logits")
    fig.tight_layout()
    fig.savefig(f"{stem}-logits.png", dpi=100)
    plt.close(fig)


def update_page(text, page=PAGE):
    old = page.read_text()
    start, end = old.index(BEGIN), old.index(END) + len(END)
    write_output(page, old[:start] + text + old[end:])


def write_all(json_path):
    results = json.loads(Path(json_path).read_text())
    stem = Path(json_path).with_suffix("")
    logits = logits_table(results) if points(results, "logits") else ""
    write_output(stem.with_suffix(".md"), table(results) + ("\n" + logits if logits else ""))
    plot(results, stem)
    update_page(section(results, json_path))
    print(f"report: wrote {stem}.md, {stem}-<dtype>.png and {PAGE.relative_to(ROOT)}")


def whole_runs(folder=ROOT / "bench" / "results"):
    """The JSONs of whole sweeps in folder; a subset's (sweep.py --points) names its points,
    and a ceiling's (bench/ceiling.py) has none."""
    runs = [(p, json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]
    return [p for p, r in runs if "points" in r and "subset" not in r]


def malformed(p):
    """What a point lacks of what the report reads, or None."""
    if not isinstance(p, dict):
        return "is not an object"
    if missing := [k for k in POINT_KEYS if k not in p]:
        return f"lacks {', '.join(missing)}"
    if p["dtype"] not in ITEMSIZE or not all(isinstance(p[k], int) for k in ("rows", "cols")):
        return "has no dtype, rows and cols of a sweep"
    times = (p["device_us"], p["loop_us"])
    if not all(isinstance(t, dict) and {"softmax.py", "copy"} <= set(t) for t in times):
        return "has no device and loop times of softmax.py and the copy"
    if not set(PEERS) & set(p["device_us"]):
        return "has no peer's device time"
    return None


def check_part(path, run, seen):
    """Raises ValueError where a part lacks what its subset brings, or a point of it is
    malformed, of a set its subset does not name, or one another part (seen: the point's
    part, by set, dtype and shape) has."""
    if lacks := [BRINGS[s] for s in run["subset"] if BRINGS.get(s, "points") not in run]:
        raise ValueError(f"{path}: its subset {', '.join(run['subset'])} lacks {lacks[0]}")
    for i, p in enumerate(run["points"], 1):
        if why := malformed(p):
            raise ValueError(f"{path}: its point {i} {why}")
        kind, name = p.get("set", "rows"), named(p)
        if kind not in run["subset"]:
            raise ValueError(f"{path}: its {kind} point {name} is outside its subset")
        if (key := (kind, name)) in seen:
            raise ValueError(f"{path} repeats the {kind} point {name} of {seen[key]}")
        seen[key] = path


def read_parts(parts):
    """The parts' runs; ValueError where one is no file, no sweep's part, or of another
    device or software than the first."""
    for p in parts:  # a pipe or a device would be read for ever
        if not Path(p).is_file():
            raise ValueError(f"{p} is not a regular file")
    runs = [json.loads(Path(p).read_text()) for p in parts]
    for path, run in zip(parts, runs, strict=True):
        if (
            not isinstance(run, dict)
            or not isinstance(run.get("points"), list)
            or not isinstance(run.get("device"), str)
        ):
            raise ValueError(f"{path} is not a sweep's results")
        if "subset" not in run:
            raise ValueError(f"{path} is a whole run, not a part of one")
        subset = run["subset"]
        if not isinstance(subset, list) or not all(isinstance(s, str) for s in subset):
            raise ValueError(f"{path}: its subset is not a list of names")
        if differ := [k for k in SAME if run.get(k) != runs[0].get(k)]:
            raise ValueError(f"{path} differs from {parts[0]} in {', '.join(differ)}")
    return runs


def merge(parts):
    """The whole run that subset runs make together; ValueError where they do not: another
    device or software, a subset twice or missing, a subset's values missing, or a point
    malformed or given twice."""
    runs = read_parts(parts)
    subsets = [s for run in runs for s in run["subset"]]
    if sorted(subsets) != sorted(POINTS):
        raise ValueError(
            f"the parts' subsets {', '.join(subsets)} are not {', '.join(POINTS)}, each once"
        )
    seen = {}
    for path, run in zip(parts, runs, strict=True):
        check_part(path, run, seen)
    whole = {"points": [p for run in runs for p in run["points"]]}
    for run in runs:
        whole.update({k: v for k, v in run.items() if k not in ("subset", "points")})
    whole["merged_from"] = [Path(p).name for p in parts]
    try:  # the report of it, as write_all() will make it
        section(whole, Path(parts[0]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise ValueError(f"the parts make no report: {type(e).__name__}: {e}") from e
    return whole


def main(argv):
    if argv[:1] == ["--merge"]:
        parts = argv[1:]
        try:
            if not parts:
                raise ValueError("--merge needs the parts' JSON files")
            whole = merge(parts)
            path = Path(parts[0]).parent / f"{slug(whole['device'])}.json"
        except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError included
            print(f"report: error: {' '.join(str(e).split())[:300]}", file=sys.stderr)
            return 2
        if any(path.resolve() == Path(p).resolve() for p in parts):
            print(f"report: error: the whole run would overwrite its part {path}", file=sys.stderr)
            return 2
        write_output(path, json.dumps(whole, indent=1) + "\n")
        argv = [str(path)]
    paths = [Path(a) for a in argv] or whole_runs()
    if not paths:
        print("report: error: no results: run make bench on a GPU first", file=sys.stderr)
        return 2
    for path in reversed(paths):  # the first given writes the page last
        write_all(path)
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    if status:
        raise SystemExit(status)

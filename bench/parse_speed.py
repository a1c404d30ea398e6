"""How long parse_hatchet.py takes on large python-context captures, next to merely
decoding the same JSON with json.load, each as a whole process (start-up included):
trees of two shapes, and traces of a training loop's shape on one stream and on many.

    python bench/parse_speed.py        (or: make bench-parse; no GPU needed)

Prints a line for each shape, writes the lines to bench/parse-speed.txt and rewrites
the table in docs/summary.md from them: the two never disagree.
"""

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from summary.files import write_output  # noqa: E402

LIB = "/workspace/venv/lib/python3.12/site-packages"
TRITON_FRAMES = [
    f"{LIB}/triton/runtime/jit.py:744@run",
    f"{LIB}/triton/backends/nvidia/driver.py:713@__call__",
]


def frame(name, *children, **metrics):
    return {
        "frame": {"name": name, "type": "function"},
        "metrics": metrics,
        "children": list(children),
    }


def tree(sites):
    """A tree shaped like a training script's: each call site is a chain of user and
    Triton frames above a few kernels."""

    def launch(i):
        leaves = [
            frame(f"kernel_{i % 97}_{j}", count=3, **{"time (ns)": 1000 + j}) for j in range(3)
        ]
        return frame(
            f"/workspace/app/model.py:{i}@layer",
            frame(TRITON_FRAMES[0], frame(TRITON_FRAMES[1], *leaves)),
        )

    body = [frame(f"/workspace/app/train.py:{100 + i // 50}@step", launch(i)) for i in range(sites)]
    root = frame(
        "ROOT",
        frame(
            "<frozen runpy>:198@_run_module_as_main",
            frame("/workspace/app/train.py:5@<module>", *body),
        ),
        count=0,
    )
    return [root, {"CUDA": {"0": {"arch": "90", "num_sms": 132}}}]


def deep_tree(sites):
    """Fewer, deeper call sites: each a recursion of user frames twenty deep (a model's
    nested modules) above sixty kernels; sites // 12 of them make a tree about the size of
    tree(sites)."""

    def launch(i):
        node = frame(
            TRITON_FRAMES[0],
            frame(
                TRITON_FRAMES[1],
                *(
                    frame(f"kernel_{i % 97}_{j}", count=3, **{"time (ns)": 1000 + j})
                    for j in range(60)
                ),
            ),
        )
        for depth in range(20):
            node = frame(f"/workspace/app/layers.py:{10 + depth}@forward", node)
        return frame(f"/workspace/app/model.py:{i}@layer", node)

    body = [launch(i) for i in range(sites // 12)]
    root = frame("ROOT", frame("/workspace/app/train.py:5@<module>", *body), count=0)
    return [root, {"CUDA": {"0": {"arch": "90", "num_sms": 132}}}]


def recursion_tree(calls, depth):
    """calls recursions depth frames deep, each frame launching a kernel before it
    recurses: every frame a call site (JSON nests two levels a frame; json.load's
    decoder stops near 1000 levels, so depth stays under 450)."""

    def level(i, d):
        kernel = frame(f"kernel_{i % 7}", count=1, **{"time (ns)": 900 + d})
        launch = frame("/workspace/app/rec.py:7@walk", kernel)
        if d == depth:
            return launch
        return frame("/workspace/app/rec.py:8@walk", level(i, d + 1), launch)

    body = [frame(f"/workspace/app/main.py:{i}@main", level(i, 1)) for i in range(calls)]
    return [frame("ROOT", *body, count=0), {"CUDA": {"0": {"arch": "90", "num_sms": 132}}}]


def loop_trace(sites, launches, streams=1):
    """A training loop's trace: sites call sites taking turns, launches kernels in all,
    on streams streams (launches overlap when there are several)."""
    events = []
    for i in range(launches):
        site = i % sites
        stack = [
            "ROOT",
            "/workspace/app/train.py:5@<module>",
            f"/workspace/app/model.py:{site}@layer",
            f"kernel_{site}",
        ]
        events.append(
            {
                "name": f"kernel_{site}",
                "cat": "kernel",
                "ph": "X",
                "tid": i % streams,
                "ts": round(i * 9.0 / streams, 3),
                "dur": 5.5 + site % 7,
                "args": {"call_stack": stack},
            }
        )
    return {"displayTimeUnit": "us", "traceEvents": events}


def intra_trace(launches):
    """The H200's make intra-trace capture (tests/fixtures, 2 launches of 4096 CTAs x 2
    warps x 4 scopes) repeated to the given number of launches, each later in time."""
    import gzip

    data = json.loads(
        gzip.decompress(
            (HERE.parent / "tests" / "fixtures" / "h200-intra.chrome_trace.gz").read_bytes()
        )
    )
    events = data["traceEvents"]
    data["traceEvents"] = [
        {**e, "ts": e["ts"] + k * 1e5} for k in range(launches // 2) for e in events
    ]
    return data


def size(data):
    if isinstance(data, dict):  # a trace: its events
        return f"{len(data['traceEvents'])} events"
    return f"{nodes(data[0])} nodes"


def nodes(node):
    return 1 + sum(nodes(c) for c in node["children"])


def wall(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def paired(a, b, repeats=9):
    """Medians of a's and b's wall times, and of a/b pair by pair: the two run in turn,
    so a machine whose speed drifts slows both alike."""
    pairs = [(wall(a), wall(b)) for _ in range(repeats)]
    return (
        statistics.median(t[0] for t in pairs),
        statistics.median(t[1] for t in pairs),
        statistics.median(x / y for x, y in pairs),
    )


RESULTS = HERE / "parse-speed.txt"
DOC = HERE.parent / "docs" / "summary.md"
# The table's place in the document: between these two lines.
BEGIN, END = "<!-- parse-speed table: bench/parse-speed.txt -->\n", "<!-- end -->\n"


def markdown_table(results):
    """docs/summary.md's table, from the results file's text."""
    rows = [
        "| shape | size | json.load | parse_hatchet.py | ratio |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for line in results.splitlines():
        shape, size, unit, mib, load, parse, ratio = re.match(
            r"parse_speed: (.*), (\d+) (nodes|events), ([\d.]+) MiB: json.load ([\d.]+) s, "
            r"parse_hatchet.py ([\d.]+) s, ratio ([\d.]+)",
            line,
        ).groups()
        rows.append(
            f"| {shape} | {int(size):,} {unit}, {mib} MiB | {load} s | {parse} s | {ratio} |"
        )
    return "\n".join(rows) + "\n"


def with_table(doc, results):
    """doc with the text between BEGIN and END replaced by the table of results."""
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}{markdown_table(results)}{END}{tail}"


def main():
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        shapes = [
            ("tree", lambda: tree(8000), ".hatchet"),
            ("tree", lambda: tree(16000), ".hatchet"),
            ("deep_tree", lambda: deep_tree(8000), ".hatchet"),
            ("recursion, a kernel at every frame", lambda: recursion_tree(120, 400), ".hatchet"),
            ("loop trace, 200 sites", lambda: loop_trace(200, 200_000), ".chrome_trace"),
            ("loop trace, 8 streams", lambda: loop_trace(200, 200_000, 8), ".chrome_trace"),
            ("instrumentation trace, 10 launches", lambda: intra_trace(10), ".chrome_trace"),
        ]
        for i, (shape, make, suffix) in enumerate(shapes):
            path = Path(tmp, f"capture{i}{suffix}")
            data = make()
            path.write_text(json.dumps(data, sort_keys=True))
            parse, decode, ratio = paired(
                [sys.executable, str(HERE.parent / "parse_hatchet.py"), str(path)],
                [sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"],
            )
            mib = path.stat().st_size / 2**20
            lines.append(
                f"parse_speed: {shape}, {size(data)}, {mib:.1f} MiB: "
                f"json.load {decode:.3f} s, "
                f"parse_hatchet.py {parse:.3f} s, ratio {ratio:.2f} (median of pairs)"
            )
            print(lines[-1], flush=True)
    results = "\n".join(lines) + "\n"
    write_output(RESULTS, results)
    write_output(DOC, with_table(DOC.read_text(), results))
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

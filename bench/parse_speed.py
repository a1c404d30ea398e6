"""How long parse_hatchet.py takes on a large python-context tree, next to merely
decoding the same JSON, each as a whole process (start-up included).

    python bench/parse_speed.py        (or: make bench-parse; no GPU needed)
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
        node = frame(TRITON_FRAMES[0], frame(TRITON_FRAMES[1], *(
            frame(f"kernel_{i % 97}_{j}", count=3, **{"time (ns)": 1000 + j}) for j in range(60)
        )))  # fmt: skip
        for depth in range(20):
            node = frame(f"/workspace/app/layers.py:{10 + depth}@forward", node)
        return frame(f"/workspace/app/model.py:{i}@layer", node)

    body = [launch(i) for i in range(sites // 12)]
    root = frame("ROOT", frame("/workspace/app/train.py:5@<module>", *body), count=0)
    return [root, {"CUDA": {"0": {"arch": "90", "num_sms": 132}}}]


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
    return (statistics.median(t[0] for t in pairs), statistics.median(t[1] for t in pairs),
            statistics.median(x / y for x, y in pairs))  # fmt: skip


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for shape, sites in ((tree, 8000), (tree, 16000), (deep_tree, 8000)):
            path = Path(tmp, f"t{sites}.hatchet")
            data = shape(sites)
            path.write_text(json.dumps(data, sort_keys=True))
            parse, decode, ratio = paired(
                [sys.executable, str(HERE.parent / "parse_hatchet.py"), str(path)],
                [sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"],
            )
            size = path.stat().st_size / 2**20
            print(
                f"parse_speed: {shape.__name__}, {nodes(data[0])} nodes, {size:.1f} MiB: "
                f"json.load {decode:.3f} s, "
                f"parse_hatchet.py {parse:.3f} s, ratio {ratio:.2f} (median of pairs)"
            )


if __name__ == "__main__":
    main()

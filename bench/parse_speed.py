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


def nodes(node):
    return 1 + sum(nodes(c) for c in node["children"])


def wall(cmd, repeats=7):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for sites in (8000, 16000):
            path = Path(tmp, f"t{sites}.hatchet")
            data = tree(sites)
            path.write_text(json.dumps(data, sort_keys=True))
            decode = wall([sys.executable, "-c", f"import json; json.load(open({str(path)!r}))"])
            parse = wall([sys.executable, str(HERE.parent / "parse_hatchet.py"), str(path)])
            size = path.stat().st_size / 2**20
            print(
                f"parse_speed: {nodes(data[0])} nodes, {size:.1f} MiB: json.load {decode:.3f} s, "
                f"parse_hatchet.py {parse:.3f} s, ratio {parse / decode:.2f}"
            )


if __name__ == "__main__":
    main()

"""Summarise Proton .hatchet trees as JSON: aorta's five keys, then per kernel and per call site.

    python parse_hatchet.py PATH [-o FILE] [--table] [--folded FILE] [--top N]

PATH is a .hatchet file or a directory searched recursively for *.hatchet (per-rank
files of one run add up). The five proton_* keys follow ROCm aorta's Proton collector
to the letter, so a capture made here and one made by `aorta sweep run` report the
same numbers; one rule is ours: a node named ROOT is never a kernel.

Exit status: 0 at least one timed kernel found; 1 none found (the JSON still names
proton_artifact_dir, stderr says why); 2 usage errors or a PATH that does not exist.
"""

import argparse
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

try:
    import cxxfilt
except ImportError:  # without it, C++ kernel names stay mangled
    cxxfilt = None

TOP_N = 5  # aorta's length of proton_top_kernels
TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
# A python-context frame: "file:line@function".
FRAME = re.compile(r"(?P<file>.*):(?P<line>\d+)@(?P<func>.*)")
# Frames that are not the user's own: runpy and other <frozen ...> code, the standard
# library, anything installed (Triton, Proton, torch), and source builds of the two.
LIBRARY = re.compile(r"^<|/(site|dist)-packages/|/lib/python\d|/python/triton/|/torch/")


def time_ms(metrics):
    """The first usable `time (<unit>)` metric in ms, as aorta reads it, else None."""
    for key, value in metrics.items():
        head, _, tail = key.partition("(")
        factor = TIME_UNIT_MS.get(tail.rstrip(")").strip().lower())
        if head.strip().lower() != "time" or factor is None:
            continue
        try:
            ms = float(value) * factor
        except (TypeError, ValueError, OverflowError):
            continue
        if math.isfinite(ms) and ms >= 0:
            return ms
    return None


def launches(metrics):
    """A leaf's `count` as aorta reads it, or None when missing or unreadable."""
    try:
        count = float(metrics["count"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return int(count) if math.isfinite(count) and count >= 0 else None


def add_count(total, count):
    # One unreadable count makes the kernel's total unknown for good.
    return None if total is None or count is None else total + count


_frames = {}


def classify(name):
    """(is a python frame, the user's label for it or None). Cached: names repeat."""
    if name not in _frames:
        m = FRAME.fullmatch(name)
        user = m and not LIBRARY.search(m["file"]) and not m["func"].startswith("__proton")
        label = f"{os.path.basename(m['file'])}:{m['line']} {m['func']}" if user else None
        _frames[name] = (m is not None, label)
    return _frames[name]


def leaves(roots):
    """Every leaf in aorta's order (depth first, children in file order), each with the
    chain of user frames above it; and whether the tree is python-context."""
    found, python = [], False
    stack = [(root, ()) for root in reversed(roots)]
    while stack:
        node, chain = stack.pop()
        if not isinstance(node, dict):
            continue
        frame, children = node.get("frame"), node.get("children")
        frame = frame if isinstance(frame, dict) else None
        if isinstance(children, list) and children:
            is_frame, label = classify(str(frame.get("name"))) if frame else (False, None)
            python |= is_frame
            chain = (*chain, label) if label else chain
            stack.extend((child, chain) for child in reversed(children))
        elif frame is not None and isinstance(node.get("metrics"), dict):
            found.append((chain, str(frame.get("name") or "").strip(), node["metrics"]))
    return found, python


def read(path):
    """The tree roots and device records of one .hatchet file; raises ValueError."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    roots = data if isinstance(data, list) else [data]
    if not any(isinstance(r, dict) and "frame" in r for r in roots):
        raise ValueError("not a Proton tree (no frame at the top level)")
    devices = []
    for record in roots:
        if isinstance(record, dict) and "frame" not in record:
            for kind, by_id in record.items():
                for dev_id, info in (by_id if isinstance(by_id, dict) else {}).items():
                    devices.append(device(kind, dev_id, info))
    return roots, devices


def device(kind, dev_id, info):
    info = info if isinstance(info, dict) else {}
    mhz = lambda k: info[k] / 1000 if isinstance(info.get(k), (int, float)) else None  # noqa: E731
    return {
        "type": kind,
        "id": dev_id,
        "arch": info.get("arch"),
        "sm_count": info.get("num_sms"),  # CUs on AMD
        "clock_mhz": mhz("clock_rate"),
        "memory_clock_mhz": mhz("memory_clock_rate"),
        "memory_bus_bits": info.get("bus_width"),
    }


def readable(name):
    """A C++ kernel name demangled, without its return type and parameters, and with
    nested template arguments shortened to <…> (all of them, if it is still long)."""
    if cxxfilt is None or not name.startswith("_Z"):
        return name
    try:
        name = cxxfilt.demangle(name)
    except cxxfilt.Error:
        return name
    if name.endswith(")"):  # drop the parameter list: the last balanced (...)
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = name.removeprefix("void ")
    short = _elide_templates(name, 2)
    return short if len(short) <= 100 else _elide_templates(name, 1)


def _elide_templates(name, keep):
    """name with template arguments nested `keep` or more levels deep replaced by …"""
    out, depth = [], 0
    for ch in name:
        if ch == ">":
            depth -= 1
        if depth < keep:
            out.append(ch)
        elif depth == keep and out[-1] != "…":
            out.append("…")
        if ch == "<":
            depth += 1
    return "".join(out).replace(" >", ">")


def summarize(paths, artifact_dir):
    """The JSON summary of the given files, the kernels under each chain of user frames
    (the empty chain too, for --folded), and a one-line problem or None."""
    summary = {"proton_artifact_dir": artifact_dir}
    kernels, sites, devices, problems = {}, {}, [], []
    python = False
    for path in paths:
        try:
            roots, file_devices = read(path)
        except ValueError as e:
            problems.append(f"{path}: {e}")
            continue
        devices += [d for d in file_devices if d not in devices]
        found, file_python = leaves(roots)
        python |= file_python
        per_file = {}  # summed per file first, then across files, as aorta adds them
        for chain, name, metrics in found:
            ms = time_ms(metrics)
            if not name or name == "ROOT" or ms is None:
                continue
            k = per_file.setdefault(name, {"ms": 0.0, "launches": 0, "bytes": 0, "flops": 0})
            k["ms"] += ms
            k["launches"] = add_count(k["launches"], launches(metrics))
            for key, value in metrics.items():
                if (key == "bytes" or key.startswith("flops")) and isinstance(value, int | float):
                    k["bytes" if key == "bytes" else "flops"] += value
            site = sites.setdefault(chain, {}).setdefault(name, {"launches": 0, "ms": 0.0})
            site["ms"] += ms
            site["launches"] = add_count(site["launches"], launches(metrics))
        for name, k in per_file.items():
            total = kernels.setdefault(name, {"ms": 0.0, "launches": 0, "bytes": 0, "flops": 0})
            total["ms"] += k["ms"]
            total["launches"] = add_count(total["launches"], k["launches"])
            total["bytes"] += k["bytes"]
            total["flops"] += k["flops"]

    if len(problems) < len(paths):  # a bad file beside good ones is only skipped
        for problem in problems:
            print(f"parse_hatchet: warning: skipped {problem}", file=sys.stderr)
    if not paths:
        return summary, sites, "no .hatchet file found"
    if not kernels:
        if len(problems) == len(paths):
            return summary, sites, f"no readable .hatchet file ({problems[0]})"
        return (
            summary,
            sites,
            (
                "no timed kernel in the tree: ROOT only (a pinned AMD backend in cli mode, "
                "or an env-mode payload that never called proton.start())"
            ),
        )
    ranked = sorted(kernels.items(), key=lambda item: item[1]["ms"], reverse=True)
    gpu_ms = sum(k["ms"] for k in kernels.values())
    if not math.isfinite(gpu_ms):
        return summary, sites, "kernel times add up to infinity"
    if all(k["launches"] is not None for k in kernels.values()):
        summary["proton_kernel_count"] = sum(k["launches"] for k in kernels.values())
    summary["proton_gpu_time_ms"] = gpu_ms
    summary["proton_top_kernel_ms"] = ranked[0][1]["ms"]
    summary["proton_top_kernels"] = [name for name, _ in ranked[:TOP_N]]
    summary["proton_context"] = "python" if python else "shadow"
    summary["proton_device"] = devices
    summary["proton_kernels"] = [kernel_row(name, k, gpu_ms) for name, k in ranked]
    summary["proton_callsites"] = sorted(
        (
            {
                "callsite": " > ".join(chain),
                "ms": sum(k["ms"] for k in by_name.values()),
                "kernels": [{"name": n, **k} for n, k in by_name.items()],
            }
            for chain, by_name in sites.items()
            if chain  # kernels with no user frame above them (shadow context)
        ),
        key=lambda site: site["ms"],
        reverse=True,
    )
    return summary, sites, None


def kernel_row(name, k, gpu_ms):
    seconds = k["ms"] / 1e3
    row = {
        "name": name,
        "readable_name": readable(name),
        "launches": k["launches"],
        "total_ms": k["ms"],
        "mean_us": k["ms"] * 1e3 / k["launches"] if k["launches"] else None,
        "share": k["ms"] / gpu_ms if gpu_ms else 0.0,
    }
    if k["bytes"]:
        row["gbyte_per_s"] = k["bytes"] / seconds / 1e9 if seconds else None
    if k["flops"]:
        row["flop_per_s"] = k["flops"] / seconds if seconds else None
    return row


def table(summary, top):
    """The kernels, then the call sites, as aligned text."""
    lines = [f"{'ms':>10} {'share':>6} {'launches':>8} {'mean us':>9} {'GB/s':>8}  kernel"]
    for k in summary["proton_kernels"][:top]:
        gbs = f"{k['gbyte_per_s']:8.0f}" if k.get("gbyte_per_s") else f"{'':8}"
        mean = f"{k['mean_us']:9.2f}" if k["mean_us"] is not None else f"{'?':>9}"
        n = k["launches"] if k["launches"] is not None else "?"
        lines.append(
            f"{k['total_ms']:10.4f} {k['share']:6.1%} {n:>8} {mean} {gbs}  {k['readable_name']}"
        )
    if summary["proton_callsites"]:
        lines += ["", f"{'ms':>10} {'launches':>8}  call site > kernel"]
        for site in summary["proton_callsites"][:top]:
            lines.append(f"{site['ms']:10.4f} {'':8}  {site['callsite']}")
            for k in site["kernels"]:
                n = k["launches"] if k["launches"] is not None else "?"
                lines.append(f"{k['ms']:10.4f} {n:>8}    > {readable(k['name'])}")
    return "\n".join(lines) + "\n"


def folded(chains):
    """Folded stacks, `frame;frame;kernel <ns>`, as flamegraph.pl and speedscope read."""
    return "".join(
        f"{';'.join((*chain, readable(name)))} {round(k['ms'] * 1e6)}\n"
        for chain, by_name in chains.items()
        for name, k in by_name.items()
    )


def to_json(summary):
    """One key a line, and one list item a line: readable, and written by json's C
    encoder (indent= falls back to its pure-Python one, several times slower)."""
    dump = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    lines = []
    for key, value in summary.items():
        if isinstance(value, list) and value:
            items = ",\n".join(f"    {dump(item)}" for item in value)
            lines.append(f"  {dump(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {dump(key)}: {dump(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_atomic(path, text):
    """Write the whole text or leave the old file alone: temporary file, then rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line and exit 2, instead of argparse's usage block.
        print(f"parse_hatchet: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", metavar="PATH", help=".hatchet file or directory of them")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the JSON here, not stdout")
    parser.add_argument("--table", action="store_true", help="print tables instead of JSON")
    parser.add_argument("--folded", metavar="FILE", help="also write folded stacks here")
    parser.add_argument(
        "--top", type=_positive, default=10, metavar="N", help="table rows (default 10)"
    )
    args = parser.parse_args(argv)

    path = Path(args.path)
    if not path.exists():
        parser.error(f"no such file or directory: {args.path}")
    if path.is_dir():
        paths, artifact_dir = sorted(path.rglob("*.hatchet")), path.resolve()
    else:
        paths, artifact_dir = [path], path.resolve().parent
    summary, chains, problem = summarize(paths, str(artifact_dir))
    text = to_json(summary)

    if problem:
        if path.is_dir() and not paths and any(path.rglob("*.chrome_trace")):
            problem = "only .chrome_trace files: the capture used data: trace, not tree"
        elif not paths:
            problem += " (Triton 3.6 writes none when the script raises or calls sys.exit)"
        # The JSON still goes to stdout, but never over a good -o file.
        sys.stdout.write(text)
        print(f"parse_hatchet: {args.path}: {problem}", file=sys.stderr)
        return 1
    try:
        if args.output:
            write_atomic(args.output, text)
        if args.folded:
            write_atomic(args.folded, folded(chains))
    except OSError as e:
        print(f"parse_hatchet: error: {e}", file=sys.stderr)
        return 2
    if args.table:
        sys.stdout.write(table(summary, args.top))
    elif not args.output:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

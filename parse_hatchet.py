"""Summarise Proton captures as JSON: aorta's five keys, then per kernel, per call site
and, from traces, how busy the GPU was along each call site's launches.

    python parse_hatchet.py PATH [-o FILE] [--table] [--folded FILE] [--top N] [--diff BASE]

PATH is a .hatchet tree or .chrome_trace file, or a directory searched recursively for
both (per-rank files of one run add up). The five proton_* keys follow ROCm aorta's
Proton collector to the letter, from the trees, so a capture made here and one made by
`aorta sweep run` report the same numbers; one rule is ours: a node named ROOT is never
a kernel. Where PATH holds only traces, the five keys count their kernel events.

Exit status: 0 at least one timed kernel found; 1 none found (the JSON still names
proton_artifact_dir, stderr says why); 2 usage errors or a PATH that does not exist.
"""

import argparse
import bisect
import functools
import gc
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

TOP_N = 5  # aorta's length of proton_top_kernels
TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
EXACT = 2**53  # whole numbers below it convert to float exactly
# Frames that are not the user's own: runpy and other <frozen ...> code, the standard
# library, anything installed (Triton, Proton, torch), and source builds of the two.
LIBRARY = re.compile(r"^<|/(site|dist)-packages/|/lib/python\d|/python/triton/|/torch/")


def time_ms(metrics, times):
    """The first usable `time (<unit>)` metric in ms, as aorta reads it, else None;
    times: the metric's time names with their factors, layout(tuple(metrics))[0]."""
    for key, factor in times:
        try:
            ms = float(metrics[key]) * factor
        except (TypeError, ValueError, OverflowError):
            continue
        if math.isfinite(ms) and ms >= 0:
            return ms
    return None


@functools.cache
def layout(keys):
    """For a leaf's metric names, in order: the time metrics aorta would read, each with
    its factor to ms; and the names holding bytes and flops. Cached: every leaf of a
    capture has the same few names, and a tree has tens of thousands of leaves."""
    times = []
    for key in keys:
        head, _, tail = key.partition("(")
        factor = TIME_UNIT_MS.get(tail.rstrip(")").strip().lower())
        if head.strip().lower() == "time" and factor is not None:
            times.append((key, factor))
    rates = [(key, "bytes" if key == "bytes" else "flops") for key in keys
             if key == "bytes" or key.startswith("flops")]  # fmt: skip
    return times, rates


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
    """(is a python frame, the user's label for it or None, (file, line) or None).
    A python-context frame is named "file:line@function". Cached: names repeat."""
    if name not in _frames:
        head, at, func = name.rpartition("@")
        file, colon, line = head.rpartition(":")
        is_frame = bool(at and colon and line.isdecimal())
        user = is_frame and not library(file) and not func.startswith("__proton")
        label = f"{file.rpartition('/')[2]}:{line} {func}" if user else None
        _frames[name] = (is_frame, label, (file, int(line)) if user else None)
    return _frames[name]


@functools.cache
def library(file):
    """Whether a file's frames are not the user's own. Cached apart from the frames: a
    file has many lines, and a large capture tens of thousands of frames."""
    return LIBRARY.search(file) is not None


def chain_of(cell):
    """The labels of a chain kept as linked cells (label, where, parent), outermost first:
    linked, so that a deep recursion costs each node one cell, not a copy of its chain."""
    labels = []
    while cell is not None:
        labels.append(cell[0])
        cell = cell[2]
    return tuple(reversed(labels))


def tally(groups, by_cell, cells):
    """Sum the kernel leaves under each (nodes, cell) group, in aorta's order (depth first,
    children in file order), by name and by the chain of user frames above them. A tree is
    one group, its roots under no cell; each user frame adds a linked cell (label, where,
    parent), and a leaf's sums go to by_cell[id(cell)][name], cells[id(cell)] keeping the
    cell. Returns (the sums by name, whether any frame was a python one, how many leaves
    had time metrics but none a number >= 0).

    The hot loop of a large capture: a stack of child iterators rather than of nodes, exact
    types, the frame cache tested inline, a cell's sums looked up once per run of siblings,
    and what Proton writes, a count and a time below 2**53 (where float() is exact), read
    inline; anything else goes by aorta's rules in time_ms and launches, to the same result."""
    kernels, python, unusable = {}, False, 0
    stack = [(iter(nodes), cell, None) for nodes, cell in reversed(groups)]
    while stack:
        siblings, cell, by_name = stack[-1]
        for node in siblings:
            if type(node) is not dict:
                continue
            frame, children = node.get("frame"), node.get("children")
            if children and type(children) is list:  # walked whatever its frame, as aorta does
                name = frame.get("name") if type(frame) is dict else None
                cached = type(name) is str and _frames.get(name)
                is_frame, label, where = cached or classify(str(name))
                python = python or is_frame
                stack.append((iter(children), (label, where, cell) if label else cell, None))
                break  # down into the children; these siblings resume after them
            metrics = node.get("metrics")
            if type(frame) is not dict or type(metrics) is not dict:
                continue
            name = str(frame.get("name") or "").strip()
            if not name or name == "ROOT":
                continue
            times, rates = layout(tuple(metrics))
            value, count = metrics[times[0][0]] if times else None, metrics.get("count")
            numbers = type(value) in (int, float) and type(count) is int
            if numbers and 0 <= value < EXACT and 0 <= count < EXACT:
                ms = value * times[0][1]
            else:
                ms, count = time_ms(metrics, times), launches(metrics)
                if ms is None:
                    unusable += bool(times)
                    continue
            k = kernels.get(name)
            if k is None:
                k = kernels[name] = {"ms": ms, "launches": count, "bytes": 0, "flops": 0}
            else:
                k["ms"] += ms
                k["launches"] = add_count(k["launches"], count)
            for key, total in rates:
                if isinstance(value := metrics[key], int | float):
                    k[total] += value
            if by_name is None:  # the chain of labels is built later, once per cell
                by_name = by_cell.get(id(cell))
                if by_name is None:
                    by_name = by_cell[id(cell)] = {}
                    cells[id(cell)] = cell
                stack[-1] = (siblings, cell, by_name)
            site = by_name.get(name)
            if site is None:
                by_name[name] = {"name": name, "launches": count, "ms": ms}
            else:
                site["ms"] += ms
                site["launches"] = add_count(site["launches"], count)
        else:
            stack.pop()
    return kernels, python, unusable


def events(trace):
    """A trace's kernel launches as (chain cell, name, start us, duration us, stream), and
    whether any has a python call stack. Complete events ("ph": "X") with numeric ts and
    dur >= 0; the call stack's last entry is the kernel."""
    found, python = [], False
    for e in trace.get("traceEvents", ()) if isinstance(trace, dict) else ():
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in (ts, dur)) or dur < 0:
            continue
        args = e.get("args")
        stack = args.get("call_stack") if isinstance(args, dict) else None
        cell = None
        for name in stack[:-1] if isinstance(stack, list) else ():
            is_frame, label, where = classify(str(name))
            python |= bool(is_frame)
            if label:
                cell = (label, where, cell)
        found.append((cell, str(e.get("name") or "").strip(), ts, dur, e.get("tid")))
    return found, python


def load(path):
    """The decoded JSON of a capture; raises ValueError. Proton's python context can nest
    deeper than the C decoder recurses: such a file is decoded without recursion."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    try:
        return json.loads(text)
    except RecursionError:
        return deep_loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(str(e)) from None


_TOKEN = re.compile(r'[\s,:]*(?:([\[{])|([\]}])|(")|(-?Infinity|NaN|true|false|null)|)')
_LITERALS = {"true": True, "false": False, "null": None, "NaN": math.nan,
             "Infinity": math.inf, "-Infinity": -math.inf}  # fmt: skip
_NOTHING = object()


def deep_loads(text):
    """json.loads for nesting of any depth: an explicit stack of the open containers
    instead of recursion. It checks nesting and keys, and lets commas and colons be."""
    stack, keys, result, pos = [], [], _NOTHING, 0  # keys: an object's key awaiting its value
    while True:
        opener, closer, quote, literal = (m := _TOKEN.match(text, pos)).groups()
        pos = m.end()
        if closer:
            if not stack or isinstance(stack[-1], dict) != (closer == "}"):
                raise ValueError(f"unbalanced {closer!r} at char {pos - 1}")
            stack.pop(), keys.pop()
            continue
        if stack and isinstance(stack[-1], dict) and keys[-1] is None:
            if not quote:
                raise ValueError(f"an object key expected at char {pos}")
            keys[-1], pos = json.decoder.scanstring(text, pos)
            continue
        if opener:
            value = [] if opener == "[" else {}
        elif quote:
            value, pos = json.decoder.scanstring(text, pos)
        elif literal:
            value = _LITERALS[literal]
        elif number := json.scanner.NUMBER_RE.match(text, pos):
            value = float(number[0]) if number[2] or number[3] else int(number[0])
            pos = number.end()
        elif pos == len(text) and not stack and result is not _NOTHING:
            return result
        else:
            raise ValueError(f"unexpected text at char {pos}")
        if not stack:
            if result is not _NOTHING:
                raise ValueError(f"extra data at char {pos}")
            result = value
        elif isinstance(stack[-1], dict):
            stack[-1][keys[-1]], keys[-1] = value, None
        else:
            stack[-1].append(value)
        if opener:
            stack.append(value), keys.append(None)


def read(path):
    """The tree roots and device records of one .hatchet file; raises ValueError."""
    data = load(path)
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


def read_trace(path):
    """The decoded JSON of one .chrome_trace file; raises ValueError."""
    data = load(path)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError("not a Proton trace (no traceEvents list)")
    return data


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
    cxxfilt = _cxxfilt() if name.startswith("_Z") else None
    if cxxfilt is None:
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


@functools.cache
def _cxxfilt():
    """The cxxfilt module, imported at the first mangled name (its import locates the C++
    runtime: about 17 ms of start-up), or None where it is missing:
    names then stay mangled."""
    try:
        import cxxfilt
    except ImportError:
        return None
    return cxxfilt


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


def source(where):
    """The stripped source line at (file, line) when file is a regular .py file here,
    else None."""
    lines = _python_lines(where[0]) if where else None
    return (lines[where[1] - 1].strip()[:200] or None) if lines and where[1] <= len(lines) else None


@functools.cache
def _python_lines(name):
    """A .py file's lines, read once. A capture names the paths: following them to
    anything but Python source would let a crafted capture print lines of other files."""
    try:
        path = Path(name).resolve(strict=True)
        if path.suffix != ".py" or not path.is_file():
            return None
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except (OSError, RuntimeError):
        return None


def summarize(paths, artifact_dir):
    """The JSON summary of the given files, the kernels under each chain of user frames
    (the empty chain too, for --folded), and a one-line problem or None."""
    summary = {"proton_artifact_dir": artifact_dir}
    files, by_cell, cells, trace_events = [], {}, {}, []
    python, unusable, devices, problems = False, 0, [], []
    for path in paths:
        try:
            if path.suffix == ".chrome_trace":
                file_events, file_python = events(read_trace(path))
                trace_events += file_events
            else:
                roots, file_devices = read(path)
                devices += [d for d in file_devices if d not in devices]
                file_kernels, file_python, file_unusable = tally([(roots, None)], by_cell, cells)
                files.append(file_kernels)
                unusable += file_unusable
        except ValueError as e:
            problems.append(f"{path}: {e}")
            continue
        python |= file_python
    if not files and trace_events:  # traces alone: each kernel event, a leaf of one launch
        groups = [
            ([{"frame": {"name": name}, "metrics": {"count": 1, "time (us)": dur}}], cell)
            for cell, name, _, dur, _ in trace_events
        ]
        files.append(tally(groups, by_cell, cells)[0])
    # Summed per file first, then across files in path order, as aorta adds them.
    kernels = files[0] if files else {}
    for per_file in files[1:]:
        for name, k in per_file.items():
            total = kernels.setdefault(name, k)
            if total is not k:
                total["ms"] += k["ms"]
                total["launches"] = add_count(total["launches"], k["launches"])
                total["bytes"] += k["bytes"]
                total["flops"] += k["flops"]
    sites, where = {}, {}
    for cell_id, by_name in by_cell.items():
        cell = cells[cell_id]
        chain = chain_of(cell)
        where.setdefault(chain, cell and cell[1])
        merged = sites.get(chain)
        if merged is None:  # most chains have one cell: nothing to merge
            sites[chain] = by_name
            continue
        for name, site in by_name.items():
            into = merged.setdefault(name, site)
            if into is not site:
                into["ms"] += site["ms"]
                into["launches"] = add_count(into["launches"], site["launches"])

    if len(problems) < len(paths):  # a bad file beside good ones is only skipped
        for problem in problems:
            print(f"parse_hatchet: warning: skipped {problem}", file=sys.stderr)
    if not paths:
        return summary, sites, "no .hatchet or .chrome_trace file found"
    if not kernels:
        if len(problems) == len(paths):
            return summary, sites, f"no readable capture ({problems[0]})"
        if unusable:
            return summary, sites, (
                f"no timed kernel: {unusable} kernel leaves have a time that is not a finite "
                "number >= 0 (infinite, negative or not a number)"
            )  # fmt: skip
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
                "source": source(where[chain]),
                "ms": sum(k["ms"] for k in by_name.values()),
                "kernels": list(by_name.values()),
            }
            for chain, by_name in sites.items()
            if chain  # kernels with no user frame above them (shadow context)
        ),
        key=lambda site: site["ms"],
        reverse=True,
    )
    if trace_events:
        summary["proton_gpu_busy"], summary["proton_timeline"] = timeline(trace_events)
    return summary, sites, None


def timeline(trace_events):
    """(the share of the whole trace's span in which any kernel ran, one entry per call
    site): its launches, their summed and spanned ms, the share of its span in which any
    kernel ran, and the median idle time between its consecutive launches."""
    import statistics  # here, not at the top: its imports cost a tree-only run 6 ms

    busy = merge((ts, ts + dur) for _, _, ts, dur, _ in trace_events)
    by_site = {}
    for cell, _, ts, dur, _ in trace_events:
        by_site.setdefault(chain_of(cell), []).append((ts, ts + dur, cell and cell[1]))
    entries = []
    for chain, spans in by_site.items():
        spans.sort()
        first, last = spans[0][0], max(end for _, end, _ in spans)
        idle = [
            (b - a) - covered(busy, a, b)
            for (_, a, _), (b, _, _) in zip(spans, spans[1:], strict=False)
            if b > a
        ]
        idle += [0.0] * (len(spans) - 1 - len(idle))  # overlapping launches: no gap
        entries.append({
            "callsite": " > ".join(chain),
            "source": source(spans[-1][2]),
            "launches": len(spans),
            "kernel_ms": sum(end - start for start, end, _ in spans) / 1e3,
            "span_ms": (last - first) / 1e3,
            "busy": covered(busy, first, last) / (last - first) if last > first else 1.0,
            "median_idle_us": statistics.median(idle) if idle else None,
        })  # fmt: skip
    first, last = busy[0][0], busy[-1][1]
    total = covered(busy, first, last) / (last - first) if last > first else 1.0
    return total, sorted(entries, key=lambda e: e["kernel_ms"], reverse=True)


def merge(intervals):
    """Sorted, disjoint [start, end] intervals covering the given ones (overlaps, on
    several streams too, counted once)."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def covered(merged, a, b):
    """How much of [a, b] the merged intervals cover."""
    i = bisect.bisect_right(merged, [a, math.inf]) - 1
    total = 0.0
    for start, end in merged[max(i, 0) :]:
        if start >= b:
            break
        total += max(0.0, min(end, b) - max(start, a))
    return total


def diff(base, summary):
    """Per kernel and per call site: ms in base and now, and their ratio, the largest
    change first."""

    def rows(key, field, before, after):
        was = {row[key]: row[field] for row in before}
        now = {row[key]: row[field] for row in after}
        out = [
            {key if key == "callsite" else "name": name, "base_ms": was.get(name, 0.0),
             "ms": now.get(name, 0.0),
             "ratio": now.get(name, 0.0) / was[name] if was.get(name) else None}
            for name in dict.fromkeys([*was, *now])
        ]  # fmt: skip
        return sorted(out, key=lambda r: abs(r["ms"] - r["base_ms"]), reverse=True)

    return {
        "base": base["proton_artifact_dir"],
        "gpu_time_ms": [base["proton_gpu_time_ms"], summary["proton_gpu_time_ms"]],
        "kernels": rows("name", "total_ms", base["proton_kernels"], summary["proton_kernels"]),
        "callsites": rows("callsite", "ms", base["proton_callsites"], summary["proton_callsites"]),
    }


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
    """The kernels, the call sites, the timeline with its diagnosis and the diff, as
    aligned text."""
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
            lines.append(f"{site['ms']:10.4f} {'':8}  {labelled(site)}")
            for k in site["kernels"]:
                n = k["launches"] if k["launches"] is not None else "?"
                lines.append(f"{k['ms']:10.4f} {n:>8}    > {readable(k['name'])}")
    if "proton_timeline" in summary:
        lines += [
            "",
            f"GPU busy {summary['proton_gpu_busy']:.1%} of the trace",
            f"{'kernel ms':>10} {'span ms':>9} {'busy':>5} {'launches':>8} {'idle us':>8}  "
            "call site",
        ]
        for e in summary["proton_timeline"][:top]:
            idle = f"{e['median_idle_us']:8.1f}" if e["median_idle_us"] is not None else f"{'':8}"
            lines.append(
                f"{e['kernel_ms']:10.4f} {e['span_ms']:9.4f} {e['busy']:5.0%} {e['launches']:>8} "
                f"{idle}  {labelled(e) or '(no frame of yours)'}"
            )
        lines += diagnosis(summary["proton_timeline"])
    if "proton_diff" in summary:
        d = summary["proton_diff"]
        lines += ["", f"against {d['base']}: GPU time {d['gpu_time_ms'][0]:.4f} -> "
                  f"{d['gpu_time_ms'][1]:.4f} ms", f"{'base ms':>10} {'ms':>10} {'ratio':>6}  "
                  "kernel, then call site"]  # fmt: skip
        for row in [*d["kernels"][:top], *d["callsites"][:top]]:
            ratio = f"{row['ratio']:6.2f}" if row["ratio"] is not None else f"{'new':>6}"
            what = readable(row["name"]) if "name" in row else row["callsite"] or "(no frame)"
            lines.append(f"{row['base_ms']:10.4f} {row['ms']:10.4f} {ratio}  {what}")
    return "\n".join(lines) + "\n"


def labelled(site):
    """A call site with the source line of its innermost frame, where readable here."""
    return f"{site['callsite']}  {site['source']}" if site.get("source") else site["callsite"]


def diagnosis(entries):
    """One line for every call site that launched 3 or more times and kept the GPU busy
    under half of its span: its launches waited on the host."""
    out = []
    for e in entries:
        if e["launches"] >= 3 and e["busy"] < 0.5:
            mean_us = e["kernel_ms"] * 1e3 / e["launches"]
            out.append(
                f"{e['callsite'] or 'kernels with no frame of yours'}: the GPU was idle "
                f"{1 - e['busy']:.0%} of the span of its {e['launches']} launches, a median "
                f"{e['median_idle_us']:.1f} us between launches against {mean_us:.1f} us of "
                "kernel each: the host's launch cost bounds it, not the kernel."
            )
    return ["", *out] if out else []


def folded(chains):
    """Folded stacks, `frame;frame;kernel <ns>`, as flamegraph.pl and speedscope read."""
    return "".join(
        f"{';'.join((*chain, readable(name)))} {round(k['ms'] * 1e6)}\n"
        for chain, by_name in chains.items()
        for name, k in by_name.items()
    )


def to_json(summary):
    """One key a line, and one list item a line, each as json.dumps writes it. The kernel
    and call-site rows, most of a large capture's output, are formatted here: json's C
    encoder spends more on each small dict than on its values, and this takes two thirds
    of its time. The rest goes through one encoder (json.dumps with options builds one per
    call; indent= falls back to the pure-Python encoder, several times slower)."""
    dump = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
    quote = json.encoder.encode_basestring  # a str as that encoder writes it

    def number(value):  # an int or a finite float
        return "null" if value is None else repr(value)

    def kernel(k):
        if len(k) > 6:  # with GB/s or FLOP/s
            return dump(k)
        return (
            f'{{"name": {quote(k["name"])}, "readable_name": {quote(k["readable_name"])}, '
            f'"launches": {number(k["launches"])}, "total_ms": {k["total_ms"]!r}, '
            f'"mean_us": {number(k["mean_us"])}, "share": {k["share"]!r}}}'
        )

    def callsite(site):
        source = "null" if site["source"] is None else quote(site["source"])
        rows = ", ".join([
            f'{{"name": {quote(k["name"])}, "launches": {number(k["launches"])}, '
            f'"ms": {k["ms"]!r}}}'
            for k in site["kernels"]
        ])  # fmt: skip
        return (
            f'{{"callsite": {quote(site["callsite"])}, "source": {source}, '
            f'"ms": {site["ms"]!r}, "kernels": [{rows}]}}'
        )

    rows = {"proton_kernels": kernel, "proton_callsites": callsite}
    lines = []
    for key, value in summary.items():
        if isinstance(value, list) and value:
            items = ",\n    ".join(map(rows.get(key, dump), value))
            lines.append(f"  {dump(key)}: [\n    {items}\n  ]")
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


def captures(path):
    """The capture files at PATH and the directory the summary names."""
    if path.is_dir():
        found = [p for p in path.rglob("*") if p.suffix in (".hatchet", ".chrome_trace")]
        return sorted(found), path.resolve()
    return [path], path.resolve().parent


def kind(paths):
    return {"tree" if p.suffix != ".chrome_trace" else "trace" for p in paths}


def main(argv=None):
    # A capture decodes to hundreds of thousands of objects that all live until exit:
    # the cyclic collector would walk them again and again for nothing.
    gc.disable()
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", metavar="PATH", help="capture file, or directory of them")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the JSON here, not stdout")
    parser.add_argument("--table", action="store_true", help="print tables instead of JSON")
    parser.add_argument("--folded", metavar="FILE", help="also write folded stacks here")
    parser.add_argument(
        "--top", type=_positive, default=10, metavar="N", help="table rows (default 10)"
    )
    parser.add_argument("--diff", metavar="BASE", help="compare with this earlier capture")
    args = parser.parse_args(argv)

    path = Path(args.path)
    for given in filter(None, (args.path, args.diff)):
        if not Path(given).exists():
            parser.error(f"no such file or directory: {given}")
    paths, artifact_dir = captures(path)
    summary, chains, problem = summarize(paths, str(artifact_dir))

    if problem:
        if not paths:
            problem += " (Triton 3.6 writes none when the script raises or calls sys.exit)"
        # The JSON still goes to stdout, but never over a good -o file.
        sys.stdout.write(to_json(summary))
        print(f"parse_hatchet: {args.path}: {problem}", file=sys.stderr)
        return 1
    if args.diff:
        base_paths, base_dir = captures(Path(args.diff))
        if kind(base_paths) != kind(paths):
            parser.error(
                f"--diff compares captures of one kind: {args.diff} holds "
                f"{' and '.join(sorted(kind(base_paths))) or 'none'}s, {args.path} "
                f"{' and '.join(sorted(kind(paths)))}s"
            )
        base, _, base_problem = summarize(base_paths, str(base_dir))
        if base_problem:
            print(f"parse_hatchet: {args.diff}: {base_problem}", file=sys.stderr)
            return 1
        summary["proton_diff"] = diff(base, summary)
    text = to_json(summary)
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

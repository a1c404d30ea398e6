"""What one run's decoded Proton captures add up to: aorta's five keys by aorta's rule
(docs/summary.md's "aorta's five keys"), each kernel by name, each call site by its chain of
the user's frames, and what the views need. It imports nothing else of this repository:
copy it alone."""

import functools
import math
import os
import re
import runpy
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from summary import Refused

TOP_N = 5  # aorta's length of proton_top_kernels
TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
# Frames not the user's: Python's, Triton's (Proton's), torch's, where installed anywhere or here.
LIBRARY = re.compile(
    r"^<|/lib/python3\.\d+/(?!(site|dist)-packages/)|/(site|dist)-packages/(triton|torch)/"
)
LIBRARY_ROOTS = tuple(
    f"{root.rstrip('/')}/"
    for spec in map(find_spec, ("triton", "torch"))
    for root in (spec and spec.submodule_search_locations or [])
)
CAPTURED_AT, AUTOTUNING = "<captured_at>", "<autotuning>"  # links of chains, not frames
CAPTURED, AUTOTUNED = (CAPTURED_AT, 0, ""), (AUTOTUNING, 0, "")  # as frames, one object each
MAX_NAME = 100  # a kernel's readable name, at most (a C++ name's template arguments elided)
MAX_FRAMES = 200  # a call site shows its innermost frames (Python's stacks stop near 1,000)
# The metrics Proton's launch hook records from a kernel's launch_metadata.
ROOFLINE = ("bytes", "flops", "flops8", "flops16", "flops32", "flops64")


def number(value: object) -> float | None:
    """A finite number >= 0, read as aorta reads a metric, else None."""
    try:
        value = float(value) if type(value) in (int, float, str) else math.nan
    except (ValueError, OverflowError):
        return None
    return value if 0 <= value < math.inf else None


def compile_only(text: str | None) -> re.Pattern | None:
    """--only's expression compiled (None: None); Refused, in one line, where it is none."""
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        raise Refused(f"--only {text[:60]!r} is no regular expression: {e}") from None


def printable(text: str) -> str:
    """text with control characters escaped, so that no name can move a terminal's cursor."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def five_keys(kernels: dict) -> dict:
    """aorta's keys but the folder, from each kernel's summed ms and launches."""
    ranked = sorted(kernels.items(), key=lambda item: item[1].ms, reverse=True)  # stable
    counts = [k.launches for k in kernels.values()]
    keys = {} if None in counts else {"proton_kernel_count": sum(counts)}
    keys["proton_gpu_time_ms"] = sum(k.ms for k in kernels.values())
    keys["proton_top_kernel_ms"] = ranked[0][1].ms
    keys["proton_top_kernels"] = [name for name, _ in ranked[:TOP_N]]
    return keys


@functools.cache
def layout(keys: tuple) -> tuple[list, list, list]:
    """A node's times aorta reads and proton.cpu_timed_scope's CPU times, each (name, factor
    to ms), and its launch hook metrics; cached, as nodes share a few sets of names."""
    times, cpu = [], []
    for key in filter(lambda key: type(key) is str, keys):  # MessagePack allows others
        head, _, unit = key.partition("(")  # "time (ns) (exc)": a unit of "ns) (exc"
        head, factor = head.strip().lower(), TIME_UNIT_MS.get(unit.rstrip(")").strip().lower())
        if factor and head in ("time", "cpu_time"):
            (times if head == "time" else cpu).append((key, factor))
    return times, cpu, [key for key in keys if key in ROOFLINE]


def first_ms(metrics: dict, times: list) -> float | None:  # aorta's: the first usable
    for key, factor in times:
        if (value := number(metrics[key])) is not None and value * factor < math.inf:
            return value * factor
    return None


@dataclass
class Launches:
    """Launches summed: of one kernel, of one kernel at one call site, or of one file read."""

    ms: float = 0.0
    launches: int | None = 0  # None: a count was unreadable
    bytes: float = 0.0
    flops: dict = field(default_factory=dict)  # flops, flops8 ... flops64, as recorded
    device_ids: set = field(default_factory=set)  # (type, id) of the launches that did
    durations: list = field(default_factory=list)  # us of each launch, from traces

    def add(self, ms: float, launches: int | None) -> "Launches":
        self.ms += ms
        self.launches = None if None in (launches, self.launches) else self.launches + launches
        return self


@dataclass
class Capture:
    """What a run's captures add up to."""

    chains: "Chains" = field(default_factory=lambda: Chains())
    kernels: dict = field(default_factory=dict)  # name -> Launches
    sites: dict = field(default_factory=dict)  # (chain, name) -> [ms, launches or None]
    scopes: dict = field(default_factory=dict)  # (kernel, scope) -> [cycles, normalized]
    cpu: dict = field(default_factory=dict)  # CPU-timed scope -> [CPU ms, GPU ms inside]
    unusable: int = 0  # kernel leaves with times, none of them usable
    untimed: set = field(default_factory=set)  # metric names of leaves with no time
    file: Launches = field(default_factory=Launches)  # the launches of the file being added

    def launch(self, name: str, chain: int, ms: float, launches: int | None) -> "Launches":
        site = self.sites.setdefault((chain, name), [0.0, 0])  # a list: cheap to make per leaf
        site[0] += ms
        site[1] = None if None in (launches, site[1]) else site[1] + launches
        self.file.add(ms, launches)
        return self.kernels.setdefault(name, Launches()).add(ms, launches)

    def leaf(
        self, name: str, metrics: dict, ms: float | None, chain: int, kinds: tuple
    ) -> Launches | None:
        """Adds a leaf's launches, if it is a kernel: a usable time, a name, not ROOT
        (kinds: layout's of its metrics)."""
        if not (name := name.strip()) or name == "ROOT":
            return None
        times, cpu, roofline = kinds
        if ms is None:
            self.unusable += bool(times)
            if not (times or cpu):
                self.untimed.update(set(metrics) - {"count"})
            return None
        count = number(metrics.get("count"))
        kernel = self.launch(name, chain, ms, None if count is None else int(count))
        for key in roofline:  # bytes and flops of Proton's launch hook
            if value := number(metrics[key]):
                if key == "bytes":
                    kernel.bytes += value
                else:
                    kernel.flops[key] = kernel.flops.get(key, 0.0) + value
                kernel.device_ids.add(
                    (str(metrics.get("device_type")), str(metrics.get("device_id")))
                )
        return kernel


def walk_tree(roots: list, capture: Capture) -> None:
    """Adds a tree's leaves in aorta's order (depth first, children in file order), each at
    the chain of user frames above it; a node with `cycles` is a scope of the kernel above
    it, one with `cpu_time` a CPU-timed scope, given the GPU time of the kernels inside it."""
    stack = [(iter(roots), 0, None, None)]  # (children, chain, kernel above, CPU scope)
    while stack:
        children, chain, kernel, cpu = stack[-1]
        for node in children:
            if type(node) is not dict:
                continue
            name, metrics = str(node.get("frame", {}).get("name", "")), node.get("metrics", {})
            if kernel is not None and "cycles" in metrics:
                sums = capture.scopes.setdefault((kernel, name), [0.0, 0.0])
                sums[0] += number(metrics["cycles"]) or 0.0
                sums[1] += number(metrics.get("normalized_cycles")) or 0.0
            times, cpu_times, _ = kinds = layout(tuple(metrics))
            below, inside, ms = node.get("children"), cpu, first_ms(metrics, times)
            if cpu_times and name != "ROOT" and (below or ms is None):  # a CPU-timed scope
                if (cpu_ms := first_ms(metrics, cpu_times)) is not None:
                    inside = capture.cpu.setdefault(name, [0.0, 0.0])
                    inside[0] += cpu_ms
            if below and type(below) is list:  # walked, as aorta walks it
                inner, is_frame = capture.chains.step(chain, name)
                is_frame |= name == "ROOT" or "cycles" in metrics
                stack.append((iter(below), inner, kernel if is_frame else name, inside))
                break  # into the children: these siblings resume after them
            if capture.leaf(name, metrics, ms, chain, kinds) and cpu is not None:
                cpu[1] += ms
        else:
            stack.pop()


def walk_trace(events: list, capture: Capture) -> tuple[list, list]:
    """Adds a trace's kernel events, each one launch, and returns them as (start us, end us,
    chain, name); and apart, the instrumentation backend's events, left to the views."""
    launches, scoped, by_stack = [], [], {}  # by_stack: a call stack met again is looked up
    for e in events:
        args = e.get("args", {})
        if "Frequency (MHz)" in args:
            scoped.append(e)
            continue
        ts, dur, name = e.get("ts"), number(e.get("dur")), e.get("name")
        name = name.strip() if e.get("ph") == "X" and isinstance(name, str) else ""
        if type(ts) not in (int, float) or dur is None or not name:
            continue
        stack = tuple(args.get("call_stack", [])[:-1])  # the frames, then the kernel
        if (chain := by_stack.get(stack)) is None:
            chain = 0
            for frame in stack:
                chain = capture.chains.step(chain, frame)[0]
            by_stack[stack] = chain
        capture.launch(name, chain, dur / 1e3, 1).durations.append(dur)
        launches.append((float(ts), ts + dur, chain, name))
    return launches, scoped


@functools.cache
def frame_of(name: str) -> tuple | bool | None:
    """A node's name, "file:line@function", as (file, line, function) for a frame of the
    user's; AUTOTUNED for the autotuner's benchmarking; False for a library's frame; None
    for no frame (a kernel)."""
    head, at, func = name.rpartition("@")
    file, colon, line = head.rpartition(":")
    if not (at and colon and line.isdecimal()):
        return None
    if (file.endswith("triton/runtime/autotuner.py") and func == "_bench") or (
        file.endswith("triton/testing.py") and func.startswith("do_bench")
    ):
        return AUTOTUNED
    if LIBRARY.search(file) or file.startswith(LIBRARY_ROOTS) or func.startswith("__proton"):
        return False
    return False if file.endswith("/proton_launch.py") else (file, int(line), func)


class Chains:
    """Chains of the user's frames, outermost first, each stored once and known by an int
    (0: no frame). A frame repeated by recursion counts up its link, not adding one."""

    def __init__(self) -> None:
        self.links = [(0, None, 0)]  # id -> (parent id, (file, line, function), repeats)
        self.depths = [0]  # id -> links in the chain
        self.ids = {}
        self.python = False  # whether any node was a python frame (context python)

    def step(self, chain: int, name: str) -> tuple[int, bool]:
        """The chain with the node named name below it, and whether that is a frame (a
        <captured_at> node is a link: above it a CUDA graph's replay, below its capture)."""
        frame = frame_of(name) if name != CAPTURED_AT else CAPTURED
        if not frame:
            self.python |= frame is False
            return chain, frame is False
        self.python = True
        parent, last, repeats = self.links[chain]  # frame_of gives one object for a name
        key = (parent, frame, repeats + 1) if last is frame else (chain, frame, 1)
        if (found := self.ids.get(key)) is None:
            found = self.ids[key] = len(self.links)
            self.links.append(key)
            self.depths.append(self.depths[key[0]] + 1)
        return found, True

    def frames(self, chain: int) -> tuple[list, int]:
        """(file, line, function, repeats) of each link, outermost first, of the innermost
        MAX_FRAMES; and how many links above them are left out."""
        out = []
        while chain and len(out) < MAX_FRAMES:
            chain, frame, repeats = self.links[chain]
            out.append((*frame, repeats))
        return out[::-1], self.depths[chain]


def short_names(files: set) -> dict:
    """Each file's shortest trailing part of its path no other shares: sorted by reversed
    path, a path shares the most with a neighbour."""
    ordered = sorted((file.split("/")[::-1], file) for file in files)
    names = {}
    for i, (parts, file) in enumerate(ordered):
        near = [ordered[j][0] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
        shared = max((len(os.path.commonprefix([parts, o])) for o in near), default=0)
        names[file] = "/".join(parts[: 1 + shared][::-1])
    return names


def demangle(name: str) -> str:
    """A kernel's readable name (docs/summary.md's proton_kernels): a C++ name demangled,
    without return type and parameters, deep template arguments elided; any other as is."""
    import cxxfilt

    try:
        text = cxxfilt.demangle(name)  # a name not starting _Z as it is
    except (cxxfilt.Error, ValueError):  # not a C++ name after all, or not UTF-8
        return name
    if text != name and text.endswith(")"):  # the last balanced (...): parameters
        depth = 0
        for i in reversed(range(len(text))):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i].removeprefix("void ")
                break
    short = elided(text, 2) if "<" in text else text
    short = short if len(short) <= MAX_NAME else elided(text, 1)
    return short if len(short) <= MAX_NAME else short[: MAX_NAME - 1] + "…"


def elided(name: str, keep: int) -> str:
    """name with template arguments nested keep or more levels deep as …"""
    out, depth = [], 0
    for ch in name:
        depth -= ch == ">"
        if depth < keep:
            out.append(ch)
        elif depth == keep and out[-1] != "…":
            out.append("…")
        depth += ch == "<"
    return "".join(out).replace(" >", ">")


@functools.cache
def proton_specs() -> dict:
    """The installed Proton's device specs (triton/profiler/specs.py), run alone: the file
    imports nothing, and importing Triton for it would cost each summary 0.14 s."""
    return runpy.run_path(
        next(p for p in LIBRARY_ROOTS if p.endswith("/triton/")) + "profiler/specs.py"
    )


def peak(spec: str, *args: object) -> float | None:
    """A nominal peak by Proton's specs (max_bps: bytes/s, max_flops: FLOP/s), or None."""
    try:
        return number(proton_specs()[spec](*args)) or None
    except Exception:  # no Triton here, or a device or field the specs do not know
        return None


def read_devices(records: list) -> dict:
    """The devices a tree's second part describes, (type, id) -> properties."""
    out = {}
    for record in records:  # dicts, as Run.add picks them
        for type_, by_id in record.items():
            for id_, info in by_id.items() if isinstance(by_id, dict) else ():
                info = info if isinstance(info, dict) else {}
                khz = [number(info.get(key)) for key in ("clock_rate", "memory_clock_rate")]
                args = [info.get(key) for key in ("arch", "bus_width", "memory_clock_rate")]
                bps = peak("max_bps", str(type_), *args)
                out[str(type_), str(id_)] = {
                    "type": printable(str(type_)),
                    "id": printable(str(id_)),
                    "arch": printable(str(info["arch"])) if "arch" in info else None,
                    "sm_count": info.get("num_sms"),
                    "clock_mhz": khz[0] and khz[0] / 1e3,
                    "memory_clock_mhz": khz[1] and khz[1] / 1e3,
                    "memory_bus_bits": info.get("bus_width"),
                    "peak_gbyte_per_s": bps and bps / 1e9,
                }
    return out


def epoch_ns(trace: dict) -> int | None:  # where a trace's clock starts, if it says
    base = trace.get("baseTimeNanoseconds")
    return base if type(base) is int else None


@dataclass
class Run:
    """One run's captures as added."""

    capture: Capture = field(default_factory=Capture)
    read: list = field(default_factory=list)
    per_file: list = field(default_factory=list)  # (rank, path, ms, launches) of each read
    traced: list = field(default_factory=list)  # (path, rank, launches, clock start) of traces
    scoped: list = field(default_factory=list)  # the instrumentation backend's trace events
    devices: dict = field(default_factory=dict)  # (type, id) -> properties
    events: int = 0  # trace events of any kind

    def add(self, path: Path, data: object, rank: int | None) -> None:
        """Adds a decoded capture (a tree or a trace); ValueError where it is neither."""
        file = self.capture.file = Launches()
        if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
            kernels, scoped = walk_trace(data["traceEvents"], self.capture)
            self.traced.append((path, rank, kernels, epoch_ns(data)))
            self.scoped += scoped
            self.events += len(data["traceEvents"])
        else:
            roots = data if isinstance(data, list) else [data]
            if not any(isinstance(r, dict) and "frame" in r for r in roots):
                raise ValueError("not a Proton tree or trace (no frame at the top, no traceEvents)")
            walk_tree(roots, self.capture)
            self.devices |= read_devices(
                [r for r in roots if isinstance(r, dict) and "frame" not in r]
            )
        self.read.append(path)
        self.per_file.append((rank, path, file.ms, file.launches))

    def problem(self) -> str | None:
        """Why the captures read hold nothing to summarise, saying what they hold instead."""
        c = self.capture
        if not math.isfinite(sum(k.ms for k in c.kernels.values())):  # as aorta
            return "kernel times add up to infinity"
        if c.kernels or c.scopes or self.scoped:
            return None
        if c.unusable:
            return f"no timed kernel: {c.unusable} leaves have a time that is no finite number >= 0"
        if c.untimed:
            found = ", ".join(sorted(map(str, c.untimed)))[:200]
            return f"no timed kernel: leaves carry no `time (ns|us|ms|s)` metric (found: {found})"
        if self.events:
            return (
                f"no timed kernel: the trace's {self.events} events include no complete event "
                '("ph": "X") with a name, a ts and a dur >= 0'
            )
        return (
            "no timed kernel in the capture: ROOT only (a pinned AMD backend in cli mode on "
            "Triton 3.7 or older, or an env-mode payload that never called proton.start())"
        )

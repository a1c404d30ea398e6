"""Proton's capture files, in and out: finding them under the paths given, decoding them,
and writing what is made of them without ever losing a file.

Captures are NAME.hatchet (a tree, JSON), NAME.hatchet_msgpack (the same in MessagePack)
and NAME.chrome_trace (a trace), any gzipped; the phases of periodic flushing are
NAME.part_<N>.<format>; under a launcher each rank writes NAME.rank<R>.<format>. A run of
trials keeps each trial's captures in a folder trial<K>, and a run says what made it in
its provenance.json. Everything here is untrusted input: read with bounds, refused or
named in one line, never a traceback.
"""

import contextlib
import functools
import json
import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import msgspec

CAPTURE = re.compile(r"(.+?)(\.part_\d+)?\.(hatchet|hatchet_msgpack|chrome_trace)(\.gz)?", re.S)
TRIAL = re.compile(r"trial([1-9][0-9]{0,8})")
MAX_GUNZIPPED = 2**32  # a gzipped capture may not unpack past 4 GiB
DEEP = 10**6  # frames of the pure-Python decoder, for trees too deep for the C ones
INF = math.inf
TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
# Where a frame is not the user's: Python's own, and Triton's (Proton's) and torch's, by
# where they are installed on any machine and on this one.
LIBRARY = re.compile(
    r"^<|/lib/python3\.\d+/(?!(site|dist)-packages/)|/(site|dist)-packages/(triton|torch)/"
)
PACKAGES = tuple(
    f"{root.rstrip('/')}/"
    for spec in map(find_spec, ("triton", "torch"))
    for root in (spec and spec.submodule_search_locations or [])
)
CAPTURED_AT, AUTOTUNING = "<captured_at>", "<autotuning>"  # links of chains, not frames
CAPTURED, AUTOTUNED = (CAPTURED_AT, 0, ""), (AUTOTUNING, 0, "")  # as frames, one object each
# A call site shows its innermost frames: Python's stacks stop near 1,000, and a crafted
# capture's deeper chains, with a kernel at each depth, would cost the depth squared.
MAX_FRAMES = 200
# The metrics Proton's launch hook records from a kernel's launch_metadata: rates.
ROOFLINE = ("bytes", "flops", "flops8", "flops16", "flops32", "flops64")
# Transfers per memory clock as each vendor reports its clock: NVIDIA HBM's at half the
# data rate, AMD's HBM3 and HBM3E (gfx942, gfx950) at a quarter.
DATA_RATE = {"CUDA": 2, "HIP": 4}
PROVENANCE = ["triton", "torch", "device", "backend_asked", "backend_used", "mode_asked"]
PROVENANCE += ["mode_used", "run_id"]


class Refused(Exception):
    """An input or output that will not be used; the message is one line."""


def number(value: object) -> float | None:
    """A finite number >= 0, read as aorta reads a metric (a numeric string through
    float()), else None: an integer past a float's range is none."""
    kind_ = type(value)
    if kind_ is not float:
        if kind_ is not int and kind_ is not str:
            return None
        try:
            value = float(value)
        except (ValueError, OverflowError):
            return None
    return value if 0 <= value < INF else None


def printable(text: str) -> str:
    """text with control characters and lone surrogates as escapes: a name in a capture
    must not move a terminal's cursor or forge a line of output."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def why(error: OSError) -> str:
    return (error.strerror or str(error)).lower()


# --- Finding captures -----------------------------------------------------------------


@dataclass
class Found:
    """What the paths given hold, each file once: the captures, in sorted order; what was
    skipped ({"file", "why"}, with "same_as" for another link to a file read, or a gzip
    copy beside its capture); provenance files; for one run of trials, each trial's."""

    files: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    provenance: list = field(default_factory=list)
    trials: list = field(default_factory=list)
    seen: dict = field(default_factory=dict)  # (device, inode) -> first path: all inputs


def find(paths: list[str]) -> Found:
    found = Found()
    for given in paths:
        if not given:
            raise Refused("an empty path names nothing")
        path = Path(given)
        if path.is_dir():
            search(found, path, top=True)
        elif add(found, path, named=True):
            found.provenance.append(path.parent / "provenance.json")
    names = set(map(str, found.files))
    for path in [p for p in found.files if str(p).endswith(".gz") and str(p)[:-3] in names]:
        found.files.remove(path)  # `gzip -k` left the capture beside its copy: read once
        copy = {"why": "a gzip copy of a capture read", "same_as": str(path)[:-3]}
        found.skipped.append({"file": str(path), **copy})
    if found.trials and len(found.files) != sum(map(len, found.trials)):
        raise Refused("a run of trials (trial<K> folders) is read alone, with no other captures")
    for path in found.provenance:  # inputs too, which an output must not replace
        with contextlib.suppress(OSError):
            info = path.stat()
            found.seen.setdefault((info.st_dev, info.st_ino), path)
    found.files.sort()
    return found


def search(found: Found, folder: Path, top: bool = False, named: bool = True) -> None:
    """Adds the captures in folder and below. A folder reached again through a link is
    read once; one named that cannot be listed is refused, one found is named."""
    try:
        info = folder.stat()
        if (info.st_dev, info.st_ino) in found.seen:
            return
        found.seen[info.st_dev, info.st_ino] = folder
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as e:
        if named:
            raise Refused(f"{printable(str(folder)[:200])}: {why(e)}") from None
        unlisted = f"a folder that cannot be listed: {why(e)}"
        found.skipped.append({"file": str(folder), "why": unlisted})
        return
    trials = {}
    for entry in entries:
        before = len(found.files)
        try:
            folder_ = entry.is_dir()
        except OSError as e:  # a link in a loop, or to where this user may not look
            found.skipped.append({"file": entry.path, "why": why(e)})
            continue
        if folder_:
            search(found, Path(entry.path), named=False)
            if top and (trial := TRIAL.fullmatch(entry.name)):
                trials[int(trial[1])] = sorted(found.files[before:])
        elif entry.name == "provenance.json":
            found.provenance.append(Path(entry.path))
        elif CAPTURE.fullmatch(entry.name):
            add(found, Path(entry.path))
    if trials and sorted(trials) != list(range(1, len(trials) + 1)):
        raise Refused(f"{printable(str(folder)[:200])}: trial folders not numbered 1 to N")
    found.trials = found.trials or [trials[k] for k in sorted(trials)]


def add(found: Found, path: Path, named: bool = False) -> bool:
    """Adds path if it is a regular file that no other link reached first."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "not a regular file")  # a pipe or a device would block a reader
    except OSError as e:
        if named:
            raise Refused(f"{printable(str(path)[:200])}: {why(e)}") from None
        found.skipped.append({"file": str(path), "why": why(e)})
        return False
    if same := found.seen.get((info.st_dev, info.st_ino)):
        link = {"why": f"the same file as {same}", "same_as": str(same)}
        found.skipped.append({"file": str(path), **link})
        return False
    found.seen[info.st_dev, info.st_ino] = path
    found.files.append(path)
    return True


def kind(path: Path) -> str:
    return "trace" if path.name.removesuffix(".gz").endswith(".chrome_trace") else "tree"


def rank_of(path: Path) -> int | None:
    """The rank a launcher gave the process that wrote path (.rank<R> in its name)."""
    found = re.search(r"\.rank(\d{1,9})\.", path.name)
    return int(found[1]) if found else None


# --- Reading --------------------------------------------------------------------------


def read_bytes(path: Path, limit: int = -1) -> bytes:
    """A regular file's bytes (a gzipped one's unpacked, a MiB at a time up to the cap),
    at most limit of them where given; ValueError says why not."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:  # a pipe: no wait
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ValueError("not a regular file")
            data = f.read(limit + 1 if limit >= 0 else -1)
        if path.name.endswith(".gz"):
            import gzip
            import io

            with gzip.GzipFile(fileobj=io.BytesIO(data)) as z, io.BytesIO() as out:
                while out.write(z.read(2**20)):
                    if out.tell() > MAX_GUNZIPPED:
                        raise ValueError(f"unpacks past {MAX_GUNZIPPED >> 30} GiB")
                data = out.getvalue()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(getattr(e, "strerror", None) or str(e) or type(e).__name__) from None
    if 0 <= limit < len(data):
        raise ValueError(f"larger than {limit} bytes")
    return data


def load(path: Path) -> object:
    """A decoded capture; ValueError says why not."""
    data, msgpack = read_bytes(path), path.name.removesuffix(".gz").endswith("msgpack")
    try:
        return (msgspec.msgpack if msgpack else msgspec.json).decode(data)
    except (msgspec.DecodeError, RecursionError) as e:
        if msgpack:
            raise ValueError(f"not valid MessagePack: {' '.join(str(e).split())[:200]}") from None
        try:  # the standard library's rules and messages decide
            return decode(data.decode("utf-8"), deep=isinstance(e, RecursionError))
        except UnicodeDecodeError:
            raise ValueError("not UTF-8 text") from None


def decode(text: str, deep: bool) -> object:
    """JSON text: its documents joined where there are several (Proton writes one for each
    stream a CUDA graph used); deep, by the pure-Python decoder, which Python 3.11+ runs
    off the C stack, for trees nested deeper than the C decoders go."""
    decoder, at, docs, limit = json.JSONDecoder(), 0, [], sys.getrecursionlimit()
    if deep:
        decoder.scan_once = json.scanner.py_make_scanner(decoder)
        sys.setrecursionlimit(DEEP)
    try:
        while (at := json.decoder.WHITESPACE.match(text, at).end()) < len(text) or not docs:
            doc, at = decoder.raw_decode(text, at)
            docs.append(doc)
    except RecursionError:  # a document after the first, deeper than the C decoder goes
        if deep:
            raise ValueError(f"not valid JSON: nested deeper than {DEEP} levels") from None
        return decode(text, deep=True)
    except ValueError as e:  # also integers past Python's digits
        raise ValueError(f"not valid JSON: {' '.join(str(e).split())[:200]}") from None
    finally:
        sys.setrecursionlimit(limit)
    return docs[0] if len(docs) == 1 else joined(docs)


def epoch_ns(trace: dict) -> int | None:
    """Where a trace's clock starts, ns since the epoch, if it says so in range."""
    base = trace.get("baseTimeNanoseconds")
    return base if type(base) is int and 0 <= base < 2**63 else None


def joined(docs: list) -> dict:
    """One trace of several documents' events, each document's on the first's clock where
    both say where theirs starts (baseTimeNanoseconds, ns since the epoch)."""
    if not all(isinstance(d, dict) and isinstance(d.get("traceEvents"), list) for d in docs):
        raise ValueError("not a Proton trace: several documents, not all traces")
    base, events = epoch_ns(docs[0]), []
    for doc in docs:
        shift = epoch_ns(doc)
        shift = (shift - base) / 1e3 if None not in (base, shift) else 0.0
        for e in doc["traceEvents"]:
            if shift and isinstance(e, dict) and type(e.get("ts")) in (int, float):
                e = {**e, "ts": e["ts"] + shift}
            events.append(e)
    return {"traceEvents": events, "documents": len(docs), "baseTimeNanoseconds": base}


def provenance(path: Path) -> dict:
    """What made a run, from its provenance.json, read as untrusted: a JSON object of at
    most 64 KiB whose PROVENANCE keys hold null or a string of up to 200 characters."""
    try:
        record = json.loads(read_bytes(path, 2**16))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ValueError((str(e) or "not JSON").splitlines()[0][:100]) from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    for key in PROVENANCE:
        value = record.get(key)
        if value is not None and (type(value) is not str or len(value) > 200):
            raise ValueError(f"{key} is neither null nor a string of up to 200 characters")
    return {key: record.get(key) for key in PROVENANCE}


# --- Adding up a run: kernels by name and by call site ----------------------------------
# A leaf's time is its first metric `time (<ns|us|ms|s>)` that holds a finite number >= 0,
# as aorta reads it (parse_hatchet.py: aorta's five keys); a leaf with none is no kernel.


@functools.cache
def layout(keys: tuple) -> tuple[list, list, list]:
    """Of a node's metric names, in order: the times aorta reads and the CPU times of
    proton.cpu_timed_scope, each with its factor to ms, and the rates Proton's launch
    hook records (cached: nodes share a few names)."""
    times, cpu = [], []
    for key in filter(lambda key: type(key) is str, keys):  # MessagePack allows others
        head, _, unit = key.partition("(")  # "time (ns) (exc)": a unit of "ns) (exc"
        factor = TIME_UNIT_MS.get(unit.rstrip(")").strip().lower())
        if factor and head.strip().lower() in ("time", "cpu_time"):
            (times if head.strip().lower() == "time" else cpu).append((key, factor))
    return times, cpu, [key for key in keys if key in ROOFLINE]


def first_ms(metrics: dict, times: list) -> float | None:
    for key, factor in times:
        if (value := number(metrics[key])) is not None and value * factor < INF:
            return value * factor
    return None


@dataclass
class Kernel:
    """Launches summed: of one kernel, or of one kernel at one call site."""

    ms: float = 0.0
    launches: int | None = 0  # None: a count was unreadable
    bytes: float = 0.0
    flops: dict = field(default_factory=dict)  # flops, flops8 ... flops64, as recorded
    devices: set = field(default_factory=set)  # (type, id) of the launches that did
    durations: list = field(default_factory=list)  # us of each launch, from traces

    def add(self, ms: float, launches: int | None) -> "Kernel":
        self.ms += ms
        if self.launches is not None:
            self.launches = None if launches is None else self.launches + launches
        return self


@dataclass
class Capture:
    """What a run's captures add up to."""

    chains: "Chains" = field(default_factory=lambda: Chains())
    kernels: dict = field(default_factory=dict)  # name -> Kernel
    sites: dict = field(default_factory=dict)  # (chain, name) -> [ms, launches or None]
    scopes: dict = field(default_factory=dict)  # (kernel, scope) -> [cycles, normalized]
    cpu: dict = field(default_factory=dict)  # CPU-timed scope -> [CPU ms, GPU ms inside]
    unusable: int = 0  # kernel leaves with times, none of them usable
    untimed: set = field(default_factory=set)  # metric names of leaves with no time

    def launched(self, name: str, chain: int, ms: float, launches: int | None) -> Kernel:
        if (site := self.sites.get((chain, name))) is None:
            self.sites[chain, name] = [ms, launches]
        else:
            site[0] += ms
            site[1] = None if launches is None or site[1] is None else site[1] + launches
        if (kernel := self.kernels.get(name)) is None:
            kernel = self.kernels[name] = Kernel()
        return kernel.add(ms, launches)


def walk_tree(roots: list, capture: Capture) -> None:
    """Adds a tree's leaves in aorta's order (depth first, children in file order): each
    leaf with a usable time is a kernel's launches at the chain of user frames above it.
    A node with `cycles` is a scope of the kernel above it (instrumentation backend); one
    with `cpu_time` a CPU-timed scope, given the GPU time of the kernels inside it."""
    stack = [(iter(roots), 0, None, None)]  # (children, chain, kernel above, CPU scope)
    step, launched = capture.chains.step, capture.launched
    while stack:
        children, chain, kernel, cpu = stack[-1]
        for node in children:
            if type(node) is not dict:
                continue
            frame, metrics = node.get("frame"), node.get("metrics")
            name = frame.get("name", "") if type(frame) is dict else ""
            if type(name) is not str:
                name = str(name)
            if type(metrics) is not dict:
                metrics = {}
            if kernel is not None and "cycles" in metrics:
                sums = capture.scopes.setdefault((kernel, name), [0.0, 0.0])
                sums[0] += number(metrics["cycles"]) or 0.0
                sums[1] += number(metrics.get("normalized_cycles")) or 0.0
            times, cpu_times, rates = layout(tuple(metrics))
            below, inside = node.get("children"), cpu
            if (
                cpu_times and name != "ROOT" and (below or first_ms(metrics, times) is None)
            ):  # a CPU-timed scope
                if (ms := first_ms(metrics, cpu_times)) is not None:
                    inside = capture.cpu.setdefault(name, [0.0, 0.0])
                    inside[0] += ms
            if below and type(below) is list:  # walked, as aorta walks it
                inner, is_frame = step(chain, name)
                is_frame |= name == "ROOT" or "cycles" in metrics
                stack.append((iter(below), inner, kernel if is_frame else name, inside))
                break  # into the children: these siblings resume after them
            if not (name := name.strip()) or name == "ROOT":
                continue
            if (ms := first_ms(metrics, times) if times else None) is None:
                capture.unusable += bool(times)
                capture.untimed.update([] if times or cpu_times else set(metrics) - {"count"})
                continue
            count = number(metrics.get("count"))
            kernel_ = launched(name, chain, ms, None if count is None else int(count))
            if rates:
                recorded(kernel_, metrics, rates)
            if cpu is not None:
                cpu[1] += ms
        else:
            stack.pop()


def recorded(kernel: Kernel, metrics: dict, rates: list) -> None:
    """The bytes and flops Proton's launch hook recorded (-k triton), and where."""
    for key in rates:
        if value := number(metrics[key]):
            if key == "bytes":
                kernel.bytes += value
            else:
                kernel.flops[key] = kernel.flops.get(key, 0.0) + value
            kernel.devices.add((str(metrics.get("device_type")), str(metrics.get("device_id"))))


def walk_trace(events: list, capture: Capture) -> list:
    """Adds a trace's kernel events, each a launch of one, and returns them as (start us,
    end us, chain, name); the instrumentation backend's events (whose clock gives its
    frequency) are scopes, for views.py."""
    launches, by_stack = [], {}  # by_stack: a call stack met again is looked up
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("name"), str):
            continue
        ts, dur, name = e.get("ts"), number(e.get("dur")), e["name"].strip()
        try:
            ts = float(ts) if type(ts) in (int, float) else math.nan
        except OverflowError:  # an integer past a float's range
            continue
        if dur is None or not name or not abs(ts) + dur < 1e15:  # us: 30 years, no overflow
            continue
        args = e["args"] if isinstance(e.get("args"), dict) else {}
        if "Frequency (MHz)" in args:
            continue
        stack = args.get("call_stack")  # the frames, then the kernel
        stack = tuple(map(str, stack[:-1])) if isinstance(stack, list) else ()
        if (chain := by_stack.get(stack)) is None:
            chain = 0
            for frame in stack:
                chain = capture.chains.step(chain, frame)[0]
            by_stack[stack] = chain
        capture.launched(name, chain, dur / 1e3, 1).durations.append(dur)
        launches.append((ts, ts + dur, chain, name))
    return launches


@functools.cache
def frame_of(name: str) -> tuple | bool | None:
    """A python-context node's name, "file:line@function", as (file, line, function) for a
    frame of the user's; Triton's autotuner benchmarking as (AUTOTUNING, 0, ""); False for
    another frame (Python's, Triton's, torch's, proton_launch.py's, Proton's launch hook's);
    None for a node that is no frame (a kernel, ROOT)."""
    head, at, func = name.rpartition("@")
    file, colon, line = head.rpartition(":")
    if not (at and colon and line.isdecimal() and len(line) < 10):
        return None
    if (file.endswith("triton/runtime/autotuner.py") and func == "_bench") or (
        file.endswith("triton/testing.py") and func.startswith("do_bench")
    ):
        return AUTOTUNED
    if LIBRARY.search(file) or file.startswith(PACKAGES) or func.startswith("__proton"):
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
        """The chain with the node named name below it, and whether that is a frame; a
        <captured_at> node is a link of its own: above it, where a CUDA graph was replayed,
        below it, where it was captured (Proton 3.8+)."""
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

    def texts(self, chains: list, names: dict) -> dict:
        """Each of chains as "file:line function > ...", outermost first (frame_text): a
        chain's text is its parent's and its last link's, each worked out once; of a chain
        deeper than MAX_FRAMES, its innermost MAX_FRAMES below a count of the rest."""
        shown, out = {0: ""}, {}
        for chain in chains:
            if self.depths[chain] > MAX_FRAMES:
                out[chain] = " > ".join(frame_text(f, names) for f in self.frames(chain))
                continue
            path, link = [], chain
            while link not in shown:
                path.append(link)
                link = self.links[link][0]
            for link in reversed(path):
                parent, frame, repeats = self.links[link]
                text = frame_text([*frame, repeats], names)
                shown[link] = f"{shown[parent]} > {text}" if parent else text
            out[chain] = shown[chain]
        return out

    def frames(self, chain: int) -> list:
        """[file, line, function, repeats] of each link, outermost first: the innermost
        MAX_FRAMES, below a marker that counts the rest."""
        out = []
        while chain and len(out) < MAX_FRAMES:
            chain, frame, repeats = self.links[chain]
            out.append([*frame, repeats])
        if chain:
            out.append([f"[{self.depths[chain]} outer frames]", 0, "", 1])
        return out[::-1]


def frame_text(frame: list, names: dict) -> str:
    """A link of a chain, [file, line, function, repeats], as "file:line function", its
    file by the name names give it (a recursion: "(xN)"); a marker link as itself."""
    file, line, func, repeats = frame
    if not (line or func):  # CAPTURED, AUTOTUNED, or the outer frames left out
        return file
    return f"{names.get(file, file)}:{line} {func}" + (f" (x{repeats})" if repeats > 1 else "")


def short_names(files: set) -> dict:
    """Each file's shortest trailing part of its path that no other file shares. Sorted by
    reversed path, a path shares the most with a neighbour: one sort and one pass."""
    ordered = sorted((file.split("/")[::-1], file) for file in files)

    def shared(a: list, b: list) -> int:  # trailing components two paths have in common
        return next(
            (n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )

    names = {}
    for i, (parts, file) in enumerate(ordered):
        near = [ordered[j][0] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
        names[file] = "/".join(parts[: 1 + max((shared(parts, o) for o in near), default=0)][::-1])
    return names


def devices(records: list) -> dict:
    """The devices a tree's second part describes, (type, id) -> properties, with each
    one's nominal peak memory bandwidth: memory clock x bus width x DATA_RATE."""
    out = {}
    for record in records:
        for type_, by_id in record.items() if isinstance(record, dict) else ():
            for id_, info in by_id.items() if isinstance(by_id, dict) else ():
                info = info if isinstance(info, dict) else {}
                khz = [number(info.get(key)) for key in ("clock_rate", "memory_clock_rate")]
                sms, bits = (info.get(k) for k in ("num_sms", "bus_width"))
                out[str(type_), str(id_)] = {
                    "type": printable(str(type_)),
                    "id": printable(str(id_)),
                    "arch": printable(str(info["arch"])) if "arch" in info else None,
                    "sm_count": sms if type(sms) is int and 0 < sms < 2**20 else None,
                    "clock_mhz": khz[0] and khz[0] / 1e3,
                    "memory_clock_mhz": khz[1] and khz[1] / 1e3,
                    "memory_bus_bits": bits if type(bits) is int and 0 < bits < 2**20 else None,
                }
                bits = out[str(type_), str(id_)]["memory_bus_bits"] or 0
                peak = DATA_RATE.get(type_, 0) * (khz[1] or 0) * 1e3 * bits / 8 / 1e9
                out[str(type_), str(id_)]["peak_gbyte_per_s"] = peak or None
    return out


@dataclass
class Run:
    """One run's captures as read: what they add up to, and what views.py needs."""

    capture: Capture = field(default_factory=Capture)
    read: list = field(default_factory=list)
    unread: list = field(default_factory=list)  # {"file", "why"}: found, not read
    per_file: list = field(default_factory=list)  # (rank, path, ms, launches) of each read
    traced: list = field(default_factory=list)  # (path, launches, clock start) of traces
    scoped: list = field(default_factory=list)  # the instrumentation backend's trace events
    devices: dict = field(default_factory=dict)  # (type, id) -> properties
    events: int = 0  # trace events of any kind

    @property
    def viewed(self) -> bool:
        """Whether the run holds more than kernels and call sites: rates, traces, ranks,
        scopes (views.py)."""
        c, ranked = self.capture, any(rank is not None for rank, *_ in self.per_file)
        rates = any(k.bytes or k.flops for k in c.kernels.values())
        return bool(rates or ranked or self.traced or self.scoped or c.scopes or c.cpu)

    def problem(self, records: list) -> str | None:
        """Why there is nothing to summarise, saying what was found instead (records: the
        run's provenance); else None."""
        c = self.capture
        if len(ids := {r["run_id"] for r in records if r["run_id"]}) > 1:
            runs = ", ".join(sorted(ids))[:200]
            return f"captures of {len(ids)} runs (run_id {runs}): a summary never mixes runs"
        if not self.read and not self.unread:
            return (
                "no capture (.hatchet, .hatchet_msgpack, .chrome_trace): Triton 3.6 writes "
                "none when the script raises or calls sys.exit"
            )
        if not self.read:
            return f"no readable capture ({self.unread[0]['file']}: {self.unread[0]['why']})"
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
                '("ph": "X") with a name and a finite ts and dur >= 0'
            )
        return (
            "no timed kernel in the capture: ROOT only (a pinned AMD backend in cli mode on "
            "Triton 3.7 or older, or an env-mode payload that never called proton.start())"
        )


def read(files: list, skipped: list) -> Run:
    run = Run(unread=list(skipped))
    for path in files:
        before = totals(run.capture.kernels)
        try:
            data = load(path)
            if kind(path) == "trace":
                if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
                    raise ValueError("not a Proton trace (no traceEvents list)")
                events = data["traceEvents"]
                clock = epoch_ns(data)
                run.traced.append((path, walk_trace(events, run.capture), clock))
                scoped = (
                    e for e in events if isinstance(e, dict) and isinstance(e.get("args"), dict)
                )
                run.scoped += [e for e in scoped if "Frequency (MHz)" in e["args"]]
                run.events += len(events)
            else:
                roots = data if isinstance(data, list) else [data]
                if not any(isinstance(r, dict) and "frame" in r for r in roots):
                    raise ValueError("not a Proton tree (no frame at the top level)")
                walk_tree(roots, run.capture)
                run.devices |= devices(
                    [r for r in roots if isinstance(r, dict) and "frame" not in r]
                )
        except ValueError as e:
            run.unread.append({"file": str(path), "why": str(e)})
            continue
        run.read.append(path)
        after = totals(run.capture.kernels)
        launches = None if None in (before[1], after[1]) else after[1] - before[1]
        run.per_file.append((rank_of(path), path, after[0] - before[0], launches))
    return run


def totals(kernels: dict) -> tuple[float, int | None]:
    counts = [k.launches for k in kernels.values()]
    return sum(k.ms for k in kernels.values()), None if None in counts else sum(counts)


def records(files: list, unread: list) -> list:
    """What made the run, from each provenance.json found that exists, read or named."""
    found = []
    for path in files:
        if os.path.lexists(path):
            try:
                found.append(provenance(path))
            except ValueError as e:
                unread.append({"file": str(path), "why": str(e)})
    return found


# --- Writing --------------------------------------------------------------------------


def write_output(path: str | Path, data: bytes | str, inputs: set = frozenset()) -> None:
    """Writes data to path: a regular file (or none yet) is replaced atomically, with the
    mode the umask gives a new file; a link is written through to its target; anything
    else (a device, a pipe) is written directly. Refuses any of inputs ((device, inode)
    pairs), and a path that names no file."""
    data = data if isinstance(data, bytes) else data.encode("utf-8", "backslashreplace")
    path = os.fspath(path)
    if not path or path.endswith("/") or os.path.isdir(path):
        raise Refused(f"{printable(path[:200])!r} names no file to write")
    try:
        info = os.stat(path)  # through links, /dev/stdout's to a pipe included
    except FileNotFoundError:
        info = None
    if info and (info.st_dev, info.st_ino) in inputs:
        raise Refused(f"{printable(path[:200])} is one of the inputs; not written over")
    if info and not stat.S_ISREG(info.st_mode):
        with open(path, "wb") as f:
            f.write(data)
        return
    import tempfile  # here: most runs write no file

    target = Path(os.path.realpath(path))  # a short temporary name: the target's may be long
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:32]}.")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, target)
    except BaseException:  # a signal raised as an exception included: nothing left behind
        os.unlink(temporary)
        raise


def emit(data: bytes, status: int) -> int:
    """Writes data to stdout and returns status; OSError where stdout cannot take it
    (closed, full), which then takes nothing more, not even at exit."""
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError) as e:  # stdout None, closed or gone
        if sys.stdout is not None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise OSError(f"cannot write to stdout: {getattr(e, 'strerror', None) or e}") from None
    return status

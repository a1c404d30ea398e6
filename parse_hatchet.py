"""Summarise Proton captures as JSON: aorta's five keys, then per kernel, per call site,
per rank and, from traces, how busy the GPU was along each call site's launches; from
the instrumentation backend, the cycles of each scope inside a kernel.

    python parse_hatchet.py PATH [PATH ...] [-o FILE] [--table] [--folded FILE] [--top N]
                            [--diff BASE] [--world-size N]

Each PATH is a capture (.hatchet, .hatchet_msgpack or .chrome_trace, any gzipped, .gz; a
periodic flush's phases as NAME.part_<N>.<format>), or a directory searched for them; the
files found are one run, or one per rank of a run (proton.rank<R>.hatchet), and add up;
stderr names them when there are several. The five proton_* keys follow ROCm aorta's
Proton collector to the letter, from the trees, so a capture made here and one made by
`aorta sweep run` report the same numbers; one rule is ours: a node named ROOT is never a
kernel. From traces alone, the five keys count their kernel events. docs/summary.md
describes every key.

-o and --folded replace a regular file atomically, write through a symbolic link to its
target, and write anything else (a device, a pipe) directly; never over an input. -o -
is stdout.

Exit status: 0 a timed kernel or a kernel's scopes found, every capture read; 1 the
summary is written but a capture found was not read, or a rank of --world-size has none
(proton_unread names them), or nothing to summarise (the JSON names only
proton_artifact_dir; stderr says why: no kernel, captures of different runs, a --diff
base with no timed kernel); 2 usage, an input or output refused, or an output that could
not be written; 130 interrupted, 143 terminated (SIGTERM; a half-written -o removed).

The source reads in this order: finding and reading captures, aorta's five keys, the
summary, one section per view (kernels, call sites, timeline, ranks, scopes, diff),
output, the command line.
"""

import argparse
import contextlib
import functools
import gc
import itertools
import json
import math
import os
import re
import signal
import stat
import sys
from pathlib import Path

try:
    import msgspec  # optional: the standard library's json reads and writes the same
except ImportError:
    msgspec = None

TOP_N = 5  # aorta's length of proton_top_kernels
TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
MAX_GUNZIPPED = 2**32  # a gzipped capture may not unpack past 4 GiB
MAX_SOURCE_BYTES = 2**22  # source lines come from .py files of up to 4 MiB
DEEP_NESTING = 10**6  # frames of the pure-Python decoder, for trees too deep for the C one
DEMANGLE_SECONDS, DEMANGLE_BYTES, DEMANGLED_CHARS = 1.0, 2**28, 2**16  # bounds on a name
LAUNCH_GAP_US = 100  # gaps up to this long between a loop's launches: the host's launch cost


class Refused(Exception):
    """An input or output this tool will not use; the message is one line."""


def number(value):
    """A finite number >= 0 as a float, read as aorta reads a metric (numeric strings
    through float()); None for anything else: JSON has no NaN or Infinity, and an
    integer past a float's range does not convert."""
    kind_ = type(value)
    if kind_ is not float:
        if kind_ is not int and kind_ is not str:
            return None
        try:
            value = float(value)
        except (ValueError, OverflowError):
            return None
    return value if 0 <= value < math.inf else None


def whole(value):
    """A whole number >= 0 that a float holds exactly, else None."""
    return value if type(value) is int and 0 <= value < 2**53 else None


def clock(value):
    """A time in ns since the epoch (an int, past a float's exact range), else None."""
    return value if type(value) is int and 0 <= value < 2**63 else None


def printable(text):
    """text with control characters, and lone surrogates, written as escapes: a name in a
    capture must not move a terminal's cursor or forge a line of output."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def say(message):
    """One line on stderr, its names' control characters escaped; nothing when stderr is
    closed (print would fall back to stdout, into the JSON)."""
    if sys.stderr is not None:
        print(f"parse_hatchet: {printable(message)}", file=sys.stderr)


def warn(message):
    say(f"warning: {message}")


# --- Finding captures -----------------------------------------------------------------

# A capture's file name: the run's name (proton, proton.rank3), a phase Proton's periodic
# flushing completed (part_<N>) or none (the rest of the run), the format, maybe gzipped.
CAPTURE_NAME = re.compile(
    r"(?P<run>.+?)(?:\.part_(?P<phase>\d+))?\.(?P<format>hatchet|hatchet_msgpack|chrome_trace)"
    r"(?P<gz>\.gz)?",
    re.S,
)


def find_captures(paths, skipped=None):
    """The capture files named or found under the given paths, each once, in sorted order.
    A file named directly must be a regular file, and a folder named directly readable;
    one found in a folder that is not (a pipe, a device, a folder it cannot list) is
    skipped, as is a second link to one file and the gzip copy of a capture beside it.
    What is skipped is added to skipped ({"file", "why"}, and "same_as" where it is a
    copy of a file read), or said on stderr when skipped is None."""
    found, skipped = {}, skipped if skipped is not None else Warned()
    for given in paths:
        if not given:
            raise Refused("an empty path names nothing")
        path = Path(given)
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError as e:  # missing, a link loop, no permission
            raise Refused(f"{given[:200]}: {(e.strerror or str(e)).lower()}") from None
        if is_dir:
            failed = functools.partial(unlisted, given=given, skipped=skipped)
            for folder, dirs, files in os.walk(path, onerror=failed):
                dirs.sort()
                for file in files:
                    if CAPTURE_NAME.fullmatch(file):
                        add_capture(found, Path(folder, file), False, skipped)
        else:
            add_capture(found, path, True, skipped)
    names = {str(p) for p in found.values()}
    for key, path in list(found.items()):  # `gzip -k`: one capture, read once
        if str(path).endswith(".gz") and str(path)[:-3] in names:
            del found[key]
            skipped.append({"file": str(path), "why": f"a gzip copy of {path.name[:-3]}, "
                            "which is read instead", "same_as": str(path)[:-3]})  # fmt: skip
    return sorted(found.values())


class Warned(list):
    """A list of skipped files that says each on stderr as it is added."""

    def append(self, entry):
        warn(f"skipped {entry['file']}: {entry['why']}")


def unlisted(error, given, skipped):
    """os.walk's error: a folder named directly that cannot be listed is refused; one
    found in it is skipped."""
    why = (error.strerror or str(error)).lower()
    if os.path.samefile(error.filename, given):
        raise Refused(f"{given[:200]}: {why}")
    skipped.append({"file": error.filename, "why": f"a folder that cannot be listed: {why}"})


def add_capture(found, path, named, skipped):
    try:
        info = path.stat()
    except OSError as e:
        skipped.append({"file": str(path), "why": (e.strerror or str(e)).lower()})
        return
    if not stat.S_ISREG(info.st_mode):
        if named:
            raise Refused(f"{printable(str(path)[:200])}: not a regular file")
        skipped.append({"file": str(path), "why": "not a regular file"})
        return
    same = found.setdefault((info.st_dev, info.st_ino), path)
    if same != path:
        skipped.append({"file": str(path), "why": f"the same file as {same}",
                        "same_as": str(same)})  # fmt: skip


def name_parts(path):
    """The parts of a capture's name (CAPTURE_NAME's groups); a file named directly
    with none of Proton's suffixes is read as a .hatchet tree."""
    found = CAPTURE_NAME.fullmatch(path.name)
    return found.groupdict() if found else {"run": path.name, "phase": None,
                                           "format": "hatchet", "gz": None}  # fmt: skip


def kind(path):
    return "trace" if name_parts(path)["format"] == "chrome_trace" else "tree"


def rank_of(path):
    """The rank a launcher gave the process that wrote path (rank<R> in its name)."""
    found = re.search(r"rank(\d+)", path.name)
    return int(found[1]) if found else None


# --- Reading a capture ----------------------------------------------------------------


def read_file(path, limit=None):
    """A regular file's bytes (a gzipped one's unpacked); raises ValueError with a
    one-line reason."""
    try:
        # O_NONBLOCK: a file swapped for a pipe since it was found must not block.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ValueError("not a regular file")
            if limit is not None and info.st_size > limit:
                raise ValueError(f"larger than {limit} bytes")
            data = f.read()
        if path.name.endswith(".gz"):
            import gzip  # here, as the imports below: what most runs never need costs start-up
            import io

            # Streamed a MiB at a time: memory grows with what the file unpacks to, up to
            # the cap, and nothing is reserved for the cap itself.
            out = io.BytesIO()
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as z:
                while chunk := z.read(2**20):
                    if out.write(chunk) and out.tell() > MAX_GUNZIPPED:
                        raise ValueError(f"unpacks past {MAX_GUNZIPPED >> 30} GiB")
            data = out.getvalue()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(getattr(e, "strerror", None) or str(e) or type(e).__name__) from None
    return data


def load(path):
    """The decoded capture: a tree (JSON or MessagePack) or a trace (JSON, its documents
    joined into one); raises ValueError with a one-line reason."""
    data = read_file(path)
    if name_parts(path)["format"] == "hatchet_msgpack":
        if msgspec is None:
            raise ValueError("MessagePack needs msgspec (pip install msgspec)")
        try:
            return msgspec.msgpack.decode(data)
        except RecursionError:
            raise ValueError("nested deeper than msgspec decodes") from None
        except msgspec.DecodeError as e:
            raise ValueError(f"not valid MessagePack: {' '.join(str(e).split())[:200]}") from None
    if msgspec:  # about a third faster than json, for what Proton writes
        try:
            return msgspec.json.decode(data)
        except RecursionError:
            return deep_loads(data.decode("utf-8", errors="replace"))
        except msgspec.DecodeError:
            pass  # json's rules and messages decide: NaN, lone surrogates, 1e400 ...
    try:
        text = data.decode("utf-8")
        return json.loads(text)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        return deep_loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data" and kind(path) == "trace":
            return joined(documents(text))
        raise ValueError(f"not valid JSON: {' '.join(str(e).split())[:200]}") from None
    except ValueError as e:  # integers of more digits than Python reads
        raise ValueError(f"not valid JSON: {' '.join(str(e).split())[:200]}") from None


def documents(text):
    """The JSON documents written one after another in text (Proton writes a trace's
    streams so when a CUDA graph was captured on a stream of its own)."""
    decoder, at, out = json.JSONDecoder(), 0, []
    while (at := json.decoder.WHITESPACE.match(text, at).end()) < len(text):
        try:
            document, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON: {' '.join(str(e).split())[:200]}") from None
        out.append(document)
    return out


def joined(docs):
    """One trace of several documents: every document's events, on the first's clock
    where each says where its clock starts (baseTimeNanoseconds)."""
    if not all(isinstance(d, dict) and isinstance(d.get("traceEvents"), list) for d in docs):
        raise ValueError("not a Proton trace (a document with no traceEvents list)")
    base = clock(docs[0].get("baseTimeNanoseconds"))
    events = []
    for doc in docs:
        shift = clock(doc.get("baseTimeNanoseconds"))
        if base is None or shift is None or shift == base:
            events += doc["traceEvents"]
            continue
        for e in doc["traceEvents"]:  # this document's clock onto the first's, in us
            ts = e.get("ts") if isinstance(e, dict) else None
            if type(ts) in (int, float):
                e = {**e, "ts": ts + (shift - base) / 1e3}
            events.append(e)
    out = {"traceEvents": events, "documents": len(docs)}
    if base is not None:
        out["baseTimeNanoseconds"] = base
    return out


PROVENANCE_KEYS = ("triton", "torch", "device", "backend_asked", "backend_used", "mode_asked",
                   "mode_used", "run_id")  # fmt: skip
MAX_PROVENANCE_BYTES = 2**16


def provenance_of(path):
    """What made a capture, from the <run name>.provenance.json written beside it
    (proton.rank1.provenance.json for proton.rank1.hatchet and its phases); None where
    there is none. Read as untrusted: a JSON object of at most 64 KiB, whose known keys
    each hold null or a string of up to 200 characters (others are ignored); anything
    else raises ValueError."""
    file = path.parent / f"{name_parts(path)['run']}.provenance.json"
    if not os.path.lexists(file):
        return None
    try:
        record = json.loads(read_file(file, MAX_PROVENANCE_BYTES).decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ValueError(str(file), f"{(str(e) or 'not JSON').splitlines()[0][:100]}") from None
    if not isinstance(record, dict):
        raise ValueError(str(file), "not a JSON object")
    for key in PROVENANCE_KEYS:
        value = record.get(key)
        if value is not None and (type(value) is not str or len(value) > 200):
            raise ValueError(str(file), f"{key} is neither null nor a string of 200 characters")
    return {key: record.get(key) for key in PROVENANCE_KEYS}


@contextlib.contextmanager
def acyclic():
    """For decoding a capture: JSON makes containers that cannot form cycles, up to
    millions of them, and the cyclic collector would walk the growing capture again
    and again for nothing (most of the decoding's time). It is paused while the capture
    is decoded. Run as a script, the capture is then frozen out of its sight; imported,
    nothing is frozen: freezing holds every object of the importing process for good
    (Triton's, whose bindings then report them leaked at exit)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if __name__ == "__main__":
            gc.freeze()
        if enabled:
            gc.enable()


def deep_loads(text):
    """json.loads for trees nested deeper than the C decoder recurses (Proton's python
    context nests two levels a frame): the standard library's pure-Python decoder. Since
    Python 3.11 a Python call takes no C stack, so the recursion needs no thread with a
    large stack (which an address-space limit refuses), only a higher recursion limit."""
    if sys.version_info < (3, 11):
        raise ValueError("nested deeper than Python 3.10 decodes (use Python 3.11 or later)")
    decoder = json.JSONDecoder()
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(DEEP_NESTING)
    try:
        return decoder.decode(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {DEEP_NESTING // 4} frames") from None
    except ValueError as e:
        raise ValueError(f"not valid JSON: {' '.join(str(e).split())[:200]}") from None
    finally:
        sys.setrecursionlimit(limit)


# --- aorta's five keys, and the walk that finds them ----------------------------------


@functools.cache
def layout(keys):
    """For a leaf's metric names, in order: the time metrics aorta would read, each with
    its factor to ms; the names holding bytes and flops; and the CPU time metrics of
    proton.cpu_timed_scope, with their factors. Cached: every leaf of a
    capture has the same few names."""
    times, rates, cpu = [], [], []
    for key in keys:
        head, _, tail = key.partition("(")
        # "time (ns) (exc)": a unit of "ns) (exc", no time aorta reads
        factor = TIME_UNIT_MS.get(tail.rstrip(")").strip().lower())
        head = head.strip().lower()
        if head in ("time", "cpu_time") and factor is not None:
            (times if head == "time" else cpu).append((key, factor))
        if key == "bytes" or key.startswith("flops"):
            rates.append((key, 2 if key == "bytes" else 3))
    return times, rates, cpu


def first_usable(metrics, times):
    """The first of times' metrics whose value is a finite number >= 0, in ms; else None."""
    for key, factor in times:
        ms = number(metrics[key])
        if ms is not None and ms * factor < math.inf:
            return ms * factor
    return None


class Totals:
    """What the captures add up to: per kernel, in the order first seen; per call site
    (chain) and kernel; per scope; and how many leaves had a time but none usable."""

    def __init__(self):
        self.kernels = {}  # name -> [ms, launches or None, bytes, flops]
        self.sites = {}  # (chain id, kernel name) -> [ms, launches or None]
        self.scopes = {}  # (kernel, scope) -> [cycles, normalized cycles]
        self.cpu = {}  # CPU-timed scope -> [CPU ms, GPU ms of the kernels inside]
        self.python = False
        self.unusable = 0
        self.untimed = set()  # the metrics of leaves with no time metric aorta reads

    def add_leaf(self, name, chain, metrics):
        """A leaf of a tree: a kernel's launches when it has a usable time, as aorta reads
        it (the first usable `time (<unit>)` metric, in ms; `count` for launches). Returns
        its ms, or None for no kernel."""
        times, rates, _ = layout(tuple(metrics))
        ms = first_usable(metrics, times)
        if ms is None:
            self.unusable += bool(times)
            if not times:
                self.untimed.update(k for k in metrics if k != "count")
            return None
        count = number(metrics.get("count"))
        k = self.add(name, chain, ms, int(count) if count is not None else None)
        for key, index in rates:
            k[index] += number(metrics[key]) or 0.0
        return ms

    def add_cpu(self, name, metrics):
        """A node's CPU time (proton.cpu_timed_scope), if it has one: its sums, to which
        the GPU time of the kernels inside it is added; else None."""
        ms = first_usable(metrics, layout(tuple(metrics))[2])
        if ms is None or name == "ROOT":  # ROOT holds a zero of every metric
            return None
        sums = self.cpu.setdefault(name, [0.0, 0.0])
        sums[0] += ms
        return sums

    def add(self, name, chain, ms, count):
        """ms and count launches of kernel name under chain; returns the kernel's sums."""
        k = self.kernels.get(name)
        if k is None:
            k = self.kernels[name] = [ms, count, 0.0, 0.0]
        else:
            k[0] += ms
            k[1] = None if k[1] is None or count is None else k[1] + count
        site = self.sites.get((chain, name))
        if site is None:
            self.sites[chain, name] = [ms, count]
        else:
            site[0] += ms
            site[1] = None if site[1] is None or count is None else site[1] + count
        return k

    def add_scope(self, kernel, scope, metrics):
        """A scope of the instrumentation backend inside kernel: its cycles."""
        cycles = self.scopes.setdefault((kernel, scope), [0.0, 0.0])
        cycles[0] += number(metrics.get("cycles")) or 0.0
        cycles[1] += number(metrics.get("normalized_cycles")) or 0.0

    def launched(self):
        """GPU ms and launches (None when a count is unreadable) so far."""
        counts = [k[1] for k in self.kernels.values()]
        return sum(k[0] for k in self.kernels.values()), (
            None if None in counts else sum(counts)
        )  # fmt: skip


def walk_tree(roots, chains, totals):
    """Add one tree's leaves to totals, in aorta's order (depth first, children in file
    order): each leaf with a usable time is a kernel's launches, summed by name and by
    the chain of the user's frames above it (a CUDA graph's replays included, under their
    <captured_at> frame); a node with `cycles` is a scope of the kernel above it (the
    instrumentation backend); a node with `cpu_time` a CPU-timed scope."""
    stack = [(iter(roots), 0, None, None)]  # (children, chain, kernel above, CPU scope)
    while stack:
        children, chain, kernel, cpu = stack[-1]
        for node in children:
            if type(node) is not dict:
                continue
            frame, metrics = node.get("frame"), node.get("metrics")
            name = frame.get("name") if type(frame) is dict else None
            if type(name) is not str:
                name = "" if name is None else str(name)
            if type(metrics) is not dict:
                metrics = {}
            if kernel is not None and "cycles" in metrics:
                totals.add_scope(kernel, name, metrics)
            below = node.get("children")
            if below and type(below) is list:  # walked whatever its frame, as aorta does
                inside = totals.add_cpu(name, metrics) or cpu
                inner, is_python = chains.step(chain, name)
                totals.python = totals.python or is_python
                keep = is_python or name in ("ROOT", CAPTURED_AT) or "cycles" in metrics
                stack.append((iter(below), inner, kernel if keep else name, inside))
                break  # down into the children; these siblings resume after them
            name = name.strip()
            if name and name != "ROOT":
                ms = totals.add_leaf(name, chain, metrics)
                if ms is None:  # a leaf that is no kernel may be a CPU-timed scope
                    totals.add_cpu(name, metrics)
                elif cpu is not None:
                    cpu[1] += ms
        else:
            stack.pop()


def five_keys(kernels):
    """aorta's keys but the artifact folder, from kernel name -> [ms, launches or None,
    ...]: the total GPU time, the largest kernel's, the five largest names (ties in
    first-seen order: the sort is stable) and the launches, left out when any kernel's
    count is unreadable. None of them for no kernel."""
    if not kernels:
        return {}
    ranked = sorted(kernels.items(), key=lambda item: item[1][0], reverse=True)
    keys = {}
    if all(k[1] is not None for k in kernels.values()):
        keys["proton_kernel_count"] = sum(k[1] for k in kernels.values())
    keys["proton_gpu_time_ms"] = sum(k[0] for k in kernels.values())
    keys["proton_top_kernel_ms"] = ranked[0][1][0]
    keys["proton_top_kernels"] = [name for name, _ in ranked[:TOP_N]]
    return keys


def devices(records, seen):
    """The device records after a tree (kind -> id -> properties), each device once."""
    out = []
    for record in records:
        for kind_, by_id in record.items() if isinstance(record, dict) else ():
            for dev_id, info in by_id.items() if isinstance(by_id, dict) else ():
                info = info if isinstance(info, dict) else {}
                mhz = [number(info.get(k)) for k in ("clock_rate", "memory_clock_rate")]
                entry = {
                    "type": printable(str(kind_)),
                    "id": printable(str(dev_id)),
                    "arch": printable(str(info.get("arch"))) if "arch" in info else None,
                    "sm_count": whole(info.get("num_sms")),  # CUs on AMD
                    "clock_mhz": mhz[0] / 1000 if mhz[0] is not None else None,
                    "memory_clock_mhz": mhz[1] / 1000 if mhz[1] is not None else None,
                    "memory_bus_bits": whole(info.get("bus_width")),
                }
                if entry not in seen:
                    seen.append(entry)
                    out.append(entry)
    return out


# --- The summary ----------------------------------------------------------------------


def summarize(paths, artifact_dir, unread=(), world_size=None):
    """The JSON summary of the given capture files; the call sites with their frames (for
    --diff and --folded); and a one-line problem or None. Files of one run's ranks (named
    rank<R>) and phases (part_<N>) add up, and each rank is summed apart too. unread: the
    files find_captures found but skipped ({"file", "why"}), named in proton_unread with
    those that cannot be read here; world_size: ranks 0 to world_size - 1 are expected."""
    chains, totals, seen_devices = Chains(), Totals(), []
    summary = {"proton_artifact_dir": artifact_dir}
    unread, read, traced, scope_events, ranks = list(unread), [], [], [], {}
    events = 0  # a trace's events of any kind, for saying what was found instead of kernels
    for path in paths:
        ms_before, launched_before = totals.launched()
        try:
            with acyclic():
                data = load(path)
            if kind(path) == "trace":
                if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
                    raise ValueError("not a Proton trace (no traceEvents list)")
                launched, scoped, unnamed = trace_events(data, chains, totals)
                if unnamed:
                    warn(f"{path}: skipped {unnamed} events with no name")
                if data.get("documents", 1) > 1:
                    say(f"{path}: {data['documents']} JSON documents, one after another: read all")
                traced.append((path, launched, clock(data.get("baseTimeNanoseconds"))))
                scope_events += scoped
                events += len(data["traceEvents"])
            else:
                roots = data if isinstance(data, list) else [data]
                if not any(isinstance(r, dict) and "frame" in r for r in roots):
                    raise ValueError("not a Proton tree (no frame at the top level)")
                walk_tree(roots, chains, totals)
                devices([r for r in roots if isinstance(r, dict) and "frame" not in r],
                        seen_devices)  # fmt: skip
        except ValueError as e:
            unread.append({"file": str(path), "why": str(e)})
            continue
        read.append(path)
        if (rank := rank_of(path)) is not None:
            r = ranks.setdefault(rank, {"rank": rank, "gpu_time_ms": 0.0, "kernel_count": 0,
                                        "files": []})  # fmt: skip
            ms, launched = totals.launched()
            r["gpu_time_ms"] += ms - ms_before
            if None in (r["kernel_count"], launched, launched_before):
                r["kernel_count"] = None
            else:
                r["kernel_count"] += launched - launched_before
            r["files"].append(str(path))
    provenance = {}
    for path in read:
        try:
            provenance[path] = provenance_of(path)
        except ValueError as e:
            provenance[path] = None
            if (entry := {"file": e.args[0], "why": e.args[1]}) not in unread:
                unread.append(entry)
    if len(runs := {p["run_id"] for p in provenance.values() if p and p["run_id"]}) > 1:
        return summary, (chains, {}), (
            f"captures of {len(runs)} runs (run_id {', '.join(sorted(runs))[:200]}): a summary "
            "never mixes runs; summarise each apart"
        )  # fmt: skip
    if world_size is not None and read:
        present = set(ranks) | ({0} if world_size == 1 and not ranks else set())
        for r in range(world_size):
            if r not in present:
                why = f"no capture of rank {r} was read (--world-size {world_size})"
                unread.append({"file": None, "rank": r, "why": why})
    if read:  # a file that cannot be read beside good ones: named, and the summary made
        for entry in unread:
            warn(f"skipped {entry['file']}: {entry['why']}" if entry["file"] else entry["why"])
    if len(read) > 1:
        say(f"combined {len(read)} captures: {', '.join(map(str, read))}")

    chains.names = short_names({frame[0] for _, frame, _ in chains.links[1:]})
    sources = Sources()
    source_of = lambda chain: sources.line(*chains.links[chain][1][:2]) if chain else None  # noqa: E731
    kernels, scopes = totals.kernels, totals.scopes
    by_chain = {}
    for (chain, name), sums in totals.sites.items():
        by_chain.setdefault(chain, {})[name] = sums
    sites = chains, by_chain
    if not paths and not unread:
        return summary, sites, "no capture file found (.hatchet, .hatchet_msgpack, .chrome_trace)"
    if not read:
        first = unread[0]
        return summary, sites, f"no readable capture ({first['file']}: {first['why']})"
    if not (kernels or scopes or scope_events):
        return summary, sites, no_kernel(totals, events)

    gpu_ms = sum(k[0] for k in kernels.values())
    if not math.isfinite(gpu_ms):  # as aorta: times that add up past a float's range
        return summary, sites, "kernel times add up to infinity"
    summary.update(five_keys(kernels))  # a capture of scopes alone has none of them
    summary["proton_context"] = "python" if totals.python else "shadow"
    summary["proton_device"] = seen_devices
    summary["proton_provenance"] = provenance_summary(provenance)
    summary["proton_unread"] = unread
    ranked = sorted(kernels.items(), key=lambda item: item[1][0], reverse=True)
    if kernels:
        summary["proton_kernels"] = [kernel_row(name, k, gpu_ms) for name, k in ranked]
        summary["proton_callsites"] = sorted(
            (
                {
                    "callsite": chains.text(chain),
                    "source": source_of(chain),
                    "ms": sum(ms for ms, _ in by_name.values()),
                    "kernels": [
                        {"name": name, "launches": n, "ms": ms} for name, (ms, n) in by_name.items()
                    ],  # fmt: skip
                }
                for chain, by_name in by_chain.items()
                if chain  # kernels with no user frame above them (shadow context)
            ),
            key=lambda site: site["ms"],
            reverse=True,
        )
    if totals.cpu:
        rows = [
            {"scope": name, "cpu_ms": cpu, "gpu_ms": gpu} for name, (cpu, gpu) in totals.cpu.items()
        ]
        summary["proton_cpu_scopes"] = sorted(rows, key=lambda row: row["cpu_ms"], reverse=True)
    if traced and kernels:  # a timeline per process: without a shared start, ranks' clocks differ
        summary["proton_timeline"] = []
        by_run = {}  # one process's phases are one timeline
        for path, launched, _ in traced:
            by_run.setdefault((path.parent, name_parts(path)["run"]), [path, []])[1].extend(
                launched
            )
        for path, launched in by_run.values():
            rank = rank_of(path)
            for entry in timeline(launched, chains.text, source_of):
                summary["proton_timeline"].append(
                    entry if rank is None else {"rank": rank, **entry}
                )
    if scopes:
        summary["proton_scopes"] = scope_rows(scopes)
    if scope_events:
        summary["proton_scopes"], summary["proton_sm_spread"] = scope_summary(scope_events)
    if ranks and kernels:  # scopes alone have no time to compare ranks by
        summary.update(rank_summary(ranks, read, traced))
    return summary, sites, None


def no_kernel(totals, events):
    """Why a capture that was read has no timed kernel, saying what it holds instead."""
    if totals.unusable:
        return (f"no timed kernel: {totals.unusable} kernel leaves have a time that is not a "
                "finite number >= 0 (infinite, negative or not a number)")  # fmt: skip
    if totals.untimed:
        found = ", ".join(sorted(map(str, totals.untimed)))[:200]
        return (f"no timed kernel: leaves carry no `time (ns|us|ms|s)` metric aorta reads "
                f"(found: {found})")  # fmt: skip
    if events:
        return (f"no timed kernel: the trace's {events} events include no complete event "
                '("ph": "X") with a name and a finite ts and dur >= 0')  # fmt: skip
    return (
        "no timed kernel in the capture: ROOT only (a pinned AMD backend in cli mode, "
        "or an env-mode payload that never called proton.start())"
    )


def provenance_summary(provenance):
    """proton_provenance: what made the captures (provenance_of's record), one object
    where every capture says the same (null where none says anything), else a list of
    each rank's own, with its rank (null: a file with no rank in its name)."""
    records = list(provenance.values())
    if all(r == records[0] for r in records):
        return records[0]
    out = []
    for path, record in provenance.items():
        entry = {"rank": rank_of(path), **(record or dict.fromkeys(PROVENANCE_KEYS))}
        if entry not in out:
            out.append(entry)
    return sorted(out, key=lambda e: -1 if e["rank"] is None else e["rank"])


# --- View: kernels --------------------------------------------------------------------


def kernel_row(name, k, gpu_ms):
    ms, count, moved, flops = k
    seconds = ms / 1e3
    row = {
        "name": name,
        "readable_name": readable(name),
        "launches": count,
        "total_ms": ms,
        "mean_us": ms * 1e3 / count if count else None,
        "share": ms / gpu_ms if gpu_ms else 0.0,
    }
    if why := not_demangled(name):
        row["not_demangled"] = why
    if moved:
        row["gbyte_per_s"] = moved / seconds / 1e9 if seconds else None
    if flops:
        row["flop_per_s"] = flops / seconds if seconds else None
    return row


def readable(name):
    """A C++ kernel name demangled, without its return type and parameters, and with
    nested template arguments shortened to <…> (all of them, if it is still long); the
    name as it is where it cannot be demangled within bounds (not_demangled says why)."""
    full = demangle(name)[0] if name.startswith("_Z") else None
    if full is None:
        return name
    name = full
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


def not_demangled(name):
    """Why a mangled name is shown mangled (past a bound), or None."""
    return demangle(name)[1] if name.startswith("_Z") else None


@functools.cache
def demangle(name):
    """(the demangled name, None), or (None, why not) where demangling it would cost
    more than DEMANGLE_SECONDS or DEMANGLE_BYTES of memory, or give more than
    DEMANGLED_CHARS: a few hundred crafted bytes of nested template substitutions
    demangle to gigabytes (a demangling bomb). The demangler is C code that cannot be
    stopped in this process, so a child process runs it under those limits; why is
    said once on stderr."""
    cxxfilt = _cxxfilt()
    if cxxfilt is None or not name.isascii():  # a mangled name is ASCII
        return None, None
    import resource
    import select
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: demangle, write the result, and exit without cleanup
        code = b"M"
        try:
            os.close(r)
            page = os.sysconf("SC_PAGE_SIZE")
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * page
            hard = resource.getrlimit(resource.RLIMIT_AS)[1]
            soft = used + DEMANGLE_BYTES
            resource.setrlimit(resource.RLIMIT_AS, (soft if hard < 0 else min(soft, hard), hard))
            code = b"O" + cxxfilt.demangle(name).encode()[: DEMANGLED_CHARS + 1]
        except cxxfilt.InvalidName:
            code = b"E"  # no mangled name after all: shown as it is
        except BaseException:  # out of memory, as the limit makes it
            pass
        finally:
            os.write(w, code)
            os._exit(0)
    os.close(w)
    try:
        if not select.select([r], [], [], DEMANGLE_SECONDS)[0]:
            os.kill(pid, signal.SIGKILL)
            why = f"demangling takes over {DEMANGLE_SECONDS} s"
        else:
            out = b""
            while chunk := os.read(r, 2**16):
                out += chunk
            code, text = out[:1], out[1:].decode("ascii", "replace")
            why = {b"E": None, b"M": f"demangling needs over {DEMANGLE_BYTES >> 20} MiB"}.get(
                code, f"demangles past {DEMANGLED_CHARS} characters"
            )
            if code == b"O" and len(text) <= DEMANGLED_CHARS:
                return text, None
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if why:
        warn(f"{name[:60]}...: left mangled: {why}")
    return None, why


@functools.cache
def _cxxfilt():
    """The cxxfilt module, imported at the first mangled name (its import locates the C++
    runtime: about 17 ms of start-up), or None where it is missing: names stay mangled."""
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


def kernels_table(summary, top):
    """The kernels, the largest first."""
    if not summary.get("proton_kernels"):
        return []
    lines = []
    lines += [f"{'ms':>10} {'share':>6} {'launches':>8} {'mean us':>9} {'GB/s':>8}  kernel"]
    for k in summary["proton_kernels"][:top]:
        gbs = f"{k['gbyte_per_s']:8.0f}" if k.get("gbyte_per_s") else f"{'':8}"
        mean = f"{k['mean_us']:9.2f}" if k["mean_us"] is not None else f"{'?':>9}"
        n = k["launches"] if k["launches"] is not None else "?"
        lines.append(f"{k['total_ms']:10.4f} {k['share']:6.1%} {n:>8} {mean} {gbs}  "
                     f"{printable(k['readable_name'])}")  # fmt: skip
    lines.append("(launches: each kernel's count, summed as aorta sums proton_kernel_count)")
    return lines


# --- View: call sites -----------------------------------------------------------------


def _package_roots():
    """Where this machine's Triton (Proton with it) and torch are installed, wherever
    that is (a source build of Triton, say): found, not imported."""
    import importlib.util

    roots = []
    for package in ("triton", "torch"):
        spec = importlib.util.find_spec(package)
        roots += spec.submodule_search_locations or [] if spec else []
    return tuple(f"{root.rstrip('/')}/" for root in roots)


# Frames that are not the user's own, by install root: Python's standard library and
# frozen modules (lib/python3.X, but not its site-packages), and Triton's (Proton's) and
# torch's packages, as installed on any machine and on this one. Everything else is the
# user's, a package of theirs installed beside torch included.
CAPTURED_AT = "<captured_at>"  # Proton 3.8+: below it, where a replayed CUDA graph was captured
LIBRARY = re.compile(
    r"^<|/lib/python3\.\d+/(?!(site|dist)-packages/)|/(site|dist)-packages/(triton|torch)/"
)
PACKAGE_ROOTS = _package_roots()


@functools.cache
def frame_of(name):
    """A python-context node's name, "file:line@function", as (file, line, function) when
    the frame is the user's own; False for another python frame; None for a node that is
    no python frame (a kernel, ROOT, a scope)."""
    head, at, func = name.rpartition("@")
    file, colon, line = head.rpartition(":")
    if not (at and colon and line.isdecimal()):
        return None
    if (
        LIBRARY.search(file)
        or file.startswith(PACKAGE_ROOTS)
        or func.startswith("__proton")  # GPU work of Proton's launch-metadata hook
        or file.rpartition("/")[2] == "proton_launch.py"  # this repository's Proton launcher
    ):
        return False
    return file, int(line), func


class Chains:
    """Chains of the user's frames, outermost first, each stored once and known by an int
    (0: the empty chain). A frame repeated by recursion counts up its chain's last link
    instead of adding one, so that a recursion n deep costs one link, not n."""

    def __init__(self):
        self.links = [(0, None, 0)]  # id -> (parent id, (file, line, function), repeats)
        self.ids = {}
        self.names = {}  # file -> the name shown for it, once every chain is known

    def step(self, chain, name):
        """The chain with the frame named name added (the same chain for a node that is
        not a user frame), and whether name is a python frame. A <captured_at> node is a
        link of its own: the frames above it replayed a CUDA graph, those below captured
        it."""
        frame = frame_of(name) if name != CAPTURED_AT else (CAPTURED_AT, 0, "")
        if not frame:
            return chain, frame is not None
        parent, last, repeats = self.links[chain]
        key = (parent, frame, repeats + 1) if last == frame else (chain, frame, 1)
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.links)
            self.links.append(key)
        return found, True

    def frames(self, chain):
        """(file, line, function, repeats) of each link, outermost first."""
        out = []
        while chain:
            chain, frame, repeats = self.links[chain]
            out.append((*frame, repeats))
        return out[::-1]

    def frame_text(self, file, line, func, repeats):
        if file == CAPTURED_AT:
            return "[CUDA graph captured at]"
        return f"{self.names.get(file, file)}:{line} {func}" + (
            f" (x{repeats})" if repeats > 1 else ""
        )

    def join(self, frames):
        return " > ".join(self.frame_text(*frame) for frame in frames)

    def text(self, chain):
        """The chain as "file:line function > ...", outermost first; a CUDA graph's
        kernels as launched where the graph was captured, and where it was replayed."""
        frames = self.frames(chain)
        cut = max((i for i, f in enumerate(frames) if f[0] == CAPTURED_AT), default=None)
        if cut is None:
            return self.join(frames)
        captured = self.join(frames[cut + 1 :]) or "(no frame of yours)"
        replayed = self.join(frames[:cut]) or "(no frame of yours)"
        return f"{captured} [a CUDA graph captured here, replayed at {replayed}]"


def short_names(files):
    """Each file's shortest trailing part of its path that no other file shares: in the
    order of the reversed paths, what a path shares with another it shares with one of
    its neighbours, so one sort and a pass find every name."""
    ordered = sorted((file.split("/")[::-1], file) for file in files)

    def shared(a, b):  # how many trailing components two paths have in common
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        return n

    names = {}
    for i, (parts, file) in enumerate(ordered):
        near = [ordered[j][0] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
        keep = max((shared(parts, other) for other in near), default=0) + 1
        names[file] = "/".join(parts[:keep][::-1])
    return names


class Sources:
    """Source lines of the user's frames, from regular .py files of a sane size here. A
    capture names the paths: following them to anything but Python source would let a
    crafted capture print lines of other files. A file is read up to the line asked,
    again from its start only when a later one is asked, and then at least twice as far:
    lines asked in order cost reading the file about twice, not once a line."""

    def __init__(self):
        self.files = {}

    def line(self, file, number):
        if file not in self.files:
            self.files[file] = [] if self._usable(file) else None
        lines = self.files[file]
        if lines is None or number < 1:
            return None
        if len(lines) < number:
            self._read(file, lines, max(number, 2 * len(lines)))
        text = lines[number - 1].strip()[:200] if number <= len(lines) else ""
        return printable(text) or None

    @staticmethod
    def _usable(file):
        try:
            path = Path(file).resolve(strict=True)
            info = path.stat()
        except (OSError, RuntimeError):
            return False
        return (
            path.suffix == ".py" and stat.S_ISREG(info.st_mode) and info.st_size <= MAX_SOURCE_BYTES
        )

    @staticmethod
    def _read(file, lines, upto):
        lines.clear()
        try:
            with open(file, encoding="utf-8", errors="replace") as f:
                for line in f:
                    lines.append(line)
                    if len(lines) == upto:
                        break
        except OSError:
            pass


def labelled(site):
    """A call site with the source line of its innermost frame, where readable here."""
    text = f"{site['callsite']}  {site['source']}" if site.get("source") else site["callsite"]
    return printable(text)


def folded(sites):
    """Folded stacks, `frame;frame;kernel <ns>`, as flamegraph.pl and speedscope read:
    ';' in a name is escaped, so that it cannot split a frame."""
    chains, by_chain = sites

    def frame(text):
        return printable(text).replace(";", "\\x3b")

    lines = []
    for chain, by_name in by_chain.items():
        stack = [frame(chains.frame_text(*f)) for f in chains.frames(chain)]
        for name, (ms, _) in by_name.items():
            lines.append(";".join([*stack, frame(readable(name))]) + f" {round(ms * 1e6)}\n")
    return "".join(lines)


def callsites_table(summary, top):
    """Each call site with its kernels."""
    if not summary.get("proton_callsites"):
        return []
    lines = []
    lines += [f"{'ms':>10} {'launches':>8}  call site > kernel"]
    for site in summary["proton_callsites"][:top]:
        lines.append(f"{site['ms']:10.4f} {'':8}  {labelled(site)}")
        for k in site["kernels"]:
            n = k["launches"] if k["launches"] is not None else "?"
            lines.append(f"{k['ms']:10.4f} {n:>8}    > {printable(readable(k['name']))}")
    return lines


# --- View: timeline (traces) ----------------------------------------------------------


def trace_events(data, chains, totals):
    """A trace's kernel launches as (start us, end us, chain, name), in file order, added
    to totals as launches of one; the instrumentation backend's scope events as (kernel,
    scope, SM, CTA, warp, cycles); and how many events had no name."""
    launches_, scopes, unnamed = [], [], 0
    by_stack = {}  # a call stack met again costs one lookup
    for e in data.get("traceEvents", ()):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), number(e.get("dur"))
        try:
            ts = float(ts) if type(ts) in (int, float) else None
        except OverflowError:  # an integer past a float's range
            continue
        if ts is None or dur is None or not math.isfinite(ts + dur):
            continue
        name = e.get("name")
        name = name.strip() if isinstance(name, str) else ""
        if not name:
            unnamed += 1
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        mhz = number(args.get("Frequency (MHz)"))
        if mhz is not None and math.isfinite(dur * mhz):  # a scope: pid "<kernel> Core<SM> CTA<n>"
            where = str(e.get("pid", "")).split()
            sm = next((w[4:] for w in where if w.startswith("Core")), "?")
            cta = next((w[3:] for w in where if w.startswith("CTA")), "?")
            scopes.append((str(e.get("cat") or "?"), name, sm, cta, str(e.get("tid")), dur * mhz))
            continue
        stack = args.get("call_stack")
        stack = tuple(map(str, stack[:-1])) if isinstance(stack, list) else ()
        chain = by_stack.get(stack)
        if chain is None:
            chain = 0
            for frame in stack:
                chain, is_python = chains.step(chain, frame)
                totals.python |= is_python
            by_stack[stack] = chain
        totals.add(name, chain, dur / 1e3, 1)
        launches_.append((ts, ts + dur, chain, name))
    return launches_, scopes, unnamed


def timeline(launches_, label, source_of):
    """One entry per call site of one process's trace: its launches, their summed and
    spanned ms, the share of its span in which any kernel ran, and the median idle time
    between its consecutive launches. One sort, then one pass: O(n log n) in launches."""
    launches_.sort()  # (start, end, chain, name), by start
    # When any kernel ran, several streams counted once: the busy time before each
    # launch's start and before its end, by a sweep that merges overlapping launches.
    marks, done, start, end = [], 0.0, None, None  # done: busy time of the merged runs before
    for s, e, _, _ in launches_:
        if end is None or s > end:
            done += end - start if end is not None else 0.0
            start, end = s, e
        elif e > end:
            end = e
        marks.append((done + s - start, done + e - start))
    by_site = {}
    for i, (_, _, chain, _) in enumerate(launches_):
        by_site.setdefault(chain, []).append(i)
    entries = []
    for chain, at in by_site.items():
        last = max(at, key=lambda i: launches_[i][1])
        first_start, last_end = launches_[at[0]][0], launches_[last][1]
        # Between one launch's end and the next one's start: the time no kernel ran.
        idle = sorted(
            max(0.0, launches_[b][0] - launches_[a][1] - (marks[b][0] - marks[a][1]))
            for a, b in zip(at, at[1:], strict=False)
        )
        names = {}
        for i in at:
            names[launches_[i][3]] = names.get(launches_[i][3], 0) + 1
        span = last_end - first_start
        entries.append({
            "callsite": label(chain),
            "source": source_of(chain),
            "launches": len(at),
            "kernel_ms": sum(launches_[i][1] - launches_[i][0] for i in at) / 1e3,
            "span_ms": span / 1e3,
            "busy": (marks[last][1] - marks[at[0]][0]) / span if span > 0 else 1.0,
            "median_idle_us": median(idle) if idle else None,
            "fewest_launches_of_a_kernel": min(names.values()),
        })  # fmt: skip
    return sorted(entries, key=lambda e: e["kernel_ms"], reverse=True)


def median(ordered):
    n = len(ordered)
    return (ordered[n // 2] + ordered[(n - 1) // 2]) / 2


def diagnosis(entries):
    """One line for each call site that looks like a loop held back by the host: every
    kernel of it launched 3 or more times, the GPU busy under half of the site's span, and
    gaps between launches the size of a launch's host cost."""
    out = []
    for e in entries:
        idle = e["median_idle_us"]
        if (e["fewest_launches_of_a_kernel"] >= 3 and e["busy"] < 0.5 and idle is not None
                and idle <= LAUNCH_GAP_US):  # fmt: skip
            mean_us = e["kernel_ms"] * 1e3 / e["launches"]
            out.append(
                f"{printable(e['callsite']) or 'kernels with no frame of yours'}: the GPU was "
                f"idle {1 - e['busy']:.0%} of the span of its {e['launches']} launches, a median "
                f"{idle:.1f} us between launches against {mean_us:.1f} us of kernel each: the "
                "host's launch cost bounds it, not the kernel."
            )
    return ["", *out] if out else []


# --- View: ranks ----------------------------------------------------------------------


def rank_summary(ranks, read, traced):
    """proton_ranks, each rank's sums in rank order; proton_rank_imbalance, the busiest
    rank's GPU time over the mean; and from traces, proton_rank_start_skew: where every
    trace says when its clock started (baseTimeNanoseconds), each rank's first kernel
    start and last kernel end on that one clock (ns since the epoch), and which rank's GPU
    work starts last, by how much; null where a trace does not say (ranks' clocks are not
    comparable)."""
    if unranked := [str(p) for p in read if rank_of(p) is None]:
        warn(f"left out of proton_ranks, with no rank<N> in their names: {', '.join(unranked)}")
    times = [r["gpu_time_ms"] for r in ranks.values()]
    mean = sum(times) / len(times)
    out = {
        "proton_ranks": [ranks[r] for r in sorted(ranks)],
        "proton_rank_imbalance": max(times) / mean if mean else None,
    }
    if not traced:
        return out
    spans = {}  # rank -> [first start, last end], ns since the epoch
    for path, launched, base in traced:
        if (rank := rank_of(path)) is None or not launched:
            continue
        if base is None:
            return {**out, "proton_rank_start_skew": None}
        first = base + round(min(s for s, _, _, _ in launched) * 1e3)
        last = base + round(max(e for _, e, _, _ in launched) * 1e3)
        span = spans.setdefault(rank, [first, last])
        span[:] = [min(span[0], first), max(span[1], last)]
    for rank, (first, last) in spans.items():
        ranks[rank].update(first_kernel_start_ns=first, last_kernel_end_ns=last)
    starts = {rank: first for rank, (first, _) in spans.items()}
    latest = max(starts, key=starts.get)
    out["proton_rank_start_skew"] = {
        "rank": latest, "ms": (starts[latest] - min(starts.values())) / 1e6,
    }  # fmt: skip
    return out


def ranks_table(summary, top):
    """Each rank's GPU time and launches, the imbalance and, from traces that share a
    clock, when each rank's GPU work started and ended."""
    if not summary.get("proton_ranks"):
        return []
    ranks, skew = summary["proton_ranks"], summary.get("proton_rank_start_skew")
    zero = min(r["first_kernel_start_ns"] for r in ranks) if skew else None
    clocked = f" {'first ms':>9} {'last ms':>9}" if skew else ""
    lines = [f"{'rank':>6} {'GPU ms':>10} {'launches':>8} {'vs mean':>8}{clocked}  files"]
    mean = sum(r["gpu_time_ms"] for r in ranks) / len(ranks)
    for r in ranks[:top]:
        n = r["kernel_count"] if r["kernel_count"] is not None else "?"
        vs = f"{r['gpu_time_ms'] / mean:8.2f}" if mean else f"{'':8}"
        at = (f" {(r['first_kernel_start_ns'] - zero) / 1e6:9.3f} "
              f"{(r['last_kernel_end_ns'] - zero) / 1e6:9.3f}" if skew else "")  # fmt: skip
        files = ", ".join(Path(f).name for f in r["files"])
        lines.append(f"{r['rank']:>6} {r['gpu_time_ms']:10.4f} {n:>8} {vs}{at}  {printable(files)}")
    imbalance = summary["proton_rank_imbalance"]
    if imbalance is not None:
        lines.append(f"rank imbalance (the busiest rank's GPU time over the mean): {imbalance:.2f}")
    if skew:
        lines.append(f"start skew (first and last ms: on one clock, from the earliest start): "
                     f"rank {skew['rank']} starts its GPU work last, {skew['ms']:.3f} ms after "
                     "the first")  # fmt: skip
    elif "proton_rank_start_skew" in summary:
        lines.append("ranks' clocks are not comparable (their traces carry no "
                     "baseTimeNanoseconds): no start skew")  # fmt: skip
    return lines


def timeline_table(summary, top):
    """Each call site's timeline, with the diagnosis."""
    if "proton_timeline" not in summary:
        return []
    lines = []
    ranked = any("rank" in e for e in summary["proton_timeline"])
    lines += ["timeline per call site (busy: the share of the site's span in which any "
              "kernel ran; idle: the median gap between its launches)",  # fmt: skip
              f"{'kernel ms':>10} {'span ms':>9} {'busy':>5} {'launches':>8} {'idle us':>8}  "
              + ("rank  " if ranked else "") + "call site"]  # fmt: skip
    for e in summary["proton_timeline"][:top]:
        idle = f"{e['median_idle_us']:8.1f}" if e["median_idle_us"] is not None else f"{'':8}"
        rank = f"{e['rank']:>4}  " if "rank" in e else ("      " if ranked else "")
        lines.append(
            f"{e['kernel_ms']:10.4f} {e['span_ms']:9.4f} {e['busy']:5.0%} {e['launches']:>8} "
            f"{idle}  {rank}{labelled(e) or '(no frame of yours)'}"
        )
    lines += diagnosis(summary["proton_timeline"])
    return lines


# --- View: scopes (the instrumentation backend) ---------------------------------------


def scope_summary(events):
    """Per kernel and scope of an instrumentation trace: its warp events, their cycles
    (sum, median, 90th percentile) and its share of the kernel's scope cycles; and per
    kernel, how its CTAs spread over the SMs. Each launch records every (CTA, warp,
    scope) once: the most such repeats is the number of launches, and the events of one
    (warp, scope) on an SM count the CTAs that ran there."""
    by_scope, by_sm, repeats = {}, {}, {}
    for kernel, scope, sm, cta, warp, cycles in events:
        by_scope.setdefault((kernel, scope), []).append(cycles)
        on_sm = by_sm.setdefault(kernel, {}).setdefault(sm, [{}, 0.0])
        on_sm[0][warp, scope] = on_sm[0].get((warp, scope), 0) + 1
        on_sm[1] += cycles
        repeats[kernel, cta, warp, scope] = repeats.get((kernel, cta, warp, scope), 0) + 1
    per_kernel = {}
    for (kernel, _), cycles in by_scope.items():
        per_kernel[kernel] = per_kernel.get(kernel, 0.0) + sum(cycles)
    rows = []
    for (kernel, scope), cycles in by_scope.items():
        cycles.sort()
        total = sum(cycles)
        if not math.isfinite(total):  # crafted cycles past a float's range
            continue
        rows.append({
            "kernel": kernel,
            "scope": scope,
            "events": len(cycles),
            "cycles": total,
            "median_cycles": median(cycles),
            "p90_cycles": cycles[min(len(cycles) - 1, int(0.9 * len(cycles)))],
            "share": total / per_kernel[kernel] if per_kernel[kernel] else 0.0,
        })  # fmt: skip
    launches = {}
    for (kernel, *_), n in repeats.items():
        launches[kernel] = max(launches.get(kernel, 0), n)
    spread = []
    for kernel, sms in by_sm.items():
        counted = {}  # (warp, scope) -> events over all SMs: the most common is in every CTA
        for pairs, _ in sms.values():
            for pair, n in pairs.items():
                counted[pair] = counted.get(pair, 0) + n
        pair = max(counted, key=counted.get)
        ctas = sorted(pairs.get(pair, 0) / launches[kernel] for pairs, _ in sms.values())
        cycles = sorted(t for _, t in sms.values())
        middle = median(cycles)
        spread.append({
            "kernel": kernel,
            "launches": launches[kernel],
            "sms": len(sms),
            "ctas_per_sm": [ctas[0], median(ctas), ctas[-1]],
            "slowest_sm_vs_median": cycles[-1] / middle if middle else None,
        })  # fmt: skip
    return rows, spread


def scope_rows(scopes):
    """Per kernel and scope of an instrumentation tree: cycles, normalized cycles (per
    CTA and warp) and the scope's share of its kernel's scope cycles."""
    per_kernel = {}
    for (kernel, _), (cycles, _) in scopes.items():
        per_kernel[kernel] = per_kernel.get(kernel, 0.0) + cycles
    return [
        {"kernel": kernel, "scope": scope, "cycles": cycles, "normalized_cycles": normalized,
         "share": cycles / per_kernel[kernel] if per_kernel[kernel] else 0.0}
        for (kernel, scope), (cycles, normalized) in scopes.items()
        if math.isfinite(per_kernel[kernel] + normalized)  # crafted values past a float's range
    ]  # fmt: skip


def scopes_table(summary, top):
    """Each kernel's scopes, and how its CTAs spread over the SMs."""
    if not summary.get("proton_scopes"):
        return []
    lines = []
    traced = "events" in summary["proton_scopes"][0]
    lines += [
        f"{'share':>6} {'cycles':>14} "
        + (f"{'median':>8} {'p90':>8} {'events':>8}" if traced else f"{'normalized':>12}")
        + "  kernel: scope (cycles inside the kernel, from the instrumentation backend)",
    ]
    for s in summary["proton_scopes"][:top]:
        detail = (f"{s['median_cycles']:8.0f} {s['p90_cycles']:8.0f} {s['events']:>8}"
                  if traced else f"{s['normalized_cycles']:12.0f}")  # fmt: skip
        lines.append(f"{s['share']:6.1%} {s['cycles']:14.0f} {detail}  "
                     f"{printable(s['kernel'])}: {printable(s['scope'])}")  # fmt: skip
    for s in summary.get("proton_sm_spread", []):
        low, mid, high = s["ctas_per_sm"]
        slow = s["slowest_sm_vs_median"]
        lines.append(
            f"{printable(s['kernel'])}: {s['launches']} launches over {s['sms']} SMs, "
            f"{low:g} to {high:g} CTAs an SM a launch (median {mid:g}); the busiest SM's "
            + (f"cycles {slow:.2f}x the median SM's" if slow else "cycles unknown")
        )
    return lines


# --- View: diff -----------------------------------------------------------------------


def diff(base, base_sites, summary, sites, base_name):
    """Per kernel and per call site: ms in base and now, and their ratio, the largest
    change first. Call sites are matched by file and function chain, so that lines moved
    by an edit still match: where a chain has several, same lines first, then in order."""
    was = {row["name"]: row["total_ms"] for row in base.get("proton_kernels", [])}
    now = {row["name"]: row["total_ms"] for row in summary.get("proton_kernels", [])}
    kernels = [change({"name": name}, was.get(name), now.get(name)) for name in {**was, **now}]
    groups = {}  # chain without lines -> (base's sites, now's sites), each by their lines
    for side, (chains, by_chain) in enumerate((base_sites, sites)):
        for chain, by_name in by_chain.items():
            frames = chains.frames(chain)
            if frames:
                key = tuple((f, func, n) for f, _, func, n in frames)
                lines = tuple(line for _, line, _, _ in frames)
                ms = sum(ms for ms, _ in by_name.values())
                groups.setdefault(key, ({}, {}))[side][lines] = (frames, ms)
    names = {**base_sites[0].names, **sites[0].names}
    callsites = []
    for before, after in groups.values():
        pairs = [(before.pop(lines), after.pop(lines)) for lines in list(before) if lines in after]
        pairs += itertools.zip_longest(
            (before[k] for k in sorted(before)), (after[k] for k in sorted(after))
        )
        for old, new in pairs:
            text = moved((old or new)[0], (new or old)[0], names)
            callsites.append(change({"callsite": text}, old and old[1], new and new[1]))
    by_change = lambda r: abs(r["ms"] - r["base_ms"])  # noqa: E731
    return {
        "base": base_name,
        "gpu_time_ms": [
            base.get("proton_gpu_time_ms", 0.0),
            summary.get("proton_gpu_time_ms", 0.0),
        ],
        "kernels": sorted(kernels, key=by_change, reverse=True),
        "callsites": sorted(callsites, key=by_change, reverse=True),
    }


def change(row, base_ms, ms):
    """row with ms before and now (0 where absent) and their ratio (None: new)."""
    base_ms, ms = base_ms or 0.0, ms or 0.0
    row.update(base_ms=base_ms, ms=ms, ratio=ms / base_ms if base_ms else None)
    return row


def moved(old, new, names):
    """A call site's frames, each line shown as old->new where an edit moved it."""
    return " > ".join(
        f"{names.get(f, f)}:{a if a == b else f'{a}->{b}'} {func}" + (f" (x{n})" if n > 1 else "")
        for (f, a, func, n), (_, b, _, _) in zip(old, new, strict=True)
    )


def diff_table(summary, top):
    """Per kernel, then per call site: before, now, and their ratio."""
    if "proton_diff" not in summary:
        return []
    lines = []
    d = summary["proton_diff"]
    lines += [f"against {printable(d['base'])}: GPU time {d['gpu_time_ms'][0]:.4f} -> "
              f"{d['gpu_time_ms'][1]:.4f} ms", f"{'base ms':>10} {'ms':>10} {'ratio':>6}  "
              "kernel, then call site"]  # fmt: skip
    for row in [*d["kernels"][:top], *d["callsites"][:top]]:
        ratio = f"{row['ratio']:6.2f}" if row["ratio"] is not None else f"{'new':>6}"
        what = readable(row["name"]) if "name" in row else row["callsite"]
        lines.append(f"{row['base_ms']:10.4f} {row['ms']:10.4f} {ratio}  {printable(what)}")
    return lines


# --- Output ---------------------------------------------------------------------------


def to_json(summary):
    """The summary as JSON bytes, one key a line (pretty-printing every level would cost
    a large capture's output more than encoding it)."""
    try:
        encode = msgspec.json.encode if msgspec else None
        values = [encode(v) for v in summary.values()] if encode else None
    except UnicodeEncodeError:  # a lone surrogate in a name: json writes it as an escape
        values = None
    if values is None:
        dump = json.JSONEncoder(allow_nan=False, check_circular=False).encode
        values = [dump(v).encode() for v in summary.values()]
    lines = (b'  "%s": %s' % (k.encode(), v) for k, v in zip(summary, values, strict=True))
    return b"{\n" + b",\n".join(lines) + b"\n}\n"


def table(summary, top):
    """The kernels, call sites, ranks, timeline with its diagnosis, scopes and diff, as
    aligned text for a terminal, each view's table after a blank line."""
    views = (kernels_table, callsites_table, ranks_table, timeline_table, scopes_table,
             diff_table)  # fmt: skip
    lines = []
    for view in views:
        if rows := view(summary, top):
            lines += ["", *rows]
    return "\n".join(lines).lstrip("\n") + "\n"


def write_output(path, text, inputs=()):
    """Write text (str or bytes) to path: a regular file (or none yet) is replaced
    atomically, with the mode the umask gives a new file; a symbolic link is written
    through to its target; anything else (a device, a pipe) is written directly. Refuses
    to write over any of inputs, (device, inode) pairs."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    path = os.fspath(path)
    if not path or path.endswith("/") or os.path.isdir(path):
        raise Refused(f"{path[:200]!r} names no file to write")
    try:
        info = os.stat(path)  # through links, /dev/stdout's to a pipe included
    except FileNotFoundError:
        info = None
    if info and (info.st_dev, info.st_ino) in inputs:
        raise Refused(f"{printable(str(path)[:200])} is one of the inputs; not written over")
    if info and not stat.S_ISREG(info.st_mode):
        with open(path, "wb") as f:
            f.write(data)
        return
    import tempfile

    target = Path(os.path.realpath(path))
    # A short name: a target's name may take the whole 255 bytes a name may have.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:32]}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


# --- Command line ---------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line and exit 2, instead of argparse's usage block.
        say(f"error: {message[:300]}")
        raise SystemExit(2)


def _positive(text):
    if not text.isdecimal() or len(text) > 9 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text[:30]!r}")
    return int(text)


def parser():
    p = _Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files, or directories")
    p.add_argument("-o", "--output", metavar="FILE", help="write the JSON here (-: stdout)")
    p.add_argument("--table", action="store_true", help="print tables instead of JSON")
    p.add_argument("--folded", metavar="FILE", help="also write folded stacks here")
    p.add_argument("--top", type=_positive, default=10, metavar="N", help="table rows (default 10)")
    p.add_argument("--diff", metavar="BASE", help="compare with this earlier capture or directory")
    p.add_argument("--world-size", type=_positive, metavar="N",
                   help="ranks 0 to N-1 are expected: a missing one exits 1")  # fmt: skip
    return p


def artifact_dir(paths):
    """The directory a summary names, as aorta does: a directory given, or the one the
    capture file is in (several: the directory that holds them all)."""
    dirs = [p if p.is_dir() else p.parent for p in map(lambda p: Path(p).resolve(), paths)]
    return os.path.commonpath(dirs) if dirs else ""


def capture_kinds(found):
    kinds = {kind(p) for p in found}
    if len(kinds) > 1:
        raise Refused(
            "trees and traces together are captures of different runs: summarise them apart"
        )
    return kinds


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so that a half-written output is removed."""


def _terminate(signum, frame):
    raise Terminated


def main(argv=None):
    args = parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(args)
    except (Refused, OSError) as e:  # OSError: an output that cannot be written
        say(f"error: {str(e)[:300]}")
        return 2
    except KeyboardInterrupt:  # Ctrl-C, a deep tree's decoding included
        say("interrupted")
        return 130
    except Terminated:
        say("terminated")
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args):
    skipped = []  # found but not read: named in proton_unread
    found = find_captures(args.paths, skipped)
    kinds = capture_kinds(found)
    inputs = {(p.stat().st_dev, p.stat().st_ino) for p in found}
    output = None if args.output == "-" else args.output  # -o -: stdout
    if args.diff is not None:
        base_skipped = []
        base_found = find_captures([args.diff], base_skipped)
        if capture_kinds(base_found) != kinds and base_found and found:
            raise Refused(f"--diff compares captures of one kind: {args.diff[:200]} holds "
                          f"{''.join(capture_kinds(base_found))}s, the rest "
                          f"{''.join(kinds)}s")  # fmt: skip
        inputs |= {(p.stat().st_dev, p.stat().st_ino) for p in base_found}
    if output and args.folded and os.path.realpath(output) == os.path.realpath(args.folded):
        raise Refused("-o and --folded name one file")

    summary, sites, problem = summarize(found, artifact_dir(args.paths), skipped, args.world_size)
    if not problem and args.diff is not None:
        base, base_sites, problem = summarize(base_found, artifact_dir([args.diff]), base_skipped)
        if not problem and "proton_gpu_time_ms" not in base:
            problem = "no timed kernel to compare with (scopes only)"
        if problem:
            problem = f"--diff {args.diff[:200]}: {problem}"
        else:
            summary["proton_diff"] = diff(base, base_sites, summary, sites, args.diff)
    if problem:
        if not found and not skipped:
            problem += " (Triton 3.6 writes none when the script raises or calls sys.exit)"
        say(f"{' '.join(args.paths)[:200]}: {problem}")
        # The JSON to stdout, never over a good -o.
        return emit(to_json({"proton_artifact_dir": summary["proton_artifact_dir"]}), None) or 1
    # A summary of captures not all read is written, and exits 1 for a caller to see.
    status = 1 if any("same_as" not in u for u in summary["proton_unread"]) else 0
    if output is not None:
        write_output(output, to_json(summary), inputs)
    if args.folded is not None:
        write_output(args.folded, folded(sites), inputs)
    if args.table:
        return emit(table(summary, args.top), status)
    return emit(to_json(summary), status) if output is None else status


def emit(text, status):
    """Write text (str or bytes) to stdout; a stdout that cannot take it (closed, full)
    is exit 2, in one line."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    try:
        if sys.stdout is None:
            raise OSError("it is closed")
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except (OSError, ValueError) as e:  # ValueError: stdout closed
        if sys.stdout is not None:  # nothing more may reach it, not even at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        say(f"error: cannot write to stdout: {getattr(e, 'strerror', None) or e}")
        return 2
    return status


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

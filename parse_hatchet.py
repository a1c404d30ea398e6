"""Summarise Proton captures as JSON: aorta's five keys, then each kernel and each call
site that launched GPU time (views.py: timelines, ranks, scopes; compare.py: trials and
a comparison with an earlier run).

    python parse_hatchet.py PATH [PATH ...] [-o FILE] [--table] [--top N] [--folded FILE]
        [--world-size N] [--peak-gbps N] [--diff BASE [--fail-above PCT] [--min-ms MS]
        [--same PCT] [--any-device] [--markdown FILE]]

Each PATH is a capture or a folder searched for them (captures.py): one run, its ranks'
captures added up, or one run of trials. The five proton_* keys follow ROCm aorta's Proton
collector to the letter; docs/summary.md describes every key.
Exit status: 0 summarised; 1 summarised but a capture found was not read or a rank of
--world-size has none (proton_unread names each), or nothing to summarise (stderr says
why); 2 usage, an input or output refused or not written, runs that do not compare;
3 a regression past --fail-above (stderr names each); 129, 130, 143 ended by SIGHUP,
Ctrl-C or SIGTERM (no -o left half written).
"""

import argparse
import functools
import gc
import json
import linecache
import os
import signal
import stat
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import NamedTuple

import msgspec

from summary import captures
from summary.captures import AUTOTUNING, CAPTURED_AT, Capture, Refused, Run, number, printable

TOP_N = 5  # aorta's length of proton_top_kernels
MAX_SOURCE_BYTES = 2**22  # source lines come from .py files of up to 4 MiB
# Demangling, all names together: a few crafted bytes demangle to gigabytes.
DEMANGLE_S, DEMANGLE_BYTES, DEMANGLED_CHARS = 1.0, 2**28, 2**16


def say(message: str) -> None:
    if sys.stderr is not None:  # closed: print would fall back to stdout, into the JSON
        print(f"parse_hatchet: {printable(message)}", file=sys.stderr)


# --- aorta's five keys ----------------------------------------------------------------
# Only leaves count. A leaf's time is its first metric `time (<ns|us|ms|s>)` that holds a
# finite number >= 0; a leaf with none is no kernel, nor (a rule of ours) is ROOT. Times
# and launches (`count`) add up by kernel name, across call paths and files.


def five_keys(kernels: dict) -> dict:
    """aorta's keys except the folder, from each kernel's summed ms and launches (None for an
    unreadable count, which leaves the count out); ties keep the order first seen."""
    ranked = sorted(kernels.items(), key=lambda item: item[1].ms, reverse=True)  # stable
    keys = {}
    if all(k.launches is not None for k in kernels.values()):
        keys["proton_kernel_count"] = sum(k.launches for k in kernels.values())
    keys["proton_gpu_time_ms"] = sum(k.ms for k in kernels.values())
    keys["proton_top_kernel_ms"] = ranked[0][1].ms
    keys["proton_top_kernels"] = [name for name, _ in ranked[:TOP_N]]
    return keys


# --- Call sites: chains of the user's frames --------------------------------------------


def callsite(text: str) -> str:
    """A chain's text as a call site: a CUDA graph's kernels where it was captured and
    where it was replayed; autotuning marked as such."""
    text = text.replace(f" > {AUTOTUNING}", " [autotuning]")
    replayed, at, captured = text.rpartition(f" > {CAPTURED_AT} > ")
    return f"{captured} [a CUDA graph captured here, replayed at {replayed}]" if at else captured


@functools.cache
def source(file: str) -> str | None:
    """file, if it is a regular .py file of a sane size here (a capture names the paths, and
    a crafted one must not print lines of other files), as the path to read it by."""
    try:
        real = os.path.realpath(file)
        info = os.stat(real)
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return None
    ok = real.endswith(".py") and stat.S_ISREG(info.st_mode) and info.st_size <= MAX_SOURCE_BYTES
    return real if ok else None


# --- Kernels: readable names, rates, percent of peak ------------------------------------


def demangling() -> None:
    """The demangling child: a bound on its memory, and signals' default actions (this
    process's handlers raise). The demangler is C code this process could not stop."""
    import resource

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with open("/proc/self/statm") as f:  # the child's address space may grow this much
        used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (used + DEMANGLE_BYTES, resource.RLIM_INFINITY))


def demangle(name: str) -> str | None:
    """name demangled, or None: no C++ name, or past DEMANGLE_BYTES or DEMANGLED_CHARS."""
    import cxxfilt

    try:
        text = cxxfilt.demangle(name)
    except Exception:  # not a mangled name after all, or out of memory
        return None
    return text if len(text) <= DEMANGLED_CHARS else None


def readable(names: list) -> dict:
    """Each name as a table shows it: a C++ name demangled (in one child process for all,
    given DEMANGLE_S seconds: a few crafted bytes demangle to gigabytes), without its
    return type and parameters, template arguments nested deeper than two levels (all, if
    still long) shortened to <…>; any other name as it is."""
    import multiprocessing

    mangled = [name for name in dict.fromkeys(names) if name.startswith("_Z") and name.isascii()]
    texts = {}
    with multiprocessing.Pool(1, initializer=demangling) if mangled else nullcontext() as pool:
        results, until = pool and pool.imap(demangle, mangled), time.monotonic() + DEMANGLE_S
        for name in mangled:  # in order, while there is time: a bomb costs the names after it
            try:
                texts[name] = results.next(max(0.0, until - time.monotonic()))
            except multiprocessing.TimeoutError:
                say(f"left {len(mangled) - len(texts)} C++ names mangled: over {DEMANGLE_S} s")
                break
    out = {}
    for name in names:
        text = texts.get(name) or name
        if text != name and text.endswith(")"):  # the last balanced (...): parameters
            depth = 0
            for i in range(len(text) - 1, -1, -1):
                depth += {")": 1, "(": -1}.get(text[i], 0)
                if depth == 0:
                    text = text[:i].removeprefix("void ")
                    break
        short = elided(text, 2) if "<" in text else text
        out[name] = short if len(short) <= 100 else elided(text, 1)
    return out


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


# --- The summary ----------------------------------------------------------------------


class Summary(NamedTuple):
    """A run's summary (the JSON), why there is nothing to summarise (or None), the run."""

    summary: dict
    problem: str | None
    run: Run


def summarize(
    found: captures.Found,
    folder: str,
    files: list | None = None,
    world_size: int | None = None,
    ceiling: float | None = None,
) -> Summary:
    """The summary of found's captures, or of files (one trial's) where given."""
    run = captures.read(found.files if files is None else files, found.skipped)
    summary, capture = {"proton_artifact_dir": folder}, run.capture
    records = captures.records(found.provenance, run.unread)
    ranks = {rank for rank, *_ in run.per_file} - {None}
    missing = sorted(set(range(world_size or 0)) - ranks) if run.read and ranks else []
    run.unread += [{"file": None, "rank": r, "why": f"no capture of rank {r}"} for r in missing]
    if past := sorted(rank for rank in ranks if world_size and rank >= world_size):
        return Summary(summary, f"a capture of rank {past[0]}, past --world-size", run)
    if problem := run.problem(records):
        return Summary(summary, problem, run)
    for entry in run.unread[: len(run.unread) - len(missing)]:
        say(f"warning: skipped {entry['file']}: {entry['why']}")
    if missing:  # one line, however many
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        listed = ", ".join(map(str, missing[:8])) + more
        say(f"no capture of rank {listed} was read (--world-size {world_size})")
    if len(run.read) > 1:
        say(f"combined {len(run.read)} captures: {', '.join(map(str, run.read))}")
    gpu_ms = sum(k.ms for k in capture.kernels.values())
    summary.update(five_keys(capture.kernels) if capture.kernels else {})
    summary["proton_context"] = "python" if capture.chains.python else "shadow"
    summary["proton_device"] = list(run.devices.values())
    summary["proton_provenance"] = records[0] if records else None
    summary["proton_unread"] = run.unread
    shown, summary["proton_kernels"] = readable(list(capture.kernels)), []
    for name, k in sorted(capture.kernels.items(), key=lambda item: item[1].ms, reverse=True):
        mean = k.ms * 1e3 / k.launches if k.launches else None
        share = k.ms / gpu_ms if gpu_ms else 0.0
        row = {"name": name, "readable_name": shown[name], "launches": k.launches, "total_ms": k.ms}
        summary["proton_kernels"].append({**row, "mean_us": mean, "share": share})
    sites = callsites(capture)
    summary["proton_callsites"] = sorted(sites.values(), key=lambda s: s["ms"], reverse=True)
    if run.viewed:  # what views.py shows: rates, traces, ranks, scopes
        from summary import views

        views.add(summary, run, sites, ceiling)
    return Summary(summary, None, run)


def callsites(capture: Capture) -> dict:
    """Each chain of the user's frames that launched GPU work, with its kernels, by chain;
    each file shown by the shortest part of its path that no other shares."""
    kernels = {}
    for (chain, name), (ms, launches) in capture.sites.items():
        if chain:  # kernels with no frame of the user's above them (shadow context)
            row = {"name": name, "launches": launches, "ms": ms}
            kernels.setdefault(chain, []).append(row)
    links = capture.chains.links
    names = captures.short_names({frame[0] for _, frame, _ in links[1:]})
    texts, sites = capture.chains.texts(list(kernels), names), {}
    for chain, rows in kernels.items():
        file, line, _ = links[chain][1]
        text = (real := source(file)) and linecache.getline(real, line).strip()[:200]
        sites[chain] = {
            "callsite": callsite(texts[chain]),
            "source": printable(text) if text else None,
        }
        sites[chain].update(ms=sum(k["ms"] for k in rows), kernels=rows)
    return sites


# --- Output ---------------------------------------------------------------------------


def to_json(summary: dict) -> bytes:
    """The summary as JSON, one key per line (indenting every level would cost a large
    capture's output more than encoding it)."""
    try:
        values = [msgspec.json.encode(value) for value in summary.values()]
    except UnicodeEncodeError:  # a lone surrogate in a name: json writes it as an escape
        values = [json.dumps(value, allow_nan=False).encode() for value in summary.values()]
    pairs = zip(summary, values, strict=True)
    lines = (b'  "%s": %s' % (key.encode(), value) for key, value in pairs)
    return b"{\n" + b",\n".join(lines) + b"\n}\n"


def table(summary: dict, top: int) -> str:
    """Each view as aligned text after a blank line, its names escaped: the comparison
    first, then kernels, call sites and the views of views.py."""
    tables = [kernels_table(summary, top), callsites_table(summary, top)]
    if "proton_diff" in summary or "proton_trials" in summary:
        from summary import compare

        tables.insert(0, compare.table(summary, top))
    if any(key in summary for key in ("proton_timeline", "proton_ranks", "proton_scopes")):
        from summary import views

        tables += views.tables(summary, top)
    return "\n\n".join("\n".join(map(printable, lines)) for lines in tables if lines) + "\n"


# Columns of the kernel table where some kernel has them: key, title, format.
COLUMNS = [
    ("median_us", "median us", "{:9.2f}"),
    ("p90_us", "p90 us", "{:9.2f}"),
    ("gbyte_per_s", "GB/s", "{:8.0f}"),
    ("pct_of_peak_bw", "% peak", "{:7.0%}"),
    ("pct_of_ceiling_bw", "% ceil", "{:7.0%}"),
    ("flop_per_s", "FLOP/s", "{:9.2e}"),
    ("pct_of_peak_flops", "% peak", "{:7.0%}"),
]


def kernels_table(summary: dict, top: int) -> list:
    """The kernels, the largest first, with the columns of rates and spreads recorded."""
    rows = summary.get("proton_kernels", [])[:top]
    columns = [c for c in COLUMNS if any(row.get(c[0]) is not None for row in rows)]
    width = {key: len(fmt.format(0.0)) for key, _, fmt in columns}
    head = "".join(f" {title:>{width[key]}}" for key, title, _ in columns)
    lines = [f"{'ms':>10} {'share':>6} {'launches':>8} {'mean us':>9}{head}  kernel"]
    for k in rows:
        cells = "".join(
            f" {'' if k.get(key) is None else fmt.format(k[key]):>{width[key]}}"
            for key, _, fmt in columns
        )
        n, mean = k["launches"], k["mean_us"]
        mean = "?" if mean is None else f"{mean:.2f}"
        lines.append(
            f"{k['total_ms']:10.4f} {k['share']:6.1%} {'?' if n is None else n:>8} "
            f"{mean:>9}{cells}  {k['readable_name']}"
        )
    note = "(launches: each kernel's count, summed as aorta sums proton_kernel_count)"
    return [*lines, note] if rows else []


def callsites_table(summary: dict, top: int) -> list:
    """Each call site, with the line that launched, and its kernels."""
    shown = {k["name"]: k["readable_name"] for k in summary.get("proton_kernels", [])}
    lines = [f"{'ms':>10} {'launches':>8}  call site > kernel"]
    for site in summary.get("proton_callsites", [])[:top]:
        source = f"  {site['source']}" if site["source"] else ""
        lines.append(f"{site['ms']:10.4f} {'':8}  {site['callsite']}{source}")
        for k in site["kernels"]:
            n = "?" if k["launches"] is None else k["launches"]
            lines.append(f"{k['ms']:10.4f} {n:>8}    > {shown[k['name']]}")
    return lines if len(lines) > 1 else []


# --- Command line ---------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, not argparse's usage
        say(f"error: {message[:300]}")
        raise SystemExit(2)


def whole(text: str, most: int = 10**9) -> int:
    if not (text.isdecimal() and len(text) < 10 and 1 <= int(text) <= most):
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {most}, got {text[:30]!r}"
        )
    return int(text)


def positive(text: str) -> float:
    if not 0 < (number(text) or 0) < 1e15:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text[:30]!r}")
    return number(text)


def percent(text: str) -> float:
    value = number(text)
    if value is None or not 0 <= value < 1e15:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text[:30]!r}")
    return value


def parser() -> Parser:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files, or folders")
    p.add_argument("-o", "--output", metavar="FILE", help="write the JSON here (-: stdout)")
    p.add_argument("--table", action="store_true", help="print tables, not JSON")
    p.add_argument("--top", type=whole, default=10, metavar="N", help="rows of each table")
    p.add_argument("--folded", metavar="FILE", help="also write folded stacks here")
    ranks = functools.partial(whole, most=2**16)
    p.add_argument("--world-size", type=ranks, metavar="N", help="ranks 0 to N-1 are expected")
    p.add_argument("--peak-gbps", type=positive, metavar="N", help="a measured ceiling, GB/s")
    p.add_argument("--diff", metavar="BASE", help="compare with this earlier run or capture")
    p.add_argument("--fail-above", type=percent, metavar="PCT", help="exit 3 past it")
    p.add_argument("--min-ms", type=percent, metavar="MS", help="a regression grew this (0.01)")
    p.add_argument("--same", type=percent, metavar="PCT", help="within it: same (2)")
    p.add_argument("--any-device", action="store_true", help="compare across devices")
    p.add_argument("--markdown", metavar="FILE", help="also write the comparison here")
    return p


class Stopped(BaseException):
    """A signal, raised where the program is, so that no -o is left half written."""


def stop(signum: int, frame: object) -> None:
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    args = (p := parser()).parse_args(argv)
    judging = (args.fail_above, args.min_ms, args.same, args.markdown)
    if args.diff is None and (args.any_device or any(x is not None for x in judging)):
        p.error("--fail-above, --min-ms, --same, --any-device and --markdown need --diff")
    held = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    # Decoded captures hold no cycles, and the cyclic collector would walk a growing
    # capture again and again: most of the time. It waits till the summary is made.
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            return run(args)
        except (Refused, OSError) as e:  # OSError: an output that cannot be written
            say(f"error: {str(e)[:300]}")
            return 2
        finally:  # a signal that came as run()'s data was let go is handled here: Stopped
            for sig, handler in held.items():
                signal.signal(sig, handler)
            if collecting:
                gc.enable()
    except Stopped as e:
        say({signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}.get(e.args[0], "hung up"))
        return 128 + e.args[0]


def summaries(
    paths: list, world: int | None = None, ceiling: float | None = None
) -> tuple[list, str | None, captures.Found]:
    """The summaries of what paths hold, one for each trial where they hold trials; the
    first problem that left nothing to summarise; and what was found."""
    found = captures.find(paths)
    if len({captures.kind(path) for path in found.files}) > 1:
        raise Refused("trees and traces together are captures of different runs: summarise apart")
    dirs = [Path(p).resolve() if Path(p).is_dir() else Path(p).resolve().parent for p in paths]
    folder = os.path.commonpath(dirs)
    done = [summarize(found, folder, files, world, ceiling) for files in found.trials or [None]]
    return done, next((s.problem for s in done if s.problem), None), found


def interleaved(paths: list, base: str) -> bool:
    """Whether now and base are the two sides of one make ab run: its now and base folders,
    beside the order it ran them in."""
    run = Path(base).resolve().parent
    return len(paths) == 1 and Path(paths[0]).resolve().parent == run and (run / "order").is_file()


def diffed(args: argparse.Namespace, found: captures.Found, done: list, inputs: set) -> tuple:
    """proton_diff of done against --diff's run, and the problem that leaves nothing to
    compare (or None); inputs gains the base's files."""
    from summary import compare

    base, problem, base_found = summaries([args.diff])
    if len({captures.kind(p) for p in found.files + base_found.files}) > 1:
        raise Refused(f"--diff compares captures of one kind: {args.diff[:200]} holds others")
    inputs |= set(base_found.seen)
    sides = [[s.summary for s in side] for side in (base, done)]
    if problem := problem or compare.unfit(sides[0]):
        return None, f"--diff {args.diff[:200]}: {problem}"
    ab = interleaved(args.paths, args.diff)
    if refused := compare.refusal(*sides, ab, args.any_device):
        raise Refused(f"--diff {args.diff[:200]}: {refused}")
    given = {k: getattr(args, k) for k in compare.Gate._fields}
    gate = compare.Gate(**{k: v for k, v in given.items() if v is not None})
    return compare.diff(*sides, args.diff, gate, ab), None


def told(args: argparse.Namespace, diff: dict, failed: bool, inputs: set) -> None:
    """The comparison as Markdown where --markdown asks; each regression on stderr."""
    from summary import compare

    if args.markdown is not None:
        captures.write_output(args.markdown, compare.markdown(diff), inputs)
    for line in compare.failures(diff) if failed else []:
        say(line)


def run(args: argparse.Namespace) -> int:
    done, problem, found = summaries(args.paths, args.world_size, args.peak_gbps)
    inputs = set(found.seen)
    output = None if args.output == "-" else args.output
    if output and args.folded and os.path.realpath(output) == os.path.realpath(args.folded):
        raise Refused("-o and --folded name one file")
    summary = done[0].summary
    if not problem and (len(done) > 1 or args.diff is not None):
        from summary import compare

        if len(done) > 1:
            summary["proton_trials"] = compare.trials([s.summary for s in done])
        if args.diff is not None:
            summary["proton_diff"], problem = diffed(args, found, done, inputs)
    if problem:  # the JSON to stdout, never over a good -o
        say(f"{' '.join(args.paths)[:200]}: {problem}")
        return captures.emit(to_json({"proton_artifact_dir": summary["proton_artifact_dir"]}), 1)
    unread = any("same_as" not in u for s in done for u in s.summary["proton_unread"])
    status = 1 if unread else 3 if summary.get("proton_diff", {}).get("regressions") else 0
    if output is not None:
        captures.write_output(output, to_json(summary), inputs)
    if summary.get("proton_diff"):
        told(args, summary["proton_diff"], status == 3, inputs)
    if args.folded is not None:
        from summary import views

        shown = {k["name"]: k["readable_name"] for k in summary["proton_kernels"]}
        stacks = views.folded(done[0].run.capture, shown)
        captures.write_output(args.folded, stacks, inputs)
    if args.table:
        return captures.emit(table(summary, args.top).encode("utf-8", "backslashreplace"), status)
    return captures.emit(to_json(summary), status) if output is None else status


if __name__ == "__main__":
    status = main()
    if status:
        raise SystemExit(status)

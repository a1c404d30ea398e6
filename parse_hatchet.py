"""Summarise Proton captures, or a summary.json written before, as JSON: aorta's five keys,
each kernel and call site, the views and a comparison with an earlier run (docs/summary.md).

Exit status: 0 summarised; 1 summarised but a capture found was not read or a rank of
--world-size has none (proton_unread names each), or nothing to summarise (stderr says
why); 2 usage, an input or output refused or not written, runs that do not compare;
3 a regression past --fail-above (stderr names each); 130 ended by Ctrl-C (an output is
replaced whole or not at all).
"""

import argparse
import functools
import gc
import json
import linecache
import os
import sys
from pathlib import Path
from typing import NamedTuple

from msgspec import UNSET

from summary import Refused, compare, files, only, text, views
from summary.records import CallSite, Frame, Kernel, SiteKernel, Summary, from_json, to_json
from summary.run import (
    AUTOTUNING,
    CAPTURED_AT,
    Run,
    compile_only,
    demangle,
    five_keys,
    number,
    printable,
    short_names,
)


def say(message: str) -> None:
    if sys.stderr is not None:  # closed: print would fall back to stdout, into the JSON
        print(f"parse_hatchet: {printable(message)}", file=sys.stderr)


class Summarized(NamedTuple):
    summary: Summary
    problem: str | None  # why there is nothing to summarise, or None


class Inputs(NamedTuple):
    """What a summary is made of, beside the captures (records: provenance by folder)."""

    found: files.Found
    folder: str
    records: dict
    world_size: int | None
    ceilings: list


def problem(run: Run, unread: list, provenance: list, world_size: int | None) -> str | None:
    """Why the captures cannot be summarised as one run, or hold nothing to summarise."""
    ids = {(record or {}).get("run_id") for record in provenance}
    if len(ids) > 1:
        named = ", ".join(sorted(str(i) for i in ids))[:200]
        return f"captures of {len(ids)} runs (run_id {named}): a summary never mixes runs"
    if past := sorted(r for r, *_ in run.per_file if r is not None and r >= (world_size or 2**63)):
        return f"a capture of rank {past[0]}, past --world-size"
    if not run.read:
        if unread and "same_as" not in unread[0]:
            return f"no readable capture ({unread[0]['file']}: {unread[0]['why']})"
        return (
            "no capture (.hatchet, .hatchet_msgpack, .chrome_trace): Triton 3.6 writes "
            "none when the script raises or calls sys.exit"
        )
    return run.problem()


def missing_ranks(run: Run, world_size: int | None, folder: str) -> list:
    """proton_unread's entry of each rank of world_size with no capture read (a capture
    whose name gives no rank is rank 0's); the line that says so names the run's folder."""
    ranks = {rank or 0 for rank, *_ in run.per_file}
    missing = sorted(set(range(world_size or 0)) - ranks)
    if missing:  # one line, however many
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        listed = ", ".join(map(str, missing[:8])) + more
        say(f"{folder[:200]}: no capture of rank {listed} was read (--world-size {world_size})")
    return [{"file": None, "rank": r, "why": f"no capture of rank {r}"} for r in missing]


def summarize(inputs: Inputs, captures: list) -> Summarized:
    """The summary of one run's (or one trial's) captures."""
    unread, run = list(inputs.found.skipped), Run()
    for path in captures:
        try:
            run.add(path, files.load(path), files.rank_of(path))
        except ValueError as e:
            unread.append({"file": str(path), "why": str(e)})
    provenance = [files.record_of(path, inputs.records) for path in run.read]
    if why := problem(run, unread, provenance, inputs.world_size):
        return Summarized(Summary(proton_artifact_dir=inputs.folder), why)
    for entry in unread:
        say(f"warning: skipped {entry['file']}: {entry['why']}")
    if len(run.read) > 1:
        say(f"combined {len(run.read)} captures: {', '.join(map(str, run.read))}")
    where = os.path.dirname(captures[0]) if captures else inputs.folder  # the trial's
    unread += missing_ranks(run, inputs.world_size, str(where))
    launches = run.capture.kernels
    gpu_ms = sum(k.ms for k in launches.values())
    kernels = {
        name: Kernel(
            name=name,
            readable_name=demangle(name),
            launches=k.launches,
            total_ms=k.ms,
            mean_us=k.ms * 1e3 / k.launches if k.launches else None,
            share=k.ms / gpu_ms if gpu_ms else 0.0,
            **views.measure_rates(k, run.devices, inputs.ceilings),
        )
        for name, k in sorted(launches.items(), key=lambda item: item[1].ms, reverse=True)
    }
    sites = callsites(run, kernels)
    for site in sites.values():  # launches by Triton's autotuner timing its configs
        for k in site.kernels if site.autotuning else ():
            kernels[k.name].tuning_ms += k.ms
            kernels[k.name].tuning_launches += k.launches or 0
    summary = Summary(
        proton_artifact_dir=inputs.folder,
        **(five_keys(launches) if launches else {}),
        proton_context="python" if run.capture.chains.python else "shadow",
        proton_device=list(run.devices.values()),
        proton_provenance=next(filter(None, provenance), None),
        proton_unread=unread,
        proton_kernels=list(kernels.values()),
        proton_callsites=sorted(sites.values(), key=lambda s: s.ms, reverse=True),
        **views.measure(run, sites),
    )
    summary.headline = headline(summary)
    return Summarized(summary, None)


@functools.cache
def python_file(file: str) -> bool:
    """Whether a frame's file is a .py file here (asked once a file: linecache asks again
    for each line of a file it does not hold)."""
    return file.endswith(".py") and os.path.isfile(file)


def callsites(run: Run, kernels: dict) -> dict:
    """Each chain of the user's frames that launched GPU work, as a CallSite, by chain."""
    by_chain = {}
    for (chain, name), (ms, launches) in run.capture.sites.items():
        if chain:  # kernels with no frame of the user's above them (shadow context)
            readable = kernels[name].readable_name
            site = SiteKernel(name=name, readable_name=readable, launches=launches, ms=ms)
            by_chain.setdefault(chain, []).append(site)
    chains = run.capture.chains
    short = short_names({frame[0] for _, frame, _ in chains.links[1:]})
    made, sites = {}, {}
    for chain, rows in by_chain.items():
        file, line, _ = chains.links[chain][1]
        text = linecache.getline(file, line).strip()[:200] if python_file(file) else ""
        where = {"source": printable(text) or None, "ms": sum(k.ms for k in rows), "kernels": rows}
        sites[chain] = make_callsite(*chains.frames(chain), short, made, **where)
    return sites


def make_callsite(links: list, outer: int, short: dict, made: dict, **where: object) -> CallSite:
    """A chain's links as a call site, frames outermost first: a CUDA graph's kernels where
    it was captured, and where it was replayed (above the last <captured_at>); autotuning
    marked as such; made: each link's Frame and its text, made once."""
    for link in links:
        if link not in made:
            file, line, function, repeats = link
            marker = file in (CAPTURED_AT, AUTOTUNING)
            frame = None if marker else Frame(short[file], line, function, repeats)
            made[link] = frame, frame and frame.text()
    made_links = [made[link] for link in links]
    if all(frame for frame, _ in made_links):  # no marker, as most: its text from the made
        texts = [f"[{outer} outer frames]"] * bool(outer) + [text for _, text in made_links]
        frames = [frame for frame, _ in made_links]
        return CallSite(**where, frames=frames, outer_frames=outer, callsite=" > ".join(texts))
    files_ = [link[0] for link in links]
    replayed = None
    if CAPTURED_AT in files_:
        at = len(files_) - 1 - files_[::-1].index(CAPTURED_AT)
        replayed = [frame for frame, _ in made_links[:at] if frame]
        made_links = made_links[at + 1 :]
    frames = [frame for frame, _ in made_links if frame]
    site = CallSite(**where, callsite="", frames=frames, outer_frames=outer, replayed_at=replayed)
    site.autotuning = AUTOTUNING in files_
    site.callsite = " > ".join(site.frame_texts())  # with its notes
    return site


def headline(summary: Summary) -> str:
    """The headline (docs/summary.md's "The first line and the headline")."""
    if summary.proton_diff:
        return summary.proton_diff.first_line
    if not summary.proton_kernels:
        return f"no timed kernel; {len(summary.proton_scopes or [])} scopes timed inside kernels"
    # The autotuner's launches (a cache flush before each config it times) are not the run's.
    k = max(summary.proton_kernels, key=lambda k: k.total_ms - k.tuning_ms)  # the first of ties
    tuned = sum(k.tuning_ms for k in summary.proton_kernels)
    total, ms = summary.proton_gpu_time_ms - tuned, k.total_ms - k.tuning_ms
    line = f"{k.readable_name}: {ms / total if total else 0.0:.1%} of {total:.4f} ms of GPU time"
    line += " outside [autotuning]" if tuned else ""
    if launches := k.launches and k.launches - k.tuning_launches:
        line += f", {launches} launches of {ms * 1e3 / launches:.2f} us"
    if k.gbyte_per_s:
        shares = [f"{k.pct_of_peak_bw:.0%} of peak"] if k.pct_of_peak_bw else []
        if k.pct_of_ceiling_bw is not UNSET:
            shares.append(f"{k.pct_of_ceiling_bw:.0%} of the measured copy")
        line += f", {k.gbyte_per_s:.0f} GB/s" + (f" ({', '.join(shares)})" if shares else "")
        line += " [L2-resident]" if k.l2_resident is True else ""
    return line


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, not argparse's usage
        say(f"error: {message[:300]}")
        raise SystemExit(2)


def parse_count(text: str, most: int = 10**9) -> int:
    if not (text.isdecimal() and len(text) < 10 and 1 <= int(text) <= most):
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {most}, got {text[:30]!r}"
        )
    return int(text)


def parse_percent(text: str) -> float:
    value = number(text)
    if value is None or not 0 <= value < 1e15:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text[:30]!r}")
    return value


def parser() -> Parser:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", metavar="PATH", help="captures, folders, or a summary.json")
    p.add_argument("-o", "--output", metavar="FILE", help="write the JSON here (-: stdout)")
    p.add_argument("--table", action="store_true", help="print tables, not JSON")
    p.add_argument("--top", type=parse_count, default=10, metavar="N", help="rows of each table")
    p.add_argument("--folded", metavar="FILE", help="also write folded stacks here")
    p.add_argument("--html", metavar="FILE", help="also write the summary's page here")
    ranks = functools.partial(parse_count, most=2**16)
    p.add_argument("--world-size", type=ranks, metavar="N", help="ranks 0 to N-1 are expected")
    p.add_argument("--ceiling", metavar="PATH", help="measured ceilings: a file or folder")
    p.add_argument("--diff", metavar="BASE", help="compare with this earlier run or capture")
    p.add_argument("--fail-above", type=parse_percent, metavar="PCT", help="exit 3 past it")
    p.add_argument(
        "--min-ms", type=parse_percent, metavar="MS", help="the floor: least growth failed (0.005)"
    )
    p.add_argument("--same", type=parse_percent, metavar="PCT", help="within it: same (2)")
    p.add_argument("--any-device", action="store_true", help="compare across devices")
    p.add_argument("--only", metavar="REGEX", help="judge only the kernels it finds in a name")
    p.add_argument("--alpha-divisor", type=parse_count, default=1, help=argparse.SUPPRESS)
    p.add_argument("--markdown", metavar="FILE", help="also write the comparison here (-: stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = (p := parser()).parse_args(argv)
    judging = (args.fail_above, args.min_ms, args.same, args.markdown, args.only)
    if args.diff is None and (args.any_device or any(x is not None for x in judging)):
        p.error("--fail-above, --min-ms, --same, --any-device, --only, --markdown need --diff")
    # Decoded captures hold no cycles, and the cyclic collector would walk a growing
    # capture again and again: most of the time. It waits till the summary is made.
    gc.disable()
    try:
        return run(args)
    except (Refused, OSError) as e:  # OSError: an output that cannot be written
        say(f"error: {str(e)[:300]}")
        return 2
    except KeyboardInterrupt:  # outputs are replaced whole or not at all
        say("interrupted")
        return 130
    finally:
        gc.enable()


def ceilings(path: str | None) -> list:
    """The measured ceilings (`make ceiling`'s records) in path, a file or a folder."""
    if path is None:
        return []
    folder = Path(path)
    found = sorted(folder.glob("*.json")) if folder.is_dir() else [folder]
    try:
        records = [json.loads(f.read_bytes()) for f in found]
    except (OSError, ValueError) as e:
        raise Refused(f"--ceiling {path[:200]}: {getattr(e, 'strerror', None) or e}") from None
    if not all(isinstance(r, dict) and isinstance(r.get("sizes"), list) for r in records):
        raise Refused(f"--ceiling {path[:200]}: not make ceiling's records")
    return records


def saved(path: str) -> Summarized:
    """A summary.json written before, read back: to draw its page, or compare with it."""
    try:
        summary = from_json(Path(path).read_bytes())
    except (OSError, ValueError) as e:
        raise Refused(f"{path[:200]}: {getattr(e, 'strerror', None) or e}") from None
    return Summarized(summary, None if summary.proton_unread is not UNSET else "empty")


def summaries(
    paths: list, world: int | None = None, ceiling: list = ()
) -> tuple[list, str | None, files.Found]:
    """The summaries of what paths hold, one a trial, or the summary.json given; the first
    problem that left nothing to summarise; and what was found."""
    if len(paths) == 1 and paths[0].endswith(".json") and Path(paths[0]).is_file():
        saved_in = os.path.dirname(paths[0]) or "."  # the run it was saved in, as make writes it
        found = files.Found(seen={os.path.realpath(p): Path(p) for p in (paths[0], saved_in)})
        done = saved(paths[0])
        return [done], done.problem and f"{paths[0][:200]}: nothing summarised in it", found
    for given in paths:  # make ab's run folder: its two sides, by the order they ran in
        if (Path(given) / "order").is_file():
            sides = f"{os.path.join(given, 'now')} --diff {os.path.join(given, 'base')}"
            raise Refused(f"{given[:200]} holds both sides of a make ab run: compare {sides}")
    found = files.find(paths)
    if len({files.kind(path) for path in found.files}) > 1:
        raise Refused("trees and traces together are captures of different runs: summarise apart")
    dirs = [Path(p).resolve() if Path(p).is_dir() else Path(p).resolve().parent for p in paths]
    for folder, captures in found.trials:
        if not captures:
            found.skipped.append(
                {"file": str(folder), "why": "no capture: the trial did not finish"}
            )
    records = files.records(found, found.skipped)
    inputs = Inputs(found, os.path.commonpath(dirs), records, world, list(ceiling))
    trials = found.trials or [(None, found.files)]
    done = [summarize(inputs, captures) for _, captures in trials if captures]
    done = done or [summarize(inputs, [])]
    return done, next((s.problem for s in done if s.problem), None), found


def write_page(path: str | None, summary: Summary, inputs: set) -> None:
    """The page --html asks for; one not written is named, the exit status left as it is."""
    if path is None:
        return
    from summary import page

    try:
        files.write_output(path, page.page(summary), inputs)
    except (Refused, OSError) as e:
        say(f"no page written to {path[:200]}: {getattr(e, 'strerror', None) or str(e)[:300]}")


def compare_with_base(
    args: argparse.Namespace, found: files.Found, done: list, inputs: set
) -> tuple:
    """proton_diff of done against --diff's run, and why there is nothing to compare (or
    None); inputs gains the base's files."""
    base, problem, base_found = summaries([args.diff])
    if shared := sorted(set(found.seen) & set(base_found.seen)):
        where = str(found.seen[shared[0]])[:200]
        raise Refused(
            f"--diff {args.diff[:200]} holds {where}, the run compared: name an earlier run"
        )
    if len({files.kind(p) for p in found.files + base_found.files}) > 1:
        raise Refused(f"--diff compares captures of one kind: {args.diff[:200]} holds others")
    inputs |= set(base_found.seen)
    sides = [[s.summary for s in side] for side in (base, done)]
    for side, path in zip(sides, (args.diff, args.paths[0]), strict=True):
        if len(side) == 1 and side[0].proton_trials:  # a summary.json: its trials not kept
            raise Refused(f"{path[:200]} is a run of trials, saved: compare its run's folder")
    if problem := problem or compare.find_unfit_base(sides[0]):
        return UNSET, f"--diff {args.diff[:200]}: {problem}"
    sides = only.select(sides, args.only)
    ab = ab_sides(args)
    if refused := compare.find_refusal(*sides, ab, args.any_device):
        with_only = args.only is not None and "in common" in refused
        raise Refused(
            f"--diff {args.diff[:200]}: {refused}" + f" (with --only {args.only})" * with_only
        )
    given = {k: getattr(args, k) for k in compare.Gate._fields}
    gate = compare.Gate(**{k: v for k, v in given.items() if v is not None})
    return only.note(compare.diff(*sides, args.diff, gate, ab, args.alpha_divisor), args.only), None


def refuse_shared_outputs(args: argparse.Namespace) -> None:
    """Refuses two outputs onto one file, stdout (-) included, before any is written."""
    outputs = {
        "the tables": "-" if args.table else None,
        "the JSON": args.output or (None if args.table else "-"),  # stdout, unless tables
        "the folded stacks": args.folded,
        "the page": args.html,
        "the comparison": args.markdown,
    }
    taken = {}
    for output, path in outputs.items():
        key = path if path in ("-", None) else os.path.realpath(path)
        if path is not None and key in taken:
            raise Refused(f"{taken[key]} and {output} name one file, {path[:200]}")
        taken[key] = output


def ab_sides(args: argparse.Namespace) -> bool:
    """Whether PATH and --diff are the two sides of one make ab run (its now and base
    folders, beside the order it ran them in); refused given other than now --diff base."""
    if args.diff is None or len(args.paths) > 1:
        return False
    now, base = Path(args.paths[0]).resolve(), Path(args.diff).resolve()
    if base.parent != now.parent or not (now.parent / "order").is_file():
        return False
    if (now.name, base.name) != ("now", "base"):
        right = f"{Path(args.paths[0]).parent / 'now'} --diff {Path(args.diff).parent / 'base'}"
        given = f"{args.paths[0][:200]} --diff {args.diff[:200]}"
        raise Refused(f"{given}: sides of one make ab run out of order: compare {right}")
    return True


def run(args: argparse.Namespace) -> int:
    refuse_shared_outputs(args)
    ab_sides(args)  # refused before the summaries are made, as is --only's no regex
    compile_only(args.only)
    done, problem, found = summaries(args.paths, args.world_size, ceilings(args.ceiling))
    inputs = set(found.seen)
    output = None if args.output == "-" else args.output
    summary = done[0].summary
    if not problem and len(done) > 1:
        summary.proton_trials = views.spread_trials([s.summary for s in done])
    if not problem and args.diff is not None:
        summary.proton_diff, problem = compare_with_base(args, found, done, inputs)
    if problem:  # the JSON to stdout, never over a good -o
        say(f"{' '.join(args.paths)[:200]}: {problem}")
        return files.emit(to_json(Summary(proton_artifact_dir=summary.proton_artifact_dir)), 1)
    summary.headline = headline(summary)  # the comparison's first line, where there is one
    unread = any("same_as" not in u for s in done for u in s.summary.proton_unread or [])
    status = 1 if unread else 3 if summary.proton_diff and summary.proton_diff.regressions else 0
    if output is not None:
        files.write_output(output, to_json(summary), inputs)
    if args.markdown == "-":  # --markdown needs --diff; stdout, where no other output goes
        files.emit(text.markdown(summary.proton_diff).encode("utf-8", "backslashreplace"), 0)
    elif args.markdown is not None:
        files.write_output(args.markdown, text.markdown(summary.proton_diff), inputs)
    for line in summary.proton_diff.gate[1:] if status == 3 else []:
        say(line)
    if args.folded is not None:
        files.write_output(args.folded, text.folded_stacks(summary), inputs)
    write_page(args.html, summary, inputs)
    if args.table:
        return files.emit(text.table(summary, args.top).encode("utf-8", "backslashreplace"), status)
    return files.emit(to_json(summary), status) if output is None else status


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)

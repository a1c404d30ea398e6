"""Did it get better: a run (a list of summaries, one a trial) against an earlier one, row by
row, with a verdict weighed against the trials' noise and a gate for CI that agrees with it;
docs/summary.md's "Compare" and "The first line and the headline" state the rules."""

import heapq
import itertools
import math
import statistics
from typing import NamedTuple

from summary import stats
from summary.records import CallSite, Comparison, Row, Summary

ONE_RUN = "one run a side: noise unmeasured, each change judged as if exact"
DRIFT = 5.0  # percent: runs not interleaved drift apart (clocks, heat) by up to about this
NOT_INTERLEAVED = f"not interleaved: a change must pass {DRIFT:g}% more, for drift between runs"
SETTLE = 50  # trials a side: past this, more TRIALS are not said to settle a row


class Gate(NamedTuple):
    """What a verdict and a regression are held to: percents and milliseconds."""

    fail_above: float | None = None
    min_ms: float = 0.005  # the floor: docs/summary.md's "The floor" says why
    same: float = 2.0

    def band(self) -> float:
        """The percent within which a row is the same: --same, or --fail-above's where lower."""
        return self.same if self.fail_above is None else min(self.same, self.fail_above)


def kernel_times(side: list[Summary]) -> dict:
    """Each kernel's (record, ms per trial) outside the autotuner, by name."""
    out = {}
    for i, summary in enumerate(side):
        for k in summary.proton_kernels:
            if not k.tuning_launches or (k.launches or 0) > k.tuning_launches:
                entry = out.setdefault(k.name, (k, [0.0] * len(side)))
                entry[1][i] += max(0.0, k.total_ms - k.tuning_ms)
    return out


class Site(NamedTuple):
    """A call site across a side's trials: its record, kernels (shapes apart), ms in each."""

    site: CallSite
    kernels: frozenset
    times: list


def site_times(side: list[Summary]) -> dict:
    """Each call site's Site, by its frames."""
    out = {}
    for i, summary in enumerate(side):
        for site in summary.proton_callsites:
            names = frozenset(kernel_key(k.name) for k in site.kernels)
            key = (*site_key(site), tuple(f.line for f in frames(site)))
            entry = out.setdefault(key, Site(site, names, [0.0] * len(side)))
            out[key] = entry._replace(kernels=entry.kernels | names)
            entry.times[i] += site.ms
    return out


def frames(site: CallSite) -> list:
    return [*site.frames, *(site.replayed_at or ())]


def kernel_key(name: str) -> str:
    """A kernel's name without launch_metadata's " [shape dtype]"."""
    return name[: name.rindex(" [")] if name.endswith("]") and " [" in name else name


def site_key(s: CallSite) -> tuple:
    """A call site's files and functions (and its replay site's), its lines apart."""
    where = tuple((f.file, f.function, f.repeats) for f in frames(s))
    return where, len(s.frames), s.replayed_at is None, s.autotuning, s.outer_frames


def lines(site: Site) -> tuple:
    return tuple(f.line for f in frames(site.site))


def matched_kernels(before: dict, after: dict) -> list:
    """Pairs of (record, ms per trial) of base and now, None where a side lacks it."""
    groups = {}
    for i, side in enumerate((before, after)):
        for name, entry in sorted(side.items()):
            groups.setdefault(kernel_key(name), ({}, {}))[i][name] = entry
    pairs = []
    for old, new in groups.values():
        pairs += [(old.pop(name), new.pop(name)) for name in list(old) if name in new]
        pairs += itertools.zip_longest(old.values(), new.values())  # the rest in order
    return pairs


def distance(x: Site, y: Site) -> tuple:
    """How far two call sites of the same files and functions are: the kernels only one
    of them launched, then the lines between them."""
    return len(x.kernels ^ y.kernels), sum(
        abs(a - b) for a, b in zip(lines(x), lines(y), strict=True)
    )


def matched_sites(before: dict, after: dict) -> tuple[list, list]:
    """Pairs of call sites of base and now (None where a side lacks one), and those tied, by
    docs/summary.md's "Rows matched by what they are"."""
    groups = {}
    for i, side in enumerate((before, after)):
        for site in side.values():
            groups.setdefault(site_key(site.site), ([], []))[i].append(site)
    pairs, tied = [], []
    for old, new in groups.values():
        by_kernels = {}
        for i, side in enumerate((old, new)):
            for site in side:
                by_kernels.setdefault(site.kernels, ([], []))[i].append(site)
        for same in by_kernels.values():  # the same kernels first, then any
            pairs += nearest_first(*same)
        old = [site for side, _ in by_kernels.values() for site in side]
        new = [site for _, side in by_kernels.values() for site in side]
        pairs += nearest_first(old, new)
        if len(old) == len(new):
            pairs += zip(*(sorted(side, key=lines) for side in (old, new)), strict=True)
        elif old and new:
            tied += [(x, None) for x in old] + [(None, y) for y in new]
        else:
            pairs += [(x, None) for x in old] + [(None, y) for y in new]
    return pairs, tied


def nearest_first(old: list, new: list) -> list:
    """Pairs of old and new taken out of both, the nearest first (distance), a pair taken
    only where neither has another as near: greedy matching over neighbours in the order
    of lines (a doubly linked list), the candidates in a heap, so O(n log n)."""
    merged = sorted([(lines(s), 0, i) for i, s in enumerate(old)])
    merged = sorted(merged + [(lines(s), 1, i) for i, s in enumerate(new)])
    sites, sides = [(old, new)[side][i] for _, side, i in merged], [m[1] for m in merged]
    n = len(sites)
    before, after = list(range(-1, n - 1)), list(range(1, n + 1))

    def gap(a: int, b: int) -> tuple | None:  # a and b next to each other, of two sides
        return distance(sites[a], sites[b]) if 0 <= a < b < n and sides[a] != sides[b] else None

    heap = [(d, a, a + 1) for a in range(n - 1) if (d := gap(a, a + 1)) is not None]
    heapq.heapify(heap)
    pairs = []
    while heap:
        d, a, b = heapq.heappop(heap)
        if after[a] != b or sides[a] is None or sides[b] is None:
            continue  # a or b taken, or no more next to each other
        if any(g is not None and g <= d for g in (gap(before[a], a), gap(b, after[b]))):
            continue  # as near to another: left to a later pass, or tied
        pairs.append((sites[a], sites[b]) if sides[a] == 0 else (sites[b], sites[a]))
        sides[a] = sides[b] = None
        left, right = before[a], after[b]
        if left >= 0:
            after[left] = right
        if right < n:
            before[right] = left
        ends = (before[left] if left >= 0 else -1, left, right, after[right] if right < n else n)
        for x, y in itertools.pairwise(ends):  # the neighbours the pair leaves next to each other
            if (g := gap(x, y)) is not None:
                heapq.heappush(heap, (g, x, y))
    old[:] = [s for s, side in zip(sites, sides, strict=True) if side == 0]
    new[:] = [s for s, side in zip(sites, sides, strict=True) if side == 1]
    return pairs


def verdict(row: Row, ln_r: float, d: float, floor: float, drift: float) -> str:
    """same, slower, faster or inconclusive: the interval (without one, the estimate alone)
    against the band [e^-d, e^d] or the floor's +-ms, and 1; not interleaved, both past a
    drift allowance of ln(1 + drift / 100) more."""
    low, high = (row.low, row.high) if row.low is not None else (math.exp(ln_r),) * 2
    a = math.log1p(drift / 100)
    d += a
    grew = (row.base_ms * (low - 1), row.base_ms * (high - 1)) if row.base_ms else (row.ms,) * 2
    if low >= math.exp(-d) and high <= math.exp(d) or -floor <= grew[0] <= grew[1] <= floor:
        return "same"
    if low > math.exp(a) and ln_r > d:
        return "slower"
    return "faster" if high < math.exp(-a) and ln_r < -d else "inconclusive"


def judge(base: list | None, now: list | None, m: int, gate: Gate, drift: float = 0.0) -> Row:
    """A row from its ms per trial on each side (None: new or gone): its means, ratio,
    interval, verdict, and whether it is a regression; m rows judged in all, drift the
    allowance in percent where the sides were not interleaved."""
    means = statistics.fmean(base or [0.0]), statistics.fmean(now or [0.0])
    sides = {"n_base": len(base or []), "n": len(now or []), "base_times_ms": base, "times_ms": now}
    row = Row(
        base_ms=means[0],
        ms=means[1],
        **sides,
        ratio=None,
        low=None,
        high=None,
        verdict="gone" if base else "new",
        regression=False,
    )
    if not (base and now):
        return row
    ln_r, row.low, row.high = stats.interval(base, now, m)
    row.verdict = verdict(row, ln_r, math.log1p(gate.band() / 100), gate.min_ms, drift)
    if min(len(base), len(now)) > 1 and min(base + now) <= 0:
        row.verdict = "inconclusive"  # a trial it did not run in: no log time
    edge = ln_r if row.low is None else math.log(row.low)
    past = gate.fail_above is not None and edge > math.log1p(gate.fail_above / 100)
    row.ratio = math.exp(ln_r)
    if row.low is None:
        row.ratio = means[1] / means[0] if means[0] else None
    row.regression = row.verdict == "slower" and means[1] - means[0] >= gate.min_ms and past
    return row


def diff(
    base: list, now: list, name: str, gate: Gate, interleaved: bool = False, alpha_divisor: int = 1
) -> Comparison:
    """proton_diff: each row of base against now, the largest change first, and the story;
    alpha_divisor, what an A/B that adds rounds while rows are unsettled divides this look's
    rate by."""
    kernels = [kernel_times(side) for side in (base, now)]
    pairs = matched_kernels(*kernels)
    sites, tied = matched_sites(*(site_times(side) for side in (base, now)))
    rows_judged = 1 + sum(bool(a and b) for a, b in pairs + sites)  # the GPU time, matched rows
    m = rows_judged * alpha_divisor  # Bonferroni over every row, at this look's share
    drift = 0.0 if interleaved else DRIFT
    totals = [
        [sum(t[i] for _, t in k.values()) for i in range(len(s))]
        for k, s in zip(kernels, (base, now), strict=True)
    ]
    rows = [name_kernel_row(judge(*(p and p[1] for p in x), m, gate, drift), *x) for x in pairs]
    site_rows = [
        name_site_row(judge(*(s and s.times for s in p), m, gate, drift), *p) for p in sites + tied
    ]
    for row in site_rows[len(sites) :]:
        row.verdict = "ambiguous"
    one_run, differ = min(len(base), len(now)) == 1, find_device_difference(base, now)
    caveats = [NOT_INTERLEAVED] * (not interleaved) + [ONE_RUN] * one_run
    caveats += [f"{differ} (--any-device)"] if differ else []
    total = judge(*totals, m, gate, drift)
    total.name = total.readable_name = "GPU time"
    out = Comparison(
        **gate._asdict(),
        base=name,
        interleaved=interleaved,
        alpha=stats.ALPHA,
        rows_judged=rows_judged,
        alpha_divisor=alpha_divisor,
        method=stats.name_method(min(len(base), len(now))),
        total=total,
        kernels=sort_by_change(rows),
        callsites=sort_by_change(site_rows),
        caveats=caveats,
        devices_differ=bool(differ) and differ.startswith("devices differ"),
        base_provenance=base[0].proton_provenance or None,  # now's is the summary's own
    )
    out.regressions = [r.label() for r in select_rows(out, lambda r: r.regression)]
    hit = {kernel_key(r.name) for r in rows if r.regression}  # a call site of one: no other
    changes = len(hit) + sum(
        r.regression and not ((a or b).kernels | (b or a).kernels) & hit
        for r, (a, b) in zip(site_rows, sites + tied, strict=True)
    )
    changes = changes or int(total.regression)
    unread = [u for s in now for u in s.proton_unread or [] if "same_as" not in u]
    out.first_line = write_first_line(out, changes)
    out.gate = write_gate_lines(out, changes, unread)
    return out


def unsettled(d: Comparison) -> list:
    """The rows the gate could still fail, which more rounds are for: inconclusive, or slower
    but not surely past --fail-above, their interval reaching past it and a growth past the
    floor (--min-ms); the tuner's aside."""
    return select_rows(d, lambda r: could_fail(r, d)) if d.fail_above is not None else []


def could_fail(r: Row, d: Comparison) -> bool:
    if r.verdict not in ("inconclusive", "slower") or r.regression or r.tuning or not r.high:
        return False
    return r.high > 1 + d.fail_above / 100 and r.base_ms * (r.high - 1) >= d.min_ms


def open_rows(d: Comparison) -> list:
    """The inconclusive rows that more trials could settle to the gate's end: where a gate
    was given, those it could still fail; else any with an interval."""

    def settle(r: Row) -> bool:
        if r.verdict != "inconclusive" or r.tuning or not r.high:
            return False
        return d.fail_above is None or could_fail(r, d)

    return select_rows(d, settle)


def sort_by_change(rows: list) -> list:
    return sorted(rows, key=lambda r: abs(r.ms - r.base_ms), reverse=True)


def select_rows(d: Comparison, keep: callable) -> list:
    """The rows that keep, the largest change first, the GPU time last."""
    rows = sort_by_change([r for r in d.kernels + d.callsites if keep(r)])
    return (rows + [d.total]) if keep(d.total) else rows


def name_kernel_row(row: Row, before: tuple | None, after: tuple | None) -> Row:
    """row with its kernel's names ((record, times) of each side); where its shape changed,
    both: `k [4096x1024 -> 4096x2048]`."""
    for key in ("name", "readable_name"):
        old, new = (side and getattr(side[0], key) for side in (before, after))
        if old is not None and new is not None and old != new:
            shapes = (x[len(kernel_key(x)) :].strip(" []") or "no shape" for x in (old, new))
            new = f"{kernel_key(new)} [{' -> '.join(shapes)}]"
        setattr(row, key, new or old)
    return row


def name_site_row(row: Row, old: Site | None, new: Site | None) -> Row:
    """row with its call site as now shown, each line an edit moved shown as old->new; the
    tuner's own time never gated."""
    site = (new or old).site
    row.callsite = " > ".join(site.frame_texts(lines(old) if old and new else ()))
    row.tuning = site.autotuning
    row.regression &= not site.autotuning
    return row


def find_device_difference(base: list, now: list) -> str | None:
    """Where base and now ran on different device models (the H100 and H200 differ in the
    bus), both named; else None."""
    models = [
        {
            f"{d.get('type')} {d.get('arch')} ({d.get('sm_count')} SMs"
            + (f", {d['memory_bus_bits']}-bit memory bus)" if d.get("memory_bus_bits") else ")")
            for d in side[0].proton_device or []
        }
        for side in (base, now)
    ]
    was, is_ = (", ".join(sorted(m)) for m in models)
    if not (was or is_) and all(side[0].proton_timeline for side in (base, now)):
        return "devices unchecked: a trace records none"
    return f"devices differ: {is_} now, {was} in the base" if was and is_ and was != is_ else None


def find_refusal(base: list, now: list, interleaved: bool, any_device: bool) -> str | None:
    """Why base and now cannot be compared (ranks or devices differ, or, not interleaved,
    nothing in common), else None."""
    counts = [{len(s.proton_ranks or [0]) for s in side} for side in (base, now)]  # 1: no ranks
    if len(counts[0] | counts[1]) > 1:
        was, is_ = ("/".join(map(str, sorted(c))) for c in counts)
        return f"ranks differ: {was} in the base, {is_} now; summed, they would read as a change"
    if not any_device and (differ := find_device_difference(base, now)):
        return f"{differ}: --any-device compares them anyway"
    keys = [
        {kernel_key(k) for k in kernel_times(side)}
        | {site_key(s.site) for s in site_times(side).values()}
        for side in (base, now)
    ]
    return None if interleaved or keys[0] & keys[1] else "no kernel or call site in common"


def find_unfit_base(base: list) -> str | None:
    """Why base cannot be compared with (a capture not read, no timed kernel), else None."""
    unread = [u for s in base for u in s.proton_unread or [] if "same_as" not in u]
    if unread:
        return f"not every capture was read ({unread[0]['file']}: {unread[0]['why']})"
    return None if base[0].proton_kernels else "no timed kernel to compare with (scopes only)"


def write_first_line(d: Comparison, changes: int) -> str:
    """The first line, by docs/summary.md's "The first line and the headline"."""
    pct = d.fail_above
    band = Gate(d.fail_above, d.min_ms, d.same).band()
    if regressions := select_rows(d, lambda r: r.regression):
        n, s = len(regressions), "s" * (changes > 1)
        more = f" ({changes} regression{s} over {n} rows)" if n > 1 else ""
        lead = f"{describe(regressions[0])}: past --fail-above {pct:g}{more}"
    elif changed := select_rows(d, lambda r: r.verdict in ("slower", "faster") and not r.tuning):
        lead = describe(changed[0]) + ("" if pct is None else f": none failed --fail-above {pct:g}")
    else:
        lead = "inconclusive: no row settled" if open_rows(d) else "no change"
        lead += f" beyond the noise, {band:g}% and {d.min_ms:g} ms ({d.rows_judged} rows judged)"
    if kept := select_rows(d, lambda r: kept_out(r, pct)):
        lead += f"; {len(kept)} row{'s' * (len(kept) > 1)} past --fail-above {pct:g}"
        lead += f" grew under --min-ms {d.min_ms:g}"
    arrived = [r for r in d.kernels if r.verdict in ("new", "gone")]  # by the ms they move
    if arrived and abs(arrived[0].ms - arrived[0].base_ms) >= d.min_ms:
        lead += f"; {describe(arrived[0])}"
    if n := sum(r.verdict == "inconclusive" for r in d.kernels + d.callsites + [d.total]):
        lead += f"; {n} row{'s' * (n > 1)} inconclusive{tell_trials(d, n)}"
    first = [d.caveats[0], lead, *d.caveats[1:]] if not d.interleaved else [lead, *d.caveats]
    return "; ".join(first)


def kept_out(r: Row, pct: float | None) -> bool:
    """Whether r is slower past --fail-above but grew less than --min-ms, the floor."""
    if pct is None or r.verdict != "slower" or r.regression or r.tuning:
        return False
    return (r.low if r.low is not None else r.ratio or math.inf) > 1 + pct / 100


def tell_trials(d: Comparison, n: int) -> str:
    """What more TRIALS would do for the inconclusive rows: settle those near enough, by the
    floor and the gate; else nothing."""
    reach, drift = open_rows(d), 0.0 if d.interleaved else DRIFT
    edge = math.log1p(Gate(d.fail_above, d.min_ms, d.same).band() / 100) + math.log1p(drift / 100)
    if not reach and select_rows(d, lambda r: r.verdict == "inconclusive" and r.high is None):
        return ": a trial at 0 ms, which no trials settle"
    if not reach:  # without a gate, only the tuner's rows
        pct = d.fail_above
        gate = "" if pct is None else f"--fail-above {pct:g}, --min-ms {d.min_ms:g}"
        return gate and f": none the gate could fail ({gate})"
    near = [stats.trials_to_settle(min(r.n_base, r.n), r.ratio, r.low, r.high, edge) for r in reach]
    near = [t for t in near if t <= SETTLE]
    if not near:
        return f": too near an edge for {SETTLE} TRIALS a side to settle"
    them = "them" if len(near) == n else f"{len(near)} of them"
    return f": about {math.ceil(max(near))} TRIALS a side would settle {them}"


def describe(row: Row) -> str:
    """A verdict as words: `k: 1.14x faster (0.121 -> 0.106 ms, interval 0.86-0.89)`."""
    times = f"{row.base_ms:.3f} -> {row.ms:.3f} ms"
    if row.low is not None:
        times += f", interval {row.low:.3f}-{row.high:.3f}"
    r = row.ratio
    factor = "" if r is None else f"{1 / r if r < 1 else r:.3f}x "
    return f"{row.label()}: {factor}{row.verdict} ({times})"


def write_gate_lines(d: Comparison, changes: int, unread: list) -> list[str]:
    """The gate's outcome in a line, with the exit status it leads to, then each regression
    as stderr says it."""
    pct, tail = d.fail_above, "".join(f"; {c}" for c in d.caveats)
    end = f", but exit 1: {unread[0]['file']} not read." if unread else "."
    if not d.regressions:
        return [("Gate: none" if pct is None else f"Gate: passed --fail-above {pct:g}") + end]
    rows = select_rows(d, lambda r: r.regression)
    lines = [f"regression: {describe(r)}, past --fail-above {pct:g}{tail}" for r in rows]
    head = f"Gate: {changes} regression{'s' * (changes > 1)}"
    head += f" ({len(rows)} rows)" if len(rows) > 1 else ""
    return [f"{head} past --fail-above {pct:g}" + (end if unread else ", exit 3."), *lines]

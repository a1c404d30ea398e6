"""Did it get better: a run of trials' spread, and a run against an earlier one, each row
(the GPU time, each kernel, each call site) with a verdict weighed against the trials'
noise, and a gate for CI that agrees with it.

Each side is a list of summaries (parse_hatchet.py), one for each trial. A row's time in a
trial is its total ms there. Launches under Triton's autotuner (call sites marked
[autotuning]) are rows of their own, apart from their kernels' times and the GPU time's,
and never gated. The rules are docs/summary.md's "Compare".

In order: a run of trials; what each side ran; matching rows by what they are; the rule;
the comparison; whether two runs compare at all; what it says.
"""

import math
import re
import statistics
from operator import itemgetter
from typing import NamedTuple

from summary.run import printable

SHAPE = re.compile(r"(.*?)( \[[^\[\]]*\])?", re.S)  # launch_metadata's " [shape dtype]" suffix
LINE = re.compile(r":(\d+)(?= )")  # a frame's line in a call site, "file:line function"
TUNING = " [autotuning]"
ALPHA = 0.05  # of all rows together: simultaneous 95% intervals
ONE_RUN = "one run a side: no noise, the gate judges the change alone"
JUDGED = ("same", "slower", "faster", "inconclusive")


class Gate(NamedTuple):
    """What a verdict and a regression are held to: percents and milliseconds."""

    fail_above: float | None = None
    min_ms: float = 0.01
    same: float = 2.0

    def band(self) -> float:
        """The percent within which a row is the same: --same, or --fail-above's where lower."""
        return self.same if self.fail_above is None else min(self.same, self.fail_above)


def spread(times: list) -> dict:
    """mean, min and max ms across trials, and the coefficient of variation (None for one
    trial, or a mean of 0)."""
    mean = statistics.fmean(times)
    cv = statistics.stdev(times) / mean if len(times) > 1 and mean else None
    return {"mean_ms": mean, "min_ms": min(times), "max_ms": max(times), "cv": cv}


def trials(summaries: list) -> dict:
    """proton_trials: n, and each kernel's time per trial across trials, the largest first."""
    times = {}
    for i, summary in enumerate(summaries):
        for k in summary.get("proton_kernels", []):
            times.setdefault(k["name"], [0.0] * len(summaries))[i] += k["total_ms"]
    rows = [{"name": name, **spread(t), "times_ms": t} for name, t in times.items()]
    return {"n": len(summaries), "kernels": sorted(rows, key=lambda r: r["mean_ms"], reverse=True)}


def autotuned(summary: dict) -> dict:
    """Each kernel's (ms, launches) of Triton's autotuner timing its configs."""
    out = {}
    for site in summary.get("proton_callsites") or []:
        for k in site["kernels"] if TUNING in site["callsite"] else []:
            ms, n = out.get(k["name"], (0.0, 0))
            out[k["name"]] = (ms + k["ms"], n + (k.get("launches") or 0))
    return out


def kernel_times(side: list) -> dict:
    """Each kernel's ms per trial outside the autotuner; a kernel launched only by the
    tuner is none."""
    out = {}
    for i, summary in enumerate(side):
        tuned = autotuned(summary)
        for k in summary.get("proton_kernels", []):
            ms, n = tuned.get(k["name"], (0.0, 0))
            if not n or (k["launches"] or 0) > n:
                entry = out.setdefault(k["name"], (k, [0.0] * len(side)))
                entry[1][i] += max(0.0, k["total_ms"] - ms)
    return out


def site_times(side: list) -> dict:
    """Each call site's ms per trial, and the kernels it launched in any trial."""
    out = {}
    for i, summary in enumerate(side):
        for site in summary.get("proton_callsites", []):
            text, ms = site["callsite"], [0.0] * len(side)
            entry = out.setdefault(text, {"callsite": text, "kernels": set(), "times": ms})
            entry["kernels"] |= {kernel_key(k["name"]) for k in site["kernels"]}
            entry["times"][i] += site["ms"]
    return out


def kernel_key(name: str) -> str:
    return SHAPE.fullmatch(name)[1]  # a kernel whose shape changed is still itself


def site_key(text: str) -> str:
    return LINE.sub(":", text)  # its files and functions, lines apart


def matched_kernels(before: dict, after: dict) -> list:
    """Pairs of (row, ms per trial) of base and now, None where a side lacks it: by name
    without the shape, the same shape first, then the others in order."""
    groups = {}
    for i, side in enumerate((before, after)):
        for name, entry in sorted(side.items()):
            groups.setdefault(kernel_key(name), ({}, {}))[i][name] = entry
    pairs = []
    for old, new in groups.values():
        pairs += [(old.pop(name), new.pop(name)) for name in list(old) if name in new]
        rest = [list(old.values()), list(new.values())]
        pairs += list(zip(*rest, strict=False))  # the rest in order
        pairs += [(a, None) for a in rest[0][len(rest[1]) :]]
        pairs += [(None, b) for b in rest[1][len(rest[0]) :]]
    return pairs


def apart(x: dict, y: dict) -> tuple:
    """How far two call sites of the same files and functions are: the kernels only one
    of them launched, then the lines between them."""
    lines = zip(LINE.findall(x["callsite"]), LINE.findall(y["callsite"]), strict=True)
    return len(x["kernels"] ^ y["kernels"]), sum(abs(int(a) - int(b)) for a, b in lines)


def nearest(x: dict, others: list) -> dict | None:
    """The one of others nearest to x; None where two are as near."""
    ranked = sorted(others, key=lambda y: apart(x, y))
    close = [apart(x, y) for y in ranked[:2]] + [(math.inf,)] * 2
    return ranked[0] if close[0] < close[1] else None


def matched_sites(before: dict, after: dict) -> tuple[list, list]:
    """Pairs of call sites of base and now (None where a side lacks one), matched on their
    files and functions, then as mutual nearest neighbours (apart), then, as many being
    left on each side, in the order of their lines (an edit that shifts lines keeps their
    order); and those still tied."""
    groups = {}
    for i, side in enumerate((before, after)):
        for site in side.values():
            groups.setdefault(site_key(site["callsite"]), ([], []))[i].append(site)
    pairs, tied = [], []
    for old, new in groups.values():
        pairs += mutual(old, new)
        if len(old) == len(new):
            lines = [
                sorted(side, key=lambda s: [*map(int, LINE.findall(s["callsite"]))])
                for side in (old, new)
            ]
            pairs += zip(*lines, strict=True)
        elif old and new:
            tied += [(x, None) for x in old] + [(None, y) for y in new]
        else:
            pairs += [(x, None) for x in old] + [(None, y) for y in new]
    return pairs, tied


def mutual(old: list, new: list) -> list:
    """Pairs of mutual nearest neighbours of old and new, taken out of both, again and
    again till none is left."""
    pairs = []
    while found := [(x, y) for x in old if (y := nearest(x, new)) and nearest(y, old) is x]:
        for x, y in found:
            pairs.append((x, y))
            old.remove(x)
            new.remove(y)
    return pairs


def t_quantile(p: float, v: float) -> float:
    """Student's t quantile for 0.5 < p < 1 and v >= 1 degrees of freedom: the t whose upper
    tail, I_x(v/2, 1/2) / 2 at x = v / (v + t^2) (Abramowitz and Stegun 26.7.1), is 1 - p;
    found on ln t by the Anderson-Bjorck method, between the normal's and Cauchy's (v = 1)."""
    from mpmath import betainc, exp, findroot, log

    def gap(s: float) -> float:  # ln of the tail at t = e^s over 1 - p: near a line in s
        return log(betainc(v / 2, 0.5, 0, v / (v + exp(2 * s)), regularized=True) / (2 * (1 - p)))

    bounds = statistics.NormalDist().inv_cdf(p), math.tan(math.pi * (p - 0.5))
    return math.exp(findroot(gap, [math.log(t) for t in bounds], solver="anderson"))


def interval(base: list, now: list, m: int) -> tuple:
    """ln r, the log of now over base by the means of log times, and its simultaneous
    interval (Welch's t with Welch-Satterthwaite's degrees of freedom, Bonferroni over m
    rows), exponentiated; (ln r, None, None) where a side has one trial or one at 0."""
    if min(len(base), len(now)) < 2 or min(base + now) <= 0:
        means = (statistics.fmean(base), statistics.fmean(now))
        ln_r = 0.0 if means == (0.0, 0.0) else ln(means[1]) - ln(means[0])
        return ln_r, None, None
    logs = [[math.log(x) for x in side] for side in (base, now)]
    ln_r = statistics.fmean(logs[1]) - statistics.fmean(logs[0])
    parts = [statistics.variance(side) / len(side) for side in logs]
    if not sum(parts):  # no spread on either side: the point itself
        return ln_r, math.exp(ln_r), math.exp(ln_r)
    v = sum(parts) ** 2 / sum(q**2 / (len(side) - 1) for q, side in zip(parts, logs, strict=True))
    half = t_quantile(1 - ALPHA / 2 / m, v) * math.sqrt(sum(parts))
    return ln_r, math.exp(ln_r - half), math.exp(ln_r + half)


def ln(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def verdict(ln_r: float, low: float | None, high: float | None, d: float) -> str:
    """same, slower, faster or inconclusive: the interval against the band [e^-d, e^d] and
    1, or without one, the estimate against the band alone."""
    if low is None:
        return "slower" if ln_r > d else "faster" if ln_r < -d else "same"
    if low >= math.exp(-d) and high <= math.exp(d):
        return "same"
    if low > 1 and ln_r > d:
        return "slower"
    return "faster" if high < 1 and ln_r < -d else "inconclusive"


def judged(base: list, now: list, m: int, gate: Gate) -> dict:
    """A row's ratio, interval, verdict, and whether it is a regression, from its ms per
    trial on each side; m rows judged in all."""
    ln_r, low, high = interval(base, now, m)
    said = verdict(ln_r, low, high, math.log1p(gate.band() / 100))
    if min(len(base), len(now)) > 1 and min(base + now) <= 0:
        said = "inconclusive"  # a trial it did not run in: no log time
    edge = ln_r if low is None else math.log(low)
    past = gate.fail_above is not None and edge > math.log1p(gate.fail_above / 100)
    means = statistics.fmean(base), statistics.fmean(now)
    grew = means[1] - means[0] >= gate.min_ms
    ratio = math.exp(ln_r) if low is not None else means[1] / means[0] if means[0] else None
    regression = said == "slower" and grew and past
    return {"ratio": ratio, "low": low, "high": high, "verdict": said, "regression": regression}


def diff(base: list, now: list, name: str, gate: Gate, interleaved: bool = False) -> dict:
    """proton_diff: the GPU time (tuning apart), each kernel and each call site, base
    against now, each with its verdict, the largest change first; the regressions; the
    first line, which tells the story."""
    kernels = [kernel_times(side) for side in (base, now)]
    pairs = matched_kernels(*kernels)
    sites, tied = matched_sites(*(site_times(side) for side in (base, now)))
    m = 1 + sum(bool(a and b) for a, b in pairs + sites)  # the GPU time, and matched rows
    out = {"base": name, "interleaved": interleaved, "alpha": ALPHA, "rows_judged": m}
    out["base_provenance"] = base[0].get("proton_provenance")  # now's is the summary's own
    out["method"] = "one run" if min(len(base), len(now)) == 1 else "welch log bonferroni"
    out.update(same=gate.same, fail_above=gate.fail_above, min_ms=gate.min_ms)
    totals = [
        [sum(t[i] for _, t in k.values()) for i in range(len(s))]
        for k, s in zip(kernels, (base, now), strict=True)
    ]
    out["total"] = row({"name": "GPU time", "readable_name": "GPU time"}, *totals, m, gate)
    out["kernels"] = ordered(
        row(shown(*(p and p[0] for p in pair)), *(p and p[1] for p in pair), m, gate)
        for pair in pairs
    )
    out["callsites"] = ordered(
        row({"callsite": moved(*pair)}, *(s and s["times"] for s in pair), m, gate)
        for pair in sites
    )
    for x, y in tied:
        site = row({"callsite": (x or y)["callsite"]}, x and x["times"], y and y["times"], m, gate)
        out["callsites"].append({**site, "verdict": "ambiguous"})
    out["regressions"] = [shown_as(r) for r in picked(out, itemgetter("regression"))]
    out["caveats"] = [] if interleaved else ["not interleaved"]
    out["caveats"] += [ONE_RUN] if out["method"] == "one run" else []
    out["caveats"] += [f"{d} (--any-device)"] if (d := devices(base, now)) else []
    out["first_line"] = story(out, gate)
    return out


def row(what: dict, base: list | None, now: list | None, m: int, gate: Gate) -> dict:
    """A row: its mean ms and trials on each side, and its verdict; new or gone where a
    side lacks it."""
    out = {**what, "base_ms": statistics.fmean(base or [0.0]), "ms": statistics.fmean(now or [0.0])}
    out.update(n_base=len(base or []), n=len(now or []), base_times_ms=base, times_ms=now)
    if not (base and now):
        judged_ = {"ratio": None, "low": None, "high": None, "verdict": "gone" if base else "new"}
        return {**out, **judged_, "regression": False}
    out.update(judged(base, now, m, gate))
    if TUNING in what.get("callsite", ""):
        out.update(tuning=True, regression=False)  # the tuner's own time: never gated
    return out


def ordered(rows: object) -> list:
    return sorted(rows, key=lambda r: abs(r["ms"] - r["base_ms"]), reverse=True)


def picked(d: dict, keep: callable) -> list:
    """The rows that keep, the largest change first, the GPU time last."""
    rows = ordered(r for r in d["kernels"] + d["callsites"] if keep(r))
    return (rows + [d["total"]]) if keep(d["total"]) else rows


def shown(before: dict | None, after: dict | None) -> dict:
    """A kernel's names; where its shape changed, both: `k [4096x1024 -> 4096x2048]`."""
    out = {}
    for key in ("name", "readable_name"):
        old, new = (side and side[key] for side in (before, after))
        if old is None or new is None or old == new:
            out[key] = new or old
        else:
            was, now = (SHAPE.fullmatch(n)[2] or "" for n in (old, new))
            out[key] = f"{SHAPE.fullmatch(new)[1]} [{was.strip(' []')} -> {now.strip(' []')}]"
    return out


def moved(old: dict | None, new: dict | None) -> str:
    """A call site as now shown, each line an edit moved shown as old->new."""
    if old is None or new is None:
        return (old or new)["callsite"]
    was = iter(LINE.findall(old["callsite"]))
    return LINE.sub(
        lambda m: f":{a}->{m[1]}" if (a := next(was)) != m[1] else m[0], new["callsite"]
    )


def shown_as(row: dict) -> str:
    return row.get("readable_name") or row.get("callsite")


def device(side: list) -> str | None:
    """What a run ran on: its captures' device models (the H100 and H200 differ in the bus)."""
    models = {
        f"{d.get('type')} {d.get('arch')} ({d.get('sm_count')} SMs, "
        f"{d.get('memory_bus_bits')}-bit memory bus)"
        for d in side[0].get("proton_device", [])
    }
    return ", ".join(sorted(models)) or None


def devices(base: list, now: list) -> str | None:
    """Where base and now ran on different device models, both named; else None."""
    was, now_ = device(base), device(now)
    return f"devices differ: {was} against {now_}" if was and now_ and was != now_ else None


def refusal(base: list, now: list, interleaved: bool, any_device: bool) -> str | None:
    """Why base and now cannot be compared: different devices (unless any_device), or,
    where they were not interleaved, nothing in common; else None."""
    if not any_device and (differ := devices(base, now)):
        return f"{differ}: --any-device compares them anyway"
    keys = [
        {kernel_key(k) for k in kernel_times(side)} | {site_key(s) for s in site_times(side)}
        for side in (base, now)
    ]
    return None if interleaved or keys[0] & keys[1] else "no kernel or call site in common"


def unfit(base: list) -> str | None:
    """Why base's summaries cannot be compared with: a capture not read (a comparison with
    part of a run would mislead), or no timed kernel; else None."""
    unread = [u for s in base for u in s.get("proton_unread", []) if "same_as" not in u]
    if unread:
        return f"not every capture was read ({unread[0]['file']}: {unread[0]['why']})"
    return (
        None if "proton_gpu_time_ms" in base[0] else "no timed kernel to compare with (scopes only)"
    )


def story(d: dict, gate: Gate) -> str:
    """The first line: the largest regression, else the judged change that adds or removes
    the most ms, else that none changed; the rows left inconclusive; the caveats."""
    pct = gate.fail_above
    if regressions := picked(d, itemgetter("regression")):
        more = f" ({len(regressions)} regressions)" if len(regressions) > 1 else ""
        lead = f"{said(regressions[0])}: past --fail-above {pct:g}{more}"
    elif changed := picked(d, changes):
        lead = said(changed[0]) + ("" if pct is None else f": none past --fail-above {pct:g}")
    else:
        lead = f"no change beyond the noise and {gate.band():g}% ({d['rows_judged']} rows judged)"
    rows = d["kernels"] + d["callsites"] + [d["total"]]
    if n := sum(r["verdict"] == "inconclusive" for r in rows):
        lead += f"; {n} row{'s' * (n > 1)} inconclusive: more TRIALS would settle them"
    return "; ".join([lead, *d["caveats"]])


def changes(row: dict) -> bool:
    return row["verdict"] in ("slower", "faster") and not row.get("tuning")


def said(row: dict) -> str:
    """A verdict as words: `k: 1.14x faster (0.121 -> 0.106 ms, interval 0.86-0.89)`."""
    times = f"{row['base_ms']:.3f} -> {row['ms']:.3f} ms"
    if row["low"] is not None:
        times += f", interval {row['low']:.3f}-{row['high']:.3f}"
    r = row["ratio"]
    factor = "" if r is None else f"{1 / r if r < 1 else r:.3f}x "
    return f"{shown_as(row)}: {factor}{row['verdict']} ({times})"


def failures(d: dict) -> list:
    """One line for each regression, for stderr: what, ratio, interval, the PCT."""
    pct, tail = d["fail_above"], "".join(f"; {c}" for c in d["caveats"])
    rows = picked(d, itemgetter("regression"))
    return [f"regression: {said(r)}, past --fail-above {pct:g}{tail}" for r in rows]


def table(summary: dict, top: int) -> list:
    """The story, then base and now of the GPU time, each kernel and call site; and a run
    of trials' spread across them."""
    lines = []
    if d := summary.get("proton_diff"):
        how = "ratios now/base" if d["method"] == "one run" else "simultaneous 95% intervals"
        lines += [
            d["first_line"],
            f"against {d['base']}: {d['rows_judged']} rows judged, {how}{across(d)}",
            f"{'base ms':>10} {'ms':>10} {'ratio':>6} {'low':>6} {'high':>6} {'trials':>7} "
            f"{'verdict':>12}  GPU time, kernels, call sites",
        ]
        for r in [d["total"], *d["kernels"][:top], *d["callsites"][:top]]:
            ratio, low, high = (
                "" if r[k] is None else f"{r[k]:.3f}" for k in ("ratio", "low", "high")
            )
            lines.append(
                f"{r['base_ms']:10.4f} {r['ms']:10.4f} {ratio:>6} {low:>6} {high:>6} "
                f"{r['n_base']:>3}/{r['n']:<3} {r['verdict']:>12}  {shown_as(r)}{across(d)}"
            )
    if t := summary.get("proton_trials"):
        shown_ = {k["name"]: k["readable_name"] for k in summary.get("proton_kernels", [])}
        lines.append(f"{t['n']} trials: each kernel's ms in each, across them")
        lines.append(f"{'mean':>10} {'min':>10} {'max':>10} {'cv':>6}  kernel")
        for k in t["kernels"][:top]:
            cv = "" if k["cv"] is None else f"{k['cv']:.1%}"
            name = shown_.get(k["name"], k["name"])
            lines.append(
                f"{k['mean_ms']:10.4f} {k['min_ms']:10.4f} {k['max_ms']:10.4f} {cv:>6}  {name}"
            )
    return lines


def markdown(d: dict) -> str:
    """The comparison for a CI job's step summary or a pull request's comment: the first
    line, each judged row with its interval, and the gate's outcome."""

    def cell(text: str) -> str:
        return printable(text).replace("|", "\\|")

    lines = [f"**{cell(d['first_line'])}**", "", f"Against `{cell(d['base'])}`{across(d)}.", ""]
    lines += ["| row | base ms | ms | ratio | interval | trials | verdict |"]
    lines += ["| --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in [d["total"], *d["kernels"], *d["callsites"]]:
        if r["verdict"] in JUDGED:
            ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
            span = "" if r["low"] is None else f"{r['low']:.3f}-{r['high']:.3f}"
            lines.append(
                f"| {cell(shown_as(r))}{across(d)} | {r['base_ms']:.4f} | {r['ms']:.4f} | {ratio} "
                f"| {span} | {r['n_base']}/{r['n']} | {r['verdict']} |"
            )
    return "\n".join([*lines, "", outcome(d), ""])


def outcome(d: dict) -> str:
    """The gate's outcome in a line: none, passed, or how many rows failed it (exit 3)."""
    pct, failed = d["fail_above"], len(d["regressions"])
    if failed:
        return f"Gate: {failed} past --fail-above {pct:g}, exit 3."
    return "Gate: none." if pct is None else f"Gate: passed --fail-above {pct:g}."


def across(d: dict) -> str:
    """What every line says of a comparison across devices."""
    return " (devices differ)" if any("devices differ" in c for c in d["caveats"]) else ""

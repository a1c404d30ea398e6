"""The summary's records as aligned text tables, Markdown and folded stacks, names escaped."""

import math
import os

from msgspec import UNSET

from summary.records import Comparison, Summary, Trials, known
from summary.run import printable

# Columns of the kernel table where some kernel has them: field, title, format.
COLUMNS = [
    ("median_us", "median us", "{:9.2f}"),
    ("p90_us", "p90 us", "{:9.2f}"),
    ("gbyte_per_s", "GB/s", "{:8.0f}"),
    ("pct_of_peak_bw", "% peak BW", "{:9.0%}"),
    ("pct_of_ceiling_bw", "% ceiling", "{:9.0%}"),
    *((f"flop{w}_per_s", f"FLOP{w}/s", "{:9.2e}") for w in ("", "8", "16", "32", "64")),
    ("pct_of_peak_flops", "% peak FLOP", "{:11.0%}"),
]


def table(summary: Summary, top: int) -> str:
    """Each view as aligned text after a blank line: the comparison first (its first line
    the headline), else the headline, then kernels, call sites, ranks, timeline, scopes."""
    tables = [comparison_table(summary, top) + trials_table(summary, top)]
    tables += [[] if summary.proton_diff else [summary.headline or ""]]
    tables += [kernels_table(summary, top), callsites_table(summary, top)]
    if summary.proton_ranks:
        tables.append(ranks_table(summary, top))
    if summary.proton_timeline:
        tables.append(timeline_table(summary, top))
    if summary.proton_scopes:
        tables.append(scopes_table(summary, top))
    return "\n\n".join("\n".join(map(printable, lines)) for lines in tables if lines) + "\n"


def folded_stacks(summary: Summary) -> str:
    """Folded stacks (docs/summary.md's --folded): each call site's kernels under its frames,
    then each kernel's time at no call site of the user's alone."""
    stacks, at_sites = [], {}
    for site in summary.proton_callsites:
        for k in site.kernels:
            stacks.append(([*site.frame_texts(), k.readable_name], k.ms))
            at_sites[k.name] = at_sites.get(k.name, 0.0) + k.ms
    for k in summary.proton_kernels:
        stacks.append(([k.readable_name], k.total_ms - at_sites.get(k.name, 0.0)))
    return "".join(
        ";".join(printable(f).replace(";", "\\x3b") for f in frames) + f" {ns}\n"
        for frames, ms in stacks
        if (ns := round(ms * 1e6)) > 0
    )


def kernels_table(summary: Summary, top: int) -> list:  # with the columns some row has
    rows = summary.proton_kernels[:top]
    value = {key: [known(getattr(k, key)) for k in rows] for key, _, _ in COLUMNS}
    columns = [c for c in COLUMNS if any(v is not None for v in value[c[0]])]
    width = {key: len(fmt.format(0.0)) for key, _, fmt in columns}
    head = "".join(f" {title:>{width[key]}}" for key, title, _ in columns)
    lines = [f"{'ms':>10} {'share':>6} {'launches':>8} {'mean us':>9}{head}  kernel"]
    for i, k in enumerate(rows):
        cells = "".join(
            f" {'' if value[key][i] is None else fmt.format(value[key][i]):>{width[key]}}"
            for key, _, fmt in columns
        )
        n = "?" if k.launches is None else k.launches
        mean = "?" if k.mean_us is None else f"{k.mean_us:.2f}"
        l2 = " [L2-resident]" * (k.l2_resident is True)
        lines.append(
            f"{k.total_ms:10.4f} {k.share:6.1%} {n:>8} {mean:>9}{cells}  {k.readable_name}{l2}"
        )
    note = "(launches: each kernel's count, summed as aorta sums proton_kernel_count)"
    return [*lines, note] if rows else []


def callsites_table(summary: Summary, top: int) -> list:
    lines = [f"{'ms':>10} {'launches':>8}  call site > kernel"]
    for site in summary.proton_callsites[:top]:
        source = f"  {site.source}" if site.source else ""
        lines.append(f"{site.ms:10.4f} {'':8}  {site.callsite}{source}")
        for k in site.kernels:
            n = "?" if k.launches is None else k.launches
            lines.append(f"{k.ms:10.4f} {n:>8}    > {k.readable_name}")
    return lines if len(lines) > 1 else []


def comparison_table(summary: Summary, top: int) -> list:
    if not (d := summary.proton_diff):
        return []
    how = "ratios now/base" if d.method == "one run" else "simultaneous 95% intervals"
    lines = [
        d.first_line,
        f"against {d.base}: {d.rows_judged} rows judged, {how}{across(d)}",
        f"{'base ms':>10} {'ms':>10} {'ratio':>6} {'low':>6} {'high':>6} {'trials':>7} "
        f"{'verdict':>12}  GPU time, kernels, call sites",
    ]
    for r in [d.total, *d.kernels[:top], *d.callsites[:top]]:
        ratio, low, high = map(format_ratio, (r.ratio, r.low, r.high))
        lines.append(
            f"{r.base_ms:10.4f} {r.ms:10.4f} {ratio:>6} {low:>6} {high:>6} "
            f"{r.n_base:>3}/{r.n:<3} {r.verdict:>12}  {r.label()}{across(d)}"
        )
    return lines


def format_ratio(x: float | None) -> str:  # in 6 columns: 2 trials a side can give 1e+200
    return "" if x is None else f"{x:.3f}" if x < 100 else f"{x:.0f}" if x < 1e5 else f"{x:.0e}"


def trials_table(summary: Summary, top: int) -> list:
    if not (t := summary.proton_trials):
        return []
    lines = [f"{t.n} trials: each kernel's ms in each, across them{find_first_apart(t)}"]
    lines.append(f"{'mean':>10} {'min':>10} {'max':>10} {'cv':>6}  kernel")
    for k in t.kernels[:top]:
        cv = "" if k.cv is None else f"{k.cv:.1%}"
        lines.append(
            f"{k.mean_ms:10.4f} {k.min_ms:10.4f} {k.max_ms:10.4f} {cv:>6}  "
            f"{k.readable_name or k.name}"
        )
    return lines


APART = 3.0  # percent: a first trial this far outside the others' range stands apart


def find_first_apart(t: Trials) -> str:
    """Where trial 1's GPU time lies more than APART% outside the range of the others' (of
    at least 2: a warm-up it lacked, say), the words that say so; else ''."""
    gpu = [sum(k.times_ms[i] for k in t.kernels) for i in range(t.n)]
    low, high = min(gpu[1:], default=0.0), max(gpu[1:], default=0.0)
    if t.n < 3 or low * (1 - APART / 100) <= gpu[0] <= high * (1 + APART / 100):
        return ""
    return f"; trial 1 stands apart: {gpu[0]:.4f} ms of GPU time, the others {low:.4f}-{high:.4f}"


def across(d: Comparison) -> str:  # what every line says of a comparison across devices
    return " (devices differ)" if d.devices_differ else ""


def markdown(d: Comparison) -> str:
    """The comparison for a CI job's step summary: the first line, each row, the gate."""
    lines = [f"**{escape(d.first_line)}**", "", f"Against {escape(d.base)}{across(d)}.", ""]
    lines += ["| row | base ms | ms | ratio | interval | trials | verdict |"]
    lines += ["| --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in [d.total, *d.kernels, *d.callsites]:  # new and gone rows too
        ratio = "" if r.ratio is None else f"{r.ratio:.3f}"
        span = "" if r.low is None else f"{r.low:.3f}-{r.high:.3f}"
        lines.append(
            f"| {escape(r.label())}{across(d)} | {r.base_ms:.4f} | {r.ms:.4f} | {ratio} "
            f"| {span} | {r.n_base}/{r.n} | {r.verdict} |"
        )
    return "\n".join([*lines, "", d.gate[0], ""])


# Each character that could start markup inline on GitHub, backslash-escaped: `<module>` no
# HTML tag, `__call__` not bold, `|` no cell's end, `[` no link, `&` no entity.
MARKUP = str.maketrans({c: "\\" + c for c in "\\`*_<>[]|~&"})


def escape(text: str) -> str:  # as Markdown that renders as itself
    return printable(text).translate(MARKUP)


def timeline_table(summary: Summary, top: int) -> list:
    """Each call site's timeline, then each launch-bound diagnosis."""
    ranked = any("rank" in e for e in summary.proton_timeline)
    lines = [
        "timeline per call site (busy: the share of the site's span in which any kernel ran; "
        "idle: the median gap between its launches)",
        f"{'kernel ms':>10} {'span ms':>9} {'busy':>5} {'launches':>8} {'idle us':>8}  "
        + ("rank  " if ranked else "")
        + "call site",
    ]
    for e in summary.proton_timeline[:top]:
        idle = "" if e["median_idle_us"] is None else f"{e['median_idle_us']:.1f}"
        rank = f"{e.get('rank', ''):>4}  " if ranked else ""
        site = e["callsite"] + (f"  {e['source']}" if e["source"] else "")
        lines.append(
            f"{e['kernel_ms']:10.4f} {e['span_ms']:9.4f} {e['busy']:5.0%} "
            f"{e['launches']:>8} {idle:>8}  {rank}{site or '(no frame of yours)'}"
        )
    return lines + [e["launch_bound"] for e in summary.proton_timeline if e.get("launch_bound")]


def ranks_table(summary: Summary, top: int) -> list:
    ranks_, skew = summary.proton_ranks, summary.proton_rank_start_skew
    zero = min(r.get("first_kernel_start_ns", math.inf) for r in ranks_) if skew else 0
    clocked = f" {'first ms':>9} {'last ms':>9}" if skew else ""
    lines = [f"{'rank':>6} {'GPU ms':>10} {'launches':>8} {'vs mean':>8}{clocked}  files"]
    mean = sum(r["gpu_time_ms"] for r in ranks_) / len(ranks_)
    for r in ranks_[:top]:
        n = "?" if r["kernel_count"] is None else r["kernel_count"]
        vs = f"{r['gpu_time_ms'] / mean:8.2f}" if mean else f"{'':8}"
        at = f" {'':9} {'':9}" if skew else ""  # a rank that launched nothing: no span
        if skew and "first_kernel_start_ns" in r:
            first, last = r["first_kernel_start_ns"] - zero, r["last_kernel_end_ns"] - zero
            at = f" {first / 1e6:9.3f} {last / 1e6:9.3f}"
        files = ", ".join(os.path.basename(f) for f in r["files"])
        lines.append(f"{r['rank']:>6} {r['gpu_time_ms']:10.4f} {n:>8} {vs}{at}  {files}")
    clock = ["first and last ms: a rank's first kernel start and last end, from the earliest"]
    return lines + rank_notes(summary) + (clock if skew else [])


def rank_notes(summary: Summary) -> list:
    """The ranks' imbalance and start skew in words, for the table and the page."""
    notes, skew = [], summary.proton_rank_start_skew
    if (imbalance := summary.proton_rank_imbalance) not in (None, UNSET):
        notes.append(f"rank imbalance (the busiest rank's GPU time over the mean): {imbalance:.2f}")
    if skew:
        notes.append(
            f"start skew, on one clock: rank {skew['rank']} starts its GPU work last, "
            f"{skew['ms']:.3f} ms after the first"
        )
    elif skew is None:
        notes.append("ranks' clocks are not comparable (no baseTimeNanoseconds): no start skew")
    return notes


def scopes_table(summary: Summary, top: int) -> list:
    traced = "events" in summary.proton_scopes[0]
    detail = f"{'median':>8} {'p90':>8} {'events':>8}" if traced else f"{'normalized':>12}"
    lines = [
        f"{'share':>6} {'cycles':>14} {detail}  kernel: scope (cycles inside the kernel, "
        "from the instrumentation backend)"
    ]
    for s in summary.proton_scopes[:top]:
        detail = (
            f"{s['median_cycles']:8.0f} {s['p90_cycles']:8.0f} {s['events']:>8}"
            if traced
            else f"{s['normalized_cycles']:12.0f}"
        )
        lines.append(f"{s['share']:6.1%} {s['cycles']:14.0f} {detail}  {s['kernel']}: {s['scope']}")
    for s in summary.proton_sm_spread or []:
        low, mid, high = s["ctas_per_sm"]
        slow = s["slowest_sm_vs_median"]
        lines.append(
            f"{s['kernel']}: {s['launches']} launches over {s['sms']} SMs, {low:g} to {high:g} "
            f"CTAs per SM per launch (median {mid:g}); the busiest SM's "
            + (f"cycles {slow:.2f}x the median SM's" if slow else "cycles unknown")
        )
    return lines

"""One self-contained HTML page of a summary's records, each figure a plain dict in plotly.js's
JSON schema written with plotly.js inline (docs/summary.md's "The page" says what it shows)."""

import html
import zlib
from collections import Counter
from typing import NamedTuple

import plotly.io as pio
from msgspec import UNSET
from plotly.colors import make_colorscale, sequential

from summary.records import Row, Summary, known
from summary.text import rank_notes

AORTA_KEYS = ("proton_kernel_count", "proton_gpu_time_ms", "proton_top_kernel_ms")
AORTA_KEYS += ("proton_top_kernels", "proton_artifact_dir")
TOP = 30  # rows of a figure of bars or points; the caption counts the rest
SITES = 40  # call sites drawn on the timeline
MOST = 200  # call sites in the icicle, ranks in their bars: a page's size is bounded
LABEL = 60  # characters of a name on an axis; hover shows it whole
ROW_PX, MARGIN_PX = 26, 110
MARGIN = {"t": 30, "r": 10, "b": 50}  # plotly's, in pixels, for every figure
BLUE, PALE, ORANGE, GREEN, GREY = "#1f77b4", "#aec7e8", "#ff7f0e", "#2ca02c", "#8c8c8c"
RIGHT = {"xaxis": "x2", "hoverinfo": "x+name"}  # percent-of-peak bars, on the kernels' rows
# The kernels' two panels, side by side 0.03 of the width apart: each one's x domain.
PANELS = {"share of GPU time": [0.0, 0.679], "% of peak GB/s": [0.709, 1.0]}
TITLE = {"y": 1.0, "xref": "paper", "yref": "paper", "xanchor": "center", "yanchor": "bottom"}
TITLE.update(showarrow=False, font={"size": 16})  # a panel's, above it
RATIO_1 = {"type": "line", "x0": 1, "x1": 1, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain"}
RATIO_1["line"] = {"color": GREY, "dash": "dot"}  # a ratio of 1, dotted across the rows
# plotly writes figures with orjson where it is installed, which refuses a lone surrogate (a
# name from a path that is not UTF-8); the standard library's json escapes it.
pio.json.config.default_engine = "json"
BLUES = make_colorscale(sequential.Blues)  # ColorBrewer's: plotly.js's own "Blues" differs
STRIP = {"type": "heatmap", "zmin": 0, "zmax": 1, "colorscale": BLUES}  # a timeline's row
STRIP["colorbar"] = {"title": {"text": "busy"}, "tickformat": ".0%"}
MARK = {"symbol": "line-ns-open", "size": 16, "color": BLUE, "line": {"width": 3}}
DIAMOND = {"symbol": "diamond", "size": 13, "line": {"width": 1, "color": "#333"}}
CONFIG = {"displayModeBar": False, "responsive": True}  # plotly's, for every figure
VERDICT_COLOURS = {"slower": "#d62728", "faster": GREEN, "same": GREY, "inconclusive": ORANGE}
STYLE = """body { font: 15px/1.45 system-ui, sans-serif; margin: 1.2em auto; max-width: 1200px;
padding: 0 1em; color: #222 } h1, .gate { font: 600 1.05em ui-monospace, monospace;
white-space: pre-wrap } h1 { padding: .6em .8em; background: #f3f5f8; border-left: 4px solid
#1f77b4 } h1.fail { border-color: #d62728 } h1.pass { border-color: #2ca02c } h2 { font-size:
1.15em; margin: 1.4em 0 .3em; border-bottom: 1px solid #ddd } table { font-size: .9em }
th { text-align: left; font-weight: 500; color: #555; padding-right: 1.2em; vertical-align: top;
white-space: nowrap } td { font-family: ui-monospace, monospace; word-break: break-word }
p.caption { color: #444; font-size: .9em } p.caption, p.gate { margin: .2em 0 }"""


class Figure(NamedTuple):
    """A view's figure: its element's id, heading, the lines said under it."""

    key: str
    title: str
    caption: list[str]
    figure: dict


def text(value: object) -> str:
    """value as plotly shows text: its pseudo-HTML escaped, so that `kernel<4, …>` is no tag."""
    return html.escape(str(value), quote=False)


def shorten(name: str) -> str:
    return text(name if len(name) <= LABEL else name[: LABEL - 1] + "…")


def shorten_left(name: str) -> str:
    """name's end, where a call site's innermost frames are."""
    return text(name if len(name) <= LABEL else "…" + name[1 - LABEL :])


def height(rows: int) -> int:
    return MARGIN_PX + ROW_PX * max(rows, 3)


def count_rest(rows: list, drawn: int, what: str) -> list[str]:  # a caption's last line
    return [f"and {len(rows) - drawn} more {what} in summary.json"] if len(rows) > drawn else []


def rows_axis(labels: list[str]) -> dict:
    """A y axis of rows top down, one a label: a label repeated (call sites can end alike,
    kernels share a name) numbered."""
    seen, unique = Counter(), []
    for label in labels:
        seen[label] += 1
        unique.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    ticks = {"tickvals": list(range(len(labels))), "ticktext": unique, "zeroline": False}
    return {"autorange": "reversed", **ticks}


def figure(data: list[dict], px: int, *, yaxis: dict | None = None, **layout: object) -> dict:
    """plotly's figure of data, px high, its y axis as wide as its labels need."""
    yaxis = {**(yaxis or {}), "automargin": True}
    return {"data": data, "layout": {"height": px, "margin": MARGIN, "yaxis": yaxis, **layout}}


def bar(x: list, **attributes: object) -> dict:  # horizontal, one a row from the top
    return {"type": "bar", "orientation": "h", "x": x, "y": list(range(len(x))), **attributes}


def format_value(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def list_facts(summary: Summary) -> list[tuple[str, str]]:
    """aorta's five keys, the context, the devices, the provenance and what was not read."""
    out = []
    for key in (*AORTA_KEYS, "proton_context"):
        if (value := getattr(summary, key)) is UNSET:
            continue
        if key == "proton_top_kernels":  # the first kernels, by the same order
            value = "; ".join(k.readable_name for k in summary.proton_kernels[: len(value)])
        out.append((key, format_value(value)))
    for device in summary.proton_device or []:
        out.append(("device", ", ".join(f"{k} {format_value(v)}" for k, v in device.items())))
    base = summary.proton_diff.base_provenance if summary.proton_diff else None
    for side, record in (("", summary.proton_provenance or {}), ("base ", base or {})):
        out += [(f"{side}provenance: {k}", str(v)) for k, v in record.items() if v is not None]
    for entry in summary.proton_unread or []:
        out.append(("not read", f"{entry.get('file')}: {entry.get('why')}"))
    return out


def draw_top(summary: Summary) -> list[str]:
    """The headline verbatim, and why it names another kernel than aorta's keys do; where
    --fail-above was given, the gate's outcome as the Markdown says it and each regression as
    stderr does."""
    diff = summary.proton_diff
    gated = bool(diff) and diff.fail_above is not None
    state = f' class="{"fail" if diff.regressions else "pass"}"' if gated else ""
    parts = [f'<h1 id="headline"{state}>{html.escape(summary.headline or "")}</h1>']
    top = (
        summary.proton_kernels[0].readable_name if summary.proton_kernels else None
    )  # aorta's first
    if not diff and top and not (summary.headline or "").startswith(top + ": "):
        why = f"aorta's keys count every launch, and lead with {top}"
        why += ": the headline leaves out the [autotuning] call sites (Triton's autotuner)."
        parts.append(f'<p class="caption" id="why">{html.escape(why)}</p>')
    parts += [f'<p class="gate">{html.escape(line)}</p>' for line in diff.gate] if gated else []
    return parts


def draw_facts(summary: Summary) -> str:
    """aorta's keys and the other facts, as a table."""
    cells = (
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in list_facts(summary)
    )
    return f'<table id="facts">{"".join(cells)}</table>'


def draw_kernels(summary: Summary) -> Figure | None:
    """Each kernel's share of the GPU time outside [autotuning] call sites, the largest
    first (the tuner's launches said, not drawn), beside its percent of peak."""
    rows = sorted(summary.proton_kernels, key=lambda k: k.total_ms - k.tuning_ms, reverse=True)
    if not (drawn := rows[:TOP]):
        return None
    total = sum(k.total_ms - k.tuning_ms for k in rows) or 1.0
    own = [(k.total_ms - k.tuning_ms) / total for k in drawn]
    words = []  # launches (the tuner's apart), mean and GB/s where recorded
    for k in drawn:
        n = "?" if k.launches is None else k.launches - k.tuning_launches
        tuned = f" + {k.tuning_launches} tuning, {k.tuning_ms:.3g} ms" if k.tuning_launches else ""
        said = [f"{n} launch{'' if n == 1 else 'es'}{tuned}"]
        if k.mean_us is not None:
            said.append(f"mean {k.mean_us:.2f} us")
        if known(k.gbyte_per_s) is not None:
            said.append(f"{k.gbyte_per_s:.0f} GB/s")
        words.append(text(", ".join(said)))
    hover = {"customdata": [text(k.readable_name) for k in drawn]}
    hover["hovertemplate"] = "%{customdata}<br>%{x:.1%} of GPU time<extra></extra>"
    right, axes = peak_panel(drawn, {"tickformat": ".0%", "range": [0, max(own) * 1.9 or 1]})
    style = {"marker": {"color": BLUE}, "text": words, "textposition": "outside"}
    data = [bar(own, name="share of GPU time", showlegend=False, **style, **hover), *right]
    layout = {"barmode": "overlay", "bargap": 0.3, "legend": {"orientation": "h"}}
    layout["showlegend"] = len(right) > 1
    labels = rows_axis([shorten(k.readable_name) for k in drawn])
    fig = figure(data, height(len(drawn)), yaxis=labels, **layout, **axes)
    caption = ["GB/s and % of peak where Proton's launch hook counted bytes (HOOK=triton)."]
    if any(k.tuning_ms for k in rows):
        caption.append("Shares of the GPU time outside [autotuning] call sites.")
    return Figure("kernels", "Kernels", caption + count_rest(rows, len(drawn), "kernels"), fig)


def peak_panel(drawn: list, share: dict) -> tuple[list[dict], dict]:
    """A panel of the kernels' percent of the nominal peak and of the measured ceiling, beside
    their share of GPU time (share: its x axis): its bars, and the layout of both x axes."""
    peak = [known(k.pct_of_peak_bw) for k in drawn]
    if all(p is None for p in peak):
        return [], {"xaxis": share}
    words = [f"{p:.0%}" if p is not None else "" for p in peak]
    bars = [bar(peak, name="% of the nominal peak", text=words, marker={"color": ORANGE}, **RIGHT)]
    ceiling = [known(k.pct_of_ceiling_bw) for k in drawn]
    if any(c is not None for c in ceiling):  # narrower, on the peak's bar
        l2 = [" L2-resident" if k.l2_resident is True else "" for k in drawn]
        words = ["" if c is None else f"{c:.0%}{s}" for c, s in zip(ceiling, l2, strict=True)]
        style = {"marker": {"color": GREEN}, "width": 0.35, "textposition": "outside"}
        bars.append(bar(ceiling, name="% of the measured ceiling", text=words, **style, **RIGHT))
    most = max(x for x in [*peak, *ceiling, 1.0] if x is not None)
    share_at, peak_at = PANELS.values()
    xaxis2 = {"tickformat": ".0%", "range": [0, most * 1.6], "domain": peak_at, "anchor": "y"}
    titles = [{"text": title, "x": sum(at) / 2, **TITLE} for title, at in PANELS.items()]
    return bars, {"xaxis": {**share, "domain": share_at}, "xaxis2": xaxis2, "annotations": titles}


def draw_callsites(summary: Summary) -> Figure | None:
    """The call sites as an icicle (a flame graph root up) of the folded stacks."""
    if not (sites := summary.proton_callsites):
        return None
    # id (a node's path from the root; a kernel's holds a NUL, which no frame does) ->
    # label, parent, hover, ms, colour
    nodes = {"all": ["all call sites", "", "all call sites", 0.0, "#e8edf3"]}
    for site in sites[:MOST]:  # the largest first
        parent, texts = "all", site.frame_texts()
        functions = [""] * (len(texts) - len(site.frames)) + [f.function for f in site.frames]
        for frame, function in zip(texts, functions, strict=True):
            node = f"{parent}\n{frame}"  # a node's id: its path from the root
            hue = zlib.crc32(function.encode()) % 50  # warm, the same for the same function
            colour = f"hsl({hue}, 80%, {58 + hue % 3 * 6}%)"
            nodes.setdefault(node, [shorten(frame), parent, text(frame), 0.0, colour])
            parent = node
        source = text(site.source or "(no source line here)")
        for k in site.kernels:
            hover = f"{text(k.readable_name)}<br>{k.launches} launches<br>{source}"
            leaf = [shorten(k.readable_name), parent, hover, 0.0, PALE]
            nodes.setdefault(f"{parent}\n\0{k.readable_name}", leaf)[3] += k.ms
    label, parent, hover, ms, colour = zip(*nodes.values(), strict=True)
    icicle = {
        "type": "icicle",
        "ids": list(nodes),
        "labels": label,
        "parents": parent,
        "values": ms,
        "customdata": hover,
        "branchvalues": "remainder",
        "tiling": {"orientation": "v"},
        "marker": {"colors": colour},
        "hovertemplate": "%{customdata}<br>%{value:.4f} ms, %{percentRoot:.1%}<extra></extra>",
    }
    fig = figure([icicle], 520, margin={**MARGIN, "l": 10})
    caption = ["Each frame as wide as the GPU time launched under it; click to zoom in."]
    caption += count_rest(sites, MOST, "call sites")
    return Figure("callsites", "Call sites (icicle of the folded stacks)", caption, fig)


def site_label(entry: dict) -> str:
    """A timeline entry as a row's label: its rank, the end of its call site."""
    rank = f"rank {entry['rank']}: " if "rank" in entry else ""
    return rank + shorten_left(entry["callsite"] or "(no frame)")


def draw_timeline(summary: Summary) -> Figure | None:
    """Each call site's launches on one time axis: a strip of bins coloured by how busy, a
    one-launch call site one mark of its duration."""
    entries = [e for e in summary.proton_timeline or [] if e.get("busy_by_bin")]
    if not (drawn := entries[:SITES]):
        return None
    data = []
    for at, e in enumerate(drawn):
        start, width = e.get("start_ms", 0.0), e["bin_us"] / 1e3  # start: older summaries'
        hover = f"{text(site_label(e))}<br>%{{x:.3f}} ms: busy %{{z:.0%}}<extra></extra>"
        if e["launches"] == 1:  # a tick at its middle (seen however short), as wide as it
            ms, hover = e["kernel_ms"], f"{text(site_label(e))}<br>%{{x:.3f}} ms<extra></extra>"
            wide = {"type": "constant", "value": ms / 2, "width": 0, "color": BLUE}
            data.append(markers([start + ms / 2], at, MARK, hover, error_x=wide))
            continue
        strip = {"z": [e["busy_by_bin"]], "y": [at], "hovertemplate": hover}
        strip["x"] = [start + width * (i + 0.5) for i in range(len(e["busy_by_bin"]))]
        data.append({**strip, **STRIP, "showscale": not any("z" in d for d in data)})
    each = ["one launch" if e["launches"] == 1 else f"bins of {e['bin_us']:.3g} us" for e in drawn]
    labels = rows_axis([f"{site_label(e)}, {w}" for e, w in zip(drawn, each, strict=True)])
    span = {"title": {"text": "ms from the first launch"}}
    fig = figure(data, height(len(drawn)), yaxis=labels, xaxis=span, showlegend=False)
    idle = [e.get("median_idle_us") for e in drawn]
    caption = [
        f"{site_label(e)}: {e['launches']} launches over {e['span_ms']:.3f} ms, busy "
        f"{e['busy']:.0%}, median idle " + ("-" if gap is None else f"{gap:.1f} us")
        for e, gap in zip(drawn[:5], idle, strict=False)
    ]
    caption += [f"<b>{text(e['launch_bound'])}</b>" for e in entries if e.get("launch_bound")]
    title = "Timeline per call site (each in 200 bins of its span; one launch, one mark)"
    return Figure("timeline", title, caption + count_rest(entries, SITES, "call sites"), fig)


def draw_ranks(summary: Summary) -> Figure | None:
    """Each rank's GPU time, with the imbalance and the start skew where known."""
    if not (every := summary.proton_ranks):
        return None
    rows = every[:MOST]
    x, y = [f"rank {r['rank']}" for r in rows], [r["gpu_time_ms"] for r in rows]
    words = [f"{r.get('kernel_count')} launches" for r in rows]
    bars = {"type": "bar", "x": x, "y": y, "text": words}
    fig = figure([bars], 320, yaxis={"title": {"text": "GPU ms"}})
    return Figure("ranks", "Ranks", rank_notes(summary) + count_rest(every, MOST, "ranks"), fig)


def draw_scopes(summary: Summary) -> Figure | None:
    """Each kernel's scopes by their share of its cycles (the instrumentation backend)."""
    if not (drawn := (summary.proton_scopes or [])[:TOP]):
        return None
    shares = bar([s["share"] for s in drawn], text=[f"{s['cycles']:.3g} cycles" for s in drawn])
    labels = rows_axis([shorten(f"{s['kernel']}: {s['scope']}") for s in drawn])
    fig = figure([shares], height(len(drawn)), yaxis=labels, xaxis={"tickformat": ".0%"})
    caption = [
        text(
            f"{s['kernel']}: {s['launches']} launches over {s['sms']} SMs, CTAs per SM per "
            f"launch {s['ctas_per_sm'][0]:g} to {s['ctas_per_sm'][2]:g}"
        )
        for s in summary.proton_sm_spread or []
    ]
    return Figure("scopes", "Scopes: cycles inside each kernel", caption, fig)


def markers(x: list, at: int, marker: dict, hovertemplate: str, **attributes: object) -> dict:
    """A trace of points on row at, out of the legend."""
    points = {"type": "scatter", "mode": "markers", "showlegend": False, "marker": marker}
    return {**points, "x": x, "y": [at] * len(x), "hovertemplate": hovertemplate, **attributes}


def points(at: int, times: list | None, mean: float | None, base: bool) -> list[dict]:
    """A row's per-trial times as points, each over the base's mean: the base's open."""
    colour, symbol, side = (GREY, "circle-open", "base") if base else (BLUE, "circle", "now")
    if not (times and mean):
        return []
    marker = {"color": colour, "symbol": symbol, "size": 8}
    hover = f"{side}, a trial: %{{x:.3f}}<extra></extra>"
    return [markers([t / mean for t in times], at, marker, hover)]


def ratio_marker(at: int, row: Row) -> dict:
    """A row's ratio with its interval (where it has one), coloured by its verdict."""
    r = row.ratio
    low, high = (r, r) if row.low is None else (row.low, row.high)
    marker = {**DIAMOND, "color": VERDICT_COLOURS.get(row.verdict, "#9467bd")}
    hover = f"{row.verdict}: %{{x:.3f}} ({low:.3f} to {high:.3f})<extra></extra>"
    return markers([r], at, marker, hover, error_x={"array": [high - r], "arrayminus": [r - low]})


def draw_comparison(summary: Summary) -> Figure | None:
    """Each compared row on a log axis: its trials as points, its ratio and interval by its
    verdict, a row on one side only as a point at 1; the gate's threshold as a line."""
    if not (diff := summary.proton_diff):
        return None
    rows = [diff.total, *diff.kernels[:TOP], *diff.callsites[:TOP]]  # GPU time first
    data, labels = [], []
    for at, row in enumerate(rows):
        labels.append(f"{shorten_left(row.label())}: <b>{row.verdict}</b>")
        data += points(at, row.base_times_ms, row.base_ms, base=True)
        data += points(at, row.times_ms, row.base_ms, base=False)
        data += [ratio_marker(at, row)] if row.ratio is not None else []
        if row.verdict in ("new", "gone"):
            hover = f"{row.verdict}: {row.base_ms:.4f} -> {row.ms:.4f} ms<extra></extra>"
            data.append(markers([1], at, {**DIAMOND, "color": "#9467bd"}, hover))
    lines = [vline(1, len(rows), GREY, "a ratio of 1")]
    if diff.fail_above is not None:
        edge = 1 + diff.fail_above / 100
        lines.append(vline(edge, len(rows), "#d62728", f"--fail-above {diff.fail_above:g}"))
    xaxis = {"title": {"text": "time over the base's mean"}, "type": "log"}
    fig = figure(lines + data, height(len(rows)), yaxis=rows_axis(labels), xaxis=xaxis)
    caption = [
        "Diamonds: now over the base, with the interval it was judged by; points: each "
        "trial's time, open the base's, filled now's (where the summary records them)."
    ]
    cut = count_rest(diff.kernels, TOP, "kernels") + count_rest(diff.callsites, TOP, "call sites")
    return Figure("compare", f"Compared with {text(diff.base)}", caption + cut, fig)


def vline(x: float, rows: int, colour: str, name: str) -> dict:
    """A dotted line at x across rows, named on hover (a trace: a log axis reads it as data)."""
    line = {"type": "scatter", "mode": "lines", "x": [x, x], "y": [-0.5, rows - 0.5]}
    return {**line, "line": {"color": colour, "dash": "dot"}, "name": name, "hoverinfo": "name"}


def draw_trials(summary: Summary) -> Figure | None:
    """A run of trials: each kernel's time in each trial over its mean."""
    if not (runs := summary.proton_trials) or not (rows := runs.kernels[:TOP]):
        return None
    data = []
    for at, k in enumerate(rows):
        data += points(at, k.times_ms, k.mean_ms, base=False)
    labels = [f"{shorten(k.readable_name or k.name)}, cv {k.cv or 0:.1%}" for k in rows]
    xaxis = {"title": {"text": "time over the kernel's mean"}}
    fig = figure(data, height(len(rows)), yaxis=rows_axis(labels), xaxis=xaxis, shapes=[RATIO_1])
    caption = count_rest(runs.kernels, TOP, "kernels")
    return Figure("trials", f"Trials: each kernel's time in each of {runs.n}", caption, fig)


FIRST = (draw_comparison, draw_kernels)  # the first screen's, ahead of aorta's keys
VIEWS = (draw_callsites, draw_trials, draw_timeline, draw_ranks, draw_scopes)


def page(summary: Summary) -> str:
    """The page of summary, one HTML document with plotly's JavaScript inline, once."""
    parts, inline = draw_top(summary), True
    drawn = [*(view(summary) for view in FIRST), draw_facts(summary)]
    drawn += [view(summary) for view in VIEWS]
    for part in filter(None, drawn):  # a view without its key: None
        if isinstance(part, str):
            parts.append(part)
            continue
        key, heading, caption, fig = part
        parts += [f"<h2>{heading}</h2>", *(f'<p class="caption">{line}</p>' for line in caption)]
        options = {"include_plotlyjs": inline, "full_html": False, "div_id": key}
        parts.append(pio.to_html(fig, CONFIG, validate=False, **options))
        inline = False
    title = html.escape(f"Proton summary: {summary.proton_artifact_dir}")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )

"""One self-contained HTML page of a run's summary (summary.json's object, whose keys
docs/summary.md describes): the headline and the gate's outcome, aorta's five keys, the
device and provenance, then a figure for each view the summary holds. Each figure is a
plain dict in plotly.js's JSON figure schema ({"data": [traces], "layout": {...}}), which
plotly.io writes with plotly.js inline, so that the page opens offline and fetches nothing.

Only the summary's keys are read, each view where it is present, so that the page shows
exactly what summary.json says. parse_hatchet.py imports this module only when a page is
asked for, so that plotly loads only then.
"""

import html
import zlib
from typing import NamedTuple

import plotly.io as pio
from plotly.colors import make_colorscale, sequential

from summary.compare import autotuned, failures, outcome
from summary.views import launch_bound, rank_notes

AORTA_KEYS = "proton_kernel_count proton_gpu_time_ms proton_top_kernel_ms proton_top_kernels "
AORTA_KEYS = (*AORTA_KEYS.split(), "proton_artifact_dir")
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
    """A view's figure on the page: its element's id, heading, the lines said under it."""

    key: str
    title: str
    caption: list[str]
    figure: dict


def text(value: object) -> str:
    """value as plotly shows text: its pseudo-HTML escaped, so that `kernel<4, …>` is no tag."""
    return html.escape(str(value), quote=False)


def cut(name: str) -> str:
    return text(name if len(name) <= LABEL else name[: LABEL - 1] + "…")


def height(rows: int) -> int:
    return MARGIN_PX + ROW_PX * max(rows, 3)


def more(rows: list, shown: int, what: str) -> list[str]:
    return [f"and {len(rows) - shown} more {what} in summary.json"] if len(rows) > shown else []


def readable(summary: dict) -> dict:
    """Each kernel's name -> its readable name, as the kernel view shows it."""
    return {k["name"]: k.get("readable_name", k["name"]) for k in summary.get("proton_kernels", [])}


def rows_axis(labels: list[str]) -> dict:
    """A y axis of rows top down, one a label (labels may repeat: call sites can end alike)."""
    ticks = {"tickvals": list(range(len(labels))), "ticktext": labels, "zeroline": False}
    return {"autorange": "reversed", **ticks}


def figure(data: list[dict], px: int, *, yaxis: dict | None = None, **layout: object) -> dict:
    """plotly's figure of the traces data, px high, its y axis as wide as its labels need."""
    yaxis = {**(yaxis or {}), "automargin": True}
    return {"data": data, "layout": {"height": px, "margin": MARGIN, "yaxis": yaxis, **layout}}


def bar(x: list, **attributes: object) -> dict:
    """A trace of horizontal bars, one a row from the top."""
    return {"type": "bar", "orientation": "h", "x": x, "y": list(range(len(x))), **attributes}


def shown_value(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def facts(summary: dict) -> list[tuple[str, str]]:
    """aorta's five keys, the context, the devices, the provenance and what was not read."""
    names, out = readable(summary), []
    for key in (*AORTA_KEYS, "proton_context"):
        if key == "proton_top_kernels" and key in summary:
            out.append((key, "; ".join(names.get(name, name) for name in summary[key])))
        elif key in summary:
            out.append((key, shown_value(summary[key])))
    for device in summary.get("proton_device") or []:
        out.append(("device", ", ".join(f"{k} {shown_value(v)}" for k, v in device.items())))
    base = (summary.get("proton_diff") or {}).get("base_provenance") or {}
    for side, record in (("", summary.get("proton_provenance") or {}), ("base ", base)):
        out += [(f"{side}provenance: {k}", str(v)) for k, v in record.items() if v is not None]
    for entry in summary.get("proton_unread") or []:
        out.append(("not read", f"{entry.get('file')}: {entry.get('why')}"))
    return out


def top(summary: dict) -> list[str]:
    """The headline verbatim; where --fail-above was given, the gate's outcome as the Markdown
    says it and each regression as stderr does; the facts as a table."""
    diff = summary.get("proton_diff") or {}
    gated = diff.get("fail_above") is not None
    said = [outcome(diff), *failures(diff)] if gated else []
    state = f' class="{"fail" if diff["regressions"] else "pass"}"' if gated else ""
    parts = [f'<h1 id="headline"{state}>{html.escape(summary.get("headline", ""))}</h1>']
    parts += [f'<p class="gate">{html.escape(line)}</p>' for line in said]
    cells = (
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts(summary)
    )
    return [*parts, f'<table id="facts">{"".join(cells)}</table>']


def kernel_words(k: dict, tuned: list) -> str:
    """A kernel bar's words: its launches (the tuner's apart), mean and GB/s where recorded."""
    launches = "?" if k.get("launches") is None else k["launches"] - tuned[1]
    words = [f"{launches} launch{'' if launches == 1 else 'es'}"]
    words[0] += f" + {tuned[1]} tuning" if tuned[1] else ""
    if k.get("mean_us") is not None:
        words.append(f"mean {k['mean_us']:.2f} us")
    if k.get("gbyte_per_s") is not None:
        words.append(f"{k['gbyte_per_s']:.0f} GB/s")
    return ", ".join(words)


def kernels(summary: dict) -> Figure | None:
    """Each kernel's share of GPU time (tuning launches apart) beside its percent of the
    device's nominal peak bandwidth, and of a measured ceiling where the run has one."""
    rows = summary.get("proton_kernels") or []
    shown, tuned = rows[:TOP], autotuned(summary)
    if not shown:
        return None
    total = sum(k["total_ms"] for k in rows) or 1.0
    tuned = [tuned.get(k["name"], (0.0, 0)) for k in shown]
    tuning = [ms / total for ms, _ in tuned]
    own = [k["total_ms"] / total - t for k, t in zip(shown, tuning, strict=True)]
    words = [text(kernel_words(k, t)) for k, t in zip(shown, tuned, strict=True)]
    tuner = {"name": "autotuning launches (Triton's tuner timing its configs)", "text": words}
    tuner.update(marker={"color": PALE}, textposition="outside", showlegend=any(tuning))
    hover = {"customdata": [text(k.get("readable_name", k["name"])) for k in shown]}
    hover["hovertemplate"] = "%{customdata}<br>%{x:.1%} of GPU time<extra></extra>"
    widest = max(a + b for a, b in zip(own, tuning, strict=True))
    right, axes = peak_panel(shown, {"tickformat": ".0%", "range": [0, widest * 1.9]})
    data = [
        bar(own, name="your launches", marker={"color": BLUE}, showlegend=any(tuning), **hover),
        bar(tuning, base=own, **tuner),  # from where the others end; its words at the total
        *right,
    ]
    layout = {"barmode": "overlay", "bargap": 0.3, "legend": {"orientation": "h"}}
    layout["showlegend"] = any(tuning) or len(right) > 1
    labels = rows_axis([cut(k.get("readable_name", k["name"])) for k in shown])
    fig = figure(data, height(len(shown)), yaxis=labels, **layout, **axes)
    caption = ["GB/s and % of peak where Proton's launch hook counted bytes (HOOK=triton)."]
    return Figure("kernels", "Kernels", caption + more(rows, len(shown), "kernels"), fig)


def peak_panel(shown: list, share: dict) -> tuple[list[dict], dict]:
    """Beside the kernels' share of GPU time (share: its x axis), a panel of their percent of
    the nominal peak, and of the measured ceiling where the run has one (L2-resident where the
    run found the kernel's bytes served from L2): its bars, and the layout of both x axes."""
    peak = [k.get("pct_of_peak_bw") for k in shown]
    if all(p is None for p in peak):
        return [], {"xaxis": share}
    words = [f"{p:.0%}" if p is not None else "" for p in peak]
    bars = [bar(peak, name="% of the nominal peak", text=words, marker={"color": ORANGE}, **RIGHT)]
    ceiling = [k.get("pct_of_ceiling_bw") for k in shown]
    if any(c is not None for c in ceiling):  # narrower, on the peak's bar
        l2 = [" L2-resident" if k.get("l2_resident") else "" for k in shown]
        words = ["" if c is None else f"{c:.0%}{s}" for c, s in zip(ceiling, l2, strict=True)]
        style = {"marker": {"color": GREEN}, "width": 0.35, "textposition": "outside"}
        bars.append(bar(ceiling, name="% of the measured ceiling", text=words, **style, **RIGHT))
    most = max(x for x in [*peak, *ceiling, 1.0] if x is not None)
    share_at, peak_at = PANELS.values()
    xaxis2 = {"tickformat": ".0%", "range": [0, most * 1.6], "domain": peak_at, "anchor": "y"}
    titles = [{"text": title, "x": sum(at) / 2, **TITLE} for title, at in PANELS.items()]
    return bars, {"xaxis": {**share, "domain": share_at}, "xaxis2": xaxis2, "annotations": titles}


def frames(callsite: str) -> list[str]:
    """A call site's frames, outermost first; a bracketed note (a CUDA graph's replay
    site, autotuning) stays on the innermost frame."""
    chain, bracket, note = callsite.partition(" [")
    out = chain.split(" > ")
    out[-1] += bracket + note
    return out


def warm(frame: str) -> str:
    """A frame's colour as flame graphs draw them: warm, the same for the same function."""
    hue = zlib.crc32(frame.partition(" ")[2].encode()) % 50  # its function, its line apart
    return f"hsl({hue}, 80%, {58 + hue % 3 * 6}%)"


def callsites(summary: dict) -> Figure | None:
    """The call sites as an icicle (a flame graph root up): each frame of the user's,
    then the kernels it launched, as wide as their GPU time; the source line on hover."""
    sites, names = summary.get("proton_callsites") or [], readable(summary)
    if not sites:
        return None
    # id (a node's path from the root; a kernel's holds a NUL, which no frame does) ->
    # label, parent, hover, ms, colour
    nodes = {"all": ["all call sites", "", "all call sites", 0.0, "#e8edf3"]}
    for site in sites[:MOST]:  # the largest first
        parent = "all"
        for frame in frames(site["callsite"]):  # a node's id: its path from the root
            node = f"{parent}\n{frame}"
            nodes.setdefault(node, [cut(frame), parent, text(frame), 0.0, warm(frame)])
            parent = node
        source = text(site.get("source") or "(no source line here)")
        for k in site["kernels"]:
            name = names.get(k["name"], k["name"])
            hover = f"{text(name)}<br>{k.get('launches')} launches<br>{source}"
            leaf = nodes.setdefault(f"{parent}\n\0{name}", [cut(name), parent, hover, 0.0, PALE])
            leaf[3] += k["ms"]
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
    caption += more(sites, MOST, "call sites")
    return Figure("callsites", "Call sites (icicle of the folded stacks)", caption, fig)


def site_label(entry: dict) -> str:
    """A timeline entry as a row's label: its rank, its two innermost frames."""
    rank = f"rank {entry['rank']}: " if "rank" in entry else ""
    sites = " > ".join(frames(entry["callsite"])[-2:]) if entry["callsite"] else "(no frame)"
    return cut(rank + sites)


def timeline(summary: dict) -> Figure | None:
    """Each call site's launches over its span as a strip of bins, a bin's colour the
    share of it in which the site's kernels ran: the idle gaps are the pale bins."""
    entries = [e for e in summary.get("proton_timeline") or [] if e.get("busy_by_bin")]
    shown = entries[:SITES]
    if not shown:
        return None
    bins = len(shown[0]["busy_by_bin"])
    labels = [f"{i}. {site_label(e)}, bins of {e['bin_us']:.3g} us" for i, e in enumerate(shown, 1)]
    strip = {
        "type": "heatmap",
        "z": [e["busy_by_bin"] for e in shown],
        "x": [100 * (i + 0.5) / bins for i in range(bins)],
        "zmin": 0,
        "zmax": 1,
        "colorscale": BLUES,
        "colorbar": {"title": {"text": "busy"}, "tickformat": ".0%"},
        "y": labels,
        "hovertemplate": "%{y}<br>at %{x:.1f}% of its span: busy %{z:.0%}<extra></extra>",
    }
    span = {"title": {"text": "% of the call site's span"}}
    fig = figure([strip], height(len(shown)), yaxis={"autorange": "reversed"}, xaxis=span)
    idle = [e.get("median_idle_us") for e in shown]
    caption = [
        f"{site_label(e)}: {e['launches']} launches over {e['span_ms']:.3f} ms, busy "
        f"{e['busy']:.0%}, median idle " + ("-" if gap is None else f"{gap:.1f} us")
        for e, gap in zip(shown[:5], idle, strict=False)
    ]
    caption += [f"<b>{text(said)}</b>" for e in entries if (said := launch_bound(e))]
    title = f"Timeline per call site ({bins} bins of each site's span)"
    return Figure("timeline", title, caption + more(entries, SITES, "call sites"), fig)


def ranks(summary: dict) -> Figure | None:
    """Each rank's GPU time, with the imbalance and the start skew where known."""
    rows = summary.get("proton_ranks") or []
    if not rows:
        return None
    every, rows = rows, rows[:MOST]
    x, y = [f"rank {r['rank']}" for r in rows], [r["gpu_time_ms"] for r in rows]
    words = [f"{r.get('kernel_count')} launches" for r in rows]
    bars = {"type": "bar", "x": x, "y": y, "text": words}
    fig = figure([bars], 320, yaxis={"title": {"text": "GPU ms"}})
    return Figure("ranks", "Ranks", rank_notes(summary) + more(every, MOST, "ranks"), fig)


def scopes(summary: dict) -> Figure | None:
    """Each kernel's scopes by their share of its cycles (the instrumentation backend)."""
    rows = summary.get("proton_scopes") or []
    if not (shown := rows[:TOP]):
        return None
    shares = bar([s["share"] for s in shown], text=[f"{s['cycles']:.3g} cycles" for s in shown])
    labels = rows_axis([cut(f"{s['kernel']}: {s['scope']}") for s in shown])
    fig = figure([shares], height(len(shown)), yaxis=labels, xaxis={"tickformat": ".0%"})
    caption = [
        text(
            f"{s['kernel']}: {s['launches']} launches over {s['sms']} SMs, CTAs per SM per "
            f"launch {s['ctas_per_sm'][0]:g} to {s['ctas_per_sm'][2]:g}"
        )
        for s in summary.get("proton_sm_spread") or []
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


def judged(at: int, row: dict) -> dict:
    """A row's ratio, now over the base, with its interval (its ratio alone where it has
    none: one run a side), coloured by its verdict."""
    r = row["ratio"]
    low, high = (r, r) if row.get("low") is None else (row["low"], row["high"])
    marker = {**DIAMOND, "color": VERDICT_COLOURS.get(row["verdict"], "#9467bd")}
    hover = f"{row['verdict']}: %{{x:.3f}} ({low:.3f} to {high:.3f})<extra></extra>"
    return markers([r], at, marker, hover, error_x={"array": [high - r], "arrayminus": [r - low]})


def compared(summary: dict) -> Figure | None:
    """Each compared row: its trials as points over the base's mean, its ratio with the
    interval it was judged by, coloured by the verdict."""
    diff = summary.get("proton_diff")
    if not diff:
        return None
    rows = [diff["total"], *diff["kernels"][:TOP], *diff["callsites"][:TOP]]  # GPU time first
    data, labels = [], []
    for at, row in enumerate(rows):
        what = row.get("readable_name") or " > ".join(frames(row.get("callsite", ""))[-2:])
        labels.append(f"{cut(what)}: <b>{row['verdict']}</b>")
        data += points(at, row.get("base_times_ms"), row.get("base_ms"), base=True)
        data += points(at, row.get("times_ms"), row.get("base_ms"), base=False)
        data += [judged(at, row)] if row.get("ratio") is not None else []
    xaxis = {"title": {"text": "time over the base's mean"}}
    fig = figure(data, height(len(rows)), yaxis=rows_axis(labels), xaxis=xaxis, shapes=[RATIO_1])
    caption = [
        "Diamonds: now over the base, with the interval it was judged by; points: each "
        "trial's time, open the base's, filled now's (where the summary records them)."
    ]
    return Figure("compare", f"Compared with {text(diff.get('base'))}", caption, fig)


def trials(summary: dict) -> Figure | None:
    """A run of trials: each kernel's time in each trial over its mean (without the times
    in the summary, its min, mean and max)."""
    runs = summary.get("proton_trials") or {}
    rows, names = runs.get("kernels", [])[:TOP], readable(summary)
    if not rows:
        return None
    data = []
    for at, k in enumerate(rows):
        times = k.get("times_ms") or [k["min_ms"], k["mean_ms"], k["max_ms"]]
        data += points(at, times, k["mean_ms"], base=False)
    labels = [f"{cut(names.get(k['name'], k['name']))}, cv {k['cv'] or 0:.1%}" for k in rows]
    xaxis = {"title": {"text": "time over the kernel's mean"}}
    fig = figure(data, height(len(rows)), yaxis=rows_axis(labels), xaxis=xaxis, shapes=[RATIO_1])
    return Figure("trials", f"Trials: each kernel's time in each of {runs['n']}", [], fig)


VIEWS = (kernels, callsites, compared, trials, timeline, ranks, scopes)


def page(summary: dict) -> str:
    """The page of summary, one HTML document with plotly's JavaScript inline, once."""
    parts = top(summary)
    drawn = filter(None, (view(summary) for view in VIEWS))  # a view without its key: None
    for i, (key, heading, caption, fig) in enumerate(drawn):
        parts += [f"<h2>{heading}</h2>", *(f'<p class="caption">{line}</p>' for line in caption)]
        options = {"include_plotlyjs": i == 0, "full_html": False, "div_id": key}
        parts.append(pio.to_html(fig, CONFIG, validate=False, **options))
    title = html.escape(f"Proton summary: {summary.get('proton_artifact_dir', '')}")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )

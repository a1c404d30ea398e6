"""The summary's views beyond aorta's keys, kernels and call sites: each kernel's rates and
spread, timelines and their launch-bound diagnosis, ranks, scopes, a run of trials' spread
(docs/summary.md's "The other keys and their views" says what each holds)."""

from collections import Counter
from statistics import fmean, median, quantiles, stdev

from summary.records import Spread, Summary, Trials
from summary.run import Launches, Run, number, peak

LAUNCH_GAP_US = 100  # gaps up to this long between a loop's launches: the host's launch cost
PLAIN_FLOPS_WIDTH = 32  # `flops` without a width are weighed against the 32-bit peak
BINS = 200  # a timeline's bins: a page draws each call site's launches in these


def p90(values: list) -> float:
    """The 90th percentile, linear between closest ranks (Hyndman and Fan's 7, numpy's)."""
    return quantiles(values, n=10, method="inclusive")[-1] if values[1:] else values[0]


def measure(run: Run, sites: dict) -> dict:
    """Timelines, ranks and scopes of run (sites: chain -> its CallSite)."""
    out = {}
    if run.traced and run.capture.kernels:
        out["proton_timeline"] = build_timelines(run.traced, sites)
    if ranked := [entry for entry in run.per_file if entry[0] is not None]:
        if run.capture.kernels:  # scopes alone have no time to compare ranks by
            out.update(sum_ranks(ranked, run.traced))
    if run.capture.scopes:
        out["proton_scopes"] = sum_tree_scopes(run.capture.scopes)
    if run.scoped:
        out["proton_scopes"], out["proton_sm_spread"] = sum_trace_scopes(run.scoped)
    if run.capture.cpu:
        rows = [{"scope": n, "cpu_ms": c, "gpu_ms": g} for n, (c, g) in run.capture.cpu.items()]
        out["proton_cpu_scopes"] = sorted(rows, key=lambda row: row["cpu_ms"], reverse=True)
    return out


def spread_trials(summaries: list[Summary]) -> Trials:
    """proton_trials: n, and each kernel's time per trial across trials, the largest first."""
    times, names = {}, {}
    for i, summary in enumerate(summaries):
        for k in summary.proton_kernels:
            times.setdefault(k.name, [0.0] * len(summaries))[i] += k.total_ms
            names.setdefault(k.name, k.readable_name)
    rows = []
    for name, t in times.items():
        mean = fmean(t)
        cv = stdev(t) / mean if len(t) > 1 and mean else None  # none for one trial
        spread = {"mean_ms": mean, "min_ms": min(t), "max_ms": max(t), "cv": cv, "times_ms": t}
        rows.append(Spread(name=name, readable_name=names[name], **spread))
    return Trials(n=len(summaries), kernels=sorted(rows, key=lambda r: r.mean_ms, reverse=True))


def measure_rates(k: Launches, devices: dict, ceilings: list) -> dict:
    """A kernel's rates (bytes and flops from Proton's launch hook) against the nominal peak
    and measured ceiling of the device (or the one model) its launches ran on, and from
    traces the spread of its launches."""
    seconds, row = k.ms / 1e3, {}
    found = [devices.get(d) for d in k.device_ids]
    model = [{**d, "id": None} if d else None for d in found]
    device = found[0] if found and all(m == model[0] for m in model) else None
    if k.bytes:
        rate = row["gbyte_per_s"] = k.bytes / seconds / 1e9 if seconds else None
        nominal = row["peak_gbyte_per_s"] = device and device["peak_gbyte_per_s"]
        row["pct_of_peak_bw"] = rate / nominal if rate and nominal else None
        if rate:
            row.update(compare_to_ceiling(rate, k.bytes / (k.launches or 1), device, ceilings))
    if k.flops and seconds:  # as Proton defines them: flops<width>/s, one figure a width
        row.update({f"flop{key[5:]}_per_s": value / seconds for key, value in k.flops.items()})
        peaks = {key: peak_flops(device, key) for key in k.flops}
        if all(peaks.values()):  # as proton-viewer's util: each width's share of the time
            row["pct_of_peak_flops"] = sum(k.flops[key] / peaks[key] for key in peaks) / seconds
    if k.durations:
        row.update(min_us=min(k.durations), median_us=median(k.durations))
        row.update(p90_us=p90(k.durations), max_us=max(k.durations))
    return row


def compare_to_ceiling(
    rate: float, launch_bytes: float, device: dict | None, ceilings: list
) -> dict:
    """rate as a share of the copy measured on the device's model at the nearest size at or
    above a launch's bytes, and whether those bytes fit its L2."""
    keys = ("arch", "sm_count", "memory_bus_bits")  # the H100 and H200 differ in the last
    model = device and tuple(device[key] for key in keys)
    ceiling = next((c for c in ceilings if tuple(c.get(key) for key in keys) == model), None)
    sizes = sorted(ceiling["sizes"], key=lambda s: s["bytes"]) if ceiling else []
    if not sizes:
        return {}
    # A copy of a buffer moves it twice (read, written), as a launch's bytes count both.
    size = next((s for s in sizes if 2 * s["bytes"] >= launch_bytes), sizes[-1])
    l2 = launch_bytes <= (ceiling.get("l2_bytes") or 0)
    return {"pct_of_ceiling_bw": rate / size["copy_gbps"], "l2_resident": l2}


def peak_flops(device: dict | None, key: str) -> float | None:  # flops16: at 16 bits
    if not (device and device["clock_mhz"]):
        return None
    width, khz = int(key[5:] or PLAIN_FLOPS_WIDTH), device["clock_mhz"] * 1e3
    return peak("max_flops", device["type"], device["arch"], width, device["sm_count"], khz)


def build_timelines(traced: list, sites: dict) -> list:
    """A timeline of each process (one's phases are one), and in it each call site's."""
    by_process = {}
    for path, rank, launches, _ in traced:
        name = path.name.split(".part_")[0].split(".chrome_trace")[0]
        by_process.setdefault((path.parent, name), [rank, []])[1].extend(launches)
    out = []
    for rank, launches in by_process.values():
        ranked = {} if rank is None else {"rank": rank}
        out += [{**ranked, **entry} for entry in build_timeline(launches, sites)]
    for entry in out:
        entry["launch_bound"] = launch_bound(entry)
    return sorted(out, key=lambda entry: entry["kernel_ms"], reverse=True)  # across ranks


def build_timeline(launches: list, sites: dict) -> list:
    """Each call site's launches as a timeline entry (busy: streams counted once): one sort
    and one pass, O(n log n) in launches."""
    launches.sort()  # (start, end, chain, name), by start
    # Busy time before each launch's start and end: a sweep merging overlapping launches.
    marks, done, start, end = [], 0.0, None, None
    for s, e, _, _ in launches:
        if end is None or s > end:
            done, start, end = done + (end - start if end is not None else 0.0), s, e
        end = max(end, e)
        marks.append((done + s - start, done + e - start))
    by_site = {}
    for i, (_, _, chain, _) in enumerate(launches):
        by_site.setdefault(chain, []).append(i)
    entries = []
    for chain, at in by_site.items():
        last = max(at, key=lambda i: launches[i][1])
        span = launches[last][1] - launches[at[0]][0]
        idle = [  # between one launch's end and the next's start, when no kernel ran
            max(0.0, launches[b][0] - launches[a][1] - (marks[b][0] - marks[a][1]))
            for a, b in zip(at, at[1:], strict=False)
        ]
        counts = Counter(launches[i][3] for i in at)
        site = sites.get(chain)
        entries.append(
            {
                "callsite": site.callsite if site else "",
                "source": site and site.source,
                "launches": len(at),
                "kernel_ms": sum(launches[i][1] - launches[i][0] for i in at) / 1e3,
                "start_ms": (launches[at[0]][0] - launches[0][0]) / 1e3,  # from the first launch
                "end_ms": (launches[last][1] - launches[0][0]) / 1e3,
                "span_ms": span / 1e3,
                "busy": (marks[last][1] - marks[at[0]][0]) / span if span > 0 else 1.0,
                "median_idle_us": median(idle) if idle else None,
                "fewest_launches_of_a_kernel": min(counts.values()),
                "bin_us": span / BINS or 1.0,
                "busy_by_bin": bin_busy([launches[i][:2] for i in at], span / BINS or 1.0),
            }
        )
    return sorted(entries, key=lambda e: e["kernel_ms"], reverse=True)


def bin_busy(spans: list, width: float) -> list:
    """The share of each of BINS bins of width us, from the first span's start, in which
    the spans (start, end) ran (overlapping streams add up)."""
    busy, first = [0.0] * BINS, spans[0][0]
    for start, end in spans:
        at = min(int((start - first) / width), BINS - 1)
        while start < end:
            edge = end if at == BINS - 1 else min(end, first + (at + 1) * width)
            busy[at] += edge - start
            start, at = edge, at + 1
    return [round(b / width, 3) for b in busy]


def launch_bound(e: dict) -> str | None:
    """The diagnosis of a timeline entry that looks like a loop held back by the host, in a
    sentence; None for any other."""
    idle, each = e["median_idle_us"], e["kernel_ms"] * 1e3 / e["launches"]
    loop = e["fewest_launches_of_a_kernel"] >= 3 and e["busy"] < 0.5
    # Gaps shorter than a kernel: the host keeps ahead, and the idle time lies elsewhere.
    if not (loop and idle is not None and each <= idle <= LAUNCH_GAP_US):
        return None
    rank = f"rank {e['rank']}: " if "rank" in e else ""
    return (
        f"{rank}{e['callsite'] or 'kernels with no frame of yours'}: the GPU was idle "
        f"{1 - e['busy']:.0%} of the span of its {e['launches']} launches, a median "
        f"{idle:.1f} us between launches against {each:.1f} us of kernel each: the host's "
        "launch cost bounds it, not the kernel."
    )


def sum_ranks(per_file: list, traced: list) -> dict:
    """proton_ranks, proton_rank_imbalance and, from traces, proton_rank_start_skew."""
    by_rank = {}
    for rank, path, ms, launches in per_file:
        r = by_rank.setdefault(rank, {"rank": rank, "gpu_time_ms": 0.0, "kernel_count": 0})
        r["gpu_time_ms"] += ms
        counts = (r["kernel_count"], launches)
        r["kernel_count"] = None if None in counts else sum(counts)
        r.setdefault("files", []).append(str(path))
    times = [r["gpu_time_ms"] for r in by_rank.values()]
    mean = sum(times) / len(times)
    out = {"proton_ranks": [by_rank[r] for r in sorted(by_rank)]}
    out["proton_rank_imbalance"] = max(times) / mean if mean else None
    traced = [(rank, launches, base) for _, rank, launches, base in traced if launches]
    if not traced:
        return out
    if any(type(base) is not int for *_, base in traced):
        return {**out, "proton_rank_start_skew": None}
    spans = {}  # rank -> [first, last] ns
    for rank, launches, base in traced:
        first = base + round(min(s for s, *_ in launches) * 1e3)
        last = base + round(max(e for _, e, *_ in launches) * 1e3)
        span = spans.setdefault(rank, [first, last])
        span[:] = [min(span[0], first), max(span[1], last)]
    for rank, (first, last) in spans.items():
        by_rank[rank].update(first_kernel_start_ns=first, last_kernel_end_ns=last)
    latest = max(spans, key=lambda r: spans[r][0])
    skew = (spans[latest][0] - min(s for s, _ in spans.values())) / 1e6
    return {**out, "proton_rank_start_skew": {"rank": latest, "ms": skew}}


def sum_tree_scopes(scopes: dict) -> list:
    """proton_scopes of an instrumentation tree, the largest first."""
    per_kernel = {}
    for (kernel, _), (cycles, _) in scopes.items():
        per_kernel[kernel] = per_kernel.get(kernel, 0.0) + cycles
    rows = [
        {
            "kernel": kernel,
            "scope": scope,
            "cycles": cycles,
            "normalized_cycles": normalized,
            "share": cycles / per_kernel[kernel] if per_kernel[kernel] else 0.0,
        }
        for (kernel, scope), (cycles, normalized) in scopes.items()
    ]
    return sorted(rows, key=lambda row: row["cycles"], reverse=True)


def sum_trace_scopes(events: list) -> tuple[list, list]:
    """proton_scopes and proton_sm_spread of an instrumentation trace (pid "<kernel> Core<SM>
    CTA<n>", tid the warp, cycles = dur x MHz)."""
    by_scope, by_sm, repeats = {}, {}, Counter()
    for e in events:
        cycles = (number(e.get("dur")) or 0.0) * (number(e["args"]["Frequency (MHz)"]) or 0.0)
        words = str(e.get("pid")).split()
        sm = next((w[4:] for w in words if w.startswith("Core")), "?")
        cta = next((w[3:] for w in words if w.startswith("CTA")), "?")
        kernel, scope, warp = str(e.get("cat")), str(e.get("name")), str(e.get("tid"))
        by_scope.setdefault((kernel, scope), []).append(cycles)
        on_sm = by_sm.setdefault(kernel, {}).setdefault(sm, [Counter(), 0.0])
        on_sm[0][warp, scope] += 1
        on_sm[1] += cycles
        repeats[kernel, cta, warp, scope] += 1
    per_kernel, launches = Counter(), Counter()
    for (kernel, _), cycles in by_scope.items():
        per_kernel[kernel] += sum(cycles)
    for (kernel, *_), n in repeats.items():  # each launch records a (CTA, warp, scope) once
        launches[kernel] = max(launches[kernel], n)
    rows = [
        {
            "kernel": kernel,
            "scope": scope,
            "events": len(cycles),
            "cycles": sum(cycles),
            "median_cycles": median(cycles),
            "p90_cycles": p90(cycles),
            "share": sum(cycles) / per_kernel[kernel] if per_kernel[kernel] else 0.0,
        }
        for (kernel, scope), cycles in by_scope.items()
    ]
    spread = [spread_over_sms(kernel, sms, launches[kernel]) for kernel, sms in by_sm.items()]
    return sorted(rows, key=lambda row: row["cycles"], reverse=True), spread


def spread_over_sms(kernel: str, sms: dict, launches: int) -> dict:
    """How a kernel's CTAs spread over its SMs (sms: SM -> [events by (warp, scope),
    cycles]): the (warp, scope) most common over all SMs is in every CTA."""
    counted = Counter()
    for pairs, _ in sms.values():
        counted.update(pairs)
    pair = max(counted, key=counted.get)
    ctas = [pairs[pair] / launches for pairs, _ in sms.values()]
    cycles = [t for _, t in sms.values()]
    middle = median(cycles)
    return {
        "kernel": kernel,
        "launches": launches,
        "sms": len(sms),
        "ctas_per_sm": [min(ctas), median(ctas), max(ctas)],
        "slowest_sm_vs_median": max(cycles) / middle if middle else None,
    }

"""Did it get better: a run of trials' spread, and a run against an earlier one, each
kernel and call site with a verdict and the noise it was judged against (a gate for CI).

Each side is a list of summaries (parse_hatchet.py): one, or one for each trial. A kernel's
time on a side is the mean over its trials of its total ms in each; its noise there, the
coefficient of variation (sample standard deviation over mean) across trials. The rules
of the verdict are docs/summary.md's "Compare".
"""

import itertools
import re
import statistics

SAME_WITHOUT_NOISE = 0.02  # unknown noise: changes within 2% are the same
SHAPE = re.compile(r"(.*?)( \[[^\[\]]*\])?")  # launch_metadata's " [shape dtype]" suffix
LINE = re.compile(r":(\d+)(?= )")  # a frame's line in a call site, "file:line function"


def per_trial(summaries: list, rows: str, key: callable) -> dict:
    """key(row) -> (row, [ms in each trial, 0 where it did not run])."""
    out = {}
    for i, summary in enumerate(summaries):
        for row in summary.get(rows, []):
            entry = out.setdefault(key(row), (row, [0.0] * len(summaries)))
            entry[1][i] += row["total_ms" if rows == "proton_kernels" else "ms"]
    return out


def spread(times: list) -> dict:
    """mean, min and max ms across trials, and the coefficient of variation (None for one
    trial, or a mean of 0)."""
    mean = statistics.fmean(times)
    cv = statistics.stdev(times) / mean if len(times) > 1 and mean else None
    return {"mean_ms": mean, "min_ms": min(times), "max_ms": max(times), "cv": cv}


def trials(summaries: list) -> dict:
    """proton_trials: n, and each kernel's time per trial across trials, the largest first."""
    kernels = per_trial(summaries, "proton_kernels", lambda row: row["name"])
    rows = [
        {"name": name, **spread(times), "times_ms": times} for name, (_, times) in kernels.items()
    ]
    return {"n": len(summaries), "kernels": sorted(rows, key=lambda r: r["mean_ms"], reverse=True)}


def verdict(base: list | None, now: list | None, fail_above: float | None, min_ms: float) -> dict:
    """One row's judgement from its ms per trial on each side (None: absent there).
    Noise: sqrt(cv_base**2 + cv_now**2), the spread of a ratio of two noisy times,
    unknown (None) unless both sides have trials. same: the change within the noise, or
    within SAME_WITHOUT_NOISE of it where the noise is unknown. A regression (with
    fail_above): slower by more than fail_above percent beyond the noise, the larger side
    at least min_ms."""
    base_ms, ms = (statistics.fmean(t) if t else 0.0 for t in (base, now))
    cvs = [spread(t)["cv"] for t in (base, now) if t]
    noise = (cvs[0] ** 2 + cvs[1] ** 2) ** 0.5 if len(cvs) == 2 and None not in cvs else None
    row = {"base_ms": base_ms, "ms": ms, "ratio": ms / base_ms if base_ms else None, "noise": noise}
    if not base_ms or not ms:
        return {**row, "verdict": "gone" if base_ms else "new", "regression": False}
    change = ms / base_ms - 1
    band = SAME_WITHOUT_NOISE if noise is None else noise
    judged = "same" if abs(change) <= band else "slower" if change > 0 else "faster"
    past = fail_above is not None and (change - (noise or 0.0)) * 100 > fail_above
    return {**row, "verdict": judged, "regression": past and max(base_ms, ms) >= min_ms}


def diff(base: list, now: list, base_name: str, fail_above: float | None, min_ms: float) -> dict:
    """proton_diff: each kernel and call site, base against now, with its verdict, the
    largest change first; and the regressions past fail_above."""
    rows = []
    for rows_of, key, order in (
        ("proton_kernels", kernel_key, kernel_order),
        ("proton_callsites", site_key, site_order),
    ):
        for before, after in matched(base, now, rows_of, key, order):
            row = {"kernel": rows_of == "proton_kernels"}
            if row["kernel"]:
                row["name"] = shown_name(*(side and side[0]["name"] for side in (before, after)))
                shown = (side and side[0]["readable_name"] for side in (before, after))
                row["readable_name"] = shown_name(*shown)
            else:
                row["callsite"] = moved((before or after)[0], (after or before)[0])
            times = (before and before[1], after and after[1])
            row.update(base_times_ms=times[0] or None, times_ms=times[1] or None)  # per trial
            rows.append({**row, **verdict(*times, fail_above, min_ms)})
    rows.sort(key=lambda row: abs(row["ms"] - row["base_ms"]), reverse=True)
    totals = [
        statistics.fmean(s.get("proton_gpu_time_ms", 0.0) for s in side) for side in (base, now)
    ]
    out = {"base": base_name, "gpu_time_ms": totals, "min_ms": min_ms, "fail_above": fail_above}
    out["kernels"] = [row for row in rows if row.pop("kernel")]
    out["callsites"] = [row for row in rows if "callsite" in row]
    out["regressions"] = [row.get("name") or row["callsite"] for row in rows if row["regression"]]
    return out


def unfit(base: list) -> str | None:
    """Why base's summaries cannot be compared with: a capture not read (a comparison with
    part of a run would mislead), or no timed kernel; else None."""
    unread = [u for s in base for u in s.get("proton_unread", []) if "same_as" not in u]
    if unread:
        return f"not every capture was read ({unread[0]['file']}: {unread[0]['why']})"
    return (
        None if "proton_gpu_time_ms" in base[0] else "no timed kernel to compare with (scopes only)"
    )


def kernel_key(row: dict) -> str:
    return SHAPE.fullmatch(row["name"])[1]  # a kernel whose shape changed is still itself


def kernel_order(row: dict) -> str:
    return row["name"]  # of one kernel's shapes, the same shape first, then in order


def site_key(row: dict) -> str:
    return LINE.sub(":", row["callsite"])  # its files and functions, lines apart


def site_order(row: dict) -> tuple:
    return tuple(map(int, LINE.findall(row["callsite"])))  # the same lines first, then in order


def matched(base: list, now: list, rows: str, key: callable, order: callable) -> list:
    """Pairs of (row, ms per trial) of base and now, matched by key: within one key, those
    of one order first, then the rest in order; None on the side a row is missing from."""
    groups = {}
    for i, side in enumerate((base, now)):
        for row, times in per_trial(side, rows, lambda r: (key(r), order(r))).values():
            groups.setdefault(key(row), ({}, {}))[i][order(row)] = (row, times)
    pairs = []
    for before, after in groups.values():
        pairs += [(before.pop(k), after.pop(k)) for k in list(before) if k in after]
        pairs += itertools.zip_longest(
            *[[side[k] for k in sorted(side)] for side in (before, after)]
        )
    return pairs


def shown_name(before: str | None, after: str | None) -> str:
    """A kernel's name; where its shape changed, both: `k [4096x1024 -> 4096x2048]`."""
    if before is None or after is None or before == after:
        return after or before
    old, new = SHAPE.fullmatch(before)[2] or "", SHAPE.fullmatch(after)[2] or ""
    return f"{SHAPE.fullmatch(after)[1]} [{old.strip(' []')} -> {new.strip(' []')}]"


def moved(old: dict, new: dict) -> str:
    """A call site as now shown, each line an edit moved shown as old->new."""
    was = iter(LINE.findall(old["callsite"]))
    return LINE.sub(
        lambda m: f":{a}->{m[1]}" if (a := next(was)) != m[1] else m[0], new["callsite"]
    )


def table(summary: dict, top: int) -> list:
    """The verdict of each kernel that changed, then base and now of each kernel and call
    site; and a run of trials' spread across them."""
    lines = []
    if d := summary.get("proton_diff"):
        judged = [r for r in d["kernels"] if max(r["ms"], r["base_ms"]) >= d["min_ms"]]
        changed = [said(r) for r in judged if r["verdict"] != "same"][:top]
        lines += changed or [f"no kernel changed beyond the noise ({len(judged)} compared)"]
        was, now = d["gpu_time_ms"]
        lines.append(f"against {d['base']}: GPU time {was:.4f} -> {now:.4f} ms")
        lines.append(
            f"{'base ms':>10} {'ms':>10} {'ratio':>6} {'noise':>6} {'verdict':>7}  "
            "kernel, then call site"
        )
        for row in [*d["kernels"][:top], *d["callsites"][:top]]:
            ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
            noise = "?" if row["noise"] is None else f"{row['noise']:.1%}"
            what = row.get("readable_name") or row["callsite"]
            lines.append(
                f"{row['base_ms']:10.4f} {row['ms']:10.4f} {ratio:>6} {noise:>6} "
                f"{row['verdict']:>7}  {what}"
            )
    if t := summary.get("proton_trials"):
        shown = {k["name"]: k["readable_name"] for k in summary.get("proton_kernels", [])}
        lines.append(f"{t['n']} trials: each kernel's ms in each, across them")
        lines.append(f"{'mean':>10} {'min':>10} {'max':>10} {'cv':>6}  kernel")
        for k in t["kernels"][:top]:
            cv = "" if k["cv"] is None else f"{k['cv']:.1%}"
            name = shown.get(k["name"], k["name"])
            lines.append(
                f"{k['mean_ms']:10.4f} {k['min_ms']:10.4f} {k['max_ms']:10.4f} {cv:>6}  {name}"
            )
    return lines


def said(row: dict) -> str:
    """A verdict as a sentence: `k: 1.14x faster (0.121 -> 0.106 ms, noise +-2.0%)`."""
    name, times = row["readable_name"], f"{row['base_ms']:.3f} -> {row['ms']:.3f} ms"
    if row["verdict"] in ("new", "gone"):
        return f"{name}: {row['verdict']} ({times})"
    factor = row["base_ms"] / row["ms"] if row["verdict"] == "faster" else row["ratio"]
    noise = "noise unknown" if row["noise"] is None else f"noise +-{row['noise']:.1%}"
    return f"{name}: {factor:.2f}x {row['verdict']} ({times}, {noise})"

"""Draw the per-warp timeline of an instrumentation trace (make intra-trace): each row a
warp of one CTA on one SM, each bar a scope, for the first launch and the first SMs.

    python bench/timeline.py TRACE [-o PNG] [--sms N]    (TRACE may be gzipped)

The README's picture is this script's drawing of tests/fixtures/h200-intra.chrome_trace.gz.
"""

import argparse
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from summary.files import load, write_output  # noqa: E402

COLOURS = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7"]


def first_launch(events):
    """The scope events of the first launch: launches run apart, each one's events
    together, so the first gap longer than the events themselves ends it."""
    events = sorted(events, key=lambda e: e["ts"])
    longest = max(e["dur"] for e in events)
    end = events[0]["ts"]
    for i, e in enumerate(events):
        if e["ts"] > end + 10 * longest:
            return events[:i]
        end = max(end, e["ts"] + e["dur"])
    return events


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "bench" / "intra-timeline.png")
    parser.add_argument("--sms", type=int, default=2, help="SMs to draw (default 2)")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scoped = [e for e in load(args.trace)["traceEvents"] if "Frequency (MHz)" in e.get("args", {})]
    launch = first_launch(scoped)
    start = min(e["ts"] for e in launch)
    sms = sorted({e["pid"].split()[1] for e in launch}, key=lambda sm: int(sm[4:]))[: args.sms]
    rows = sorted(
        {(e["pid"], e["tid"]) for e in launch if e["pid"].split()[1] in sms},
        key=lambda row: (int(row[0].split()[1][4:]), int(row[0].split()[2][3:]), row[1]),
    )
    scopes = list(dict.fromkeys(e["name"] for e in launch))
    colour = dict(zip(scopes, COLOURS, strict=False))
    fig, ax = plt.subplots(figsize=(10, 0.12 * len(rows) + 1.2))
    at = {row: i for i, row in enumerate(rows)}
    for e in launch:
        row = at.get((e["pid"], e["tid"]))
        if row is not None:
            ax.barh(row, e["dur"], left=e["ts"] - start, height=0.8, color=colour[e["name"]])
    ax.set_yticks([])
    ax.set_ylabel(f"warps of the CTAs on {', '.join(sms)} (one row each)")
    ax.set_xlabel("us from the launch's first scope (cycles / MHz)")
    ax.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[s]) for s in scopes]
    ax.legend(handles, scopes, loc="upper right", ncol=len(scopes), fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    write_output(args.output, png.getvalue())
    print(f"timeline: wrote {args.output}")


if __name__ == "__main__":
    main()

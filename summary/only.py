"""--only REGEX: a comparison limited to the kernels whose name the expression finds, and to
the call sites by those kernels alone (docs/summary.md's "Compare")."""

import re

import msgspec

from summary import Refused
from summary.records import Comparison, Summary
from summary.run import compile_only


def keep(summary: Summary, found: re.Pattern) -> Summary:
    """summary's kernels that found finds in a name (as run or demangled), and its call sites
    with only those kernels, their time theirs alone; a copy."""

    def named(k: object) -> bool:
        return bool(found.search(k.name) or found.search(k.readable_name or ""))

    sites = []
    for site in summary.proton_callsites:
        if kernels := [k for k in site.kernels if named(k)]:
            ms = sum(k.ms for k in kernels)
            sites.append(msgspec.structs.replace(site, kernels=kernels, ms=ms))
    kernels = [k for k in summary.proton_kernels if named(k)]
    return msgspec.structs.replace(summary, proton_kernels=kernels, proton_callsites=sites)


def select(sides: list, text: str | None) -> list:
    """Each side's summaries limited to --only's kernels (text None: all of them); Refused
    where neither side has one."""
    if (found := compile_only(text)) is None:
        return sides
    out = [[keep(summary, found) for summary in side] for side in sides]
    if not any(summary.proton_kernels for side in out for summary in side):
        raise Refused(f"--only {text[:60]!r} finds no kernel of either run")
    return out


def note(d: Comparison, text: str | None) -> Comparison:
    """d with --only's caveat, last, on its first line and each regression's line."""
    if text is not None:
        d.caveats.append(caveat := f"only kernels matching {text} judged")
        d.first_line += f"; {caveat}"
        d.gate = [d.gate[0], *(f"{line}; {caveat}" for line in d.gate[1:])]
    return d

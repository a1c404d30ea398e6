#!/usr/bin/env bash
# Run a command under Proton as an aorta recipe's collect.proton says, in a run folder of
# its own, and summarise its captures there: summary.json and its page, report.html.
#
#   ./profile.sh [--recipe FILE] [--results DIR | --output DIR] [--data tree|trace]
#                [--backend NAME] [--context shadow|python] [--hook triton] [--trials N]
#                [--world-size N] [--rev REV | --base-script FILE] [GATE] [--dry-run]
#                -- COMMAND ...
#   ./profile.sh [--results DIR] --compare NOW BASE [GATE] [--world-size N] [--dry-run]
#                [-- PYTHON]
#
# COMMAND: a .py script after its interpreter or a launcher (python mine.py ARGS, torchrun
# ... mine.py ARGS). A run makes RESULTS/KIND/<UTC time>-<pid> (RESULTS: profiling_results;
# KIND: profile, trace, intra, intra-trace or ab), or --output DIR, a new folder. --rev REV
# (a revision, or a copy of the tree) or --base-script FILE: the script now against its
# base; --compare: two runs (PYTHON compares). --world-size N: the launcher's ranks, 0 to
# N-1, each expected to write a capture. GATE: --fail-above PCT, --min-ms MS,
# --any-device, as parse_hatchet.py takes them. docs/profiling.md tells more.
# Exit status: 0 summarised (compared: no regression); the command's own when it fails;
# 1 no capture; parse_hatchet.py's own when it fails (1: a capture or rank not read) or
# finds a regression past --fail-above; 2 usage, a refused recipe, no GPU visible, an
# --output that exists, a latest or previous not a link, a REV not there or lacking the
# script; 129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM.
set -euo pipefail

# The workload's own interpreter (a `python3` on PATH may be another) runs the driver,
# profile_run.py: the command's first word named python*, before its script.
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
py=python3 after=0
for word in "$@"; do
  if ((after)); then
    [[ $word != *.py ]] || break
    [[ ${word##*/} != python* ]] || { py=$word; break; }
  fi
  [[ $word != -- ]] || after=1
done
command -v -- "$py" >/dev/null || {
  line="profile.sh: error: no interpreter ${py:0:200}"
  echo "${line//[[:cntrl:]]/?}" >&2
  exit 2
}
exec "$py" "$here/profile_run.py" "$py" "$@"

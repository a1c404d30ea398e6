#!/usr/bin/env bash
# Run a command under Proton as an aorta recipe's collect.proton says, in a run folder of
# its own, and summarise its captures there (summary.json, report.html); or compare runs.
#
#   ./profile.sh [--recipe FILE] [--results DIR | --output DIR] [--data tree|trace]
#                [--backend NAME] [--context shadow|python] [--hook triton] [--trials N]
#                [--world-size N] [--rev REV | --base-script FILE] [--max-trials N] [GATE]
#                [--dry-run] -- COMMAND ...
#   ./profile.sh [--results DIR] --compare NOW BASE [GATE] [--world-size N] [--dry-run]
#                [-- PYTHON]
#
# COMMAND: a .py script after its interpreter or a launcher; GATE: --fail-above PCT,
# --min-ms MS, --only REGEX, --any-device; an A/B (--rev, --base-script) runs each side once first, then
# TRIALS rounds, doubled while the gate is unsettled, up to --max-trials (20). docs/profiling.md
# tells each option and folder.
# Exit status: 0 summarised (compared: no regression); the command's own; 1 no capture;
# parse_hatchet.py's own where it fails or finds a regression past --fail-above (its
# statuses: docs/summary.md); 2 usage, or an A/B side that imported the other side's code;
# 129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM.
set -euo pipefail

if [[ ${1-} == -h || ${1-} == --help ]]; then  # the lines above
  sed -n '2,/^set /s/^# \{0,1\}//p' "$0"
  exit 0
fi
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
  printf 'profile.sh: error: no interpreter %q\n' "${py:0:200}" >&2
  exit 2
}
exec "$py" "$here/profile_run.py" "$py" "$@"

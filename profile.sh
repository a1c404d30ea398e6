#!/usr/bin/env bash
# Run a command under Proton as an aorta recipe's collect.proton says, check the
# capture, and summarise it into OUT/summary.json.
#
#   ./profile.sh [--recipe FILE] [--output DIR] [--data tree|trace] [--backend NAME]
#                [--context shadow|python] [--dry-run] -- COMMAND ...
#
# COMMAND runs a .py script: through its interpreter (python mine.py ARGS), or through
# a launcher that starts it once per rank (torchrun ... mine.py ARGS, srun torchrun
# ...), each rank then writing OUT/proton.rank<R>.<ext>. --data, --backend and --context
# override the recipe's for this run. --dry-run prints what would run, and runs nothing.
# Exit status: the workload's own when it fails; 1 no usable capture; 2 usage, a
# refused recipe, or no GPU visible.
set -euo pipefail

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
recipe=recipe.yaml
out=profiling_results
dry_run=0
data=
backend=
context=
cmd=()

die() { echo "profile.sh: error: $2" >&2; exit "$1"; }

while (($#)); do
  case "$1" in
    --recipe) (($# >= 2)) || die 2 "--recipe needs a file"; recipe=$2; shift 2 ;;
    --output) (($# >= 2)) || die 2 "--output needs a directory"; out=$2; shift 2 ;;
    --data) (($# >= 2)) || die 2 "--data needs tree or trace"; data=$2; shift 2 ;;
    --backend) (($# >= 2)) || die 2 "--backend needs a name"; backend=$2; shift 2 ;;
    --context) (($# >= 2)) || die 2 "--context needs shadow or python"; context=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; (($#)) || die 2 "no command after --"; cmd=("$@"); break ;;
    -h|--help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die 2 "unknown argument: ${1:0:60} (see --help)" ;;
  esac
done
((${#cmd[@]})) || die 2 "no command: give one after -- (e.g. -- python mine.py)"
[[ -n $out ]] || die 2 "--output needs a directory, not an empty name"
[[ ! -e $out || -d $out ]] || die 2 "--output ${out:0:200}: not a directory"

# The words before the script start it: its interpreter, or a launcher and its options.
start=()
for word in "${cmd[@]}"; do
  [[ $word != *.py ]] || break
  start+=("$word")
done
((${#start[@]} < ${#cmd[@]})) || die 2 "the command must run a .py script (e.g. -- python mine.py)"
((${#start[@]})) || die 2 "the command must start with the script's interpreter or launcher"
script=("${cmd[@]:${#start[@]}}")

# The workload's own interpreter reads the recipe, hosts Proton and parses the capture:
# a `python3` on PATH may be another Python. Under a launcher, the first word that
# names an interpreter, if any.
py=
for word in "${start[@]}"; do
  case "$(basename -- "$word")" in python*) py=$word; break ;; esac
done
alone=0  # one process, started by its interpreter alone
[[ ${#start[@]} -eq 1 && -n $py ]] && alone=1
py=${py:-python3}
command -v -- "$py" >/dev/null || die 2 "no interpreter ${py:0:200}"

status=0
options=$("$py" -I "$here/recipe.py" "$recipe" "$data" "$backend" "$context") || status=$?
((status != 2)) || exit 2  # recipe.py said why
((status == 0)) || die 2 "$py could not read the recipe (exit $status)"
mapfile -t o <<<"$options"  # one a line, as recipe.py's FIELDS; the empty ones last
mode=${o[0]} backend=${o[1]} context=${o[2]} data=${o[3]} hook=${o[4]-} proton_mode=${o[5]-}

out=$(realpath -m -- "$out")
name=$out/proton
ext=hatchet
[[ $data == trace ]] && ext=chrome_trace

# What the run changes in the environment: names to unset, then names to export.
unsets=()
declare -A exports=()
order=()
setenv() { exports[$1]=$2; order+=("$1"); }

# Device variables, as aorta moves them: Proton's AMD queue-intercepting backends
# refuse HIP_ and CUDA_VISIBLE_DEVICES and honour ROCR_VISIBLE_DEVICES.
if [[ $backend == auto || $backend == roc* ]] &&
  [[ $backend == roc* || -n ${HIP_VISIBLE_DEVICES+x} || -n ${ROCR_VISIBLE_DEVICES+x} ]]; then
  value=${HIP_VISIBLE_DEVICES-${CUDA_VISIBLE_DEVICES-}}
  for var in HIP_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES; do
    [[ -z ${!var+x} ]] || unsets+=("$var")
  done
  if ((${#unsets[@]})); then
    [[ -n ${ROCR_VISIBLE_DEVICES+x} ]] || setenv ROCR_VISIBLE_DEVICES "$value"
    echo "profile.sh: warning: AMD: ${unsets[*]} unset; devices go by ROCR_VISIBLE_DEVICES=${ROCR_VISIBLE_DEVICES-$value}" >&2
  fi
fi

# Proton's own command line where it can do the job (one process, no typed mode);
# proton_launch.py, which does what it does, under a launcher (the rank goes into each
# capture's name) and for a mode (3.6 and 3.7's command line drop it).
launch=("$here/proton_launch.py" -n "$name")
if [[ $mode == cli ]]; then
  flags=()
  [[ $backend == auto ]] || flags+=(-b "$backend")
  flags+=(--context "$context" --data "$data")
  [[ -z $hook ]] || flags+=(-k "$hook")
  if ((alone)) && [[ -z $proton_mode && $backend != instrumentation ]]; then
    run=("$py" -m triton.profiler.proton -n "$name" "${flags[@]}" "${script[@]}")
  else
    [[ -z $proton_mode ]] || flags+=(--mode "$proton_mode")
    run=("${start[@]}" "${launch[@]}" "${flags[@]}" "${script[@]}")
  fi
else
  run=("${cmd[@]}")
  ((alone)) || run=("${start[@]}" "${launch[@]}" --env "${script[@]}")
  setenv AORTA_PROTON_DIR "$out"
  setenv AORTA_PROTON_NAME "$name"
  setenv AORTA_PROTON_CONTEXT "$context"
  setenv AORTA_PROTON_DATA "$data"
  [[ $backend == auto ]] || setenv AORTA_PROTON_BACKEND "$backend"
  [[ -z $proton_mode ]] || setenv AORTA_PROTON_MODE "$proton_mode"
  [[ -z $hook ]] || setenv AORTA_PROTON_HOOK "$hook"
fi

if ((dry_run)); then
  for var in "${unsets[@]}"; do echo "unset $var"; done
  for var in "${order[@]}"; do echo "export $var=$(printf '%q' "${exports[$var]}")"; done
  line=$(printf '%q ' "${run[@]}")
  echo "${line% }"
  if ((!alone)); then
    line=$(printf '%q ' "${run[@]:${#start[@]}}")
    echo "# each rank runs: ${line% }"
    echo "# and writes $(printf '%q' "$name").rank<RANK>.$ext (RANK, else SLURM_PROCID)"
  fi
  exit 0
fi

# Proton needs a GPU where the command runs here (its interpreter, or torchrun); srun
# and other launchers run it elsewhere. Asking torch would take seconds (its import
# alone): the driver's device nodes answer at once, NVIDIA's /dev/nvidiactl, AMD's
# /dev/kfd. A device variable set to nothing or -1 hides every GPU.
gpu_visible() {
  local var
  for var in CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES; do
    [[ ${!var-unset} != "" && ${!var-unset} != -1 ]] || return 1
  done
  [[ -e /dev/nvidiactl || -e /dev/kfd ]]
}
case "$(basename -- "${cmd[0]}")" in
  python* | torchrun)
    gpu_visible || [[ ${PROFILE_ASSUME_GPU:-} == 1 ]] ||
      die 2 "no GPU visible: Proton needs one (check the kernel alone with: make run)" ;;
esac

for var in "${unsets[@]}"; do unset "$var"; done
for var in "${order[@]}"; do export "$var=${exports[$var]}"; done

# Captures left by an earlier run (of any number of ranks) must not pass for this one's.
mkdir -p -- "$out" 2>/dev/null || die 2 "cannot make the directory ${out:0:200}"
rm -f -- "$name.$ext" "$name".rank*."$ext" "$out/summary.json"
status=0
"${run[@]}" || status=$?
((status == 0)) || die "$status" "the command exited $status; no summary written"

shopt -s nullglob
captures=("$name".rank*."$ext")
[[ ! -f $name.$ext ]] || captures=("$name.$ext" "${captures[@]}")
((${#captures[@]})) || die 1 "no $name.$ext: the run wrote no profile (Triton 3.6 loses it when the script raises or calls sys.exit; in env mode the payload must call proton.start() and proton.finalize())"
"$py" "$here/parse_hatchet.py" "${captures[@]}" -o "$out/summary.json" --table || status=$?
((status == 0)) || die "$status" "no summary written (see the line above)"
echo "profile.sh: wrote $out/summary.json"

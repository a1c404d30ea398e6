#!/usr/bin/env bash
# Run a command under Proton as an aorta recipe's collect.proton says, check the
# capture, and summarise it into OUT/summary.json.
#
#   ./profile.sh [--recipe FILE] [--output DIR] [--data tree|trace] [--dry-run] [-- COMMAND ...]
#
# --data overrides the recipe's collect.proton.data for this run.
# Exit status: the workload's own when it fails; 1 no usable capture; 2 usage, a
# refused recipe, or no GPU visible.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
recipe=recipe.yaml
out=profiling_results
dry_run=0
data_override=
cmd=(python softmax.py --rows 4096 --cols 1024 --iters 20)

die() { echo "profile.sh: error: $2" >&2; exit "$1"; }

while (($#)); do
  case "$1" in
    --recipe) (($# >= 2)) || die 2 "--recipe needs a file"; recipe=$2; shift 2 ;;
    --output) (($# >= 2)) || die 2 "--output needs a directory"; out=$2; shift 2 ;;
    --data) (($# >= 2)) || die 2 "--data needs tree or trace"; data_override=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; (($#)) || die 2 "no command after --"; cmd=("$@"); break ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die 2 "unknown argument: $1 (see --help)" ;;
  esac
done

# The workload's own interpreter reads the recipe and, in cli mode, hosts Proton:
# a `proton` console script may belong to another Python.
py=
case "$(basename "${cmd[0]}")" in python*) py=${cmd[0]} ;; esac

# One line, "mode backend context data hook", each checked against its list (hook
# "none" when unset). YAML is read with safe_load only.
options=$("${py:-python3}" - "$recipe" "$data_override" <<'PY'
import sys
import yaml

LISTS = {
    "mode": ["cli", "env"],
    "backend": ["auto", "cupti", "rocprofiler", "roctracer", "instrumentation"],
    "context": ["shadow", "python"],
    "data": ["tree", "trace"],
    "hook": ["triton"],
}
AORTA_ONLY = ["backend_mode", "instrumentation_mode", "granularity"]
DEFAULTS = {"mode": "cli", "backend": "auto", "context": "shadow", "data": "tree", "hook": "none"}


def refuse(message):
    print(f"profile.sh: error: {sys.argv[1]}: {message}", file=sys.stderr)
    raise SystemExit(2)


try:
    with open(sys.argv[1], encoding="utf-8") as f:
        recipe = yaml.safe_load(f)
except OSError as e:
    refuse(e.strerror.lower())
except yaml.YAMLError as e:
    refuse(f"not valid YAML: {' '.join(str(e).split())}")
collect = recipe.get("collect") if isinstance(recipe, dict) else None
proton = collect.get("proton") if isinstance(collect, dict) else None
if not isinstance(proton, dict):
    refuse("no collect.proton mapping")
for key, value in proton.items():
    if key in AORTA_ONLY:
        refuse(f"collect.proton.{key} is read by aorta only; profile.sh cannot pass it on")
    if key not in LISTS:
        refuse(f"unknown key collect.proton.{key} (known: {', '.join(LISTS)})")
    if not isinstance(value, str):
        refuse(f"collect.proton.{key} must be a string, got {value!r}")
    if value not in LISTS[key]:
        refuse(f"collect.proton.{key}: {value!r} is not one of {', '.join(LISTS[key])}")
if sys.argv[2]:  # --data, checked as the recipe's value would be
    proton = {**proton, "data": sys.argv[2]}
    if sys.argv[2] not in LISTS["data"]:
        print(f"profile.sh: error: --data: {sys.argv[2]!r} is not one of {', '.join(LISTS['data'])}", file=sys.stderr)
        raise SystemExit(2)
o = {**DEFAULTS, **proton}
if o["mode"] == "cli" and o["backend"] == "roctracer":
    refuse("backend roctracer in cli mode captures an empty tree on AMD; use mode: env, or backend: auto")
if "rocprof" in collect and o["backend"] in ("auto", "rocprofiler", "roctracer"):
    refuse(f"rocprof and proton (backend {o['backend']}) both intercept HSA queues; use backend: instrumentation, or drop one")
print(*(o[k] for k in DEFAULTS))
PY
) || exit $?
read -r mode backend context data hook <<<"$options"

out=$(realpath -m -- "$out")
name=$out/proton
ext=hatchet
[[ $data == trace ]] && ext=chrome_trace

# What the run changes in the environment: names to unset, then names to export.
unsets=()
declare -A exports=()
order=()
setenv() { exports[$1]=$2; order+=("$1"); }

# Device variables, as aorta moves them: Proton's AMD backends refuse HIP_ and
# CUDA_VISIBLE_DEVICES and honour ROCR_VISIBLE_DEVICES.
if [[ $backend == roc* || -n ${HIP_VISIBLE_DEVICES+x} || -n ${ROCR_VISIBLE_DEVICES+x} ]]; then
  value=${HIP_VISIBLE_DEVICES-${CUDA_VISIBLE_DEVICES-}}
  for var in HIP_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES; do
    [[ -z ${!var+x} ]] || unsets+=("$var")
  done
  if ((${#unsets[@]})); then
    [[ -n ${ROCR_VISIBLE_DEVICES+x} ]] || setenv ROCR_VISIBLE_DEVICES "$value"
    echo "profile.sh: warning: AMD: ${unsets[*]} unset; devices go by ROCR_VISIBLE_DEVICES=${ROCR_VISIBLE_DEVICES-$value}" >&2
  fi
fi

if [[ $mode == cli ]]; then
  [[ -n $py ]] || die 2 "mode cli needs a command that starts with its Python interpreter, got: ${cmd[0]}"
  run=("$py" -m triton.profiler.proton -n "$name")
  [[ $backend == auto ]] || run+=(-b "$backend")
  run+=(--context "$context" --data "$data")
  [[ $hook == none ]] || run+=(-k "$hook")
  run+=("${cmd[@]:1}")
else
  run=("${cmd[@]}")
  setenv AORTA_PROTON_DIR "$out"
  setenv AORTA_PROTON_NAME "$name"
  setenv AORTA_PROTON_CONTEXT "$context"
  setenv AORTA_PROTON_DATA "$data"
  [[ $backend == auto ]] || setenv AORTA_PROTON_BACKEND "$backend"
  [[ $hook == none ]] || setenv AORTA_PROTON_HOOK "$hook"
fi

if ((dry_run)); then
  for var in "${unsets[@]}"; do echo "unset $var"; done
  for var in "${order[@]}"; do echo "export $var=$(printf '%q' "${exports[$var]}")"; done
  line=$(printf '%q ' "${run[@]}")
  echo "${line% }"
  exit 0
fi

# Proton needs a GPU. Asking torch would take seconds (its import alone); the driver's
# device nodes answer at once: NVIDIA's /dev/nvidiactl, AMD's /dev/kfd. A device
# variable set to nothing or -1 hides every GPU.
gpu_visible() {
  local var
  for var in CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES; do
    [[ ${!var-unset} != "" && ${!var-unset} != -1 ]] || return 1
  done
  [[ -e /dev/nvidiactl || -e /dev/kfd ]]
}
gpu_visible || [[ ${PROFILE_ASSUME_GPU:-} == 1 ]] ||
  die 2 "no GPU visible: Proton needs one (check the kernel alone with: make run)"

for var in "${unsets[@]}"; do unset "$var"; done
for var in "${order[@]}"; do export "$var=${exports[$var]}"; done

# A capture left by an earlier run must not pass for this one's.
mkdir -p "$out"
rm -f "$name.$ext" "$out/summary.json"
status=0
"${run[@]}" || status=$?
((status == 0)) || die "$status" "the command exited $status; no summary written"

[[ -f $name.$ext ]] || die 1 "no $name.$ext: the run wrote no profile (Triton 3.6 loses it when the script raises or calls sys.exit; in env mode the payload must call proton.start() and proton.finalize())"
"${py:-python3}" "$here/parse_hatchet.py" "$name.$ext" -o "$out/summary.json" --table ||
  die 1 "$name.$ext holds no timed kernel; see the line above"
echo "profile.sh: wrote $out/summary.json"

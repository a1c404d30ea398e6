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
# A run holds OUT for itself (a lock on OUT/.profile.lock) and first clears what an
# earlier run of this tool wrote there: proton.<ext>, proton.rank<R>.<ext>, their phase
# files (NAME.part_<P>.<ext>), NAME.provenance.json and summary.json. Beside each
# capture, NAME.provenance.json says what made it (Triton, torch, device, backend and mode
# asked for and used) and the run's id, one a run: a summary never mixes runs.
# SIGTERM or SIGINT end the workload: it gets the signal, profile.sh waits for it and
# exits 143 or 130.
# Exit status: the workload's own when it fails; 1 no usable capture, or a capture or
# rank not read (summary.json says which); 2 usage, a refused recipe, no GPU visible,
# or OUT busy or not writable.
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
    -h|--help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p;}' "$0"; exit 0 ;;
    *) die 2 "unknown argument: ${1:0:60} (see --help)" ;;
  esac
done
((${#cmd[@]})) || die 2 "no command: give one after -- (e.g. -- python mine.py)"
[[ -n $out ]] || die 2 "--output needs a directory, not an empty name"
[[ ! -e $out || -d $out ]] || die 2 "--output ${out:0:200}: not a directory"
# A builtin (exec, source, .) or a function of this script would run inside it.
case "$(type -t -- "${cmd[0]}")" in
  builtin | function | keyword)
    die 2 "the command must start with a program, not the shell's ${cmd[0]:0:30}" ;;
esac

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

# The number of ranks, where the launcher says it on one host: torchrun's
# --nproc-per-node, else WORLD_SIZE; parse_hatchet.py then names a rank with no capture.
world=
if ((!alone)); then
  torchrun=0 nnodes=1
  for ((i = 0; i < ${#start[@]}; i++)); do
    word=${start[i]} next=${start[i + 1]-}
    case "$word" in
      torchrun | */torchrun) torchrun=1 ;;
      -m) [[ $next != torch.distributed.run && $next != torch.distributed.launch ]] || torchrun=1 ;;
      --nproc-per-node=* | --nproc_per_node=*) ((!torchrun)) || world=${word#*=} ;;
      --nproc-per-node | --nproc_per_node) ((!torchrun)) || world=$next ;;
      --nnodes=*) nnodes=${word#*=} ;;
      --nnodes) nnodes=$next ;;
    esac
  done
  [[ $nnodes == 1 || $nnodes == 1:1 ]] || world=
  ((torchrun)) || world=${WORLD_SIZE-}
  [[ $world =~ ^[1-9][0-9]{0,5}$ ]] || world=
fi

status=0
# Not -I: that would hide a PyYAML on PYTHONPATH. A script's folder, not the current one,
# is first on sys.path, and PYTHONSAFEPATH (3.11+) drops that too.
options=$(PYTHONSAFEPATH=1 "$py" "$here/recipe.py" "$recipe" "$data" "$backend" "$context") ||
  status=$?
((status != 2)) || exit 2  # recipe.py said why
((status == 0)) || die 2 "$py could not read the recipe (exit $status)"
mapfile -t o <<<"$options"  # one a line, as recipe.py's FIELDS; the empty ones last
mode=${o[0]} backend=${o[1]} context=${o[2]} data=${o[3]} hook=${o[4]-} proton_mode=${o[5]-}

# realpath's own newline is cut, and only it: a name may end in newlines of its own.
out=$(realpath -m -- "$out" && echo .)
out=${out%.}
out=${out%$'\n'}
name=$out/proton
ext=hatchet
[[ $data == trace ]] && ext=chrome_trace

# The GPU maker, from the driver's device nodes (NVIDIA's /dev/nvidiactl, AMD's /dev/kfd):
# asking torch would take seconds. PROFILE_ASSUME_GPU=1|nvidia|amd stands in for one.
vendor=
case ${PROFILE_ASSUME_GPU:-} in
  nvidia | amd) vendor=$PROFILE_ASSUME_GPU ;;
  *) if [[ -e /dev/nvidiactl ]]; then vendor=nvidia; elif [[ -e /dev/kfd ]]; then vendor=amd; fi ;;
esac

# What the run changes in the environment: names to unset, then names to export.
unsets=()
declare -A exports=()
order=()
setenv() { exports[$1]=$2; order+=("$1"); }

# Device variables, as aorta moves them, where Proton's AMD queue-intercepting backends
# will read them (a pinned one, or auto on an AMD host): they refuse HIP_ and
# CUDA_VISIBLE_DEVICES and honour ROCR_VISIBLE_DEVICES. Elsewhere they stay as they are.
if [[ $backend == roc* || ($backend == auto && $vendor == amd) ]]; then
  value=${HIP_VISIBLE_DEVICES-${CUDA_VISIBLE_DEVICES-}}
  for var in HIP_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES; do
    [[ -z ${!var+x} ]] || unsets+=("$var")
  done
  if ((${#unsets[@]})); then
    [[ -n ${ROCR_VISIBLE_DEVICES+x} ]] || setenv ROCR_VISIBLE_DEVICES "$value"
    echo "profile.sh: warning: AMD: ${unsets[*]} unset; devices go by ROCR_VISIBLE_DEVICES=${ROCR_VISIBLE_DEVICES-$value}" >&2
  fi
fi

# One id for every capture of this run, in its provenance.
read -r run_id </proc/sys/kernel/random/uuid 2>/dev/null || run_id=$(date -u +%Y%m%dT%H%M%S)-$$

# Proton's own command line where it can do the job (one process, no typed mode);
# proton_launch.py, which does what it does, under a launcher (the rank goes into each
# capture's name) and for a mode (3.6 and 3.7's command line drop it). proton_launch.py
# writes each capture's provenance; after a run it did not start, it writes only that.
launch=("$here/proton_launch.py" -n "$name" --run-id "$run_id")
record=()
if [[ $mode == cli ]]; then
  flags=()
  [[ $backend == auto ]] || flags+=(-b "$backend")
  flags+=(--context "$context" --data "$data")
  [[ -z $hook ]] || flags+=(-k "$hook")
  if ((alone)) && [[ -z $proton_mode && $backend != instrumentation ]]; then
    run=("$py" -m triton.profiler.proton -n "$name" "${flags[@]}" "${script[@]}")
    record=("$py" "${launch[@]}" --provenance)
    [[ $backend == auto ]] || record+=(-b "$backend")
  else
    [[ -z $proton_mode ]] || flags+=(--mode "$proton_mode")
    run=("${start[@]}" "${launch[@]}" "${flags[@]}" "${script[@]}")
  fi
else
  run=("${cmd[@]}")
  ((alone)) || run=("${start[@]}" "${launch[@]}" --env "${script[@]}")
  ((!alone)) || record=("$py" "${launch[@]}" --env --provenance)
  [[ $backend == auto || ${#record[@]} -eq 0 ]] || record+=(-b "$backend")
  [[ -z $proton_mode || ${#record[@]} -eq 0 ]] || record+=(--mode "$proton_mode")
  setenv AORTA_PROTON_DIR "$out"
  setenv AORTA_PROTON_NAME "$name"
  setenv AORTA_PROTON_CONTEXT "$context"
  setenv AORTA_PROTON_DATA "$data"
  [[ $backend == auto ]] || setenv AORTA_PROTON_BACKEND "$backend"
  [[ -z $proton_mode ]] || setenv AORTA_PROTON_MODE "$proton_mode"
  [[ -z $hook ]] || setenv AORTA_PROTON_HOOK "$hook"
fi
parse=("$py" "$here/parse_hatchet.py" -o "$out/summary.json" --table)
[[ -z $world ]] || parse+=(--world-size "$world")

if ((dry_run)); then
  for var in "${unsets[@]}"; do echo "unset $var"; done
  for var in "${order[@]}"; do echo "export $var=$(printf '%q' "${exports[$var]}")"; done
  line=$(printf '%q ' "${run[@]}")
  echo "${line% }"
  if ((!alone)); then
    line=$(printf '%q ' "${run[@]:${#start[@]}}")
    echo "# each rank runs: ${line% }"
    echo "# and writes $(printf '%q' "$name").rank<R>.$ext (R from RANK, SLURM_PROCID," \
      "OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK)"
  fi
  line=$(printf '%q ' "${parse[@]}")
  echo "# then: ${line% } CAPTURES..."
  exit 0
fi

# Proton needs a GPU where the command runs here (its interpreter, or torchrun); srun
# and other launchers run it elsewhere. A device variable set to nothing or -1 hides
# every GPU.
gpu_visible() {
  local var vars=(CUDA_VISIBLE_DEVICES)
  [[ $vendor != amd ]] || vars+=(HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES)
  for var in "${vars[@]}"; do
    [[ ${!var-unset} != "" && ${!var-unset} != -1 ]] || return 1
  done
  [[ -n $vendor || ${PROFILE_ASSUME_GPU:-} == 1 ]]
}
case "$(basename -- "${cmd[0]}")" in
  python* | torchrun)
    gpu_visible || die 2 "no GPU visible: Proton needs one (check the kernel alone with: make run)" ;;
esac

for var in "${unsets[@]}"; do unset "$var"; done
for var in "${order[@]}"; do export "$var=${exports[$var]}"; done

# The workload runs as a child that signals reach (bash would otherwise hold a trap until
# it ends), on this terminal: it may read it, and Ctrl-C reaches it from there.
child=
probe=
alive() {
  local stat
  { read -r stat <"/proc/$child/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}
in_foreground() {  # this process's group is the one its terminal sends Ctrl-C to
  local stat fields
  { read -r stat <"/proc/$$/stat"; } 2>/dev/null || return 1
  read -r -a fields <<<"${stat##*) }"
  ((fields[5] > 0 && fields[2] == fields[5]))
}
stop() {  # $1 the signal, $2 the exit status it gives
  # A second signal goes straight on to the workload.
  trap '[[ -z $child ]] || kill -s INT "$child" 2>/dev/null || :' INT
  trap '[[ -z $child ]] || kill -s TERM "$child" 2>/dev/null || :' TERM
  if [[ -n $child ]]; then
    if [[ $1 == INT ]]; then
      # The terminal sends Ctrl-C to the workload too, and so may whoever signalled the
      # whole group: forwarded only if it is still running a moment later (a second
      # interrupt would cut its exit short).
      if ! in_foreground; then
        for _ in {1..20}; do alive || break; sleep 0.1; done
        ! alive || kill -s INT "$child" 2>/dev/null || :
      fi
    else
      kill -s "$1" "$child" 2>/dev/null || :
    fi
    while alive; do wait "$child" 2>/dev/null || :; done
  fi
  [[ -z $probe ]] || rm -f -- "$probe"
  echo "profile.sh: stopped by SIG$1; the command ended, no summary written" >&2
  exit "$2"
}
trap 'stop INT 130' INT
trap 'stop TERM 143' TERM

# OUT is this run's alone: a second run into it would summarise this one's captures, or
# clear them while they are written. The lock lasts as long as this process and any
# workload it leaves behind; its file stays, so that every run locks the same file.
mkdir -p -- "$out" 2>/dev/null || die 2 "cannot make the directory ${out:0:200}"
lockfile=$out/.profile.lock
# A link would lock (and create) a file elsewhere; opening a pipe would block.
[[ ! -L $lockfile && (! -e $lockfile || -f $lockfile) ]] ||
  die 2 "${lockfile:0:200}: not a regular file; remove it"
{ exec {lock}>>"$lockfile"; } 2>/dev/null ||
  die 2 "cannot write into ${out:0:200} (read-only, or not yours)"
flock -n -E 75 "$lock" 2>/dev/null || {
  status=$?
  ((status != 75)) || die 2 "${out:0:200} is in use by another profile.sh run; pick another --output"
  die 2 "cannot lock ${out:0:200} (flock exit $status)"
}
probe=$(mktemp -p "$out" .profile.XXXXXX 2>/dev/null) ||
  die 2 "cannot write into ${out:0:200} (read-only, or not yours)"
rm -f -- "$probe"
probe=

# The files this tool writes into OUT: each rank's capture (proton.rank<R>, or proton
# alone) in each format, its phases, its provenance. Others' files there are never touched.
captures='(\.rank[0-9]+)?(\.part_[0-9]+)?\.(hatchet|hatchet_msgpack|chrome_trace)'
provenance='(\.rank[0-9]+)?\.provenance\.json'
shopt -s nullglob
written() {  # $1: a regular expression for what follows "proton"; the files in $found
  local file
  found=()
  for file in "$name"*; do
    [[ ${file#"$name"} =~ ^($1)$ ]] && found+=("$file")
  done
  return 0
}

# What an earlier run of this tool wrote (of any number of ranks, data or phases) must not
# pass for this run's.
written "$captures|$provenance"
[[ ! -e $out/summary.json && ! -L $out/summary.json ]] || found+=("$out/summary.json")
((${#found[@]} == 0)) || rm -f -- "${found[@]}"

run_child() {  # run "$@" as the child; its exit status in $status
  (trap - INT QUIT TERM; exec "$@") <&0 &
  child=$!
  status=0
  wait "$child" || status=$?
  child=
}

run_child "${run[@]}"
((status == 0)) || die "$status" "the command exited $status; no summary written"
if ((${#record[@]})); then
  run_child "${record[@]}"
  ((status == 0)) || echo "profile.sh: warning: no provenance written (exit $status)" >&2
fi

written "$captures"
((${#found[@]})) || die 1 "no $name.$ext: the run wrote no profile (Triton 3.6 loses it when the script raises or calls sys.exit; in env mode the payload must call proton.start() and proton.finalize())"
run_child "${parse[@]}" "${found[@]}"
if ((status == 1)) && [[ -e $out/summary.json ]]; then
  die 1 "not every capture or rank was read: $out/summary.json says which"
fi
((status == 0)) || die "$status" "no summary written (see the line above)"
echo "profile.sh: wrote $out/summary.json"

#!/usr/bin/env bash
# Run a command under Proton as an aorta recipe's collect.proton says, in a run folder of
# its own, and summarise its captures there: summary.json and its page, report.html.
#
#   ./profile.sh [--recipe FILE] [--results DIR | --output DIR] [--data tree|trace]
#                [--backend NAME] [--context shadow|python] [--hook triton] [--trials N]
#                [--rev REV | --base-script FILE] [GATE] [--dry-run] -- COMMAND ...
#   ./profile.sh [--results DIR] --compare NOW BASE [GATE] [-- PYTHON]
#
# COMMAND: a .py script after its interpreter or a launcher (python mine.py ARGS, torchrun
# ... mine.py ARGS). A run makes RESULTS/KIND/<UTC time>-<pid> (RESULTS: profiling_results;
# KIND: profile, trace, intra, intra-trace or ab), or --output DIR, a new folder. --rev REV
# (a revision, or a copy of the tree) or --base-script FILE: the script now against its
# base; --compare: two runs (PYTHON compares). GATE: --fail-above PCT, --min-ms MS,
# --any-device, as parse_hatchet.py takes them. docs/profiling.md tells more.
# Exit status: 0 summarised (compared: no regression); the command's own when it fails;
# 1 no capture; parse_hatchet.py's own when it fails (1: a capture or rank not read) or
# finds a regression past --fail-above; 2 usage, a refused recipe, no GPU visible, an
# --output that exists, a latest or previous not a link, a REV not there or lacking the
# script; 129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM.
set -euo pipefail

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
recipe=recipe.yaml results=profiling_results output='' data='' backend='' context='' hook=''
trials='' dry_run=0 cmd=() rev='' base_script='' gate=() compare=() cwd=.
say() { local line="profile.sh: $1"; echo "${line//[[:cntrl:]]/?}"; }  # one line, as ls shows names
die() { say "error: $2" >&2; exit "$1"; }

while (($#)); do
  case $1 in
    --recipe | --results | --output | --data | --backend | --context | --hook | --trials | \
      --rev | --base-script | --fail-above | --min-ms)
      (($# >= 2)) && [[ -n $2 ]] || die 2 "$1 needs a value, not an empty one"
      case $1 in
        --fail-above | --min-ms) gate+=("$1" "$2") ;;
        *) name=${1#--} && printf -v "${name/-/_}" '%s' "$2" ;;
      esac
      shift 2 ;;
    --any-device) gate+=("$1"); shift ;;
    --compare)
      (($# >= 3)) || die 2 "--compare needs two runs: NOW BASE"
      compare=("$2" "$3") && shift 3
      for run in "${compare[@]}"; do [[ -e $run ]] || die 2 "--compare: no run ${run:0:200}"; done ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; cmd=("$@"); break ;;
    -h | --help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p;}' "$0"; exit 0 ;;
    *) die 2 "unknown argument: ${1:0:60} (see --help)" ;;
  esac
done
# A folder named with a leading - would reach Proton and the summariser as an option.
[[ $results != -* ]] || results=./$results
[[ $output != -* ]] || output=./$output
stamp=$(date -u +%Y%m%dT%H%M%SZ)-$$
linked() {  # each link made beside, then renamed: never half made; latest first, so that
  # a run stopped between the two leaves previous at an older run
  [[ -z $output ]] || return 0
  local last
  last=$(readlink -- "$runs/latest") || last=
  ln -sfn -- "$stamp" "$runs/.latest.$$" && mv -fT -- "$runs/.latest.$$" "$runs/latest"
  if [[ -n $last ]]; then
    ln -sfn -- "$last" "$runs/.previous.$$" && mv -fT -- "$runs/.previous.$$" "$runs/previous"
  fi
}
comparison() {  # as $summarise, $1 (PYTHON) comparing $2 (now) with $3 (base) into $out
  summarise=("$1" "$here/parse_hatchet.py" "$2" --diff "$3" --table -o "$out/compare.json"
    --markdown "$out/compare.md" --html "$out/report.html" "${gate[@]}")
}
compared() {  # runs $summarise; where it compared (0, or 3: a regression), latest moves
  local status=0
  "${summarise[@]}" || status=$?
  ((status != 0 && status != 3)) || linked
  exit "$status"
}
made() {  # the run's folder, made without -p: no other run has it; links of its own are
  # all that linked replaces
  local link parent
  for link in "$runs/latest" "$runs/previous"; do
    [[ -n $output || ! -e $link || -L $link ]] ||
      die 2 "${link:0:200} is not a link: move it away (nothing is replaced)"
  done
  parent=$(dirname -- "$out" && echo .) parent=${parent%$'\n.'}  # a name may end in a newline
  { mkdir -p -- "$parent" && mkdir -- "$out"; } 2>/dev/null || {
    [[ -z $output || (! -e $out && ! -L $out) ]] ||
      die 2 "--output ${out:0:200} exists: name a new folder (nothing is cleared)"
    die 2 "cannot make ${out:0:200}"
  }
}
if ((${#compare[@]})); then
  runs=$results/compare out=${output:-$results/compare/$stamp}
  made
  comparison "${cmd[0]:-python3}" "${compare[@]}"
  compared
fi
((${#cmd[@]})) || die 2 "no command: give one after -- (e.g. -- python mine.py)"
[[ -z $trials || $trials =~ ^[1-9][0-9]{0,2}$ ]] || die 2 "--trials takes 1 to 999"
ab=0
[[ -z $rev && -z $base_script ]] || ab=1 trials=${trials:-5}
((ab || !${#gate[@]})) || die 2 "${gate[0]} judges a comparison: give --rev, --base-script or --compare"
case "$(type -t -- "${cmd[0]}")" in  # a builtin (exec, source) would run inside this script
  builtin | function | keyword) die 2 "the command must start with a program, not ${cmd[0]:0:30}" ;;
esac
start=()  # the interpreter, or a launcher and its options
for word in "${cmd[@]}"; do [[ $word != *.py ]] || break; start+=("$word"); done
((${#start[@]} && ${#start[@]} < ${#cmd[@]})) ||
  die 2 "the command must run a .py script through its interpreter or launcher (-- python mine.py)"
script=("${cmd[@]:${#start[@]}}")
# The workload's own interpreter (a `python3` on PATH may be another) reads the recipe,
# writes the provenance and summarises.
py=python3
for word in "${start[@]}"; do [[ ${word##*/} != python* ]] || { py=$word; break; }; done
alone=0
[[ ${#start[@]} == 1 && $py == "${start[0]}" ]] && alone=1
command -v -- "$py" >/dev/null || die 2 "no interpreter ${py:0:200}"
world='' line=" ${start[*]} "
if [[ $line =~ [\ /](torchrun|torch\.distributed\.run)\ (.*\ )?--nproc[-_]per[-_]node[=\ ]([1-9][0-9]{0,3})\  ]]; then
  world=${BASH_REMATCH[3]}
  [[ ! $line =~ \ --nnodes[=\ ] || $line =~ \ --nnodes[=\ ]1(:1)?\  ]] || world=
fi

options=$(PYTHONSAFEPATH=1 "$py" "$here/recipe.py" --data="$data" --backend="$backend" \
  --context="$context" --hook="$hook" -- "$recipe") || exit 2  # recipe.py said why
mapfile -t o <<<"$options"
mode=${o[0]} backend=${o[1]} context=${o[2]} data=${o[3]} hook=${o[4]} proton_mode=${o[5]}
trials=${trials:-${o[6]}}
kind=profile ext=hatchet
[[ $data == tree ]] || kind=trace ext=chrome_trace
[[ $backend != instrumentation ]] || kind=${kind/#profile/intra}
[[ $backend != instrumentation ]] || kind=${kind/#trace/intra-trace}
((!ab)) || kind=ab
runs=$results/$kind
out=${output:-$runs/$stamp}

# Proton's own command line where it does the job (one process, no mode to pass); else
# proton_launch.py, which names each rank's capture and passes the mode, or, in env mode,
# exports AORTA_PROTON_* for a script that starts Proton itself.
flags=(-c "$context" -d "$data")
[[ $backend == auto ]] || flags+=(-b "$backend")
[[ -z $hook ]] || flags+=(-k "$hook")
[[ -z $proton_mode ]] || flags+=(--mode "$proton_mode")
launch=("${start[@]}" "$here/proton_launch.py")
((alone)) || launch+=(--ranked)
[[ $mode == cli ]] || launch+=(--env)
if [[ $mode == cli ]] && ((alone)) && [[ -z $proton_mode && $backend != instrumentation ]]; then
  launch=("$py" -m triton.profiler.proton)
fi
# Proton's AMD backends that intercept queues refuse HIP_ and CUDA_VISIBLE_DEVICES and
# honour ROCR_VISIBLE_DEVICES: the selection moves there, as aorta moves it.
case ${PROFILE_ASSUME_GPU:-} in
  nvidia | amd) vendor=$PROFILE_ASSUME_GPU ;;
  *) vendor=; [[ ! -e /dev/kfd ]] || vendor=amd; [[ ! -e /dev/nvidiactl ]] || vendor=nvidia ;;
esac
moved=()
if [[ $backend == roc* || ($backend == auto && $vendor == amd) ]]; then
  for var in HIP_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES; do
    [[ -n ${!var+x} ]] || continue
    [[ -n ${ROCR_VISIBLE_DEVICES+x} ]] || export ROCR_VISIBLE_DEVICES=${!var}
    moved+=("unset $var") && unset "$var"
  done
  ((!${#moved[@]})) || moved+=("export ROCR_VISIBLE_DEVICES=$(printf %q "$ROCR_VISIBLE_DEVICES")")
fi
# An A/B run's base runs elsewhere: the interpreter and the run's folder by absolute paths.
base=.
if ((ab)); then
  [[ ${launch[0]} != */* ]] || launch[0]=$(realpath -s -- "${launch[0]}")
  [[ $out == /* ]] || out=$PWD/$out
  at=$(realpath -ms --relative-to=. -- "${script[0]}")
  if [[ -n $base_script ]]; then
    [[ -f $base_script ]] || die 2 "no base script ${base_script:0:200}"
  elif [[ -d $rev ]]; then
    base=$rev
    [[ -f $base/$at ]] || die 2 "${rev:0:200} has no ${at:0:200}"
  else
    git rev-parse --verify --quiet "$rev^{commit}" >/dev/null ||
      die 2 "${rev:0:100} is neither a folder nor a revision of a git checkout here"
    git cat-file -e "$rev:./$at" 2>/dev/null || die 2 "${rev:0:100} has no ${at:0:200}"
    base=$out/tree/$(git rev-parse --show-prefix)
  fi
fi
rounds() {  # each trial K of each side, base first in odd rounds: printed or run
  local k side sides dir cwd words command found
  for ((k = 1; k <= trials; k++)); do
    if ((!ab)); then sides=(''); elif ((k % 2)); then sides=(base now); else sides=(now base); fi
    for side in "${sides[@]}"; do
      dir=$out cwd=. words=("${script[@]}")
      ((trials == 1 && !ab)) || dir=$out/$side${side:+/}trial$k
      [[ $side != base ]] || cwd=$base words[0]=${base_script:-$at}
      command=("${launch[@]}" -n "$dir/proton" "${flags[@]}" "${words[@]}")
      if ((dry_run)); then
        [[ $cwd == . ]] || printf 'cd %q && ' "$cwd"
        shown "${command[@]}"
        continue
      fi
      mkdir -p -- "$dir"
      ((!ab)) || echo "$side trial$k" >>"$out/order"
      child "${command[@]}"
      ((status == 0)) || die "$status" "the command exited $status; no summary written"
      found=("$dir"/proton*."$ext")
      ((${#found[@]})) || die 1 "no ${dir:0:200}/proton.$ext: the run wrote no profile (Triton \
3.6 writes none when the script raises or calls sys.exit; in env mode the script calls \
proton.start() and proton.finalize())"
    done
  done
}
summarise=("$py" "$here/parse_hatchet.py" "$out" -o "$out/summary.json" --html "$out/report.html"
  --table)
[[ -z $world ]] || summarise+=(--world-size "$world")
[[ ! -d $results/ceiling ]] || summarise+=(--ceiling "$results/ceiling")  # make ceiling's
((!ab)) || comparison "$py" "$out/now" "$out/base"
shown() { local line; line=$(printf '%q ' "$@"); echo "${line% }"; }
if ((dry_run)); then
  echo "# run folder: $(printf %q "$out")"
  for line in "${moved[@]}"; do echo "$line"; done
  rounds
  shown "${summarise[@]}"
  exit 0
fi
((${#moved[@]} == 0)) || say "warning: AMD: ${moved[*]}" >&2

# Proton needs a GPU where the command runs here (srun and the like run it elsewhere); a
# device variable set to nothing or -1 hides them all.
visible=0
[[ -z $vendor && ${PROFILE_ASSUME_GPU:-} != 1 ]] || visible=1
for var in CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES; do
  [[ ${!var-x} != @(|-1) ]] || visible=0
done
[[ $visible == 1 || ${cmd[0]##*/} != @(python*|torchrun) ]] ||
  die 2 "no GPU visible: Proton needs one (check the script alone with: make run)"
made
if ((ab)) && [[ $base == "$out"/tree/* ]]; then
  mkdir -- "$out/tree"
  git -C "$(git rev-parse --show-toplevel)" archive "$rev" | tar -x -C "$out/tree" ||
    die 2 "git archive ${rev:0:100} failed"
fi

# The command runs as a child that signals reach (bash would hold a trap until it ended),
# on this terminal, which it may read.
child=
stop() {  # $1: the signal, $2: the exit status it gives
  trap '' INT TERM HUP
  # Ctrl-C reaches every process of the terminal's foreground group, the command too: a
  # second interrupt would cut short what it does on the first (Proton writes its capture).
  local group='' foreground=''
  read -r group foreground < <(ps -o pgid=,tpgid= -p $$ 2>/dev/null) || :
  if [[ -n $child && ($1 != INT || -z $group || $group != "$foreground") ]]; then
    kill -s "$1" "$child" 2>/dev/null || :
  fi
  [[ -z $child ]] || wait "$child" 2>/dev/null || :
  say "stopped by SIG$1: the command ended; ${out:0:200} has no summary" >&2
  exit "$2"
}
trap 'stop INT 130' INT
trap 'stop TERM 143' TERM
trap 'stop HUP 129' HUP
child() {  # its exit status in $status
  (cd -- "$cwd" && trap - INT QUIT && exec "$@") <&0 &
  child=$! status=0
  wait "$child" || status=$?
  child=
}

shopt -s nullglob
rounds
record=("$py" "$here/proton_launch.py" --provenance "$out/provenance.json" --run-id "$stamp"
  "${flags[@]}")
[[ $mode == cli ]] || record+=(--env)
"${record[@]}" || say "warning: no provenance written (exit $?)" >&2
((!ab)) || compared
child "${summarise[@]}"
((status == 0)) || exit "$status"  # parse_hatchet.py said why
linked
say "wrote $out/summary.json"

#!/usr/bin/env bash
# The example's GPU run on one card: make test-gpu, then make bench QUACK=1 in three POINTS
# parts, each under 10 minutes on an H100, joined by make bench-report MERGE; copies what
# each step makes, its log and its time into OUT.
#
#   OUT=folder bench/gpu.sh [STEP...]
#
# Steps, in this order when none is named (the logs' steps.txt says what each took; on an
# H100 with QuACK: test 190 s, rows 169 s, logits 155 s, rest 160 s):
#   test    make test-gpu
#   rows    make bench POINTS=rows: 36 points, Inductor compiling each
#   logits  make bench POINTS=logits: 40 points, QuACK compiling each
#   rest    make bench POINTS=backward,host,profiling   (2-4 min)
#   report  make bench-report MERGE=the three parts: bench/results/<device>.json, .md,
#           plots and docs/performance.md, copied into OUT/results
# and more, only when named:
#   ab      make ab of softmax.py without its streamed store (.cs) against it (2-3 min)
#   ci      make ab FAIL_ABOVE=1 A/A against a copy of this tree (REV=<folder>), as
#           docs/ci.md's workflow runs it, of SCRIPT's default (ci-example) and of
#           tests/payloads/workload.py (ci-workload): their seconds are docs/ci.md's minutes;
#           each compare.md and compare.json copied into OUT/ci-example and OUT/ci-workload
#           (ci-example, ci-workload: one of the two, each within one 10-minute command)
#   targets make profile, make profile NPROC=2, make ab TRIALS=3 (against a copy of this
#           tree), make trace and make intra, each run's folder copied into OUT/targets
# Each step stops at 590 s, so that it fits one 10-minute command. The parts wait in
# PARTS (relative to the checkout; default profiling_results/gpu: ignored by git, so
# kept between commands on one machine), beside quack, which says whether QuACK could be installed: if not, it is
# left out of every part and said so. Exit status: 0 every step passed, 1 one failed, 2
# no OUT or a step unknown.
set -euo pipefail

steps=("$@")
[[ $# -gt 0 ]] || steps=(test rows logits rest report)
for s in "${steps[@]}"; do
  [[ " test rows logits rest report ab ci ci-example ci-workload targets " == *" $s "* ]] ||
    { echo "gpu: no step '$s': test rows logits rest report ab ci ci-example ci-workload targets" >&2 && exit 2; }
done
[[ -n ${OUT:-} ]] || { echo "gpu: set OUT to the folder that receives the results" >&2 && exit 2; }
out=$(realpath -m -- "$OUT")
unset OUT # make's own OUT stays its default for what the steps start
cd -- "$(dirname -- "$0")/.."
parts=$(realpath -m -- "${PARTS:-profiling_results/gpu}")
py=${VENV:-.venv}/bin/python
mkdir -p -- "$out" "$parts"
failed=0

# step NAME COMMAND...: runs COMMAND for at most 590 s, its output in OUT/NAME.log.
step() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "gpu: $name: $*"
  timeout 590 "$@" >"$out/$name.log" 2>&1 || rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - start))" | tee -a "$out/steps.txt"
  tail -n 3 -- "$out/$name.log"
  return "$rc"
}

part() { # the file make bench POINTS=$1 writes, as sweep.py names it
  "$py" -c 'import sys, torch; sys.path.insert(0, "bench"); import report
slug, points = report.slug(torch.cuda.get_device_name()), sys.argv[1].replace(",", "-")
print(f"bench/results/{slug}-{points}.json")' "$1"
}

bench() { # bench POINTS NAME: one part, kept in PARTS and copied into OUT/parts
  local file quack=
  if [[ ! -f $parts/quack ]]; then # once: a peer that cannot be installed is left out
    step quack make setup "${VENV:-.venv}/.bench-quack" && quack=1
    echo "$quack" >"$parts/quack"
  fi
  [[ -s $parts/quack ]] || echo "gpu: QuACK could not be installed (quack.log): left out"
  file=$(part "$1")
  step "$2" make bench POINTS="$1" QUACK="$(cat -- "$parts/quack")" || failed=1
  if [[ -f $file ]]; then
    mkdir -p -- "$out/parts" && cp -- "$file" "$parts/" && cp -- "$file" "$out/parts/"
  fi
}

report() { # the parts back into bench/results, merged there, and what that wrote into OUT
  local files=() file p
  for p in rows logits backward,host,profiling; do
    file=$(part "$p")
    if ! cp -- "$parts/$(basename -- "$file")" bench/results/; then
      echo "gpu: no $p part in $parts: run its step first" >&2
      failed=1
      return
    fi
    files+=("$file")
  done
  step report make bench-report MERGE="${files[*]}" || { failed=1 && return; }
  mkdir -p -- "$out/results"
  local stem=${files[0]%-rows.json} # bench/results/<device>
  cp -- "$stem".* "$stem"-*.png docs/performance.md "$out/results/"
}

copy() { # copy FOLDER: this tree, without its environment, results and history
  rm -rf -- "$1" && mkdir -p -- "$1"
  tar --exclude=./.venv --exclude=./profiling_results --exclude=./.git -cf - . | tar -xf - -C "$1"
}

ab() { # base: this tree with its store not streamed; now: this tree
  local base=$parts/no-streamed-store
  copy "$base"
  sed -i 's/, cache_modifier=".cs")/)/' "$base/softmax.py"
  if grep -q 'cache_modifier=".cs"' "$base/softmax.py"; then
    echo "gpu: softmax.py's store is not where ab looks for it" >&2
    failed=1
    return
  fi
  step ab make ab REV="$base" OUT="$parts/ab" TRIALS=5 || failed=1
  mkdir -p -- "$out/ab" && cp -- "$parts"/ab/ab/latest/compare.* "$out/ab/" || failed=1
}

ci() { # ci NAME...: each side this tree, an A/A run of each, timed as CI would run it
  local rev=$parts/aa name script
  copy "$rev" # this tree as it is, whatever a git here holds
  for name in "$@"; do
    script=()
    [[ $name == example ]] || script=(SCRIPT=tests/payloads/workload.py)
    step "ci-$name" make ab REV="$rev" FAIL_ABOVE=1 OUT="$parts/ci-$name" "${script[@]}" || failed=1
    mkdir -p -- "$out/ci-$name" && cp -- "$parts/ci-$name"/ab/latest/compare.* "$out/ci-$name/" ||
      failed=1
  done
}

targets() { # the README's targets on the example, each run's folder kept in OUT/targets
  local results=$parts/targets rev=$parts/aa
  rm -rf -- "$results"
  copy "$rev" # make ab's base: this tree, whatever a git here holds
  step profile make profile OUT="$results/profile" || failed=1
  step profile-nproc2 make profile NPROC=2 OUT="$results/profile-nproc2" || failed=1
  step ab-trials3 make ab TRIALS=3 REV="$rev" OUT="$results/ab" || failed=1
  step trace make trace OUT="$results/trace" || failed=1
  step intra make intra OUT="$results/intra" || failed=1
  mkdir -p -- "$out/targets" && cp -r -- "$results"/. "$out/targets/"
}

for s in "${steps[@]}"; do
  case $s in
    test) step test make test-gpu PYTEST_ARGS=-q || failed=1 ;;
    rows) bench rows bench-rows ;;
    logits) bench logits bench-logits ;;
    rest) bench backward,host,profiling bench-rest ;;
    report) report ;;
    ab) ab ;;
    ci) ci example workload ;;
    ci-example | ci-workload) ci "${s#ci-}" ;;
    targets) targets ;;
  esac
done
exit "$failed"

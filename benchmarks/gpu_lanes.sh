#!/usr/bin/env bash
# Run independent GPU work in parallel lanes, one lane per GPU of the host, within one deadline, and
# bring back one archive: on a 4-GPU machine the GPU suite's files, a rung's check and a benchmark run
# side by side (measured on four H200s, 2026-11-26: GPU test files that add up to 8 minutes in
# turn finished in a little over 3 minutes in three lanes).
#
#   LANE0="pytest tests/test_tune.py" LANE1="pytest tests/test_backward_gpu.py; pytest tests/test_ncu.py" \
#   DEADLINE=540 OUT=/tmp/out bash benchmarks/gpu_lanes.sh
#
# Each LANEi is a ';'-separated list of steps, run in turn with CUDA_VISIBLE_DEVICES=i; `pytest FILE
# [ARGS]` is short for the GPU tier of that file with its own junit XML and durations. Every step gets
# the time left before DEADLINE (seconds from the start, default 540) as its `timeout`, so the archive
# ($OUT/lanes.tgz: each step's log) is always written, and the summary (each step's exit status and
# seconds, each pytest's last line and failures) is printed last. Timings taken in one lane while the
# others run are not quiet timings: the lanes share the host's CPUs, power and cooling.
set -u
OUT=${OUT:-/tmp/lab-out}; L=$OUT/lanes; mkdir -p "$L"
DEADLINE=${DEADLINE:-540}
START=$SECONDS

step() {   # step LANE INDEX COMMAND...
  local lane=$1 i=$2; shift 2
  local left=$(( DEADLINE - (SECONDS - START) - 5 ))
  local log="$L/lane$lane-$i.log" t0=$SECONDS rc
  if [ "$left" -le 5 ]; then echo "lane $lane step $i: no time left: $*" >>"$L/summary$lane.txt"; return; fi
  if [ "$1" = pytest ]; then
    shift
    timeout "$left" python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider --durations=10 \
      --junitxml="$L/lane$lane-$i.xml" "$@" >"$log" 2>&1
  else
    timeout "$left" bash -c "$*" >"$log" 2>&1
  fi
  rc=$?
  {
    echo "lane $lane step $i rc=$rc $((SECONDS - t0))s: $*"
    grep -E "^(FAILED|ERROR) " "$log" | head -8 | cut -c1-240
    grep -E "^=+ .* in [0-9.]+s" "$log" | tail -1
  } >>"$L/summary$lane.txt"
}

lane() {   # lane N "step; step; ..."
  local n=$1 i=0 s
  IFS=';' read -ra steps <<<"$2"
  for s in "${steps[@]}"; do
    s=$(echo "$s" | sed 's/^ *//; s/ *$//')
    [ -n "$s" ] || continue
    i=$((i + 1))
    # shellcheck disable=SC2086
    (export CUDA_VISIBLE_DEVICES=$n; step "$n" "$i" $s)
  done
}

for n in 0 1 2 3 4 5 6 7; do
  var="LANE$n"
  [ -n "${!var:-}" ] && lane "$n" "${!var}" &
done
wait
cat "$L"/summary*.txt 2>/dev/null
tar czf "$OUT/lanes.tgz" -C "$OUT" lanes && rm -rf "$L"
echo "lanes done in $((SECONDS - START)) s"

# The shared half of v9's committed GPU-call scripts (benchmarks/v9_step*_gpu.sh), sourced by each:
#   gpu_call_begin NAME    logs and stores under $OUT/NAME (W, L), the lab on PYTHONPATH, LAB_CACHE, the clock
#   step NAME LIMIT CMD... one step: its log under $L, its exit status and seconds printed and in steps.log
#   build_v9               the plain and the tuning build side by side, and the tuning build's C75xx notices
#   tune NAME ARGS...      `lab tune --variant v9` into $W/tunes
#   fa_grid [LIMIT]        the fa-grid of v9's default against SDPA cuDNN, both timings, both dtypes, into $W/sweeps,
#                          named for the GPU's kind (v9-fa-grid-h200)
#   gpu_call_end LOGS...   each named log's failures and summary line, every prediction's verdict, and one
#                          archive $OUT/NAME.tgz (the device tool brings back only a few files)
#   ncu_report_parts       NVIDIA's ncu_report module carried in parts (.carry/ncu0, .carry/ncu1: the wheel's
#                          files, xz-compressed and split, since the whole wheel no longer fits in a call beside the
#                          tree): stash this call's part under /tmp/ncuparts and, once both are there, unpack the
#                          module into /tmp/site (on PYTHONPATH by the device prefix)
#   profile_candidate LABEL ARGS...
#                          with NVIDIA's ncu_report module importable (the Nsight Compute copy under extras/python
#                          crashes the analysis under Python 3.12): the GPU test of `lab profile --candidate`, then
#                          `lab profile --variant v9 --candidate LABEL ARGS...` into $W/runs; else says it did not
# PYTEST: the GPU tier of tests/test_v9_gpu.py, for `step gate ... "${PYTEST[@]}" -k ...` (-k matches more
# than the test ids: 'not tma' deselects everything there).
set -uo pipefail
PYTEST=(python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_v9_gpu.py)

gpu_call_begin() {
  CALL=$1
  OUT=${OUT:-/tmp/lab-out}; W=$OUT/$CALL; L=$W/logs; mkdir -p "$L"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
  export LAB_CACHE=${LAB_CACHE:-$PWD/.lab-cache}
  T0=$SECONDS
}

step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$L/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0))s (at $((SECONDS - T0))s)" | tee -a "$L/steps.log"
}

build_v9() {
  step build 200 python3 -m lab.cli build --variant v9 &
  step build-tuning "${1:-420}" python3 -m lab.cli build --variant v9 --tuning
  wait
  grep -c "C75" "$L/build-tuning.log" | sed 's/^/ptxas C75xx notices in the tuning build: /'
}

tune() {
  local name=$1; shift
  step "tune-$name" 100 python3 -m lab.cli tune --variant v9 --profiles "$W/tunes" "$@"
}

fa_grid() {
  local gpu
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE 'H100|H200' | tr 'A-Z' 'a-z')
  step sweep "${1:-300}" python3 -m lab.cli sweep --variant v9 --preset fa-grid --mode fwd --dtype float16,bfloat16 \
    --baselines sdpa-cudnn --timing both --name "v9-fa-grid-${gpu:-gpu}" --profiles "$W/sweeps"
}

gpu_call_end() {
  local f
  for f in "$@"; do grep -E "^(FAILED|ERROR)" "$L/$f.log" | head -10; tail -1 "$L/$f.log"; done
  python3 benchmarks/tune_verdicts.py "$W/tunes"
  tar czf "$OUT/$CALL.tgz" -C "$OUT" "$CALL" && rm -rf "$W"
  echo "total $((SECONDS - T0))s"
}

ncu_report_parts() {
  local d
  mkdir -p /tmp/ncuparts
  for d in .carry/ncu*/; do [ -d "$d" ] && cp "$d"* /tmp/ncuparts/; done
  if [ "$(ls /tmp/ncuparts 2>/dev/null | wc -l)" -ge 2 ] && [ ! -d /tmp/site/ncu_report ]; then
    mkdir -p /tmp/ncux /tmp/site && cat /tmp/ncuparts/* | xz -d | tar x -C /tmp/ncux &&
      cp -r /tmp/ncux/*/purelib/ncu_report /tmp/site/ && echo "ncu_report unpacked into /tmp/site"
  fi
}

profile_candidate() {
  local label=$1; shift
  if python3 -c "import ncu_report" 2>/dev/null; then
    step profile-test 300 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider \
      tests/test_profile_candidate_gpu.py
    LAB_PROFILES="$W/runs" step profile 200 python3 -m lab.cli profile --variant v9 --candidate "$label" "$@" \
      --no-baselines --no-report
    tail -12 "$L/profile.log"
  else
    echo "no ncu_report module: lab profile --candidate and its GPU test not run"
  fi
}

#!/usr/bin/env bash
# v9 step 6's GPU call (issue 28; benchmarks/v9_notes.md, "Step 6"): build v9 and its tuning build, gate
# the three step-6 candidates (float64 with the LSE, memcheck; racecheck and synccheck), then `lab tune`
# at the fa-grid shapes they target, each with the predictions written before any run. Logs under
# $OUT/v9s6, tune stores under $OUT/tunes, a table of every prediction's verdict printed last. Each step
# has its own time limit, so a call cut short still returns the logs of the steps before.
#
#   OUT=$OUT bash benchmarks/v9_step6_gpu.sh                # call 1, two GPUs (~8 min cold): build, then the
#                                                           # float64 gate on GPU 1 beside the 11 tunes on GPU 0
#   STEPS="build slow" OUT=$OUT bash benchmarks/v9_step6_gpu.sh   # call 2 (~5 min warm, ~9 cold): racecheck and
#                                                           # synccheck through the three candidates
# One GPU: STEPS="build gate", then STEPS="tune" (warm: the builds are cached in .lab-cache), then STEPS="build slow".
# With two GPUs visible (and STEPS naming gate or slow and tune) the checks run on GPU 1 while the tunes run on
# GPU 0: those timings are not quiet (shared host CPUs, power, cooling), as in step 5's call. Say which card gave
# the numbers (the tune stores record it).
set -uo pipefail
OUT=${OUT:-/tmp/lab-out}; L=$OUT/v9s6; mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export LAB_CACHE=${LAB_CACHE:-$PWD/.lab-cache}   # ignored by git; kept between calls on a warm machine
STEPS=${STEPS:-"build gate tune"}
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
has() { [[ " $STEPS " == *" $1 "* ]]; }

step() {   # step NAME LIMIT COMMAND...: its log under $L, its exit status and seconds in steps.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$L/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0))s" >>"$L/steps.log"
}

build() {   # the plain and the tuning build side by side (two nvcc processes)
  step build 600 python3 -m lab.cli build --variant v9 &
  step build-tuning 600 python3 -m lab.cli build --variant v9 --tuning &
  wait
}

checks() {   # the three step-6 candidates: float64 with the LSE, memcheck (and the default's memcheck)
  if has gate; then
    step gate 300 python3 -m pytest -m gpu -v -rfE -p no:randomly -p no:cacheprovider tests/test_v9_gpu.py \
      -k 'q2- or uniform or compute_sanitizer_is_clean'
    # GQA through every v9 default, the three-consumer one (Long64, from Nq, Nk >= 2048) included
    step gqa 200 python3 -m pytest -m gpu -v -rfE -p no:randomly -p no:cacheprovider tests/test_gqa_gpu.py -k v9
  fi
  # ('q2-': the q2 candidates' test ids, which 'q2' alone would mix with every Nq2... case)
  if has slow; then   # racecheck and synccheck through each new candidate (6 runs)
    step slow 420 python3 -m pytest -m gpu -v -rfE -p no:randomly -p no:cacheprovider --run-slow tests/test_v9_gpu.py \
      -k 'sanitizer_clean and (q2- or uniform) and not memcheck'
  fi
}

# The tunes: fa-grid shapes (16,384 tokens; D=64 H=32, D=128 H=16), each candidate against the default.
# A = step 6 (a), the warp-uniform own-tiles (non-causal); O = step 5 (b)'s own-tiles (the control: the
# anomaly again); Q = step 6 (b), two Q buffers at the shape's head dim; L = Long64 where it is the default
# (the same kernel: a control). Bands: v9_notes.md's table, written before any run.
A='C3 BN128 S2 persistent own-tiles uniform (non-causal)'
O='C3 BN128 S2 persistent own-tiles (non-causal)'
Q64='C1 BN128 S2 persistent tma-o q2'
Q128='C2 BN128 S2 persistent pp tma-o q2'
LONG='C3 BN128 S2 persistent (non-causal)'
TUNES=(
  "4096-nc|--no-causal --shape 4,32,4096,64|$A=1.005-1.025|$O=0.945-0.97|$Q64=0.99-1.01|$LONG=0.99-1.01"
  "2048-nc|--no-causal --shape 8,32,2048,64|$A=1.01-1.03|$O=0.97-0.995|$Q64=0.99-1.01|$LONG=0.99-1.01"
  "512-128-nc|--no-causal --shape 32,16,512,128|$Q128=1.02-1.05"
  "512-128-c|--causal --shape 32,16,512,128|$Q128=1.02-1.07"
  "1024-128-nc|--no-causal --shape 16,16,1024,128|$Q128=1.01-1.03"
  "1024-128-c|--causal --shape 16,16,1024,128|$Q128=1.01-1.04"
  "512-nc|--no-causal --shape 32,32,512,64|$A=0.94-0.98|$Q64=1.00-1.02"
  "512-c|--causal --shape 32,32,512,64|$Q64=1.00-1.03"
  "1024-nc|--no-causal --shape 16,32,1024,64|$A=0.92-0.96|$Q64=1.00-1.015"
  "1024-c|--causal --shape 16,32,1024,64|$Q64=1.00-1.025"
  "8192-128-nc|--no-causal --shape 2,16,8192,128|$Q128=0.99-1.01"
)
tunes() {
  local t p; local -a parts preds
  for t in "${TUNES[@]}"; do
    IFS='|' read -ra parts <<<"$t"
    preds=()
    for p in "${parts[@]:2}"; do preds+=(--predict "$p"); done
    # shellcheck disable=SC2086
    step "tune-${parts[0]}" 120 python3 -m lab.cli tune --variant v9 --dtype float16 ${parts[1]} --profiles "$OUT/tunes" \
      "${preds[@]}"
  done
}

has build && build
if [ "$GPUS" -ge 2 ] && has tune && { has gate || has slow; }; then
  (export CUDA_VISIBLE_DEVICES=1; checks) &
  (export CUDA_VISIBLE_DEVICES=0; tunes)
  wait
else
  checks
  has tune && tunes
fi

# The short report: every step's status, the checks' last lines, then each prediction's verdict.
cat "$L/steps.log"
for f in build build-tuning; do [ -f "$L/$f.log" ] && tail -3 "$L/$f.log"; done
for f in gate gqa slow; do [ -f "$L/$f.log" ] && { grep -E "^(FAILED|ERROR)" "$L/$f.log" | head -10; tail -1 "$L/$f.log"; }; done
python3 benchmarks/tune_verdicts.py "$OUT/tunes"
tar czf "$OUT/v9s6-logs.tgz" -C "$OUT" v9s6 2>/dev/null
exit 0

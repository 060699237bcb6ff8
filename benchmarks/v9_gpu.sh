#!/usr/bin/env bash
# One GPU call for v9 (issue 28): build v6 and v9, check v9 (lab check in fp16/bf16, causal and not;
# tests/test_v9_gpu.py with the slow tier: many tiles per CTA, LSE, compute-sanitizer memcheck,
# racecheck, synccheck), then the fa-grid forward sweep of v6 and v9 beside SDPA cuDNN, stored under
# $LAB_PROFILES (default /tmp/v9-profiles: a store's many files stay out of $OUT until tarred) and
# tarred into $OUT/v9-logs.tgz with the logs. Each step has its own time limit, so a call cut short
# still returns the logs of the steps before.
#   STEPS="build check tests sweep slow" bash benchmarks/v9_gpu.sh   (slow: racecheck, synccheck)
#   STEPS="build probe" bash benchmarks/v9_gpu.sh   (probe: lab check on two shapes where every CTA
#     runs several tiles, the first run's hang; seconds each when it works, rc=124 when it hangs)
set -uo pipefail
OUT=${OUT:-/tmp/lab-out}; L=$OUT/v9; mkdir -p "$L"
export LAB_PROFILES=${LAB_PROFILES:-/tmp/v9-profiles}
STEPS=${STEPS:-"build check tests sweep slow"}
for s in $STEPS; do
  t0=$SECONDS
  case $s in
    build) timeout 240 python3 -m lab.cli build --variant ${BUILD_VARIANTS:-v6,v9} >"$L/build.log" 2>&1 ;;
    probe) for sh in "float16 --causal 8,40,300,64" "bfloat16 --no-causal 8,40,300,128"; do set -- $sh
             timeout 90 python3 -m lab.cli check --variant v9 --dtype $1 $2 --shape $3 >>"$L/probe.log" 2>&1
             echo "lab check v9 $sh rc=$?" >>"$L/probe.log"; done ;;
    # check: the 24 seeded shapes per (dtype, mask). Needs lab check's f0a0e46 (--dtype and --causal
    # shape the seeded list): before it, the four runs were one fp16 mixed-causal list (28e592a's run).
    check) for dt in ${CHECK_DTYPES:-float16 bfloat16}; do for c in --no-causal --causal; do
             timeout 120 python3 -m lab.cli check --variant v9 --dtype $dt $c >>"$L/check.log" 2>&1
             echo "lab check v9 $dt $c rc=$?" >>"$L/check.log"; done; done ;;
    tests) timeout ${TESTS_TIMEOUT:-300} python3 -m pytest -m gpu -v -p no:cacheprovider tests/test_v9_gpu.py >"$L/tests.log" 2>&1 ;;
    slow)  timeout ${SLOW_TIMEOUT:-300} python3 -m pytest -m gpu -v -p no:cacheprovider --run-slow -k "racecheck or synccheck" \
             tests/test_v9_gpu.py >"$L/slow.log" 2>&1 ;;
    sweep) timeout -s INT ${SWEEP_TIMEOUT:-240} python3 -m lab.cli sweep --variant ${SWEEP_VARIANTS:-v6,v9} --preset fa-grid --mode fwd \
             --dtype ${SWEEP_DTYPES:-float16,bfloat16} --baselines sdpa-cudnn --name ${SWEEP_NAME:-fa-grid-v9} ${SWEEP_ARGS:-} >"$L/sweep.log" 2>&1 ;;
  esac
  echo "$s rc=$? $((SECONDS-t0))s" | tee -a "$L/steps.log"
done
tar czf "$OUT/v9-logs.tgz" -C "$OUT" v9 -C "$(dirname "$LAB_PROFILES")" "$(basename "$LAB_PROFILES")" 2>/dev/null
[ -f "$L/build.log" ] && tail -4 "$L/build.log"
[ -f "$L/probe.log" ] && tail -12 "$L/probe.log"
[ -f "$L/check.log" ] && grep -E "rc=|FAIL|fail|passed|shapes" "$L/check.log" | head -20
for t in tests slow; do [ -f "$L/$t.log" ] && { grep -E "FAILED|ERROR|Error" "$L/$t.log" | head -20; tail -2 "$L/$t.log"; }; done
[ -f "$L/sweep.log" ] && tail -${SWEEP_TAIL:-70} "$L/sweep.log"
exit 0

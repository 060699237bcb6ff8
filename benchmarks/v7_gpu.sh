#!/usr/bin/env bash
# One GPU call for a backward rung (v7 by default; RUNG=v8 for the Hopper one): build, check, time,
# sanitize; logs under $OUT/$RUNG, tarred into $OUT/$RUNG-logs.tgz.
#   STEPS="check bench tests" bash benchmarks/v7_gpu.sh
#   RUNG=v8 STEPS="labcheck memcheck racecheck synccheck bench" bash benchmarks/v7_gpu.sh
set -uo pipefail
OUT=${OUT:-/tmp/lab-out}; RUNG=${RUNG:-v7}; L=$OUT/$RUNG; mkdir -p "$L"
STEPS=${STEPS:-"check bench tests"}
DEV="python3 benchmarks/v7_dev.py"
for s in $STEPS; do
  t0=$SECONDS
  case $s in
    labcheck) timeout 300 python3 -m lab.cli check --variant $RUNG --mode bwd ${CHECK_ARGS:-} >"$L/labcheck.log" 2>&1 ;;
    check) timeout 240 $DEV check --rung $RUNG >"$L/check.log" 2>&1 ;;
    bench) timeout 300 $DEV bench --rung $RUNG ${BENCH_ARGS:-} >"$L/bench.log" 2>&1 ;;
    tune)  timeout 300 $DEV tune --rung $RUNG >"$L/tune.log" 2>&1 ;;
    tcheck) timeout 240 $DEV check --rung $RUNG --tuning >"$L/check.log" 2>&1 ;;
    tbench) timeout 300 $DEV bench --rung $RUNG --tuning ${BENCH_ARGS:-} >"$L/bench.log" 2>&1 ;;
    memcheck|racecheck|synccheck)
           PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool $s --error-exitcode 3 \
             $DEV sanitize --rung $RUNG ${SAN_ARGS:-} >"$L/$s.log" 2>&1 ;;
    sweep) timeout -s INT ${SWEEP_TIMEOUT:-400} python3 -m lab.cli sweep --variant ${SWEEP_VARIANTS:-v7,$RUNG} --preset fa-grid --mode bwd \
             --baselines sdpa-cudnn,sdpa-flash ${SWEEP_ARGS:-} >"$L/sweep.log" 2>&1 ;;
    tests) timeout 400 python3 -m pytest -m gpu -q -x -p no:cacheprovider ${GPU_TESTS:-tests/test_v7_gpu.py} >"$L/tests.log" 2>&1 ;;
    ncu)   timeout 300 ncu --clock-control none --set ${NCU_SET:-detailed} -k regex:bwd -c ${NCU_COUNT:-4} -f -o "$L/$RUNG-bwd" \
             $DEV sanitize --rung $RUNG >"$L/ncu.log" 2>&1 ;;
  esac
  echo "$s rc=$? $((SECONDS-t0))s" | tee -a "$L/steps.log"
done
tar czf "$OUT/$RUNG-logs.tgz" -C "$OUT" $RUNG
[ -f "$L/labcheck.log" ] && { grep -E "FAIL|fail|wrong|Error|error|passed|shapes" "$L/labcheck.log" | head -30; tail -3 "$L/labcheck.log"; }
[ -f "$L/check.log" ] && grep -E "FAIL|failure|Error|error" "$L/check.log" | head -20
tail -3 "$L/tests.log" 2>/dev/null
for t in memcheck racecheck synccheck; do [ -f "$L/$t.log" ] && { echo "== $t"; grep -E "SUMMARY|sanitize workload|rror" "$L/$t.log" | head -8; }; done
[ -f "$L/bench.log" ] && grep -v "^  " "$L/bench.log" | tail -${BENCH_TAIL:-80}
[ -f "$L/sweep.log" ] && tail -${SWEEP_TAIL:-60} "$L/sweep.log"
exit 0

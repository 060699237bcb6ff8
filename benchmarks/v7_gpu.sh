#!/usr/bin/env bash
# One GPU call for the backward rung: build, check, time, sanitize; logs under $OUT/v7, tarred.
#   STEPS="check bench tests" bash benchmarks/v7_gpu.sh
set -uo pipefail
OUT=${OUT:-/tmp/lab-out}; L=$OUT/v7; mkdir -p "$L"
STEPS=${STEPS:-"check bench tests"}
for s in $STEPS; do
  t0=$SECONDS
  case $s in
    check) timeout 240 python3 benchmarks/v7_dev.py check >"$L/check.log" 2>&1 ;;
    bench) timeout 300 python3 benchmarks/v7_dev.py bench ${BENCH_ARGS:-} >"$L/bench.log" 2>&1 ;;
    tune)  timeout 300 python3 benchmarks/v7_dev.py tune >"$L/tune.log" 2>&1 ;;
    tcheck) timeout 240 python3 benchmarks/v7_dev.py check --tuning >"$L/check.log" 2>&1 ;;
    tbench) timeout 300 python3 benchmarks/v7_dev.py bench --tuning ${BENCH_ARGS:-} >"$L/bench.log" 2>&1 ;;
    memcheck|racecheck)
           PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool $s --error-exitcode 3 \
             python3 benchmarks/v7_dev.py sanitize ${SAN_ARGS:-} >"$L/$s.log" 2>&1 ;;
    tests) timeout 400 python3 -m pytest -m gpu -q -x -p no:cacheprovider ${GPU_TESTS:-tests/test_v7_gpu.py} >"$L/tests.log" 2>&1 ;;
    ncu)   timeout 300 ncu --clock-control none --set ${NCU_SET:-detailed} -k regex:bwd -c ${NCU_COUNT:-4} -f -o "$L/v7-bwd" \
             python3 benchmarks/v7_dev.py sanitize >"$L/ncu.log" 2>&1 ;;
  esac
  echo "$s rc=$? $((SECONDS-t0))s" | tee -a "$L/steps.log"
done
tar czf "$OUT/v7-logs.tgz" -C "$OUT" v7
grep -E "FAIL|failure|Error|error" "$L/check.log" | head -20
tail -3 "$L/tests.log" 2>/dev/null
for t in memcheck racecheck; do [ -f "$L/$t.log" ] && { echo "== $t"; grep -E "SUMMARY|sanitize workload" "$L/$t.log"; }; done
cat "$L/bench.log" 2>/dev/null | grep -v "^  " | tail -${BENCH_TAIL:-80}

#!/usr/bin/env bash
# One GPU call for GQA on the Hopper rungs (issues 27, 28: "GQA shapes checked and timed"): build v6,
# v7 and v8 (the binding changed: every extension rebuilds once), tests/test_gqa_gpu.py (v8's
# backward and v6's and v8's forwards against float64 through the lab's check on 16:2, 32:8, 8:1,
# ragged N, causal and not, fp16 and bf16; dK/dV bitwise across runs; v7's binding refusing K/V
# heads; compute-sanitizer memcheck), lab check of v8's backward (its 24 default shapes hold two GQA
# corners) and of v6's and v8's forwards on GQA shapes, then lab bench --mode bwd of a GQA shape and of
# the same shape without GQA beside SDPA cuDNN and FlashAttention-2. Logs tarred into
# $OUT/gqa-logs.tgz; each step has its own time limit, so a call cut short returns the earlier logs.
#   STEPS="build tests check bench" bash benchmarks/gqa_gpu.sh      (slow: racecheck on GQA shapes)
set -uo pipefail
OUT=${OUT:-/tmp/lab-out}; L=$OUT/gqa; mkdir -p "$L"
export LAB_PROFILES=${LAB_PROFILES:-/tmp/gqa-profiles}
STEPS=${STEPS:-"build tests check bench"}
for s in $STEPS; do
  t0=$SECONDS
  case $s in
    build) timeout 300 python3 -m lab.cli build --variant v6,v7,v8 >"$L/build.log" 2>&1 ;;
    tests) timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -m gpu -v -p no:cacheprovider tests/test_gqa_gpu.py >"$L/tests.log" 2>&1 ;;
    slow)  timeout ${SLOW_TIMEOUT:-420} python3 -m pytest -m gpu -v -p no:cacheprovider --run-slow -k racecheck \
             tests/test_gqa_gpu.py >"$L/slow.log" 2>&1 ;;
    check) for args in "--variant v8 --mode bwd --dtype float16" "--variant v8 --mode bwd --dtype bfloat16 --shapes 13" \
                       "--variant v8 --mode bwd --dtype bfloat16 --shape 2,32:8,1000,128 --causal" \
                       "--variant v8 --mode bwd --dtype float16 --shape 1,16:2,4093,128" \
                       "--variant v8 --mode bwd --dtype float16 --shape 2,8:1,777,1500,64" \
                       "--variant v6,v8 --dtype float16 --shape 2,16:2,1000,1000,64" \
                       "--variant v6,v8 --dtype bfloat16 --shape 1,8:1,1023,128 --causal"; do
             echo "== lab check $args" >>"$L/check.log"
             timeout 150 python3 -m lab.cli check $args >>"$L/check.log" 2>&1
             echo "rc=$?" >>"$L/check.log"; done ;;
    bench) for shape in 4,32:8,4096,128 4,32,4096,128; do
             echo "== lab bench --mode bwd --shape $shape" >>"$L/bench.log"
             timeout 150 python3 -m lab.cli bench --variant v8 --mode bwd --shape $shape --dtype bfloat16 \
               --backends cudnn,flash --reps 30 >>"$L/bench.log" 2>&1
             echo "rc=$?" >>"$L/bench.log"; done ;;
  esac
  echo "$s rc=$? $((SECONDS-t0))s" | tee -a "$L/steps.log"
done
tar czf "$OUT/gqa-logs.tgz" -C "$OUT" gqa 2>/dev/null
[ -f "$L/build.log" ] && tail -4 "$L/build.log"
for t in tests slow; do [ -f "$L/$t.log" ] && { grep -E "FAILED|ERROR|Error" "$L/$t.log" | head -20; tail -2 "$L/$t.log"; }; done
[ -f "$L/check.log" ] && grep -E "^== |rc=|passed|failed|wrong|error" "$L/check.log" | head -40
[ -f "$L/bench.log" ] && tail -40 "$L/bench.log"
exit 0

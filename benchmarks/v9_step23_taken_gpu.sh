#!/usr/bin/env bash
# v9 step 23 taken (issue 28; benchmarks/v9_notes.md, "Step 23"): the static walk's one-warpgroup non-causal kernel
# below kLongRows, causal ping-pong below 1024 and D=128 ping-pong hand the consumers their tile (HandsTile). One call:
# the L2 flush probe's table (the step 23 call's probe step did not run); both builds; the default's gate (float64,
# the LSE, the counters' test, memcheck); racecheck and synccheck of the default (the slow tier); the GQA forwards; the
# D=128 default against the index-computing kernel at 1,16,16384,128 causal; the fa-grid.
# Predicted (written before the run): at 1,16,16384,128 causal fp16 the index-computing kernel 0.990-1.005x the
# default (graph); the grid as v9's header, "Step 23", says.
#
#   OUT=$OUT bash benchmarks/v9_step23_taken_gpu.sh   # carry .carry/wheels and .carry/ncu0
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s23t
ncu_report_parts
step probes 240 bash benchmarks/l2_flush_probes.sh "$W/l2" &
build_v9 420
wait
step gate 200 "${PYTEST[@]}" -k '(not candidate and not racecheck and not synccheck and not counters) or (counters and default)'
step sanitizers 300 "${PYTEST[@]}" -m 'gpu and slow or gpu' -k 'test_v9_compute_sanitizer_is_clean and (racecheck or synccheck)'
step gqa 150 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_gqa_gpu.py \
  -k 'forwards and v9'
tune c16384-d128-fp16 --dtype float16 --causal --shape 1,16,16384,128 --timing graph --reps 30 --against cudnn \
  --predict "C2 BN128 S2 persistent pp tma-o q2=0.990-1.005"
fa_grid
rm -f "$W"/l2/*.ncu-rep
grep -h "the default against" "$L"/tune-*.log
tail -12 "$L/probes.log"
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" "$L/sanitizers.log" "$L/gqa.log" | tail -8
gpu_call_end gate sanitizers gqa

#!/usr/bin/env bash
# v9 step 19 (c) taken (issue 28; benchmarks/v9_notes.md, "Step 19 (c)"): the D=64 causal default on the dynamic,
# longest-first walk from 1024 (was 8192), with step 19 (b)'s zeroed counters in the plain build (its tunes, e45f135:
# 1.011x fp16 and bf16 at 16,32,1024,64, 1.000x at 2048, 1.002x at 4096). One call: both builds; the default's gate
# (float64 and the LSE: 2,9,1100,1030,64 causal is the new ping-pong walk's case, 1,20,2100,2050 the one-warpgroup's)
# and memcheck/racecheck (a 1100 x 1040 causal launch added); the counters' test; `lab check` of GQA shapes on the new
# walk; then the H200 fa-grid.
# Predicted (written before the run; v9 / cuDNN, graph timing, against 20261128-123359):
#   D=64 causal 1024: from 0.995x fp16 / 0.989x bf16 to 1.00-1.02x;
#   D=64 causal 2048 and 4096: within 1% of that grid's ratios (1.000x and 1.002x the old default in `lab tune`);
#   every other cell (its kernel unchanged) within 1% bar the spread between runs.
#
#   OUT=$OUT bash benchmarks/v9_step19c_taken_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s19ct
build_v9 300
step gate 200 "${PYTEST[@]}" -k '(not candidate and not racecheck and not synccheck) or counters'
step sanitizers 240 "${PYTEST[@]}" -m 'gpu and slow or gpu' -k 'test_v9_compute_sanitizer_is_clean and (memcheck or racecheck)'
step check-gqa 200 bash -c 'python3 -m lab.cli check --variant v9 --dtype float16 --shape 2,16:2,1100,1030,64 --causal &&
  python3 -m lab.cli check --variant v9 --dtype bfloat16 --shape 1,8:1,2100,2050,64 --causal'
fa_grid
tail -4 "$L/check-gqa.log"
gpu_call_end gate sanitizers

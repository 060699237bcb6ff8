#!/usr/bin/env bash
# v9 step 21 (issue 28; benchmarks/v9_notes.md, "Step 21"): the D=64 causal one-warpgroup kernel in [2048, 8192) back on
# the dynamic, longest-first walk, by device time (`lab tune --against cudnn --timing graph`, bffff09: the walk's
# candidate 1.005x fp16 and 1.0085x bf16 the static default at 8,32,2048,64). One call: both builds; the default's gate
# (float64 and the LSE: 1,20,2100,2050,64 causal is the new walk's case) and the counters' test (the default's two
# walking kernels back to back on one stream's counters, and captured); memcheck (a 2100 x 2050 causal launch added);
# the tunes at 2048 and 4096 by graph against cuDNN (candidate 5 is the static walk this step leaves); the fa-grid.
# Predicted (written before the run, as v9's header says):
#   the static walk's candidate 0.990-0.997x the new default at 8,32,2048,64 causal (fp16 and bf16), 0.99-1.00x at
#   4,32,4096,64; the default against cuDNN 1.002-1.01x at 2048; in the grid, the 2048 and 4096 causal D=64 cells up
#   by 0.3-0.9% (graph) against `20261128-162949`, every other cell within the spread between grids (about 0.5%).
#
#   OUT=$OUT bash benchmarks/v9_step21_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s21
build_v9 300
step gate 200 "${PYTEST[@]}" -k '(not candidate and not racecheck and not synccheck) or counters'
STATIC="C1 BN128 S2 persistent tma-o half-softmax tree-max row-limit (causal)"
tune c2048-fp16 --dtype float16 --causal --shape 8,32,2048,64 --timing graph --reps 60 --against cudnn \
  --predict "$STATIC=0.990-0.997"
tune c2048-bf16 --dtype bfloat16 --causal --shape 8,32,2048,64 --timing graph --reps 60 --against cudnn \
  --predict "$STATIC=0.990-0.997"
tune c4096-fp16 --dtype float16 --causal --shape 4,32,4096,64 --timing graph --reps 60 --against cudnn \
  --predict "$STATIC=0.99-1.00"
fa_grid
grep -h "the default against" "$L"/tune-*.log
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" | tail -6
gpu_call_end gate

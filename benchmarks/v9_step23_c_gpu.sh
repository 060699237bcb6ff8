#!/usr/bin/env bash
# v9 step 23, the cells left (issue 28; benchmarks/v9_notes.md, "Step 23 taken"): after the hand-off was taken on the
# static walk, its H200 fa-grid (`20261128-201334`) had one graph cell under 1.0 (D=64 causal 2048 fp16, 0.9989x,
# level by its CI95) and D=128 non-causal 4096-16384 1.1-1.4% slower than the grid before, 8192 and 16384 on a kernel
# that did not change. One call: both builds; the float64 gate and memcheck of the 176-key kernel with the tile handed;
# tunes by graph against cuDNN: every causal candidate at 8,32,2048,64 (fp16, bf16), the handed D=128 default against
# the index-computing one at 4,16,4096,128, the 176-key kernel handed at 2,16,8192,128.
# Predicted (written before the run; candidate time against the default's):
#   8,32,2048,64 causal: the walking ping-pong with the tile handed 0.990-1.010x (fp16 and bf16);
#   4,16,4096,128 non-causal fp16: the index-computing ping-pong 0.995-1.003x;
#   2,16,8192,128 non-causal fp16: the 176-key kernel with the tile handed 1.000-1.006x.
#
#   OUT=$OUT bash benchmarks/v9_step23_c_gpu.sh   # carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s23c
build_v9 420
step gate 200 "${PYTEST[@]}" -k 'candidate_matches_float64 and BN176 and handed'
step sanitizers 200 "${PYTEST[@]}" -k 'candidate_is_sanitizer_clean and BN176 and handed and memcheck'
PP="C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)"
for dt in float16 bfloat16; do
  tune "c2048-d64-$dt" --dtype "$dt" --causal --shape 8,32,2048,64 --timing graph --reps 60 --against cudnn \
    --predict "$PP=0.990-1.010"
done
tune nc4096-d128-fp16 --dtype float16 --no-causal --shape 4,16,4096,128 --timing graph --reps 60 --against cudnn \
  --predict "C2 BN128 S2 persistent pp tma-o q2=0.995-1.003"
tune nc8192-d128-fp16 --dtype float16 --no-causal --shape 2,16,8192,128 --timing graph --reps 40 --against cudnn \
  --predict "C2 BN176 S2 persistent pp o-in-v tile-handed (non-causal)=1.000-1.006"
grep -h "the default against" "$L"/tune-*.log
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" "$L/sanitizers.log" | tail -8
gpu_call_end gate sanitizers

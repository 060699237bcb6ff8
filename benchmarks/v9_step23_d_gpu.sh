#!/usr/bin/env bash
# v9 step 23, the ping-pong up to 4096 (issue 28; benchmarks/v9_notes.md, "Step 23 taken"): with the tile handed to
# both D=64 causal walking kernels, the ping-pong ran 1.008x / 1.006x the one-warpgroup default at 8,32,2048,64 (call
# C, be7d3c3), so the default's ping-pong rule moves from 2048 to 4096 (kShortCausal). One call: both builds; the
# default's gate (float64, the LSE, the counters' test, memcheck); the one-warpgroup kernel against the new default
# (the ping-pong) at 5,32,3072,64 causal fp16, and the ping-pong against the default (the one-warpgroup kernel) at
# 4,32,4096,64 (graph); the fa-grid.
# Predicted (written before the run; candidate time against the default's): the one-warpgroup kernel 0.990-1.002x at
# 3072 (the ping-pong ahead or level); the ping-pong 0.990-1.010x at 4096; the grid: D=64 causal 2048 1.004-1.010x
# faster than in `20261128-201334`, the other cells within the spread between grids; graph 48 of 48 >= cuDNN.
#
#   OUT=$OUT bash benchmarks/v9_step23_d_gpu.sh   # carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s23d
build_v9 420
step gate 200 "${PYTEST[@]}" -k '(not candidate and not racecheck and not synccheck and not counters) or (counters and default)'
ONE="C1 BN128 S2 longest-first tma-o half-softmax tree-max row-limit tile-handed (causal)"
tune c3072-d64-fp16 --dtype float16 --causal --shape 5,32,3072,64 --timing graph --reps 40 --predict "$ONE=0.990-1.002"
PP="C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)"
tune c4096-d64-fp16 --dtype float16 --causal --shape 4,32,4096,64 --timing graph --reps 40 --predict "$PP=0.990-1.010"
fa_grid
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" | tail -4
gpu_call_end gate

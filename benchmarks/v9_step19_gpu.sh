#!/usr/bin/env bash
# v9 step 19 (issue 28; benchmarks/v9_notes.md, "Step 19"): the dynamic, longest-first tile walk (tile_scheduler.cuh's
# LongestFirst: a tile counter in the forward workspace, each CTA taking the next index as it frees up, the list
# longest first in L2-sized sections of heads) under the causal defaults' own kernels, as `lab tune` candidates.
# One call: both builds, the gate of the new candidates (float64, the LSE, ragged, Nq != Nk, fewer tiles than CTAs),
# memcheck and racecheck of each, then the tunes against the defaults (static walk), fp16 unless named.
# Predicted (written before the run; the CPU model of benchmarks/v9_notes.md "Step 19": the static walk's busiest CTA
# 3.1% over the mean on these grids, the longest-first list within 0.5-1%, less the counter's memset, ~1 us a call):
#   16,32,1024,64 causal, LF ping-pong:      1.010-1.030x (both dtypes)
#   32,32,512,64 causal, LF ping-pong:       1.000-1.025x
#   8,32,2048,64 causal, LF one warpgroup:   1.000-1.030x (two CTAs an SM: a CTA alone in the tail runs faster)
#   4,32,4096,64 causal, LF one warpgroup:   1.000-1.030x
#   1,32,16384,64 causal, LF three consumers: 1.015-1.050x (the static walk's 5.5% by the model)
#   16,16,1024,128 causal, LF ping-pong:     1.010-1.030x
#   1,16,16384,128 causal, LF ping-pong:     1.005-1.030x
# First run (4eadda9, one H200): correct (gate 25, memcheck and racecheck 6), and every prediction missed, 0.91-0.98x:
# the tile read by the consumers from shared memory under a branch on tid made ptxas hold the tile, and the key loop's
# descriptor arithmetic after it, in per-thread registers (+46-81 R2UR a kernel). The role is now a type (fwd_wgmma.cuh's
# advance), the key loops match the static walk's but for a few HGMMA/UMOV swaps (cuobjdump, nvcc 13.0); same
# predictions for the second run.
#
#   OUT=$OUT bash benchmarks/v9_step19_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s19
PP='C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit (causal)'
C1='C1 BN128 S2 longest-first tma-o half-softmax tree-max row-limit (causal)'
C3='C3 BN128 S2 longest-first (causal)'
P128='C2 BN128 S2 longest-first pp tma-o q2 (causal)'
build_v9 300
step gate 300 "${PYTEST[@]}" -k 'longest and matches_float64'
step sanitizers 300 "${PYTEST[@]}" -m 'gpu and slow or gpu' -k 'test_v9_step4_candidate_is_sanitizer_clean and longest and (memcheck or (racecheck and pp))'
tune 1024-c-64 --dtype float16 --causal --shape 16,32,1024,64 --predict "$PP=1.01-1.03"
tune 1024-c-64-bf16 --dtype bfloat16 --causal --shape 16,32,1024,64 --predict "$PP=1.01-1.03"
tune 512-c-64 --dtype float16 --causal --shape 32,32,512,64 --predict "$PP=1.00-1.025"
tune 2048-c-64 --dtype float16 --causal --shape 8,32,2048,64 --predict "$C1=1.00-1.03"
tune 4096-c-64 --dtype float16 --causal --shape 4,32,4096,64 --predict "$C1=1.00-1.03"
tune 16384-c-64 --dtype float16 --causal --shape 1,32,16384,64 --predict "$C3=1.015-1.05"
tune 1024-c-128 --dtype float16 --causal --shape 16,16,1024,128 --predict "$P128=1.01-1.03"
tune 16384-c-128 --dtype float16 --causal --shape 1,16,16384,128 --predict "$P128=1.005-1.03"
gpu_call_end gate sanitizers

#!/usr/bin/env bash
# v9 step 15's GPU call (issue 28; benchmarks/v9_notes.md, "Step 15"): D=64 with two consumer warpgroups that do not
# take turns (BM = 128, one CTA per SM, O by TMA, two Q buffers), and the same with the D=64 causal default's changes.
# One call on one GPU: both builds; the gate (float64 with the LSE and memcheck through both candidates, then
# racecheck and synccheck); the tunes, each prediction written before any run. Logs and tune stores under $OUT in
# one archive, every prediction's verdict last.
#
# Its candidates were retired after the run (they lost): check out 22ee708 to run it again.
#   OUT=$OUT bash benchmarks/v9_step15_gpu.sh   # name nvidia-h100-x1; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s15
build_v9 300
P2='C2 BN128 S2 persistent tma-o q2'
P2L='C2 BN128 S2 persistent tma-o q2 half-softmax tree-max row-limit (causal)'
SEL='C2 and tma-o and q2 and not pp'
step gate 200 "${PYTEST[@]}" -k "$SEL and (matches_float64 or memcheck)"
step sanitizers 300 "${PYTEST[@]}" -m 'gpu and slow' -k "$SEL and (racecheck or synccheck)"
# Against the default at each shape: non-causal one warpgroup with two Q buffers below 2048, Long64 (BM = 192) from
# 2048; causal ping-pong below 1024, one warpgroup with the half tile, tree and row limit from 1024.
tune 1024-nc-64 --dtype float16 --no-causal --shape 16,32,1024,64 --predict "$P2=0.97-1.03"
tune 1024-nc-64-bf16 --dtype bfloat16 --no-causal --shape 16,32,1024,64 --predict "$P2=0.97-1.03"
tune 2048-nc-64 --dtype float16 --no-causal --shape 8,32,2048,64 --predict "$P2=0.98-1.03"
tune 2048-nc-64-bf16 --dtype bfloat16 --no-causal --shape 8,32,2048,64 --predict "$P2=0.98-1.03"
tune 4096-nc-64 --dtype float16 --no-causal --shape 4,32,4096,64 --predict "$P2=0.96-1.01"
tune 512-c-64 --dtype float16 --causal --shape 32,32,512,64 --predict "$P2L=0.96-1.01"
tune 1024-c-64 --dtype float16 --causal --shape 16,32,1024,64 --predict "$P2L=0.97-1.03" --predict "$P2=0.95-1.01"
tune 1024-c-64-bf16 --dtype bfloat16 --causal --shape 16,32,1024,64 --predict "$P2L=0.97-1.03"
tune 2048-c-64 --dtype float16 --causal --shape 8,32,2048,64 --predict "$P2L=0.97-1.02"
tune 2048-c-64-bf16 --dtype bfloat16 --causal --shape 8,32,2048,64 --predict "$P2L=0.97-1.02"
gpu_call_end gate sanitizers

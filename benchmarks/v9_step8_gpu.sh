#!/usr/bin/env bash
# v9 step 8's GPU call (issue 28; benchmarks/v9_notes.md, "Step 8"): build v9 and its tuning build, gate the
# two step-8 candidates (ping-pong at D=64 with O by TMA, and with two Q buffers: float64 with the LSE and
# memcheck; racecheck and synccheck), then `lab tune` at the D=64 shapes they target, each with the
# predictions written before any run. Logs and tune stores under $OUT, in one archive ($OUT/v9s8.tgz: the
# device tool brings back only a few files), and a table of every prediction's verdict printed last.
#
#   OUT=$OUT bash benchmarks/v9_step8_gpu.sh      # one GPU, about 7 minutes cold
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s8
build_v9
P=("${PYTEST[@]}")
# 'pp and tma and D64 ...': the two candidates' D=64 cases ('not tma' would deselect everything: -k matches
# more than the test ids)
step gate 200 "${P[@]}" -k 'pp and tma and (D64 or 64-4-both) and (matches_float64 or memcheck)'
PP='C2 BN128 S2 persistent pp tma-o'
Q2='C2 BN128 S2 persistent pp tma-o q2'
tune 512-c --dtype float16 --causal --shape 32,32,512,64 --predict "$PP=0.95-1.00" --predict "$Q2=0.98-1.04"
tune 512-c-bf16 --dtype bfloat16 --causal --shape 32,32,512,64 --predict "$PP=0.95-1.00" --predict "$Q2=0.98-1.04"
tune 1024-c --dtype float16 --causal --shape 16,32,1024,64 --predict "$PP=0.95-1.00" --predict "$Q2=0.97-1.03"
tune 2048-c --dtype float16 --causal --shape 8,32,2048,64 --predict "$PP=0.94-0.99" --predict "$Q2=0.96-1.02"
tune 4096-c --dtype float16 --causal --shape 4,32,4096,64 --predict "$PP=0.94-0.99" --predict "$Q2=0.95-1.01"
tune 512-nc --dtype float16 --no-causal --shape 32,32,512,64 --predict "$PP=0.90-0.96" --predict "$Q2=0.92-0.98"
step slow 200 "${P[@]}" --run-slow -k 'pp and tma and 64-4-both and sanitizer and not memcheck'
gpu_call_end gate slow

#!/usr/bin/env bash
# v9 step 9's GPU call (issue 28; benchmarks/v9_notes.md, "Step 9"): build v9 and its tuning build, gate the
# two step-9 candidates (the next tile's S_0 under the epilogue on the D=64 defaults, with one Q buffer and
# two: float64 with the LSE and memcheck; racecheck and synccheck), then `lab tune` at the D=64 shapes they target, each with the
# predictions written before any run. Logs and tune stores under $OUT, in one archive ($OUT/v9s9.tgz: the
# device tool brings back only a few files), and a table of every prediction's verdict printed last.
#
#   OUT=$OUT bash benchmarks/v9_step9_gpu.sh      # one GPU, about 7 minutes cold
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s9
build_v9
P=("${PYTEST[@]}")
step gate 200 "${P[@]}" -k 'next-s0 and (matches_float64 or memcheck)'
N1='C1 BN128 S2 persistent tma-o next-s0'
N2='C1 BN128 S2 persistent tma-o q2 next-s0'
tune 512-c --dtype float16 --causal --shape 32,32,512,64 --predict "$N1=1.01-1.04" --predict "$N2=1.015-1.05"
tune 512-c-bf16 --dtype bfloat16 --causal --shape 32,32,512,64 --predict "$N1=1.01-1.04" --predict "$N2=1.015-1.05"
tune 1024-c --dtype float16 --causal --shape 16,32,1024,64 --predict "$N1=1.005-1.025" --predict "$N2=1.01-1.03"
tune 2048-c --dtype float16 --causal --shape 8,32,2048,64 --predict "$N1=1.00-1.015" --predict "$N2=1.00-1.02"
tune 4096-c --dtype float16 --causal --shape 4,32,4096,64 --predict "$N1=0.995-1.01" --predict "$N2=0.995-1.012"
tune 512-nc --dtype float16 --no-causal --shape 32,32,512,64 --predict "$N1=0.93-1.00" --predict "$N2=1.01-1.03"
tune 1024-nc --dtype float16 --no-causal --shape 16,32,1024,64 --predict "$N1=0.95-1.00" --predict "$N2=1.005-1.02"
step slow 200 "${P[@]}" --run-slow -k 'next-s0 and 64-4-both and sanitizer and not memcheck'
gpu_call_end gate slow

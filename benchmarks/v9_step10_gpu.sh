#!/usr/bin/env bash
# v9 step 10's GPU call (issue 28; benchmarks/v9_notes.md, "Step 10"): build v9 and its tuning build, gate the
# new causal D=64 default from Nq, Nk >= 8192 (three consumers, Long64) and its candidate below it (float64
# with the LSE at 8200 x 8192; memcheck through the candidate), `lab tune` at the D=64 causal shapes each side
# of the rule, with the predictions written before any run, and the fa-grid's D=64 causal cells from 4096 against
# cuDNN (graph replay). Logs, tune and sweep stores under $OUT, in one archive ($OUT/v9s10.tgz: the device tool
# brings back only a few files), and a table of every prediction's verdict printed last.
#
#   OUT=$OUT bash benchmarks/v9_step10_gpu.sh      # one GPU, about 8 minutes cold
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s10
build_v9
P=("${PYTEST[@]}")
step gate 300 "${P[@]}" -k 'test_v9_matches_float64 and Nq8200 or test_v9_writes and Nq8200 or 64-1-causal'
OLD='C1 BN128 S2 persistent tma-o'
L3='C3 BN128 S2 persistent (causal)'
tune 2048-c --dtype float16 --causal --shape 8,32,2048,64 --predict "$L3=0.90-0.97"
tune 4096-c --dtype float16 --causal --shape 4,32,4096,64 --predict "$L3=0.98-1.04"
tune 8192-c --dtype float16 --causal --shape 2,32,8192,64 --predict "$OLD=0.92-0.96" --predict "$L3=0.98-1.02"
tune 8192-c-bf16 --dtype bfloat16 --causal --shape 2,32,8192,64 --predict "$OLD=0.92-0.96"
tune 16384-c --dtype float16 --causal --shape 1,32,16384,64 --predict "$OLD=0.925-0.97"
step sweep 200 python3 -m lab.cli sweep --variant v9 --shape 4,32,4096,64 --shape 2,32,8192,64 --shape 1,32,16384,64 \
  --causal yes --dtype float16,bfloat16 --baselines sdpa-cudnn --timing graph --name v9-d64-causal-long --profiles "$W/sweeps"
tail -25 "$L/sweep.log"
gpu_call_end gate

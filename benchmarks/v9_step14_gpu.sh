#!/usr/bin/env bash
# v9 step 14's GPU call (issue 28; benchmarks/v9_notes.md, "Step 14"): the 176-key tile at D=128 non-causal with O
# stored by TMA through the tile's last V stage ("C2 BN176 S2 persistent pp o-in-v (non-causal)", fwd_wgmma.cuh's
# OInLastV). One call on one GPU, both halves of NVIDIA's ncu_report module carried (the tree is 30 MB since the
# store's long tables): both builds; the gate (float64 with the LSE and memcheck through the candidate, then
# racecheck and synccheck, which see O written over V); the tunes, each prediction written before any run; and
# `lab profile --candidate` of it at 2,16,8192,128. Logs, tune stores and the run under $OUT in one archive.
#
#   OUT=$OUT bash benchmarks/v9_step14_gpu.sh   # name nvidia-h100-x1; carry .carry/wheels, .carry/ncu0, .carry/ncu1
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s14
ncu_report_parts
build_v9 300
OV='C2 BN176 S2 persistent pp o-in-v (non-causal)'
K176='C2 BN176 S2 persistent pp (non-causal)'
step gate 200 "${PYTEST[@]}" -k 'o-in-v and (matches_float64 or memcheck)'
step sanitizers 300 "${PYTEST[@]}" -m 'gpu and slow' -k 'o-in-v and (racecheck or synccheck)'
# Measured once at the end of the sixteenth session (0fcf6ae, one H100, paired): 1.026x (fp16) and 1.026x (bf16) at
# 2,16,8192,128, 1.029x at 1,16,16384,128; the predictions below were written after those and before this call.
tune 8192-nc-128 --dtype float16 --no-causal --shape 2,16,8192,128 --predict "$OV=1.015-1.035" --predict "$K176=0.99-1.01"
tune 16384-nc-128-bf16 --dtype bfloat16 --no-causal --shape 1,16,16384,128 --predict "$OV=1.015-1.035"
tune 4096-nc-128 --dtype float16 --no-causal --shape 4,16,4096,128 --predict "$OV=0.99-1.015"
tune 4096-nc-128-bf16 --dtype bfloat16 --no-causal --shape 4,16,4096,128 --predict "$OV=0.99-1.015"
tune 2048-nc-128 --dtype float16 --no-causal --shape 8,16,2048,128 --predict "$OV=0.96-1.00"
tune 1024-nc-128 --dtype float16 --no-causal --shape 16,16,1024,128 --predict "$OV=0.93-0.97"
profile_candidate "$OV" --shape 2,16,8192,128 --no-causal --dtype float16
gpu_call_end gate sanitizers $([ -f "$L/profile-test.log" ] && echo profile-test)

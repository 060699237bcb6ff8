#!/usr/bin/env bash
# v9 step 13's GPU calls (issue 28; benchmarks/v9_notes.md, "Step 13"): 176-key tiles at D=128 non-causal
# (FlashAttention-3's key tile there), Long64 with two Q buffers as D=64's non-causal kernel at Nq, Nk in
# [2048, 4096) (an existing candidate, for a rule), and (c) D=64's causal default with two Q buffers, one
# warpgroup and in ping-pong. Two parts on one warm machine (part b reuses part a's builds
# in LAB_CACHE; the machine goes back after 30 s idle, so send part b at once):
#   a: both builds, the gate (float64 with the LSE, and memcheck, through the three new candidates);
#   b: the tunes, each prediction written before any run; with NVIDIA's ncu_report module importable (the Nsight
#      Compute copy under extras/python crashes the analysis under Python 3.12), `lab profile --candidate` on
#      the 176-key candidate at 2,16,8192,128 and its GPU test.
# Logs, tune stores and the run under $OUT in one archive ($OUT/v9s13<part>.tgz), every prediction's verdict last.
#
#   OUT=$OUT bash benchmarks/v9_step13_gpu.sh a   # one GPU (name nvidia-h100-x1: the H100 fa-grid ran there), ~8 min
#   OUT=$OUT bash benchmarks/v9_step13_gpu.sh b   # the same machine, warm: about 7 minutes
PART=${1:-}
case "$PART" in a|b) ;; *) echo "usage: $0 a|b (the call's part)" >&2; exit 2 ;; esac
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin "v9s13$PART"
ncu_report_parts
build_v9 300
K176='C2 BN176 S2 persistent pp (non-causal)'
L64Q2='C3 BN128 S2 persistent q2 (non-causal)'
Q2L='C1 BN128 S2 persistent tma-o q2 half-softmax tree-max row-limit (causal)'
PPL='C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit (causal)'
if [ "$PART" = a ]; then
  step gate 300 "${PYTEST[@]}" -k '(BN176 or (q2 and half-softmax and row-limit)) and (matches_float64 or memcheck)'
  gpu_call_end gate
else
  tune 8192-nc-128 --dtype float16 --no-causal --shape 2,16,8192,128 --predict "$K176=0.995-1.035"
  tune 8192-nc-128-bf16 --dtype bfloat16 --no-causal --shape 2,16,8192,128 --predict "$K176=0.995-1.035"
  tune 16384-nc-128 --dtype float16 --no-causal --shape 1,16,16384,128 --predict "$K176=0.995-1.035"
  tune 4096-nc-128 --dtype float16 --no-causal --shape 4,16,4096,128 --predict "$K176=0.99-1.03"
  tune 1024-nc-128 --dtype float16 --no-causal --shape 16,16,1024,128 --predict "$K176=0.95-1.01"
  tune 2048-nc-64 --dtype float16 --no-causal --shape 8,32,2048,64 --predict "$L64Q2=1.003-1.02"
  tune 3072-nc-64 --dtype float16 --no-causal --shape 6,32,3072,64 --predict "$L64Q2=0.99-1.01"
  tune 512-c-64 --dtype float16 --causal --shape 32,32,512,64 --predict "$Q2L=0.995-1.03" --predict "$PPL=0.99-1.03"
  tune 1024-c-64 --dtype float16 --causal --shape 16,32,1024,64 --predict "$Q2L=0.99-1.015" --predict "$PPL=0.97-1.01"
  tune 2048-c-64 --dtype float16 --causal --shape 8,32,2048,64 --predict "$Q2L=0.99-1.02" --predict "$PPL=0.95-0.995"
  tune 4096-c-64 --dtype float16 --causal --shape 4,32,4096,64 --predict "$Q2L=0.985-1.01" --predict "$PPL=0.94-0.99"
  profile_candidate "$K176" --shape 2,16,8192,128 --no-causal --dtype float16
  gpu_call_end $([ -f "$L/profile-test.log" ] && echo profile-test)
fi

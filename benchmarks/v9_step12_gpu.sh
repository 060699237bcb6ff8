#!/usr/bin/env bash
# v9 step 12's GPU calls (issue 28; benchmarks/v9_notes.md, "Step 12"): the softmax's row max as a tree
# (TreeRowMax) and the mask against a per-row limit (MasksByRowLimit), on the D=64 causal default below 8192
# (each alone and both), the D=64 non-causal default below 2048 and the D=128 default. Two parts, on one warm
# machine (part b reuses part a's builds in LAB_CACHE):
#   a: both builds, the gate (float64 with the LSE, and memcheck, through the six candidates);
#   b: the tunes at the fa-grid's shapes, each prediction written before any run, and `lab profile --candidate`
#      on the tree-max candidate with its GPU test (needs NVIDIA's ncu_report wheel installed: the Nsight
#      Compute copy under extras/python crashes the analysis under Python 3.12).
# Logs, tune stores and the run under $OUT in one archive ($OUT/v9s12<part>.tgz), every prediction's verdict last.
#
#   OUT=$OUT bash benchmarks/v9_step12_gpu.sh a   # one GPU (name nvidia-h100-x1: the H100 fa-grid ran there), ~8 min
#   OUT=$OUT bash benchmarks/v9_step12_gpu.sh b   # the same machine, warm: about 5 minutes
PART=${1:-}
case "$PART" in a|b) ;; *) echo "usage: $0 a|b (the call's part)" >&2; exit 2 ;; esac
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin "v9s12$PART"
build_v9 540
T64='C1 BN128 S2 persistent tma-o half-softmax tree-max (causal)'
R64='C1 BN128 S2 persistent tma-o half-softmax row-limit (causal)'
TR64='C1 BN128 S2 persistent tma-o half-softmax tree-max row-limit (causal)'
T64Q2='C1 BN128 S2 persistent tma-o q2 tree-max (non-causal)'
T128='C2 BN128 S2 persistent pp tma-o q2 tree-max'
TR128='C2 BN128 S2 persistent pp tma-o q2 tree-max row-limit'
if [ "$PART" = a ]; then
  step gate 240 "${PYTEST[@]}" -k '(tree-max or row-limit) and (matches_float64 or memcheck)'
  gpu_call_end gate
else
  tune 512-c --dtype float16 --causal --shape 32,32,512,64 \
    --predict "$T64=1.00-1.025" --predict "$R64=1.00-1.02" --predict "$TR64=1.00-1.04"
  tune 1024-c --dtype float16 --causal --shape 16,32,1024,64 \
    --predict "$T64=1.00-1.025" --predict "$R64=1.00-1.015" --predict "$TR64=1.00-1.03"
  tune 2048-c --dtype float16 --causal --shape 8,32,2048,64 \
    --predict "$T64=1.00-1.02" --predict "$R64=1.00-1.01" --predict "$TR64=1.00-1.025"
  tune 4096-c --dtype float16 --causal --shape 4,32,4096,64 \
    --predict "$T64=1.00-1.02" --predict "$R64=0.995-1.005" --predict "$TR64=1.00-1.02"
  tune 1024-nc --dtype float16 --no-causal --shape 16,32,1024,64 --predict "$T64Q2=1.00-1.02"
  tune 2048-nc --dtype float16 --no-causal --shape 8,32,2048,64 --predict "$T64Q2=1.00-1.02"
  tune 512-c-128 --dtype bfloat16 --causal --shape 32,16,512,128 --predict "$T128=1.00-1.015" --predict "$TR128=1.00-1.025"
  tune 8192-nc-128 --dtype float16 --no-causal --shape 2,16,8192,128 --predict "$T128=0.995-1.01" --predict "$TR128=0.995-1.01"
  profile_candidate "$TR64" --shape 16,32,1024,64 --causal --dtype float16
  gpu_call_end $([ -f "$L/profile-test.log" ] && echo profile-test)
fi

#!/usr/bin/env bash
# v9 step 16's GPU call (issue 28; benchmarks/v9_notes.md, "Step 16"): a share of the D=64 softmax's exp2 on the FMA
# pipe (fwd_wgmma.cuh's ExpOnFmaShare; FlashAttention-4's software exp2), a quarter and an eighth on the causal
# default, a quarter on the non-causal one below 2048. Each prediction written before any run.
#   quick: the tuning build and two tunes at N = 1024 (each checks every candidate against float64 on its problem and
#          four ragged shapes before timing it): what the seventeenth session's last 250 s of device time could hold;
#   full:  both builds, the gate (float64 and memcheck), racecheck and synccheck, the tunes from 512 to 4096 in
#          both dtypes.
# Logs and tune stores under $OUT in one archive, every prediction's verdict last.
#
# Its candidates were retired after the run (they lost): check out 22ee708 to run it again.
#   OUT=$OUT bash benchmarks/v9_step16_gpu.sh quick|full   # name nvidia-h100-x1; carry .carry/wheels
PART=${1:-}
case "$PART" in quick|full) ;; *) echo "usage: $0 quick|full" >&2; exit 2 ;; esac
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin "v9s16$PART"
F4='C1 BN128 S2 persistent tma-o half-softmax tree-max row-limit exp-fma4 (causal)'
F8='C1 BN128 S2 persistent tma-o half-softmax tree-max row-limit exp-fma8 (causal)'
N4='C1 BN128 S2 persistent tma-o q2 exp-fma4 (non-causal)'
if [ "$PART" = quick ]; then
  step build-tuning 200 python3 -m lab.cli build --variant v9 --tuning
  tune 1024-c-64 --dtype float16 --causal --shape 16,32,1024,64 --predict "$F4=0.98-1.03" --predict "$F8=0.99-1.02"
  tune 1024-nc-64 --dtype float16 --no-causal --shape 16,32,1024,64 --predict "$N4=0.98-1.03"
  gpu_call_end
else
  build_v9 300
  step gate 200 "${PYTEST[@]}" -k 'exp-fma and (matches_float64 or memcheck)'
  step sanitizers 300 "${PYTEST[@]}" -m 'gpu and slow' -k 'exp-fma and (racecheck or synccheck)'
  tune 512-c-64 --dtype float16 --causal --shape 32,32,512,64 --predict "$F4=0.98-1.03" --predict "$F8=0.99-1.02"
  tune 1024-c-64 --dtype float16 --causal --shape 16,32,1024,64 --predict "$F4=0.98-1.03" --predict "$F8=0.99-1.02"
  tune 1024-c-64-bf16 --dtype bfloat16 --causal --shape 16,32,1024,64 --predict "$F4=0.98-1.03" --predict "$F8=0.99-1.02"
  tune 2048-c-64 --dtype float16 --causal --shape 8,32,2048,64 --predict "$F4=0.98-1.03" --predict "$F8=0.99-1.02"
  tune 2048-c-64-bf16 --dtype bfloat16 --causal --shape 8,32,2048,64 --predict "$F4=0.98-1.03" --predict "$F8=0.99-1.02"
  tune 4096-c-64 --dtype float16 --causal --shape 4,32,4096,64 --predict "$F4=0.98-1.03" --predict "$F8=0.99-1.02"
  tune 512-nc-64 --dtype float16 --no-causal --shape 32,32,512,64 --predict "$N4=0.98-1.03"
  tune 1024-nc-64 --dtype float16 --no-causal --shape 16,32,1024,64 --predict "$N4=0.98-1.03"
  tune 1024-nc-64-bf16 --dtype bfloat16 --no-causal --shape 16,32,1024,64 --predict "$N4=0.98-1.03"
  gpu_call_end gate sanitizers
fi

#!/usr/bin/env bash
# v9 step 11's GPU calls (issue 28; benchmarks/v9_notes.md, "Step 11"): the last key tile's softmax and P V at
# half width (HalfLastKeyTile) on the D=64 causal and non-causal defaults and the D=128 default. Two parts, on
# one warm machine (the builds from part a are cached in LAB_CACHE for part b; cold, part b rebuilds them):
#   a: both builds, the gate (float64 with the LSE, and memcheck, through the three candidates), and the D=64 fp16
#      tunes at N = 512 (both masks) and 1024;
#   b: the other tunes (D=64 bf16 N = 512, N = 2048 and 4096; D=128), racecheck and synccheck through the three.
# Each prediction was written before any run. Logs and tune stores under $OUT in one archive ($OUT/v9s11<part>.tgz:
# the device tool brings back only a few files), and a table of every prediction's verdict printed last.
#
#   OUT=$OUT bash benchmarks/v9_step11_gpu.sh a      # one GPU, about 9 minutes cold
#   OUT=$OUT bash benchmarks/v9_step11_gpu.sh b      # the same machine, warm: about 5 minutes
PART=${1:-}
case "$PART" in a|b) ;; *) echo "usage: $0 a|b (the call's part)" >&2; exit 2 ;; esac
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin "v9s11$PART"
build_v9 480
H64='C1 BN128 S2 persistent tma-o half-softmax'
H64Q2='C1 BN128 S2 persistent tma-o q2 half-softmax'
H128='C2 BN128 S2 persistent pp tma-o q2 half-softmax'
if [ "$PART" = a ]; then
  step gate 240 "${PYTEST[@]}" -k 'half-softmax and (matches_float64 or memcheck)'
  tune 512-c --dtype float16 --causal --shape 32,32,512,64 --predict "$H64=1.02-1.05"
  tune 1024-c --dtype float16 --causal --shape 16,32,1024,64 --predict "$H64=1.015-1.035"
  tune 512-nc --dtype float16 --no-causal --shape 32,32,512,64 --predict "$H64Q2=0.99-1.01"
  G=gate
else
  tune 512-c-bf16 --dtype bfloat16 --causal --shape 32,32,512,64 --predict "$H64=1.02-1.05"
  tune 2048-c --dtype float16 --causal --shape 8,32,2048,64 --predict "$H64=1.005-1.02"
  tune 4096-c --dtype float16 --causal --shape 4,32,4096,64 --predict "$H64=1.00-1.012"
  tune 512-c-128 --dtype float16 --causal --shape 32,16,512,128 --predict "$H128=1.00-1.04"
  tune 1024-c-128 --dtype float16 --causal --shape 16,16,1024,128 --predict "$H128=1.00-1.025"
  tune 512-nc-128 --dtype float16 --no-causal --shape 32,16,512,128 --predict "$H128=0.99-1.01"
  step slow 300 "${PYTEST[@]}" --run-slow -k 'half-softmax and sanitizer and not memcheck'
  G=slow
fi
gpu_call_end $G

#!/usr/bin/env bash
# v9 step 11 (b)'s GPU calls (issue 28; benchmarks/v9_notes.md, "Step 11 (b)"): the half tile's last key step
# peeled off the one key loop (HalfLastKeyTile), on the D=64 causal default, the D=64 non-causal one (a control)
# and the D=128 default. Two parts, on one warm machine (part b reuses part a's builds in LAB_CACHE):
#   a: both builds, the gate (float64 with the LSE, and memcheck, through the three), the D=64 N = 512 tunes
#      (both masks) and N = 1024;
#   b: the N = 2048 and D=128 tunes, and Nsight Compute on the D=64 causal candidate at the shape where step
#      11 (a) lost most (its stall "no instructions" against step 11 (a)'s 15.9% of the samples).
# Each prediction was written before any run. Logs, tune stores and the run under $OUT in one archive
# ($OUT/v9s11b<part>.tgz), and every prediction's verdict last.
#
#   OUT=$OUT bash benchmarks/v9_step11b_gpu.sh a   # one GPU (name nvidia-h100-x1: step 11 (a) ran there), ~8 min
#   OUT=$OUT bash benchmarks/v9_step11b_gpu.sh b   # the same machine, warm: about 2 minutes
PART=${1:-}
case "$PART" in a|b) ;; *) echo "usage: $0 a|b (the call's part)" >&2; exit 2 ;; esac
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin "v9s11b$PART"
build_v9 480
H64='C1 BN128 S2 persistent tma-o half-softmax'
H64Q2='C1 BN128 S2 persistent tma-o q2 half-softmax'
H128='C2 BN128 S2 persistent pp tma-o q2 half-softmax'
if [ "$PART" = a ]; then
  step gate 240 "${PYTEST[@]}" -k 'half-softmax and (matches_float64 or memcheck)'
  tune 512-c --dtype float16 --causal --shape 32,32,512,64 --predict "$H64=1.00-1.035"
  tune 1024-c --dtype float16 --causal --shape 16,32,1024,64 --predict "$H64=1.00-1.02"
  tune 512-nc --dtype float16 --no-causal --shape 32,32,512,64 --predict "$H64Q2=0.99-1.01"
  gpu_call_end gate
else
  tune 2048-c --dtype float16 --causal --shape 8,32,2048,64 --predict "$H64=0.995-1.012"
  tune 512-c-128 --dtype float16 --causal --shape 32,16,512,128 --predict "$H128=1.00-1.04"
  LAB_PROFILES="$W/runs" step profile 150 python3 -m lab.cli profile --variant v9 --candidate "$H64" \
    --shape 16,32,1024,64 --causal --dtype float16 --no-baselines --no-report
  tail -12 "$L/profile.log"
  python3 -m lab.cli analyze "$W"/runs/*/ 2>&1 | head -12
  gpu_call_end profile
fi

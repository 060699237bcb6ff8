#!/usr/bin/env bash
# v9 step 15 looked back (issue 28; benchmarks/v9_notes.md, "Step 15 measured"): Nsight Compute runs of the D=64
# non-causal default (one warpgroup a CTA, two CTAs per SM) and of step 15's candidate (two consumer warpgroups in
# one CTA, BM = 128) at 16,32,1024,64 fp16, so that `lab compare` shows whether halving the L2 traffic moved it and
# what the candidate lost instead. One call on one GPU, both halves of NVIDIA's ncu_report module carried.
#
# Its candidates were retired after the run (they lost): check out 22ee708 to run it again.
#   OUT=$OUT bash benchmarks/v9_step15_profiles_gpu.sh   # name nvidia-h100-x1; carry .carry/wheels, .carry/ncu0, .carry/ncu1
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s15p
ncu_report_parts
build_v9 300
ARGS=(--shape 16,32,1024,64 --no-causal --dtype float16 --no-baselines --no-report)
LAB_PROFILES="$W/runs" step profile-default 200 python3 -m lab.cli profile --variant v9 "${ARGS[@]}"
LAB_PROFILES="$W/runs" step profile-candidate 200 python3 -m lab.cli profile --variant v9 \
  --candidate 'C2 BN128 S2 persistent tma-o q2' "${ARGS[@]}"
tail -n 3 "$L/profile-default.log" "$L/profile-candidate.log"
gpu_call_end

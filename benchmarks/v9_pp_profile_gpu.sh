#!/usr/bin/env bash
# v9 at D=64 causal 1024, the cell left level with cuDNN (issue 28; benchmarks/v9_notes.md, "The ping-pong's tile
# boundary"): compute-sanitizer's slow tier (racecheck, synccheck) on the default, which walks dynamically at every
# D=64 causal problem from 1024 since step 21 (not run then); Nsight Compute runs of v9's default (the ping-pong on the
# longest-first walk) and of cuDNN's own kernel at 16,32,1024,64 causal fp16 on this GPU, so that `lab compare` and the
# runs' source view say where the ping-pong's cycles go at a tile's start and end. cuDNN is profiled as a python rung
# of a workspace made here, as benchmarks/v9_cudnn_profiles_gpu.sh does (its H100 runs are from the one-warpgroup
# default, before step 18).
#
#   OUT=$OUT bash benchmarks/v9_pp_profile_gpu.sh   # carry .carry/wheels and .carry/ncu0 (ncu_report, xz, in parts)
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9pp
ncu_report_parts
step build 200 python3 -m lab.cli build --variant v9
step sanitizers 280 "${PYTEST[@]}" -m 'gpu and slow or gpu' \
  -k 'test_v9_compute_sanitizer_is_clean and (racecheck or synccheck)'
WS=$W/ws; mkdir -p "$WS/kernels"
sed -n '/^\[workspace\]/,/^TOML$/p' benchmarks/v9_cudnn_profiles_gpu.sh | sed '$d' >"$WS/lab.toml"
sed -n '/^# cudnn_sdpa:/,/^PY$/p' benchmarks/v9_cudnn_profiles_gpu.sh | sed '$d' >"$WS/kernels/cudnn_sdpa.py"
ARGS=(--shape 16,32,1024,64 --causal --dtype float16 --no-baselines --no-report)
LAB_PROFILES="$W/runs" step profile-v9 200 python3 -m lab.cli profile --variant v9 "${ARGS[@]}"
LAB_PROFILES="$W/runs" LAB_WORKSPACE="$WS" step profile-cudnn 200 python3 -m lab.cli profile --variant cudnn "${ARGS[@]}"
tail -n 12 "$L/profile-v9.log"; tail -n 4 "$L/profile-cudnn.log"
for a in $(ls "$W/runs"); do echo "run $a"; done
grep -E "^(FAILED|ERROR)|passed|failed" "$L/sanitizers.log" | tail -6
gpu_call_end sanitizers

#!/usr/bin/env bash
# v9 against cuDNN where it is still below (issue 28; benchmarks/v9_notes.md, "cuDNN under ncu"): Nsight Compute runs of
# v9's default and of cuDNN's own forward kernel at 16,32,1024,64 fp16, causal and not (the fa-grid's two D=64 N=1024
# cells below cuDNN after step 17 (b)), so `lab compare` puts the two kernels' metrics side by side: what cuDNN's
# kernel does with the SM that v9's does not. cuDNN's kernel is profiled as a python rung of a workspace made here
# (torch's SDPA with only the cuDNN backend allowed, inside the lab's NVTX range), as a user would profile any
# baseline. One call on one GPU, both halves of NVIDIA's ncu_report module carried.
#
#   OUT=$OUT bash benchmarks/v9_cudnn_profiles_gpu.sh   # name nvidia-h100-x1; carry .carry/wheels, .carry/ncu0, .carry/ncu1
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9cudnn
ncu_report_parts
WS=$W/ws; mkdir -p "$WS/kernels"
cat >"$WS/lab.toml" <<'TOML'
[workspace]
name = "cudnn-baseline"
kernels = "kernels"
rungs = []
TOML
cat >"$WS/kernels/cudnn_sdpa.py" <<'PY'
# cudnn_sdpa: torch's SDPA with only the cuDNN backend allowed, as a rung, so `lab profile` runs cuDNN's own forward
# kernel under Nsight Compute beside a rung's.
#
# lab:rung
# id = "cudnn"
# slug = "sdpa_cudnn"
# title = "cuDNN's fused attention forward through torch's SDPA (the baseline, profiled)"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "9.0"
# attacks = []
# lab:end
#
# What changed: nothing; the baseline itself.
# Bottleneck attacked: none.
# Predicted gain: none.
# Measured: none.
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def forward(q, k, v, causal, scale):
    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    except RuntimeError:
        # cuDNN has no kernel for some of the check's ragged shapes (N = 1): those run torch's other backends, so
        # the check judges this rung's plumbing; the profiled shape's kernel names in the run say cuDNN ran there.
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
PY
# ONLY=cudnn: cuDNN's runs alone (v9's from an earlier call)
[ "${ONLY:-}" = cudnn ] || step build 200 python3 -m lab.cli build --variant v9
for mask in causal no-causal; do
  ARGS=(--shape 16,32,1024,64 "--$mask" --dtype float16 --no-baselines --no-report)
  [ "${ONLY:-}" = cudnn ] || LAB_PROFILES="$W/runs" step "profile-v9-$mask" 200 python3 -m lab.cli profile --variant v9 "${ARGS[@]}"
  LAB_PROFILES="$W/runs" LAB_WORKSPACE="$WS" step "profile-cudnn-$mask" 200 python3 -m lab.cli profile --variant cudnn "${ARGS[@]}"
  tail -n 4 "$L/profile-cudnn-$mask.log"
done
for a in $(ls "$W/runs"); do echo "run $a"; done
gpu_call_end

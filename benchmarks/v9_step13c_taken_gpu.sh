#!/usr/bin/env bash
# v9 step 13 (c) taken (issue 28; benchmarks/v9_notes.md, "Step 13 (c) taken"): "C2 BN128 S2 persistent pp tma-o q2
# half-softmax tree-max row-limit (causal)" as the D=64 causal default below kShortCausal (1024). One call on one GPU:
# the plain build, the default's gate (float64 on every case, the LSE, GQA through v9, memcheck, and racecheck and
# synccheck of the default), and the fa-grid against cuDNN in both dtypes with both timers, stored as a sweep to
# ship. Logs and the sweep store under $OUT in one archive ($OUT/<call>.tgz). A later step's new default reuses it
# as it is (nothing here names a kernel): pass that call's name.
#
#   OUT=$OUT bash benchmarks/v9_step13c_taken_gpu.sh [CALL]   # CALL: v9s13ct; name nvidia-h100-x1 (as the grids before)
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin "${1:-v9s13ct}"
step build 200 python3 -m lab.cli build --variant v9
step gate 300 "${PYTEST[@]}" -k 'not candidate'   # the slow tier (racecheck, synccheck) next
step sanitizers 240 "${PYTEST[@]}" -m 'gpu and slow' -k 'test_v9_compute_sanitizer_is_clean'
step gqa 200 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_gqa_gpu.py \
  -k 'forwards and v9'
step sweep 400 python3 -m lab.cli sweep --variant v9 --preset fa-grid --mode fwd --dtype float16,bfloat16 \
  --baselines sdpa-cudnn --timing both --name v9-fa-grid-h100 --profiles "$W/sweeps"
tail -60 "$L/sweep.log"
gpu_call_end gate sanitizers gqa

#!/usr/bin/env bash
# The next session's first call (issue 28; benchmarks/v9_notes.md, "Step 18" and "the timer under load"):
#   1. benchmarks/under_load_check.py: the timer under load on a GEMM, with NVML read while the stretch's last calls
#      run (b33d264; not yet run on a GPU). Predicted: from 50 ms on, the SM clock read under 1980 MHz in most
#      repetitions, power-capped share >= 0.5, and the median at least the alone median.
#   2. the fa-grid under load (graph timing, each repetition behind 50 ms of its own calls), stored to ship.
#      Predicted: v9 >= cuDNN in the three cells the idle-GPU grid has below it (D=64 causal 1024 both dtypes:
#      1.00-1.03x; D=64 non-causal 1024 fp16: 0.98-1.01x, the probe's 0.98x), and in every other cell.
#   3. on an H100 only: the standard fa-grid after step 18 (issue 28's target is measured there).
#
#   OUT=$OUT bash benchmarks/v9_under_load_grid_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9ulgrid
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE 'H100|H200' | tr 'A-Z' 'a-z')
step check 120 python3 benchmarks/under_load_check.py
step gpu-tests 300 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_sweep_gpu.py tests/test_nvml.py -k under_load
step build 200 python3 -m lab.cli build --variant v9
step sweep-loaded 500 python3 -m lab.cli sweep --variant v9 --preset fa-grid --mode fwd --dtype float16,bfloat16 \
  --baselines sdpa-cudnn --timing graph --under-load 50 --name "v9-fa-grid-under-load-${GPU:-gpu}" --profiles "$W/sweeps"
if [ "$GPU" = h100 ]; then
  step sweep 400 python3 -m lab.cli sweep --variant v9 --preset fa-grid --mode fwd --dtype float16,bfloat16 \
    --baselines sdpa-cudnn --timing both --name v9-fa-grid-h100 --profiles "$W/sweeps"
fi
cat "$L/check.log"
tail -40 "$L/sweep-loaded.log"
gpu_call_end gpu-tests

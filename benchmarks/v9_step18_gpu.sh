#!/usr/bin/env bash
# v9 step 18 (issue 28; benchmarks/v9_notes.md, "Step 18"): the D=64 causal ping-pong below kShortCausal = 2048 (was
# 1024). One call: both builds; the default's gate (float64, the LSE, memcheck: a new case at 2100 x 2050 causal keeps
# the one-warpgroup causal kernel covered as a default), the gate of the D=64 two-warpgroup candidates (step 15's two
# consumers back, step 18's non-causal ping-pong), racecheck and synccheck of the default, GQA; the non-causal
# ping-pong's joules a call at 16,32,1024,64 beside the default and cuDNN (benchmarks/clock_probe.py); then the
# fa-grid against cuDNN in both dtypes with both timers, stored as a sweep to ship, named for the GPU it ran on.
# Predicted (written before the run): the fa-grid's D=64 causal 1024 cells 1.00-1.02x cuDNN (graph; 0.986x / 0.984x on
# the H100 before); the non-causal ping-pong at 1024 level with the default (0.99-1.02x) under the cap.
#
#   OUT=$OUT bash benchmarks/v9_step18_gpu.sh   # on the kind lent (H100 or H200); carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s18
build_v9 300
step gate 300 "${PYTEST[@]}" -k 'not candidate or (candidate_matches and D64 and C2)'
step sanitizers 240 "${PYTEST[@]}" -m 'gpu and slow' -k 'test_v9_compute_sanitizer_is_clean'
step gqa 200 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_gqa_gpu.py \
  -k 'forwards and v9'
step energy-pp 120 python3 benchmarks/clock_probe.py --shape 16,32,1024,64 \
  --candidates 'C2 BN128 S2 persistent pp tma-o q2 (non-causal)'
fa_grid 400
grep "^| [0-9]" "$L/energy-pp.log"
tail -60 "$L/sweep.log"
gpu_call_end gate sanitizers gqa

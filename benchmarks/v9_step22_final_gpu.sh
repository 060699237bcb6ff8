#!/usr/bin/env bash
# v9 step 22, the hand-off where it won (issue 28; benchmarks/v9_notes.md, "Step 22 taken"): the walking ping-pong and
# one-warpgroup kernels hand the consumers their tile (HandsTile), three consumers read the index again (the hand-off
# ran 0.97-0.98x there, `20261128-183531`). One call: the plain build; the default's gate (float64 and the LSE, the
# counters' test) and memcheck; the fa-grid.
# Predicted (written before the run): D=64 causal 8192 and 16384 1.015-1.03x faster than in `20261128-182637`, every
# other cell within the spread between grids; graph 48 of 48 >= cuDNN.
#
#   OUT=$OUT bash benchmarks/v9_step22_final_gpu.sh   # carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s22f
step build 200 python3 -m lab.cli build --variant v9
step gate 200 "${PYTEST[@]}" -k '(not candidate and not racecheck and not synccheck and not counters) or (counters and default)'
fa_grid
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" | tail -4
gpu_call_end gate

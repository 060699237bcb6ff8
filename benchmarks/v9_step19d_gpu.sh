#!/usr/bin/env bash
# v9 step 19 (d) (issue 28; benchmarks/v9_notes.md, "Step 19 (d)"): the longest-first walk only where it measured a
# gain (the D=64 causal ping-pong in [1024, 2048), three consumers from 8192; the one-warpgroup kernel in [2048, 8192)
# back on the static walk), and a call captured into a CUDA graph takes zeroed counters of its own from the lab's
# capture slab (kernels/binding.cpp), so the graph has no memset node. One call: both builds; the default's gate and
# memcheck; the counters' test (now two captured graphs replayed in turn, their dot files without a memset node); the
# H200 fa-grid.
# Predicted (written before the run; graph timing, v9 / cuDNN):
#   D=64 causal 1024: from 0.993x / 0.992x (20261128-141950) to 0.997-1.01x;
#   D=64 causal 2048 and 4096: within 1% of 20261128-123359 (the static walk's kernel again);
#   D=64 causal 8192 and 16384: within 1% of 20261128-141950; every other cell unchanged bar the spread between runs.
#
#   OUT=$OUT bash benchmarks/v9_step19d_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s19d
build_v9 300
step gate 200 "${PYTEST[@]}" -k '(not candidate and not racecheck and not synccheck) or counters or (longest and matches_float64)'
fa_grid
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" | tail -8
gpu_call_end gate

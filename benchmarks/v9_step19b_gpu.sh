#!/usr/bin/env bash
# v9 step 19 taken where it won (issue 28; benchmarks/v9_notes.md, "Step 19"): D=64 causal from kLongCausal = 8192 on
# the dynamic, longest-first walk (1.040x at 1,32,16384,64 causal in `lab tune`, e7600e3). One call: both builds, the
# default's gate (float64 and the LSE: 1,2,8200,8192,64 causal is the new walk's case) and memcheck; benchmarks/
# graph_probe.py at the three short shapes where the walk lost in `lab tune` (0.95-0.99x); then the H200 fa-grid.
# Predicted (written before the run):
#   the fa-grid's D=64 causal cells at 8192 and 16384 (graph): v9 / cuDNN from 1.021-1.064x (20261128-101754) to
#     1.05-1.10x; every other cell within 1% of that grid's ratio (the same kernels).
#   graph_probe: if the short shapes' loss is host time a call (the workspace's allocation and the memset's launch, which
#     `lab tune`'s call latency includes), the longest-first candidate is >= 1.0x the static one in graph replay and back
#     to back; if it is on the device (the memset node, or L2 reads of a 128-head section), it stays below there too.
#
#   OUT=$OUT bash benchmarks/v9_step19b_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s19b
build_v9 300
step gate 200 "${PYTEST[@]}" -k 'not candidate and not racecheck and not synccheck'
PP64='C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit (causal);C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit (causal)'
PP128='C2 BN128 S2 persistent pp tma-o q2;C2 BN128 S2 longest-first pp tma-o q2 (causal)'
step probe-512 60 python3 benchmarks/graph_probe.py --shape 32,32,512,64 --causal --candidates "$PP64"
step probe-1024 60 python3 benchmarks/graph_probe.py --shape 16,32,1024,64 --causal --candidates "$PP64"
step probe-1024-128 60 python3 benchmarks/graph_probe.py --shape 16,16,1024,128 --causal --candidates "$PP128"
fa_grid
for f in probe-512 probe-1024 probe-1024-128; do tail -6 "$L/$f.log"; done
gpu_call_end gate

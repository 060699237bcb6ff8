#!/usr/bin/env bash
# v9 step 22, the hand-off side by side with the walk it replaced (issue 28; benchmarks/v9_notes.md, "Step 22 taken"):
# in the step's fa-grid (`20261128-182637`) v9's D=64 causal cells at 8192 and 16384 ran 2.0-2.5% slower than in the
# grid before (`20261128-164557`), where the unchanged kernels on that machine ran 0.2-1.2% slower. Was it the hand-off
# (the three-consumer kernel walks there) or the machine? The walk before step 22 (6e522e3's v9 and Hopper headers) is
# built as a workspace rung, v9old (carried in .carry/oldv9), and swept beside v9 and cuDNN by graph replay on the
# five D=64 causal shapes of the fa-grid, in one process, three passes.
# Predicted (written before the run; v9old's time over v9's): 1.02-1.035 at 16,32,1024,64; 1.000-1.010 at 2048;
# 1.000-1.008 at 4096; 0.995-1.005 at 8192 and 16384 (the hand-off saves a few hundred cycles a tile, and a tile there
# has 43-85 key tiles on average).
#
#   OUT=$OUT bash benchmarks/v9_step22_ab_gpu.sh   # carry .carry/wheels and .carry/oldv9
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s22ab
export LAB_WORKSPACE=$PWD/.carry/oldv9
step build 300 python3 -m lab.cli build --variant v9,v9old
step sweep 300 python3 -m lab.cli sweep --variant v9,v9old --shape 16,32,1024,64 --shape 8,32,2048,64 \
  --shape 4,32,4096,64 --shape 2,32,8192,64 --shape 1,32,16384,64 --causal --dtype float16,bfloat16 \
  --baselines sdpa-cudnn --timing graph --reps 60 --passes 3 --name v9-handoff-ab --profiles "$W/sweeps"
tail -40 "$L/sweep.log"
gpu_call_end build sweep

#!/usr/bin/env bash
# Step 18's first look (issue 28; benchmarks/v9_notes.md, "Step 18"): the energy a call of v9's D=64 configurations
# at 16,32,1024,64 under the power cap, beside cuDNN's, from benchmarks/clock_probe.py (NVML's energy counter over
# 3 s of calls back to back, three turns each, A B C ... A B C ...).
# Predicted (written before the run), if the reads from L2 are what costs v9 its energy: mJ/call falls with the
# rows a CTA's K/V tiles serve: the default (BM = 64, two CTAs an SM) highest; BM = 128 (two consumers without turns,
# and the causal ping-pong) 3-6% below it, at or below cuDNN's; three consumers (BM = 192) lowest. Under the cap
# the us/call follows the mJ/call more than the cycles: BM = 128 within 1% of the default despite its +4.7% SM
# cycles (step 15, ncu).
#
#   OUT=$OUT bash benchmarks/v9_energy_gpu.sh   # on the kind lent (H100 or H200); carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9energy
build_v9 300
step energy-non-causal 120 python3 benchmarks/clock_probe.py --shape 16,32,1024,64 \
  --candidates 'C2 BN128 S2 persistent tma-o q2;C3 BN128 S2 persistent (non-causal)'
step energy-causal 120 python3 benchmarks/clock_probe.py --shape 16,32,1024,64 --causal \
  --candidates 'C2 BN128 S2 persistent tma-o q2 half;C2 BN128 S2 persistent pp;C3 BN128 S2 persistent (causal)'
for f in energy-non-causal energy-causal; do cat "$L/$f.log"; done
gpu_call_end

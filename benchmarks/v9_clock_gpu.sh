#!/usr/bin/env bash
# The next look at v9's D=64 N=1024 gap (issue 28; benchmarks/v9_notes.md, "cuDNN under ncu"): the SM clock NVML
# reads while v9's kernel and cuDNN's run back to back (benchmarks/clock_probe.py), at the two cells below cuDNN and
# one where v9 is well ahead (8192). Predicted, if the gap is the clock: v9's median SM clock 1-2% under cuDNN's at
# 1024 with its us/call 1-2% over, NVML naming sw_power_cap in most samples of both, and v9's energy a call
# (mJ/call) higher than cuDNN's by more than the clock's gap; if the clocks are equal, the gap is in the kernels
# back to back (not the clock).
#
#   OUT=$OUT bash benchmarks/v9_clock_gpu.sh   # on the kind lent (H100 or H200); carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9clock
step build 200 python3 -m lab.cli build --variant v9
step clock-causal 60 python3 benchmarks/clock_probe.py --shape 16,32,1024,64 --causal
step clock-non-causal 60 python3 benchmarks/clock_probe.py --shape 16,32,1024,64
step clock-8192 60 python3 benchmarks/clock_probe.py --shape 2,32,8192,64
for f in clock-causal clock-non-causal clock-8192; do cat "$L/$f.log"; done
gpu_call_end

#!/usr/bin/env bash
# Why `lab tune --against cudnn` by events (twenty-second session, `benchmarks/v9_against_gpu.sh`) put SDPA's cuDNN 14%
# behind v9's default at 16,32,1024,64 causal fp16 where the fa-grid's events column put it 4% behind: SDPA's call
# latency timed alone and beside v9's default (benchmarks/events_dispatch_probe.py), with its host time in the call.
# Predicted (written before the run): SDPA alone ~0.235 ms (the grid's 0.2352), beside v9's defaults ~0.25 ms (the
# tune's 0.2541), the host time following it: the interleaving, not the pin or the warnings, moves SDPA's dispatch.
# Then the fa-grid again with v9's kernels unchanged since `20261128-144730` (only the lab changed): the spread between
# two grids of one kernel. Predicted: every cell within 1% of that grid's ratio; the D=64 N=1024 cells 0.99-1.01x.
#
#   OUT=$OUT bash benchmarks/events_dispatch_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin dispatch
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE 'H100|H200' | tr 'A-Z' 'a-z')
step build 200 python3 -m lab.cli build --variant v9
PYTHONPATH=$PYTHONPATH:$PWD/benchmarks step probe-causal 200 python3 benchmarks/events_dispatch_probe.py \
  --shape 16,32,1024,64 --causal
step sweep 300 python3 -m lab.cli sweep --variant v9 --preset fa-grid --mode fwd --dtype float16,bfloat16 \
  --baselines sdpa-cudnn --timing both --name "v9-fa-grid-${GPU:-gpu}" --profiles "$W/sweeps"
tail -8 "$L/probe-causal.log"
gpu_call_end probe-causal

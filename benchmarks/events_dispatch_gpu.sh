#!/usr/bin/env bash
# Why `lab tune --against cudnn` by events (twenty-second session, `benchmarks/v9_against_gpu.sh`) put SDPA's cuDNN 14%
# behind v9's default at 16,32,1024,64 causal fp16 where the fa-grid's events column put it 4% behind: SDPA's call
# latency timed alone and beside v9's default (benchmarks/events_dispatch_probe.py), with its host time in the call.
# First call (5457e8a): SDPA alone 0.2328 ms, its host time 32 us a call; beside v9's default 0.25-0.29 ms, 108-129 us.
# Predicted for this call (the settings reordered, the warm and the timed calls' host times apart, then a trace of
# each): the timed call's host time follows the setting as the mixed median did; the trace names the runtime call
# that grows (a guess: an allocation or a synchronization inside SDPA's dispatch).
# Then `lab tune --against cudnn --timing graph` at the one cell below cuDNN in the repeat grid `20261128-162949` not
# yet paired, 8,32,2048,64 causal, fp16 and bf16. Predicted: 0.995-1.01x, as at 1024.
#
#   OUT=$OUT bash benchmarks/events_dispatch_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin dispatch
build_v9 300
PYTHONPATH=$PYTHONPATH:$PWD/benchmarks step probe-causal 200 python3 benchmarks/events_dispatch_probe.py \
  --shape 16,32,1024,64 --causal
tune c2048-fp16-graph --dtype float16 --causal --shape 8,32,2048,64 --timing graph --reps 100 --against cudnn
tune c2048-bf16-graph --dtype bfloat16 --causal --shape 8,32,2048,64 --timing graph --reps 100 --against cudnn
grep -h "the default against" "$L"/tune-*.log
tail -10 "$L/probe-causal.log"
gpu_call_end probe-causal

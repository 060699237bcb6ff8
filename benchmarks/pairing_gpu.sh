#!/usr/bin/env bash
# The fa-grid against `lab tune --against` at the D=64 causal 1024 cells (issue 28; benchmarks/v9_notes.md, "Step 21"):
# benchmarks/pairing_probe.py times v9 and cuDNN by graph replay in blocks (as a grid does) and interleaved (as a tune
# does), in one process, on one workload. Predicted (written before the run): bf16, blocks 0.996-0.999x and interleaved
# 1.000-1.003x (the grids' 0.9966-0.9985x and the tune's 1.002x); fp16 the same gap, both about 0.003 higher.
#
#   OUT=$OUT bash benchmarks/pairing_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin pairing
step build 200 python3 -m lab.cli build --variant v9
for dtype in bfloat16 float16; do
  PYTHONPATH=$PYTHONPATH:$PWD/benchmarks step "probe-$dtype" 150 python3 benchmarks/pairing_probe.py \
    --shape 16,32,1024,64 --causal --dtype $dtype
  tail -7 "$L/probe-$dtype.log"
done
gpu_call_end probe-bfloat16 probe-float16

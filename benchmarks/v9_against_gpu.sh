#!/usr/bin/env bash
# Issue 28's contested cells measured side by side (v9_notes, "Step 19 (d)", what is left): `lab tune --against cudnn`
# times SDPA's cuDNN in the same rounds as v9's default and candidates, so the default's ratio against it is paired
# round by round, with its CI95, instead of two cells of a grid timed seconds apart (cuDNN's own time at D=64 causal
# 1024 moved 0.3-1.0% between the twenty-first session's two grids, more than v9's gap to it there). One call: both
# builds; the GPU tests of `--against` (events and graph); then the fa-grid's four cells nearest 1.0x, 100 rounds each,
# by graph replay (device time, as the grid's graph column) and by call latency.
# Predicted (written before the run; the default against sdpa-cudnn, paired median):
#   16,32,1024,64 causal fp16 / bf16, graph:  0.995-1.01x (the grids: 0.993-0.9985x, inside their spread)
#   16,32,1024,64 non-causal fp16 / bf16, graph: 0.995-1.01x (the grids: 0.997-1.004x)
#   16,32,1024,64 causal fp16, events: 1.02-1.06x (the grids' events column: 1.04x)
#
#   OUT=$OUT bash benchmarks/v9_against_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9against
build_v9 300
step against-tests 200 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider \
  tests/test_tune.py -k against
tune c1024-fp16-graph --dtype float16 --causal --shape 16,32,1024,64 --timing graph --reps 100 --against cudnn
tune c1024-bf16-graph --dtype bfloat16 --causal --shape 16,32,1024,64 --timing graph --reps 100 --against cudnn
tune nc1024-fp16-graph --dtype float16 --shape 16,32,1024,64 --timing graph --reps 100 --against cudnn
tune nc1024-bf16-graph --dtype bfloat16 --shape 16,32,1024,64 --timing graph --reps 100 --against cudnn
tune c1024-fp16-events --dtype float16 --causal --shape 16,32,1024,64 --reps 100 --against cudnn
grep -h "the default against" "$L"/tune-*.log
gpu_call_end against-tests

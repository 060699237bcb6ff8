#!/usr/bin/env bash
# Where v9's last D=64 N=1024 gap sits (issue 28; benchmarks/v9_notes.md, "cuDNN under ncu"): under ncu (boost clocks,
# L2 flushed) v9's and cuDNN's kernels at 16,32,1024,64 fp16 take the same time in both masks, while the fa-grid's graph
# replay has cuDNN 0.5-1.5% ahead, about 2-3 us. So: each kernel's fixed cost (graph replay at 1,1,64,64, where the
# work is nothing) beside the two 1024 cells in both timers, and CUPTI's kernel durations of the same calls (`lab bench
# --kernels`): a per-launch cost v9 pays and cuDNN does not shows as graph time minus kernel duration.
#
#   OUT=$OUT bash benchmarks/v9_fixed_cost_gpu.sh   # name nvidia-h100-x1; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9fixed
step build 200 python3 -m lab.cli build --variant v9
step sweep 200 python3 -m lab.cli sweep --variant v9 --baselines sdpa-cudnn --timing both --dtype float16 \
  --shape 1,1,64,64 --shape 16,32,1024,64 --causal both --name v9-fixed-cost-h100 --profiles "$W/sweeps"
tail -20 "$L/sweep.log"
for c in --causal --no-causal; do
  step "kernels$c" 100 python3 -m lab.cli bench --variant v9 --backends cudnn --shape 16,32,1024,64 $c --dtype float16 --kernels
  grep -E "v9|cudnn|kernel|ms" "$L/kernels$c.log" | tail -14
done
gpu_call_end

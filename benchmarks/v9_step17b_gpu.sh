#!/usr/bin/env bash
# v9 step 17 (b) (issue 28; benchmarks/v9_notes.md, "Step 17 (b)"): the three-consumer row sums by the tensor cores
# ("C3 BN128 S2 persistent sum-mma (non-causal)", Long64 with fwd_wgmma.cuh's RowSumByMma, now without the LSE only)
# against the default at the non-causal D=64 shapes step 17's call did not time, so the rule written before this
# call can be applied: taken as the non-causal default from Nq, Nk >= kLongRows (2048) if its paired median is
# >= 1.005x at every tuned shape from 2048 to 16384 in both dtypes (step 17: 1.015x / 1.019x at 2048, 1.013x at 8192
# fp16), else from the N where that holds. The gate: float64 on both instantiations (without the LSE, the one timed;
# with it, the fp32 sums), memcheck. Logs and tune stores under $OUT in one archive, every prediction's verdict last.
#
#   OUT=$OUT bash benchmarks/v9_step17b_gpu.sh   # name nvidia-h100-x1 (the fa-grid's kind); carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s17b
build_v9 300
S3='C3 BN128 S2 persistent sum-mma (non-causal)'
step gate 200 "${PYTEST[@]}" -k 'sum-mma and (matches_float64 or memcheck)'
tune 4096-nc-64 --dtype float16 --no-causal --shape 4,32,4096,64 --predict "$S3=1.005-1.03"
tune 4096-nc-64-bf16 --dtype bfloat16 --no-causal --shape 4,32,4096,64 --predict "$S3=1.005-1.03"
tune 8192-nc-64-bf16 --dtype bfloat16 --no-causal --shape 2,32,8192,64 --predict "$S3=1.005-1.03"
tune 16384-nc-64 --dtype float16 --no-causal --shape 1,32,16384,64 --predict "$S3=1.005-1.03"
tune 16384-nc-64-bf16 --dtype bfloat16 --no-causal --shape 1,32,16384,64 --predict "$S3=1.005-1.03"
gpu_call_end gate

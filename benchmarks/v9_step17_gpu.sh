#!/usr/bin/env bash
# v9 step 17's GPU call (issue 28; benchmarks/v9_notes.md, "Step 17"): P's row sums by the tensor cores at D=64
# (fwd_wgmma.cuh's RowSumByMma: P V as an m64n72 product over V and a tile of ones), on the causal defaults below
# 8192 (one warpgroup, and ping-pong below 1024), the non-causal one below 2048 and three consumers. One call on one
# GPU: both builds; the gate (float64 with the LSE and memcheck through the four candidates: the LSE now comes from
# the 16-bit P's sums), racecheck and synccheck (the ones tile is written by ordinary stores before wgmma reads it);
# the tunes, each prediction written before any run. Logs and tune stores under $OUT in one archive, every prediction's verdict last.
#
#   OUT=$OUT bash benchmarks/v9_step17_gpu.sh   # name nvidia-h100-x1 (the fa-grid's kind); carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s17
build_v9 300
SC='C1 BN128 S2 persistent tma-o half-softmax tree-max row-limit sum-mma (causal)'
SN='C1 BN128 S2 persistent tma-o q2 sum-mma (non-causal)'
S3='C3 BN128 S2 persistent sum-mma (non-causal)'
SP='C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit sum-mma (causal)'
step gate 200 "${PYTEST[@]}" -k 'sum-mma and (matches_float64 or memcheck)'
step sanitizers 300 "${PYTEST[@]}" -m 'gpu and slow' -k 'sum-mma and (racecheck or synccheck)'
# Against the default at each shape: causal ping-pong below 1024, one warpgroup from 1024, three consumers from 8192;
# non-causal one warpgroup below 2048, three consumers from 2048.
tune 512-c-64 --dtype float16 --causal --shape 32,32,512,64 --predict "$SC=0.97-1.03" --predict "$SP=1.00-1.04"
tune 512-c-64-bf16 --dtype bfloat16 --causal --shape 32,32,512,64 --predict "$SP=1.00-1.04"
tune 1024-c-64 --dtype float16 --causal --shape 16,32,1024,64 --predict "$SC=1.00-1.05"
tune 1024-c-64-bf16 --dtype bfloat16 --causal --shape 16,32,1024,64 --predict "$SC=1.00-1.05"
tune 2048-c-64 --dtype float16 --causal --shape 8,32,2048,64 --predict "$SC=1.00-1.05"
tune 2048-c-64-bf16 --dtype bfloat16 --causal --shape 8,32,2048,64 --predict "$SC=1.00-1.05"
tune 4096-c-64 --dtype float16 --causal --shape 4,32,4096,64 --predict "$SC=1.00-1.04"
tune 512-nc-64 --dtype float16 --no-causal --shape 32,32,512,64 --predict "$SN=0.99-1.04"
tune 1024-nc-64 --dtype float16 --no-causal --shape 16,32,1024,64 --predict "$SN=1.00-1.05"
tune 1024-nc-64-bf16 --dtype bfloat16 --no-causal --shape 16,32,1024,64 --predict "$SN=1.00-1.05"
tune 2048-nc-64 --dtype float16 --no-causal --shape 8,32,2048,64 --predict "$S3=1.00-1.04" --predict "$SN=0.98-1.04"
tune 2048-nc-64-bf16 --dtype bfloat16 --no-causal --shape 8,32,2048,64 --predict "$S3=1.00-1.04"
tune 8192-nc-64 --dtype float16 --no-causal --shape 2,32,8192,64 --predict "$S3=1.00-1.04"
gpu_call_end gate sanitizers

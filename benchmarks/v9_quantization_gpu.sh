#!/usr/bin/env bash
# v9 step 19's question (issue 28; benchmarks/v9_notes.md, "Step 19"): is the static walk's last round the D=64
# causal 1024 gap? v9's persistent walk hands out units of equal work in rounds of G CTAs. On the fa-grid the unit
# count is rarely a multiple of G: causal 16,32,1024,64 has 2,048 pairs on 132 CTAs (15.5 rounds, so 16: the
# busiest CTA has 3.1% more work than the mean); 8,32,2048,64 has 4,096 pairs on 264 CTAs (15.5 -> 16);
# 8,16,1024,128 causal 1,024 on 132 (7.8 -> 8). With 33 heads instead of 32 the units fill whole rounds exactly
# (2,112, 4,224, 1,056), so a static walk takes as long for 33 heads as for 32, while a kernel that balances
# its tail (a dynamic hand-out, longest first) takes 33/32 = 1.031x.
# Predicted (written before the run), graph timing, the 33-head time over the 32-head time:
#   v9 causal at all three shapes: 1.000-1.012x (the static walk: the extra head costs next to nothing).
#   cuDNN causal: 1.022-1.035x if it balances its tail (its +0.7 us memset a call suggests a tile counter);
#     ~1.00x if it walks statically too.
#   Non-causal 16,{32,33},1024,64 (control: equal tiles, 8,192 on 264 CTAs = 31.03 rounds -> 32, 8,448 = 32
#     exactly): v9 1.000-1.012x; cuDNN (BM = 128 on 132 CTAs: the same 31.03 -> 32) 1.000-1.012x if static.
# If v9's causal ratios sit near 1.00 and cuDNN's near 1.03, the tail is the lever: step 19 builds a dynamic,
# longest-first walk (up to 2.6% at 1024 causal by the CPU model), else it does not.
#
#   OUT=$OUT bash benchmarks/v9_quantization_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9quant
step build 200 python3 -m lab.cli build --variant v9
step sweep 300 python3 -m lab.cli sweep --variant v9 --shape '16,{32,33},1024,64' --shape '8,{32,33},2048,64' \
  --shape '8,{32,33},1024,128' --causal both --dtype float16 --baselines sdpa-cudnn --timing graph --passes 2 \
  --name v9-quantization --profiles "$W/sweeps"
tail -30 "$L/sweep.log"
gpu_call_end sweep

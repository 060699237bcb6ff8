#!/usr/bin/env bash
# Step 18's second look (issue 28; benchmarks/v9_notes.md, "Step 18"): where else a configuration with fewer joules
# a call wins under the power cap. Three turns of 3 s back to back each (benchmarks/clock_probe.py), at the cells the
# H100 fa-grid still had below cuDNN and at the edge of the causal rule:
#   16,32,1024,64 bf16 both masks (the causal ping-pong won 1.049x fp16 in the first look: bf16 too?),
#   8,32,2048,64 causal fp16 (the ping-pong's next step: tune said 0.981x at a shared clock),
#   32,32,512,64 causal bf16 (the ping-pong is the default: is cuDNN ahead in joules?),
#   32,16,512,128 causal bf16 (D=128's default against cuDNN).
# Predicted (written before the run): the ping-pong at 1024 causal bf16 1.03-1.06x the default, as fp16; at 2048 causal
# 0.99-1.03x (its extra cycles there, 1.9% in the tune, against its joules); at 512 the default level with cuDNN
# within 1% in both us/call and mJ/call; the two consumers at 1024 non-causal bf16 1.00-1.02x the default.
#
#   OUT=$OUT bash benchmarks/v9_energy2_gpu.sh   # on the kind lent (H100 or H200); carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9energy2
build_v9 300
PP='C2 BN128 S2 persistent pp'
PAIR='C2 BN128 S2 persistent tma-o q2'
step e1024c-bf16 120 python3 benchmarks/clock_probe.py --shape 16,32,1024,64 --causal --dtype bfloat16 --candidates "$PP"
step e1024-bf16 120 python3 benchmarks/clock_probe.py --shape 16,32,1024,64 --dtype bfloat16 --candidates "$PAIR"
step e2048c 120 python3 benchmarks/clock_probe.py --shape 8,32,2048,64 --causal --candidates "$PP;$PAIR half"
step e512c-bf16 120 python3 benchmarks/clock_probe.py --shape 32,32,512,64 --causal --dtype bfloat16 \
  --candidates "C1 BN128 S2 persistent tma-o half"
step e512c128-bf16 120 python3 benchmarks/clock_probe.py --shape 32,16,512,128 --causal --dtype bfloat16
for f in e1024c-bf16 e1024-bf16 e2048c e512c-bf16 e512c128-bf16; do cat "$L/$f.log"; done
gpu_call_end

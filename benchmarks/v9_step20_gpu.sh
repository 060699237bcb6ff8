#!/usr/bin/env bash
# v9 step 20 (issue 28; benchmarks/v9_notes.md, "Step 20"): when the dynamic walk takes its next index. Step 19's
# producer takes it as it loads a tile's Q (a tile ahead) and needs it as soon as it has issued that tile's K/V loads:
# on short tiles the atomic's round trip delays the next Q (512 causal: 0.971x the static walk, back to back, with no
# memset), and a CTA holding its next index for a whole tile holds work an idle CTA would take (the CPU walk: 16,16,
# 1024,128 causal ends 3.1% over the mean a tile ahead, the static walk's excess; 1.7% taken as the CTA frees up).
# Two candidates on each ping-pong: `ahead2` (the index two tiles ahead: the round trip hidden under a whole tile, the
# balance worse) and `late` (taken with the tile's third last K/V stage: two key tiles to cover the atomic, the
# balance better). One call: the tuning build, the candidates' float64 gate and counters test, memcheck and racecheck,
# the tunes.
# Predicted (written before the run; each candidate against step 19's one-ahead walk, from one tune's medians):
#   32,32,512,64 causal:  ahead2 1.00-1.03x (the round trip was most of the 2.9% loss); late 0.99-1.01x (tiles of
#                         1-4 key tiles: mostly taken at the first stage, as now)
#   16,32,1024,64 causal: ahead2 0.99-1.015x; late 1.00-1.015x (fp16 and bf16)
#   16,16,1024,128 causal: ahead2 0.97-1.00x (the CPU walk: 6.0% over the mean); late 1.00-1.02x
#   The judged prediction of each tune (against the default): late at 16,32,1024,64, where the default is the one-ahead
#   walk since step 19 (c): 1.00-1.015x.
#
#   OUT=$OUT bash benchmarks/v9_step20_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s20
LATE='C2 BN128 S2 longest-first late pp tma-o q2 half-softmax tree-max row-limit (causal)'
build_v9 300
step gate 200 "${PYTEST[@]}" -k '((ahead2 or late) and matches_float64) or counters'
step sanitizers 240 "${PYTEST[@]}" -m 'gpu and slow or gpu' -k 'test_v9_step4_candidate_is_sanitizer_clean and (ahead2 or late) and (memcheck or racecheck)'
tune 512-c-64 --dtype float16 --causal --shape 32,32,512,64
tune 1024-c-64 --dtype float16 --causal --shape 16,32,1024,64 --predict "$LATE=1.00-1.015"
tune 1024-c-64-bf16 --dtype bfloat16 --causal --shape 16,32,1024,64 --predict "$LATE=1.00-1.015"
tune 1024-c-128 --dtype float16 --causal --shape 16,16,1024,128
for f in tune-512-c-64 tune-1024-c-64 tune-1024-c-64-bf16 tune-1024-c-128; do
  grep -E "default|longest-first|persistent pp" "$L/$f.log" | grep -E "│" | cut -c1-150; done
gpu_call_end gate sanitizers

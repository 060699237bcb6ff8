#!/usr/bin/env bash
# v9 step 22 (issue 28; benchmarks/v9_notes.md, "Step 22"): at 16,32,1024,64 causal the default's kernel and cuDNN's
# take the same time under ncu (H200, runs 20261128-180404 and -180429), but v9 reads 243 MB from DRAM where cuDNN reads
# 201 MB (Q, K and V once), and 2.8% of its warp samples are its consumers' tile arithmetic (causal_lpt's divisions).
# Candidates: L2 eviction priorities (K and V evict-last, Q and O evict-first) and the tile handed to the consumers,
# apart and together on the walking ping-pong, together on the walking one-warpgroup kernel. One call: both builds;
# the candidates' float64 gate and memcheck, racecheck on the two that change the hand-off; the L2 flush probe (does
# the timer's flush evict evict-last lines?); the tunes by graph against cuDNN; ncu of the combined candidate.
# Predicted (written before the run; against the default, `lab tune --timing graph`):
#   16,32,1024,64 causal, fp16 and bf16: l2-hints 1.000-1.010x, tile-handed 1.000-1.008x, both 1.003-1.015x;
#   8,32,2048,64 causal fp16: the one-warpgroup kernel with both 1.000-1.010x;
#   the probe: after the flush the hinted candidate reads Q, K and V from DRAM as the default does (within 5%);
#   ncu of the combined candidate at 16,32,1024,64 causal: DRAM bytes read 200-215 MB (243 MB for the default).
#
# Ran once, at 3ca115f (results: benchmarks/v9_notes.md, "Step 22 measured"). Its candidates were taken (the hand-off,
# relabelled) or retired (the L2 priorities), and benchmarks/l2_flush_probe.py took another interface after it: run it
# from that commit.
#
#   OUT=$OUT bash benchmarks/v9_step22_gpu.sh   # carry .carry/wheels and .carry/ncu0
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s22
ncu_report_parts
build_v9 300
step gate 200 "${PYTEST[@]}" -k 'candidate_matches_float64 and (hints or handed)'
step sanitizers 240 "${PYTEST[@]}" -m 'gpu and slow or gpu' \
  -k 'candidate_is_sanitizer_clean and (hints or handed) and (memcheck or (racecheck and handed and pp))'
L2="C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit l2-hints (causal)"
HANDED="C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)"
BOTH="C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit l2-hints tile-handed (causal)"
ONE="C1 BN128 S2 longest-first tma-o half-softmax tree-max row-limit l2-hints tile-handed (causal)"
PROBE=(--shape 1,32,1024,64 --causal --dtype float16 --candidate "$BOTH")
for which in default candidate; do
  for flush in 1 0; do
    step "probe-$which-$flush" 60 ncu --cache-control none --nvtx --nvtx-include 'l2probe/' \
      --metrics dram__bytes_read.sum -f -o "$W/l2-$which-flush$flush" \
      python3 benchmarks/l2_flush_probe.py "${PROBE[@]}" --which "$which" --flush "$flush"
  done
done
step probe-read 60 python3 benchmarks/l2_flush_probe.py --read "$W"/l2-*.ncu-rep
tune c1024-fp16 --dtype float16 --causal --shape 16,32,1024,64 --timing graph --reps 60 --against cudnn \
  --predict "$L2=1.000-1.010" --predict "$HANDED=1.000-1.008" --predict "$BOTH=1.003-1.015"
tune c1024-bf16 --dtype bfloat16 --causal --shape 16,32,1024,64 --timing graph --reps 60 --against cudnn \
  --predict "$L2=1.000-1.010" --predict "$HANDED=1.000-1.008" --predict "$BOTH=1.003-1.015"
tune c2048-fp16 --dtype float16 --causal --shape 8,32,2048,64 --timing graph --reps 60 --against cudnn \
  --predict "$ONE=1.000-1.010"
LAB_PROFILES="$W/runs" step profile 150 python3 -m lab.cli profile --variant v9 --candidate "$BOTH" \
  --shape 16,32,1024,64 --causal --dtype float16 --no-baselines --no-report
grep -h "the default against" "$L"/tune-*.log
cat "$L/probe-read.log"
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" "$L/sanitizers.log" | tail -8
gpu_call_end gate sanitizers

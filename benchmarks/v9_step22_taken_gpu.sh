#!/usr/bin/env bash
# v9 step 22 taken (issue 28; benchmarks/v9_notes.md, "Step 22 taken"): the dynamic walk hands the consumers their tile
# (head and query block) instead of its list index, on every walking kernel (the D=64 causal defaults from 1024 and
# the D=128 causal candidate). As a candidate it ran 1.029x / 1.030x the index-reading default at 16,32,1024,64 causal
# (3ca115f). One call: both builds; the default's gate (float64 and the LSE, the counters' test) and the walking
# candidates' float64 cases; memcheck and racecheck of the default; the GQA forwards; the tunes by graph against cuDNN
# at 16,32,1024,64 causal; the fa-grid; the L2 flush probe on a kernel of its own (does the timer's flush evict
# evict-last lines, and does cudaCtxResetPersistingL2Cache after it?).
# Predicted (written before the run):
#   the static ping-pong (candidate "C2 BN128 S2 persistent pp ... (causal)") 0.950-0.975x the new default at
#   16,32,1024,64 causal fp16 and bf16 (0.982x / 0.989x the index-reading default in step 20's tunes); the default
#   against cuDNN 1.02-1.035x there;
#   the fa-grid (graph) against `20261128-164557`: D=64 causal 1024 from level to 1.02-1.035x cuDNN; 2048 +0.3-0.8%,
#   4096 +0.2-0.6%; 8192 and 16384 and every other cell within the spread between grids (about 0.5%);
#   the probe: after the timer's flush a buffer read evict-last leaves 20-60% of its bytes in L2 (a normal read
#   none); the reset after it evicts them.
#
#   OUT=$OUT bash benchmarks/v9_step22_taken_gpu.sh   # carry .carry/wheels and .carry/ncu0
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s22t
ncu_report_parts
build_v9 300
step gate 200 "${PYTEST[@]}" -k '(not candidate and not racecheck and not synccheck) or counters or (candidate_matches_float64 and longest)'
step sanitizers 200 "${PYTEST[@]}" -m 'gpu and slow or gpu' -k 'test_v9_compute_sanitizer_is_clean and (memcheck or racecheck)'
step gqa 150 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_gqa_gpu.py \
  -k 'forwards and v9'
STATIC="C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit (causal)"
tune c1024-fp16 --dtype float16 --causal --shape 16,32,1024,64 --timing graph --reps 60 --against cudnn \
  --predict "$STATIC=0.950-0.975"
tune c1024-bf16 --dtype bfloat16 --causal --shape 16,32,1024,64 --timing graph --reps 60 --against cudnn \
  --predict "$STATIC=0.950-0.975"
fa_grid
P=/tmp/l2probe; mkdir -p $P
for policy in evict_normal evict_last; do
  for flush in none zero zero-reset; do
    step "probe-$policy-$flush" 120 ncu --cache-control none --nvtx --nvtx-include 'l2probe/' \
      --metrics dram__bytes_read.sum -f -o "$P/$policy-$flush" \
      python3 benchmarks/l2_flush_probe.py --policy "$policy" --flush "$flush"
  done
done
step probe-read 60 python3 benchmarks/l2_flush_probe.py --read $P/*.ncu-rep
grep -h "the default against" "$L"/tune-*.log
cat "$L/probe-read.log"
grep -E "^(FAILED|ERROR)|passed|failed" "$L/gate.log" "$L/sanitizers.log" "$L/gqa.log" | tail -8
gpu_call_end gate sanitizers gqa

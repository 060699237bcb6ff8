#!/usr/bin/env bash
# v9 step 23 (issue 28; benchmarks/v9_notes.md, "Step 23") and the timer's L2 flush. One call:
# - the L2 flush probe (benchmarks/l2_flush_probe.py under ncu, cache control off) on the timer's new flush
#   (lab.measure.l2flush: its buffer written evict-last, discarded, zeroed) against the zeroing alone and against the
#   sweep without the discard; each flush's time; the flush's GPU tests;
# - both builds; the float64 gate and memcheck of step 23's candidates: the static walk's defaults with the tile
#   handed to the consumers (fwd_wgmma.cuh's HandsTile, now on tile_scheduler.cuh's Persistent too);
# - their tunes by graph against the defaults (and cuDNN).
# Predicted (written before the run):
#   probe, 16 MiB read evict-last: zeroing alone 14-15 of 16.78 MB back from DRAM (as step 22 measured); the lab's
#   flush >= 16.3 MB, and the 24 MiB capacity read <= 2.5 of 25.2 MB; the sweep without the discard >= 16.3 MB with
#   the capacity read 2-10 MB (its own evict-last lines hold part of the L2);
#   flush times (median): zeroing 0.06-0.12 ms, the lab's 0.15-0.35 ms;
#   tunes (default time / candidate time): 16,32,1024,64 non-causal fp16 1.003-1.020x; 32,32,512,64 causal fp16
#   1.000-1.020x; 16,16,1024,128 causal fp16 1.000-1.015x; 8,16,2048,128 non-causal bf16 0.995-1.010x.
#
#   OUT=$OUT bash benchmarks/v9_step23_gpu.sh   # carry .carry/wheels and .carry/ncu0
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9s23
ncu_report_parts
# The probe step ran as a shell function under `timeout` in call A and did not start (exit 127); call B
# (v9_step23_taken_gpu.sh) ran the table through benchmarks/l2_flush_probes.sh, as this one does now.
step probes 240 bash benchmarks/l2_flush_probes.sh "$W/l2" &
build_v9 420
wait
step flush-tests 200 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider \
  tests/test_l2flush_gpu.py tests/test_timer_gpu.py -k 'flush or sdpa_baselines'
step gate 200 "${PYTEST[@]}" -k 'candidate_matches_float64 and handed and persistent'
step sanitizers 200 "${PYTEST[@]}" -k 'candidate_is_sanitizer_clean and handed and persistent and memcheck'
D64NC="C1 BN128 S2 persistent tma-o q2 tile-handed"
D64C="C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)"
D128="C2 BN128 S2 persistent pp tma-o q2 tile-handed"
tune nc1024-d64-fp16 --dtype float16 --no-causal --shape 16,32,1024,64 --timing graph --reps 60 --against cudnn \
  --predict "$D64NC=1.003-1.020"
tune c512-d64-fp16 --dtype float16 --causal --shape 32,32,512,64 --timing graph --reps 60 --against cudnn \
  --predict "$D64C=1.000-1.020"
tune c1024-d128-fp16 --dtype float16 --causal --shape 16,16,1024,128 --timing graph --reps 60 --against cudnn \
  --predict "$D128=1.000-1.015"
tune nc2048-d128-bf16 --dtype bfloat16 --no-causal --shape 8,16,2048,128 --timing graph --reps 60 --against cudnn \
  --predict "$D128=0.995-1.010"
rm -f "$W"/l2/*.ncu-rep
grep -h "the default against" "$L"/tune-*.log
tail -12 "$L/probes.log"
grep -E "^(FAILED|ERROR)|passed|failed" "$L/flush-tests.log" "$L/gate.log" "$L/sanitizers.log" | tail -12
gpu_call_end flush-tests gate sanitizers

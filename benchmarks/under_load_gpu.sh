#!/usr/bin/env bash
# The timer under load (lab.measure.timed, UNDER LOAD; `lab bench --under-load`, `lab tune --under-load`) on a GPU,
# at the cell step 18 found power-bound (benchmarks/v9_notes.md, "Step 18"): 16,32,1024,64 causal fp16.
# Predicted (written before the run, from clock_probe's 3 s turns): alone, v9 within 1% of cuDNN and both at about
# 1980 MHz; under load (50 ms), both power-capped in most repetitions at 1750-1900 MHz, v9 0.99-1.03x cuDNN; the tune
# under load has the old one-warpgroup default at 0.94-0.97x the ping-pong default, alone 0.985-1.01x.
#
#   OUT=$OUT bash benchmarks/under_load_gpu.sh   # on the kind lent (H100 or H200); carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin underload
build_v9 300
step gpu-test 120 python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_nvml.py -k under_load
S=(--variant v9 --shape 16,32,1024,64 --causal --backends cudnn)
step bench-alone 120 python3 -m lab.cli bench "${S[@]}"
step bench-loaded 120 python3 -m lab.cli bench "${S[@]}" --under-load 50
OLD='C1 BN128 S2 persistent tma-o half'
step tune-alone 150 python3 -m lab.cli tune --variant v9 --shape 16,32,1024,64 --causal --profiles "$W/tunes" \
  --predict "$OLD=0.985-1.01"
step tune-loaded 200 python3 -m lab.cli tune --variant v9 --shape 16,32,1024,64 --causal --profiles "$W/tunes" \
  --under-load 50 --predict "$OLD=0.94-0.97"
for f in bench-alone bench-loaded tune-alone tune-loaded; do tail -25 "$L/$f.log"; done
gpu_call_end gpu-test

#!/usr/bin/env bash
# v9 step 10's GPU call (issue 28; benchmarks/v9_notes.md, "Step 10"): build v9 and its tuning build, gate the
# new causal D=64 default from Nq, Nk >= 8192 (three consumers, Long64) and its candidate below it (float64
# with the LSE at 8200 x 8192; memcheck through the candidate), `lab tune` at the D=64 causal shapes each side
# of the rule, with the predictions written before any run, and the fa-grid's D=64 causal cells from 4096 against
# cuDNN (graph replay). Logs, tune and sweep stores under $OUT, in one archive ($OUT/v9s10.tgz: the device tool
# brings back only a few files), and a table of every prediction's verdict printed last.
#
#   OUT=$OUT bash benchmarks/v9_step10_gpu.sh      # one GPU, about 8 minutes cold
set -uo pipefail
OUT=${OUT:-/tmp/lab-out}; W=$OUT/v9s10; L=$W/logs; mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export LAB_CACHE=${LAB_CACHE:-$PWD/.lab-cache}
T0=$SECONDS
step() {   # step NAME LIMIT COMMAND...: its log under $L, its exit status and seconds printed and in steps.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$L/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0))s (at $((SECONDS - T0))s)" | tee -a "$L/steps.log"
}
step build 200 python3 -m lab.cli build --variant v9 &
step build-tuning 420 python3 -m lab.cli build --variant v9 --tuning
wait
grep -c "C75" "$L/build-tuning.log" | sed 's/^/ptxas C75xx notices in the tuning build: /'
P=(python3 -m pytest -m gpu -v -rfE --tb=short -p no:randomly -p no:cacheprovider tests/test_v9_gpu.py)
step gate 300 "${P[@]}" -k 'test_v9_matches_float64 and Nq8200 or test_v9_writes and Nq8200 or 64-1-causal'
OLD='C1 BN128 S2 persistent tma-o'
L3='C3 BN128 S2 persistent (causal)'
tune() { local name=$1; shift; step "tune-$name" 100 python3 -m lab.cli tune --variant v9 --profiles "$W/tunes" "$@"; }
tune 2048-c --dtype float16 --causal --shape 8,32,2048,64 --predict "$L3=0.90-0.97"
tune 4096-c --dtype float16 --causal --shape 4,32,4096,64 --predict "$L3=0.98-1.04"
tune 8192-c --dtype float16 --causal --shape 2,32,8192,64 --predict "$OLD=0.92-0.96" --predict "$L3=0.98-1.02"
tune 8192-c-bf16 --dtype bfloat16 --causal --shape 2,32,8192,64 --predict "$OLD=0.92-0.96"
tune 16384-c --dtype float16 --causal --shape 1,32,16384,64 --predict "$OLD=0.925-0.97"
step sweep 200 python3 -m lab.cli sweep --variant v9 --shape 4,32,4096,64 --shape 2,32,8192,64 --shape 1,32,16384,64 \
  --causal yes --dtype float16,bfloat16 --baselines sdpa-cudnn --timing graph --name v9-d64-causal-long --profiles "$W/sweeps"
for f in gate; do grep -E "^(FAILED|ERROR)" "$L/$f.log" | head -10; tail -1 "$L/$f.log"; done
python3 benchmarks/tune_verdicts.py "$W/tunes"
tail -25 "$L/sweep.log"
tar czf "$OUT/v9s10.tgz" -C "$OUT" v9s10 && rm -rf "$W"
echo "total $((SECONDS - T0))s"

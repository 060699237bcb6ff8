#!/bin/bash
# Plant the cheats before the lab's own commands, on a GPU: `lab bench`, `lab sweep` and `lab profile`
# of tests/cheats at issue 22's shape (B8 H16 N2048 D64 fp16), and the GPU tests of the checked timer.
#   tests/cheats/record.sh OUT_DIR [BEFORE_ROOT]
# BEFORE_ROOT: a checkout of the lab before the checked timer, whose `lab sweep` of the same rungs
# shows what the cheats got then. Logs go to OUT_DIR; benchmarks/RESULTS.md quotes them.
set -u
OUT_DIR=$1; BEFORE=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
SHAPE=8,16,2048,64; SWEPT=side,cached,valuecache,honest
BWD=bwd_side,bwd_cached,bwd_lazy,bwd_partial,bwd_honest,bwd_joined
mkdir -p "$OUT_DIR"
export LAB_WORKSPACE=$HERE
lab() { timeout "$1" python3 -m lab.cli "${@:2}"; }
rows() {   # a stored sweep's rows: implementation, status, median, TFLOP/s, reason
  PYTHONPATH=$ROOT:${PYTHONPATH:-} python3 - "$1" <<'PY'
import sys
from lab.store import sweeps
for sw in sweeps.list_sweeps(sys.argv[1]):
    for r in sw.rows():
        t = f"{r['median_ms']:.4f} ms {r['tflops']:.0f} TFLOP/s" if r["status"] == "ok" else "no time"
        print(f"{r['impl']:<11} {r['timing']:<7} {r['status']:<7} {t:<26} {r.get('reason') or ''}")
PY
}
if [ -n "$BEFORE" ]; then
  (cd "$HERE" && PYTHONPATH=$BEFORE:${PYTHONPATH:-} LAB_PROFILES=/tmp/cheats-before lab 60 sweep --variant $SWEPT \
     --shape $SHAPE --dtype float16 --baselines sdpa-cudnn,sdpa-flash --timing events) > "$OUT_DIR/before_sweep.log" 2>&1
  echo "before sweep rc=$?" >> "$OUT_DIR/before_sweep.log"
  rows /tmp/cheats-before > "$OUT_DIR/before_sweep.rows"
fi
export PYTHONPATH=$ROOT:${PYTHONPATH:-}
cd "$HERE"
LAB_PROFILES=/tmp/cheats-after lab 90 bench --variant side,cached,lazy,partial,precision,deferred,valuecache,honest,joined \
  --shape $SHAPE --dtype float16 --backends cudnn,flash --markdown "$OUT_DIR/after_bench.md" > "$OUT_DIR/after_bench.log" 2>&1
echo "bench rc=$?" >> "$OUT_DIR/after_bench.log"
LAB_PROFILES=/tmp/cheats-after lab 60 sweep --variant $SWEPT --shape $SHAPE --dtype float16 \
  --baselines sdpa-cudnn,sdpa-flash --timing events > "$OUT_DIR/after_sweep.log" 2>&1
echo "sweep rc=$?" >> "$OUT_DIR/after_sweep.log"
rows /tmp/cheats-after > "$OUT_DIR/after_sweep.rows"
LAB_PROFILES=/tmp/cheats-bwd lab 120 bench --variant $BWD --mode bwd --shape $SHAPE --dtype float16 \
  --backends cudnn,flash --markdown "$OUT_DIR/bwd_bench.md" > "$OUT_DIR/bwd_bench.log" 2>&1
echo "bench bwd rc=$?" >> "$OUT_DIR/bwd_bench.log"
LAB_PROFILES=/tmp/cheats-bwd lab 240 sweep --variant $BWD --mode bwd,fwd+bwd --shape $SHAPE --dtype float16 \
  --no-baselines --timing both > "$OUT_DIR/bwd_sweep.log" 2>&1
echo "sweep bwd rc=$?" >> "$OUT_DIR/bwd_sweep.log"
rows /tmp/cheats-bwd > "$OUT_DIR/bwd_sweep.rows"
for v in bwd_side bwd_cached; do
  LAB_PROFILES=/tmp/cheats-bwd lab 60 profile --variant $v --mode bwd --shape $SHAPE --dtype float16 --no-ncu \
    --no-baselines --no-report > "$OUT_DIR/bwd_profile_$v.log" 2>&1
  echo "profile $v bwd rc=$?" >> "$OUT_DIR/bwd_profile_$v.log"
done
LAB_PROFILES=/tmp/cheats-after lab 40 profile --variant side --shape $SHAPE --dtype float16 --no-ncu --no-baselines \
  --no-report > "$OUT_DIR/after_profile.log" 2>&1
echo "profile rc=$?" >> "$OUT_DIR/after_profile.log"

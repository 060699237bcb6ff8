#!/bin/sh
# Record the example workspace's runs and the GPU numbers of issue 10 on the GPU machine, in one call.
# From the repository root there (after the brief's wheel install line):
#   sh examples/workspace/record.sh
# It writes under $OUT (or /tmp/out), 8 files: the cold parallel build table build-cold.md (append it
# to benchmarks/RESULTS.md), a log per step, and examples-workspace-profiles.tgz (unpack it in
# examples/workspace/: the stored runs that `lab report` there renders without a GPU).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$(pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export LAB_CACHE="$(mktemp -d)"   # an empty build cache: the first build below is cold

# 1. a cold parallel build of the five rungs issue 10 measured one after another (155 s), then the
#    rest (v6 and the workspace's CUDA rung) into the same cache for the steps below
python3 -m lab.cli build --variant v1,v2,v3,v4,v5 --markdown "$OUT/build-cold.md" > "$OUT/build-cold.log" 2>&1
echo "cold build: exit $?"; cat "$OUT/build-cold.md"
(cd examples/workspace && python3 -m lab.cli build --variant all >> "$OUT/build-cold.log" 2>&1); echo "build all: exit $?"

# 2. the example workspace's rungs through lab profile (runs land in examples/workspace/profiles/)
cd "$ROOT/examples/workspace"
python3 -m lab.cli profile --variant my1 > "$OUT/profile-my1.log" 2>&1; echo "profile my1: exit $?"
python3 -m lab.cli profile --variant my2 --dtype float16 > "$OUT/profile-my2.log" 2>&1; echo "profile my2: exit $?"
python3 -m lab.cli report > "$OUT/report.log" 2>&1; echo "report: exit $?"; tail -2 "$OUT/report.log"
tar czf "$OUT/examples-workspace-profiles.tgz" profiles
cd "$ROOT"

# 3. the registry-driven GPU test over every rung (built-in and this workspace's); the sanitizer last
timeout 300 python3 -m pytest -q -m gpu tests/test_rungs_gpu.py -k "not sanitizer" > "$OUT/test-rungs-gpu.log" 2>&1
echo "test_rungs_gpu: exit $?"; tail -3 "$OUT/test-rungs-gpu.log"
timeout 240 python3 -m pytest -q -m gpu tests/test_rungs_gpu.py -k sanitizer > "$OUT/test-rungs-sanitizer.log" 2>&1
echo "sanitizer: exit $?"; tail -3 "$OUT/test-rungs-sanitizer.log"

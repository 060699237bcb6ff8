#!/usr/bin/env bash
# Record the two v9 reports of tests/fixtures/ncu/ that tests/test_instruction_fetch.py reads: the rung's
# default D=64 causal forward and its tuning candidate "C1 BN128 S2 persistent tma-o half-softmax"
# (kernels/hopper/fwd_wgmma.cuh's HalfLastKeyTile), at B=16 H=32 N=1024 D=64 fp16 causal. The candidate
# carries two more copies of the key loop than the default and loses to it on instruction fetch (Stall No
# Instruction 15.9% of the PC samples against 1.4%): a planted-by-accident instruction-cache case. Step 13
# retired that candidate from v9's table: rerun this from a checkout of 83bbec5, which still has it.
#
#   tests/planted/record_icache.sh OUT_DIR      on a Hopper GPU machine with nvcc and ncu
#
# The fixtures were recorded at commit e982121, where HalfLastKeyTile carried three copies of the key loop.
# From v9's step 11 (b) on, the same label builds one key loop with the half tile's last step peeled off it
# (the fix): run at a later commit, this script measures the fix, not the case. To record the case again:
#   git worktree add /tmp/lab-e982121 e982121 && /tmp/lab-e982121/tests/planted/record_icache.sh OUT_DIR
# (copy this script and cand_one.py into that tree first: they were added after it).
#
# Builds v9 and its tuning extension (`lab build --variant v9 [--tuning]`), then profiles the third launch
# of each kernel (after two warm-up launches) with ncu's `detailed` set (the lab's default) and the source
# imported, xz-compressing each report into OUT_DIR with ncu's log beside it.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out=${1:?usage: record_icache.sh OUT_DIR}
mkdir -p "$out"
log="$out/record-icache.log"
shape=(16 32 1024 64 1)   # B H N D causal

{
  echo "== $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  ncu --version | tail -1
  nvcc --version | tail -1
} >>"$log" 2>&1

echo "== build v9 and its tuning extension" | tee -a "$log"
timeout 600 python3 -m lab.cli build --variant v9 >>"$log" 2>&1 || { echo "build failed; see $log"; exit 1; }
timeout 900 python3 -m lab.cli build --variant v9 --tuning >>"$log" 2>&1 \
  || { echo "tuning build failed; see $log"; exit 1; }

record() {  # fixture name, candidate label
  local name=$1 label=$2
  echo "== ncu: $name ($label)" | tee -a "$log"
  timeout 300 ncu --set detailed --import-source yes -k regex:fwd_kernel --launch-skip 2 -c 1 -f -o "$out/$name" \
    python3 "$here/cand_one.py" v9 "$label" "${shape[@]}" >"$out/$name-ncu.log" 2>&1
  local rc=$?
  echo "   exit $rc" | tee -a "$log"
  tail -2 "$out/$name-ncu.log" | tee -a "$log"
  [[ -f "$out/$name.ncu-rep" ]] && xz -9 -f "$out/$name.ncu-rep"
  return $rc
}

record v9-d64-causal-default-h100 "default"
record v9-d64-causal-half-softmax-h100 "C1 BN128 S2 persistent tma-o half-softmax"
ls -la "$out" | tee -a "$log"

#!/usr/bin/env bash
# Record the Nsight Compute reports that tests/test_analysis.py reads (tests/fixtures/ncu/*.xz).
#
#   tests/planted/record.sh OUT_DIR        on a GPU machine with nvcc and ncu: build, profile, xz
#   tests/planted/record.sh --build-only   compile planted.cu only (works without a GPU)
#
# Writes to OUT_DIR: planted.ncu-rep.xz (the eight planted kernels), sdpa.ncu-rep.xz (torch SDPA
# flash/efficient/cudnn/math at fp16 B=4 H=16 N=2048 D=128), the ncu logs, passes.log (replay passes
# of each lab set, of ncu's sets and of each section alone) and record.log (versions, choices).
# Profiles through `python -m lab.nsight.ncu profile`, the command line `lab profile` uses, with
# --clock-control none and the richest lab set (lab.nsight.ncu.SECTION_SETS) that costs at most
# 20 replay passes here; record.log names it, and lab.nsight.ncu.DEFAULT_IS must match it.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

if [[ "${1:-}" == "--build-only" ]]; then
  out=$(mktemp -d)
  arch=${PLANTED_ARCH:-90}
else
  out=${1:?usage: record.sh OUT_DIR | --build-only}
  arch=${PLANTED_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
fi
mkdir -p "$out"
log="$out/record.log"
bin="$(mktemp -d)/planted"

echo "== build planted.cu for sm_$arch" | tee -a "$log"
nvcc -O3 -lineinfo -gencode="arch=compute_$arch,code=sm_$arch" -Xptxas -v -o "$bin" "$here/planted.cu" >>"$log" 2>&1 \
  || { echo "build failed; see $log"; tail -20 "$log"; exit 1; }
grep -E "stack frame|Used" "$log" | tail -16
if [[ "${1:-}" == "--build-only" ]]; then
  echo "built $bin"
  exit 0
fi

{
  echo "== $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  ncu --version | tail -1
  nvcc --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  python3 -m lab.nsight.ncu command -- TARGET
} >>"$log" 2>&1

profile() {  # name, then extra profile args, then -- target...
  local name=$1; shift
  echo "== ncu: $name" | tee -a "$log"
  timeout 200 python3 -m lab.nsight.ncu profile --report "$out/$name.ncu-rep" --log "$out/$name-ncu.log" "$@" \
    >>"$log" 2>&1
  local rc=$?
  echo "   exit $rc" | tee -a "$log"
  grep -E "==PROF== Profiling|passes|==ERROR==|==WARNING==" "$out/$name-ncu.log" 2>/dev/null | tail -24 | tee -a "$log"
  return $rc
}

# Count replay passes: each lab set on two kernels, ncu's own sets and each section alone on one.
passes() { timeout 60 python3 -m lab.nsight.ncu passes --set "$1" --kernel "$2" -- "$bin" 2>>"$log" | tee -a "$out/passes.log"; }
echo "== replay passes (set, passes)" | tee -a "$log"
chosen=""
for s in lab-tables lab-lean lab-minimal; do
  a=$(passes "$s" planted_local_memory | cut -f2); b=$(passes "$s" planted_bank_conflicts | cut -f2)
  if [[ -z "$chosen" && "$a" =~ ^[0-9]+$ && "$b" =~ ^[0-9]+$ && $a -le 20 && $b -le 20 ]]; then chosen=$s; fi
done
for s in lab-all detailed basic full SpeedOfLight, LaunchStats, Occupancy, ComputeWorkloadAnalysis, \
         MemoryWorkloadAnalysis, MemoryWorkloadAnalysis_Tables, WarpStateStats, SourceCounters, InstructionStats, \
         SchedulerStats,; do
  passes "$s" planted_local_memory >/dev/null
done
chosen=${chosen:-detailed}
echo "== chosen section set: $chosen" | tee -a "$log"

profile planted --set "$chosen" -- "$bin"
profile sdpa --set "$chosen" \
             --nvtx-range "lab sdpa-flash B4-H16-N2048-D128-float16" \
             --nvtx-range "lab sdpa-efficient B4-H16-N2048-D128-float16" \
             --nvtx-range "lab sdpa-cudnn B4-H16-N2048-D128-float16" \
             --nvtx-range "lab sdpa-math B4-H16-N2048-D128-float16" -- python3 "$here/sdpa.py"
# An NVTX filter that matches nothing: the lab must say so (exit 2); keep a report if ncu writes one.
profile none --set "$chosen" --nvtx-range "lab no such range" -- "$bin"
echo "   (exit 2 expected above: no kernels profiled)" | tee -a "$log"

for f in "$out"/*.ncu-rep; do
  [[ -f "$f" ]] && xz -9 -f "$f"
done
ls -la "$out" | tee -a "$log"

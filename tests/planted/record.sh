#!/usr/bin/env bash
# Record the Nsight Compute reports that tests/test_analysis.py reads (tests/fixtures/ncu/*.xz).
#
#   tests/planted/record.sh OUT_DIR        on a GPU machine with nvcc and ncu: build, profile, xz
#   tests/planted/record.sh --build-only   compile planted.cu only (works without a GPU)
#
# Writes to OUT_DIR: planted.ncu-rep.xz (the ten planted kernels, built with -lineinfo, their source
# imported into the report: --import-source yes is part of the lab's command line), sdpa.ncu-rep.xz (torch SDPA
# flash/efficient/cudnn/math at fp16 B=4 H=16 N=2048 D=128), the ncu logs, passes.log (replay passes
# of each set and section, with PROBE_PASSES=1) and record.log (versions, commands, passes).
# Profiles through `python -m lab.profilers.ncu profile`, the command line `lab profile` uses, with
# --clock-control none and the lab's default section set (lab.profilers.ncu.DEFAULT_IS).
# RECORD_SDPA=0 skips the SDPA report (it needs torch and is the slow one).
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
  python3 -m lab.profilers.ncu command -- TARGET
} >>"$log" 2>&1

profile() {  # name, then extra profile args, then -- target...
  local name=$1; shift
  echo "== ncu: $name" | tee -a "$log"
  timeout 200 python3 -m lab.profilers.ncu profile --report "$out/$name.ncu-rep" --log "$out/$name-ncu.log" "$@" \
    >>"$log" 2>&1
  local rc=$?
  echo "   exit $rc" | tee -a "$log"
  grep -E "==PROF== Profiling|passes|==ERROR==|==WARNING==" "$out/$name-ncu.log" 2>/dev/null | tail -24 | tee -a "$log"
  return $rc
}

# Optional (PROBE_PASSES=1): count the replay passes of each lab set and of each section alone.
# It reads the counts from the reports with ncu_report, so the ncu-report wheel must be installed
# (ncu's own extras/python copy crashed the GPU machine's Python 3.12).
if [[ "${PROBE_PASSES:-0}" == 1 ]]; then
  echo "== replay passes (set, passes)" | tee -a "$log"
  for s in detailed lab-all lab-tables lab-lean lab-minimal SpeedOfLight, LaunchStats, Occupancy, \
           ComputeWorkloadAnalysis, MemoryWorkloadAnalysis, MemoryWorkloadAnalysis_Tables, WarpStateStats, \
           SourceCounters, InstructionStats, SchedulerStats,; do
    timeout 60 python3 -m lab.profilers.ncu passes --set "$s" --kernel planted_local_memory -- "$bin" 2>>"$log" \
      | tee -a "$out/passes.log"
  done
fi
chosen=$(python3 -c "import lab.profilers.ncu as n; print(n.DEFAULT_IS)")
echo "== section set: $chosen (the lab's default)" | tee -a "$log"

profile planted --set "$chosen" -- "$bin"
[[ "${RECORD_SDPA:-1}" == 1 ]] && profile sdpa --set "$chosen" \
             --nvtx-range "lab sdpa-flash B4-H16-N2048-D128-float16" \
             --nvtx-range "lab sdpa-efficient B4-H16-N2048-D128-float16" \
             --nvtx-range "lab sdpa-cudnn B4-H16-N2048-D128-float16" \
             --nvtx-range "lab sdpa-math B4-H16-N2048-D128-float16" -- python3 "$here/sdpa.py"
# The same kernels with ncu's `basic` set: no SourceCounters, so no per-line data (the analysis says so).
profile planted-basic --set basic -- "$bin"
# An NVTX filter that matches nothing: the lab must say so (exit 2); keep a report if ncu writes one.
profile none --set "$chosen" --nvtx-range "lab no such range" -- "$bin"
echo "   (exit 2 expected above: no kernels profiled)" | tee -a "$log"

for f in "$out"/*.ncu-rep; do
  [[ -f "$f" ]] && xz -9 -f "$f"
done
ls -la "$out" | tee -a "$log"

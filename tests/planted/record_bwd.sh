#!/usr/bin/env bash
# Record the backward Nsight Compute reports the lab's backward rules are tested on
# (tests/fixtures/ncu/sdpa-*-bwd.ncu-rep.xz, planted-bwd.ncu-rep.xz).
#
#   tests/planted/record_bwd.sh OUT_DIR        on a GPU machine with nvcc, ncu and torch
#
# Writes to OUT_DIR: planted-bwd.ncu-rep.xz (tests/planted/planted_bwd.cu: dQ reduced with atomics,
# and the same partials stored privately), sdpa-{flash,cudnn,efficient}-bwd.ncu-rep.xz (torch SDPA's
# backward at fp16 B2 H8 N1024 D128, each backend's kernels inside one NVTX range, tests/planted/sdpa_bwd.py),
# one ncu log per report, and record-bwd.log (versions, commands, what ncu profiled).
# Profiles through `python -m lab.profilers.ncu profile`, the command line `lab profile` uses, with
# --clock-control none and the lab's default section set (lab.profilers.ncu.DEFAULT_IS).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out=${1:?usage: record_bwd.sh OUT_DIR}
shape=(2 8 1024 128)   # B H N D, passed to sdpa_bwd.py so the range name and the launch agree
arch=${PLANTED_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
[[ "$arch" == 90 ]] && arch=90a
mkdir -p "$out"
log="$out/record-bwd.log"
bin="$(mktemp -d)/planted_bwd"

{
  echo "== $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  ncu --version | tail -1
  nvcc --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  echo "section set: $(python3 -c 'import lab.profilers.ncu as n; print(n.DEFAULT_IS)')"
  python3 -m lab.profilers.ncu command -- TARGET
} >>"$log" 2>&1

echo "== build planted_bwd.cu for sm_$arch" | tee -a "$log"
nvcc -O3 -lineinfo -gencode="arch=compute_$arch,code=sm_$arch" -Xptxas -v -o "$bin" "$here/planted_bwd.cu" >>"$log" 2>&1 \
  || { echo "build failed; see $log"; tail -20 "$log"; exit 1; }

profile() {  # name, then profile args, then -- target...
  local name=$1; shift
  echo "== ncu: $name" | tee -a "$log"
  local t0=$SECONDS
  timeout 170 python3 -m lab.profilers.ncu profile --report "$out/$name.ncu-rep" --log "$out/$name-ncu.log" "$@" \
    >>"$log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  grep -E "==PROF== Profiling|==ERROR==|==WARNING==|sdpa " "$out/$name-ncu.log" 2>/dev/null | tail -24 | tee -a "$log"
  return $rc
}

profile planted-bwd -- "$bin"
for b in ${BACKENDS:-flash cudnn efficient}; do
  profile "sdpa-$b-bwd" --nvtx-range "lab sdpa-$b-bwd B${shape[0]}-H${shape[1]}-N${shape[2]}-D${shape[3]}-float16" \
    -- python3 "$here/sdpa_bwd.py" "$b" "${shape[@]}"
done

for f in "$out"/*.ncu-rep; do
  [[ -f "$f" ]] && xz "-${XZ_LEVEL:-9}" -T0 -f "$f"   # XZ_LEVEL=6 on a GPU lease: -9 of a 60 MB report is single-threaded minutes
done
ls -la "$out" | tee -a "$log"

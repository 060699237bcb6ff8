#!/usr/bin/env bash
# Compile every kernels/*.cu with nvcc for sm_90a (Hopper, arch-specific) and sm_80 (Ampere), with
# ptxas -v, and fail if any rung does not compile. No GPU needed; CI runs this (.ci/run).
#
#   tools/compile_kernels.sh                 # all rungs
#   tools/compile_kernels.sh --fail-on-spills   # also fail when ptxas reports spill stores or loads
#   tools/compile_kernels.sh --fail-on-serialized-wgmma   # also fail when ptxas serialized a wgmma pipeline
#   tools/compile_kernels.sh kernels/v2_float4.cu  # some rungs
#
# The flags match the extension build (lab/ladder/build.py): -O3 -lineinfo, plus the defines torch's
# extension build passes to nvcc (read from torch when it is installed), so a rung that compiles
# here also compiles there. Each rung's ptxas lines are printed, then one summary line per rung.
# A serialized wgmma pipeline is ptxas's "(C75xx) ... wgmma.mma_async instructions are serialized due
# to <reason> in the function '<kernel>'": a wait after every product (lab build shows the kernels).
set -euo pipefail
cd "$(dirname "$0")/.."

fail_on_spills=0
fail_on_serialized=0
files=()
for arg in "$@"; do
  case "$arg" in
    --fail-on-spills) fail_on_spills=1 ;;
    --fail-on-serialized-wgmma) fail_on_serialized=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) files+=("$arg") ;;
  esac
done
if [ ${#files[@]} -eq 0 ]; then
  shopt -s nullglob
  files=(kernels/*.cu)
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "error: no kernels/*.cu to compile" >&2
  exit 2
fi

NVCC="${NVCC:-nvcc}"
if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "error: nvcc not found: install the CUDA toolkit and put its bin/ on PATH (or set NVCC)" >&2
  exit 2
fi
"$NVCC" --version | tail -n 2

# torch's COMMON_NVCC_FLAGS (e.g. -D__CUDA_NO_HALF_OPERATORS__); empty when torch is not installed.
torch_flags="$(python3 -c 'from torch.utils.cpp_extension import COMMON_NVCC_FLAGS as f; print(" ".join(f))' 2>/dev/null || true)"
[ -n "$torch_flags" ] || echo "note: torch not importable; compiling without its nvcc defines"

GENCODES=(-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80)
out_dir="$(mktemp -d)"
trap 'rm -rf "$out_dir"' EXIT

failed=()
spilled=()
serialized=()
for f in "${files[@]}"; do
  name="$(basename "$f" .cu)"
  log="$out_dir/$name.log"
  echo "== $f"
  # shellcheck disable=SC2086  # torch_flags is a list of flags
  if "$NVCC" -c -O3 -lineinfo $torch_flags "${GENCODES[@]}" -Xptxas -v -I kernels \
       -o "$out_dir/$name.o" "$f" >"$log" 2>&1; then
    grep -E "Compiling entry|spill|Used [0-9]+ registers|warning|instructions are serialized" "$log" || true
    kernels=$(grep -c "Compiling entry function" "$log" || true)
    spills=$(grep -Eo "[0-9]+ bytes spill (stores|loads)" "$log" | awk '{s += $1} END {print s + 0}')
    # the functions ptxas serialized, each once (a notice per arch that compiles wgmma)
    serial=$({ grep -Eo "wgmma\.mma_async instructions are serialized due to .* function '[^']+'" "$log" || true; } \
               | sed -E "s/.*function '([^']+)'/\1/" | sort -u | wc -l)
    echo "-- $name: ok, $kernels kernel compilations, $spills bytes spilled, $serial with wgmma serialized"
    if [ "$spills" -gt 0 ]; then spilled+=("$name"); fi
    if [ "$serial" -gt 0 ]; then serialized+=("$name"); fi
  else
    cat "$log"
    echo "-- $name: FAILED to compile"
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "error: ${#failed[@]} rung(s) failed to compile: ${failed[*]}" >&2
  exit 1
fi
if [ ${#spilled[@]} -gt 0 ]; then
  echo "spills in: ${spilled[*]}"
  if [ "$fail_on_spills" = 1 ]; then
    echo "error: --fail-on-spills and ptxas reported spills" >&2
    exit 1
  fi
fi
if [ ${#serialized[@]} -gt 0 ]; then
  echo "wgmma serialized in: ${serialized[*]}"
  if [ "$fail_on_serialized" = 1 ]; then
    echo "error: --fail-on-serialized-wgmma and ptxas serialized a wgmma pipeline" >&2
    exit 1
  fi
fi
echo "all ${#files[@]} rung(s) compiled for sm_90a and sm_80"

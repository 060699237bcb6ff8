#!/usr/bin/env bash
# One batched call on the GPU machine: install the carried wheels, then run the steps named in
# $STEPS (default: all) and write every log under $OUT, printing a short table last.
#   STEPS="doctor build gputests profile bench" bash benchmarks/gpu_session.sh
set -uo pipefail
OUT=${OUT:-/tmp/lab-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || echo "editable install failed (see install.log)"
export PATH=$PATH:/opt/nvidia/nsight-compute/2025.3.1 PYTHONUNBUFFERED=1
STEPS=${STEPS:-"doctor build gputests profile bench"}
declare -A RC
step() { local name=$1; shift; local t0=$SECONDS; "$@" >"$OUT/$name.log" 2>&1; RC[$name]="rc=$? $((SECONDS-t0))s"; }
for s in $STEPS; do
  case $s in
    doctor)   step doctor lab doctor ;;
    build)    step build lab build --variant "${VARIANTS:-all}" ;;
    rebuild)  step rebuild lab build --variant "${VARIANTS:-all}" ;;   # a second build: everything cached
    gputests) step gputests python3 -m pytest -m gpu -rs -q ${GPU_TESTS:-} ;;
    profile)  for v in ${PROFILE_VARIANTS:-v1 v2}; do
                step "profile_$v" env LAB_PROFILES=$PWD/profiles/examples lab profile --variant $v ${PROFILE_ARGS:-} --no-report
              done ;;
    bench)    step bench lab bench --variant "${BENCH_VARIANTS:-all}" ${BENCH_ARGS:-} ;;
    results)  # the side-by-side tables behind benchmarks/RESULTS.md, appended as Markdown
              md=$OUT/RESULTS.part.md
              step results_ladder lab bench --variant all --markdown "$md"
              step results_fp32 lab bench --variant v3,v4 --shape 8,16,2048,64 --markdown "$md"
              for shape in 8,32,4096,64 8,16,4096,128; do for mask in --no-causal --causal; do
                step "results_v5_${shape//,/x}${mask}" lab bench --variant v5 --shape $shape $mask --markdown "$md"
              done; done ;;
    fullset)  # a 6-kernel `--set full` report, to time `lab analyze` on the kind of file issue 3 names
              r="lab v5 B8-H16-N1024-D64-float16"
              step fullset ncu --set full --clock-control none --nvtx --nvtx-include "$r/" -f -o "$OUT/v5-full-6k" \
                python3 -m lab.measure.target --variant v5 --shape 8,16,1024,64 --dtype float16 --repeat 6
              xz -T0 -f "$OUT/v5-full-6k.ncu-rep" ;;
    coldbuild) # every built-in rung from an empty cache, in parallel (issue 10's build target); warms the cache
              step coldbuild lab build --variant all --markdown "$OUT/build-cold.md" ;;
    examples) # re-record the shipped example runs with this commit's code (sweeps in examples/ stay)
              mkdir -p /tmp/old-examples && find profiles/examples -maxdepth 1 -name '2026*' ! -name '*sweep*' \
                -exec mv {} /tmp/old-examples/ \;
              for v in $(lab variants --json | python3 -c 'import json,sys; print(" ".join(r["id"] for r in json.load(sys.stdin) if r["origin"] == "built-in"))'); do
                step "example_$v" env LAB_PROFILES=$PWD/profiles/examples lab profile --variant $v --timeline --no-report
              done ;;
    workspace) # the example workspace's own rungs (a first-time user's CUDA rung, a Triton rung)
              pushd examples/workspace >/dev/null
              for v in my1 my2; do
                d=""; [ $v = my2 ] && d="--dtype float16"
                step "workspace_$v" lab profile --variant $v $d --timeline --no-report
              done
              tar czf "$OUT/workspace-profiles.tgz" profiles; popd >/dev/null ;;
    sweepgrid) # the FlashAttention grid: v5 and v6 beside cuDNN and FA2 (RESULTS.md's grid table)
              step sweepgrid env LAB_PROFILES=$PWD/profiles/examples lab sweep --variant v5,v6 --preset fa-grid \
                --mode fwd --baselines sdpa-cudnn,sdpa-flash --name fa-grid-v6 ;;
    loop)     step loop python3 benchmarks/profile_loop.py --variant v3 --out "$OUT/profile_loop.md" ;;
    tune)     step tune lab tune --variant ${TUNE_VARIANT:-v6} --shape ${TUNE_SHAPE:-4,16,4096,128} --dtype float16 ;;
  esac
done
[ -n "${NO_EXAMPLES_TAR:-}" ] || (cd profiles && tar cJf "$OUT/examples.tar.xz" examples) 2>/dev/null
echo "== step  result"; for k in "${!RC[@]}"; do echo "$k ${RC[$k]}"; done | sort
for f in "$OUT"/*.log; do echo "== tail $(basename $f)"; tail -n ${TAIL:-6} "$f"; done
# at most 8 files come back: the logs travel as one archive
(cd "$OUT" && tar cJf logs.tar.xz *.log && rm -f *.log)

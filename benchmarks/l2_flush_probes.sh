#!/usr/bin/env bash
# The L2 flush probe's table (benchmarks/l2_flush_probe.py): each flush after a read with each policy, under ncu with
# its cache control off, then each flush's time, then the DRAM bytes of every report. Needs ncu on PATH and NVIDIA's
# ncu_report module (to read the reports).
#   bash benchmarks/l2_flush_probes.sh DIR   # the reports land in DIR
set -uo pipefail
DIR=${1:?usage: l2_flush_probes.sh DIR}
mkdir -p "$DIR"
PROBE=(python3 "$(dirname "$0")/l2_flush_probe.py")
for policy in evict_last evict_normal; do
  for flush in zero lab swept; do
    [ "$policy" = evict_normal ] && [ "$flush" = swept ] && continue
    ncu --cache-control none --nvtx --nvtx-include 'l2probe/' --nvtx-include 'l2cap/' --metrics dram__bytes_read.sum \
      -f -o "$DIR/l2-$policy-$flush" "${PROBE[@]}" --policy "$policy" --flush "$flush" >/dev/null ||
      echo "probe $policy $flush failed"
  done
done
for flush in zero lab swept; do "${PROBE[@]}" --policy evict_last --flush "$flush" --time | tail -1; done
"${PROBE[@]}" --read "$DIR"/l2-*.ncu-rep

"""Does the timer's L2 flush evict what a kernel loaded evict-last? (issue 28; benchmarks/v9_notes.md, "Step 22")

Step 22's candidates load K and V with an L2 evict-last priority (fwd_wgmma.cuh's L2EvictionHints). The lab's timer
flushes the L2 before every repetition by zeroing a 256 MiB buffer of normal priority (lab.measure.timed.probe_call).
If evict-last lines outlived those writes, a repetition could find its inputs in L2 and time a warm call: a timer
fooled by the kernel it times. This runs one implementation on one input set: a call, the timer's flush (or none),
the same call again inside an NVTX range that Nsight Compute profiles alone, with its cache control off (ncu neither
flushes nor invalidates): the profiled call's DRAM bytes read are what the flush left out of the L2.

    ncu --cache-control none --nvtx --nvtx-include 'l2probe/' --metrics dram__bytes_read.sum -o R \\
        python3 benchmarks/l2_flush_probe.py --shape 1,32,1024,64 --causal --which candidate --flush 1
    python3 benchmarks/l2_flush_probe.py --read R1.ncu-rep R2.ncu-rep ...   # the table

Q, K and V are read once a call (3 x B x H x N x D x 2 bytes): a flushed call reads about that from DRAM, an
unflushed one much less where they fit in the L2. A hinted kernel that reads much less than the default after the
flush means the flush does not hold for it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.ladder import build
from lab.measure.bench import L2_FLUSH_BYTES
from lab.measure.call import inputs, make_call, rung
from probe_args import add_problem_args, candidates, problem_of

RANGE = "l2probe"


def run(a: argparse.Namespace) -> None:
    import nvtx
    import torch

    variant, problem = problem_of(a)
    impl = rung(variant, build.load_cached(variant), problem) if a.which == "default" else \
        next(iter(candidates(variant, problem, a.candidate).values()))
    q, k, v = inputs(problem, impl)
    call = make_call(impl, q, k, v, "fwd")
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    call()
    torch.cuda.synchronize()
    if a.flush:
        flush.zero_()   # the timer's flush (lab.measure.timed.probe_call)
        torch.cuda.synchronize()
    with nvtx.annotate(RANGE):
        call()
    torch.cuda.synchronize()


def read(paths: list[str]) -> None:
    from lab.profilers.ncu import load_report

    metric = "dram__bytes_read.sum"
    print("| report | kernel | DRAM read |")
    print("| --- | --- | --- |")
    for p in paths:
        frame = load_report(p)
        unit = frame.attrs["units"].get(metric, "")
        for _, row in frame.iterrows():
            print(f"| {Path(p).name} | {str(row['kernel'])[:70]} | {row[metric]:,.0f} {unit} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_args(ap)
    ap.add_argument("--which", choices=["default", "candidate"], default="default")
    ap.add_argument("--candidate", default="l2-hints tile-handed", help="a tuning candidate's label or unique part")
    ap.add_argument("--flush", type=int, default=1)
    ap.add_argument("--read", nargs="+", help="print the DRAM bytes of these reports instead")
    a = ap.parse_args()
    if a.read:
        read(a.read)
    else:
        run(a)


if __name__ == "__main__":
    sys.exit(main())

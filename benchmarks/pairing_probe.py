"""Why the fa-grid and `lab tune --against` disagree at one cell (issue 28; benchmarks/v9_notes.md, "Step 21"): at
16,32,1024,64 causal bf16 three H200 grids put v9 at 0.9966-0.9985x cuDNN by graph replay, where `lab tune --against
cudnn --timing graph` put the default at 1.002x (CI95 1.000-1.002). Both are the lab's checked graph timer; a grid
times each implementation's repetitions in a block of their own (30 a pass, two passes), a tune interleaves them
round by round. This times the same two implementations, on one shared workload, both ways in one process:

  blocks       v9 then cuDNN, each a block of --block repetitions (Measurement.time, as a sweep's cell is timed),
               --blocks times over: each block pair's ratio of medians
  interleaved  time_checked_interleaved over both (as a tune is timed): the paired median of the rounds' ratios

If the blocks' ratios sit below the interleaved one, running a kernel's calls back to back (its own power and clock)
is what moves the grid's ratio, not the kernels' device time alone.

    python3 benchmarks/pairing_probe.py --shape 16,32,1024,64 --causal --dtype bfloat16
"""

from __future__ import annotations

import argparse
import statistics

from lab.ladder.build import build
from lab.measure.baselines import attention
from lab.measure.call import rung
from lab.measure.checked import Measurement, Workload
from lab.measure.floor import attention_floor
from lab.measure.bench import GRAPH
from lab.measure.timed import time_checked_interleaved
from lab.measure.tune import paired_ratio
from probe_args import add_problem_args, problem_of


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_problem_args(ap)
    ap.add_argument("--backend", default="cudnn")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--block", type=int, default=30)
    ap.add_argument("--reps", type=int, default=120)
    args = ap.parse_args()
    variant, problem = problem_of(args)
    floor = attention_floor(problem, "fwd", device=torch.cuda.get_device_name())
    ours = rung(variant, build(variant).module, problem)
    sdpa = attention(f"sdpa-{args.backend}", problem.plain())
    workload = Workload(problem, variant.layout)

    def measurement(impl, verify: bool) -> Measurement:
        return Measurement(impl, workload, "fwd", verify=verify, floor=floor)

    ratios = []
    for _ in range(args.blocks):
        mine = measurement(ours, True).time(GRAPH, reps=args.block)
        theirs = measurement(sdpa, False).time(GRAPH, reps=args.block)
        ratios.append((theirs.median / mine.median, mine.median, theirs.median))
    with sdpa.context():
        timings = time_checked_interleaved({"v9": measurement(ours, True).checked(),
                                            "sdpa": measurement(sdpa, False).checked()}, reps=args.reps, method=GRAPH)
    paired = paired_ratio(timings["sdpa"], timings["v9"])   # sdpa over v9: > 1, v9 ahead
    print(f"{variant.id} against sdpa-{args.backend} on {problem.label()}, graph replay, {torch.cuda.get_device_name()}")
    for i, (r, mine, theirs) in enumerate(ratios):
        print(f"block pair {i}: {r:.4f}x (v9 {mine:.4f} ms, sdpa {theirs:.4f} ms, {args.block} reps each)")
    print(f"blocks: median {statistics.median(r for r, _, _ in ratios):.4f}x")
    print(f"interleaved: {paired['paired_median']:.4f}x (CI95 {paired['paired_ci95_low']:.4f}-"
          f"{paired['paired_ci95_high']:.4f}, {paired['rounds']} rounds; v9 {timings['v9'].median:.4f} ms, "
          f"sdpa {timings['sdpa'].median:.4f} ms)")


if __name__ == "__main__":
    main()

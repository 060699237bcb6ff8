"""Why SDPA's call latency depends on what it is timed beside (issue 28; benchmarks/v9_notes.md, "`lab tune --against`
measured"): `lab tune --against cudnn` by events put SDPA's cuDNN at 0.254 ms on 16,32,1024,64 causal fp16, 1.142x
v9's default, where the fa-grid's events column (the same timer, one implementation at a time) put it at 0.235 ms,
1.044x. Both are call latency from an idle GPU, host dispatch included; this says which of the two settings moves
SDPA's dispatch, by timing the same call (the lab's checked timer, 100 repetitions, L2 flushed) in each:

  alone (grid)      run_baseline: SDPA alone, its own workload, inside catch_warnings("always"), as a sweep times it
  alone             time_checked_interleaved over SDPA alone, its backend pinned around the timing, as a tune does
  alone, warnings kept  the same inside catch_warnings(record=True) and "always", as run_baseline times it
  beside default    time_checked_interleaved over v9's default and SDPA, one shared workload (the tune's, no candidates)
  beside 6 defaults the same with six of v9's defaults (separate measurements), the host busy as in a 10-way tune

Each row also gives the host's own time in the call (perf_counter around the Python call, median): the dispatch the
events include. A row's verdicts are the timer's; the host times are not checked, only read.

    python3 benchmarks/events_dispatch_probe.py --shape 16,32,1024,64 --causal
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import warnings

from lab.ladder.build import build
from lab.measure.baselines import attention, run_baseline
from lab.measure.call import rung
from lab.measure.checked import Measurement, Workload
from lab.measure.floor import attention_floor
from lab.measure.timed import TimingRefused, time_checked_interleaved
from probe_args import add_problem_args, problem_of


def host_timed(spec, host_ms: list[float]):
    """The spec with its call's host time recorded (perf_counter around the Python call: its dispatch)."""
    call = spec.call

    def timed_call():
        t0 = time.perf_counter()
        out = call()
        host_ms.append((time.perf_counter() - t0) * 1e3)
        return out

    return dataclasses.replace(spec, call=timed_call)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_problem_args(ap)
    ap.add_argument("--backend", default="cudnn")
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    variant, problem = problem_of(args)
    name = f"sdpa-{args.backend}"
    floor = attention_floor(problem, "fwd", device=torch.cuda.get_device_name())
    plain = build(variant).module
    sdpa = attention(name, problem.plain())
    workload = Workload(problem, variant.layout)
    assert sdpa.layout == variant.layout, "this probe shares one workload: the layouts must agree"
    rows = []

    baseline = run_baseline(problem, args.backend, problem.dtype, reps=args.reps)
    rows.append(("alone (grid)", baseline.timing.median if baseline.timing else None, None, None, None))

    def interleaved(label: str, defaults: int, record_warnings: bool = False, trace: bool = False):
        host: list[float] = []
        specs = {f"default {i}": Measurement(rung(variant, plain, problem), workload, "fwd", floor=floor).checked()
                 for i in range(defaults)}
        specs[name] = host_timed(Measurement(sdpa, workload, "fwd", verify=False, floor=floor).checked(), host)
        reps = 20 if trace else args.reps
        with warnings.catch_warnings(record=record_warnings), sdpa.context():
            if record_warnings:
                warnings.simplefilter("always")
            if trace:   # the host's side of every call: which runtime calls SDPA's dispatch makes, and how long
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    time_checked_interleaved(specs, reps=reps)
                print(f"== {label}, traced ({reps} reps): host events by total CPU time")
                print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
                return
            timings = time_checked_interleaved(specs, reps=reps)
        t = timings[name]
        ours = timings.get("default 0")
        # after the warm-up, each repetition makes an untimed call (the host's warm-up) and then the timed one
        warm, timed = host[-2 * reps::2], host[-2 * reps + 1::2]
        rows.append((label, None if isinstance(t, TimingRefused) else t.median,
                     None if ours is None or isinstance(ours, TimingRefused) else ours.median,
                     statistics.median(warm), statistics.median(timed)))

    interleaved("beside 6 defaults", 6)
    interleaved("beside default", 1)
    interleaved("alone", 0)
    interleaved("alone, warnings kept", 0, record_warnings=True)
    interleaved("beside default", 1)
    interleaved("alone", 0, trace=True)
    interleaved("beside default", 1, trace=True)
    print(f"{name} on {problem.label()}, events, {args.reps} reps, {torch.cuda.get_device_name()}")
    print(f"{'setting':<22} {'sdpa ms':>9} {'default ms':>11} {'sdpa host ms (warm call)':>25} {'(timed call)':>13}")
    for label, ms, ours, warm, timed in rows:
        fmt = (lambda x: f"{x:.4f}" if x is not None else "-")
        print(f"{label:<22} {fmt(ms):>9} {fmt(ours):>11} {fmt(warm):>25} {fmt(timed):>13}")


if __name__ == "__main__":
    main()

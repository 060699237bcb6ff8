"""The SM clock while a rung's forward and cuDNN's run back to back (issue 28; benchmarks/v9_notes.md, "cuDNN under
ncu"). At 16,32,1024,64 fp16 v9's kernel and cuDNN's take the same time under Nsight Compute (each launch from an
idle GPU, equal SM active cycles) but differ by 1-2% when launched back to back (CUPTI's durations, the fa-grid's
graph replay). If the difference is the clock the GPU holds under sustained load, the SM clock sampled through NVML
while each one runs shows it; if the clocks are equal, the difference is in the kernels after all.

Each implementation runs for --seconds in turns (A B A B: drift cancels), its calls queued back to back (a
synchronize every --batch calls keeps the queue short), NVML's SM clock sampled every --every-ms on a thread
(lab.nvml.load, in process). Printed per turn: calls, device time per call (CUDA events around the whole turn,
divided), the clock's median and minimum, the power draw's median, the energy a call (NVML's energy counter over
the turn, divided: the test of "draws more energy per unit of work"), the temperature at the end, and the reasons
NVML gave for a clock below the maximum with the share of samples that gave each (sw_power_cap: the power limit).

Its us/call is not a checked time: the calls run back to back on one input set, nothing verified (a kept result
would look fast). The lab's checked form is `lab tune --under-load MS` / `lab bench --under-load MS`
(lab.measure.timed, UNDER LOAD). This probe says what the GPU does while the calls run.

    python3 benchmarks/clock_probe.py --variant v9 --shape 16,32,1024,64 --causal --dtype float16
    python3 benchmarks/clock_probe.py --candidates 'C2 BN128 S2 persistent tma-o q2;C3 BN128 S2 persistent (non-causal)'

--candidates: tuning candidates of the rung (labels, or unique parts, as `lab tune --predict` names them; ';' between
them) run in the turns too, from its tuning build (built beforehand: `lab build --variant v9 --tuning`).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import threading
import time

from lab import nvml
from lab.environment import gpu_uuid
from lab.ladder import build
from lab.measure import baselines
from lab.measure.call import inputs, make_call, rung
from probe_args import add_problem_args, candidates, problem_of


def load_samples(uuid: str, every_s: float, stop: threading.Event, out: list[dict]) -> None:
    while not stop.is_set():
        out.append(nvml.load(uuid))
        stop.wait(every_s)


def turn(call, seconds: float, batch: int, uuid: str, every_s: float) -> dict:
    """`call` back to back for `seconds`, the GPU's load sampled meanwhile."""
    import torch

    samples: list[dict] = []
    stop = threading.Event()
    sampler = threading.Thread(target=load_samples, args=(uuid, every_s, stop, samples), daemon=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    torch.cuda.synchronize()
    energy_before = nvml.load(uuid)["energy_mj"]
    sampler.start()
    start.record()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(batch):
            call()
        calls += batch
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    stop.set()
    sampler.join()
    after = nvml.load(uuid)

    def values(field):
        return [x[field] for x in samples if x[field] is not None]

    clocks, watts = values("sm_clock_mhz"), values("power_draw_w")
    reasons = collections.Counter(r for x in samples for r in (x["clock_event_reasons"] or ()))
    energy = (after["energy_mj"] - energy_before) if None not in (after["energy_mj"], energy_before) else None
    return {"calls": calls, "us_per_call": 1e3 * start.elapsed_time(end) / calls,
            "clock_median": statistics.median(clocks) if clocks else None, "clock_min": min(clocks, default=None),
            "watts_median": statistics.median(watts) if watts else None,
            "mj_per_call": energy / calls if energy is not None else None,
            "temperature_c": after["temperature_c"], "samples": len(samples),
            "reasons": ", ".join(f"{r} {n / len(samples):.0%}" for r, n in reasons.most_common()) or "none"}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_args(ap)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--turns", type=int, default=3, help="turns of each implementation, alternating")
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--every-ms", type=float, default=5.0)
    ap.add_argument("--candidates", default="", help="tuning candidates, ';' between labels")
    a = ap.parse_args()
    variant, problem = problem_of(a)
    ours = rung(variant, build.load_cached(variant), problem)
    cudnn = baselines.attention("sdpa-cudnn", problem)
    q, k, v = inputs(problem, ours)
    impls = {variant.id: ours}
    if a.candidates:
        impls.update(candidates(variant, problem, a.candidates))
    impls["sdpa-cudnn"] = cudnn
    uuid = gpu_uuid(torch.cuda.get_device_properties(0))
    print(f"{torch.cuda.get_device_name(0)}, {problem.label()}: {a.turns} turns of {a.seconds:g} s each, "
          f"the GPU's load every {a.every_ms:g} ms (NVML)")
    print("| turn | implementation | calls | us/call | SM MHz median | min | W median | mJ/call | C at end | samples "
          "| clock below max because |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in range(a.turns):
        for name, impl in impls.items():
            call = make_call(impl, q, k, v, "fwd")
            with impl.context():   # SDPA's backend pinned around the whole turn, as the lab's timer does
                for _ in range(5):
                    call()   # warm-up: the backend chosen, its plan built
                r = turn(call, a.seconds, a.batch, uuid, a.every_ms / 1e3)
            mj = f"{r['mj_per_call']:.3f}" if r["mj_per_call"] is not None else "n/a"
            print(f"| {t + 1} | {name} | {r['calls']} | {r['us_per_call']:.1f} | {r['clock_median']} | {r['clock_min']} "
                  f"| {r['watts_median']} | {mj} | {r['temperature_c']} | {r['samples']} | {r['reasons']} |", flush=True)


if __name__ == "__main__":
    main()

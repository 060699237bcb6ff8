"""Device time a call of a rung's default and of its tuning candidates, with the host out of it (issue 28;
benchmarks/v9_notes.md, "Step 19"): each implementation's calls captured in one CUDA graph and replayed, and the same
calls queued back to back on the stream, in turns (A B A B: drift cancels). `lab tune` times call latency (CUDA
events around one call from an idle stream, host dispatch included); where a candidate loses there by a few
microseconds a call, this says whether the loss is on the host (the probe's ratios near 1.0) or on the device.

Its us/call is not a checked time: the calls reuse one input set and nothing is verified (a kept result would look
fast). The lab's checked forms are `lab tune` and `lab sweep --timing graph` (a rung's default only).

    python3 benchmarks/graph_probe.py --shape 16,32,1024,64 --causal --candidates 'longest-first pp'
"""

from __future__ import annotations

import argparse
import statistics

from lab.ladder import build
from lab.measure.call import inputs, make_call, rung
from probe_args import add_problem_args, candidates, problem_of


def per_call_us(call, calls: int, graph: bool) -> float:
    import torch

    if graph:
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                call()   # warm-up on the capture stream (the allocator's pool, the backend's plan)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(g):
            for _ in range(calls):
                call()
        run = g.replay
    else:
        def run():
            for _ in range(calls):
                call()
    run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_args(ap)
    ap.add_argument("--calls", type=int, default=50, help="calls a graph (and a back-to-back run)")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--candidates", required=True, help="tuning candidates, ';' between labels (or unique parts)")
    a = ap.parse_args()
    variant, problem = problem_of(a)
    impls = {f"{variant.id} default": rung(variant, build.load_cached(variant), problem),
             **candidates(variant, problem, a.candidates)}
    q, k, v = inputs(problem, next(iter(impls.values())))
    times: dict[tuple[str, bool], list[float]] = {}
    for _ in range(a.turns):
        for name, impl in impls.items():
            call = make_call(impl, q, k, v, "fwd")
            for graph in (True, False):
                times.setdefault((name, graph), []).append(per_call_us(call, a.calls, graph))
    base = f"{variant.id} default"
    print(f"{torch.cuda.get_device_name(0)}, {problem.label()}: median of {a.turns} turns of {a.calls} calls")
    print("| implementation | graph us/call | vs default | back to back us/call | vs default |")
    print("| --- | --- | --- | --- | --- |")
    for name in impls:
        g, s = statistics.median(times[(name, True)]), statistics.median(times[(name, False)])
        g0, s0 = statistics.median(times[(base, True)]), statistics.median(times[(base, False)])
        print(f"| {name} | {g:.1f} | {g0 / g:.3f}x | {s:.1f} | {s0 / s:.3f}x |")


if __name__ == "__main__":
    main()

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

from lab.ladder import build, registry, tuning
from lab.measure.call import inputs, make_call, rung
from lab.measure.problem import Problem


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
    ap.add_argument("--variant", default="v9")
    ap.add_argument("--shape", default="16,32,1024,64", help="B,H,N,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--calls", type=int, default=50, help="calls a graph (and a back-to-back run)")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--candidates", required=True, help="tuning candidates, ';' between labels (or unique parts)")
    a = ap.parse_args()
    b, h, n, d = (int(x) for x in a.shape.split(","))
    problem = Problem(b, h, n, n, d, a.causal, a.dtype)
    variant = registry.get(a.variant)
    impls = {f"{variant.id} default": rung(variant, build.load_cached(variant), problem)}
    module = tuning.tuning_build(variant, allow_compile=False).module
    declared = tuning.declared_candidates(module, d, a.dtype)
    for given in a.candidates.split(";"):
        i = tuning.resolve_label(given, declared, problem, "the tuning build's candidates", "--candidates")
        impls[declared[i].label] = rung(variant, tuning.Candidate(module, i), problem)
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

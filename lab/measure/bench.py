"""Timing: CUDA events around each launch, warm-up first, L2 flushed before every repetition.

Two timing methods, and every stored number says which one it is:
  events  a CUDA event pair around each Python call: CALL LATENCY, host dispatch included. At tiny
          shapes this measures the host (an SDPA call's ~0.03 ms of PyTorch dispatch), not the GPU.
  graph   the call captured once into a CUDA graph, each replay between an event pair: DEVICE TIME of
          the captured kernels plus one graph launch, without Python or PyTorch dispatch.

Statistics reported: median (the headline), mean +- std, a 95% confidence interval of the median
(distribution-free, from order statistics), min and max. Times are in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

from lab.measure.problem import launch_fn

DEFAULT_WARMUP = 5
DEFAULT_REPS = 30
L2_FLUSH_BYTES = 256 * 1024 * 1024  # > 4x the largest L2 we run on (H200: 60 MB)


@dataclass
class Timing:
    unit: str
    median: float
    mean: float
    std: float
    ci95_low: float
    ci95_high: float
    min: float
    max: float
    reps: int
    warmup: int
    l2_flush: bool
    method: str = "cuda-events"
    sync: str = ("a CUDA event pair around each launch on the current stream; one device "
                 "synchronize after the last repetition, before the events are read")
    peak_memory_bytes: int | None = None   # extra device memory one call allocated at its peak
    checks: dict | None = None             # what lab.measure.timed checked before trusting the time

    def to_dict(self) -> dict:
        return asdict(self)


def median_ci95(sorted_samples: list[float]) -> tuple[float, float]:
    """95% CI of the median from order statistics (binomial, normal approximation)."""
    n = len(sorted_samples)
    if n < 6:
        return sorted_samples[0], sorted_samples[-1]
    half_width = 1.96 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half_width)))
    hi = min(n - 1, int(math.ceil(n / 2 + half_width)) - 1)
    return sorted_samples[lo], sorted_samples[hi]


def summarize(samples_ms: list[float], warmup: int, l2_flush: bool) -> Timing:
    s = sorted(samples_ms)
    n = len(s)
    mean = sum(s) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1)) if n > 1 else 0.0
    mid = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    lo, hi = median_ci95(s)
    return Timing("ms", mid, mean, std, lo, hi, s[0], s[-1], n, warmup, l2_flush)


def time_cuda(fn: Callable[[], object], reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
              l2_flush: bool = True) -> Timing:
    """Median-of-`reps` device time of `fn`, each launch bracketed by its own pair of CUDA events."""
    import torch

    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if l2_flush else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush is not None:
            flush.zero_()  # evict Q, K, V from L2 so every repetition reads them from DRAM
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return summarize(samples, warmup, l2_flush)


EVENTS, GRAPH = "events", "graph"
TIMING_METHODS = (EVENTS, GRAPH)
METHOD_DESCRIPTIONS = {
    EVENTS: "call latency: a CUDA event pair around each Python call, started on an idle GPU (host dispatch included)",
    GRAPH: "device time: the call captured once into a CUDA graph, an event pair around each replay on an idle GPU",
}
MIN_REPS = 5
MIN_REPS_SLOW = 3          # calls of more than SLOW_CALL_MS (the math backend's backward at 16k tokens)
SLOW_CALL_MS = 100.0


def budget_reps(call_ms: float, reps: int, budget_s: float | None) -> int:
    """Repetitions that fit a cell's time budget (at least MIN_REPS, or MIN_REPS_SLOW for calls over
    SLOW_CALL_MS; at most `reps`): slow cells get fewer, so a sweep of many shapes ends in minutes.
    The row stores the count it used."""
    if not budget_s or call_ms <= 0:
        return reps
    floor = MIN_REPS_SLOW if call_ms > SLOW_CALL_MS else MIN_REPS
    return max(min(floor, reps), min(reps, int(budget_s * 1e3 / call_ms)))


def time_call(fn: Callable[[], object], method: str = EVENTS, reps: int = DEFAULT_REPS,
              warmup: int = DEFAULT_WARMUP, l2_flush: bool = True, budget_s: float | None = None,
              stream=None) -> tuple[Timing, int]:
    """Time `fn` by `method`; returns (Timing, peak extra bytes one call allocated).

    Every repetition starts on an idle GPU: the L2 flush, then a synchronize, then the event pair
    around the call (or the graph replay). Without that synchronize the host runs ahead of a busy GPU
    and its dispatch time hides under the previous work, so `events` would not be the call latency a
    caller sees. The second warm-up call is timed to size the repetitions to `budget_s` (the first
    includes one-off set-up: cuBLAS handles, cuDNN plans); warm-up stops early once it has used a fifth
    of the budget. Peak memory is read over the warm-up calls: what one call allocates beyond what was
    live before it.
    """
    import time

    import torch

    if method not in TIMING_METHODS:
        raise ValueError(f"unknown timing method {method!r}")
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if l2_flush else None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    per_call_ms = (time.perf_counter() - t0) * 1e3
    done = 2
    while done < warmup and (not budget_s or (time.perf_counter() - t0) < budget_s / 5):
        fn()
        done += 1
    torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated() - before)
    n = budget_reps(per_call_ms, reps, budget_s)
    run = fn
    if method == GRAPH:
        graph = capture_graph(fn, stream)
        graph.replay()  # one replay before timing: the graph's first launch uploads it
        run = graph.replay
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        if flush is not None:
            flush.zero_()
        torch.cuda.synchronize()
        starts[i].record()
        run()
        ends[i].record()
    torch.cuda.synchronize()
    timing = summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], done, l2_flush)
    timing.method = method
    timing.sync = METHOD_DESCRIPTIONS[method]
    return timing, peak


def capture_graph(fn: Callable[[], object], stream=None):
    """`fn` captured into a CUDA graph (see capture_graph_output)."""
    return capture_graph_output(fn, stream)[0]


def capture_graph_output(fn: Callable[[], object], stream=None):
    """(graph, output): `fn` captured into a CUDA graph, and what the captured call returned (the
    static output every replay rewrites). Warm-up ran already (on `stream` where the caller's autograd
    state lives there): libraries set up their workspaces before capture, as capture forbids that."""
    import torch

    stream = stream or torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # one call on the capture stream, so lazily created per-stream state exists
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        output = fn()
    torch.cuda.synchronize()
    return graph, output


def time_interleaved(fns: dict[str, Callable[[], object]], reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
                     l2_flush: bool = True) -> dict[str, Timing]:
    """Time several callables round-robin: repetition i runs each once, in an order rotated by i, so
    clock or thermal drift during the measurement hits every candidate alike (`lab tune`)."""
    import torch

    names = list(fns)
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if l2_flush else None
    for name in names:
        for _ in range(warmup):
            fns[name]()
    torch.cuda.synchronize()
    events = {name: [] for name in names}
    for i in range(reps):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            if flush is not None:
                flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[name]()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: summarize([s.elapsed_time(e) for s, e in pairs], warmup, l2_flush)
            for name, pairs in events.items()}


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def peak_memory_bytes(fn: Callable[[], object]) -> int:
    """Extra device memory one call allocates at its peak (beyond what was live before it)."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - before)


def bench_variant(variant, problem, module, reps: int, warmup: int):
    """Time one rung on one problem; returns (Timing, peak_memory_bytes)."""
    call = launch_fn(variant, module, problem, seed=0)  # allocates its output like SDPA: an even comparison
    timing = time_cuda(call, reps=reps, warmup=warmup)
    return timing, peak_memory_bytes(call)

"""Timing: CUDA events around each launch, warm-up first, L2 flushed before every repetition.

Statistics reported: median (the headline), mean +- std, a 95% confidence interval of the median
(distribution-free, from order statistics), min and max. Times are in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

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
    import torch

    from lab.measure.problem import make_inputs, softmax_scale

    q, k, v = make_inputs(problem, seed=0)
    scale = softmax_scale(problem)

    def call():
        o = torch.empty_like(q)  # allocate like SDPA does, so the comparison is even
        module.forward(q, k, v, o, problem.causal, scale)
        return o

    timing = time_cuda(call, reps=reps, warmup=warmup)
    return timing, peak_memory_bytes(call)

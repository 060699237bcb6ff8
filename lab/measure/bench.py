"""Timing's vocabulary and statistics: the methods, the Timing record, its summary statistics, the
repetition budget and CUDA-graph capture. The timer itself, with its checks, is lab.measure.timed:
CUDA events around each launch, warm-up first, L2 flushed before every repetition.

Two timing methods, and every stored number says which one it is:
  events  a CUDA event pair around each Python call: CALL LATENCY, host dispatch included. At tiny
          shapes this measures the host (an SDPA call's ~0.03 ms of PyTorch dispatch), not the GPU.
  graph   the call captured once into a CUDA graph, each replay between an event pair whose start is
          held (lab.measure.timed: the replay is queued behind a spin kernel before `start` is stamped):
          DEVICE TIME of the captured kernels and the gaps between them, without Python, PyTorch
          dispatch or the graph's launch latency.

Statistics reported: median (the headline), mean +- std, a 95% confidence interval of the median
(distribution-free, from order statistics), min and max. Times are in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
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
    peak_memory_bytes: int | None = None   # extra device memory one call allocated at its peak
    checks: dict | None = None             # what lab.measure.timed checked before trusting the time
    # the repetitions' times in the order they ran: a sweep pools its passes' (lab.measure.sweep.combine_passes);
    # never stored (to_dict leaves them out): records keep the statistics
    samples: list[float] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("samples")
        return d


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
    return Timing("ms", mid, mean, std, lo, hi, s[0], s[-1], n, warmup, l2_flush, samples=list(samples_ms))


EVENTS, GRAPH = "events", "graph"
TIMING_METHODS = (EVENTS, GRAPH)
METHOD_DESCRIPTIONS = {
    EVENTS: "call latency: a CUDA event pair around each Python call, started on an idle GPU (host dispatch included); "
            "a device-wide synchronize after each call found no work left on other streams",
    GRAPH: "device time: the call captured once into a CUDA graph, an event pair around each replay, its start held "
           "(the replay queued behind a spin kernel before the start event, proved per repetition: no launch latency); "
           "eager warm-up calls found no work left on other streams",
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

"""The graph method's held start on a real GPU (lab.measure.timed: each replay queued behind a spin
kernel before its start event is stamped). On a short call (SDPA's FlashAttention-2 forward, one kernel
of about 0.1 ms on an H100 or H200) the held graph time is no longer than the protocol before the hold
(start stamped on an idle GPU, then the replay launched: its launch latency inside the interval), and
within a few microseconds of the kernels' own device time in a CUPTI trace of the same calls
(lab.measure.kernelsplit). Run with `pytest -m gpu tests/test_timer_held_gpu.py -s` (it prints the
numbers)."""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

from lab.measure.bench import GRAPH, L2_FLUSH_BYTES, capture_graph_output  # noqa: E402
from lab.measure.problem import Problem  # noqa: E402
from lab.measure.timed import CudaDevice, probe_call  # noqa: E402

PROBLEM = Problem(2, 16, 2048, 2048, 64, dtype="float16")   # 34 GFLOP: about 0.1 ms on an H100 or H200
ROUNDS = 3      # held and unheld alternated, so drift hits both alike
REPS = 30
ABOVE_US = 5.0
"""The held interval holds the kernels' span plus the stream's own step from the hold's end to the first
kernel and from the last kernel to `end` (about a microsecond each on Hopper): 5 us allows for those and
for the kernels' own spread between the timed and the traced calls."""
BELOW_SHARE = 0.03
"""The held interval cannot be shorter than the kernels it holds; the traced calls' kernels run a second
or so apart from the timed ones, whose clocks may differ by a percent or two."""


def flash_measurement():
    from lab.measure.baselines import attention
    from lab.measure.checked import Measurement, Workload, device_floor

    impl = attention("sdpa-flash", PROBLEM)
    return Measurement(impl, Workload(PROBLEM, impl.layout), "fwd", verify=False, floor=device_floor(PROBLEM),
                       what="sdpa-flash")


def unheld_graph_ms(m, reps: int = REPS) -> list[float]:
    """The graph protocol before the hold, on the same call, inputs and flush: capture on a stream of its
    own, then per repetition inputs loaded, L2 flushed, the GPU idle, `start`, the replay, `end`."""
    dev = CudaDevice()
    flush = dev.flush_buffer(L2_FLUSH_BYTES)
    stream = torch.cuda.Stream()
    with m.impl.context(), torch.cuda.stream(stream):
        call = m.call()
        for _ in range(3):
            call()
        graph, _ = capture_graph_output(call, stream)
        graph.replay()
        events = []
        for rep in range(reps):
            m.prepare(rep)
            events.append(probe_call(dev, graph.replay, flush)[1])
        torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e, _ in events]


def test_held_graph_time_is_the_kernels_device_time_without_the_launch_latency():
    m = flash_measurement()
    held, unheld, timings = [], [], []
    for _ in range(ROUNDS):
        t = m.time(GRAPH, reps=REPS, warmup=5)
        timings.append(t)
        held.append(t.median)
        unheld.append(statistics.median(unheld_graph_ms(m)))
    split = m.kernel_split(20)
    held_us, unheld_us = 1e3 * statistics.median(held), 1e3 * statistics.median(unheld)
    checks = timings[-1].checks
    print(f"\n{torch.cuda.get_device_name()}: {m.what} {PROBLEM.label()}: held graph {held_us:.2f} us "
          f"(rounds {[round(1e3 * x, 2) for x in held]}), unheld graph {unheld_us:.2f} us "
          f"(rounds {[round(1e3 * x, 2) for x in unheld]}), kernels' sum {split['sum_us']:.2f} us, span "
          f"{split['span_us']:.2f} us over {split['calls']} traced calls ({len(split['kernels'])} kernel(s)); "
          f"hold {checks['hold_us']:.1f} us, host enqueue {checks['host_enqueue_us']:.1f} us "
          f"(max {checks['host_enqueue_max_us']:.1f}; closest margin {checks['hold_margin_min_us']:.1f}), "
          f"{checks['hold_retries']} repetitions redone")
    for t in timings:
        assert t.checks["held_start"] is True and t.checks["hold_margin_min_us"] > 0, t.checks
    assert 50 <= held_us <= 400, "the problem is meant to be a short call (~0.1 ms): pick another shape on this GPU"
    assert held_us <= unheld_us, (held, unheld)
    assert (1 - BELOW_SHARE) * split["sum_us"] <= held_us <= split["span_us"] + ABOVE_US, (held_us, split)

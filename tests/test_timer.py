"""The checked timer's logic without a GPU: the floor's arithmetic, rotation, the verdicts, and the
timer's protocol on a simulated device whose streams and events keep a virtual clock (the GPU tests,
tests/test_timer_gpu.py, plant the same cheats on real hardware)."""

import math

import pytest

from lab.gpu_specs import peaks_for
from lab.measure import timed
from lab.measure.floor import Floor, attention_floor, minimal_flops, minimal_read_bytes, visible_pairs
from lab.measure.problem import Problem
from lab.measure.timed import (IMPOSSIBLE, NOT_CAPTURABLE, OUTSIDE_STREAM, WRONG_OUTPUT, Checked, TimingRefused, floor_verdict,
                               outside_stream_verdict, time_checked, time_checked_interleaved)
from lab.errors import CheckFailed


# ------------------------------------------------------------------------------ the floor

def test_visible_pairs_counts_the_top_left_causal_mask_exactly():
    for nq, nk in [(1, 1), (5, 5), (3, 8), (8, 3), (17, 1000), (1000, 17)]:
        brute = sum(1 for i in range(nq) for j in range(nk) if j <= i)
        assert visible_pairs(Problem(1, 1, nq, nk, 64, causal=True)) == brute
        assert visible_pairs(Problem(1, 1, nq, nk, 64)) == nq * nk


def test_floor_flops_and_bytes():
    p = Problem(8, 16, 2048, 2048, 64, dtype="float16")
    assert minimal_flops(p, "fwd") == p.forward_flops   # non-causal: the convention is exact
    assert minimal_flops(p, "bwd") == 2 * p.forward_flops and minimal_flops(p, "fwd+bwd") == 3 * p.forward_flops
    assert minimal_read_bytes(p, "fwd") == 3 * 8 * 16 * 2048 * 64 * 2
    assert minimal_read_bytes(p, "bwd") == 4 * 8 * 16 * 2048 * 64 * 2
    gqa = Problem(2, 32, 512, 512, 128, dtype="bfloat16", heads_kv=8)
    assert minimal_read_bytes(gqa) == (2 * 32 * 512 * 128 + 2 * 2 * 8 * 512 * 128) * 2


def test_floor_on_the_h200_is_the_larger_of_compute_and_memory():
    h200 = peaks_for("NVIDIA H200")
    p = Problem(8, 16, 2048, 2048, 64, dtype="float16")
    f = attention_floor(p, "fwd", h200, "NVIDIA H200")
    assert f.rate_tflops == h200.tensor_fp16_tflops and f.rate_name == "fp16 tensor"
    assert math.isclose(f.compute_ms, p.forward_flops / (h200.tensor_fp16_tflops * 1e12) * 1e3)
    assert f.limit_ms() == max(f.compute_ms, f.memory_ms) == f.compute_ms   # compute-bound shape
    # the cached rung: 6,270 TFLOP/s at this shape is far under the floor; SDPA's 450 is above it
    assert floor_verdict([p.forward_flops / 6270e12 * 1e3], f, True) is not None
    assert floor_verdict([p.forward_flops / 450e12 * 1e3], f, True) is None
    decode = Problem(64, 32, 1, 8192, 128, dtype="float16")   # one query row: memory-bound
    fd = attention_floor(decode, "fwd", h200)
    assert fd.limit_ms() == fd.memory_ms > fd.compute_ms
    assert fd.limit_ms(l2_flushed=False) == fd.compute_ms   # without a flush the inputs may sit in L2


def test_float32_floor_uses_tf32_where_the_gpu_has_it_and_ffma_before():
    p = Problem(1, 8, 1024, 1024, 64, dtype="float32")
    assert attention_floor(p, "fwd", device="NVIDIA H100 80GB HBM3").rate_name == "TF32 tensor"
    assert attention_floor(p, "fwd", device="Tesla V100-SXM2-16GB").rate_name == "FP32 FFMA"
    assert attention_floor(p, "fwd", device="Some Future GPU") is None   # unknown peaks: no floor, not a guess
    assert attention_floor(p, "fwd", peaks={"fp32_tflops": 10.0, "dram_tbps": 1.0}).rate_tflops == 10.0


def test_floor_describes_both_numbers():
    f = Floor(1e12, 1000.0, "fp16 tensor", 3 * 10**9, 2.0, "NVIDIA H200")
    text = f.describe()
    assert "1 ms" in text and "1.5 ms" in text and "NVIDIA H200" in text
    assert f.to_dict()["limit_ms"] == 1.5


# ------------------------------------------------------------------------------ verdicts

def test_outside_stream_verdict():
    noop = [0.004, 0.005, 0.005, 0.006, 0.005]
    outside, allowed = outside_stream_verdict([0.005, 0.006, 0.005], noop, call_ms=1.0)
    assert abs(outside) < 1e-9 + 0.001 and outside < allowed
    outside, allowed = outside_stream_verdict([0.8, 0.81, 0.79], noop, call_ms=0.05)
    assert outside > allowed   # the side-stream rung: its work ends long after its stream's end event


def test_refusal_is_a_failed_check_with_a_row_reason():
    r = TimingRefused(WRONG_OUTPUT, "set 1 is wrong", what="mine1")
    assert isinstance(r, CheckFailed) and r.exit_code == 1
    assert "mine1" in str(r) and "wrong-output" in str(r)
    assert r.row_reason().startswith("refused by the timer (wrong-output)")
    assert set(timed.STATUSES) == {OUTSIDE_STREAM, WRONG_OUTPUT, IMPOSSIBLE, NOT_CAPTURABLE, timed.HOST_OUTLASTED_HOLD}


# ------------------------------------------------------------------------------ rotation

def _head_dim(t, layout):
    return 1 if t.dim() == 3 or layout == "BHND" else 2


def _moved(t, placement, layout, heads_kv, role=None):
    """One set's tensor as a placement moves it, by torch.roll and a sign: what the slots must hold
    (query heads, O, dO and LSE rolled by whole GQA groups, K and V by K/V heads; `role` "qk" or "v"
    for the sign flips, None for the LSE)."""
    torch = pytest.importorskip("torch")
    hd = _head_dim(t, layout)
    group = t.shape[hd] // heads_kv
    rolled = torch.roll(t, shifts=(placement.batch, placement.heads_kv * group), dims=(0, hd))
    negated = {"qk": placement.negate_qk, "v": placement.negate_v}.get(role, False)
    return -rolled if negated else rolled


def _honest_forward(p, layout="BHND"):
    """float64 attention on the slots in `layout` (K/V repeated to the query heads under GQA), float32 out."""
    from lab.measure.check import reference_attention
    from lab.measure.problem import softmax_scale

    def forward(q, k, v):
        if layout == "BNHD":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        g = q.shape[1] // k.shape[1]
        o = reference_attention(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), p.causal,
                                softmax_scale(p)).float()
        return o if layout == "BHND" else o.transpose(1, 2).contiguous()
    return forward


ROLLED_PROBLEMS = [(Problem(2, 4, 8, 8, 4, dtype="float32", heads_kv=2), "BHND"),
                   (Problem(3, 2, 8, 5, 4, causal=True, dtype="float32"), "BNHD"),
                   (Problem(2, 6, 7, 7, 4, dtype="float32", heads_kv=3), "BNHD")]


@pytest.mark.parametrize("p, layout", ROLLED_PROBLEMS)
def test_rotation_refills_the_same_slots_with_every_set_and_roll_before_one_repeats(p, layout):
    torch = pytest.importorskip("torch")
    from lab.measure.rotation import problem_inputs

    rot = problem_inputs(p, count=3, device="cpu", layout=layout)
    assert rot.placements == 3 * 4 * p.batch * p.heads_kv
    ptrs = [t.data_ptr() for t in rot.slots]
    seen, loaded, previous = [], [], None
    for rep in range(2 * rot.placements):
        placement = rot.prepare(rep)
        loaded.append(placement)
        assert [t.data_ptr() for t in rot.slots] == ptrs   # one pointer, as a graph needs
        for slot, src, role in zip(rot.slots, rot.sets[placement.set], ("qk", "qk", "v")):
            assert torch.equal(slot, _moved(src, placement, layout, p.heads_kv, role))
        if previous is not None:   # consecutive calls: another set, so other values in every slot
            assert placement.set != previous.set
            assert all(not torch.equal(a, b) for a, b in zip(rot.slots, seen[-1]))
        seen.append(tuple(t.clone() for t in rot.slots))
        previous = placement
    placements = [rot.placement(r) for r in range(rot.placements)]
    assert len(set(placements)) == rot.placements   # every placement once before any repeats
    assert rot.placement(rot.placements) == placements[0]
    samples = {tuple(q.reshape(-1)[:8].tolist() + v.reshape(-1)[-8:].tolist()) for q, _, v in seen[:rot.placements]}
    assert len(samples) == rot.placements   # a sample of the values is new on every call of a period
    # O does not change when Q and K are negated: those placements come last, V differs in all before them
    half = rot.placements // 2
    assert not any(pl.negate_qk for pl in placements[:half]) and all(pl.negate_qk for pl in placements[half:])
    unflipped = [v for (_, _, v), pl in zip(seen[:rot.placements], loaded) if not pl.negate_qk]
    assert len({tuple(v.reshape(-1)[-8:].tolist()) for v in unflipped}) == half


def test_attention_follows_every_move_exactly():
    """The roll moves query heads by whole GQA groups, and the signs of Q and K together and of V:
    attention of the moved inputs is the set's attention moved alike, bit for bit (what lets the
    check compare every call against its set's one reference)."""
    torch = pytest.importorskip("torch")
    from lab.measure.rotation import problem_inputs

    for p, layout in ROLLED_PROBLEMS:
        rot = problem_inputs(p, count=2, device="cpu", layout=layout)
        forward = _honest_forward(p, layout)
        for rep in range(rot.placements):
            placement = rot.prepare(rep)
            want = _moved(forward(*rot.sets[placement.set]), placement, layout, p.heads_kv, "v")
            assert torch.equal(forward(*rot.slots), want), placement


def test_rotation_without_batch_or_kv_heads_to_roll_varies_the_sets_and_signs_only():
    torch = pytest.importorskip("torch")
    from lab.measure.rotation import Placement, RotatingInputs, problem_inputs

    rot = problem_inputs(Problem(1, 2, 8, 8, 4, dtype="float32", heads_kv=1), count=3, device="cpu")
    assert rot.placements == 12
    assert [rot.placement(i) for i in range(12)] == [Placement(i % 3, 0, 0, i >= 6, i // 3 % 2 == 1) for i in range(12)]
    with pytest.raises(ValueError):
        RotatingInputs([(torch.zeros(2),)])
    with pytest.raises(ValueError):
        RotatingInputs([], fixed=True)
    fixed = RotatingInputs([(torch.ones(2),)], fixed=True)   # a baseline's backward: every call reads it
    assert fixed.prepare(0) == fixed.prepare(5) == Placement(0) and torch.equal(fixed.slots[0], torch.ones(2))


@pytest.mark.parametrize("p, layout", ROLLED_PROBLEMS)
def test_output_check_passes_each_calls_output_and_refuses_a_stale_one(p, layout):
    torch = pytest.importorskip("torch")
    from lab.measure.rotation import OutputCheck, Placement, problem_inputs

    rot = problem_inputs(p, count=3, device="cpu", layout=layout)
    check = OutputCheck(p, rot, layout=layout)
    honest = _honest_forward(p, layout)
    outputs = []
    for rep in range(rot.placements + 1):
        token = rot.prepare(rep)
        outputs.append((token, honest(*rot.slots)))
        assert check(token, outputs[-1][1]) is None
    for back in (1, 2, 3):   # the previous call's output, and the same set's under another roll
        token, _ = outputs[-1]
        stale_token, stale = outputs[-1 - back]
        assert stale_token != token
        assert "is wrong" in check(token, stale), (back, stale_token, token)
    unmoved = {t.set: honest(*rot.sets[t.set]) for t, _ in outputs}   # each set's own output, not moved
    rolled = next(t for t, _ in outputs if t.batch or t.heads_kv)
    assert f"input set {rolled.set} of 3 (rolled by" in check(rolled, unmoved[rolled.set])
    negated = next(t for t, _ in outputs if t.negate_v)
    assert "V negated" in check(negated, unmoved[negated.set])
    assert check(Placement(rolled.set), unmoved[rolled.set]) is None
    half = outputs[-1][1].clone()
    half[:, :half.shape[1] // 2] = torch.nan   # the other half never written
    assert "non-finite" in check(outputs[-1][0], half)
    assert "cannot be compared" in check(Placement(0), None)


# ------------------------------------------------------------------------------ the protocol, simulated

class SimDevice:
    """A device with one stream the events are recorded on, a side stream, and a virtual clock (ms).
    The host advances by `dispatch` per launch; synchronize waits for both streams and then costs
    `latency`; an event records when its stream reaches it."""

    def __init__(self, latency=0.005, dispatch=0.002, wake=0.0):
        self.host = self.stream = self.side = 0.0
        self.latency, self.dispatch = latency, dispatch
        self.wake = wake      # extra synchronize latency per ms waited (a host woken late from a long wait)
        self.capturing = False
        self.log = None       # (name, stream, start_ns, end_ns, bytes) of each launch while tracing

    class Event:
        def __init__(self, dev):
            self.dev, self.t = dev, None

        def record(self):
            self.t = self.dev.stream = max(self.dev.host, self.dev.stream)

        def elapsed_time(self, other):
            return other.t - self.t

        def synchronize(self):   # the host waits until the stream reaches the event
            self.dev.host = max(self.dev.host, self.t)

    def event(self):
        return SimDevice.Event(self)

    def launch(self, ms, side=False, nbytes=None, name=None):
        self.host += self.dispatch
        if side:
            self.side = max(self.host, self.side) + ms
        else:
            self.stream = max(self.host, self.stream) + ms
        if self.log is not None:
            end = self.side if side else self.stream
            self.log.append((name or ("memcpy" if nbytes else "kernel"), 8 if side else 7, (end - ms) * 1e6,
                             end * 1e6, nbytes))

    def synchronize(self):
        waited = max(self.host, self.stream, self.side) - self.host
        self.host = max(self.host, self.stream, self.side) + self.latency + self.wake * waited

    def host_ms(self):
        return self.host

    def hold(self, ms):
        """A spin kernel of `ms` on the calling stream (launched like any kernel: `dispatch` of host time)."""
        self.launch(ms, name="hold")

    def trace_streams(self, run, prepare=None, calls=3):
        return self.trace_calls(run, prepare, calls)

    def trace_calls(self, run, prepare=None, calls=3, flush=None, verify=None):
        """What CudaDevice.trace_calls returns, from the virtual clock: each call between two marker
        copies on the calling stream (7), after its flush and a synchronize, its output judged after
        the closing marker; side-stream work on stream 8."""
        self.log = []
        try:
            for i in range(calls):
                token = prepare(i) if prepare is not None else None
                if flush is not None:
                    flush.evict()
                    self.synchronize()
                self.launch(0.001, nbytes=timed.MARKER_BYTES, name="[CUDA memcpy Device-to-Device]")
                out = run()
                self.launch(0.001, nbytes=timed.MARKER_BYTES, name="[CUDA memcpy Device-to-Device]")
                if verify is not None:
                    self.launch(0.02, name="the output check")   # after the closing marker: not the call's
                    reason = verify(token, out)
                    if reason:
                        raise timed.TimingRefused(timed.WRONG_OUTPUT, f"a traced call: {reason}")
            self.synchronize()
            return timed.traced_calls(self.log)
        finally:
            self.log = None

    def flush_buffer(self, nbytes):
        dev = self

        class Flush:
            def evict(self):
                dev.launch(0.05, name="the L2 flush")

            def describe(self):
                return "the fake device's flush"
        return Flush()

    def memory_allocated(self):
        return 0

    def reset_peak_memory(self):
        pass

    def max_memory_allocated(self):
        return 0

    def capture(self, fn, stream=None):
        launches = []
        real = self.launch
        self.launch = lambda ms, side=False: launches.append((ms, side))
        self.capturing = True
        try:
            out = fn()
        finally:
            self.launch, self.capturing = real, False
        if any(side for _, side in launches):
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture "
                               "(cudaErrorStreamCaptureUnjoined)")

        def replay():
            for ms, side in launches:
                real(ms, side)
        return replay, out


class SlowReplayHost(SimDevice):
    """A device whose host spends `stalls[i]` ms more before launching the i-th replay (a page fault, the
    garbage collector, a neighbour's process): the graph's launch latency, stretched."""

    def __init__(self, stalls, **kw):
        super().__init__(**kw)
        self.stalls, self.replays = stalls, 0

    def capture(self, fn, stream=None):
        replay, out = super().capture(fn, stream)

        def stalled():
            self.host += self.stalls.get(self.replays, self.stalls.get("*", 0.0))
            self.replays += 1
            replay()
        return stalled, out


def test_graph_time_starts_with_the_replay_queued_and_events_keep_the_dispatch():
    """A host whose every launch takes 0.03 ms: a start stamped on an idle GPU before the replay is queued
    would time 0.2 + 0.03 ms (the replay's launch latency); held, the graph times the kernel's 0.2 ms
    exactly, while events (call latency) keep the dispatch they measure."""
    dev = SimDevice(dispatch=0.03)
    graph = time_checked(lambda: dev.launch(0.2), method="graph", reps=10, warmup=3, device=dev)
    assert graph.min == pytest.approx(0.2, abs=1e-9) and graph.max == pytest.approx(0.2, abs=1e-9)
    assert graph.checks["held_start"] is True and graph.checks["hold_retries"] == 0
    assert graph.checks["hold_us"] >= 1e3 * timed.HOLD_START_MS > graph.checks["host_enqueue_us"] > 0
    events = time_checked(lambda: dev.launch(0.2), method="events", reps=10, warmup=3, device=dev)
    assert events.median == pytest.approx(0.23, abs=1e-9) and events.checks["held_start"] is False
    assert "its start held" in graph.sync and "idle GPU" in events.sync


def test_a_replay_the_host_queued_after_the_hold_ended_is_done_again_behind_a_longer_hold():
    # the 4th replay (the capture's upload is the 1st) reaches the stream 0.5 ms late, after the 0.2 ms
    # hold ended: its interval would hold 0.3 ms of launch latency. It is measured again, with its own
    # inputs, behind a hold that covers it; no kept sample holds latency
    dev = SlowReplayHost({3: 0.5})
    loaded = []
    t = time_checked(lambda: dev.launch(0.2), prepare=lambda rep: loaded.append(rep) or rep,
                     verify=lambda token, out: None, method="graph", reps=8, warmup=3, device=dev)
    assert t.reps == 8 and t.max == pytest.approx(0.2, abs=1e-9)
    assert t.checks["hold_retries"] == 1 and t.checks["hold_margin_min_us"] > 1e3 * timed.HOLD_SLACK_MS
    assert t.checks["outputs_verified"] == t.warmup + 8 + 1   # the redone repetition's output judged too
    assert loaded == list(range(len(loaded)))                # every attempt loaded inputs of its own


def test_a_host_slower_than_the_longest_hold_gets_no_graph_time():
    dev = SlowReplayHost({"*": 2 * timed.HOLD_MAX_MS})
    with pytest.raises(TimingRefused) as refused:
        time_checked(lambda: dev.launch(0.2), method="graph", reps=5, warmup=3, device=dev)
    assert refused.value.status == timed.HOST_OUTLASTED_HOLD and "launch latency" in refused.value.reason


def test_an_honest_call_is_timed_and_reports_its_checks():
    dev = SimDevice()
    t = time_checked(lambda: dev.launch(1.0), reps=10, warmup=3, device=dev, what="honest")
    assert 1.0 <= t.median <= 1.01 and t.reps == 10
    assert t.checks["outside_stream_ms"] < 0.001 and t.checks["floor_ms"] is None


def test_a_side_stream_call_is_refused_by_events_and_by_graph():
    for method in ("events", "graph"):
        dev = SimDevice()
        with pytest.raises(TimingRefused) as refused:
            time_checked(lambda: dev.launch(1.0, side=True), method=method, reps=10, warmup=3, device=dev)
        assert refused.value.status == OUTSIDE_STREAM


def test_a_joined_side_stream_is_honest():
    dev = SimDevice()

    def joined():
        dev.launch(1.0, side=True)
        dev.stream = max(dev.stream, dev.side)   # wait_stream: the calling stream waits for the side one
    t = time_checked(joined, reps=5, warmup=3, device=dev)
    assert t.median >= 1.0


def test_a_graph_capture_that_forks_without_joining_is_refused():
    dev = SimDevice()
    calls = []

    def forks_later():   # joins during warm-up, forks only once captured
        calls.append(1)
        dev.launch(0.5, side=dev.capturing)
    with pytest.raises(TimingRefused) as refused:
        time_checked(forks_later, method="graph", reps=3, warmup=3, device=dev)
    assert refused.value.status == OUTSIDE_STREAM and "capture" in refused.value.reason


def test_every_output_is_verified_and_the_first_wrong_one_refuses():
    dev = SimDevice()
    state = {"set": None, "calls": 0}

    def prepare(rep):
        state["set"] = rep % 3
        return rep % 3

    def lazy():   # right for the first call of each set, then hands back what it kept
        state["calls"] += 1
        dev.launch(0.2)
        return state["set"] if state["calls"] <= 3 else "kept"

    def verify(token, out):
        return None if out == token else f"got {out!r} for set {token}"
    with pytest.raises(TimingRefused) as refused:
        time_checked(lazy, prepare=prepare, verify=verify, reps=10, warmup=2, device=dev)
    assert refused.value.status == WRONG_OUTPUT and "kept" in refused.value.reason

    ok = time_checked(lambda: (dev.launch(0.2), state["set"])[1], prepare=prepare, verify=verify,
                      reps=10, warmup=2, device=dev)
    assert ok.checks["outputs_verified"] == 12   # the warm-up calls and every timed one


def test_a_time_under_the_floor_is_refused_with_its_timing_attached():
    dev = SimDevice()
    # 1 ms to read the inputs from DRAM, 0.001 ms of FLOPs: the warm-up (no L2 flush) is held to the
    # compute floor only, the timed repetitions (flushed) to the memory floor
    floor = Floor(1e9, 1000.0, "fp16 tensor", 3 * 10**9, 3.0)
    with pytest.raises(TimingRefused) as refused:
        time_checked(lambda: dev.launch(0.1), floor=floor, reps=5, warmup=2, device=dev)
    assert refused.value.status == IMPOSSIBLE and refused.value.timing.median < 1
    assert "under the floor 1 ms" in refused.value.reason
    assert time_checked(lambda: dev.launch(1.5), floor=floor, reps=5, warmup=2, device=dev).checks["floor_ms"] == 1


def test_interleaved_candidates_get_a_timing_or_their_refusal():
    dev = SimDevice()
    out = time_checked_interleaved({"a": Checked(lambda: dev.launch(1.0)), "b": Checked(lambda: dev.launch(2.0)),
                                    "cheat": Checked(lambda: dev.launch(1.0, side=True))},
                                   reps=6, warmup=3, device=dev)
    assert 1.0 <= out["a"].median < 1.01 and 2.0 <= out["b"].median < 2.01
    assert isinstance(out["cheat"], TimingRefused) and out["cheat"].status == OUTSIDE_STREAM


def test_interleaved_candidates_by_graph_get_device_time_or_their_refusal():
    """`lab tune --timing graph`: each candidate replayed from its own graph behind a held start, so its time is the
    device's (no dispatch in it, unlike events); a candidate whose call forks to a stream it never joins is
    refused at its capture, and the others are still timed."""
    dev = SimDevice(dispatch=0.03)
    out = time_checked_interleaved({"a": Checked(lambda: dev.launch(0.2)), "b": Checked(lambda: dev.launch(0.4)),
                                    "cheat": Checked(lambda: dev.launch(0.2, side=True))},
                                   reps=6, warmup=3, device=dev, method="graph")
    assert out["a"].median == pytest.approx(0.2, abs=1e-9) and out["b"].median == pytest.approx(0.4, abs=1e-9)
    assert out["a"].checks["held_start"] is True and out["b"].checks["held_start"] is True
    assert isinstance(out["cheat"], TimingRefused) and out["cheat"].status == OUTSIDE_STREAM
    events = time_checked_interleaved({"a": Checked(lambda: dev.launch(0.2))}, reps=6, warmup=3, device=dev)
    assert events["a"].median > 0.2   # the host's dispatch is in call latency
    with pytest.raises(ValueError):
        time_checked_interleaved({"a": Checked(lambda: dev.launch(0.2))}, device=dev, method="both")


class PowerCappedDevice(SimDevice):
    """A GPU whose clock the power limit pulls down once its stream has been busy for CAP_AFTER ms without
    a break longer than BREAK ms: then a kernel of `ms` at the boost clock takes ms x BOOST / CAPPED, and
    NVML (gpu_load) reads CAPPED MHz and sw_power_cap while such kernels still run; on an idle GPU it reads
    the boost clock at once (as a real one does: the timer must read before its synchronize)."""
    BOOST, CAPPED, CAP_AFTER, BREAK = 1980, 1700, 5.0, 0.2

    def __init__(self, **kw):
        super().__init__(**kw)
        self.busy_since, self.capped = 0.0, False

    def kernel(self, ms):
        start = max(self.host + self.dispatch, self.stream)
        if start - self.stream > self.BREAK:   # idle long enough: the clock recovers
            self.busy_since = start
        self.capped = start - self.busy_since >= self.CAP_AFTER
        self.launch(ms * self.BOOST / self.CAPPED if self.capped else ms)

    def gpu_load(self):
        capped = self.capped and self.host < self.stream   # still running the capped kernels
        return {"sm_clock_mhz": self.CAPPED if capped else self.BOOST, "power_draw_w": 690.0 if capped else 300.0,
                "temperature_c": 60, "energy_mj": None, "clock_event_reasons": ("sw_power_cap",) if capped else ()}


def test_under_load_each_repetition_runs_behind_a_stretch_of_the_call_at_the_clock_it_leaves():
    """Alone, every repetition starts on an idle GPU at the boost clock; behind a 20 ms stretch of the same
    call the GPU is at its power limit, and the timed call takes the capped clock's time. The checks say
    the stretch and what NVML read after each repetition."""
    for method in ("events", "graph"):
        dev = PowerCappedDevice()
        alone = time_checked(lambda: dev.kernel(0.2), method=method, reps=8, warmup=3, device=dev)
        assert alone.median == pytest.approx(0.2 + (0.002 if method == "events" else 0), abs=1e-9)
        assert alone.checks["under_load_ms"] is None and alone.checks["load_sm_clock_mhz"] is None
        loaded = time_checked(lambda: dev.kernel(0.2), method=method, reps=8, warmup=3, device=dev, under_load_ms=20)
        capped = 0.2 * dev.BOOST / dev.CAPPED
        assert loaded.median == pytest.approx(capped + (0.002 if method == "events" else 0), abs=1e-9), method
        c = loaded.checks
        assert c["under_load_ms"] == 20 and 20 <= c["under_load_calls"] * 0.2 * dev.BOOST / dev.CAPPED + 5
        assert c["load_states_read"] == 8 and c["load_sm_clock_mhz"] == dev.CAPPED
        assert c["load_power_capped_share"] == 1.0 and c["load_clock_event_reasons"] == {"sw_power_cap": 1.0}


def test_under_load_the_stretch_is_never_judged_and_the_timed_calls_always_are():
    """The stretch's outputs are dropped (it runs on whatever the slots hold); every timed call is loaded
    and verified as without it, so a kept result is refused the same."""
    dev = PowerCappedDevice()
    state = {"set": None, "calls": 0}

    def prepare(rep):
        state["set"] = rep % 3
        return rep % 3

    def verify(token, out):
        return None if out == token else f"got {out!r} for set {token}"

    def honest():
        dev.kernel(0.2)
        return state["set"]
    t = time_checked(honest, prepare=prepare, verify=verify, reps=6, warmup=2, device=dev, under_load_ms=10)
    assert t.checks["outputs_verified"] == 2 + 6 and t.checks["under_load_calls"] >= 10

    def kept():   # right on its first three calls, then what it kept
        state["calls"] += 1
        dev.kernel(0.2)
        return state["set"] if state["calls"] <= 3 else "kept"
    with pytest.raises(TimingRefused) as refused:
        time_checked(kept, prepare=prepare, verify=verify, reps=6, warmup=2, device=dev, under_load_ms=10)
    assert refused.value.status == WRONG_OUTPUT


def test_under_load_where_nvml_cannot_say_the_time_stands_and_the_reading_is_none():
    dev = SimDevice()   # no gpu_load: a device the timer cannot read the state of
    t = time_checked(lambda: dev.launch(0.2), reps=4, warmup=2, device=dev, under_load_ms=2)
    assert t.checks["under_load_calls"] >= 2 and t.checks["load_states_read"] == 0
    assert t.checks["load_sm_clock_mhz"] is None and t.checks["load_power_capped_share"] is None


def test_interleaved_candidates_under_load_each_run_behind_their_own_stretch():
    dev = PowerCappedDevice()
    calls = {"a": 0, "b": 0}

    def call(name, ms):
        def run():
            calls[name] += 1
            dev.kernel(ms)
        return run
    out = time_checked_interleaved({"a": Checked(call("a", 0.2)), "b": Checked(call("b", 0.4))},
                                   reps=5, warmup=2, device=dev, under_load_ms=10)
    assert out["a"].median == pytest.approx(0.2 * dev.BOOST / dev.CAPPED + 0.002, abs=1e-9)
    assert out["b"].median == pytest.approx(0.4 * dev.BOOST / dev.CAPPED + 0.002, abs=1e-9)
    # each stretch sized from its own call: about twice as many of a's as of b's
    assert out["a"].checks["under_load_calls"] > 1.5 * out["b"].checks["under_load_calls"]
    assert calls["a"] > 5 * out["a"].checks["under_load_calls"] and calls["b"] > 5 * out["b"].checks["under_load_calls"]


# ------------------------------------------------------------------------------ where verdicts show

def test_the_cheats_workspace_declares_every_planted_rung(monkeypatch):
    from pathlib import Path

    from lab.ladder import registry

    monkeypatch.setenv("LAB_WORKSPACE", str(Path(__file__).resolve().parent / "cheats"))
    ids = {v.id for v in registry.select("all")}
    assert {"side", "cached", "lazy", "partial", "precision", "deferred", "valuecache", "honest", "joined"} <= ids
    assert registry.get("side").kind == "python"


def test_bench_tables_show_a_refusal_and_never_a_number(capsys):
    from lab.measure.benchtable import markdown_ladder, print_ladder

    refused = TimingRefused(IMPOSSIBLE, "the fastest of 10 repetitions took 0.01 ms, under the floor 0.139 ms",
                            what="valuecache")
    problem = Problem(8, 16, 2048, 2048, 64, dtype="float16").to_dict()
    result = {"device": {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132},
              "software": {"torch": "2.11"}, "git": {"commit": "abc", "dirty": False}, "reps": 10, "warmup": 5,
              "rows": [{"variant": "valuecache", "title": "t", "problem": problem, "correct": True,
                        "correctness": {"passed": True}, "refused": refused.to_dict()}]}
    print_ladder(result)
    out = capsys.readouterr().out
    assert "impossible" in out and "0.139 ms" in out and "0.01 ms" in out
    md = markdown_ladder(result)
    assert "no time: impossible" in md


def test_a_call_that_cannot_be_captured_is_still_held_to_the_floor_in_warm_up():
    dev = SimDevice()
    floor = Floor(1e12, 1000.0, "fp16 tensor", 10**6, 3.0)   # 1 ms of FLOPs
    calls = []

    def kept_after_two():   # computes for its first calls, then answers at once (a value-keyed cache)
        calls.append(1)
        dev.launch(1.5 if len(calls) <= 2 else 0.01)
        if dev.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
    with pytest.raises(TimingRefused) as refused:
        time_checked(kept_after_two, floor=floor, method="graph", reps=5, warmup=5, device=dev)
    assert refused.value.status == IMPOSSIBLE and "in warm-up" in refused.value.reason


def test_a_call_that_cannot_be_captured_gets_no_graph_time_and_says_why():
    """Above the floor in warm-up (a host's round trip can be longer than the work's floor), a call that
    synchronizes with the host still has no graph: refused, with CUDA's error and the way out."""
    dev = SimDevice()

    def syncs_the_host():
        dev.launch(1.5)
        if dev.capturing:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
    with pytest.raises(TimingRefused) as refused:
        time_checked(syncs_the_host, method="graph", reps=5, warmup=5, device=dev)
    assert refused.value.status == NOT_CAPTURABLE and refused.value.exit_code == 1
    assert "not permitted when stream is capturing" in refused.value.reason and "by events" in refused.value.reason


def test_chunked_output_errors_match_the_checks_compare():
    torch = pytest.importorskip("torch")
    from lab.measure.check import compare
    from lab.measure.rotation import output_errors

    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(2, 3, 37, 8, generator=gen, dtype=torch.float64)
    out = (ref + 1e-3 * torch.randn(ref.shape, generator=gen, dtype=torch.float64)).to(torch.float16)
    for chunk in (7, 100, 1 << 20):   # chunks that do not divide the size, and one that holds it all
        mine, theirs = output_errors(out, ref.float(), chunk), compare(out, ref.float().double())
        for key in ("rel_err", "max_abs_err", "mean_abs_err"):
            assert math.isclose(mine[key], theirs[key], rel_tol=1e-9), key
        assert mine["nonfinite"] == 0 and mine["numel"] == ref.numel()
    from lab.measure.rotation import Moves, Placement

    # against a reference moved block by block (Moves.blocks, a sign), the errors are those against a moved copy
    moves = Moves("BHND", 2, 3)
    for placement in (Placement(0, 1, 2), Placement(2, 0, 1, negate_v=True), Placement(1, 1, 0)):
        sign = placement.sign("v")
        moved = sign * torch.roll(ref, shifts=(placement.batch, placement.heads_kv), dims=(0, 1)).float()
        for chunk in (7, 100, 1 << 20):
            mine = output_errors(out, ref.float(), chunk, blocks=moves.blocks(ref.shape, placement), sign=sign)
            theirs = output_errors(out, moved, chunk)
            for key in ("rel_err", "max_abs_err", "mean_abs_err"):
                assert math.isclose(mine[key], theirs[key], rel_tol=1e-9), (placement, chunk, key)
    out[0, 0, 5:9] = float("nan")
    bad = output_errors(out, ref.float(), 7)
    assert bad["nonfinite"] == 4 * 8 and math.isnan(bad["rel_err"])
    with pytest.raises(RuntimeError):
        output_errors(out[:, :, :10], ref.float())


# ------------------------------------------------------------------------------ work outside the stream: evidence

def test_a_noisy_synchronize_suspects_an_honest_call_and_the_trace_clears_it():
    # the host wakes from a long wait 10% late: the screen sees 0.1 ms "outside" a 1 ms call, over its
    # allowance; the trace shows every kernel on the calling stream, so the time stands
    for method in ("events", "graph"):
        dev = SimDevice(wake=0.1)
        t = time_checked(lambda: dev.launch(1.0), method=method, reps=10, warmup=4, device=dev)
        assert t.checks["outside_stream_ms"] > 0.07 and 1.0 <= t.median < 1.01
        assert "all finished before" in t.checks["outside_stream_evidence"]


def test_a_joined_side_stream_under_a_noisy_synchronize_keeps_its_time():
    dev = SimDevice(wake=0.1)

    def joined():
        dev.side = max(dev.side, dev.stream)     # the side stream waits for the call's inputs
        dev.launch(1.0, side=True)
        dev.stream = max(dev.stream, dev.side)   # and the calling stream for the side stream
    t = time_checked(joined, reps=10, warmup=4, device=dev)
    assert t.median >= 1.0 and "stream(s) 7, 8" in t.checks["outside_stream_evidence"]


def test_the_side_stream_is_refused_on_the_traces_evidence_even_under_noise():
    for method in ("events", "graph"):
        dev = SimDevice(wake=0.1)
        with pytest.raises(TimingRefused) as refused:
            time_checked(lambda: dev.launch(1.0, side=True), method=method, reps=10, warmup=4, device=dev)
        assert refused.value.status == OUTSIDE_STREAM
        assert "CUPTI trace" in refused.value.reason and "stream(s) 8" in refused.value.reason


def test_without_a_trace_the_screen_decides_and_says_so():
    class NoTrace(SimDevice):
        trace_streams = None
    dev = NoTrace()
    with pytest.raises(TimingRefused) as refused:
        time_checked(lambda: dev.launch(1.0, side=True), reps=10, warmup=4, device=dev)
    assert refused.value.status == OUTSIDE_STREAM and "no stream trace could confirm it" in refused.value.reason


def test_traced_calls_needs_its_markers():
    m = timed.MARKER_BYTES
    acts = [("memcpy", 7, 0, 1, m), ("k", 7, 2, 10, None), ("side", 8, 3, 20, None), ("memcpy", 7, 11, 12, m)]
    (call,) = timed.traced_calls(acts, m)
    assert call["done_ns"] == 11 and len(call["work"]) == 2
    assert "stream(s) 8" in timed.outside_stream_evidence([call])
    assert timed.traced_calls(acts[:-1], m) == []   # a lost marker proves nothing
    joined = [("memcpy", 7, 0, 1, m), ("side", 8, 3, 9, None), ("memcpy", 7, 11, 12, m)]
    assert timed.outside_stream_evidence(timed.traced_calls(joined, m)) is None


# ------------------------------------------------------------------------------ the backward, measured (CPU)

def _cpu_backward_rung(cheat=None, dev=None):
    """An Attention whose forward writes (O, LSE) and whose backward is FlashAttention-2's equations in
    torch (tests/fixtures/backward_ws b1_right), on the CPU; `cheat` makes the backward keep, skip or
    half-write its gradients the ways tests/cheats/kernels/bwd_*.py do on a GPU. Each call also
    launches 1 ms on the simulated device."""
    torch = pytest.importorskip("torch")
    import importlib.util
    from pathlib import Path

    from lab.measure.call import Attention

    spec = importlib.util.spec_from_file_location(
        "b1_right", Path(__file__).parent / "fixtures" / "backward_ws" / "kernels" / "b1_right.py")
    b1 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b1)
    kept, dq_buffer = {}, {}

    def forward_lse(q, k, v):
        return b1.forward(q, k, v, False, q.shape[-1] ** -0.5)

    def backward(q, k, v, o, dout, lse):
        dev.launch(1.0)
        key = (q.data_ptr(), dout.data_ptr())
        if cheat == "kept" and key in kept:
            return kept[key]
        if cheat == "lazy" and key in kept:
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grads = b1.backward(q, k, v, o, dout, lse, False, q.shape[-1] ** -0.5)
        kept[key] = grads
        if cheat == "partial":
            if "dq" in dq_buffer:
                dq_buffer["dq"][:, :, :q.shape[2] // 2] = grads[0][:, :, :q.shape[2] // 2]
                return dq_buffer["dq"], grads[1], grads[2]
            dq_buffer["dq"] = grads[0]
        return grads

    return Attention(cheat or "honest", lambda q, k, v: forward_lse(q, k, v)[0], "BHND", forward_lse, backward)


@pytest.mark.parametrize("mode", ["bwd", "fwd+bwd"])
@pytest.mark.parametrize("cheat", [None, "kept", "lazy", "partial"])
def test_the_backward_rotates_and_checks_every_call(cheat, mode):
    from lab.measure.checked import Measurement, Workload

    p = Problem(1, 2, 16, 16, 8, dtype="float32")
    dev = SimDevice()
    workload = Workload(p, device="cpu")
    m = Measurement(_cpu_backward_rung(cheat, dev), workload, mode)
    assert m.inputs.count == 3 and len(m.inputs.slots) == (6 if mode == "bwd" else 4)
    if cheat is None:
        t = m.time(reps=6, warmup=2, device=dev)
        assert t.checks["outputs_verified"] == 6 + t.warmup and t.checks["input_sets"] == 3
        return
    with pytest.raises(TimingRefused) as refused:
        m.time(reps=6, warmup=2, device=dev)
    assert refused.value.status == WRONG_OUTPUT and "dQ" in refused.value.reason


def test_the_backwards_inputs_are_each_sets_own_and_its_o_and_lse_the_rungs():
    torch = pytest.importorskip("torch")
    from lab.measure.checked import Measurement, Workload

    p = Problem(1, 2, 16, 16, 8, dtype="float32")
    workload = Workload(p, device="cpu")
    impl = _cpu_backward_rung(None, SimDevice())
    m = Measurement(impl, workload, "bwd")
    (q0, k0, v0, d0, o0, l0), (q1, _, _, d1, o1, _) = m.inputs.sets[:2]
    assert not torch.equal(q0, q1) and not torch.equal(d0, d1) and not torch.equal(o0, o1)
    o, lse = impl.forward_lse(q0, k0, v0)
    assert torch.equal(o0, o) and torch.equal(l0, lse)
    # the gradient references are made once per workload, shared by every implementation measured on it
    assert Measurement(impl, workload, "fwd+bwd").verify is m.verify


def test_a_baselines_backward_runs_on_one_fixed_set_unchecked():
    from lab.measure.call import Attention
    from lab.measure.checked import Measurement, Workload

    p = Problem(1, 2, 16, 16, 8, dtype="float32")
    sdpa = Attention("sdpa-x", lambda q, k, v: q, autograd=True)
    m = Measurement(sdpa, Workload(p, device="cpu"), "bwd", verify=False)
    assert m.inputs.count == 1 and m.prepare is None and m.verify is None
    with pytest.raises(ValueError):
        Measurement(sdpa, Workload(p, device="cpu"), "bwd")


def test_gradient_check_rounds_the_reference_only_where_it_may():
    """The timed check's references agree with the gate's float64 autograd, chunked by query rows."""
    torch = pytest.importorskip("torch")
    from lab.measure import gradcheck
    from lab.measure.rotation import GradientCheck, Placement

    p = Problem(1, 2, 33, 40, 8, causal=True, dtype="float32")
    gen = torch.Generator().manual_seed(5)
    q, dout = (torch.randn(1, 2, 33, 8, generator=gen) for _ in range(2))
    k, v = (torch.randn(1, 2, 40, 8, generator=gen) for _ in range(2))
    check = GradientCheck(p, [(q, k, v, dout)])
    ref = gradcheck.reference_backward(q, k, v, dout, True, 8 ** -0.5, chunk_bytes=1)
    whole = gradcheck.reference_backward(q, k, v, dout, True, 8 ** -0.5)
    for name in ("dQ", "dK", "dV"):
        torch.testing.assert_close(ref[name], whole[name], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(check.refs[0][name], whole[name].float())
    grads = (whole["dQ"].float(), whole["dK"].float(), whole["dV"].float())
    assert check(Placement(0), grads) is None
    assert "dK" in check(Placement(0), (grads[0], grads[1] * 1.01, grads[2]))
    assert "not (dq, dk, dv)" in check(Placement(0), grads[0])


# ------------------------------------------------------------------------------ a result kept by the inputs' values

def _value_cache(p, dev, layout="BHND"):
    """tests/cheats/kernels/valuecache.py on the CPU: the output kept by a sample of the inputs' values
    (Q's first and V's last elements); a miss computes (1 ms on the simulated device), a hit hands the
    kept output back at once. Returns (Attention, the list of hits)."""
    from lab.measure.call import Attention

    honest, kept, hits = _honest_forward(p, layout), {}, []

    def forward(q, k, v):
        key = tuple(q.reshape(-1)[:8].tolist() + v.reshape(-1)[-8:].tolist())
        if key in kept:
            hits.append(key)
            dev.launch(0.01)
            return kept[key]
        dev.launch(1.0)
        kept[key] = honest(q, k, v)
        return kept[key]
    return Attention("valuecache", forward, layout), hits


HALF_MS_FLOOR = Floor(5e11, 1000.0, "fp16 tensor", 10**6, 3.0)   # 0.5 ms of FLOPs: a miss's 1 ms is above it


@pytest.mark.parametrize("p, layout", ROLLED_PROBLEMS)
def test_a_value_keyed_cache_misses_every_call_and_is_timed_as_the_work_it_does(p, layout):
    pytest.importorskip("torch")
    from lab.measure.checked import Measurement, Workload

    dev = SimDevice()
    impl, hits = _value_cache(p, dev, layout)
    m = Measurement(impl, Workload(p, layout, device="cpu"), "fwd", floor=HALF_MS_FLOOR)
    t = m.time(reps=5, warmup=3, device=dev)
    assert hits == [] and t.min >= 1.0   # no call, timed or untimed, found its inputs' values seen before
    assert t.checks["inputs_loaded"] <= t.checks["input_placements"] == 3 * 4 * p.batch * p.heads_kv


def test_measurements_one_after_another_on_the_same_values_go_on_through_the_placements():
    """A python rung's module is imported once per process, so its cache outlives a measurement: the
    next measurement of the same problem (a new Workload, as lab bench makes) starts where the last
    stopped, and the cache misses there too."""
    pytest.importorskip("torch")
    from lab.measure.checked import Measurement, Workload

    p = Problem(2, 4, 8, 8, 4, dtype="float32", heads_kv=2)
    dev = SimDevice()
    impl, hits = _value_cache(p, dev)
    first = Workload(p, device="cpu")
    start = first.forward.handed_out
    for _ in range(3):
        Measurement(impl, Workload(p, device="cpu"), "fwd", floor=HALF_MS_FLOOR).time(reps=4, warmup=2, device=dev)
    assert hits == [] and first.forward.handed_out == start + 3 * (2 + 2 * 4)


def test_where_nothing_rolls_a_value_keyed_cache_is_left_to_the_floor():
    """B x Hkv = 1: only the three sets and the signs vary, so a measurement of more than 12 calls
    hands the cache values it saw, and only the floor refuses it (what rotation's docstring says it
    cannot see)."""
    pytest.importorskip("torch")
    from lab.measure.checked import Measurement, Workload

    p = Problem(1, 2, 16, 16, 8, dtype="float32", heads_kv=1)
    dev = SimDevice()
    impl, hits = _value_cache(p, dev)
    m = Measurement(impl, Workload(p, device="cpu"), "fwd", floor=HALF_MS_FLOOR)
    with pytest.raises(TimingRefused) as refused:
        m.time(reps=10, warmup=3, device=dev)   # 23 calls
    assert hits and refused.value.status == IMPOSSIBLE


def test_interleaved_candidates_on_shared_slots_never_hand_a_value_cache_its_next_inputs():
    """lab tune's candidates share one workload's slots: the untimed call before a timed one must not run
    on what the previous candidate left there (the inputs this candidate's timed call is about to read)."""
    pytest.importorskip("torch")
    from lab.measure.call import Attention
    from lab.measure.checked import Measurement, Workload

    p = Problem(2, 4, 8, 8, 4, dtype="float32", heads_kv=2)
    dev = SimDevice()
    workload = Workload(p, device="cpu")
    cache, hits = _value_cache(p, dev)
    honest = Attention("honest", lambda q, k, v: (dev.launch(1.0), _honest_forward(p)(q, k, v))[1])
    specs = {impl.name: Measurement(impl, workload, "fwd", floor=HALF_MS_FLOOR).checked()
             for impl in (honest, cache)}
    out = time_checked_interleaved(specs, reps=4, warmup=2, device=dev)
    assert hits == [] and out["valuecache"].min >= 1.0 and out["honest"].min >= 1.0


@pytest.mark.parametrize("p", [Problem(2, 2, 16, 16, 8, dtype="float32"),
                               Problem(2, 4, 12, 16, 8, dtype="float32", heads_kv=2)])
def test_the_backwards_sets_roll_as_one_and_the_check_follows_them(p):
    """Q, K, V, dO and the rung's own O and LSE move by the same roll: the slots' O and LSE are what the
    rung's forward makes of the slots' Q, K, V; the honest gradients of every placement pass, and the
    previous placement's fail."""
    torch = pytest.importorskip("torch")
    from lab.measure.checked import Measurement, Workload

    impl = _cpu_backward_rung(None, SimDevice())
    m = Measurement(impl, Workload(p, device="cpu"), "bwd")
    assert m.inputs.placements == 3 * 4 * p.batch * p.heads_kv
    previous = None
    for rep in range(m.inputs.placements):
        placement = m.inputs.prepare(rep)
        q, k, v, dout, o, lse = m.inputs.slots
        o_now, lse_now = impl.forward_lse(q, k, v)
        torch.testing.assert_close(o, o_now, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(lse, lse_now, rtol=1e-6, atol=1e-6)
        grads = impl.backward(q, k, v, o, dout, lse)
        assert m.verify(placement, grads) is None, placement
        if previous is not None:
            assert "is wrong" in m.verify(placement, previous), placement
        previous = grads
    # fwd+bwd reads the same rolled Q, K, V, dO and is checked against the same rolled gradients
    t = Measurement(impl, m.workload, "fwd+bwd").time(reps=4, warmup=2, device=SimDevice())
    assert t.checks["outputs_verified"] == 4 + t.warmup


# ------------------------------------------------------------------------------ where the hold is recorded

def test_a_sweep_row_says_how_its_start_was_taken(tmp_path):
    """A sweep stores no Timing, only rows: each timed row carries held_start (graph True, events False)
    and hold_retries (summed over the passes it pools), and both survive the Parquet table."""
    pd = pytest.importorskip("pandas")
    from lab.jsonvalues import plain
    from lab.measure.sweep import combine_passes, timed_row
    from lab.measure.sweepplan import Cell
    from lab.store.sweeps import _frame

    dev = SlowReplayHost({3: 0.5})
    graph = time_checked(lambda: dev.launch(0.2), method="graph", reps=6, warmup=3, device=dev)
    events = time_checked(lambda: dev.launch(0.2), method="events", reps=6, warmup=3, device=dev)
    assert graph.checks["hold_retries"] == 1
    cell = Cell("sdpa-x", Problem(1, 2, 64, 64, 64, dtype="float16"), "fwd")
    passes = [[timed_row(cell, t, None, None) for t in (events, graph)] for _ in range(2)]
    rows = {r["timing"]: r for r in combine_passes(passes)}
    assert rows["graph"]["held_start"] is True and rows["graph"]["hold_retries"] == 2
    assert rows["events"]["held_start"] is False and rows["events"]["hold_retries"] is None
    path = tmp_path / "rows.parquet"
    _frame(list(rows.values()), []).to_parquet(path, index=False)
    back = {r["timing"]: {k: plain(v) for k, v in r.items()} for r in pd.read_parquet(path).to_dict("records")}
    assert back["graph"]["held_start"] is True and back["graph"]["hold_retries"] == 2
    assert back["events"]["held_start"] is False and back["events"]["hold_retries"] is None

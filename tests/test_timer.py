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
    assert set(timed.STATUSES) == {OUTSIDE_STREAM, WRONG_OUTPUT, IMPOSSIBLE, NOT_CAPTURABLE}


# ------------------------------------------------------------------------------ rotation

def test_rotation_refills_the_same_slots_with_each_set_in_turn():
    torch = pytest.importorskip("torch")
    from lab.measure.rotation import RotatingInputs, problem_inputs

    rot = problem_inputs(Problem(1, 2, 8, 8, 4, dtype="float32"), count=3, device="cpu")
    ptrs = [t.data_ptr() for t in rot.slots]
    seen = []
    for rep in range(6):
        assert rot.prepare(rep) == rep % 3
        assert [t.data_ptr() for t in rot.slots] == ptrs   # one pointer, as a graph needs
        assert torch.equal(rot.slots[0], rot.sets[rep % 3][0])
        seen.append(rot.slots[0].clone())
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])
    with pytest.raises(ValueError):
        RotatingInputs([(torch.zeros(2),)])
    with pytest.raises(ValueError):
        RotatingInputs([], fixed=True)
    fixed = RotatingInputs([(torch.ones(2),)], fixed=True)   # the backward's one set: every call reads it
    assert fixed.prepare(0) == fixed.prepare(5) == 0 and torch.equal(fixed.slots[0], torch.ones(2))


def test_output_check_refuses_a_kept_result_and_a_half_written_output():
    torch = pytest.importorskip("torch")
    from lab.measure.check import reference_attention
    from lab.measure.problem import softmax_scale
    from lab.measure.rotation import OutputCheck, problem_inputs

    p = Problem(1, 2, 16, 16, 8, dtype="float32")
    rot = problem_inputs(p, count=3, device="cpu")
    check = OutputCheck(p, rot)

    def honest(q, k, v):
        return reference_attention(q, k, v, False, softmax_scale(p)).float()

    for rep in range(3):
        token = rot.prepare(rep)
        assert check(token, honest(*rot.slots)) is None
    kept = honest(*rot.sets[0])
    assert "input set 1" in check(1, kept)           # set 0's result handed back for set 1
    half = honest(*rot.sets[2])
    half[..., 8:, :] = torch.nan                     # the other half never written
    assert "non-finite" in check(2, half)
    assert "cannot be compared" in check(0, None)


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

    def event(self):
        return SimDevice.Event(self)

    def launch(self, ms, side=False, nbytes=None):
        self.host += self.dispatch
        if side:
            self.side = max(self.host, self.side) + ms
        else:
            self.stream = max(self.host, self.stream) + ms
        if self.log is not None:
            end = self.side if side else self.stream
            self.log.append(("memcpy" if nbytes else "kernel", 8 if side else 7, (end - ms) * 1e6, end * 1e6, nbytes))

    def synchronize(self):
        waited = max(self.host, self.stream, self.side) - self.host
        self.host = max(self.host, self.stream, self.side) + self.latency + self.wake * waited

    def trace_streams(self, run, prepare=None, calls=3):
        """What CudaDevice.trace_streams returns, from the virtual clock: each call between two marker
        copies on the calling stream (7); side-stream work on stream 8."""
        self.log = []
        try:
            for i in range(calls):
                if prepare is not None:
                    prepare(i)
                self.launch(0.001, nbytes=timed.MARKER_BYTES)
                run()
                self.launch(0.001, nbytes=timed.MARKER_BYTES)
            self.synchronize()
            return timed.traced_calls(self.log)
        finally:
            self.log = None

    def flush_buffer(self, nbytes):
        dev = self

        class Flush:
            def zero_(self):
                dev.launch(0.05)
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
    from lab.measure.rotation import GradientCheck

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
    assert check(0, grads) is None
    assert "dK" in check(0, (grads[0], grads[1] * 1.01, grads[2]))
    assert "not (dq, dk, dv)" in check(0, grads[0])

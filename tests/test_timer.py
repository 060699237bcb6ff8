"""The checked timer's logic without a GPU: the floor's arithmetic, rotation, the verdicts, and the
timer's protocol on a simulated device whose streams and events keep a virtual clock (the GPU tests,
tests/test_timer_gpu.py, plant the same cheats on real hardware)."""

import math

import pytest

from lab.gpu_specs import peaks_for
from lab.measure import timed
from lab.measure.floor import Floor, attention_floor, minimal_flops, minimal_read_bytes, visible_pairs
from lab.measure.problem import Problem
from lab.measure.timed import (IMPOSSIBLE, OUTSIDE_STREAM, WRONG_OUTPUT, Checked, TimingRefused, floor_verdict,
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
    r = TimingRefused(WRONG_OUTPUT, "set 1 is wrong", what="v9")
    assert isinstance(r, CheckFailed) and r.exit_code == 1
    assert "v9" in str(r) and "wrong-output" in str(r)
    assert r.row_reason().startswith("refused by the timer (wrong-output)")
    assert set(timed.STATUSES) == {OUTSIDE_STREAM, WRONG_OUTPUT, IMPOSSIBLE}


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

    def __init__(self, latency=0.005, dispatch=0.002):
        self.host = self.stream = self.side = 0.0
        self.latency, self.dispatch = latency, dispatch
        self.capturing = False

    class Event:
        def __init__(self, dev):
            self.dev, self.t = dev, None

        def record(self):
            self.t = self.dev.stream = max(self.dev.host, self.dev.stream)

        def elapsed_time(self, other):
            return other.t - self.t

    def event(self):
        return SimDevice.Event(self)

    def launch(self, ms, side=False):
        self.host += self.dispatch
        if side:
            self.side = max(self.host, self.side) + ms
        else:
            self.stream = max(self.host, self.stream) + ms

    def synchronize(self):
        self.host = max(self.host, self.stream, self.side) + self.latency

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

"""`lab bench --kernels`: the kernel split's aggregation (from CUPTI records to rows), its wiring to
the one measurement (on the simulated device of tests/test_timer.py), its table and Markdown, and the
CLI's refusals. tests/test_kernel_split_gpu.py runs it on a GPU."""

import os
from pathlib import Path

import pytest

from conftest import REPO, lab_here  # noqa: E402
from lab.measure import kernelsplit, timed
from lab.measure.kernelsplit import EXCLUDES, call_work, split
from lab.ladder.registry import builtin
from lab.measure.problem import Problem

# rungs by what they declare (tests name rungs through the registry)
DET = next(v.id for v in builtin() if v.deterministic)            # a backward with a deterministic mode
NO_BWD = next(v.id for v in builtin() if not v.backward)          # a forward-only rung

MARKER = "[CUDA memcpy Device-to-Device]"
M = timed.MARKER_BYTES
# A real torch.profiler trace: v6's forward launched 20 times by lab.ladder.target on an H200
V6_TRACE = REPO / "profiles/examples/20261123-200956-v6-B8-H16-N1024-D64-float16/timeline/torch_trace.json"


# ------------------------------------------------------------------------------ the aggregation

def test_a_real_trace_of_twenty_launches_is_one_kernel_once_per_call():
    """The shipped trace (read by the lab's one torch.profiler reader) as 20 calls of one launch each:
    one row, 1 launch per call, the mean duration per call, 100% of the sum, the name demangled and
    shortened to what a kernel engineer reads."""
    from lab.profilers import kineto

    k = kineto.read_trace(V6_TRACE).kernels
    assert len(k) == 20
    calls = [[(r.name, r.stream_id, r.start_ns, r.end_ns)] for r in k.itertuples()]
    got = split(calls)
    durations_us = [(r.end_ns - r.start_ns) / 1e3 for r in k.itertuples()]
    mean = sum(durations_us) / 20
    assert got["calls"] == 20 and got["streams"] == 1
    (row,) = got["kernels"]
    assert row["name"].startswith("void v6::fwd_kernel<")
    assert row["short_name"] == "v6::fwd_kernel<v6::Config<64, 128, 2, false, 1>, __half, false>"
    assert row["launches_per_call"] == 1
    assert row["us_per_call"] == pytest.approx(mean) and got["sum_us"] == pytest.approx(mean)
    assert got["sum_us_min"] == pytest.approx(min(durations_us)) and got["sum_us_max"] == pytest.approx(max(durations_us))
    assert got["span_us"] == pytest.approx(mean)    # one kernel a call: no gap
    assert row["share_pct"] == pytest.approx(100.0)
    assert 80 < mean < 110    # the trace's own durations (92.6 us the first): read, not made up


def _backward_trace(main_us=(417.0, 421.0), preprocess_us=70.0, convert_us=58.0, gap_us=5.0):
    """The activities a CudaDevice.trace_calls of two backward calls records, as traced_calls sees them
    (name, stream, start_ns, end_ns, bytes): per call its loading (copies), the L2 flush, the opening
    marker, a preprocess, a memset, the main kernel, two launches of a small kernel on a joined side
    stream, the convert, the closing marker, then the output check's kernel."""
    acts, t = [], 0

    def add(name, us, stream=7, nbytes=None, gap=gap_us):
        nonlocal t
        acts.append((name, stream, t, t + int(us * 1e3), nbytes))
        t += int((us + gap) * 1e3)

    for main in main_us:
        add("[CUDA memcpy Device-to-Device]", 30.0, nbytes=64 << 20)            # the next inputs loaded
        add("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)", 90.0)  # flush
        add(MARKER, 1.0, nbytes=M)
        add("void lab_bwd::preprocess<128, true>(lab_bwd::Args)", preprocess_us)
        add("[CUDA memset]", 2.0, nbytes=4096)
        add("void lab_bwd::main_kernel<lab_bwd::Config<64, 128, 2>, __half>(CUtensorMap_st, lab_bwd::Args)", main)
        add("void (anonymous namespace)::side_reduce<float>(float*, int)", 3.0, stream=9, gap=0.0)
        add("void (anonymous namespace)::side_reduce<float>(float*, int)", 3.0, stream=9)
        add("void lab_bwd::convert<128>(float const*, __half*)", convert_us)
        add(MARKER, 1.0, nbytes=M)
        add("void at::native::reduce_kernel<512, 1>(float*)", 40.0)              # the output check
    return acts


def test_each_calls_own_work_is_between_its_markers_and_ordered_by_time():
    traced = timed.traced_calls(_backward_trace())
    assert len(traced) == 2
    work = call_work(traced)
    names = {a[0] for call in work for a in call}
    assert not any("FillFunctor" in n or "reduce_kernel" in n for n in names)      # flush, check: outside
    assert not any(a[4:] for call in work for a in call)                           # (name, stream, start, end)
    assert "[CUDA memcpy Device-to-Device]" not in names                            # loading and markers
    got = split(work)
    rows = {r["short_name"]: r for r in got["kernels"]}
    assert [r["short_name"] for r in got["kernels"]] == [
        "lab_bwd::main_kernel<lab_bwd::Config<64, 128, 2>, __half>", "lab_bwd::preprocess<128, true>",
        "lab_bwd::convert<128>", "(anonymous namespace)::side_reduce<float>", "[CUDA memset]"]
    assert rows["lab_bwd::main_kernel<lab_bwd::Config<64, 128, 2>, __half>"]["us_per_call"] == pytest.approx(419.0)
    assert rows["(anonymous namespace)::side_reduce<float>"]["launches_per_call"] == 2
    assert rows["(anonymous namespace)::side_reduce<float>"]["us_per_call"] == pytest.approx(6.0)
    assert rows["(anonymous namespace)::side_reduce<float>"]["median_us_per_launch"] == pytest.approx(3.0)
    per_call = [70 + 2 + 417 + 6 + 58, 70 + 2 + 421 + 6 + 58]
    assert got["sum_us"] == pytest.approx(sum(per_call) / 2)
    assert (got["sum_us_min"], got["sum_us_max"]) == (pytest.approx(per_call[0]), pytest.approx(per_call[1]))
    assert sum(r["share_pct"] for r in got["kernels"]) == pytest.approx(100.0)
    assert rows["[CUDA memset]"]["share_pct"] == pytest.approx(100 * 2 / got["sum_us"])
    # the span: preprocess start to convert end, the sum plus the gaps of 5 us between the six launches
    # (four: the side stream's two launches are back to back)
    assert got["span_us"] == pytest.approx(got["sum_us"] + 4 * 5.0)
    assert got["streams"] == 2 and got["excludes"] == EXCLUDES
    assert "host" in EXCLUDES and "gaps" in EXCLUDES and "not the bench's median" in EXCLUDES


def test_a_launch_count_that_varies_between_calls_is_its_mean_and_an_empty_call_counts():
    k = "void k<1>(int)"
    got = split([[(k, 7, 0, 10_000), (k, 7, 20_000, 30_000)], [(k, 7, 0, 10_000)], []])
    (row,) = got["kernels"]
    assert row["launches_per_call"] == pytest.approx(1.0) and row["us_per_call"] == pytest.approx(10.0)
    assert got["sum_us_min"] == 0.0 and got["sum_us_max"] == pytest.approx(20.0)
    assert split([[]])["kernels"] == [] and split([[]])["sum_us"] == 0.0
    with pytest.raises(ValueError):
        split([])


def test_a_trace_that_lost_a_marker_gives_no_calls():
    acts = _backward_trace()
    lost = [a for i, a in enumerate(acts) if not (a[4] == M and i == len(acts) - 2)]   # the last closing marker
    assert timed.traced_calls(lost) == []


# ------------------------------------------------------------------------------ the one measurement

def _measurement(mode, dev):
    """SDPA's math backend on the CPU as an implementation whose forward also launches two named
    kernels on the simulated device; (measurement, state): state["calls"] counts its forwards, and
    its O is wrong while state["wrong"] is set."""
    import dataclasses

    from lab.measure.baselines import attention
    from lab.measure.checked import Measurement, Workload

    p = Problem(1, 2, 16, 16, 8, dtype="float32")
    impl = attention("sdpa-math", p, device="cpu")
    real, state = impl.forward, {"calls": 0, "wrong": False}

    def forward(q, k, v):
        dev.launch(0.3, name="void fwd_main<64>(float const*)")
        dev.launch(0.05, name="void fwd_epilogue(float*)")
        state["calls"] += 1
        o = real(q, k, v)
        return o + 1 if state["wrong"] else o

    impl = dataclasses.replace(impl, name="sim", forward=forward)
    return Measurement(impl, Workload(p, device="cpu"), mode, verify=mode == "fwd"), state


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd+bwd"])
def test_the_split_traces_the_measurements_own_calls(mode):
    from test_timer import SimDevice

    dev = SimDevice()
    m, state = _measurement(mode, dev)
    m.time(reps=5, warmup=2, device=dev)
    before = state["calls"]
    got = m.kernel_split(7, device=dev)
    # bwd times autograd's backward of one forward made when the call was (no forward inside it)
    launches = 0 if mode == "bwd" else 1
    assert state["calls"] - before == 7 * launches + (1 if mode == "bwd" else 0)
    assert got["calls"] == 7
    if mode == "bwd":
        assert got["kernels"] == []   # the simulated device records no autograd kernels: none invented
        return
    assert [(k["short_name"], k["launches_per_call"]) for k in got["kernels"]] == [("fwd_main<64>", 1), ("fwd_epilogue", 1)]
    assert got["kernels"][0]["us_per_call"] == pytest.approx(300.0)
    assert got["sum_us"] == pytest.approx(350.0)   # the L2 flush and the output check are not the call's


def test_a_wrong_output_in_a_traced_call_refuses_and_lost_markers_fail():
    from test_timer import SimDevice

    dev = SimDevice()
    m, state = _measurement("fwd", dev)
    m.time(reps=5, warmup=2, device=dev)   # right while timed, wrong when traced
    state["wrong"] = True
    with pytest.raises(timed.TimingRefused) as e:
        m.kernel_split(3, device=dev)
    assert e.value.status == timed.WRONG_OUTPUT and "traced call" in e.value.reason

    class Lossy(SimDevice):
        def trace_calls(self, *args, **kwargs):
            return super().trace_calls(*args, **kwargs)[:-1]

    lossy = Lossy()
    m, _ = _measurement("fwd", lossy)
    with pytest.raises(kernelsplit.KernelSplitFailed, match="lost its markers"):
        m.kernel_split(3, device=lossy)


def test_a_baseline_without_a_split_stores_as_before():
    """A baseline's dict carries kernel_split only where it was asked for: a stored run's manifest
    (lab.store.manifest.Baseline) reads one without it as before."""
    from lab.measure.baselines import Baseline
    from lab.store import manifest as mf

    plain = Baseline("sdpa-cudnn", "cudnn", "float16", "ok").to_dict()
    assert "kernel_split" not in plain
    mf.Baseline.from_dict(plain, "baselines[]")
    split_given = Baseline("sdpa-cudnn", "cudnn", "float16", "ok", kernel_split={"error": "x"}).to_dict()
    assert split_given["kernel_split"] == {"error": "x"}


# ------------------------------------------------------------------------------ the table

def _result():
    """A bench result as lab.measure.benchtable.bench_ladder returns it, with splits from the records
    above (the rung's) and a baseline's of two launches; a second baseline whose trace failed."""
    rung = split(call_work(timed.traced_calls(_backward_trace())))
    base = split(call_work(timed.traced_calls(_backward_trace(main_us=(372.0, 372.0)))))
    problem = Problem(32, 16, 512, 512, 128, False, "float16").to_dict()
    b = {"backend": "cudnn", "dtype": "float16", "status": "ok", "ratio": 0.9, "median_ms": 0.55, "kernel_split": base}
    f = {"backend": "flash", "dtype": "float16", "status": "ok", "ratio": 0.5, "median_ms": 0.9,
         "kernel_split": {"error": "tracing 20 calls under torch.profiler failed: CUPTI busy"}}
    row = {"variant": DET, "title": "t", "problem": problem, "mode": "bwd", "correct": True, "correctness": "ok",
           "timing": {"median": 0.6, "std": 0.01}, "tflops": 300.0, "baselines": [b, f], "kernel_split": rung}
    return {"device": {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}, "software": {"torch": "2.11"},
            "git": {"commit": "abc", "dirty": False}, "reps": 30, "warmup": 5, "mode": "bwd", "rows": [row],
            "kernel_calls": 20}


def test_the_table_shows_each_implementation_by_kernel_with_its_sum_and_what_it_excludes(capsys):
    from lab.measure import benchtable

    result = _result()
    benchtable.print_ladder(result)
    out = " ".join(capsys.readouterr().out.split())
    assert "kernel split, bwd, B32-H16-N512-D128" in out and "mean of 20 traced calls" in out
    assert f"{DET} fp16" in out and "sdpa-cudnn fp16" in out
    assert out.index(f"{DET} fp16") < out.index("sdpa-cudnn fp16")
    assert "lab_bwd::main_kernel<lab_bwd::Config<64, 128, 2>, __half>" in out
    assert "419.0" in out and "372.0" in out and f"{result['rows'][0]['kernel_split']['sum_us']:.1f}" in out
    assert "no split: tracing 20 calls under torch.profiler failed" in out
    assert " ".join(EXCLUDES.split()) in out
    md = benchtable.markdown_ladder(result, "t")
    assert f"| {DET} fp16 | `lab_bwd::main_kernel<lab_bwd::Config<64, 128, 2>, __half>` | 1 | 419.0 |" in md
    assert "| sdpa-cudnn fp16 | `lab_bwd::main_kernel<lab_bwd::Config<64, 128, 2>, __half>` | 1 | 372.0 |" in md
    assert "| sdpa-flash fp16 | no split: tracing 20 calls" in md and EXCLUDES in md
    assert [who for who, _, _ in benchtable.kernel_splits(result["rows"])] == [DET, "sdpa-cudnn", "sdpa-flash"]


def test_a_table_without_splits_prints_none():
    from lab.measure import benchtable

    result = _result()
    del result["rows"][0]["kernel_split"]
    for b in result["rows"][0]["baselines"]:
        del b["kernel_split"]
    assert benchtable.kernel_splits(result["rows"]) == []
    assert "Kernel split" not in benchtable.markdown_ladder(result, "t")


# ------------------------------------------------------------------------------ the CLI's refusals

def _lab(*args, tmp_path):
    return lab_here(*args, env={"LAB_PROFILES": str(tmp_path)})


try:
    import torch
    HAS_GPU = torch.cuda.is_available()
except ImportError:
    HAS_GPU = False


@pytest.mark.parametrize("args, message", [
    (["--variant", DET, "--mode", "bwd", "--kernel-calls", "5"], "--kernel-calls sets how many calls --kernels traces"),
    (["--variant", NO_BWD, "--mode", "bwd", "--kernels"], f"{NO_BWD} has no backward"),
    (["--variant", DET, "--mode", "fwd", "--deterministic", "--kernels"], "--deterministic"),
    (["--variant", DET, "--mode", "bwd", "--kernels", "--backends", "cudnn,nope"], "unknown SDPA backend"),
    (["--variant", "nope", "--kernels"], "unknown variant"),
])
def test_bench_kernels_refuses_bad_input_in_one_line(args, message, tmp_path):
    res = _lab("bench", *args, tmp_path=tmp_path)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr
    assert res.stderr.strip().startswith("error:") and len([l for l in res.stderr.splitlines() if l.startswith("error")]) == 1
    assert list(tmp_path.iterdir()) == []


def test_bench_kernel_calls_out_of_range_is_a_usage_error(tmp_path):
    res = _lab("bench", "--variant", DET, "--mode", "bwd", "--kernels", "--kernel-calls", "0", tmp_path=tmp_path)
    assert res.returncode == 2 and "--kernel-calls" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU refusal; this machine has a GPU")
def test_bench_kernels_without_a_gpu_exits_2(tmp_path):
    res = _lab("bench", "--variant", DET, "--mode", "bwd", "--kernels", tmp_path=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "needs an NVIDIA GPU" in res.stderr or "needs PyTorch" in res.stderr
    assert "Traceback" not in res.stderr


def test_kernels_are_refused_where_torch_profiler_records_no_cuda(monkeypatch):
    torch_profiler = pytest.importorskip("torch.profiler")
    from lab.errors import LabError
    from lab.measure import benchtable

    monkeypatch.setattr(torch_profiler, "supported_activities", lambda: {torch_profiler.ProfilerActivity.CPU})
    with pytest.raises(LabError, match="--kernels needs torch.profiler's CUDA activity"):
        benchtable.require_kernel_trace()
    monkeypatch.setattr(torch_profiler, "supported_activities",
                        lambda: {torch_profiler.ProfilerActivity.CPU, torch_profiler.ProfilerActivity.CUDA})
    benchtable.require_kernel_trace()


# ------------------------------------------------------------------------------ the one bench path

def test_bench_splits_the_measurement_it_timed_and_never_a_rung_that_failed_or_was_refused(monkeypatch):
    """bench_ladder (lab.measure.benchtable) on stand-ins for the GPU's acts only: the gate's verdict,
    the measurement's time() and kernel_split(). A passing rung is split on the very Measurement its
    time came from, after it; a rung that failed its check is neither timed nor split; one the timer
    refused is not split; the baselines get --kernel-calls; a split that could not be taken exits 1."""
    from types import SimpleNamespace

    from lab.measure import baselines, benchtable
    from lab.measure.bench import Timing

    rungs = [v for v in builtin() if "float16" in v.dtypes and 64 in v.head_dims][:3]
    assert len(rungs) == 3
    passed = {rungs[0].id: True, rungs[1].id: False, rungs[2].id: True}
    events = []

    class Measured:
        def __init__(self, variant):
            self.variant = variant

        def time(self, **kwargs):
            events.append(("time", self.variant.id, id(self)))
            if self.variant.id == rungs[2].id:
                raise timed.TimingRefused(timed.IMPOSSIBLE, "under the floor")
            return Timing("ms", 2.0, 2.0, 0.01, 2.0, 2.0, 2.0, 2.0, 30, 5, True)

        def kernel_split(self, calls):
            events.append(("split", self.variant.id, id(self)))
            return split([[("void k(int)", 7, 0, 1_000)]] * calls)

    seen_calls = []

    def run_baseline(problem, backend, dtype, reps, warmup, mode="fwd", kernel_calls=0, under_load_ms=0.0):
        seen_calls.append(kernel_calls)
        return baselines.Baseline(f"sdpa-{backend}", backend, dtype, "ok", "",
                                  Timing("ms", 1.0, 1.0, 0.01, 1.0, 1.0, 1.0, 1.0, 30, 5, True), 1.0,
                                  kernel_split={"error": "CUPTI busy"} if dtype == "float32" else None)

    monkeypatch.setattr(baselines, "run_baseline", run_baseline)
    for name in ("require_gpu", "require_compute_capability", "require_kernel_trace"):
        monkeypatch.setattr(benchtable, name, lambda *a, **k: None)
    monkeypatch.setattr(benchtable, "gated", lambda v, p, mode: SimpleNamespace(
        passed=passed[v.id], verdict={"passed": passed[v.id]}, module=None))
    monkeypatch.setattr(benchtable, "rung_measurement", lambda v, *a, **k: Measured(v))
    monkeypatch.setattr(benchtable, "device_info", lambda: {"name": "GPU", "compute_capability": "9.0", "sm_count": 132})
    monkeypatch.setattr(benchtable, "software_info", lambda: {"torch": "2.11"})
    monkeypatch.setattr(benchtable, "git_info", lambda: {"commit": "abc", "dirty": False})

    problems = [Problem(1, 2, 256, 256, 64, False, "float16")] * 3
    result = benchtable.bench_ladder(rungs, problems, reps=30, warmup=5, backends=("cudnn",), kernel_calls=4)
    assert seen_calls == [4, 4]   # cudnn in fp16 and fp32, each asked for its split
    first, failed, refused = result["rows"]
    timed_id = next(i for what, v, i in events if what == "time" and v == rungs[0].id)
    assert ("split", rungs[0].id, timed_id) in events   # the measurement that was timed
    assert events.index(("split", rungs[0].id, timed_id)) > events.index(("time", rungs[0].id, timed_id))
    assert first["kernel_split"]["calls"] == 4 and first["kernel_split"]["sum_us"] == pytest.approx(1.0)
    assert not any(v == rungs[1].id for _, v, _ in events) and "kernel_split" not in failed
    assert not any(w == "split" and v == rungs[2].id for w, v, _ in events) and "kernel_split" not in refused
    assert result["kernel_calls"] == 4
    assert any(f.startswith("no kernel split for sdpa-cudnn on ") and "CUPTI busy" in f for f in result["failures"])
    assert any("wrong results from" in f for f in result["failures"])
    # without --kernels nothing is traced and the result has no split
    events.clear()
    seen_calls.clear()
    plain = benchtable.bench_ladder(rungs[:1], problems[:1], reps=30, warmup=5, backends=("cudnn",))
    assert [w for w, _, _ in events] == ["time"] and seen_calls == [0, 0]
    assert "kernel_calls" not in plain and "kernel_split" not in plain["rows"][0]

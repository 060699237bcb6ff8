"""The checked timer on a GPU against planted cheats (tests/cheats: python rungs that cheat the ways
kernel benchmarks have been cheated): each cheat gets no time, by either timing method and from every
command, and each honest rung the time the bare timer (the lab's events protocol before the checks)
gives it, within noise. Shape and dtype of issue 22: B8 H16 N2048 D64 fp16. Run with `pytest -m gpu`."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

from click.testing import CliRunner  # noqa: E402

from lab.measure.bench import EVENTS, GRAPH, L2_FLUSH_BYTES  # noqa: E402
from lab.measure.call import launch as launch_fn  # noqa: E402
from lab.measure.problem import Problem, make_inputs  # noqa: E402
from lab.measure.timed import NOT_CAPTURABLE, OUTSIDE_STREAM, WRONG_OUTPUT, CudaDevice, TimingRefused  # noqa: E402

CHEATS = Path(__file__).resolve().parent / "cheats"
PROBLEM = Problem(8, 16, 2048, 2048, 64, dtype="float16")
SHAPE = "8,16,2048,64"
VERDICTS = {"side": OUTSIDE_STREAM, "cached": WRONG_OUTPUT, "lazy": WRONG_OUTPUT, "partial": WRONG_OUTPUT,
            "deferred": WRONG_OUTPUT}
VALUE_CACHE = "valuecache"
"""Keeps its output by a sample of the inputs' values. The moved inputs (lab.measure.rotation) make every
call of the process miss, so it computes (SDPA, as `honest` does) and reads that sample on the host in
every call: by events it gets no time or an honest one, never faster than `honest` (KEPT_FLOOR); by
graph its capture fails on that host read (graph-capture-failed). It got `impossible` only while the
host's round trip was shorter than the work's floor, and a time when not (four test lanes on one host)."""
KEPT_FLOOR = 0.9
"""A value cache's checked time, at least this share of the honest rung's measured beside it: a kept
output (a dict lookup and a host read) takes a fraction of it, computing takes it all (noise: NOISE)."""
HONEST = ("honest", "joined")
BWD_VERDICTS = {"bwd_side": OUTSIDE_STREAM, "bwd_cached": WRONG_OUTPUT, "bwd_lazy": WRONG_OUTPUT,
                "bwd_partial": WRONG_OUTPUT}
BWD_HONEST = ("bwd_honest", "bwd_joined")
NOISE = 0.10   # medians of the same call by two protocols, a few seconds apart on an idle GPU


@pytest.fixture(autouse=True)
def cheats_workspace(monkeypatch, tmp_path):
    monkeypatch.setenv("LAB_WORKSPACE", str(CHEATS))
    monkeypatch.setenv("LAB_PROFILES", str(tmp_path / "store"))


def text(result) -> str:
    """What a command printed, stdout and stderr."""
    try:
        return result.output + result.stderr
    except ValueError:   # an older click that mixes stderr into output
        return result.output


def rung(rung_id):
    from lab.ladder import build, registry

    variant = registry.get(rung_id)
    return variant, build.build(variant).module


def bare_events_median(call, reps=30, warmup=5) -> float:
    """The lab's events protocol before the checks: warm-up, then per repetition an L2 flush, a
    synchronize, and an event pair around the call on the current stream."""
    flush = CudaDevice().flush_buffer(L2_FLUSH_BYTES)   # the timer's own flush
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(reps):
        flush.evict()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


@pytest.mark.parametrize("method", [EVENTS, GRAPH])
@pytest.mark.parametrize("cheat", sorted(VERDICTS))
def test_each_cheat_gets_no_time(cheat, method):
    from lab.measure.checked import time_rung

    variant, module = rung(cheat)
    with pytest.raises(TimingRefused) as refused:
        time_rung(variant, module, PROBLEM, reps=10, warmup=5, method=method)
    assert refused.value.status == VERDICTS[cheat], str(refused.value)


def assert_no_kept_time(result, honest_ms: float, what: str) -> None:
    """`result` (a Timing or a TimingRefused) of the value cache by events: no time, or one no faster than
    KEPT_FLOOR x the honest rung's."""
    if isinstance(result, TimingRefused):
        return
    assert result.median >= KEPT_FLOOR * honest_ms, (
        f"{what}: the value cache timed {result.median:.4f} ms against the honest rung's {honest_ms:.4f} ms: "
        f"a kept output was timed (inputs loaded {result.checks.get('inputs_loaded')}, "
        f"placements {result.checks.get('input_placements')})")


def test_the_value_cache_computes_in_every_timed_call():
    """The moved inputs leave a cache keyed by the inputs' values nothing to find, whatever the host's
    speed: by events it is timed as the work it does (or refused), by graph it cannot be captured."""
    from lab.measure.checked import time_rung

    variant, module = rung(VALUE_CACHE)
    honest = [time_rung(*rung("honest"), PROBLEM, reps=10, warmup=5).median]
    try:
        result = time_rung(variant, module, PROBLEM, reps=10, warmup=5)
    except TimingRefused as refused:
        result = refused
    honest.append(time_rung(*rung("honest"), PROBLEM, reps=10, warmup=5).median)
    print(f"valuecache by events: {getattr(result, 'median', result)}; honest {honest}")
    assert_no_kept_time(result, min(honest), "events")
    if not isinstance(result, TimingRefused):
        assert result.checks["outputs_verified"] == 10 + result.warmup
    with pytest.raises(TimingRefused) as refused:
        time_rung(variant, module, PROBLEM, reps=10, warmup=5, method=GRAPH)
    assert refused.value.status == NOT_CAPTURABLE, str(refused.value)


@pytest.mark.parametrize("method", [EVENTS, GRAPH])
@pytest.mark.parametrize("mode", ["bwd", "fwd+bwd"])
@pytest.mark.parametrize("cheat", sorted(BWD_VERDICTS))
def test_each_backward_cheat_gets_no_time(cheat, mode, method):
    from lab.measure.checked import time_rung

    variant, module = rung(cheat)
    with pytest.raises(TimingRefused) as refused:
        time_rung(variant, module, PROBLEM, reps=10, warmup=5, method=method, mode=mode)
    assert refused.value.status == BWD_VERDICTS[cheat], str(refused.value)
    if BWD_VERDICTS[cheat] == WRONG_OUTPUT:
        assert any(g in refused.value.reason for g in ("dQ", "dK", "dV")), refused.value.reason


def test_the_bare_timer_is_fooled_by_the_forward_cheats():
    """The premise: without the checks (and on the same inputs every call), the side-stream and
    value-cache rungs time faster than the floor, or far faster than the same work done honestly;
    the checked timer refuses the side stream and makes the value cache compute (tests above). Where
    the host's dispatch of the call outlasts the work the cheat hides (measured on an H200 host with
    four GPUs busy: the side cheat's dispatch 0.22 ms against a 0.14 ms floor), the bare timer is not
    fooled by much there: skipped with both numbers, while the checked timer is tested above on every
    host."""
    from lab.measure.checked import device_floor

    floor = device_floor(PROBLEM).limit_ms()
    honest = bare_events_median(launch_fn(*rung("honest"), PROBLEM))
    not_fooled = []
    for cheat in ("side", "valuecache"):
        variant, module = rung(cheat)
        bare = bare_events_median(launch_fn(variant, module, PROBLEM))
        if not (bare < floor or bare < 0.7 * honest):
            not_fooled.append(f"{cheat} {bare:.4f} ms")
    if not_fooled:
        pytest.skip(f"on this host the bare timer is not fooled by much: {', '.join(not_fooled)} against the floor "
                    f"{floor:.4f} ms and the honest rung's {honest:.4f} ms (the call's dispatch outlasts the work it hides)")


def test_the_bare_timer_is_fooled_by_the_kept_backward():
    """The premise: the kept backward (behind a GPU wait that keeps it above the floor) times far
    faster than its honest twin."""
    from lab.measure.checked import device_floor

    kept = bare_events_median(launch_fn(*rung("bwd_cached"), PROBLEM, mode="bwd"))
    honest = bare_events_median(launch_fn(*rung("bwd_honest"), PROBLEM, mode="bwd"))
    assert device_floor(PROBLEM, "bwd").limit_ms() < kept < 0.7 * honest, (kept, honest)


def test_the_precision_cheat_fails_the_correctness_gate():
    from lab.measure.check import check_variant

    variant, module = rung("precision")
    assert not check_variant(variant, PROBLEM, extra_shapes=2, module=module).passed


@pytest.mark.parametrize("honest", HONEST)
def test_honest_rungs_time_as_the_bare_timer(honest):
    from lab.measure.checked import time_rung

    variant, module = rung(honest)
    bare, checked = [], []
    for _ in range(3):   # alternated, so drift hits both protocols alike
        bare.append(bare_events_median(launch_fn(variant, module, PROBLEM)))
        timing = time_rung(variant, module, PROBLEM, reps=30, warmup=5)
        checked.append(timing.median)
        assert timing.checks["outputs_verified"] == 30 + timing.warmup
    b, c = statistics.median(bare), statistics.median(checked)
    print(f"{honest}: bare timer {b:.4f} ms, checked timer {c:.4f} ms ({c / b - 1:+.1%}); rounds {bare} {checked}")
    assert abs(c / b - 1) < NOISE, (bare, checked)
    graph = time_rung(variant, module, PROBLEM, reps=30, warmup=5, method=GRAPH)
    assert graph.median <= c * 1.1


@pytest.mark.parametrize("honest", BWD_HONEST)
def test_honest_backward_rungs_time_as_the_bare_timer(honest):
    from lab.measure.checked import time_rung

    variant, module = rung(honest)
    bare, checked = [], []
    for _ in range(3):
        bare.append(bare_events_median(launch_fn(variant, module, PROBLEM, mode="bwd")))
        timing = time_rung(variant, module, PROBLEM, reps=30, warmup=5, mode="bwd")
        checked.append(timing.median)
        assert timing.checks["outputs_verified"] == 30 + timing.warmup and timing.checks["input_sets"] == 3
    b, c = statistics.median(bare), statistics.median(checked)
    print(f"{honest} bwd: bare timer {b:.4f} ms, checked timer {c:.4f} ms ({c / b - 1:+.1%})")
    assert abs(c / b - 1) < NOISE, (bare, checked)
    for mode in ("bwd", "fwd+bwd"):
        assert time_rung(variant, module, PROBLEM, reps=10, warmup=5, method=GRAPH, mode=mode).median > 0


def test_tunes_interleaved_path_refuses_every_cheat_and_times_the_honest():
    """`lab tune` times its candidates through Measurement.checked() and the interleaved timer; python
    rungs have no tuning build, so the cheats go through that same path here."""
    from lab.measure.call import rung as attention
    from lab.measure.checked import Measurement, Workload, device_floor
    from lab.measure.timed import time_checked_interleaved

    for mode, verdicts, honest in (("fwd", VERDICTS, HONEST), ("bwd", BWD_VERDICTS, BWD_HONEST)):
        workload = Workload(PROBLEM)
        computes = (VALUE_CACHE,) if mode == "fwd" else ()   # on slots the candidates share
        specs = {rid: Measurement(attention(*rung(rid), PROBLEM), workload, mode, floor=device_floor(PROBLEM, mode),
                                  what=rid).checked()
                 for rid in (*verdicts, *honest, *computes)}
        out = time_checked_interleaved(specs, reps=10, warmup=5)
        for rid, verdict in verdicts.items():
            assert isinstance(out[rid], TimingRefused) and out[rid].status == verdict, (mode, rid, out[rid])
        for rid in honest:
            assert not isinstance(out[rid], TimingRefused), (mode, rid, out[rid])
        for rid in computes:
            assert_no_kept_time(out[rid], out[honest[0]].median, f"{mode} interleaved")


def test_sdpa_baselines_pass_the_checks():
    from lab.measure.baselines import run_baseline

    for mode in ("fwd", "bwd", "fwd+bwd"):
        for backend in ("cudnn", "flash", "efficient"):
            b = run_baseline(PROBLEM, backend, "float16", reps=10, warmup=3, mode=mode)
            assert b.status == "ok", (mode, backend, b.reason)
            assert b.timing.checks["floor_ms"] < b.timing.min


def test_bench_and_profile_exit_1_with_the_verdict():
    from lab.cli import main

    r = CliRunner().invoke(main, ["bench", "--variant", "cached,honest", "--shape", SHAPE, "--dtype", "float16",
                                  "--no-baselines", "--reps", "10"])
    assert r.exit_code == 1, text(r)
    assert "wrong-output" in text(r) and "honest" in text(r)
    r = CliRunner().invoke(main, ["profile", "--variant", "side", "--shape", SHAPE, "--dtype", "float16",
                                  "--no-ncu", "--no-baselines", "--no-report", "--reps", "10"])
    assert r.exit_code == 1 and "work-outside-stream" in text(r), text(r)


def test_sweep_gives_a_cheat_a_failed_row_with_its_reason(tmp_path):
    from lab.cli import main
    from lab.store import sweeps as store

    r = CliRunner().invoke(main, ["sweep", "--variant", "side,valuecache,honest,bwd_side,bwd_cached,bwd_lazy,bwd_honest",
                                  "--shape", SHAPE, "--dtype", "float16", "--mode", "fwd,bwd", "--no-baselines",
                                  "--timing", "both", "--reps", "10"])
    assert r.exit_code == 0, text(r)
    (sw,) = store.list_sweeps(tmp_path / "store")
    rows = {(row["impl"], row["mode"], row["timing"]): row for row in sw.rows()}
    expected = {("side", "fwd"): OUTSIDE_STREAM, (VALUE_CACHE, "fwd"): None,
                **{(cheat, "bwd"): verdict for cheat, verdict in BWD_VERDICTS.items() if cheat in
                   ("bwd_side", "bwd_cached", "bwd_lazy")}}
    for (impl, mode), verdict in expected.items():
        for timing in (EVENTS, GRAPH):
            row = rows[(impl, mode, timing)]
            if verdict is None:   # the value cache computes: no time or an honest one by events; no graph
                if timing == EVENTS and row["status"] == "ok":
                    honest = rows[("honest", "fwd", EVENTS)]["median_ms"]
                    assert row["median_ms"] >= KEPT_FLOOR * honest, (row, honest)
                elif timing == GRAPH:
                    assert row["status"] == "failed" and NOT_CAPTURABLE in row["reason"], row
                continue
            assert row["status"] == "failed" and verdict in row["reason"], (impl, mode, timing, row["reason"])
    for impl, mode in (("honest", "fwd"), ("bwd_honest", "fwd"), ("bwd_honest", "bwd")):
        for timing in (EVENTS, GRAPH):
            row = rows[(impl, mode, timing)]
            assert row["status"] == "ok" and row["median_ms"] > 0, row


def test_make_inputs_rotation_sets_differ():
    from lab.measure.rotation import problem_inputs

    rot = problem_inputs(Problem(1, 2, 64, 64, 64, dtype="float16"))
    assert torch.equal(rot.sets[0][0], make_inputs(Problem(1, 2, 64, 64, 64, dtype="float16"), 0)[0])
    assert not torch.equal(rot.sets[0][0], rot.sets[1][0])

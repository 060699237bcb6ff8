"""`lab sweep --timing auto` decides a cell's graph row from the cell's floor, before timing, not from a
measured median near a line: every run, pass and implementation of a problem gets the same rows. On the
real shipped target pair (one GPU, two GPUs: one graph row in each that the other lacks, decided by an
events median of ~0.5 ms) and through the lab's own GpuMeasurer with the timer's result scripted."""

from __future__ import annotations

import pytest

from lab.gpu_specs import peaks_for
from lab.measure import sweep as measure_sweep
from lab.measure.bench import summarize
from lab.measure.floor import attention_floor
from lab.measure.problem import Problem
from lab.measure.sweepplan import (GRAPH_AUTO_BELOW_MS, Cell, Plan, fastest_call_ms, timing_methods)
from lab.store import sweeps as store
from conftest import REPO  # noqa: E402

EXAMPLES = REPO / "profiles" / "examples"
ONE, TWO = "20261127-135332-sweep-scale-1", "20261127-135922-sweep-scale-2"
H200 = "NVIDIA H200"


def _problem(r: dict) -> Problem:
    return Problem(r["batch"], r["heads"], r["seqlen_q"], r["seqlen_k"], r["head_dim"], bool(r["causal"]), r["dtype"],
                   r["heads_kv"])


def _floor(r: dict, sweep: store.Sweep):
    dev = sweep.manifest.get("device") or {}
    return attention_floor(_problem(r), r["mode"], dev.get("peaks"), dev.get("name"))


def test_the_methods_follow_the_floor_not_the_time():
    p = Problem(16, 32, 1024, 1024, 64, False, "bfloat16")
    fwd, fwdbwd = attention_floor(p, "fwd", device=H200), attention_floor(p, "fwd+bwd", device=H200)
    assert fastest_call_ms(fwd) < GRAPH_AUTO_BELOW_MS < fastest_call_ms(fwdbwd)
    assert timing_methods("auto", fwd) == ("events", "graph")
    assert timing_methods("auto", fwdbwd) == ("events",)
    assert timing_methods("auto", None) == ("events", "graph")   # unknown peaks: both, every time
    for timing, methods in (("events", ("events",)), ("graph", ("graph",)), ("both", ("events", "graph"))):
        assert timing_methods(timing, fwd) == timing_methods(timing, fwdbwd) == timing_methods(timing, None) == methods


def test_the_shortest_call_is_the_slower_of_the_sustained_products_and_reads():
    # a decode-like problem is bound by its reads: held to HBM's sustained share, not the matrix rate's
    reads = attention_floor(Problem(64, 32, 1, 16384, 128, False, "float16"), "fwd", device=H200)
    assert reads.memory_ms > reads.compute_ms
    assert fastest_call_ms(reads) == pytest.approx(reads.memory_ms / 0.9)
    assert fastest_call_ms(reads, l2_flushed=False) == pytest.approx(reads.compute_ms / 0.8)


def test_no_shipped_call_beat_the_shortest_call_its_floor_allows():
    """What makes the line safe: a call under 0.5 ms always has its graph row, because no call runs faster
    than fastest_call_ms. Every ok row of every shipped sweep, every pass of it, on H100 and H200."""
    checked, closest = 0, None
    for sw in store.list_sweeps(EXAMPLES):
        flushed = sw.plan_dict.get("l2_flush", True)
        for r in sw.rows():
            if r.get("status") != "ok":
                continue
            floor = _floor(r, sw)
            assert floor is not None, f"{sw.id}: no peaks for {(sw.manifest.get('device') or {}).get('name')}"
            ratio = min(r.get("pass_medians_ms") or [r["median_ms"]]) / fastest_call_ms(floor, flushed)
            checked += 1
            closest = min(closest or ratio, ratio)
            assert ratio > 1, (sw.id, r["impl"], r["label"], r["mode"], r["timing"], ratio)
    assert checked > 5000 and closest < 1.2   # the rule is tested near its edge, not only far from it


def test_the_shipped_pair_gets_one_row_set():
    """The two tables' differing graph rows: each cell now has its graph row in both, and every cell any of
    whose passes' events medians fell under the line (the old rule's row) keeps its graph row."""
    a, b = store.Sweep(EXAMPLES / ONE), store.Sweep(EXAMPLES / TWO)
    keys = {s.id: {(r["impl"], r["label"], r["mode"], r["timing"]) for r in s.rows() if r["status"] == "ok"} for s in (a, b)}
    only = (keys[a.id] ^ keys[b.id])
    assert {(k[0], k[1], k[2]) for k in only} == {("sdpa-flash", "B16-H32-N1024-D64-bfloat16", "fwd"),
                                                   ("sdpa-cudnn", "B32-H16-N512-D128-causal-bfloat16", "bwd")}
    for sw in (a, b):
        for r in sw.rows():
            if r["status"] != "ok" or r["timing"] != "events":
                continue
            methods = timing_methods(sw.plan_dict["timing"], _floor(r, sw), sw.plan_dict["l2_flush"])
            if min(r["pass_medians_ms"]) < GRAPH_AUTO_BELOW_MS or (r["impl"], r["label"], r["mode"], "graph") in only:
                assert methods == ("events", "graph"), (sw.id, r["impl"], r["label"], r["mode"])
            # one decision per problem and mode: every implementation of it gets the same methods
            assert methods == timing_methods("auto", attention_floor(_problem(r), r["mode"], device=H200))


class _Timer:
    """The timer's place in GpuMeasurer: hands back the scripted median of each call in turn (the real
    timer needs a GPU; what is tested is the measurer's choice of methods around it)."""

    medians: list[float] = []

    def __init__(self, *args, **kwargs):
        pass

    def time(self, method, **kwargs):
        t = summarize([self.medians.pop(0)] * 5, 1, True)
        t.method, t.peak_memory_bytes = method, None
        return t


@pytest.fixture
def measurer(monkeypatch):
    """The lab's GpuMeasurer on an H200's datasheet peaks, its timer and inputs scripted."""
    monkeypatch.setattr(measure_sweep, "Measurement", _Timer)
    monkeypatch.setattr(measure_sweep, "attention", lambda name, p: type("Impl", (), {"layout": "BHND"})())
    m = object.__new__(measure_sweep.GpuMeasurer)
    m.device = {"name": H200, "peaks": peaks_for(H200).to_dict()}
    m.peaks, m.gates, m._gates, m.log = m.device["peaks"], None, {}, lambda s: None
    m.workload = lambda p, layout="BHND": None
    return m


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_a_call_either_side_of_the_line_gets_the_same_rows_in_every_pass(measurer, mode):
    """The same cell measured twice, its events median 0.49 ms then 0.51 ms (the shipped pair's cells):
    the same rows both times, from the floor. Before, the first pass had a graph row and the second not."""
    p = Problem(16, 32, 1024, 1024, 64, False, "bfloat16")
    measurer.plan = Plan("t", {}, ["sdpa-flash"], [p], [mode])
    cell = Cell("sdpa-flash", p, mode)
    rows = []
    for events_ms in (0.49, 0.51):
        _Timer.medians = [events_ms, 0.45]
        rows.append([(r["timing"], r["status"]) for r in measurer(cell)])
    assert rows[0] == rows[1] == [("events", "ok"), ("graph", "ok")]
    assert not _Timer.medians   # the graph row was timed in both passes


def test_a_problem_too_long_for_the_line_gets_no_graph_row_whatever_a_call_reads(measurer):
    """fwd+bwd at B16-H16-N1024-D128: floor 0.417 ms, so no call of it can take under 0.52 ms at the rates an
    H200 sustains; one that read 0.49 ms (above the floor: the timer would keep it) gets no graph row,
    where the measured rule would have added one."""
    p = Problem(16, 16, 1024, 1024, 128, False, "bfloat16")
    floor = attention_floor(p, "fwd+bwd", device=H200)
    assert floor.limit_ms() < 0.49 < GRAPH_AUTO_BELOW_MS < fastest_call_ms(floor)
    measurer.plan = Plan("t", {}, ["sdpa-cudnn"], [p], ["fwd+bwd"])
    _Timer.medians = [0.49]
    assert [r["timing"] for r in measurer(Cell("sdpa-cudnn", p, "fwd+bwd"))] == ["events"]


@pytest.mark.gpu
def test_auto_on_a_gpu_times_the_methods_the_floor_says_in_every_pass(tmp_path):
    """The real measurer and timer: short problems get their graph row in every pass, forward and backward,
    a long one none, whatever its calls measured (4,16,4096,128's forward: floor 0.56 ms on an H100 or H200)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    from click.testing import CliRunner

    from lab.cli import main

    r = CliRunner().invoke(main, ["sweep", "--shape", "4,16,{512,4096},128", "--dtype", "bfloat16", "--baselines",
                                  "sdpa-cudnn,sdpa-flash", "--mode", "fwd,bwd", "--reps", "10"],
                           env={"LAB_PROFILES": str(tmp_path)}, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    (sw,) = store.list_sweeps(tmp_path)
    dev, plan = sw.manifest["device"], sw.plan_dict
    rows = [r for r in sw.rows() if r["status"] == "ok"]
    cells = {(r["impl"], r["label"], r["mode"]) for r in rows}
    assert len(cells) == 8
    graphs = 0
    for impl, label, mode in cells:
        mine = [r for r in rows if (r["impl"], r["label"], r["mode"]) == (impl, label, mode)]
        floor = attention_floor(_problem(mine[0]), mode, dev.get("peaks"), dev.get("name"))
        assert tuple(sorted(r["timing"] for r in mine)) == timing_methods("auto", floor, plan["l2_flush"]), (impl, label, mode)
        for r in mine:
            assert r["passes"] == plan["passes"]   # every pass timed every method
            graphs += r["timing"] == "graph"
    assert 0 < graphs < len(cells)   # both sides of the line were there

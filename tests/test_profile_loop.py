"""The loop's speed on a CPU machine: `lab profile` times each stage and stores the times, and the
SDPA baselines are cached in the store per (device, software, shape, protocol). The GPU machine's acts
are stand-ins handed to the pipeline (pipeline.Machine; every device name says "test-made"); the
measured speed is benchmarks/RESULTS.md's."""

from __future__ import annotations

import json

import pytest

from lab import pipeline
from lab.ladder.registry import builtin
from lab.measure import bench, isolated
from lab.measure.baselines import Baseline
from lab.measure.problem import parse_shape
from lab.store import baseline_cache
from lab.store import runs as store

FIRST = builtin()[0]   # the ladder's first rung (fp32, D=64); the stand-ins below do the work
DEVICE = {"name": "Test GPU (test-made)", "compute_capability": "9.0", "sm_count": 132, "driver": "test"}
SOFTWARE = {"torch": "test", "cuda": "test", "cudnn": 1}


class Built:
    module, built_now, seconds, flags, cache_key, ptxas = None, False, 0.0, [], "k", []


class Verdict:
    """A correctness child's verdict, given at once (lab.measure.isolated.PendingCheck's interface)."""

    def __init__(self, verdict):
        self.verdict = verdict

    def result(self) -> dict:
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return self.verdict

    def cancel(self) -> None:
        pass


PASSED = {"passed": True, "rel_err": 0.0, "rule": "test-made"}


class StandIns:
    """The GPU machine's acts for pipeline.profile (pipeline.Machine): the check passes, the bench
    returns fixed times, the baselines count how often they are timed."""

    def __init__(self):
        self.timed: list[str] = []        # the problems the baselines were timed on
        self.checks: list[bool] = []      # each check started: compile (True) or the cached build only

    verdict = PASSED                      # what every check says

    def start_check(self, variant, problem, extra_shapes, compile=True, mode="fwd"):
        self.checks.append(compile)
        return Verdict(self.verdict)

    def run_baselines(self, problem, reps, warmup, progress=None, **k):
        self.timed.append(problem.label())
        t = bench.summarize([1.0] * 30, 5, True)
        return [Baseline("sdpa-flash", "flash", "float16", "ok", "", t, 1.0, 0),
                Baseline("sdpa-flash", "flash", "float32", "unavailable", "no fp32 kernel (test-made)")]

    def machine(self, **acts) -> pipeline.Machine:
        chosen = dict(require_gpu=lambda *a, **k: None, require_compute_capability=lambda *a, **k: None,
                      device_info=lambda *a: dict(DEVICE), software_info=lambda *a: dict(SOFTWARE),
                      tool_versions=lambda: {}, git_info=lambda: {"commit": None, "dirty": None},
                      build=lambda *a, **k: Built(),
                      start_check=self.start_check, time_rung=lambda *a, **k: bench.summarize([2.0] * 30, 5, True),
                      run_baselines=self.run_baselines)
        return pipeline.Machine(**{**chosen, **acts})


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """The store in tmp_path (LAB_PROFILES, as a user sets it), and the current folder too, where the
    run's page goes (reports/): nothing is written into the checkout."""
    monkeypatch.setenv("LAB_PROFILES", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    return StandIns()


def _profile(stand_ins, shape="1,2,64,64", machine=None, **opts):
    return pipeline.profile(FIRST, parse_shape(shape), pipeline.ProfileOptions(ncu=False, **{"report": False, **opts}),
                            machine or stand_ins.machine())


def test_each_stage_is_timed_and_stored(stand_ins, capsys, tmp_path):
    done = _profile(stand_ins, report=True)
    m = store.Run(done.run_dir).record
    assert list(m.stage_seconds) == ["setup", "build", "check", "bench", "baselines", "store", "report"]
    assert all(v >= 0 for v in m.stage_seconds.values())
    err = capsys.readouterr().err
    for name in m.stage_seconds:
        assert f"  {name}: " in err
    assert "[lab] stages: setup " in err and " · total " in err
    assert done.page is not None and done.page.is_file() and done.page.resolve().is_relative_to(tmp_path.resolve())


def test_baselines_are_timed_once_per_device_software_and_shape(stand_ins, tmp_path):
    timed = stand_ins.timed
    first = store.Run(_profile(stand_ins).run_dir).record
    assert timed == ["B1-H2-N64-D64-float32"] and first.baselines_cached is False
    second = store.Run(_profile(stand_ins).run_dir).record
    assert timed == ["B1-H2-N64-D64-float32"] and second.baselines_cached is True   # read, not re-timed
    assert second.baselines_timed_utc == first.baselines_timed_utc
    assert [b.to_dict() for b in second.baselines] == [b.to_dict() for b in first.baselines]
    assert second.baselines[0].ratio == pytest.approx(0.5)   # 1 ms against our 2 ms, computed for this run
    third = store.Run(_profile(stand_ins, fresh_baselines=True).run_dir).record
    assert len(timed) == 2 and third.baselines_cached is False
    # another shape, or other software, is another entry
    _profile(stand_ins, "1,2,128,64")
    assert len(timed) == 3
    assert store.list_runs(tmp_path / "store") and all(not r.id.startswith(".") for r in store.list_runs(tmp_path / "store"))


def test_the_cache_key_and_a_damaged_entry(tmp_path):
    p = parse_shape("1,2,64,64")
    key = baseline_cache.cache_key(DEVICE, SOFTWARE, p, reps=30, warmup=5, backends=("flash",), dtypes=("float16",))
    assert baseline_cache.get(key, tmp_path) is None
    baseline_cache.put(key, [{"name": "sdpa-flash", "dtype": "float16", "status": "ok", "median_ms": 1.0, "ratio": 9.0}],
                       tmp_path)
    [b], _ = baseline_cache.get(key, tmp_path)
    assert b["median_ms"] == 1.0 and "ratio" not in b   # a ratio belongs to a run, not to the cache
    other = baseline_cache.cache_key(DEVICE, {**SOFTWARE, "torch": "other"}, p, reps=30, warmup=5,
                                     backends=("flash",), dtypes=("float16",))
    assert baseline_cache.get(other, tmp_path) is None
    [entry] = (tmp_path / baseline_cache.CACHE_DIR).iterdir()
    entry.write_text(json.dumps({"key": key, "timed_utc": "x", "baselines": [{"name": "x", "median_ms": "fast"}]}))
    assert baseline_cache.get(key, tmp_path) is None     # damaged: a miss, the baselines are timed again
    assert store.list_runs(tmp_path) == []               # the cache is not a run


def test_the_early_check_child_is_started_again_when_the_rung_was_not_built(stand_ins):
    """The correctness child starts before the build, on the cached build only; where there is none
    it says not_built and the check runs again once the parent has built the rung."""
    def start_check(variant, problem, extra_shapes, compile=True, mode="fwd"):
        stand_ins.checks.append(compile)
        return Verdict(isolated.NotBuilt(f"{variant.id} is not built yet") if not compile else PASSED)

    m = store.Run(_profile(stand_ins, machine=stand_ins.machine(start_check=start_check)).run_dir).record
    assert stand_ins.checks == [False, True]   # on the cached build only, then on the fresh one
    assert m.correctness.passed is True


def test_a_passed_check_is_reused_only_for_the_same_binary_shapes_and_seed(stand_ins):
    """The second warm profile of an unchanged rung reuses the first one's verdict and says so; a
    --fresh-check, another binary or another number of shapes checks again; a failed check is never kept."""
    first = store.Run(_profile(stand_ins).run_dir).record
    assert first.correctness.passed is True and first.correctness.reused is None
    second = store.Run(_profile(stand_ins).run_dir).record
    assert second.correctness.passed is True and "same binary" in second.correctness.reused
    assert store.Run(_profile(stand_ins, fresh_check=True).run_dir).record.correctness.reused is None
    assert store.Run(_profile(stand_ins, check_shapes=3).run_dir).record.correctness.reused is None

    def built_as(key):
        return type("B", (), {"module": None, "built_now": False, "seconds": 0.0, "flags": [], "cache_key": key,
                              "ptxas": []})()

    rebuilt = stand_ins.machine(build=lambda *a, **k: built_as("another binary"))
    assert store.Run(_profile(stand_ins, machine=rebuilt).run_dir).record.correctness.reused is None
    stand_ins.verdict = {"passed": False, "rel_err": 1.0, "tolerance": 0.0001, "failed_shape": "B1", "rule": "test-made"}
    with pytest.raises(Exception, match="is wrong"):
        _profile(stand_ins, machine=rebuilt, fresh_check=True)
    third = stand_ins.machine(build=lambda *a, **k: built_as("third"))
    with pytest.raises(Exception, match="is wrong"):
        _profile(stand_ins, machine=third)
    with pytest.raises(Exception, match="is wrong"):   # the failure was not kept as a pass, nor reused
        _profile(stand_ins, machine=third)

"""The loop's speed on a CPU machine: `lab profile` times each stage and stores the times, and the
SDPA baselines are cached in the store per (device, software, shape, protocol). The GPU steps are
stand-ins here (every device name says "test-made"); the measured speed is benchmarks/RESULTS.md's."""

from __future__ import annotations

import json
import stat

import pytest

from lab import pipeline
from lab.ladder.registry import builtin

FIRST = builtin()[0]   # the ladder's first rung (fp32, D=64); the stand-ins below do the work
from lab.measure import bench, isolated
from lab.measure.baselines import Baseline
from lab.measure.problem import parse_shape
from lab.store import baseline_cache
from lab.store import runs as store

DEVICE = {"name": "Test GPU (test-made)", "compute_capability": "9.0", "sm_count": 132, "driver": "test"}
SOFTWARE = {"torch": "test", "cuda": "test", "cudnn": 1}


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """GPU steps replaced: the check child is a fake python printing a passing verdict, the bench
    returns fixed times, the baselines count how often they are timed."""
    import lab.environment as env
    from lab.ladder import build

    monkeypatch.setenv("LAB_PROFILES", str(tmp_path / "store"))
    monkeypatch.setattr(env, "require_gpu", lambda *a, **k: None)
    monkeypatch.setattr(env, "require_compute_capability", lambda *a, **k: None)
    monkeypatch.setattr(env, "device_info", lambda *a: dict(DEVICE))
    monkeypatch.setattr(env, "software_info", lambda *a: dict(SOFTWARE))
    monkeypatch.setattr(env, "tool_versions", lambda: {})
    monkeypatch.setattr(env, "git_info", lambda: {"commit": None, "dirty": None})

    class Built:
        module, built_now, seconds, flags, cache_key, ptxas = None, False, 0.0, [], "k", []

    monkeypatch.setattr(build, "build", lambda *a, **k: Built())
    exe = tmp_path / "fake-python"
    exe.write_text("#!/bin/sh\necho '{\"passed\": true, \"rel_err\": 0.0, \"rule\": \"test-made\"}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(isolated.sys, "executable", str(exe))
    import lab.measure.checked as checked

    monkeypatch.setattr(checked, "time_rung", lambda *a, **k: bench.summarize([2.0] * 30, 5, True))
    timed = []

    def fake_baselines(problem, reps, warmup, progress=None, **k):
        timed.append(problem.label())
        t = bench.summarize([1.0] * 30, 5, True)
        return [Baseline("sdpa-flash", "flash", "float16", "ok", "", t, 1.0, 0),
                Baseline("sdpa-flash", "flash", "float32", "unavailable", "no fp32 kernel (test-made)")]

    import lab.measure.baselines as baselines
    monkeypatch.setattr(baselines, "run_baselines", fake_baselines)
    return timed


def _profile(**opts):
    return pipeline.profile(FIRST, parse_shape("1,2,64,64"),
                            pipeline.ProfileOptions(ncu=False, **{"report": False, **opts}))


def test_each_stage_is_timed_and_stored(stand_ins, capsys):
    done = _profile(report=True)
    m = store.Run(done.run_dir).record
    assert list(m.stage_seconds) == ["setup", "build", "check", "bench", "baselines", "store", "report"]
    assert all(v >= 0 for v in m.stage_seconds.values())
    err = capsys.readouterr().err
    for name in m.stage_seconds:
        assert f"  {name}: " in err
    assert "[lab] stages: setup " in err and " · total " in err
    assert done.page is not None and done.page.is_file()


def test_baselines_are_timed_once_per_device_software_and_shape(stand_ins, tmp_path):
    first = store.Run(_profile().run_dir).record
    assert stand_ins == ["B1-H2-N64-D64-float32"] and first.baselines_cached is False
    second = store.Run(_profile().run_dir).record
    assert stand_ins == ["B1-H2-N64-D64-float32"] and second.baselines_cached is True   # read, not re-timed
    assert second.baselines_timed_utc == first.baselines_timed_utc
    assert [b.to_dict() for b in second.baselines] == [b.to_dict() for b in first.baselines]
    assert second.baselines[0].ratio == pytest.approx(0.5)   # 1 ms against our 2 ms, computed for this run
    third = store.Run(_profile(fresh_baselines=True).run_dir).record
    assert len(stand_ins) == 2 and third.baselines_cached is False
    # another shape, or other software, is another entry
    pipeline.profile(FIRST, parse_shape("1,2,128,64"), pipeline.ProfileOptions(ncu=False, report=False))
    assert len(stand_ins) == 3
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


def test_the_early_check_child_is_started_again_when_the_rung_was_not_built(stand_ins, tmp_path, monkeypatch):
    """The correctness child starts before the build, on the cached build only; where there is none
    it says not_built and the check runs again once the parent has built the rung."""
    calls = tmp_path / "calls"
    exe = tmp_path / "fake-python-2"
    exe.write_text("#!/bin/sh\necho \"$@\" >> " + str(calls) + "\n"
                   "case \"$*\" in *--no-compile*) echo '{\"error\": \"v1 is not built yet\", \"not_built\": true}';;\n"
                   "*) echo '{\"passed\": true, \"rel_err\": 0.0, \"rule\": \"test-made\"}';; esac\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(isolated.sys, "executable", str(exe))
    m = store.Run(_profile().run_dir).record
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and "--no-compile" in lines[0] and "--no-compile" not in lines[1]
    assert m.correctness.passed is True


def test_a_passed_check_is_reused_only_for_the_same_binary_shapes_and_seed(stand_ins, tmp_path, monkeypatch):
    """The second warm profile of an unchanged rung reuses the first one's verdict and says so; a
    --fresh-check, another binary or another number of shapes checks again; a failed check is never kept."""
    from lab.ladder import build

    first = store.Run(_profile().run_dir).record
    assert first.correctness.passed is True and first.correctness.reused is None
    second = store.Run(_profile().run_dir).record
    assert second.correctness.passed is True and "same binary" in second.correctness.reused
    assert store.Run(_profile(fresh_check=True).run_dir).record.correctness.reused is None
    assert store.Run(_profile(check_shapes=3).run_dir).record.correctness.reused is None

    class Rebuilt:
        module, built_now, seconds, flags, cache_key, ptxas = None, False, 0.0, [], "another binary", []

    monkeypatch.setattr(build, "build", lambda *a, **k: Rebuilt())
    assert store.Run(_profile().run_dir).record.correctness.reused is None
    exe = tmp_path / "fake-python-wrong"
    exe.write_text("#!/bin/sh\necho '{\"passed\": false, \"rel_err\": 1.0, \"tolerance\": 0.0001, "
                   "\"failed_shape\": \"B1\", \"rule\": \"test-made\"}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(isolated.sys, "executable", str(exe))
    with pytest.raises(Exception, match="is wrong"):
        _profile(fresh_check=True)
    monkeypatch.setattr(build, "build", lambda *a, **k: type("B", (), {"module": None, "built_now": False, "seconds": 0.0,
                                                                        "flags": [], "cache_key": "third", "ptxas": []})())
    with pytest.raises(Exception, match="is wrong"):
        _profile()
    with pytest.raises(Exception, match="is wrong"):   # the failure was not kept as a pass, nor reused
        _profile()

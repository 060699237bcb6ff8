"""The loop's speed on a CPU machine: `lab profile` times each stage and stores the times, and the
SDPA baselines are cached in the store per (device, software, shape, protocol). The GPU machine's acts
are stand-ins handed to the pipeline (pipeline.Machine; every device name says "test-made"); the
measured speed is benchmarks/RESULTS.md's."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pytest

from lab import pipeline
from lab.analysis import findings as analysis
from lab.ladder.registry import builtin
from lab.measure import bench
from lab.measure.baselines import Baseline
from lab.measure.problem import parse_shape
from lab.store import baseline_cache
from lab.store import runs as store

FIRST = builtin()[0]   # the ladder's first rung (fp32, D=64); the stand-ins below do the work
DEVICE = {"name": "Test GPU (test-made)", "compute_capability": "9.0", "sm_count": 132, "driver": "test"}
SOFTWARE = {"torch": "test", "cuda": "test", "cudnn": 1}
REPO = Path(__file__).resolve().parent.parent


class Built:
    module, built_now, seconds, flags, cache_key, ptxas, library = None, False, 0.0, [], "k", [], None


PASSED = {"passed": True, "rel_err": 0.0, "rule": "test-made"}


class Child:
    """The measuring child's interface (lab.measure.isolated.MeasuringChild), answering at once; every
    request is written down in order in the stand-ins' `log`, as the GPU would see them."""

    def __init__(self, stand_ins):
        self.s = stand_ins

    def check(self, extra_shapes):
        self.s.log.append("check")
        if isinstance(self.s.verdict, Exception):
            raise self.s.verdict
        return dict(self.s.verdict)

    def bench(self, reps, warmup):
        self.s.log.append("bench")
        if self.s.refuse is not None:
            raise self.s.refuse
        return {"timing": bench.summarize([2.0] * 30, 5, True).to_dict(), "device": dict(self.s.device),
                "software": dict(SOFTWARE), "seconds": 0.25}

    def baselines(self, reps, warmup):
        self.s.log.append("baselines")
        self.s.timed.append(self.s.problem.label())
        t = bench.summarize([1.0] * 30, 5, True)
        return [b.to_dict() for b in (Baseline("sdpa-flash", "flash", "float16", "ok", "", t, 1.0, 0),
                                      Baseline("sdpa-flash", "flash", "float32", "unavailable", "no fp32 kernel (test-made)"))]

    def close(self):
        self.s.log.append("close")


class StandIns:
    """The GPU machine's acts for pipeline.profile (pipeline.Machine): the GPU is named, the build is
    cached, the child's check passes, its bench returns fixed times, the baselines count how often they
    are timed."""

    def __init__(self):
        self.timed: list[str] = []        # the problems the baselines were timed on
        self.log: list[str] = []          # the child's requests, and the parent's acts on the GPU (ncu)
        self.problem = None
        self.verdict = PASSED             # what every check says
        self.refuse = None                # an exception the bench raises (the timer's refusal)
        self.device = dict(DEVICE)        # the device the child says it measured on

    def start_measuring(self, variant, problem, mode="fwd"):
        self.problem = problem
        self.log.append("start")
        return Child(self)

    def machine(self, **acts) -> pipeline.Machine:
        chosen = dict(gpu_identity=lambda: {k: DEVICE[k] for k in ("name", "compute_capability", "driver")},
                      require_gpu=lambda *a, **k: None, require_compute_capability=lambda *a, **k: None,
                      torch_versions=lambda: {"torch": SOFTWARE["torch"], "cuda": SOFTWARE["cuda"]},
                      tool_versions=lambda: {}, git_info=lambda: {"commit": None, "dirty": None},
                      cached_build=lambda *a, **k: Built(), build=lambda *a, **k: Built(),
                      start_measuring=self.start_measuring)
        return pipeline.Machine(**{**chosen, **acts})


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """The store in tmp_path (LAB_PROFILES, as a user sets it), and the current folder too, where the
    run's page goes (reports/): nothing is written into the checkout."""
    monkeypatch.setenv("LAB_PROFILES", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    return StandIns()


def _profile(stand_ins, shape="1,2,64,64", machine=None, **opts):
    return pipeline.profile(FIRST, parse_shape(shape), pipeline.ProfileOptions(**{"ncu": False, "report": False, **opts}),
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


def test_the_child_checks_before_and_times_after_the_gpu_is_free(stand_ins, monkeypatch):
    """The measuring child starts first; a fresh check runs before ncu, the timing after it (never beside
    the profiled launch), then the baselines; the child is ended. A kept verdict skips the check, never the
    timing."""
    monkeypatch.setattr(pipeline, "profile_ncu", lambda *a, **k: stand_ins.log.append("ncu") or None)
    monkeypatch.setattr(pipeline.ncu, "require_ncu", lambda: "ncu")
    _profile(stand_ins, ncu=True)
    assert stand_ins.log == ["start", "check", "ncu", "bench", "baselines", "close"]
    stand_ins.log.clear()
    m = store.Run(_profile(stand_ins, ncu=True).run_dir).record
    assert stand_ins.log == ["start", "ncu", "bench", "close"]   # the verdict kept, the baselines cached
    assert "same binary" in m.correctness.reused and m.timing.median == 2.0
    assert m.stage_seconds["bench"] == 0.25   # the child's own time, as it measured it


def test_a_timing_refused_after_ncu_stores_nothing(stand_ins, monkeypatch, tmp_path):
    from lab.measure.timed import TimingRefused

    monkeypatch.setattr(pipeline, "profile_ncu", lambda *a, **k: stand_ins.log.append("ncu") or None)
    monkeypatch.setattr(pipeline.ncu, "require_ncu", lambda: "ncu")
    stand_ins.refuse = TimingRefused("work-outside-stream", "test-made: a side stream")
    with pytest.raises(TimingRefused, match="work-outside-stream"):
        _profile(stand_ins, ncu=True)
    assert stand_ins.log[-1] == "close"
    assert store.list_runs(tmp_path / "store") == []
    assert [p.name for p in (tmp_path / "store").iterdir() if not p.name.startswith(".checks")] == []


def test_the_build_is_compiled_only_where_none_is_cached(stand_ins):
    calls = []
    m = stand_ins.machine(cached_build=lambda v, cc: calls.append(("cached", cc)) or None,
                          build=lambda v, *a, **k: calls.append(("build", *a)) or Built())
    _profile(stand_ins, machine=m)
    assert calls == [("cached", "9.0"), ("build", "sm_90a")]   # the arch of the GPU nvidia-smi named
    calls.clear()
    unnamed = stand_ins.machine(gpu_identity=lambda: None, cached_build=m.cached_build, build=m.build)
    done = store.Run(_profile(stand_ins, machine=unnamed).run_dir).record
    assert calls == [("build",)]                 # no GPU named without CUDA: torch's build finds the arch
    assert done.correctness.reused is None       # and no verdict is kept or reused without a GPU's name


def test_a_kept_verdict_for_another_gpu_is_checked_again(stand_ins):
    """nvidia-smi named one GPU before CUDA started; where the child measured on another, the kept verdict
    does not stand: the rung is checked again before anything is stored."""
    _profile(stand_ins)
    stand_ins.log.clear()
    stand_ins.device = {**DEVICE, "name": "Another GPU (test-made)"}
    m = store.Run(_profile(stand_ins).run_dir).record
    assert stand_ins.log == ["start", "bench", "check", "baselines", "close"]   # checked before anything else runs
    assert m.correctness.reused is None


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
                              "ptxas": [], "library": None})()

    rebuilt = stand_ins.machine(cached_build=lambda *a, **k: built_as("another binary"))
    assert store.Run(_profile(stand_ins, machine=rebuilt).run_dir).record.correctness.reused is None
    stand_ins.verdict = {"passed": False, "rel_err": 1.0, "tolerance": 0.0001, "failed_shape": "B1", "rule": "test-made"}
    with pytest.raises(Exception, match="is wrong"):
        _profile(stand_ins, machine=rebuilt, fresh_check=True)
    third = stand_ins.machine(cached_build=lambda *a, **k: built_as("third"))
    with pytest.raises(Exception, match="is wrong"):
        _profile(stand_ins, machine=third)
    with pytest.raises(Exception, match="is wrong"):   # the failure was not kept as a pass, nor reused
        _profile(stand_ins, machine=third)


# ----------------------------------------------------------------------------- the real measuring child

def _torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(not _torch_installed(), reason="the measuring child imports torch")
def test_the_parent_finds_torch_versions_without_importing_torch():
    """The build and check keys read torch's version and CUDA without importing torch (seconds), and
    give what torch itself says."""
    import subprocess
    import sys

    code = ("import sys, json; import lab.pipeline, lab.cli; from lab.environment import torch_versions; "
            "v = torch_versions(); assert 'torch' not in sys.modules, 'torch was imported'; print(json.dumps(v))")
    import os

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0, quiet.stderr
    loud = subprocess.run([sys.executable, "-c", "import torch, json; print(json.dumps({'torch': str(torch.__version__), "
                           "'cuda': torch.version.cuda}))"], capture_output=True, text=True, env=env)
    assert json.loads(quiet.stdout) == json.loads(loud.stdout)


@pytest.mark.skipif(not _torch_installed(), reason="the measuring child imports torch")
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine: the gpu test below runs the child's work")
def test_the_measuring_child_answers_each_request_and_names_its_crash():
    """The real child (lab.measure.isolated --serve): an error in a request is that request's LabError,
    the child stays for the next; a child that dies is a CheckFailed naming how."""
    import os
    import signal as sig

    from lab.errors import CheckFailed, LabError
    from lab.measure.isolated import MeasuringChild

    child = MeasuringChild(FIRST, parse_shape("1,2,64,64"))
    try:
        for _ in range(2):   # a CPU-only torch: the child says so, every time, and keeps serving
            with pytest.raises(LabError, match="needs an NVIDIA GPU"):
                child.bench(5, 1)
        with pytest.raises(LabError, match="unknown request"):
            child._ask("asked nonsense", do="nonsense")
        os.kill(child.proc.pid, sig.SIGKILL)
        with pytest.raises(CheckFailed, match="crashed in its child process \\(killed by SIGKILL\\) while being checked"):
            child.check(4)
    finally:
        child.close()
    assert child.proc.poll() is not None


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a CUDA GPU (no nvidia-smi here)")
def test_the_measuring_child_checks_and_times_the_first_rung():
    """On a GPU: the child checks the built first rung against float64 and times it through the checked
    timer, with the device it measured on."""
    from lab.ladder import build
    from lab.measure.isolated import MeasuringChild

    build.build(FIRST)
    child = MeasuringChild(FIRST, parse_shape("1,2,128,64"))
    try:
        verdict = child.check(2)
        assert verdict["passed"] is True, verdict
        got = child.bench(10, 2)
        assert got["timing"]["median"] > 0 and got["timing"]["reps"] >= 5
        assert got["device"]["name"] and got["software"]["torch"]
    finally:
        child.close()


# ----------------------------------------------------------------------------- found without CUDA

def _smi(tmp_path, monkeypatch, lines: str) -> None:
    """An nvidia-smi on PATH that prints `lines` as the --query-gpu CSV (the query's field order)."""
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text("#!/bin/sh\ncat <<'EOF'\n" + lines + "\nEOF\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}:{__import__('os').environ['PATH']}")


H100 = "GPU-aaaa, NVIDIA H100 80GB HBM3, 9.0, 580.82.07"
L4 = "GPU-bbbb, NVIDIA L4, 8.9, 580.82.07"


def test_the_gpu_is_named_without_cuda_only_where_cuda_s_device_0_is_certain(tmp_path, monkeypatch):
    from lab.environment import gpu_identity

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _smi(tmp_path, monkeypatch, H100 + "\n" + H100.replace("aaaa", "cccc"))
    assert gpu_identity() == {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "580.82.07"}
    _smi(tmp_path, monkeypatch, H100 + "\n" + L4)
    assert gpu_identity() is None                  # CUDA's order of two kinds is its own
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")
    assert gpu_identity()["name"] == "NVIDIA L4"   # pinned by UUID: that one
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_identity() is None                  # an index in CUDA's order: not told apart
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    _smi(tmp_path, monkeypatch, "Field \"compute_cap\" is not a valid field to query.")
    assert gpu_identity() is None                  # an old driver: the child names the GPU instead


def test_a_rung_too_new_for_the_named_gpu_is_refused_before_any_work(stand_ins):
    from lab.errors import LabError

    too_old = stand_ins.machine(gpu_identity=lambda: {"name": "Old GPU (test-made)", "compute_capability": "5.0",
                                                      "driver": "test"})
    hopper = next(v for v in builtin() if tuple(v.min_cc) >= (9, 0))
    with pytest.raises(LabError, match="needs compute capability 9.0"):
        pipeline.profile(hopper, parse_shape("1,2,64,64", dtype=hopper.dtypes[0]),
                         pipeline.ProfileOptions(ncu=False, report=False), too_old)
    assert stand_ins.log == ["start", "close"]   # the child asked nothing, and ended


def test_the_cached_build_is_found_by_its_key_without_torch(tmp_path, monkeypatch):
    """cached_build reads the build's key and marker (no torch, no CUDA): none before a build; the
    build's library and ptxas facts once both markers are there."""
    from lab.ladder import build

    if shutil.which("nvcc") is None:
        pytest.skip("the build key names nvcc's release")
    monkeypatch.setenv("LAB_CACHE", str(tmp_path / "cache"))
    assert build.cached_build(FIRST, "9.0") is None
    flags, key = build._key_for(FIRST, "sm_90a")
    bdir = build.build_dir_for(FIRST, key)
    bdir.mkdir(parents=True)
    (bdir / "lab_v1.so").write_bytes(b"\x7fELF test-made")
    (bdir / build._BUILD_MARKER).write_text(json.dumps({"cache_key": key, "library": "lab_v1.so", "module_name": "m"}))
    assert build.cached_build(FIRST, "9.0") is None   # no ptxas facts yet: not complete
    (bdir / build._PTXAS_MARKER).write_text(json.dumps({"records": [], "sass": None}))
    found = build.cached_build(FIRST, "9.0")
    assert found.module is None and found.library == bdir / "lab_v1.so" and found.cache_key == key
    assert found.arch == "sm_90a" and not found.built_now
    assert build.cached_build(FIRST, "8.0") is None   # another arch, another key


# ----------------------------------------------------------------------------- the page, read ahead

def test_a_stored_table_is_read_once_per_version_of_its_file(tmp_path):
    import os
    import shutil

    import pandas as pd

    src = next(p for p in sorted((REPO / "profiles" / "examples").iterdir()) if "-v3-" in p.name)
    run = store.Run(shutil.copytree(src, tmp_path / src.name))
    first = run.table("findings")
    first.loc[:, "class"] = "changed by a caller"
    again = run.table("findings")
    assert (again["class"] != "changed by a caller").all()   # each reader gets its own copy
    path = run.path / run.manifest["tables"]["findings"]
    stat = path.stat()
    pd.DataFrame({"class": ["bank-conflicts"], "title": ["t"]}).to_parquet(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert list(run.table("findings")["class"]) == ["bank-conflicts"]   # a new version of the file: read again


def test_the_page_read_ahead_is_the_page_rendered_cold(tmp_path, monkeypatch):
    """lab.report.pages.warm (while ncu runs) changes nothing on the page: the same HTML as a render
    with nothing read ahead."""
    import shutil

    from lab.ladder import registry
    from lab.report import pages, sourceview
    from lab.store import runs

    src = next(p for p in sorted((REPO / "profiles" / "examples").iterdir()) if "-v3-" in p.name)
    root = tmp_path / "store"
    older = shutil.copytree(src, root / src.name)
    monkeypatch.setenv("LAB_PROFILES", str(root))
    monkeypatch.chdir(tmp_path)
    v3 = registry.get(store.Run(older).manifest["variant"]["id"])
    runs._READ.clear()
    sourceview._highlighted.cache_clear()
    pages.warm(root, v3.id, (v3.source,))
    assert sourceview._highlighted.cache_info().currsize >= 1 and runs._READ
    page = pages.render_run_page(older).read_text()
    runs._READ.clear()
    sourceview._highlighted.cache_clear()
    assert pages.render_run_page(older).read_text() == page


def test_the_measuring_childs_answers(monkeypatch):
    """lab.measure.isolated.serve, the child's loop, on stand-ins for the GPU's acts: a python rung is
    loaded, never looked up as a compiled build; a cuda rung without a build says so; the timer's
    refusal, a failed check and bad input each come back as what they are; the child keeps serving."""
    from types import SimpleNamespace

    from lab import environment
    from lab.errors import CheckFailed, LabError
    from lab.ladder import build
    from lab.measure import checked, isolated
    from lab.measure.timed import TimingRefused

    def no_lookup(*a, **k):
        raise AssertionError("a python rung has no compiled build to look up")

    for name, fn in {"require_gpu": lambda *a, **k: None, "require_compute_capability": lambda *a, **k: None,
                     "device_info": lambda *a: dict(DEVICE), "software_info": lambda *a: dict(SOFTWARE)}.items():
        monkeypatch.setattr(environment, name, fn)
    monkeypatch.setattr(build, "is_built", no_lookup)
    monkeypatch.setattr(build, "load_cached", lambda v: "the module")
    outcomes = iter([bench.summarize([2.0] * 30, 5, True), TimingRefused("impossible", "test-made: below the floor"),
                     CheckFailed("test-made: wrong"), LabError("test-made: bad", hint="a hint")])

    def time_rung(variant, module, *a, **k):
        assert module == "the module"
        got = next(outcomes)
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(checked, "time_rung", time_rung)
    replies: list = []
    rung = SimpleNamespace(kind="python", id="py")
    lines = [json.dumps({"do": "bench", "reps": 30, "warmup": 5})] * 4 + [json.dumps({"do": "nonsense"})]
    assert isolated.serve(rung, parse_shape("1,2,64,64"), "fwd", lines, replies.append) == 0
    ok, refused, failed, bad, unknown = replies
    assert ok["timing"]["median"] == 2.0 and ok["device"] == DEVICE and ok["software"] == SOFTWARE
    assert refused["refused"] == {"status": "impossible", "reason": "test-made: below the floor", "what": None}
    assert failed == {"check_failed": "test-made: wrong"}
    assert bad == {"error": "test-made: bad", "hint": "a hint"}
    assert "unknown request" in unknown["error"]
    replies.clear()
    monkeypatch.setattr(build, "is_built", lambda v: False)
    isolated.serve(SimpleNamespace(kind="cuda", id="cu"), parse_shape("1,2,64,64"), "fwd",
                   [json.dumps({"do": "check", "shapes": 2})], replies.append)
    assert replies == [{"error": "cu has no cached build here", "not_built": True}]


def _ncu_writes_planted_basic(monkeypatch) -> bytes:
    """ncu's stand-in writes a real report (tests/fixtures/ncu/planted-basic, recorded on a GPU) where ncu
    would, and its log; returns the report's bytes."""
    real = lzma.decompress((REPO / "tests" / "fixtures" / "ncu" / "planted-basic.ncu-rep.xz").read_bytes())

    def ncu_writes(cmd, log_path, env=None, timeout_s=None):
        report = Path(cmd[cmd.index("-o") + 1])
        report.write_bytes(real)
        Path(log_path).write_text("ncu's log (test-made)\n")
        return report

    monkeypatch.setattr(pipeline.ncu, "run_ncu", ncu_writes)
    monkeypatch.setattr(pipeline.ncu, "require_ncu", lambda: "ncu")
    return real


def test_a_profiled_run_keeps_its_ncu_report_xz_compressed(stand_ins, monkeypatch):
    """The report ncu writes (here a real one, recorded on a GPU: tests/fixtures/ncu/planted-basic, which the
    stand-in for ncu writes where ncu would) is analyzed as written, then stored xz-compressed: the manifest's
    artifact and its profile section name profile.ncu-rep.xz, the plain file is gone, and the .xz unpacks to
    the report byte for byte; the command stored is ncu's own, as a user reruns it."""
    real = _ncu_writes_planted_basic(monkeypatch)
    done = _profile(stand_ins, ncu=True)
    run = store.Run(done.run_dir)
    assert run.manifest["artifacts"]["ncu_report"] == "profile.ncu-rep.xz" == run.manifest["profile"]["report"]
    assert not (done.run_dir / "profile.ncu-rep").exists()
    assert lzma.decompress(run.artifact("ncu_report").read_bytes()) == real
    command = run.manifest["profile"]["command"]
    assert command[command.index("-o") + 1] == "profile.ncu-rep"
    assert len(run.table("metrics")) == len(analysis.analyze_report(run.artifact("ncu_report"), with_lines=False))
    assert run.table("findings") is not None and "compress" in run.record.stage_seconds


def test_an_analysis_that_dies_stores_no_run_and_keeps_ncu_s_report(stand_ins, monkeypatch, tmp_path):
    """The analysis runs in a child (lab.analysis.isolated); where that child dies (an ncu_report that
    segfaults reading the report: the GPU machine, 2026-11-27), no run is stored, and ncu's report, minutes
    of replay, is kept beside the store's runs with the command that reads it once ncu_report works."""
    from lab.analysis.isolated import ChildDied
    from lab.errors import LabError

    def died(*a, what, **k):
        raise ChildDied(f"{what}: its child process died reading the report with ncu_report (test-made)", hint="fix it")

    real = _ncu_writes_planted_basic(monkeypatch)
    monkeypatch.setattr(pipeline, "in_child", died)
    with pytest.raises(LabError) as e:
        _profile(stand_ins, ncu=True)
    store_dir = tmp_path / "store"
    kept = [p for p in store_dir.iterdir() if p.name.endswith(".ncu-rep")]
    assert len(kept) == 1 and kept[0].read_bytes() == real
    assert f"ncu's report is kept at {kept[0]}" in str(e.value) and f"lab analyze {kept[0]}" in e.value.hint
    assert store.list_runs(store_dir) == [] and not [p for p in store_dir.iterdir() if p.name.endswith(".partial")]
    assert stand_ins.log[-1] == "close"

"""`lab tune`: the tuning contract of kernels/common.cuh, and the command on a GPU.

CPU (needs nvcc, skipped without it): every rung whose file has a tuning block compiles with
-DLAB_TUNING and exports the two symbols the tuning binding links against.
CPU: the candidates' float64 checks in one child (lab.measure.gate.verdicts), and what happens when
that child crashes, loses its CUDA context or hangs: the child is a stand-in executable speaking the
correctness child's protocol (no GPU on CI); the child's own loop runs in this process with its
check stubbed.
GPU (`-m gpu`): `lab tune` checks and times every candidate of each tunable rung on a ragged shape.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import statistics
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import platformdirs
import pytest

from lab.errors import LabError
from lab.ladder import build, registry
from lab.measure import gate, isolated
from lab.measure.problem import parse_shape
from conftest import lab_here  # noqa: E402

TUNABLE = [v for v in registry.variants()
           if getattr(v, "kind", "cuda") == "cuda" and "LAB_TUNING" in v.source.read_text()]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) on PATH")


def test_a_candidate_is_checked_on_its_own_head_dim_and_dtype():
    """A candidate is one configuration compiled for one head_dim: checking it on the seeded shapes
    of another head_dim would launch another list's index (measured: v5's D=64 candidate 4 'failed'
    on a D=128 shape, where only four candidates exist)."""
    from lab.measure.check import gate_shapes
    from lab.measure.problem import Problem

    variant = next(v for v in TUNABLE if len(v.head_dims) > 1)
    problem = Problem(1, 2, 130, 130, variant.head_dims[-1], True, variant.dtypes[-1])
    pinned = gate_shapes(variant, problem, 12, pin_to_problem=True)
    assert pinned[0] == problem and len(pinned) == 13
    assert {(p.head_dim, p.dtype) for p in pinned} == {(problem.head_dim, problem.dtype)}
    assert len({p.seqlen_q for p in pinned}) > 3       # still ragged
    unpinned = gate_shapes(variant, problem, 12)
    assert len({p.head_dim for p in unpinned}) > 1     # the rung's own check spans its head dims


def test_some_rung_is_tunable():
    assert TUNABLE, "no rung declares tuning candidates: `lab tune` would have nothing to do"


@pytest.fixture
def tests_cache(monkeypatch):
    """The tests' own build cache (test_build's: ~/.cache/flash-lab/tests), kept across sessions: a
    compile is reused only under the same build key (sources, headers, flags, tool versions)."""
    root = Path(platformdirs.user_cache_dir("flash-lab", appauthor=False)) / "tests"
    root.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("LAB_CACHE", str(root))
    return root


@needs_nvcc
@pytest.mark.parametrize("variant", TUNABLE, ids=lambda v: v.id)
def test_the_tuning_build_exports_the_contract(variant, tests_cache):
    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils) to list the object's symbols")
    report = build.ptxas_report(variant, "sm_90a", tuning=True)
    assert build.TUNING_DEFINE in report.flags
    obj = next(report.build_dir.glob("*.o"))
    symbols = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    for name in (f"{variant.launcher}_configs", f"{variant.launcher}_config", variant.launcher):
        assert f" T {name}\n" in symbols, f"{variant.source.name} does not export {name} under -DLAB_TUNING"
    plain_flags, plain_key = build._key_for(variant, "sm_90a")
    assert build.TUNING_DEFINE not in plain_flags and plain_key != report.cache_key  # its own cached build


LIGHTEST = min(TUNABLE, key=lambda v: v.source.stat().st_size) if TUNABLE else None


@needs_nvcc
def test_lab_build_tuning_builds_the_tuning_extension_beside_the_plain_one(tests_cache):
    """`lab build --tuning`: a tunable rung's tuning build is one more build of the same command (its
    own cache key, its candidates' kernels), so `lab tune` finds it ready."""
    res = lab_here("build", "--ptxas-only", "--tuning", "--variant", LIGHTEST.id, "--json",
                   env={"LAB_CACHE": str(tests_cache)})
    assert res.returncode == 0, res.stderr
    plain, tuned = json.loads(res.stdout)
    assert (plain["variant"], plain["tuning"], tuned["variant"], tuned["tuning"]) == (LIGHTEST.id, False, LIGHTEST.id, True)
    assert build.TUNING_DEFINE in tuned["flags"] and build.TUNING_DEFINE not in plain["flags"]
    assert tuned["cache_key"] != plain["cache_key"] and len(tuned["ptxas"]) > len(plain["ptxas"])
    res = lab_here("build", "--ptxas-only", "--tuning", "--variant", LIGHTEST.id, env={"LAB_CACHE": str(tests_cache)})
    assert res.returncode == 0 and f"{LIGHTEST.id} tuning" in res.stdout, res.stdout


def test_lab_build_tuning_refuses_rungs_without_candidates():
    plain = next((v for v in registry.variants() if v not in TUNABLE), None)
    if plain is None:
        pytest.skip("every rung declares tuning candidates")
    res = lab_here("build", "--ptxas-only", "--tuning", "--variant", plain.id)
    assert res.returncode == 2 and "declare(s) no tuning candidates" in res.stderr, res.stderr


def test_a_build_compiles_its_ptxas_step_beside_the_extension(tmp_path, monkeypatch):
    """The ptxas step and the extension's compile are two nvcc runs of one .cu: a cold build runs them
    at once (each stand-in waits for the other to have started: one after the other, the first would
    wait in vain); a tuning build reports its own kernels; where both fail, nvcc's own error from the
    ptxas step is the one raised."""
    monkeypatch.setenv("LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "require_cuda_torch", lambda *a: None)
    monkeypatch.setattr(build, "versions", lambda: {"torch": "stand-in", "nvcc": "stand-in"})
    monkeypatch.setattr(build, "_loaded", {})
    started, compiling = threading.Event(), threading.Event()

    def ptxas_report(variant, arch, tuning=False):
        started.set()
        assert compiling.wait(30), "the extension's compile had not started while the ptxas step ran"
        if fail:
            raise LabError("nvcc failed to compile: error: expected a ';'")
        return SimpleNamespace(records=[build.PtxasRecord(f"kernel{i}", 32, 0, 0, 0, 0, arch) for i in range(2 + 8 * tuning)],
                               sass_path=None)

    def load(name, build_directory, **kw):
        compiling.set()
        assert started.wait(30), "the ptxas step had not started while the extension compiled"
        time.sleep(0.05)
        if fail:
            raise RuntimeError("Error building extension")
        so = Path(build_directory) / f"{name}.so"
        so.write_text("stand-in")
        return SimpleNamespace(__name__=name, __file__=str(so))

    monkeypatch.setattr(build, "ptxas_report", ptxas_report)
    monkeypatch.setattr("torch.utils.cpp_extension.load", load)
    fail = False
    result = build.build(LIGHTEST, "sm_90a", tuning=True)
    assert result.built_now and len(result.ptxas) == 10    # the tuning build's kernels, not the plain build's
    assert build.build(LIGHTEST, "sm_90a", tuning=True).ptxas == result.ptxas   # and so when it comes from the cache
    fail, started, compiling = True, threading.Event(), threading.Event()
    with pytest.raises(LabError, match="expected a ';'"):
        build.build(LIGHTEST, "sm_90a")


# ------------------------------------------------------------------ the candidates' checks, one child

PASSED = {"passed": True, "rel_err": 1e-7}
WRONG = {"passed": False, "rel_err": 0.5, "failed_shape": "B1-H1-N17-D64-float32"}


def _line(config, **what) -> str:
    return json.dumps({"config": config, **what})


def _fake_child(tmp_path, monkeypatch, batch: str, alone: dict[str, str]):
    """A stand-in for `python -m lab.measure.isolated`: `batch` is the shell that answers --configs,
    `alone[N]` the one that answers --tune-config N (a candidate's own child). Every start is logged."""
    log = tmp_path / "starts"
    cases = "".join(f'    {n}) {body} ;;\n' for n, body in alone.items())
    exe = tmp_path / "fake-python"
    exe.write_text(f"""#!/bin/sh
echo "$@" >> {log}
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) {batch}; exit 0 ;;
    --tune-config) shift; case "$1" in
{cases}    esac; exit 0 ;;
  esac
  shift
done
echo "unexpected child: no --configs, no --tune-config" >&2; exit 3
""")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(isolated.sys, "executable", str(exe))
    return log


def _starts(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


RUNG = TUNABLE[0] if TUNABLE else registry.builtin()[0]
PROBLEM = parse_shape("1,2,130,64", causal=True)


def test_all_candidates_pass_in_one_child(tmp_path, monkeypatch):
    """Default and candidates: one child, the verdicts in their order, each passed on as it came."""
    lines = "; ".join(f"echo '{_line(c, verdict=PASSED)}'" for c in ("default", "0", "1", "2"))
    log = _fake_child(tmp_path, monkeypatch, lines, {})
    seen = []
    found = gate.verdicts(RUNG, PROBLEM, "fwd", [None, 0, 1, 2], 1, on_verdict=lambda c, v: seen.append(c))
    assert found == {None: PASSED, 0: PASSED, 1: PASSED, 2: PASSED} and list(found) == [None, 0, 1, 2]
    assert seen == [None, 0, 1, 2]
    [start] = _starts(log)   # one child for all four
    argv = start.split()
    assert argv[argv.index("--configs") + 1] == "default,0,1,2"
    assert argv[argv.index("--problem") + 1] == PROBLEM.label() and argv[argv.index("--shapes") + 1] == "1"


def test_a_crash_in_the_batch_checks_the_rest_each_alone(tmp_path, monkeypatch, capsys):
    """Candidate 1 segfaults the batch child after the default and candidate 0 passed (1 WRONG in
    between would be kept): 1 and 2 are checked again each in a child of its own; 1 is named as the
    crash, 2 keeps its pass, and the verdicts that came from the batch are not checked again."""
    batch = (f"echo '{_line('default', verdict=PASSED)}'; echo 'a kernel printf line'; "
             f"echo '{_line('0', verdict=WRONG)}'; echo 'CUDA error: an illegal memory access' >&2; kill -SEGV $$")
    log = _fake_child(tmp_path, monkeypatch, batch, {
        "1": "echo 'CUDA error: an illegal memory access' >&2; kill -SEGV $$",
        "2": f"echo '{json.dumps(PASSED)}'"})
    found = gate.verdicts(RUNG, PROBLEM, "fwd", [None, 0, 1, 2], 1)
    assert found[None] == PASSED and found[0] == WRONG and found[2] == PASSED
    assert found[1]["passed"] is False and "crashed in its child process (killed by SIGSEGV)" in found[1]["error"]
    starts = _starts(log)
    assert len(starts) == 3 and "--configs" in starts[0]
    assert [s.split()[s.split().index("--tune-config") + 1] for s in starts[1:]] == ["1", "2"]
    err = capsys.readouterr().err
    assert "killed by SIGSEGV" in err and "illegal memory access" in err and "2 configuration(s)" in err


def test_a_lost_cuda_context_ends_the_batch_without_that_verdict(tmp_path, monkeypatch):
    """The child says the context broke after candidate 0 (a sticky error): 0's verdict is not taken
    from a broken process; 0 and 1 are checked each alone."""
    batch = (f"echo '{_line('default', verdict=PASSED)}'; "
             f"echo '{_line('0', ended='CUDA error: an illegal memory access was encountered')}'")
    log = _fake_child(tmp_path, monkeypatch, batch, {"0": f"echo '{json.dumps(WRONG)}'",
                                                     "1": f"echo '{json.dumps(PASSED)}'"})
    found = gate.verdicts(RUNG, PROBLEM, "fwd", [None, 0, 1], 1)
    assert found == {None: PASSED, 0: WRONG, 1: PASSED}
    assert len(_starts(log)) == 3


def test_a_hang_in_the_batch_is_timed_per_candidate(tmp_path, monkeypatch):
    """Each configuration has the check's whole timeout, as in a child of its own: the batch that
    hangs on candidate 0 is ended; 0 alone hangs again and is named, 1 passes."""
    monkeypatch.setattr(isolated, "CHECK_TIMEOUT_S", 2)
    log = _fake_child(tmp_path, monkeypatch, f"echo '{_line('default', verdict=PASSED)}'; sleep 300",
                      {"0": "sleep 300", "1": f"echo '{json.dumps(PASSED)}'"})
    found = gate.verdicts(RUNG, PROBLEM, "fwd", [None, 0, 1], 1)
    assert found[None] == PASSED and found[1] == PASSED
    assert found[0]["passed"] is False and "did not finish in 2 s" in found[0]["error"]
    assert len(_starts(log)) == 3


def test_bad_input_in_the_batch_is_bad_input(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, f"echo '{_line('default', error='mine supports head dims 32, 64')}'", {})
    with pytest.raises(LabError, match="head dims"):
        gate.verdicts(RUNG, PROBLEM, "fwd", [None, 0], 1)


def test_the_real_batch_child_speaks_the_protocol():
    """`python -m lab.measure.isolated --configs ...` itself (no stand-in): without a GPU its first
    configuration's check refuses, and the parent raises that refusal as bad input, not a crash."""
    if _has_gpu():
        pytest.skip("checks the no-GPU refusal; this machine has a GPU")
    with pytest.raises(LabError, match="GPU"):
        gate.verdicts(RUNG, PROBLEM, "fwd", [None, 0], 1)


class StandInTuning:
    """A tuning build's lists, as the binding returns them (a mask mark where a candidate declares one)."""

    def __init__(self, entries):
        self.entries = list(entries)

    def configs(self, head_dim, dtype):
        return self.entries

    backward_configs = configs

    def source_declared(self, variant, head_dim, dtype, mode="fwd"):
        """What the rung's file was read to declare before the build (lab.ladder.tuning.source_declared):
        the same list, as a rung's source and its build agree."""
        from lab.ladder.tuning import parse_entry

        return [parse_entry(e) for e in self.entries]


def test_the_batch_child_checks_each_configuration_as_its_own_child_would(monkeypatch, capsys):
    """The child's loop, in this process: the default through the plain build (module None, shapes
    across head dims and masks), each candidate through the tuning build pinned to the problem's
    head_dim and dtype, its seeded shapes of the mask it is declared for; it stops, without that
    verdict, after the configuration that broke the CUDA context."""
    calls = []

    class Result:
        def __init__(self, n):
            self.n = n

        def to_dict(self):
            return {"passed": True, "n": self.n}

    def check_variant(variant, problem, extra_shapes, module, pin_to_problem, mode, causal):
        calls.append((module if module is None else (module.module, module.index, module.mode), pin_to_problem,
                      extra_shapes, problem, mode, causal))
        return Result(len(calls))

    tuning = StandInTuning(["a", "b|non-causal", "c|causal"])
    monkeypatch.setattr(isolated, "check_variant", check_variant)
    monkeypatch.setattr(isolated, "tuning_module", lambda v: tuning)
    lost = iter([None, None, "CUDA error: an illegal memory access was encountered"])
    monkeypatch.setattr(isolated, "_context_lost", lambda: next(lost))
    isolated._check_configs(RUNG, PROBLEM, 3, "bwd", [None, 0, 1, 2])
    assert calls == [(None, False, 3, PROBLEM, "bwd", None), ((tuning, 0, "bwd"), True, 3, PROBLEM, "bwd", None),
                     ((tuning, 1, "bwd"), True, 3, PROBLEM, "bwd", False)]   # candidate 2 never ran here
    out = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert out == [{"config": "default", "verdict": {"passed": True, "n": 1}},
                   {"config": "0", "verdict": {"passed": True, "n": 2}},
                   {"config": "1", "ended": "CUDA error: an illegal memory access was encountered"}]


# ------------------------------------------------------------------ a candidate declared for one mask

def test_a_candidates_entry_declares_the_mask_it_serves():
    from lab.ladder.tuning import Declared, parse_entry

    assert parse_entry("C2 BN128 S2 pp") == Declared("C2 BN128 S2 pp", None)
    assert parse_entry("C3 BN128 S2 (non-causal)|non-causal") == Declared("C3 BN128 S2 (non-causal)", False)
    assert parse_entry("BM64 causal-only|causal") == Declared("BM64 causal-only", True)
    causal, plain = parse_shape("1,2,130,64", causal=True), parse_shape("1,2,130,64")
    assert parse_entry("x|non-causal").refusal(causal) == "declared for non-causal problems only"
    assert parse_entry("x|non-causal").refusal(plain) is None and parse_entry("x").refusal(causal) is None
    for bad in ("x|noncausal", "x|", "|causal"):
        with pytest.raises(LabError, match="declares it serves") as e:
            parse_entry(bad, "mine")
        assert e.value.exit_code == 2


def test_common_cuh_writes_each_candidates_mask_into_its_list(tmp_path_factory):
    """The table's `serves` field, through lab_tune_labels, reads back as each candidate's mask."""
    from conftest import host_program
    from lab.ladder.tuning import Declared, parse_entry

    exe = host_program(tmp_path_factory, """
#define LAB_TUNING
#include <cstdio>
#include "common.cuh"
static const char* run(const LabAttentionArgs*, cudaStream_t) { return nullptr; }
static const LabTuneCandidate kTable[] = {
    {"both", run}, {"C3 (non-causal)", run, LAB_SERVES_NON_CAUSAL}, {"causal one", run, LAB_SERVES_CAUSAL}};
int main() { std::printf("%s", lab_tune_labels(lab_tune_list(kTable))); }
""", "common.cuh's lab_tune_labels is run by a host program")
    entries = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split(";")
    assert [parse_entry(e) for e in entries] == [Declared("both"), Declared("C3 (non-causal)", False),
                                                 Declared("causal one", True)]


@pytest.fixture
def stand_in_tune(monkeypatch):
    """lab.measure.tune.tune with what needs a GPU replaced: a tuning build whose list declares a
    non-causal-only candidate, checks that pass except candidate 2's (a wrong output), and a timer;
    records which configurations were checked and which timed."""
    from lab.measure import tune
    from lab.measure.bench import Timing

    seen = {"checked": None, "timed": None}

    def verdicts(variant, problem, mode, configs, extra_shapes, on_verdict=None):
        seen["checked"] = list(configs)
        wrong = {"passed": False, "failed_shape": problem.label(),
                 "failure": f"O on {problem.label()}: max_abs_err 0.5 > tolerance 0.002"}
        return {c: (wrong if c == 2 else {"passed": True}) for c in configs}

    def interleaved(passing, reps, warmup, under_load_ms=0.0, method="events"):
        seen["timed"], seen["method"] = list(passing), method
        return {label: Timing("ms", 1.0, 1.0, 0.01, 0.99, 1.01, 0.99, 1.01, reps, warmup, True) for label in passing}

    tuning = StandInTuning(["C1", "C3 (non-causal)|non-causal", "C2 wrong"])
    for name in ("require_gpu", "require_compute_capability", "require_tunable", "require_mode", "check_supported"):
        monkeypatch.setattr(tune, name, lambda *a, **k: None)
    monkeypatch.setattr(tune, "is_built", lambda *a, **k: True)
    monkeypatch.setattr(tune, "build", lambda v: SimpleNamespace(module=object(), ptxas=[]))
    monkeypatch.setattr(tune, "tuning_build", lambda v: SimpleNamespace(module=tuning, ptxas=[]))
    monkeypatch.setattr(tune, "source_declared", tuning.source_declared)
    monkeypatch.setattr(tune, "verdicts", verdicts)
    monkeypatch.setattr(tune, "attention_floor", lambda *a, **k: None)
    monkeypatch.setattr(tune, "Workload", lambda *a, **k: None)
    monkeypatch.setattr(tune, "rung", lambda *a: None)
    monkeypatch.setattr(tune, "Measurement", lambda *a, **k: SimpleNamespace(checked=lambda: None))
    monkeypatch.setattr(tune, "time_checked_interleaved", interleaved)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "stand-in")
    monkeypatch.setattr(tune, "device_info", lambda: {"name": "stand-in"})
    monkeypatch.setattr(tune, "software_info", lambda: {})
    return seen


def test_a_candidate_that_does_not_serve_the_problem_is_not_applicable_never_wrong(stand_in_tune):
    """On a causal problem the non-causal-only candidate is shown not applicable with its declaration's
    reason: not checked, not timed, not failed; the wrong candidate still fails; the others are timed."""
    from lab.measure.tune import tune

    pytest.importorskip("torch")
    problem = parse_shape("1,2,130,64", causal=True, dtype=RUNG.default_dtype)
    result = tune(RUNG, problem, reps=3, warmup=1, check_shapes=1)
    rows = {r.label: r for r in result.rows}
    assert stand_in_tune["checked"] == [None, 0, 2] and stand_in_tune["timed"] == ["default", "C1"]
    na = rows["C3 (non-causal)"]
    assert na.not_applicable == "declared for non-causal problems only"
    assert na.correctness == {} and na.timing is None and na.error is None and na.refused is None
    assert na.to_dict()["not_applicable"] == na.not_applicable
    assert not rows["C2 wrong"].passed and rows["C2 wrong"].error.startswith(f"O on {problem.label()}: max_abs_err")
    assert rows["C2 wrong"].not_applicable is None and rows["C1"].timing and rows["default"].timing

    result = tune(RUNG, parse_shape("1,2,130,64", dtype=RUNG.default_dtype), reps=3, warmup=1, check_shapes=1)
    assert stand_in_tune["checked"] == [None, 0, 1, 2] and "C3 (non-causal)" in stand_in_tune["timed"]
    assert not any(r.not_applicable for r in result.rows)


@pytest.fixture
def against_tune(stand_in_tune, monkeypatch):
    """stand_in_tune with `--against`: the baseline's spec a stand-in (or a backend that refuses the shape), and a
    timer whose rounds put the baseline 2% behind the default, round by round, and ahead of every configuration."""
    from lab.measure import tune
    from lab.measure.bench import Timing

    entered = []

    def against_spec(backend, problem, mode, workload, layout, floor):
        if backend == "math":
            return f"sdpa-{backend}", None, None, "No available kernel (stand-in refusal)"
        return f"sdpa-{backend}", "baseline spec", lambda: _Pinned(entered), None

    def interleaved(passing, reps, warmup, under_load_ms=0.0, method="events"):
        stand_in_tune["timed"], stand_in_tune["pinned"] = list(passing), list(entered)
        rounds = {"default": [1.0 + 0.001 * i for i in range(reps)]}
        rounds["C1"] = [t * 1.01 for t in rounds["default"]]
        rounds["C3 (non-causal)"] = rounds["C1"]
        rounds["sdpa-cudnn"] = [t * 1.02 for t in rounds["default"]]
        out = {}
        for label in passing:
            xs = sorted(rounds[label])
            med = statistics.median(xs)
            out[label] = Timing("ms", med, med, 0.01, xs[0], xs[-1], xs[0], xs[-1], reps, warmup, True,
                                samples=list(rounds[label]))
        return out

    monkeypatch.setattr(tune, "against_spec", against_spec)
    monkeypatch.setattr(tune, "time_checked_interleaved", interleaved)
    return stand_in_tune


class _Pinned:
    """A backend pin's stand-in: records that it was entered around the timing."""

    def __init__(self, entered):
        self.entered = entered

    def __enter__(self):
        self.entered.append("pinned")

    def __exit__(self, *exc):
        return False


def test_tune_against_times_the_baseline_in_the_same_rounds_as_a_reference(against_tune):
    """`--against cudnn`: SDPA's cuDNN is timed in the configurations' rounds with its backend pinned around the
    whole timing; its row is the reference (not checked, never the fastest configuration), and the default's ratio
    against it is paired round by round (the baseline 2% slower in every round: 1.020x, CI95 on it)."""
    from lab.measure.tune import tune

    problem = parse_shape("1,2,130,64", dtype=RUNG.default_dtype)
    result = tune(RUNG, problem, reps=12, warmup=1, check_shapes=1, against="cudnn")
    assert against_tune["timed"][-1] == "sdpa-cudnn" and against_tune["pinned"] == ["pinned"]
    base = result.against()
    assert base.baseline and base.passed and base.correctness["reference"] and base.error is None
    assert result.fastest().label == "default"
    vs = result.default_against()
    assert vs["rounds"] == 12 and vs["paired_median"] == pytest.approx(1.02)
    assert vs["paired_ci95_low"] == pytest.approx(1.02) and vs["paired_ci95_high"] == pytest.approx(1.02)
    stored = result.to_dict()
    assert stored["against"] == "sdpa-cudnn" and stored["default_against"]["paired_median"] == pytest.approx(1.02)
    assert [r["baseline"] for r in stored["rows"]].count(True) == 1


def test_tune_against_a_backend_that_refuses_the_shape_says_why_and_times_the_rest(against_tune):
    from lab.measure.tune import tune

    result = tune(RUNG, parse_shape("1,2,130,64", dtype=RUNG.default_dtype), reps=4, warmup=1, check_shapes=1,
                  against="math")
    base = result.against()
    assert base.timing is None and base.error == "unavailable: No available kernel (stand-in refusal)"
    assert "sdpa-math" not in against_tune["timed"] and result.default_against() is None
    assert result.fastest() is not None


def test_lab_tune_against_prints_the_default_against_the_baseline(against_tune, tmp_path):
    res = lab_here("tune", "--variant", RUNG.id, "--shape", "1,2,130,64", "--dtype", RUNG.default_dtype,
                   "--reps", "12", "--check-shapes", "1", "--against", "cudnn", "--profiles", tmp_path,
                   env={"COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    row = next(ln for ln in res.stdout.splitlines() if "sdpa-cudnn" in ln and "ref" in ln)
    assert "reference (not checked)" in row and "FAIL" not in row
    assert "the default against sdpa-cudnn: 1.020x its speed (median of 12 paired rounds, CI95 1.020-1.020): ahead" \
        in res.stdout
    # by events (the default timing) the line says what call latency holds beside the kernels: both dispatches
    assert "by events, call latency: each side's host dispatch is in it" in " ".join(res.stdout.split())
    assert "fastest: default" in res.stdout
    bad = lab_here("tune", "--variant", RUNG.id, "--against", "cudann", "--profiles", tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_the_against_line_says_what_an_events_ratio_holds_and_a_graph_ratio_does_not():
    from lab.cli import EVENTS_AGAINST_CAVEAT, _against_line

    vs = {"ratio": 1.1, "paired_median": 1.14, "paired_ci95_low": 1.13, "paired_ci95_high": 1.15, "rounds": 100}
    events, graph = _against_line("sdpa-cudnn", vs, "events"), _against_line("sdpa-cudnn", vs, "graph")
    assert events.startswith(graph) and EVENTS_AGAINST_CAVEAT in events and EVENTS_AGAINST_CAVEAT not in graph
    assert graph.endswith("1.140x its speed (median of 100 paired rounds, CI95 1.130-1.150): ahead")


def test_lab_tune_prints_not_applicable_with_the_reason(stand_in_tune, tmp_path):
    res = lab_here("tune", "--variant", RUNG.id, "--shape", "1,2,130,64", "--causal", "--dtype", RUNG.default_dtype,
                   "--reps", "3", "--check-shapes", "1", "--profiles", tmp_path, env={"COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "C3 (non-causal)" in ln)
    assert "not applicable (declared for non-causal problems only)" in line and "FAIL" not in line
    assert "FAIL" in next(ln for ln in res.stdout.splitlines() if "C2 wrong" in ln)
    assert "1 not applicable to this problem" in res.stderr


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _backward_tunable(variant) -> bool:
    return bool(variant.backward_launcher) and f"{variant.backward_launcher}_configs" in variant.source.read_text()


def _declares_a_mask(variant) -> bool:
    """Whether the rung's tuning table declares a candidate for one mask only (common.cuh's LabServes)."""
    return "LAB_SERVES_CAUSAL" in variant.source.read_text() or "LAB_SERVES_NON_CAUSAL" in variant.source.read_text()


# every tunable rung's forward candidates, and its backward's where it declares them, on a causal shape;
# a rung with a candidate declared for one mask also on a non-causal shape, where that candidate is timed
TUNE_CASES = ([pytest.param(v, "fwd", True, id=f"{v.id}-fwd") for v in TUNABLE]
              + [pytest.param(v, "bwd", True, id=f"{v.id}-bwd") for v in TUNABLE if _backward_tunable(v)]
              + [pytest.param(v, "fwd", False, id=f"{v.id}-fwd-non-causal") for v in TUNABLE if _declares_a_mask(v)])


def _cache_env() -> dict:
    return {"LAB_CACHE": os.environ.get("LAB_CACHE")}   # the caller's build cache, as a child of this run would see it


@pytest.fixture(scope="module")
def tuning_builds():
    """Every tunable rung's plain and tuning builds, compiled side by side by one `lab build --tuning`
    (one nvcc per CPU) before the first `lab tune`, instead of each tune compiling its two in turn."""
    res = lab_here("build", "--tuning", "--variant", ",".join(v.id for v in TUNABLE), "--json", env=_cache_env())
    assert res.returncode == 0, res.stderr[-3000:]
    return {(r["variant"], r["tuning"]) for r in json.loads(res.stdout)}


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("variant, mode, causal", TUNE_CASES)
def test_lab_tune_checks_and_times_every_candidate(variant, mode, causal, tuning_builds, tmp_path):
    """`lab tune` on a ragged shape: the default and every candidate the rung declares for its mask
    checked (in one child: no candidate of a correct rung ends it) and timed round-robin; a candidate
    declared for the other mask (v6's three-consumer tile, non-causal) is shown not applicable, with
    its declaration's reason, neither checked nor timed nor failed."""
    from lab.ladder.tuning import declared_candidates, tuning_module

    assert (variant.id, True) in tuning_builds
    d = 64 if 64 in variant.head_dims else variant.head_dims[0]
    shape = f"1,2,130,{d}"
    res = lab_here("tune", "--variant", variant.id, "--shape", shape, "--causal" if causal else "--no-causal",
                   "--reps", "3", "--check-shapes", "1", "--mode", mode, "--json", "--profiles", tmp_path / "store",
                   env=_cache_env())
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["stored"] and (Path(out["stored"]) / "tune.json").is_file()   # stored where it was told
    declared = declared_candidates(tuning_module(variant), d, variant.default_dtype, mode)
    assert declared and [r["label"] for r in out["rows"]] == ["default", *(c.label for c in declared)]
    problem = parse_shape(shape, causal=causal)
    assert [r["not_applicable"] for r in out["rows"][1:]] == [c.refusal(problem) for c in declared]
    apart = [r for r in out["rows"] if r["not_applicable"]]
    assert all(not r["passed"] and r["timing"] is None and r["error"] is None and r["refused"] is None for r in apart)
    unfinished = [(r["label"], r["passed"], (r.get("timing") or {}).get("reps"), r.get("refused"), (r.get("error") or "")[:300])
                  for r in out["rows"] if r not in apart
                  and not (r["passed"] and (r.get("timing") or {}).get("reps") == 3)]
    assert not unfinished, unfinished   # (label, passed, reps, the timer's refusal, error): pytest cuts a long repr
    assert out["fastest"] in {r["label"] for r in out["rows"]}
    assert "in one child process" in res.stderr and "each in a child of its own" not in res.stderr, res.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("timing", ["events", "graph"])
def test_lab_tune_against_cudnn_times_it_in_the_same_rounds(timing, tuning_builds, tmp_path):
    """`lab tune --against cudnn` on the GPU, by each timing: SDPA's cuDNN (its backend pinned around the timing, and
    captured so for graph replay) is timed in every round beside the checked configurations, not checked itself, and
    the default's paired ratio against it has every round."""
    variant = next(v for v in TUNABLE if "float16" in v.dtypes and 64 in v.head_dims)
    res = lab_here("tune", "--variant", variant.id, "--shape", "2,4,300,64", "--causal", "--dtype", "float16",
                   "--reps", "8", "--check-shapes", "1", "--timing", timing, "--against", "cudnn", "--json",
                   "--profiles", tmp_path / "store", env=_cache_env())
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    (base,) = [r for r in out["rows"] if r["baseline"]]
    assert base["label"] == "sdpa-cudnn" and base["error"] is None and base["timing"]["reps"] == 8
    assert base["timing"]["timing"] == timing and out["fastest"] != "sdpa-cudnn"
    assert out["against"] == "sdpa-cudnn" and out["default_against"]["rounds"] == 8
    assert out["default_against"]["paired_ci95_low"] <= out["default_against"]["paired_median"]


def test_a_rung_without_candidates_is_refused_before_any_work():
    """No tuning block: exit 2 with the contract to follow, not a tuning build that cannot link."""
    plain = next((v for v in registry.variants() if v not in TUNABLE), None)
    if plain is None:
        pytest.skip("every rung declares tuning candidates")
    res = lab_here("tune", "--variant", plain.id)
    assert res.returncode == 2 and "declares no tuning candidates" in res.stderr and "Traceback" not in res.stderr


def test_lab_tune_by_graph_replay_times_device_time_and_says_so(stand_in_tune, tmp_path):
    """`lab tune --timing graph`: the interleaved timer replays each configuration from a graph; the rows, the
    table and the stored prediction say the tune timed device time (a workspace's allocation left out), so
    `lab ledger` never reads it as the same experiment as a tune by call latency."""
    import json

    from lab.store import ledger

    res = lab_here("tune", "--variant", RUNG.id, "--shape", "1,2,130,64", "--dtype", RUNG.default_dtype, "--reps", "3",
                   "--check-shapes", "1", "--timing", "graph", "--predict", "C1=0.9-1.1", "--profiles", tmp_path,
                   env={"COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    assert "graph replay: device time" in res.stdout
    assert "predicted 0.9-1.1x the default by graph replay (device time), measured" in res.stdout
    (stored,) = [json.loads(f.read_text()) for f in tmp_path.rglob("tune.json")]
    assert {r["timing"]["timing"] for r in stored["rows"] if r.get("timing")} == {"graph"}
    from lab.store import tunes as tune_store

    (entry,) = [e for e in ledger.tune_predictions(tune_store.scan_tunes(tmp_path)[0]) if e["candidate"] == "C1"]
    assert entry["timing"] == "graph"
    bad = lab_here("tune", "--variant", RUNG.id, "--shape", "1,2,130,64", "--timing", "both", "--profiles", tmp_path)
    assert bad.returncode == 2 and "--timing" in bad.stderr


def test_tunes_stored_before_the_timing_option_read_as_call_latency():
    from conftest import REPO
    from lab.store import ledger
    from lab.store import tunes as tune_store

    shipped = tune_store.scan_tunes(REPO / "profiles" / "examples")[0]
    entries = [e for e in ledger.tune_predictions(shipped) if e["tune"].startswith("20261128-12")]
    assert entries and {e["timing"] for e in entries} == {"events"}

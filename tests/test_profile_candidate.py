"""`lab profile --candidate LABEL` on a CPU machine: the whole profile pipeline on one of a rung's tuning
candidates instead of its launcher. The label is resolved as `lab tune --predict` resolves one
(lab.ladder.tuning.resolve_label), against the rung's source before anything starts and against the tuning
build's own table once built; the tuning build's record, a check verdict kept under a key of its own, the
profiler's child (`--tune-config N`), the timer; a run id ending in -cand<index> and a manifest that names
the candidate; pages, `lab compare` and the readers of "a rung's latest run" that tell it from the default.

The GPU machine's acts are stand-ins (tests/test_profile_loop.py's, pipeline.Machine); the refusals run the
real CLI on the built-in rungs' real sources, nothing started. On a GPU: tests/test_profile_candidate_gpu.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import lab_here
from lab import pipeline
from lab.errors import LabError
from lab.ladder import registry
from lab.ladder.tuning import Chosen, source_declared
from lab.measure.problem import parse_shape
from lab.store import check_cache, manifest as mf, runs as store
from test_profile_loop import DEVICE, SOFTWARE, Child, StandIns
from test_tune import TUNABLE
from test_tune_before_build import BACKWARD as BACKWARD_TUNED, V9, _shared_word

# By what they declare, not by id (tests name rungs through the registry): a tunable fp32 rung with D=64
# candidates that serve both masks; v9, whose D=64 table declares candidates for one mask only; the
# latest rung that tunes a backward; and the Hopper pair of a forward and that backward.
TUNED = next(v for v in TUNABLE if "float32" in v.dtypes and source_declared(v, 64, "float32")
             and all(d.causal is None for d in source_declared(v, 64, "float32")))
MASKED = V9
BACKWARD = BACKWARD_TUNED
SHAPE = "1,2,64,64"
LABELS = [d.label for d in source_declared(TUNED, 64, "float32")]
PICKED = len(LABELS) - 1   # the candidate most tests profile: the last, so its index is not 0


def _unique_part(labels: list[str], not_index: int | None = None) -> tuple[int, str]:
    """(i, part): a word of label i, upper-cased, that no other label contains (case ignored) and that is not
    the label itself: a unique part, as --predict and --candidate take one."""
    for i, label in enumerate(labels):
        for word in sorted(label.split(), key=len, reverse=True):
            if i != not_index and word != label and sum(word.lower() in lb.lower() for lb in labels) == 1:
                return i, word.upper()
    raise AssertionError(f"no label has a unique part: {labels}")


def _entries(variant, problem, mode="fwd") -> list[str]:
    """The tuning build's table as the source declares it (what a real build lists)."""
    return [d.label + ("" if d.causal is None else "|causal" if d.causal else "|non-causal")
            for d in source_declared(variant, problem.head_dim, problem.dtype, mode)]


class Built:
    """A build's facts as lab.ladder.build.BuildResult gives them, told apart by `cache_key`."""

    def __init__(self, key: str, ptxas: list | None = None):
        self.module, self.built_now, self.seconds, self.library = None, False, 0.0, None
        self.flags, self.cache_key, self.ptxas = [f"-D{key}"], key, list(ptxas or [])


TUNING_PTXAS = [{"kernel": "void k<64>(float*)", "mangled": "_Z1kILi64EEvPf", "registers": 96},
                {"kernel": "void k<128>(float*)", "mangled": "_Z1kILi128EEvPf", "registers": 168}]


class CandidateChild(Child):
    """The measuring child's stand-in with the tuning build's table (`entries`) and the candidate it was told."""

    def __init__(self, stand_ins):
        super().__init__(stand_ins)
        self.candidate = None

    def candidates(self):
        self.s.log.append("candidates")
        return list(self.s.entries)

    def choose(self, index):
        self.s.log.append(f"choose {index}")
        self.candidate = index

    def check(self, extra_shapes):
        self.s.checked.append(self.candidate)
        return super().check(extra_shapes)

    def bench(self, reps, warmup):
        self.s.timed_candidates.append(self.candidate)
        return super().bench(reps, warmup)


class CandidateStandIns(StandIns):
    def __init__(self):
        super().__init__()
        self.entries: list[str] = []
        self.checked: list = []            # the candidate each check ran on (None: the launcher)
        self.timed_candidates: list = []   # the same for each bench

    def start_measuring(self, variant, problem, mode="fwd"):
        super().start_measuring(variant, problem, mode)
        return CandidateChild(self)

    def machine(self, **acts) -> pipeline.Machine:
        return super().machine(**{"cached_tuning_build": lambda *a, **k: Built("tuning", TUNING_PTXAS),
                                  "tuning_build": lambda *a, **k: Built("tuning", TUNING_PTXAS),
                                  "cached_build": lambda *a, **k: Built("plain"), "build": lambda *a, **k: Built("plain"),
                                  **acts})


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_PROFILES", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    s = CandidateStandIns()
    s.entries = _entries(TUNED, parse_shape(SHAPE, dtype="float32"))
    return s


def _profile(stand_ins, candidate=None, variant=TUNED, shape=SHAPE, dtype="float32", machine=None, **opts):
    return pipeline.profile(variant, parse_shape(shape, dtype=dtype),
                            pipeline.ProfileOptions(**{"ncu": False, "report": False, "candidate": candidate, **opts}),
                            machine or stand_ins.machine())


# ----------------------------------------------------------------------------- bad input: exit 2, nothing run

@pytest.fixture
def nothing_starts(monkeypatch, tmp_path):
    """Every child the lab would start, and every build, recorded (they must stay unused); the store empty."""
    from lab import children
    from lab.ladder import build, tuning

    calls = []
    monkeypatch.setattr(children, "start", lambda *a, **k: calls.append("child"))
    for module, names in ((build, ("build", "cached_build", "ptxas_report")), (tuning, ("build",))):
        for name in names:
            monkeypatch.setattr(module, name, lambda *a, _n=name, **k: calls.append(_n))
    return calls, tmp_path / "store"


def _refused(nothing_starts, *args) -> str:
    calls, store_dir = nothing_starts
    res = lab_here("profile", *args, "--no-baselines", env={"LAB_PROFILES": str(store_dir)})
    assert res.returncode == 2, (res.stdout, res.stderr)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert calls == [] and not store_dir.exists(), calls   # nothing built, no child, no run
    return errors[0] + "\n" + "\n".join(line for line in res.stderr.splitlines() if line.startswith("hint:"))


V9_CAUSAL = ["--variant", MASKED.id, "--shape", "1,2,256,64", "--causal", "--dtype", "float16"]
FORWARD_ONLY = next(v for v in registry.builtin() if v.writes_lse and not v.backward and v.min_cc >= (9, 0))


def test_a_label_that_names_no_candidate_is_refused_listing_them(nothing_starts):
    said = _refused(nothing_starts, *V9_CAUSAL, "--candidate", "typo")
    assert f"--candidate typo: no candidate among {MASKED.id}'s candidates for head_dim 64, float16 is named so" in said
    labels = [d.label for d in source_declared(MASKED, 64, "float16")]
    assert "hint: its candidates: " + "; ".join(labels) in said


def test_a_part_of_several_labels_is_refused_naming_them(nothing_starts):
    labels = [d.label for d in source_declared(MASKED, 64, "float16")]
    shared = _shared_word(labels)
    named = [lb for lb in labels if shared.lower() in lb.lower()]
    said = _refused(nothing_starts, *V9_CAUSAL, "--candidate", shared)
    assert f"--candidate {shared}: ambiguous, {len(named)} of {MASKED.id}'s candidates" in said
    assert "; ".join(named) in said


def test_a_candidate_of_the_other_mask_is_refused(nothing_starts):
    non_causal = next(d for d in source_declared(MASKED, 64, "float16") if d.causal is False)
    said = _refused(nothing_starts, *V9_CAUSAL, "--candidate", non_causal.label)
    assert (f"candidate {non_causal.label!r} is not applicable to B1-H2-N256-D64-causal-float16 "
            "(declared for non-causal problems only)") in said
    causal_only = next(d for d in source_declared(MASKED, 64, "float16") if d.causal is True)
    said = _refused(nothing_starts, *[a for a in V9_CAUSAL if a != "--causal"], "--candidate", causal_only.label)
    assert "(declared for causal problems only)" in said


@pytest.mark.parametrize("args, message", [
    (["--candidate", "default"], "--candidate default: the default is {id}'s own launcher, not a candidate"),
    (["--candidate", " "], "--candidate names no candidate"),
    (["--candidate", "BN64", "--mode", "bwd"], "{id} has no backward"),
])
def test_the_default_an_empty_label_and_a_mode_without_candidates_are_refused(nothing_starts, args, message):
    assert message.format(id=MASKED.id) in _refused(nothing_starts, *V9_CAUSAL, *args)


def test_a_pair_and_a_rung_without_candidates_are_refused(nothing_starts):
    pair = f"{FORWARD_ONLY.id}+{BACKWARD.id}"
    said = _refused(nothing_starts, "--variant", pair, "--shape", "1,2,256,64", "--dtype", "float16", "--candidate", "x")
    assert f"{pair} pairs two rungs; a tuning candidate is one rung's" in said
    assert f"lab profile --candidate LABEL --variant {BACKWARD.id} --mode bwd" in said
    untuned = next(v for v in registry.builtin() if v.kind == "cuda" and "LAB_TUNING" not in v.source.read_text())
    said = _refused(nothing_starts, "--variant", untuned.id, "--shape", "1,2,64,64", "--candidate", "x")
    assert f"{untuned.id} declares no tuning candidates" in said


def test_a_rung_with_no_candidates_for_the_problem_is_refused(nothing_starts, tmp_path):
    """A workspace rung's own file (tests/test_tune_before_build.py's): its list for head_dim 256 is empty."""
    from test_tune_before_build import contract_workspace

    ws = contract_workspace(tmp_path)
    calls, store_dir = nothing_starts
    res = lab_here("profile", "--variant", "w1", "--shape", "1,2,128,256", "--candidate", "one",
                   env={"LAB_WORKSPACE": str(ws), "LAB_PROFILES": str(store_dir)})
    assert res.returncode == 2 and "error: w1 declares no tuning candidates for head_dim 256, float16" in res.stderr
    assert calls == [] and not store_dir.exists()


def test_a_deterministic_backward_is_refused(nothing_starts):
    deterministic = next(v for v in TUNABLE if v.deterministic and source_declared(v, 64, "float16", "bwd"))
    label = source_declared(deterministic, 64, "float16", "bwd")[0].label
    said = _refused(nothing_starts, "--variant", deterministic.id, "--mode", "bwd", "--deterministic",
                    "--shape", "1,2,256,64", "--dtype", "float16", "--candidate", label)
    assert "--candidate with --deterministic" in said


# ----------------------------------------------------------------------------- the pipeline on a candidate

def test_a_unique_part_of_a_label_profiles_that_candidate(stand_ins, capsys):
    """The label part names one candidate; the tuning build is found (not the plain one), the measuring child
    lists its table and is told the index before it checks and times; the run is the candidate's."""
    labels = [e.split("|")[0] for e in stand_ins.entries]
    index, part = _unique_part(labels)
    done = _profile(stand_ins, part)   # a word of the label, upper-cased: case ignored, as --predict
    run = store.Run(done.run_dir)
    m = run.record
    assert m.candidate.label == labels[index] and m.candidate.index == index and m.candidate.causal is None
    assert run.manifest["candidate"] == {"label": labels[index], "index": index}
    assert m.variant.id == TUNED.id   # the rung is still the rung; the candidate is said beside it
    assert m.build.cache_key == "tuning" and m.build.flags == ["-Dtuning"]   # the tuning build's record
    assert [p.registers for p in m.build.ptxas] == [96, 168]
    assert stand_ins.log[:4] == ["start", "candidates", f"choose {index}", "check"]
    assert stand_ins.checked == [index] and stand_ins.timed_candidates == [index]
    assert done.run_dir.name.endswith(f"-{TUNED.id}-B1-H2-N64-D64-float32-cand{index}")
    assert "candidate" in m.stage_seconds
    err = capsys.readouterr().err
    assert f"candidate {index} of {TUNED.id}'s tuning build: {labels[index]!r}" in err
    assert f"check {TUNED.id} candidate {labels[index]!r} against float64" in err


def test_the_run_id_tells_a_candidate_from_the_default(stand_ins):
    default = _profile(stand_ins).run_dir.name
    candidate = _profile(stand_ins, LABELS[-1]).run_dir.name
    end = f"-cand{len(LABELS) - 1}"
    assert candidate != default and candidate.endswith(end) and store._SAFE.match(candidate)
    assert candidate.removesuffix(end).split("-", 2)[2] == default.split("-", 2)[2]   # same rung, same problem
    assert store.find_run(candidate).record.candidate.label == LABELS[-1]
    from datetime import datetime, timezone

    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert store.new_run_id(MASKED.id, "B1-H2-N256-D64-causal-float16", now, candidate=19) == \
        f"20260102-030405-{MASKED.id}-B1-H2-N256-D64-causal-float16-cand19"
    assert store.new_run_id(MASKED.id, "B1-H2-N256-D64-causal-float16", now) == \
        f"20260102-030405-{MASKED.id}-B1-H2-N256-D64-causal-float16"


def test_the_check_cache_keeps_a_candidates_verdict_apart(stand_ins):
    """A verdict kept for the default never stands for a candidate, nor one candidate's for another; a
    candidate's own verdict is reused for it."""
    problem = parse_shape(SHAPE, dtype="float32")
    identity = {k: DEVICE[k] for k in ("name", "compute_capability", "driver")}
    built = Built("tuning")
    keys = [check_cache.cache_key(TUNED, built, problem, 24, "fwd", identity, SOFTWARE, c)
            for c in (None, Chosen(0, LABELS[0]), Chosen(1, LABELS[1]))]
    assert len({json.dumps(k, sort_keys=True) for k in keys}) == 3
    assert "candidate" not in keys[0] and keys[1]["candidate"] == {"index": 0, "label": LABELS[0]}

    _profile(stand_ins)                          # the default, checked and kept
    assert stand_ins.checked == [None]
    first = store.Run(_profile(stand_ins, LABELS[1]).run_dir).record
    assert stand_ins.checked == [None, 1] and first.correctness.reused is None   # not the default's verdict
    again = store.Run(_profile(stand_ins, LABELS[1]).run_dir).record
    assert stand_ins.checked == [None, 1] and "same binary" in again.correctness.reused
    store.Run(_profile(stand_ins, LABELS[2]).run_dir)
    assert stand_ins.checked == [None, 1, 2]    # another candidate: checked
    default = store.Run(_profile(stand_ins).run_dir).record
    assert stand_ins.checked == [None, 1, 2] and default.correctness.reused and default.candidate is None


def test_a_failed_candidate_is_named_and_nothing_is_stored(stand_ins, tmp_path):
    from lab.errors import CheckFailed

    stand_ins.verdict = {"passed": False, "failure": "B1: test-made", "rule": "test-made"}
    with pytest.raises(CheckFailed, match=re.escape(f"{TUNED.id} candidate {LABELS[PICKED]!r} is wrong: B1: test-made")):
        _profile(stand_ins, LABELS[PICKED])
    assert store.list_runs(tmp_path / "store") == []


def test_a_built_table_that_differs_from_the_source_is_refused_before_any_check(stand_ins, tmp_path):
    stand_ins.entries = stand_ins.entries[1:]
    with pytest.raises(LabError, match="tuning build lists other candidates for head_dim 64, float32 than its source"):
        _profile(stand_ins, LABELS[PICKED])
    assert "check" not in stand_ins.log and stand_ins.log[-1] == "close"
    assert store.list_runs(tmp_path / "store") == [] if (tmp_path / "store").exists() else True


def test_a_list_the_source_does_not_say_is_resolved_against_the_built_table(stand_ins, monkeypatch):
    from lab.ladder import tuning

    monkeypatch.setattr(tuning, "source_declared", lambda *a, **k: None)
    m = store.Run(_profile(stand_ins, LABELS[PICKED]).run_dir).record
    assert m.candidate.label == LABELS[PICKED] and m.candidate.index == PICKED
    stand_ins.entries = ["only one"]
    with pytest.raises(LabError, match=re.escape(f"--candidate {LABELS[PICKED]}: no candidate among {TUNED.id}'s candidates")):
        _profile(stand_ins, LABELS[PICKED])


def test_a_backward_candidate_profiles_in_mode_bwd(stand_ins):
    problem = parse_shape("1,2,128,64", dtype="float16")
    stand_ins.entries = _entries(BACKWARD, problem, "bwd")
    labels = [d.label for d in source_declared(BACKWARD, 64, "float16", "bwd")]
    index, part = _unique_part(labels)
    m = store.Run(_profile(stand_ins, part, variant=BACKWARD, shape="1,2,128,64", dtype="float16",
                           mode="bwd").run_dir).record
    assert m.mode == "bwd" and m.candidate.label == labels[index] and m.candidate.index == index
    assert stand_ins.checked == [index] and stand_ins.timed_candidates == [index]


def test_the_profilers_child_runs_the_candidate_inside_the_same_range(stand_ins, monkeypatch):
    """ncu's command runs the target child with --tune-config N; its NVTX filter is the range the child opens
    (lab.measure.target.range_name, the default's name: the analysis reads the rung from it)."""
    from lab.measure import target

    seen = {}

    def ncu_writes(cmd, log_path, env=None, timeout_s=None):
        seen["cmd"] = cmd
        raise LabError("test-made: ncu stops here")

    monkeypatch.setattr(pipeline.ncu, "run_ncu", ncu_writes)
    monkeypatch.setattr(pipeline.ncu, "require_ncu", lambda: "ncu")
    with pytest.raises(LabError, match="test-made"):
        _profile(stand_ins, LABELS[PICKED], ncu=True)
    cmd = seen["cmd"]
    child = cmd[cmd.index("-m"):]
    assert child[:2] == ["-m", "lab.measure.target"] and child[child.index("--tune-config") + 1] == str(PICKED)
    rng = target.range_name(TUNED.id, "B1-H2-N64-D64-float32")
    assert any(rng in a for a in cmd), cmd
    args = target.parse_args(child[2:])
    assert args.tune_config == PICKED and args.variant == TUNED.id
    assert "--tune-config" not in pipeline.target_argv(TUNED, parse_shape(SHAPE, dtype="float32"))


def test_the_target_child_loads_the_candidate_from_the_tuning_build(monkeypatch):
    """lab.measure.target.main with --tune-config: the cached tuning build's candidate N, launched in the range."""
    from types import SimpleNamespace

    import torch

    from lab.measure import target

    got = {}
    monkeypatch.setattr(target, "tuning_build", lambda v, allow_compile=True: got.update(compile=allow_compile)
                        or SimpleNamespace(module="the tuning build"))
    monkeypatch.setattr(target, "candidate", lambda module, i, mode, problem: ("candidate", module, i, mode))
    monkeypatch.setattr(target.build, "load_cached", lambda v: pytest.fail("the plain build was loaded"))
    monkeypatch.setattr(target, "launch_of", lambda v, module, *a: got.update(module=module) or (lambda: None))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(target, "_nvtx_range", lambda name: got.update(range=name) or __import__("contextlib").nullcontext())
    assert target.main(["--variant", TUNED.id, "--problem", "B1-H2-N64-D64-float32", "--tune-config", "3"]) == 0
    assert got == {"compile": False, "module": ("candidate", "the tuning build", 3, "fwd"),
                   "range": target.range_name(TUNED.id, "B1-H2-N64-D64-float32")}


def test_the_measuring_child_lists_checks_and_times_a_candidate(monkeypatch):
    """lab.measure.isolated.serve: `candidates` lists the cached tuning build's table; a check or bench naming
    a candidate runs it (lab.ladder.tuning.candidate: checked as lab tune checks it), never the plain build."""
    from types import SimpleNamespace

    from lab import environment
    from lab.ladder import build
    from lab.measure import bench, checked, isolated

    for name, fn in {"require_gpu": lambda *a, **k: None, "require_compute_capability": lambda *a, **k: None,
                     "device_info": lambda *a: dict(DEVICE), "software_info": lambda *a: dict(SOFTWARE)}.items():
        monkeypatch.setattr(environment, name, fn)
    tuned = SimpleNamespace(configs=lambda d, dtype: ["a", "b|causal"], backward_configs=lambda d, dtype: [])
    monkeypatch.setattr(build, "is_built", lambda v, tuning=False: tuning)
    monkeypatch.setattr(build, "load_cached", lambda v: pytest.fail("the plain build was loaded"))
    monkeypatch.setattr(isolated, "tuning_build", lambda v, allow_compile=True: SimpleNamespace(module=tuned))
    ran = []
    monkeypatch.setattr(isolated, "_check", lambda v, p, shapes, module, mode: ran.append(("check", module.index))
                        or SimpleNamespace(to_dict=lambda: {"passed": True}))
    monkeypatch.setattr(checked, "time_rung", lambda v, module, *a, **k: ran.append(("bench", module.index))
                        or bench.summarize([2.0] * 30, 5, True))
    replies = []
    lines = [json.dumps(r) for r in ({"do": "candidates"}, {"do": "check", "shapes": 2, "candidate": 1},
                                     {"do": "bench", "reps": 30, "warmup": 5, "candidate": 1})]
    variant = SimpleNamespace(kind="cuda", id="cu")
    assert isolated.serve(variant, parse_shape("1,2,64,64", causal=True), "fwd", lines, replies.append) == 0
    assert replies[0] == {"entries": ["a", "b|causal"]}
    assert replies[1] == {"result": {"passed": True}} and replies[2]["timing"]["median"] == 2.0
    assert ran == [("check", 1), ("bench", 1)]
    replies.clear()
    monkeypatch.setattr(build, "is_built", lambda v, tuning=False: not tuning)
    isolated.serve(variant, parse_shape("1,2,64,64"), "fwd", [json.dumps({"do": "candidates"})], replies.append)
    assert replies == [{"error": "cu has no cached tuning build here", "not_built": True}]


# ----------------------------------------------------------------------------- what reads a candidate's run

def test_the_page_says_candidate_and_measures_it_against_the_default(stand_ins, tmp_path):
    from lab.report import pages

    default = _profile(stand_ins).run_dir
    cand = _profile(stand_ins, LABELS[PICKED], report=True)
    html = cand.page.read_text()
    assert f"candidate &ldquo;{LABELS[PICKED]}&rdquo;" in html and 'id="candidate"' in html
    assert f"not {TUNED.id}'s default launcher" in html
    assert f"Against {TUNED.id}&#39;s default" in html or f"Against {TUNED.id}'s default" in html
    assert f"compare-{default.name}-{cand.run_dir.name}.html" in html   # the side-by-side page, rendered
    assert (cand.page.parent / f"compare-{default.name}-{cand.run_dir.name}.html").is_file()
    assert "Against the previous rung" not in html
    # the ptxas table: the tuning build's, all of it where the report does not say which it launched
    assert "void k&lt;64&gt;(float*)" in html and "tuning build" in html
    index = (cand.page.parent / "index.html").read_text()
    assert f"candidate &ldquo;{LABELS[PICKED]}&rdquo;" in index
    # the default's own page is the rung's, its step against the previous rung
    own = pages.render_run_page(default).read_text()
    assert 'id="candidate"' not in own and "Against the previous rung" in own


def test_a_candidates_page_without_the_defaults_run_says_how_to_store_it(stand_ins):
    html = _profile(stand_ins, LABELS[PICKED], report=True).page.read_text()
    assert f"No stored run of {TUNED.id}&#39;s default" in html or f"No stored run of {TUNED.id}'s default" in html
    assert f"lab profile --variant {TUNED.id} --shape 1,2,64,64 --dtype float32" in html


def test_lab_compare_names_the_candidate(stand_ins, tmp_path):
    default = _profile(stand_ins).run_dir.name
    cand = _profile(stand_ins, LABELS[PICKED]).run_dir.name
    res = lab_here("compare", default, cand, "--out", tmp_path / "out", env={"LAB_PROFILES": str(tmp_path / "store")})
    assert res.returncode in (0, 1), res.stderr
    assert f"B  {cand} ({TUNED.id} candidate {LABELS[PICKED]!r}, not its default):" in res.stdout
    assert f"A  {default}:" in res.stdout
    page = next((tmp_path / "out").glob("compare-*.html")).read_text()
    assert f"B is tuning candidate {PICKED}, &ldquo;{LABELS[PICKED]}&rdquo;" in page
    as_json = json.loads(lab_here("compare", default, cand, "--json",
                                  env={"LAB_PROFILES": str(tmp_path / "store")}).stdout)
    assert as_json["b"]["candidate"] == {"label": LABELS[PICKED], "index": PICKED}
    assert as_json["a"]["candidate"] is None


def test_readers_of_a_rungs_latest_run_pass_over_a_candidates(stand_ins, tmp_path):
    """`lab compare v4` (find_run by a rung's id), the ledger's timings and profiled runs, `lab new`'s evidence
    and the index's ladder read the rung's default's runs, never a candidate's, however new."""
    from lab.report.pages import ladder_groups
    from lab.report.rundata import load_all
    from lab.store import evidence, ledger

    default = _profile(stand_ins).run_dir.name
    cand = _profile(stand_ins, LABELS[PICKED]).run_dir
    root = tmp_path / "store"
    assert store.find_run(TUNED.id, root).id == default
    assert store.find_run(cand.name, root).id == cand.name   # by its own id, of course
    m = store.Run(cand).manifest
    assert ledger.run_impl(m) is None
    assert [t.impl for t in ledger.run_timings(store.Run(cand))] == ["sdpa-flash"]   # its baselines still count
    assert evidence.latest_run_of(TUNED.id, [root]).id == default
    runs, _ = load_all(root)
    [group] = ladder_groups(runs)
    assert [r.id for r in group["rungs"]] == [default]
    only_candidates = tmp_path / "only"
    only_candidates.mkdir()
    __import__("shutil").copytree(cand, only_candidates / cand.name)
    with pytest.raises(LabError, match=f"no stored run {TUNED.id!r}"):
        store.find_run(TUNED.id, only_candidates)
    assert evidence.latest_run_of(TUNED.id, [only_candidates]) is None


def test_the_page_shows_the_ptxas_records_of_the_kernels_the_candidate_launched(stand_ins, monkeypatch):
    """A tuning build holds every candidate's kernels; the page's ptxas table shows those the profile
    launched (matched by mangled name to the report's kernels: here a real report, tests/fixtures/ncu/
    planted-basic, written where ncu would), and says how many of the build's it leaves out."""
    import lzma

    real = lzma.decompress((Path(__file__).parent / "fixtures" / "ncu" / "planted-basic.ncu-rep.xz").read_bytes())

    def ncu_writes(cmd, log_path, env=None, timeout_s=None):
        Path(cmd[cmd.index("-o") + 1]).write_bytes(real)
        Path(log_path).write_text("ncu's log (test-made)\n")

    monkeypatch.setattr(pipeline.ncu, "run_ncu", ncu_writes)
    monkeypatch.setattr(pipeline.ncu, "require_ncu", lambda: "ncu")
    launched = {"kernel": "planted_fma_bound(float *, int)", "mangled": "_Z17planted_fma_boundPfi", "registers": 40}
    other = {"kernel": "another_candidates_kernel(float *)", "mangled": "_Z25another_candidates_kernelPf", "registers": 255}
    tuned = lambda *a, **k: Built("tuning", [launched, other])   # noqa: E731
    done = _profile(stand_ins, LABELS[PICKED], ncu=True, report=True,
                    machine=stand_ins.machine(cached_tuning_build=tuned, tuning_build=tuned))
    assert len(store.Run(done.run_dir).record.build.ptxas) == 2   # the manifest keeps the whole build's
    html = done.page.read_text()
    table = html[html.index("<h3>ptxas resource usage</h3>"):]
    table = table[:table.index("</table>")]
    assert "planted_fma_bound(float *, int)" in table and "another_candidates_kernel" not in table
    assert "the kernels this candidate launched (1 more of the build" in html

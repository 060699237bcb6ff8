"""The manifest is one typed record: every stored example reads and writes back unchanged, a field
of the wrong type is a LabError naming it, and a field added with a default reads older manifests."""

from pathlib import Path
import json
from dataclasses import dataclass

import pytest

from lab.errors import LabError
from lab.measure.problem import Problem
from lab.store import manifest as mf
from lab.store import runs as store

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "profiles" / "examples").glob("*/manifest.json"))


def _without_nulls(x):
    """None and empty containers read the same as an absent key (an optional field added later)."""
    if isinstance(x, dict):
        return {k: _without_nulls(v) for k, v in x.items() if v is not None and v != {} and v != []}
    if isinstance(x, list):
        return [_without_nulls(v) for v in x]
    return x


def _minimal(**extra) -> dict:
    return {"schema_version": 1, "run_id": "r1", "variant": {"id": "mine"},
            "problem": {"batch": 1, "heads": 2, "seqlen_q": 17, "seqlen_k": 33, "head_dim": 64}, **extra}


@pytest.mark.skipif(not EXAMPLES, reason="no recorded runs in profiles/examples/")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name[:30])
def test_recorded_manifests_round_trip(path):
    raw = json.loads(path.read_text())
    record = mf.Manifest.from_dict(raw)
    assert isinstance(record.problem, Problem) and isinstance(record.timing, mf.Timing)
    assert record.timing.median == raw["timing"]["median"]
    assert all(isinstance(b, mf.Baseline) for b in record.baselines)
    # keys the schema does not declare (here e.g. timeline.launch_overhead's inner keys) survive
    assert _without_nulls(record.to_dict()) == _without_nulls(raw)


@pytest.mark.parametrize("damage, field", [
    ({"timing": {"median": "fast"}}, "timing.median"),
    ({"timing": {"reps": 2.5}}, "timing.reps"),
    ({"baselines": [{"name": "sdpa-flash"}, {"name": "sdpa-math", "ratio": True}]}, "baselines[1].ratio"),
    ({"baselines": {"name": "x"}}, "baselines"),
    ({"device": {"peaks": {"fp32_tflops": [1]}}}, "device.peaks.fp32_tflops"),
    ({"variant": {"slug": "x"}}, "variant.id"),
    ({"problem": {"batch": 1, "heads": 1, "seqlen_q": 1, "seqlen_k": 1}}, "problem.head_dim"),
    ({"problem": {"batch": 0, "heads": 1, "seqlen_q": 1, "seqlen_k": 1, "head_dim": 64}}, "problem"),
    ({"problem": {"batch": 1, "heads": 1, "seqlen_q": 1, "seqlen_k": 1, "head_dim": 64, "dtype": "int8"}}, "problem"),
    ({"tables": {"metrics": 3}}, "tables.metrics"),
    ({"run_id": ""}, "run_id"),
    ({"schema_version": 99}, "schema_version"),
    ({"profile": "ncu"}, "profile"),
])
def test_a_malformed_field_is_named(damage, field):
    with pytest.raises(LabError) as e:
        mf.Manifest.from_dict(_minimal(**damage))
    assert f"'{field}'" in str(e.value)


def test_minimal_manifest_reads_with_defaults():
    record = mf.Manifest.from_dict(_minimal())
    assert record.problem.seqlen_k == 33 and record.baselines == [] and record.timing is None
    d = record.to_dict()
    assert d["problem"]["label"] == "B1-H2-N17x33-D64-float32" and "timing" not in d


def test_an_optional_field_added_later_reads_old_manifests():
    """The way other issues extend the schema: a declared field with a default, nothing else."""

    @dataclass
    class TimingWithSource(mf.Timing):
        source_lines: list[str] | None = None

    old = {"median": 1.0, "unit": "ms"}
    assert TimingWithSource.from_dict(old).source_lines is None
    new = TimingWithSource.from_dict({**old, "source_lines": ["a.cu:3"]})
    assert new.to_dict()["source_lines"] == ["a.cu:3"]
    with pytest.raises(LabError, match="'timing.source_lines'"):
        TimingWithSource.from_dict({**old, "source_lines": "a.cu:3"}, "timing")


def test_a_candidates_run_round_trips_and_a_run_without_one_reads_as_the_rungs():
    """`candidate` (lab profile --candidate) is optional: a run stored before it, or of the rung's launcher,
    reads as None and writes no key; a candidate's run writes back what it read; a wrong type is named."""
    plain = mf.Manifest.from_dict(_minimal())
    assert plain.candidate is None and "candidate" not in plain.to_dict() and mf.candidate_label(plain.to_dict()) is None
    stored = _minimal(candidate={"label": "C1 BN64 S2 persistent tma-o", "index": 11})
    record = mf.Manifest.from_dict(stored)
    assert isinstance(record.candidate, mf.CandidateInfo) and record.candidate.index == 11
    assert record.candidate.causal is None and record.to_dict()["candidate"] == stored["candidate"]
    assert mf.candidate_label(record.to_dict()) == mf.candidate_label(record) == "C1 BN64 S2 persistent tma-o"
    masked = mf.Manifest.from_dict(_minimal(candidate={"label": "c", "index": 0, "causal": False}))
    assert masked.to_dict()["candidate"] == {"label": "c", "index": 0, "causal": False}
    for damage, field in (({"label": "c", "index": "x"}, "candidate.index"), ({"index": 1}, "candidate.label"),
                          ("c", "candidate")):
        with pytest.raises(LabError, match=f"'{field}'"):
            mf.Manifest.from_dict(_minimal(candidate=damage))


def test_the_writer_refuses_a_manifest_that_would_not_read_back(tmp_path):
    with pytest.raises(LabError, match=r"not stored.*'timing.median'"):
        with store.create_run("20261121-000000-v1-x", tmp_path) as run:
            run.manifest.update(_minimal(timing={"median": "fast"}))
            run.commit()
    assert list(tmp_path.iterdir()) == []


def test_a_typed_record_is_written_and_read_back(tmp_path):
    record = mf.Manifest(variant=mf.VariantInfo(id="mine"), problem=Problem(2, 3, 100, 300, 64, True, "float16"),
                         timing=mf.Timing(median=1.25, reps=30),
                         baselines=[mf.Baseline(name="sdpa-flash", dtype="float16", status="ok", median_ms=0.5)])
    with store.create_run("20261121-000000-v3-x", tmp_path) as run:
        path = run.commit(record)
    back = store.Run(path).record
    assert back.run_id == "20261121-000000-v3-x" and back.problem == record.problem
    assert back.timing.median == 1.25 and back.baselines[0].median_ms == 0.5


def test_ptxas_entries_stored_before_the_wgmma_notice_read_and_newer_ones_round_trip():
    """build.ptxas[] gained wgmma_serialized and mangled (lab.ladder.build): a run stored before reads them
    as None (not recorded), a newer run's "" (ptxas said nothing) and notice are written back as read."""
    old = mf.Manifest.from_dict(_minimal(build={"ptxas": [{"kernel": "k", "registers": 168, "arch": "sm_90a"}]}))
    assert old.build.ptxas[0].wgmma_serialized is None and old.build.ptxas[0].mangled is None
    new = {"kernel": "k", "registers": 168, "arch": "sm_90a", "mangled": "_Z1kv",
           "wgmma_serialized": "C7511: insufficient register resources for the wgmma pipeline"}
    record = mf.Manifest.from_dict(_minimal(build={"ptxas": [new, dict(new, wgmma_serialized="")]}))
    assert record.to_dict()["build"]["ptxas"] == [new, dict(new, wgmma_serialized="")]

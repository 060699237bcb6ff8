"""The run store: round trip, and a run appears only when complete (atomic, Ctrl-C safe)."""

import json
import lzma
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lab.store import runs as store
from lab.errors import LabError

PROBLEM = {"batch": 1, "heads": 2, "seqlen_q": 17, "seqlen_k": 17, "head_dim": 64, "causal": False, "dtype": "float32"}


def _write_run(root, run_id="20261121-000000-v1-test", extra=None):
    with store.create_run(run_id, root) as run:
        run.manifest.update({"created_utc": "2026-11-21T00:00:00+00:00", "variant": {"id": "mine"},
                             "problem": PROBLEM, **(extra or {})})
        run.add_table("metrics", pd.DataFrame({"kernel": ["k"], "gpu__time_duration.sum": [1234.5],
                                               "launch__grid_size": [12]}))
        (run.artifact_path("profile.ncu-rep")).write_bytes(b"payload")
        run.register_artifact("ncu_report", "profile.ncu-rep")
        return run.commit()


def test_round_trip_keeps_manifest_tables_and_types(tmp_path):
    path = _write_run(tmp_path, extra={"timing": {"median": 1.5, "unit": "ms"}})
    [run] = store.list_runs(tmp_path)
    assert run.path == path
    assert run.manifest["schema_version"] == store.SCHEMA_VERSION
    assert run.manifest["timing"] == {"median": 1.5, "unit": "ms"}
    df = run.table("metrics")
    assert df["launch__grid_size"].dtype.kind == "i"  # typed columnar: ints stay ints
    assert df["gpu__time_duration.sum"].iloc[0] == 1234.5
    assert run.artifact("ncu_report").read_bytes() == b"payload"
    assert run.table("absent") is None


@pytest.mark.parametrize("interrupt", [RuntimeError("boom"), KeyboardInterrupt()])
def test_interrupted_run_leaves_nothing(tmp_path, interrupt):
    with pytest.raises(type(interrupt)):
        with store.create_run("20261121-000000-v2-x", tmp_path) as run:
            run.add_table("metrics", pd.DataFrame({"a": [1]}))
            raise interrupt
    assert list(tmp_path.iterdir()) == []
    assert store.list_runs(tmp_path) == []


def test_uncommitted_run_leaves_nothing(tmp_path):
    with store.create_run("20261121-000000-v2-x", tmp_path) as run:
        run.manifest["x"] = 1
    assert list(tmp_path.iterdir()) == []


def test_list_skips_staging_dirs_and_reads_examples(tmp_path):
    _write_run(tmp_path / "examples", "20261121-000000-v1-a")
    staging = tmp_path / ".20261121-000001-v2-b.xyz.partial"
    staging.mkdir()
    (staging / "manifest.json").write_text(json.dumps({"schema_version": 1, "run_id": "x"}))
    assert [r.id for r in store.list_runs(tmp_path)] == ["20261121-000000-v1-a"]


def test_duplicate_and_bad_ids_are_refused(tmp_path):
    _write_run(tmp_path)
    with pytest.raises(LabError):
        _write_run(tmp_path)
    with pytest.raises(LabError):
        with store.create_run("../escape", tmp_path):
            pass


def test_find_run_by_prefix_and_errors(tmp_path):
    _write_run(tmp_path, "20261121-000000-v1-a")
    _write_run(tmp_path, "20261121-000000-v1-b")
    assert store.find_run("20261121-000000-v1-a", tmp_path).id.endswith("-a")
    with pytest.raises(LabError, match="ambiguous"):
        store.find_run("20261121-000000-v1", tmp_path)
    with pytest.raises(LabError, match="no stored run"):
        store.find_run("nope", tmp_path)
    with pytest.raises(LabError, match="empty"):   # not a prefix of every run
        store.find_run(" ", tmp_path)


def test_find_run_by_rung_id_takes_its_latest_run(tmp_path):
    """`lab compare v5 v6` compares each rung's latest stored run."""
    _write_run(tmp_path, "20261121-000000-x-a", extra={"created_utc": "2026-11-21T00:00:00+00:00"})
    _write_run(tmp_path, "20261122-000000-x-b", extra={"created_utc": "2026-11-22T00:00:00+00:00"})
    _write_run(tmp_path, "20261123-000000-y-c", extra={"created_utc": "2026-11-23T00:00:00+00:00",
                                                        "variant": {"id": "other"}})
    assert store.find_run("mine", tmp_path).id == "20261122-000000-x-b"
    assert store.find_run("other", tmp_path).id == "20261123-000000-y-c"


def test_a_malformed_manifest_is_listed_as_damaged_not_fatal(tmp_path):
    _write_run(tmp_path, "20261121-000000-v1-good")
    bad = tmp_path / "20261121-000000-v1-bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    runs, damaged = store.scan_runs(tmp_path)
    assert [r.id for r in runs] == [r.id for r in store.list_runs(tmp_path)] == ["20261121-000000-v1-good"]
    assert [d.id for d in damaged] == [bad.name] and "not a lab run" in damaged[0].reason
    with pytest.raises(LabError, match="damaged"):
        store.find_run(bad.name, tmp_path)
    with pytest.raises(LabError, match="not a lab run"):
        store.Run(bad)


# ----------------------------------------------------------------------------- reports kept xz-compressed

REPO = Path(__file__).resolve().parent.parent
REAL_REPORT = REPO / "tests" / "fixtures" / "ncu" / "planted-basic.ncu-rep.xz"   # recorded on a GPU
WORKSPACE_RUNS = REPO / "examples" / "workspace" / "profiles"   # manifests of an older lab's fields


def test_a_staged_artifact_is_committed_compressed(tmp_path):
    report = lzma.decompress(REAL_REPORT.read_bytes())
    with store.create_run("20261121-000000-v1-xz", tmp_path) as run:
        run.manifest.update({"variant": {"id": "mine"}, "problem": PROBLEM})
        run.artifact_path("profile.ncu-rep").write_bytes(report)
        run.register_artifact("ncu_report", "profile.ncu-rep")
        assert run.compress_artifact("ncu_report") == "profile.ncu-rep.xz"
        path = run.commit()
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "profile.ncu-rep.xz"]
    stored = store.Run(path)
    assert stored.manifest["artifacts"] == {"ncu_report": "profile.ncu-rep.xz"}
    assert lzma.decompress(stored.artifact("ncu_report").read_bytes()) == report


def _stored_before(tmp_path) -> tuple:
    """The shipped workspace run as an older lab stored it: profile.ncu-rep plain, the manifest naming it."""
    src = next((p for p in sorted(WORKSPACE_RUNS.glob("*/manifest.json"))), None)
    if src is None:
        pytest.skip("no shipped workspace run")
    run = tmp_path / src.parent.name
    shutil.copytree(src.parent, run)
    man = json.loads((run / "manifest.json").read_text())
    report = lzma.decompress((run / man["artifacts"]["ncu_report"]).read_bytes())
    (run / man["artifacts"]["ncu_report"]).unlink()
    (run / "profile.ncu-rep").write_bytes(report)
    man["artifacts"]["ncu_report"] = man["profile"]["report"] = "profile.ncu-rep"
    (run / "manifest.json").write_text(json.dumps(man, indent=2))
    return run, man, report


def test_a_stored_runs_report_is_compressed_and_nothing_else_changes(tmp_path):
    run, before, report = _stored_before(tmp_path)
    assert store.Run(run).artifact("ncu_report") == run / "profile.ncu-rep"   # an old run reads as it is
    packed = store.compress_stored_artifact(run)
    assert packed == run / "profile.ncu-rep.xz" and not (run / "profile.ncu-rep").exists()
    assert lzma.decompress(packed.read_bytes()) == report
    after = json.loads((run / "manifest.json").read_text())
    assert after["artifacts"]["ncu_report"] == after["profile"]["report"] == "profile.ncu-rep.xz"
    # the manifest as it was stored, but for the two names: not brought up to this lab's record
    assert {**after, "artifacts": before["artifacts"], "profile": before["profile"]} == before
    assert store.compress_stored_artifact(run) is None   # kept compressed already
    assert store.report_or_run(run) == packed


def test_a_report_compressed_by_hand_and_a_missing_one(tmp_path):
    run, _, report = _stored_before(tmp_path)
    (run / "profile.ncu-rep.xz").write_bytes(lzma.compress(report))   # `xz profile.ncu-rep`
    (run / "profile.ncu-rep").unlink()
    assert store.Run(run).artifact("ncu_report") == run / "profile.ncu-rep.xz"   # the manifest still names the plain
    assert store.compress_stored_artifact(run) == run / "profile.ncu-rep.xz"
    assert json.loads((run / "manifest.json").read_text())["artifacts"]["ncu_report"] == "profile.ncu-rep.xz"
    (run / "profile.ncu-rep.xz").unlink()
    with pytest.raises(LabError, match="missing"):
        store.compress_stored_artifact(run)
    with pytest.raises(LabError, match="no ncu report"):
        store.report_or_run(run)

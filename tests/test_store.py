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


# ------------------------------------------------------------------ wide tables stored long

REPO = Path(__file__).resolve().parents[1]
SHIPPED_METRICS = sorted([*(REPO / "profiles" / "examples").glob("*/metrics.parquet"),
                          *(REPO / "examples" / "workspace" / "profiles").glob("*/metrics.parquet")])
LEAD = ["kernel_index", "kernel", "device", "nvtx", "range_index", "kernel_function", "kernel_mangled"]


def _odd_frame(rows: int) -> pd.DataFrame:
    """More than LONG_OVER columns of each dtype a metrics frame holds (and bool), NaN and None among them, names
    as ncu's: instanced opcodes, breakdown: and group: prefixes, spaces and quotes."""
    cols: dict = {"kernel_index": list(range(rows)),
                  "kernel": [f"void k<{i}>(float *, int)" for i in range(rows)],
                  "nvtx": [None if i % 2 else "fwd > step 'a'" for i in range(rows)],
                  "device": [None] * rows,                                     # only None: Arrow's null type
                  "big": [2 ** 62 + i for i in range(rows)],                  # int64 beyond float64's 2^53
                  "flag": [i % 2 == 0 for i in range(rows)],
                  "maybe": [None if i == 1 else i % 2 == 0 for i in range(rows)],   # bools with None: object
                  "sass__inst_executed_per_opcode[FFMA]": [1.5 * i for i in range(rows)],
                  "breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed": [float("nan")] * rows,
                  'group:memory__chart "x", y\\z': ["é ü 😀"] * rows}
    for j in range(store.LONG_OVER):
        cols[f"m{j}__x.sum.per_second"] = [float("nan") if (i + j) % 5 == 0 else i * 1e9 + j / 7 for i in range(rows)]
    df = pd.DataFrame(cols)
    df.attrs = {"units": {"m0__x.sum.per_second": "byte/second", "sass__inst_executed_per_opcode": "inst"},
                "path": "/x/profile.ncu-rep"}
    return df


def _is_long(path) -> bool:
    import pyarrow.parquet as pq
    return (pq.read_schema(path).metadata or {}).get(store.LAYOUT) == store.LONG


def _bare(df: pd.DataFrame) -> pd.DataFrame:
    """`df` without its attrs: pandas deep-copies them (~900 metric units) into every column it hands out."""
    out = df.copy(deep=False)
    out.attrs = {}
    return out


def _assert_same(got: pd.DataFrame, want: pd.DataFrame):
    assert got.attrs == want.attrs
    assert list(got.columns) == list(want.columns) and list(got.dtypes) == list(want.dtypes)
    pd.testing.assert_frame_equal(_bare(got), _bare(want), check_exact=True)


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_a_wide_frame_is_stored_long_and_reads_back_as_written(tmp_path, rows):
    """A frame of more than LONG_OVER columns goes long, and reads back exactly: columns, their order and dtypes,
    NaN and None, attrs; and as pandas reads the same frame from a plain Parquet table."""
    df = _odd_frame(rows)
    store.write_table(df, tmp_path / "t.parquet")
    assert _is_long(tmp_path / "t.parquet")
    back = store.read_table(tmp_path / "t.parquet")
    df.to_parquet(tmp_path / "plain.parquet", index=False)
    _assert_same(back, pd.read_parquet(tmp_path / "plain.parquet"))
    _assert_same(back, df)
    if rows:
        assert back["big"].iloc[-1] == 2 ** 62 + rows - 1 and back["kernel_index"].dtype == "int64"
        assert back["device"].iloc[0] is None and back["nvtx"].iloc[0] == "fwd > step 'a'"
    if rows > 1:
        assert pd.isna(back["nvtx"].iloc[1]) and back["maybe"].iloc[1] is None


def test_the_pyarrow_readers_of_a_long_table_see_its_frame(tmp_path):
    """read_arrow (pages) and Run.columns read the columns they ask for out of a long file, as out of a plain one."""
    df = _odd_frame(3)
    with store.create_run("20261121-000000-v1-long", tmp_path) as w:
        w.manifest.update({"created_utc": "2026-11-21T00:00:00+00:00", "variant": {"id": "mine"}, "problem": PROBLEM})
        w.add_table("metrics", df)
        w.commit()
    [run] = store.list_runs(tmp_path)
    path = run.path / "metrics.parquet"
    df.to_parquet(tmp_path / "plain.parquet", index=False)
    for f in (path, tmp_path / "plain.parquet"):
        t, names = store.read_arrow(f, lambda c: c.startswith("sass__") or c == "kernel")
        assert names == list(df.columns) and t.column_names == ["kernel", "sass__inst_executed_per_opcode[FFMA]"]
        assert t.to_pylist()[2] == {"kernel": "void k<2>(float *, int)", "sass__inst_executed_per_opcode[FFMA]": 3.0}
        assert json.loads(t.schema.metadata[b"PANDAS_ATTRS"]) == df.attrs
    assert run.columns("metrics", ["big", "maybe", "device"]) == {"big": [2 ** 62, 2 ** 62 + 1, 2 ** 62 + 2],
                                                                  "maybe": [True, None, True], "device": [None] * 3}
    assert run.columns("metrics", ["kernel", "absent"]) is None
    _assert_same(run.table("metrics"), pd.read_parquet(tmp_path / "plain.parquet"))


def test_narrow_frames_and_other_dtypes_stay_plain_parquet(tmp_path):
    """At most LONG_OVER columns, or a column the long layout does not restore as pandas would (an extension
    dtype, a date, int32), and the table is the plain one pd.read_parquet reads."""
    narrow = pd.DataFrame({"a": [1, 2], "b": ["x", None]})
    wide_ext = _odd_frame(2).assign(n=pd.array([1, None], dtype="Int64"), t=pd.to_datetime(["2026-01-01"] * 2),
                                    i=pd.array([1, 2], dtype="int32"))
    for name, df in (("narrow", narrow), ("ext", wide_ext), ("ext1", wide_ext[list(wide_ext.columns[:-2])]),
                     ("ext2", wide_ext.drop(columns=["n", "t"]))):
        store.write_table(df, tmp_path / f"{name}.parquet")
        assert not _is_long(tmp_path / f"{name}.parquet"), name
        _assert_same(store.read_table(tmp_path / f"{name}.parquet"), pd.read_parquet(tmp_path / f"{name}.parquet"))
    _assert_same(store.read_table(tmp_path / "ext.parquet"), wide_ext)


def test_an_older_wide_table_reads_as_before(tmp_path):
    """Every store's runs before the long layout: a plain Parquet metrics table reads through the store as
    pd.read_parquet reads it."""
    df = _odd_frame(2)
    df.to_parquet(tmp_path / "old.parquet", index=False)
    _assert_same(store.read_table(tmp_path / "old.parquet"), pd.read_parquet(tmp_path / "old.parquet"))


def test_a_long_file_out_of_shape_is_an_error_not_a_wrong_frame(tmp_path):
    import pyarrow.parquet as pq

    store.write_table(_odd_frame(2), tmp_path / "t.parquet")
    t = pq.read_table(tmp_path / "t.parquet")
    pq.write_table(t.slice(0, t.num_rows - 1), tmp_path / "short.parquet")   # one value lost
    with pytest.raises(ValueError, match="long layout"):
        store.read_table(tmp_path / "short.parquet")


@pytest.mark.parametrize("path", SHIPPED_METRICS, ids=lambda p: p.parent.name)
def test_shipped_metrics_tables_are_stored_long_and_read_whole(tmp_path, path):
    """The shipped runs' metrics tables (stored long since the layout came): the store reads each into an ncu
    frame of one row per kernel (its lead columns, ~1,400+ metrics, their units), the kernels the run's derived
    table names; what read_arrow reads for pages is the same; and writing it again reads back the same frame."""
    assert _is_long(path)
    run = store.Run(path.parent)
    df = run.table("metrics")
    assert list(df.columns[:len(LEAD)]) == LEAD and len(df.columns) > 1000
    assert 1 <= len(df) <= 3 and df["kernel_index"].tolist() == list(range(len(df)))
    assert set(map(str, df.dtypes)) == {"int64", "float64", "str"} and df["kernel_index"].dtype == "int64"
    assert df[store.DURATION].gt(0).all() and df["kernel"].str.len().gt(0).all()
    assert set(df.attrs) == {"units", "path"} and len(df.attrs["units"]) > 500
    assert set(df.attrs["units"]) <= set(df.columns)
    assert df.attrs["units"][store.DURATION] in ("ns", "us", "ms", "nsecond", "usecond", "msecond")
    derived = run.table("derived")
    if derived is not None:
        assert dict(zip(derived["kernel_index"], derived["kernel"])) == \
            {k: n for k, n in zip(df["kernel_index"], df["kernel"]) if k in set(derived["kernel_index"])}
    t, names = store.read_arrow(path)
    assert names == list(df.columns) and t.num_rows == len(df)
    bare = _bare(df)
    for c in names:   # Arrow's null where pandas has NaN
        assert all(g == w or (g is None and pd.isna(w)) for g, w in zip(t.column(c).to_pylist(), bare[c].tolist())), c
    assert run.main_kernel()[0] in set(df["kernel_index"])
    store.write_table(df, tmp_path / "again.parquet")
    _assert_same(store.read_table(tmp_path / "again.parquet"), df)

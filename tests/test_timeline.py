"""The timeline readers on real Nsight Systems output: every file in tests/fixtures/nsys-public
(SQLite exports of nsys 2020.5 to 2026.2, and `nsys stats --format csv` files). Expected values come
from SQL written here over the export itself, or from the CSV read with the csv module, never from
the code under test. Bad input goes through the CLI and must exit 2 with a message.
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import PUBLIC_NCU, PUBLIC_NSYS
from lab.cli import main
from lab.demangle import demangle
from lab.errors import LabError
from lab.profilers import nsys
from lab.profilers.timeline import collect_timeline, read_any

FIXTURES = PUBLIC_NSYS
NCU_FIXTURES = PUBLIC_NCU

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"nsys fixtures not found at {FIXTURES}")


def fixture_files(suffix: str) -> list[Path]:
    return sorted(FIXTURES.glob(f"*{suffix}")) if FIXTURES.is_dir() else []


SQLITE = fixture_files(".sqlite")
CSVS = fixture_files(".csv")


def ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)


def tables_of(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def lab_cli(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def test_every_fixture_is_read_by_a_test():
    """No file in the fixture folder escapes the tests below."""
    others = [p.name for p in FIXTURES.iterdir() if p.suffix not in (".sqlite", ".csv") and p.name != "SOURCES.md"]
    assert SQLITE and CSVS
    assert others == []


# ------------------------------------------------------------------------------ SQLite exports

@pytest.mark.parametrize("path", SQLITE, ids=lambda p: p.name.split("__")[0])
def test_kernel_summary_equals_sql_over_the_export(path):
    con = ro(path)
    expected = {name: (n, total, lo, hi) for name, n, total, lo, hi in con.execute(
        "SELECT s.value, count(*), sum(k.end - k.start), min(k.end - k.start), max(k.end - k.start) "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value")}
    durations = {}
    for name, d in con.execute("SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               "JOIN StringIds s ON s.id = k.demangledName"):
        durations.setdefault(name, []).append(d)
    tl = read_any(path)
    got = {r["name"]: r for r in tl.to_json()["kernels"]}
    assert set(got) == set(expected)
    for name, (n, total, lo, hi) in expected.items():
        row = got[name]
        assert (row["instances"], row["total_ns"], row["min_ns"], row["max_ns"]) == (n, total, lo, hi), name
        assert row["avg_ns"] == pytest.approx(total / n)
        assert row["med_ns"] == pytest.approx(statistics.median(durations[name]))
        assert row["stddev_ns"] == pytest.approx(statistics.stdev(durations[name]) if n > 1 else 0.0)
    assert sum(r["time_pct"] for r in got.values()) == pytest.approx(100.0)


@pytest.mark.parametrize("path", SQLITE, ids=lambda p: p.name.split("__")[0])
def test_memory_and_api_totals_equal_sql(path):
    con = ro(path)
    t = tables_of(con)
    tl = read_any(path)
    memory = {r["operation"]: r for r in tl.to_json()["memory"]}
    memset = [r for op, r in memory.items() if op == "[CUDA memset]"]
    memcpy = [r for op, r in memory.items() if op.startswith("[CUDA memcpy")]
    for table, rows in (("CUPTI_ACTIVITY_KIND_MEMCPY", memcpy), ("CUPTI_ACTIVITY_KIND_MEMSET", memset)):
        if table in t:
            n, total, size = con.execute(f"SELECT count(*), sum(end - start), sum(bytes) FROM {table}").fetchone()
            assert sum(r["count"] for r in rows) == n
            assert sum(r["total_ns"] for r in rows) == total
            assert sum(r["total_bytes"] for r in rows) == size
        else:
            assert rows == []
    n, total = con.execute("SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    api = tl.to_json()["api"]
    assert sum(r["num_calls"] for r in api) == n
    assert sum(r["total_ns"] for r in api) == total
    # CUPTI's callback versions are gone from the names, as in cuda_api_sum
    assert not any(r["name"].endswith(("_v3020", "_v7000")) for r in api)


def test_memcpy_kinds_are_named_like_nsys_even_without_the_enum_table():
    """Schema 2.9.1 (nsys 2022.2) has no ENUM_CUDA_MEMCPY_OPER: the copy kind still gets its name."""
    for path in SQLITE:
        con = ro(path)
        t = tables_of(con)
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in t and "ENUM_CUDA_MEMCPY_OPER" not in t:
            ops = {r["operation"] for r in read_any(path).to_json()["memory"]}
            assert ops and all(op.startswith("[CUDA memcpy ") and "kind" not in op for op in ops)
            return
    pytest.skip("every fixture with memcpy has the enum table")


NVTX_SQLITE = [p for p in SQLITE if "NVTX_EVENTS" in tables_of(ro(p))]


@pytest.mark.parametrize("path", NVTX_SQLITE, ids=lambda p: p.name.split("__")[0])
def test_nvtx_kernel_summary_equals_sql_join(path, tmp_path):
    """nvtx_kern_sum: a kernel is in a range when the runtime call that launched it lies inside the
    range on the same thread; the kernel and the call share the correlation id within a process."""
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    copy.chmod(0o644)
    con = sqlite3.connect(copy)
    con.execute("CREATE INDEX rt ON CUPTI_ACTIVITY_KIND_RUNTIME(globalTid, start)")  # only for speed
    expected = {(r, k): (n, total) for r, k, n, total in con.execute("""
        SELECT coalesce(n.text, ns.value), ks.value, count(*), sum(k.end - k.start)
        FROM NVTX_EVENTS n LEFT JOIN StringIds ns ON ns.id = n.textId
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.globalTid = n.globalTid AND r.start >= n.start AND r.start <= n.end AND r.end <= n.end
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k
          ON k.correlationId = r.correlationId AND k.globalPid = (r.globalTid >> 24) << 24
        JOIN StringIds ks ON ks.id = k.demangledName
        WHERE n.eventType IN (59, 60, 70, 71) AND n.end IS NOT NULL
        GROUP BY 1, 2""")}
    assert expected, "the fixture should have kernels inside NVTX ranges"
    tl = read_any(path)
    got = {(r, k): (n, total) for r, k, n, total in
           tl.nvtx_kernels[["range", "name", "instances", "total_ns"]].itertuples(index=False)}
    assert got == expected
    ranges = {r: n for r, n in con.execute(
        "SELECT coalesce(n.text, ns.value), count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds ns ON ns.id = n.textId "
        "WHERE n.eventType IN (59, 60, 70, 71) AND n.end IS NOT NULL GROUP BY 1")}
    assert dict(zip(tl.nvtx["range"], tl.nvtx["instances"])) == ranges


def test_launch_overhead_of_a_range_equals_its_definition_over_sql():
    """(range span - time covered by its kernels) / launches, median over the range's instances."""
    path = next((p for p in NVTX_SQLITE if "llama3" in p.name), None)
    if path is None:
        pytest.skip("the llama3 NVTX fixture is not there")
    con = ro(path)
    rng = con.execute("""SELECT n.text, count(DISTINCT n.rowid) c FROM NVTX_EVENTS n
                         JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start >= n.start
                              AND r.end <= n.end
                         JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                         GROUP BY n.text ORDER BY c DESC, n.text LIMIT 1""").fetchone()[0]
    per_instance = []
    for rid, r_start, r_end in con.execute("SELECT rowid, start, end FROM NVTX_EVENTS WHERE text = ?", (rng,)).fetchall():
        ks = con.execute("""SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k
                            ON k.correlationId = r.correlationId AND k.globalPid = (r.globalTid >> 24) << 24
                            JOIN NVTX_EVENTS n ON n.rowid = ? AND r.globalTid = n.globalTid
                            WHERE r.start >= ? AND r.end <= ? ORDER BY k.start""", (rid, r_start, r_end)).fetchall()
        if not ks:
            continue
        busy, cur = 0, None
        for s, e in ks:
            if cur is None or s > cur[1]:
                busy += 0 if cur is None else cur[1] - cur[0]
                cur = [s, e]
            else:
                cur[1] = max(cur[1], e)
        busy += cur[1] - cur[0]
        span = max(r_end, max(e for _, e in ks)) - r_start
        per_instance.append((span - busy) / len(ks))
    assert len(per_instance) > 1
    tl = read_any(path, range_name=rng)
    assert tl.launch_overhead["instances"] == len(per_instance)
    assert tl.launch_overhead_ns == pytest.approx(statistics.median(per_instance))
    absent = lab_cli("timeline", path, "--range", "no such range", "--json")   # a typo is refused, not ignored
    assert absent.exit_code == 2 and "no such range" in absent.output


def test_export_without_metadata_or_gpu_table_still_reads():
    """2020.5 wrote no metadata table; the trimmed 2026.2 file has no TARGET_INFO_GPU."""
    seen = 0
    for path in SQLITE:
        t = tables_of(ro(path))
        if not ({"META_DATA_EXPORT", "EXPORT_META_DATA"} & t) or "TARGET_INFO_GPU" not in t:
            tl = read_any(path)
            assert len(tl.kernels) > 0
            seen += 1
    assert seen >= 1


def test_json_schema_via_cli():
    path = NVTX_SQLITE[0]
    res = lab_cli("timeline", path, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["source"] == "nsys"
    assert set(doc) >= {"source", "kernels", "nvtx", "memory", "api"}
    for k in doc["kernels"]:
        assert set(k) >= {"name", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns"}
    assert any(r["kernels"] for r in doc["nvtx"])


def test_text_output_runs():
    res = lab_cli("timeline", SQLITE[0], "--top", "3")
    assert res.exit_code == 0, res.output
    assert "cuda_gpu_kern_sum" in res.output


def test_mangled_kernel_names_are_demangled():
    if not shutil.which("c++filt"):
        pytest.importorskip("cxxfilt")
    for path in SQLITE:
        con = ro(path)
        if "mangledName" not in {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}:
            continue
        row = con.execute("SELECT m.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds m "
                          "ON m.id = k.mangledName JOIN StringIds s ON s.id = k.shortName "
                          "WHERE m.value LIKE '\\_Z%' ESCAPE '\\' LIMIT 1").fetchone()
        if row:
            mangled, short = row
            [demangled] = demangle([mangled])
            assert demangled != mangled and short in demangled and "(" in demangled
            return
    pytest.skip("no fixture keeps a mangled name")


# ------------------------------------------------------------------------------ stats CSV

def csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


KERN_CSVS = [p for p in CSVS if "kern" in p.name]


@pytest.mark.parametrize("path", KERN_CSVS, ids=lambda p: p.stem[-20:])
def test_kernel_csv_old_and_new_headers(path):
    header, rows = csv_rows(path)
    total_col = header.index("Total Time (ns)")
    expected = {r[header.index("Name")]: (int(r[header.index("Instances")]), int(r[total_col])) for r in rows}
    tl = read_any(path)
    got = {r["name"]: (r["instances"], r["total_ns"]) for r in tl.to_json()["kernels"]}
    assert got == expected
    has_median = "Med (ns)" in header
    assert all((r["med_ns"] is not None) == has_median for r in tl.to_json()["kernels"])


def test_quoted_header_parses_the_same(tmp_path):
    """Real files have unquoted headers; some tools quote every field. The same rows, all quoted."""
    src = next(p for p in KERN_CSVS if "cuda_gpu_kern_sum" in p.name)
    header, rows = csv_rows(src)
    quoted = tmp_path / src.name
    with open(quoted, "w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows([header, *rows])
    assert quoted.read_text().startswith('"Time (%)","Total Time (ns)"')
    a, b = read_any(src).kernels, read_any(quoted).kernels
    assert a.equals(b)


def test_memory_csv():
    path = next(p for p in CSVS if "mem_time_sum" in p.name)
    header, rows = csv_rows(path)
    expected = {r[header.index("Operation")]: (int(r[header.index("Count")]), int(r[header.index("Total Time (ns)")]))
                for r in rows}
    got = {r["operation"]: (r["count"], r["total_ns"]) for r in read_any(path).to_json()["memory"]}
    assert got == expected


def test_stats_stdout_with_progress_lines_and_skipped_notices():
    path = next(p for p in CSVS if "nsys_stats" in p.name)
    lines = path.read_text().splitlines()
    header_at = next(i for i, ln in enumerate(lines) if ln.startswith("Time (%)"))
    block_rows = 0
    for ln in lines[header_at + 1:]:
        if not ln.strip():
            break
        block_rows += 1
    parsed = nsys.parse_stats_csv(path.read_text())
    assert [(b.report, len(b.rows)) for b in parsed.blocks] == [("osrt_sum", block_rows)]
    assert len(parsed.skipped) == sum(ln.startswith("SKIPPED:") for ln in lines)
    assert ("cuda_gpu_kern_sum", next(ln for ln in lines if "does not contain CUDA kernel data" in ln)[9:]) \
        in parsed.skipped


# ------------------------------------------------------------------------------ bad input

def _no_cuda_export(tmp_path: Path) -> Path:
    """A real export with its CUDA activity deleted: nsys's schema, nothing to summarise."""
    src = next(p for p in SQLITE if "mock" in p.name)
    out = tmp_path / "no_cuda.sqlite"
    shutil.copy(src, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    for t in tables_of(con):
        if t.startswith("CUPTI_ACTIVITY_KIND_"):
            con.execute(f"DELETE FROM {t}")
    con.commit()
    con.close()
    return out


def _other_sqlite(tmp_path: Path) -> Path:
    out = tmp_path / "other.sqlite"
    con = sqlite3.connect(out)
    con.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    return out


def _osrt_only_csv(tmp_path: Path) -> Path:
    """The osrt_sum block of the real multi-report stdout, alone in a file without a report name."""
    lines = next(p for p in CSVS if "nsys_stats" in p.name).read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Time (%)"))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    out = tmp_path / "summary.csv"
    out.write_text("\n".join(lines[start:end]) + "\n")
    return out


@pytest.mark.parametrize("make, message", [
    (lambda tmp: FIXTURES / "SOURCES.md", "no nsys stats CSV table"),
    (lambda tmp: tmp / "missing.sqlite", "no such file"),
    (lambda tmp: (tmp / "empty.sqlite").write_bytes(b"") or tmp / "empty.sqlite", "is empty"),
    (_other_sqlite, "not an Nsight Systems export"),
    (_no_cuda_export, "no CUDA activity"),
    (lambda tmp: next(p for p in CSVS if "nsys_stats" in p.name), "osrt_sum"),
    (_osrt_only_csv, "none of which is a CUDA kernel"),
    (lambda tmp: tmp, "is a directory"),
])
def test_bad_input_exits_2_with_a_message(make, message, tmp_path):
    res = lab_cli("timeline", make(tmp_path), "--json")
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_ncu_report_is_sent_to_lab_analyze():
    reps = sorted(NCU_FIXTURES.glob("*.ncu-rep"))
    if not reps:
        pytest.skip("no ncu fixture")
    res = lab_cli("timeline", reps[0])
    assert res.exit_code == 2 and "lab analyze" in res.output
    # as a stored run keeps it (profile.ncu-rep.xz)
    packed = next(iter(sorted((Path(__file__).resolve().parent / "fixtures" / "ncu").glob("*.ncu-rep.xz"))))
    res = lab_cli("timeline", packed)
    assert res.exit_code == 2 and "Nsight Compute report" in res.output and "lab analyze" in res.output


def test_nsys_rep_without_nsys_says_nsys_is_needed(tmp_path, monkeypatch):
    # The file is never opened: without nsys there is nothing that could read it.
    rep = tmp_path / "capture.nsys-rep"
    rep.write_bytes(b"\0")
    monkeypatch.setattr(nsys, "find_nsys", lambda: None)
    res = lab_cli("timeline", rep)
    assert res.exit_code == 2 and "needs nsys" in res.output


def test_bad_input_through_the_installed_command():
    res = subprocess.run([sys.executable, "-m", "lab.cli", "timeline", str(FIXTURES / "SOURCES.md")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "error:" in res.stderr and "Traceback" not in res.stderr


def test_cpu_only_torch_trace_is_refused_but_its_range_is_read(tmp_path):
    """A real torch.profiler trace recorded on this CPU machine: the record_function range is
    there, CUDA activity is not."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    from lab.profilers import kineto

    a = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("lab cpu range"):
            torch.mm(a, a)
    trace = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(trace))
    doc = json.loads(trace.read_text())
    [ev] = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] == "lab cpu range"]
    events = kineto.read_trace(trace)
    [row] = events.nvtx[events.nvtx["name"] == "lab cpu range"].itertuples()
    assert row.end_ns - row.start_ns == round(ev["dur"] * 1000)
    res = lab_cli("timeline", trace)
    assert res.exit_code == 2 and "ProfilerActivity.CUDA" in res.output


# ------------------------------------------------------------------------------ nsys status, collection

def test_nsys_status_explains_itself():
    st = nsys.nsys_status()
    assert st.reason
    if not st.found:
        assert "not on PATH" in st.reason and st.version is None and not st.can_write_reports
    if st.found and not st.can_write_reports:
        assert "QdstrmImporter" in st.reason or "does not run" in st.reason


@pytest.mark.parametrize("layout, found", [
    (["nsight-systems/2025.1/target-linux-x64/nsys", "nsight-systems/2025.1/host-linux-x64/QdstrmImporter"], True),
    (["nsight-systems/2025.1/bin/nsys", "nsight-systems/2025.1/host-linux-x64/QdstrmImporter"], True),
    (["cuda/bin/nsys", "cuda/nsight-systems-2023.4/host-linux-x64/QdstrmImporter"], True),
    (["nsight-compute/2025.3.1/host/target-linux-x64/nsys"], False),   # the GPU machine's copy
])
def test_importer_is_looked_for_where_packages_put_it(layout, found, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    for rel in layout:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).touch()
    assert (nsys.find_importer(tmp_path / layout[0]) is not None) == found


def test_collect_timeline_reports_a_failing_child(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('child refuses', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(LabError, match="exit 3.*child refuses"):
        collect_timeline(argv, tmp_path / "tl", "lab test range", repeats=2, use_nsys=False)
    assert (tmp_path / "tl" / "torch_profiler.log").is_file()


def test_capture_window_overhead_equals_sql():
    """Where an nsys capture lacks its range, the window from the first launch call to the last
    kernel end stands in, and says so."""
    from lab.profilers.timeline import capture_window_overhead

    path = next(p for p in SQLITE if "cuda-perf-sandbox" in p.name)
    con = ro(path)
    rows = con.execute("SELECT r.start, k.start, k.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
                       "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId").fetchall()
    assert len(rows) == 1   # one vector-add launch in this capture
    call_start, k_start, k_end = rows[0]
    over = capture_window_overhead(nsys.read_sqlite(path), launches=1)
    assert over["launch_overhead_ns"] == (k_end - call_start) - (k_end - k_start)
    assert "capture window" in over["range"]


def test_launch_overhead_splits_first_kernel_delay_from_steady_gaps():
    """Arithmetic of the split on a hand-made event list (not a stand-in for an nsys file): one range
    of 3 launches starting 1000 ns before the first kernel, kernels 100 ns long and 10/30 ns apart."""
    import pandas as pd

    from lab.profilers.timeline import launch_overhead

    nvtx = pd.DataFrame({"name": ["r"], "start_ns": [0], "end_ns": [1500], "kernels": [3],
                         "kernel_busy_ns": [300], "span_ns": [1340]})
    kernels = pd.DataFrame({"nvtx_range": ["r"] * 3, "start_ns": [1000, 1110, 1240], "end_ns": [1100, 1210, 1340]})
    lo = launch_overhead(nvtx, "r", 3, kernels)
    assert lo["launch_overhead_ns"] == (1340 - 300) / 3
    assert lo["first_kernel_delay_ns_median"] == 1000
    assert lo["kernel_gap_ns_median"] == 20  # gaps 10 and 30
    assert "kernel_gap_ns_median" not in launch_overhead(nvtx, "r", 3)

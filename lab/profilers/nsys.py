"""Nsight Systems: find nsys and say honestly whether it can write reports, capture the lab's child
under it, and read what it writes -- SQLite exports (schemas of nsys 2020.5 to 2026.x), `.nsys-rep`
(through `nsys export`), and `nsys stats --format csv` output -- into pandas.

Reading is split from summarising. `read_sqlite` returns the raw events as `EventTables`, in the
columns below; `lab.profilers.timeline` turns them into the cuda_gpu_kern_sum / nvtx_kern_sum /
cuda_gpu_mem_time_sum / cuda_api_sum tables, and `lab.profilers.kineto` fills the same EventTables
from a torch.profiler trace, so both sources are summarised by one piece of code.
`read_stats_csv` returns summaries directly, since that is all a stats CSV holds.

Nothing here imports torch: `lab timeline FILE` runs on a machine without a GPU.
"""

from __future__ import annotations

import csv
import functools
import glob
import os
import re
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from lab import children
from lab.demangle import demangle
from lab.errors import LabError

# ----------------------------------------------------------------------------------- raw events

KERNEL_COLUMNS = ["name", "start_ns", "end_ns", "device_id", "stream_id", "process_id", "correlation_id",
                  "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                  "shared_memory_static_bytes", "shared_memory_dynamic_bytes", "shared_memory_bytes"]
RUNTIME_COLUMNS = ["name", "start_ns", "end_ns", "process_id", "thread_id", "correlation_id"]
NVTX_COLUMNS = ["name", "style", "domain", "start_ns", "end_ns", "process_id", "thread_id"]
MEMORY_COLUMNS = ["operation", "start_ns", "end_ns", "bytes", "device_id", "stream_id", "process_id",
                  "correlation_id"]


@dataclass
class EventTables:
    """Raw events of one capture, one row per event, times in ns on one clock.

    kernels: one row per kernel execution (KERNEL_COLUMNS). runtime: CUDA runtime/driver API calls
    (RUNTIME_COLUMNS); a call launched a kernel when (process_id, correlation_id) match.
    nvtx: closed NVTX ranges, or torch.profiler record_function ranges (NVTX_COLUMNS).
    memory: memcpy and memset operations (MEMORY_COLUMNS), named as nsys names them.
    """

    source: str                       # "nsys" or "torch.profiler"
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    nvtx: pd.DataFrame
    memory: pd.DataFrame
    meta: dict = field(default_factory=dict)   # tool version, GPU names, input path


def empty_frame(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in ("name", "style", "domain", "operation") else "int64")
                         for c in columns})


# ---------------------------------------------------------------------------------- nsys status

class NsysStatus(NamedTuple):
    found: bool
    can_write_reports: bool
    version: str | None
    reason: str      # one sentence: where nsys is and why it can or cannot write a .nsys-rep


# Where installers put nsys, besides PATH: the Nsight Systems packages, the CUDA toolkit, and the
# copy inside Nsight Compute (which, on the lab's GPU machine, records but cannot import).
_NSYS_GLOBS = ["/opt/nvidia/nsight-systems/*/bin/nsys", "/usr/local/cuda*/bin/nsys",
               "/usr/local/cuda*/nsight-systems-*/bin/nsys", "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys"]


def _candidates() -> list[Path]:
    found: list[Path] = []
    explicit = os.environ.get("LAB_NSYS")
    if explicit:
        found.append(Path(explicit))
    on_path = shutil.which("nsys")
    if on_path:
        found.append(Path(on_path))
    for pattern in _NSYS_GLOBS:
        found += [Path(p) for p in sorted(glob.glob(pattern), reverse=True)]   # newest version first
    unique: list[Path] = []
    for p in found:
        if p.is_file() and os.access(p, os.X_OK) and p.resolve() not in [u.resolve() for u in unique]:
            unique.append(p)
    return unique


def find_importer(nsys: Path) -> Path | None:
    """QdstrmImporter turns the raw .qdstrm stream into a .nsys-rep; without it nsys profile leaves
    only the stream. Packages put it in host-linux-<arch>/ beside the target-linux-<arch>/ or bin/
    folder that holds nsys (the CUDA toolkit one level further, under nsight-systems-<version>/)."""
    real = nsys.resolve()
    for base in (real.parent, real.parent.parent, real.parent.parent.parent):
        for pattern in ("QdstrmImporter", "host-linux-*/QdstrmImporter", "nsight-systems*/host-linux-*/QdstrmImporter"):
            hits = sorted(base.glob(pattern))
            if hits:
                return hits[0]
    on_path = shutil.which("QdstrmImporter")
    return Path(on_path) if on_path else None


@functools.lru_cache(maxsize=None)
def nsys_version(nsys: Path) -> str:
    try:
        out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"nsys at {nsys} does not run: {e}")
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", out.stdout + out.stderr)
    if out.returncode != 0 or not m:
        raise LabError(f"nsys at {nsys} does not run: {(out.stderr or out.stdout).strip()[-200:]}")
    return m.group(1)


def _status_of(nsys: Path) -> NsysStatus:
    try:
        version = nsys_version(nsys)
    except LabError as e:
        return NsysStatus(True, False, None, str(e))
    importer = find_importer(nsys)
    if importer is None:
        return NsysStatus(True, False, version,
                          f"nsys {version} at {nsys} writes .qdstrm but no .nsys-rep: its QdstrmImporter is missing "
                          "(none in host-linux-*/ beside it, nor on PATH)")
    return NsysStatus(True, True, version, f"nsys {version} at {nsys} (importer {importer})")


def nsys_status() -> NsysStatus:
    """Is there an nsys that can write reports? Probed without a capture (on the lab's GPU machine
    a capture by the importer-less copy writes a 2 GB .qdstrm), by running `nsys --version` and
    looking for the QdstrmImporter the capture needs. Set LAB_NSYS to choose a binary."""
    explicit = os.environ.get("LAB_NSYS")
    if explicit and not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
        return NsysStatus(False, False, None, f"LAB_NSYS={explicit} is not an executable file")
    candidates = _candidates()
    if not candidates:
        return NsysStatus(False, False, None,
                          "nsys not on PATH (nor under /opt/nvidia/nsight-systems, /usr/local/cuda*, nsight-compute)")
    statuses = [_status_of(c) for c in candidates]
    for st in statuses:
        if st.can_write_reports:
            return st
    return statuses[0]


def find_nsys() -> Path | None:
    """The nsys `nsys_status` vouches for (one that can write reports), else the first found."""
    candidates = _candidates()
    for c in candidates:
        if _status_of(c).can_write_reports:
            return c
    return candidates[0] if candidates else None


# ------------------------------------------------------------------------------ capture + export

class NoReport(Exception):
    """nsys ran the child but wrote no .nsys-rep: the caller falls back and records this reason."""


def profile_command(nsys: Path, target_argv: list[str], output_stem: Path, range_name: str) -> list[str]:
    if "@" in range_name:
        raise LabError(f"NVTX range {range_name!r} contains '@', which nsys --nvtx-capture reads as a domain separator")
    return [str(nsys), "profile", "--trace=cuda,nvtx,osrt",
            "--capture-range=nvtx", f"--nvtx-capture={range_name}", "--capture-range-end=stop",
            # CPU sampling and context switches need perf permissions and add nothing to a kernel timeline
            "--sample=none", "--cpuctxsw=none",
            "--force-overwrite=true", f"--output={output_stem}", *target_argv]


def profile(target_argv: list[str], output_stem: Path, range_name: str, env: dict | None = None,
            timeout_s: float = 900, log_path: Path | None = None) -> Path:
    """Run the child under nsys, capturing only the NVTX range; returns the .nsys-rep.

    Raises NoReport, with nsys's own words, when nsys ran but left no report (a .qdstrm without
    importer, a range that never opened, nsys failing): the caller falls back to torch.profiler and
    records why. Raises LabError when a report exists but the child failed, or nsys hung."""
    nsys = find_nsys()
    if nsys is None:
        raise NoReport("nsys not on PATH")
    output_stem = Path(output_stem)
    cmd = profile_command(nsys, target_argv, output_stem, range_name)
    child_env = dict(env if env is not None else os.environ)
    # nsys matches --nvtx-capture against registered NVTX strings only, unless told otherwise;
    # torch.cuda.nvtx.range_push does not register its strings.
    child_env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    # nsys stages its .qdstrm under TMPDIR before importing it: keep it where we can find and delete it
    scratch = output_stem.parent / f"{output_stem.name}.nsys-tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    child_env["TMPDIR"] = str(scratch)
    try:
        try:
            out = children.run(cmd, capture_output=True, text=True, env=child_env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise LabError(f"nsys profile ran past {timeout_s:.0f} s: {' '.join(cmd)}")
        text = out.stdout + out.stderr
        if log_path is not None:
            Path(log_path).write_text(" ".join(cmd) + "\n\n" + text)
        rep = output_stem.with_name(output_stem.name + ".nsys-rep")
        if rep.is_file():
            if out.returncode != 0:
                raise LabError(f"the profiled child failed under nsys (exit {out.returncode}): {_tail(text)}")
            return rep
        streams = [Path(p) for p in glob.glob(f"{glob.escape(str(output_stem))}*.qdstrm")] + list(scratch.rglob("*.qdstrm"))
        if streams:
            size = sum(p.stat().st_size for p in streams)
            for p in streams:  # gigabytes nobody can open without the importer: keep them out of the run
                p.unlink()
            raise NoReport(f"nsys at {nsys} wrote .qdstrm ({size / 1e9:.2f} GB, deleted) but no .nsys-rep: "
                           f"its QdstrmImporter is missing or failed ({_tail(text, 200)})")
        if out.returncode != 0:
            raise NoReport(f"nsys profile failed (exit {out.returncode}): {_tail(text, 300)}")
        raise NoReport(f"nsys captured nothing: the NVTX range {range_name!r} never opened under nsys "
                       f"({_tail(text, 300)})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def export_sqlite(rep: Path, out: Path | None = None, timeout_s: float = 600) -> Path:
    """`nsys export --type sqlite`: the .nsys-rep format is private to nsys; its SQLite is public."""
    rep = Path(rep)
    nsys = find_nsys()
    if nsys is None:
        raise LabError(f"{rep} is an Nsight Systems report; reading it needs nsys to export it to SQLite, "
                       "and nsys is not on PATH",
                       hint=f"run `nsys export --type sqlite {rep.name}` where nsys is installed, then pass the .sqlite")
    out = Path(out) if out else rep.with_suffix(".sqlite")
    cmd = [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(rep)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LabError(f"nsys export ran past {timeout_s:.0f} s on {rep}")
    if res.returncode != 0 or not out.is_file():
        raise LabError(f"nsys export could not read {rep}: {_tail(res.stdout + res.stderr)}")
    return out


def _tail(text: str, n: int = 600) -> str:
    text = text.strip()
    return text[-n:] if text else "(no output)"


# ------------------------------------------------------------------------------ SQLite reading

SQLITE_MAGIC = b"SQLite format 3\x00"
# NVTX_EVENTS.eventType values nsys writes for ranges (59/60 NVTX, 70/71 NVTXT); 75 creates a domain.
NVTX_RANGE_STYLES = {59: "PushPop", 60: "StartEnd", 70: "PushPop", 71: "StartEnd"}
NVTX_DOMAIN_CREATE = 75
# CUpti_ActivityMemcpyKind, for exports older than the ENUM_CUDA_MEMCPY_OPER table (schema < 3.0).
MEMCPY_KIND_LABELS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                      4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                      8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device",
                      12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}
# nsys keeps the pid in the upper bits of globalTid; globalPid is globalTid with the tid bits cleared.
_PID_UNIT = 1 << 24
# CUPTI names runtime calls with their callback version (cudaLaunchKernel_v7000); cuda_api_sum
# drops it. Only the 4- and 5-digit CUPTI suffixes: cuMemAlloc_v2 is the real driver symbol.
_CUPTI_VERSION_SUFFIX = re.compile(r"_v\d{4,5}$")


def _connect(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise LabError(f"{path}: no such file")
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise LabError(f"{path} is not an SQLite database")
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return con
    except sqlite3.DatabaseError as e:
        raise LabError(f"{path} is not a readable SQLite database: {e}")


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def export_metadata(con: sqlite3.Connection, tables: set[str]) -> dict:
    """nsys <= 2022.x named the table EXPORT_META_DATA, later META_DATA_EXPORT; 2020.x wrote none."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables:
            return dict(con.execute(f"SELECT name, value FROM {table}").fetchall())
    return {}


def _gpu_names(con: sqlite3.Connection, tables: set[str]) -> list[str]:
    for table in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"):   # the second in 2020.x; neither in trimmed files
        if table in tables and "name" in _columns(con, table):
            return [r[0] for r in con.execute(f"SELECT DISTINCT name FROM {table}") if r[0]]
    return []


def read_sqlite(path: Path) -> EventTables:
    """Read the raw events of an nsys SQLite export. Tables an export lacks (no NVTX trace, no
    memset) read as empty; a database with none of nsys's tables is refused."""
    path = Path(path)
    con = _connect(path)
    try:
        tables = _tables(con)
        activity = {t for t in tables if t.startswith("CUPTI_ACTIVITY_KIND_")} | ({"NVTX_EVENTS"} & tables)
        if not activity and "StringIds" not in tables:
            what = ", ".join(sorted(tables)[:6]) or "no tables at all"
            raise LabError(f"{path} is an SQLite database but not an Nsight Systems export "
                           f"(it has {what}; nsys writes StringIds and CUPTI_ACTIVITY_KIND_* tables)")
        strings = dict(con.execute("SELECT id, value FROM StringIds").fetchall()) if "StringIds" in tables else {}
        meta = export_metadata(con, tables)
        events = EventTables(
            source="nsys",
            kernels=_read_kernels(con, tables, strings),
            runtime=_read_runtime(con, tables, strings),
            nvtx=_read_nvtx(con, tables, strings),
            memory=_read_memory(con, tables),
            meta={"input": str(path), "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
                  "schema_version": meta.get("EXPORT_SCHEMA_VERSION"), "gpus": _gpu_names(con, tables)},
        )
    except sqlite3.DatabaseError as e:
        raise LabError(f"{path}: cannot read it as an nsys export: {e}")
    finally:
        con.close()
    return events


def _string(strings: dict, value, fallback_value=None) -> str | None:
    """Names are StringIds ids; files cut down by hand can lack some, so fall back, then say so."""
    if isinstance(value, str):
        return value
    if value in strings:
        return strings[value]
    if isinstance(fallback_value, str):
        return fallback_value
    if fallback_value in strings:
        return strings[fallback_value]
    return None if value is None else f"[StringId {value} missing from StringIds]"


def _read_kernels(con, tables, strings) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if table not in tables:
        return empty_frame(KERNEL_COLUMNS)
    cols = _columns(con, table)
    # Since ~2021 both columns exist; demangledName is what cuda_gpu_kern_sum groups by by default.
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    short_col = "shortName" if "shortName" in cols else name_col
    wanted = {"start": "start_ns", "end": "end_ns", "deviceId": "device_id", "streamId": "stream_id",
              "globalPid": "process_id", "correlationId": "correlation_id", "gridX": "grid_x", "gridY": "grid_y",
              "gridZ": "grid_z", "blockX": "block_x", "blockY": "block_y", "blockZ": "block_z",
              "registersPerThread": "registers_per_thread", "staticSharedMemory": "shared_memory_static_bytes",
              "dynamicSharedMemory": "shared_memory_dynamic_bytes"}
    present = [c for c in wanted if c in cols]
    df = pd.read_sql_query(f"SELECT {name_col} AS _name, {short_col} AS _short, "
                           + ", ".join(f'"{c}" AS {wanted[c]}' for c in present) + f" FROM {table}", con)
    df["name"] = demangle([_string(strings, n, s) for n, s in zip(df["_name"], df["_short"])])
    df = df.drop(columns=["_name", "_short"])
    for c in KERNEL_COLUMNS:
        if c not in df:
            df[c] = pd.NA
    df["shared_memory_bytes"] = df["shared_memory_static_bytes"] + df["shared_memory_dynamic_bytes"]
    return df[KERNEL_COLUMNS].sort_values("start_ns", kind="stable").reset_index(drop=True)


def _read_runtime(con, tables, strings) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if table not in tables:
        return empty_frame(RUNTIME_COLUMNS)
    df = pd.read_sql_query(f"SELECT nameId, start AS start_ns, end AS end_ns, globalTid AS thread_id, "
                           f"correlationId AS correlation_id FROM {table}", con)
    df["name"] = [_CUPTI_VERSION_SUFFIX.sub("", _string(strings, n) or "") for n in df.pop("nameId")]
    df["process_id"] = df["thread_id"] // _PID_UNIT * _PID_UNIT
    return df[RUNTIME_COLUMNS]


def _read_nvtx(con, tables, strings) -> pd.DataFrame:
    if "NVTX_EVENTS" not in tables:
        return empty_frame(NVTX_COLUMNS)
    cols = _columns(con, "NVTX_EVENTS")
    text_id = "textId" if "textId" in cols else "NULL"   # registered strings live in StringIds
    domain = "domainId" if "domainId" in cols else "0"
    rows = pd.read_sql_query(
        f"SELECT eventType, text, {text_id} AS textId, {domain} AS domainId, start AS start_ns, "
        f"end AS end_ns, globalTid AS thread_id FROM NVTX_EVENTS", con)
    domains = {d: t for d, t in rows.loc[rows.eventType == NVTX_DOMAIN_CREATE, ["domainId", "text"]].itertuples(index=False)}
    ranges = rows[rows.eventType.isin(list(NVTX_RANGE_STYLES)) & rows.end_ns.notna()].copy()
    ranges["name"] = [t if isinstance(t, str) else (_string(strings, int(i)) if pd.notna(i) else "")
                      for t, i in zip(ranges["text"], ranges["textId"])]
    ranges["style"] = ranges["eventType"].map(NVTX_RANGE_STYLES)
    ranges["domain"] = [domains.get(d, "") if pd.notna(d) else "" for d in ranges["domainId"]]
    ranges["end_ns"] = ranges["end_ns"].astype("int64")
    ranges["process_id"] = ranges["thread_id"] // _PID_UNIT * _PID_UNIT
    return ranges[NVTX_COLUMNS].reset_index(drop=True)


def _read_memory(con, tables) -> pd.DataFrame:
    parts = []
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        df = pd.read_sql_query("SELECT copyKind, start AS start_ns, end AS end_ns, bytes, deviceId AS device_id, "
                               "streamId AS stream_id, globalPid AS process_id, correlationId AS correlation_id "
                               "FROM CUPTI_ACTIVITY_KIND_MEMCPY", con)
        labels = dict(MEMCPY_KIND_LABELS)
        if "ENUM_CUDA_MEMCPY_OPER" in tables:
            labels.update(dict(con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER").fetchall()))
        df["operation"] = [f"[CUDA memcpy {labels.get(k, f'kind {k}')}]" for k in df.pop("copyKind")]
        parts.append(df)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        df = pd.read_sql_query("SELECT start AS start_ns, end AS end_ns, bytes, deviceId AS device_id, "
                               "streamId AS stream_id, globalPid AS process_id, correlationId AS correlation_id "
                               "FROM CUPTI_ACTIVITY_KIND_MEMSET", con)
        df["operation"] = "[CUDA memset]"
        parts.append(df)
    if not parts:
        return empty_frame(MEMORY_COLUMNS)
    return pd.concat(parts, ignore_index=True)[MEMORY_COLUMNS]


# -------------------------------------------------------------------------------- stats CSV

# Old (<= 2021) report names and the names since nsys 2022.
REPORT_ALIASES = {"gpukernsum": "cuda_gpu_kern_sum", "cudaapisum": "cuda_api_sum",
                  "gpumemtimesum": "cuda_gpu_mem_time_sum", "gpumemsizesum": "cuda_gpu_mem_size_sum",
                  "nvtxsum": "nvtx_sum", "nvtxppsum": "nvtx_pushpop_sum", "nvtxkernsum": "nvtx_kern_sum",
                  "osrtsum": "osrt_sum", "kernexecsum": "cuda_kern_exec_sum", "gpusum": "cuda_gpu_sum",
                  "gputrace": "cuda_gpu_trace", "cudaapitrace": "cuda_api_trace"}
KNOWN_REPORTS = sorted(set(REPORT_ALIASES) | set(REPORT_ALIASES.values())
                       | {"nvtx_startend_sum", "cuda_gpu_kern_gb_sum", "cuda_api_gpu_sum", "nvtx_gpu_proj_sum",
                          "cuda_gpu_mem_size_sum", "um_sum", "openmp_sum"}, key=len, reverse=True)
# Which lab table each report feeds; other reports (osrt_sum, ...) are parsed but not used.
REPORT_TABLE = {"cuda_gpu_kern_sum": "kernels", "cuda_api_sum": "api", "cuda_gpu_mem_time_sum": "memory",
                "cuda_gpu_mem_size_sum": "memory_size", "nvtx_sum": "nvtx", "nvtx_pushpop_sum": "nvtx",
                "nvtx_startend_sum": "nvtx", "nvtx_kern_sum": "nvtx_kernels"}

# Header words in both spellings: "Avg (ns)" since 2022, "Average" before; units in parentheses.
_HEADER_WORDS = {"time": "time_pct", "total time": "total_time", "instances": "instances", "num calls": "num_calls",
                 "calls": "num_calls", "count": "count", "operations": "count", "avg": "avg", "average": "avg",
                 "med": "med", "median": "med", "min": "min", "minimum": "min", "max": "max", "maximum": "max",
                 "stddev": "stddev", "std dev": "stddev", "name": "name", "operation": "operation", "range": "range",
                 "nvtx range": "range", "style": "style", "kernel name": "kernel_name", "nvtx inst": "nvtx_instances",
                 "kern inst": "instances", "pid": "pid", "tid": "tid", "total": "total_size", "gridxyz": "grid",
                 "blockxyz": "block", "category": "category"}
_UNIT_NS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
_UNIT_BYTES = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9}   # nsys mem_size_sum reports decimal megabytes
_PROCESSING = re.compile(r"^Processing \[(?P<db>.*?)\] with \[(?P<report>.*?)\]")
_EXECUTING = re.compile(r"Executing '(?P<report>[^']+)' stats report")


def canonical_report(name: str | None) -> str | None:
    if not name:
        return None
    base = Path(name).name.split(":")[0]
    base = base[:-3] if base.endswith(".py") else base
    return REPORT_ALIASES.get(base, base)


def report_from_filename(path: Path) -> str | None:
    """`nsys stats -o PREFIX` writes PREFIX_<report>.csv; the name is the best hint we have."""
    stem = path.name.lower()
    for r in KNOWN_REPORTS:
        if r in stem:
            return canonical_report(r)
    return None


@dataclass
class CsvBlock:
    report: str | None        # canonical report name, None where nothing says which
    header: list[str]
    rows: list[list[str]]


@dataclass
class StatsCsv:
    blocks: list[CsvBlock]
    skipped: list[tuple[str | None, str]]   # (report, nsys's SKIPPED message)


def _header_key(field_text: str) -> tuple[str | None, str | None]:
    m = re.match(r"^(.*?)\s*\(([^)]*)\)\s*$", field_text.strip())
    word, unit = (m.group(1), m.group(2)) if m else (field_text.strip(), None)
    return _HEADER_WORDS.get(word.strip().lower()), (unit.strip().lower() if unit else None)


def _is_header(fields: list[str]) -> bool:
    if len(fields) < 3:
        return False
    known = sum(1 for f in fields if _header_key(f)[0] is not None)
    numeric = sum(1 for f in fields if re.fullmatch(r"-?[\d.,]+", f.strip() or "x"))
    return known >= 3 and numeric == 0


def parse_stats_csv(text: str, report_hint: str | None = None) -> StatsCsv:
    """Split `nsys stats --format csv` output into its CSV blocks. Accepts quoted or unquoted
    headers, and captured stdout where progress lines ("Processing [...] with [...]",
    "Generating SQLite file") and SKIPPED notices surround the blocks."""
    lines = text.splitlines()
    blocks: list[CsvBlock] = []
    skipped: list[tuple[str | None, str]] = []
    current: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line:
            continue
        m = _PROCESSING.search(line) or _EXECUTING.search(line)
        if m:
            current = canonical_report(m.group("report"))
            continue
        if line.startswith("SKIPPED:"):
            skipped.append((current, line[len("SKIPPED:"):].strip()))
            continue
        fields = next(csv.reader([line]))
        if not _is_header(fields):
            continue   # progress or other noise
        rows = []
        while i < len(lines) and lines[i].strip():
            row = next(csv.reader([lines[i]]))
            if len(row) != len(fields):
                break
            rows.append(row)
            i += 1
        if rows:   # a header-like line with no rows under it is prose quoting a header, not a table
            blocks.append(CsvBlock(current or report_hint, [f.strip() for f in fields], rows))
            current = None
    return StatsCsv(blocks, skipped)


def _infer_report(keys: set[str], frame: pd.DataFrame) -> str | None:
    """Which report a block is when no progress line or file name says: by its columns. An API
    summary has the same columns for CUDA (cuda_api_sum) and the OS runtime (osrt_sum), so the
    names decide: CUDA's all start with cu."""
    if "grid" in keys:
        return "cuda_gpu_kern_gb_sum"
    if {"range", "kernel_name"} <= keys:
        return "nvtx_kern_sum"
    if {"range", "instances"} <= keys:
        return "nvtx_sum"
    if {"operation", "total_ns"} <= keys:
        return "cuda_gpu_mem_time_sum"
    if "operation" in keys and ({"total_bytes", "total_size_unknown_unit"} & keys):
        return "cuda_gpu_mem_size_sum"
    if {"name", "instances", "total_ns"} <= keys:
        return "cuda_gpu_kern_sum"
    if {"name", "num_calls"} <= keys:
        names = frame["name"].astype(str)
        return "cuda_api_sum" if len(names) and names.str.match(r"^cu[A-Z]").all() else None
    return None


def block_frame(block: CsvBlock) -> tuple[str | None, pd.DataFrame]:
    """One CSV block as a DataFrame in the lab's column names, times in ns, sizes in bytes."""
    keys = [_header_key(f) for f in block.header]
    size_block = any(k == "total_size" for k, _ in keys)   # cuda_gpu_mem_size_sum: "Total (MB)", not "Total Time"
    columns, scale = [], {}
    for f, (key, unit) in zip(block.header, keys):
        key = key or f
        if key in ("total_time", "total_size", "avg", "med", "min", "max", "stddev"):
            stat = key.split("_")[0]
            if size_block:
                if unit in _UNIT_BYTES:
                    key = f"{stat}_bytes"
                    scale[key] = _UNIT_BYTES[unit]
                else:   # a size with no unit: keep the number, never guess its unit
                    key = f"{stat}_size_unknown_unit"
            else:
                # the old (2021) format gave a unit only on Total Time; the other columns were ns too
                key = f"{stat}_ns"
                scale[key] = _UNIT_NS.get(unit or "ns", 1)
        columns.append(key)
    df = pd.DataFrame(block.rows, columns=columns)
    text_cols = {"name", "operation", "range", "style", "kernel_name", "category", "grid", "block"}
    for c in df.columns:
        if c in text_cols:
            continue
        try:
            df[c] = pd.to_numeric(df[c].str.replace(",", "", regex=False))
        except (ValueError, TypeError):
            raise LabError(f"column {c!r} of the {block.report or 'nsys stats'} CSV block is not numeric "
                           f"(first value {df[c].iloc[0]!r})")
        if c in scale:
            df[c] = df[c] * scale[c]
    report = block.report or _infer_report(set(df.columns), df)
    return report, df


def read_stats_csv(path: Path) -> tuple[dict[str, pd.DataFrame], StatsCsv]:
    """Summaries from `nsys stats --format csv` output, keyed by lab table name (kernels, api,
    memory, nvtx, nvtx_kernels); also the parsed blocks and SKIPPED notices, for messages."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise LabError(f"{path} is neither text nor an SQLite export, .nsys-rep or torch.profiler trace")
    parsed = parse_stats_csv(text, report_from_filename(path))
    tables: dict[str, pd.DataFrame] = {}
    for block in parsed.blocks:
        report, df = block_frame(block)
        target = REPORT_TABLE.get(report or "")
        if target is None:
            continue
        if target == "memory_size":
            tables["memory_size"] = df
        else:
            tables[target] = df
    return tables, parsed

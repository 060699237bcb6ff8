"""The run store: profiles/<run-id>/ holds manifest.json, typed tables (Parquet) and raw artifacts.
A table of many columns (ncu's metrics) is stored in a long layout, one Parquet row per value, and read back
as the frame that was written (write_table, read_table, read_arrow).

A run directory appears only when complete: everything is written into a hidden staging directory
(`.<run-id>.partial`) that is renamed into place as the last step, so an interrupted run leaves
nothing that `list_runs` would return. `list_runs` searches the store root and its `examples/`.

The manifest's schema is lab.store.manifest.Manifest, one typed record: RunWriter.commit writes
it and Run reads it through that definition, so a field is declared once, and a malformed manifest
is a LabError naming the field.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lab.errors import LabError
from lab.files import replacing, write_json_atomic
from lab.ladder.workspace import active
from lab.store.manifest import Manifest, ManifestError, SCHEMA_VERSION, candidate_label
# Relative on purpose: the store is where the user runs the lab (or the workspace), never the
# package's own folder, which may be site-packages.
DEFAULT_ROOT = Path("profiles")
DURATION = "gpu__time_duration.sum"   # ncu's duration of one kernel launch


# A table of more than LONG_OVER columns (lab.profilers.ncu's metrics: 1-3 kernels by ~1,400-1,600 metrics) is
# stored in the long layout, one Parquet row per value; a narrower one (findings, lines, timelines: at most a few
# dozen columns) stays a plain Parquet table. In the wide layout nearly all of such a file is per-column metadata
# (its entry in the pandas schema JSON, its column chunk's footer and statistics: ~1 KB a column, ~1.6 MB a
# metrics table); the same values long and zstd-compressed take 20-40 KB. One rule on the column count, never on
# the table's name: any wide frame profits, and a narrow one keeps reading as it always did.
LONG_OVER = 64
LAYOUT = b"LAB_LAYOUT"     # the schema metadata key that marks a long file (absent: a plain table)
LONG = b"long-v1"
# The long layout's columns. The frame's values, column-major (its first column's rows, then the next's):
#   row      int64   the value's row in the frame (0, 1, ...)
#   column   string  its column's name
#   number   float64 the value of a float64 column
#   integer  int64   the value of an int64 or bool column (bool as 0/1)
#   text     string  the value of a string column
# (null in the others and where the value is). Before them, the header: entries of row -1, first one whose column
# is null with text = json of df.attrs (pandas' PANDAS_ATTRS, here compressed with the data: the ~57 KB of metric
# units would be written twice, raw and in the Arrow schema, into the footer), then one per column in the frame's
# order with text = its Arrow type. A zero-row frame keeps its columns that way.
_LONG_SCHEMA = pa.schema([("row", pa.int64()), ("column", pa.string()), ("number", pa.float64()),
                          ("integer", pa.int64()), ("text", pa.string())])
# where each Arrow type's values go; a frame with a column of another type (a date, a category, int32) stays wide
_SLOT = {"double": "number", "int64": "integer", "bool": "integer", "string": "text", "large_string": "text",
         "null": None}
_VALUES = ("number", "integer", "text")
_CAST = {"bool": pa.bool_(), "large_string": pa.large_string()}   # types kept in a slot of another type


def write_table(df: "pd.DataFrame", path: Path) -> None:
    """`df.to_parquet(path, index=False)`, without its cost, and a frame of more than LONG_OVER columns in the
    long layout (read_table restores it): pandas deep-copies a frame's attrs (the units of ~1,400 ncu metrics) on
    every column it converts, which made storing one run's metrics table take most of a second; the attrs are
    written once, where pandas keeps them (the schema's PANDAS_ATTRS, which read_parquet restores), or in the long
    layout's header."""
    attrs = df.attrs
    df.attrs = {}
    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
    finally:
        df.attrs = attrs
    if _goes_long(df, table):
        # zstd 9 and no dictionaries: the smallest file of those measured that writes in a few ms (the shipped
        # metrics tables: 20 KB a table, against 25 KB with dictionaries, 23 KB at zstd 3, 19 KB at zstd 19 in 70 ms)
        pq.write_table(_to_long(table, attrs), path, compression="zstd", compression_level=9, use_dictionary=False)
        return
    if attrs:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               b"PANDAS_ATTRS": json.dumps(attrs).encode()})
    pq.write_table(table, path)


def _goes_long(df: "pd.DataFrame", table: pa.Table) -> bool:
    """More than LONG_OVER columns, each of a type the long layout restores as pandas reads it from a plain
    table: unique string names (no index name: pandas keeps those in its schema JSON, which the long file has
    not), Arrow types of _SLOT and pandas dtypes that Arrow's own conversion gives back (float64, int64, bool,
    str; object for strings, bools with None, or only None), never an extension dtype such as Int64 or string."""
    cols = df.columns
    if table.num_columns <= LONG_OVER or isinstance(cols, pd.MultiIndex) or cols.name is not None \
            or not cols.is_unique or not all(isinstance(c, str) for c in cols):
        return False
    for dtype, field in zip(df.dtypes, table.schema):
        if str(field.type) not in _SLOT:
            return False
        if not (isinstance(dtype, np.dtype) and dtype.name in ("float64", "int64", "bool", "object")
                or isinstance(dtype, pd.StringDtype) and dtype.na_value is not pd.NA):   # str, not string
            return False
    return True


def _to_long(table: pa.Table, attrs: dict) -> pa.Table:
    n, m = table.num_rows, table.num_columns
    types = [str(f.type) for f in table.schema]
    h = m + 1
    parts = {"row": [pa.array([-1] * h + list(range(n)) * m, pa.int64())],
             "column": [pa.array([None] + table.column_names + [c for c in table.column_names for _ in range(n)],
                                 pa.string())],
             "text": [pa.array([json.dumps(attrs)] + types, pa.string())]}
    for s in _VALUES:
        parts.setdefault(s, [pa.nulls(h, _LONG_SCHEMA.field(s).type)])
    nulls = {s: pa.nulls(n, _LONG_SCHEMA.field(s).type) for s in _VALUES}
    for col, t in zip(table.columns, types):
        for s in _VALUES:
            if _SLOT[t] != s:
                parts[s].append(nulls[s])
            else:   # bool as 0/1, large_string as string
                parts[s].extend(c.cast(_LONG_SCHEMA.field(s).type) if t in _CAST else c for c in col.chunks)
    long = pa.Table.from_arrays([pa.chunked_array(parts[f.name], f.type) for f in _LONG_SCHEMA], schema=_LONG_SCHEMA)
    return long.combine_chunks().replace_schema_metadata({LAYOUT: LONG})


def _from_long(long: pa.Table, keep=None) -> tuple[pa.Table, list[str]]:
    """A long file's table back in its frame's shape, as pyarrow would read the plain table (its attrs as the
    schema's PANDAS_ATTRS), only the columns whose names `keep` takes (all without it); and every stored
    column's name."""
    long = long.combine_chunks()
    row = long.column("row").to_numpy()
    h = int(np.count_nonzero(row < 0))
    names = long.column("column").slice(1, h - 1).to_pylist() if h else []
    head_text = long.column("text").slice(0, h).to_pylist()
    m = len(names)
    n = (len(row) - h) // m if m else 0
    if not h or head_text[0] is None or (row[:h] >= 0).any() or len(row) != h + m * n \
            or not np.array_equal(row[h:], np.tile(np.arange(n), m)):
        raise ValueError(f"not a table of the long layout {LONG.decode()}: its header or rows are out of place")
    attrs, types = head_text[0], head_text[1:]
    if not set(types) <= _SLOT.keys():
        raise ValueError(f"not a table of the long layout {LONG.decode()}: a column of type "
                         f"{sorted(set(types) - _SLOT.keys())[0]!r}")
    values = {s: long.column(s).chunk(0) for s in _VALUES}   # one chunk: combined above
    arrays, kept = [], []
    for i, (name, t) in enumerate(zip(names, types)):
        if keep is not None and not keep(name):
            continue
        slot = _SLOT[t]
        a = pa.nulls(n) if slot is None else values[slot].slice(h + i * n, n)
        arrays.append(a.cast(_CAST[t]) if t in _CAST else a)
        kept.append(name)
    meta = {b"PANDAS_ATTRS": attrs.encode()} if attrs != "{}" else None
    return pa.Table.from_arrays(arrays, names=kept, metadata=meta) if kept else \
        pa.table({}).replace_schema_metadata(meta), names


def read_arrow(path: Path, keep=None) -> tuple[pa.Table, list[str]]:
    """A stored table read with pyarrow in its frame's shape, whichever layout stores it (a long file pivoted
    back, lab.store.runs.write_table), only the columns whose names `keep` takes (a callable; all without it):
    a plain file reads only those from disk (the ~1,400 metrics of an older run's metrics table are not decoded
    for the few a page shows). Returns the table (attrs in its schema's PANDAS_ATTRS) and every stored column's
    name."""
    pf = pq.ParquetFile(path)   # the footer parsed once (a plain table's holds every column's name)
    schema = pf.schema_arrow
    if (schema.metadata or {}).get(LAYOUT) == LONG:
        return _from_long(pf.read(), keep)
    names = schema.names
    return pf.read(columns=[c for c in names if keep(c)] if keep is not None else None), names


def read_table(path: Path) -> "pd.DataFrame":
    """A stored table as the frame write_table was given: `pd.read_parquet(path)` for a plain file (every
    store's older runs); a long file (LAYOUT) pivoted back by columns, the dtypes Arrow's conversion gives
    them, as pandas reads a plain table, and its attrs."""
    pf = pq.ParquetFile(path)
    if (pf.schema_arrow.metadata or {}).get(LAYOUT) != LONG:
        return pd.read_parquet(path)
    table, _ = _from_long(pf.read())
    raw = (table.schema.metadata or {}).get(b"PANDAS_ATTRS")
    df = table.to_pandas()
    df.attrs = json.loads(raw) if raw else {}
    return df


def shipped_root() -> Path | None:
    """The runs recorded with the lab's own ladder (profiles/examples/ of its source checkout), where
    the package runs from a checkout; an installed wheel ships none (None)."""
    checkout = Path(__file__).resolve().parents[2]
    return checkout / "profiles" if (checkout / "profiles" / "examples").is_dir() else None
MANIFEST = "manifest.json"
# A stored Nsight Compute report is kept xz-compressed (profile.ncu-rep.xz; lab.profilers.ncu reads it as
# it is). An .ncu-rep is mostly repetition: the shipped reports shrink to 4-7% of their size. lzma preset 3,
# measured on the shipped v8 backward report (9.6 MB) and v7's (6.3 MB) with Python's lzma on the lab's
# 2-core CPU machine under load: preset 3 0.39 MB in 0.64 s and 0.44 MB in 0.77 s; preset 6 0.35 MB in
# 3.9 s and 0.37 MB in 4.0 s; preset 1 0.44 MB in 0.55 s and 0.48 MB in 0.32 s; unpacking 0.05 s. Preset 6
# saves ~10% more for 5-6x the time. Python's lzma has no threads, and xz -T0 would not help either: it
# splits its input into blocks of 3x the dictionary (24 MiB at -6), larger than a report.
XZ_PRESET = 3
XZ = ".xz"
EXAMPLES_DIR = "examples"   # a store's shipped runs: read, never rewritten (lab reanalyze writes beside them)


def store_root() -> Path:
    """LAB_PROFILES if set; else the active workspace's profiles/ (lab.ladder.workspace); else the
    current folder's profiles/."""
    if os.environ.get("LAB_PROFILES"):
        return Path(os.environ["LAB_PROFILES"])

    ws = active()
    return ws.profiles_dir if ws is not None else DEFAULT_ROOT


CANDIDATE_MARK = "cand"   # a tuning candidate's run ends in -cand<index> (lab profile --candidate)


def new_run_id(variant_id: str, problem_label: str, now: datetime | None = None, root: Path | None = None,
               candidate: int | None = None) -> str:
    """<UTC time>-<rung>-<problem>, and -cand<index> for tuning candidate `candidate`'s run, so that it never
    reads as the rung's own; two runs stored within one second get -2, -3... (a quick loop or a script)."""
    now = now or datetime.now(timezone.utc)
    base = f"{now:%Y%m%d-%H%M%S}-{variant_id}-{problem_label}"
    if candidate is not None:
        base += f"-{CANDIDATE_MARK}{int(candidate)}"
    root = Path(root or store_root())
    run_id, n = base, 1
    while (root / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")   # '+': a pair's id (v9+v8, lab.ladder.pairing)


class RunWriter:
    """Collects a run's files in a staging directory; `commit()` makes it appear atomically."""

    def __init__(self, staging: Path, final: Path):
        self.dir = staging
        self.final = final
        self.manifest: dict = {}
        self._tables: dict[str, str] = {}
        self._artifacts: dict[str, str] = {}

    def add_table(self, name: str, df: "pd.DataFrame") -> None:
        fname = f"{name}.parquet"
        write_table(df, self.dir / fname)
        self._tables[name] = fname

    def artifact_path(self, filename: str) -> Path:
        """A path inside the staging directory for a tool to write to directly."""
        return self.dir / filename

    def register_artifact(self, name: str, filename: str) -> None:
        if not (self.dir / filename).exists():
            raise FileNotFoundError(self.dir / filename)
        self._artifacts[name] = filename

    def compress_artifact(self, name: str) -> str:
        """Replace a registered artifact by its .xz (XZ_PRESET); returns its new file name, which the
        manifest's artifacts entry now names."""
        packed = compress_file(self.dir / self._artifacts[name])
        self._artifacts[name] = packed.name
        return packed.name

    def commit(self, record: Manifest | None = None) -> Path:
        """Write the manifest and rename the run into place. The manifest is `record` (or, for
        callers that fill `self.manifest` as a dict, that dict) with the store's own fields set,
        checked against lab.store.manifest before anything appears: a run that would not read back
        is never stored."""
        d = record.to_dict() if record is not None else dict(self.manifest)
        d.update(schema_version=SCHEMA_VERSION, run_id=self.final.name, tables=dict(self._tables),
                 artifacts=dict(self._artifacts))
        try:
            checked = Manifest.from_dict(d)
        except ManifestError as e:
            raise LabError(f"run {self.final.name} not stored: its manifest is malformed: {e}") from None
        write_json_atomic(self.dir / MANIFEST, checked.to_dict())
        os.replace(self.dir, self.final)  # atomic on one filesystem: the run appears whole
        return self.final


@contextmanager
def create_run(run_id: str, root: Path | None = None) -> Iterator[RunWriter]:
    """Stage a run; on any exception (Ctrl-C included) the staging directory is removed."""
    root = Path(root or store_root())
    if not _SAFE.match(run_id):
        raise LabError(f"bad run id {run_id!r}")
    root.mkdir(parents=True, exist_ok=True)
    final = root / run_id
    if final.exists():
        raise LabError(f"run {run_id} already exists in {root}")
    staging = Path(tempfile.mkdtemp(prefix=f".{run_id}.", suffix=".partial", dir=root))
    writer = RunWriter(staging, final)
    try:
        yield writer
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if staging.exists():  # caller did not commit: nothing appears
        shutil.rmtree(staging, ignore_errors=True)


_READ: dict = {}       # (file, size, mtime_ns, what) -> what was read: a stored table never changes in place
_READ_MAX = 4096


def _read_once(path: Path, what, read):
    """`read()` of a stored table, once per version of the file in this process: `lab profile` reads the
    store's other runs for its page while ncu runs (lab.report.pages.warm), and again, now only the new
    run, once the run is stored."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, what)
    if key not in _READ:
        if len(_READ) >= _READ_MAX:
            _READ.clear()
        _READ[key] = read()
    return _READ[key]


class Run:
    """A stored, complete run (read side): `record` is the typed manifest, `manifest` the same
    record as a plain dict (for pages and JSON output)."""

    def __init__(self, path: Path):
        self.path = path
        self._main_kernel: tuple[int | None, float | None] | None = None   # read once (main_kernel)
        try:
            raw = json.loads((path / MANIFEST).read_text())
        except (OSError, ValueError) as e:   # ValueError: bad JSON or bad UTF-8
            raise LabError(f"{path} is not a lab run: cannot read {MANIFEST} ({e})") from None
        try:
            self.record = Manifest.from_dict(raw)
        except ManifestError as e:
            raise LabError(f"{path}: malformed manifest: {e}", hint=e.hint) from None
        self.manifest = self.record.to_dict()

    @property
    def id(self) -> str:
        return self.manifest["run_id"]

    def table(self, name: str) -> "pd.DataFrame | None":
        fname = self.manifest.get("tables", {}).get(name)
        if not fname:
            return None
        path = self.path / fname
        return _read_once(path, "table", lambda: read_table(path)).copy()   # a copy: callers may change it

    def columns(self, name: str, columns: list[str]) -> dict[str, list] | None:
        """Only `columns` of a stored table, as lists (pyarrow: neither the table's other columns, ~1,400
        metrics in `metrics`, nor the units pandas would rebuild for them); None where the table or one
        of the columns is not stored."""
        fname = self.manifest.get("tables", {}).get(name)
        if not fname:
            return None
        path = self.path / fname

        def read():
            wanted = set(columns)
            t, names = read_arrow(path, wanted.__contains__)
            if not wanted <= set(names):
                return None
            return {c: t.column(c).to_pylist() for c in columns}

        got = _read_once(path, ("columns", tuple(columns)), read)
        return None if got is None else {c: list(v) for c, v in got.items()}

    def main_kernel(self) -> tuple[int | None, float | None]:
        """(kernel_index, share of the profiled time in %) of the kernel the run's time went to, from
        ncu's per-kernel duration: whose verdict is the run's (a backward's main loop, not the short
        preprocess kernel launched before it). (None, None) where durations are not stored."""
        if self._main_kernel is not None:
            return self._main_kernel
        self._main_kernel = self._find_main_kernel()
        return self._main_kernel

    def _find_main_kernel(self) -> tuple[int | None, float | None]:
        try:
            cols = self.columns("metrics", ["kernel_index", DURATION])
        except (OSError, ValueError, pa.ArrowException):   # an unreadable table: no main kernel known
            return None, None
        rows = [(int(k), float(d)) for k, d in zip(*cols.values()) if k is not None and d is not None] if cols else []
        if not rows:
            return None, None
        index, longest = max(rows, key=lambda r: r[1])
        total = sum(d for _, d in rows)
        return index, (100.0 * longest / total if total else None)

    def artifact(self, name: str) -> Path | None:
        """The artifact's file. A run stored before reports were kept compressed names the plain file, a
        newer one the .xz: whichever the manifest names, else its other form where only that one is in the
        folder (a report unpacked in place with `unxz`, or an old one compressed by hand)."""
        fname = self.manifest.get("artifacts", {}).get(name)
        if not fname:
            return None
        path = self.path / fname
        other = path.with_name(path.name[:-len(XZ)] if path.name.endswith(XZ) else path.name + XZ)
        return other if not path.exists() and other.is_file() else path

    def __repr__(self) -> str:
        return f"Run({self.id})"


def amend_manifest(run_dir: Path, **fields) -> Path:
    """Set fields of a stored run's manifest after it appeared (the report stage's time, known only
    once the page exists): read and written back through the typed record, atomically."""
    run = Run(Path(run_dir))
    d = run.record.to_dict()
    d.update(fields)
    write_json_atomic(run.path / MANIFEST, Manifest.from_dict(d).to_dict())
    return run.path


def _write_xz(plain: Path) -> Path:
    """`plain` xz-compressed (XZ_PRESET) into `plain`.xz, written whole, then renamed into place."""
    packed = plain.with_name(plain.name + XZ)
    with replacing(packed) as tmp:
        with open(plain, "rb") as src, lzma.open(tmp, "wb", preset=XZ_PRESET) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return packed


def compress_file(path: Path) -> Path:
    """`path` replaced by its .xz; returns the .xz."""
    packed = _write_xz(Path(path))
    Path(path).unlink()
    return packed


def compress_stored_artifact(run_dir: Path, name: str = "ncu_report") -> Path | None:
    """Keep a stored run's artifact `name` xz-compressed, as `lab profile` now stores it: a run stored
    before (the manifest names the plain file), or one whose .xz was unpacked in place (`unxz` without -k
    leaves only the plain file). Nothing measured changes, only the file and the names of it, the
    artifacts entry and the profile section's report where it names the same file. The manifest is edited
    as stored, not through the typed record, which would bring an old run's other fields up to this lab's
    (the record still checks it). Each step leaves a readable run: the .xz is written whole, the manifest
    then names it, the plain file goes last. Returns the .xz, or None where the run has no such artifact
    or keeps it compressed already (a plain copy beside it, `unxz -k`'s, is left alone)."""
    run = Run(Path(run_dir))   # a readable run, or a LabError naming what is wrong
    fname = run.manifest.get("artifacts", {}).get(name)
    if not fname:
        return None
    plain = run.path / fname.removesuffix(XZ)
    packed = plain.with_name(plain.name + XZ)
    if fname == packed.name and packed.is_file():
        return None
    if not plain.is_file() and not packed.is_file():
        raise LabError(f"run {run.id}: its {name} {fname} is missing from the run folder")
    raw = json.loads((run.path / MANIFEST).read_text())
    raw["artifacts"][name] = packed.name
    if (raw.get("profile") or {}).get("report") == fname:
        raw["profile"]["report"] = packed.name
    try:
        Manifest.from_dict(raw)
    except ManifestError as e:
        raise LabError(f"{run.path}: malformed manifest: {e}", hint=e.hint) from None
    if plain.is_file():   # else compressed by hand already (`xz`): only the manifest is behind
        _write_xz(plain)
    if fname != packed.name:
        write_json_atomic(run.path / MANIFEST, raw)
    plain.unlink(missing_ok=True)
    return packed


def report_or_run(path: Path) -> Path:
    """`path` itself, or where it is a stored run's folder, that run's Nsight Compute report (`lab analyze
    profiles/RUN`): the file its manifest names, profile.ncu-rep.xz or an older run's plain one."""
    path = Path(path)
    if not _is_run_folder(path):
        return path
    run = Run(path)
    report = run.artifact("ncu_report")
    if report is None or not report.is_file():
        raise LabError(f"run {run.id} has no ncu report", hint="it was stored with --no-ncu")
    return report


def run_build_ptxas(path: Path) -> list[dict] | None:
    """Where `path` is a stored run's folder, its manifest's build.ptxas (the profiled build's ptxas records,
    whose wgmma serialization notices the verdicts cite, as `lab profile` and `lab reanalyze` pass them);
    None for a report file or a run without them."""
    path = Path(path)
    return (Run(path).manifest.get("build") or {}).get("ptxas") if _is_run_folder(path) else None


def _is_run_folder(path: Path) -> bool:
    try:
        return (path / MANIFEST).is_file()
    except OSError:   # a name too long for the filesystem: the reader says what it is
        return False


def open_root(root: Path | str | None = None) -> Path:
    """The store a reading command (report, compare, export) reads: `root` as given (--profiles,
    or LAB_PROFILES), else the default. A store that was named must exist and be a directory (a
    typo is an error, not an empty report); the default one may not exist yet."""
    named = root is not None or bool(os.environ.get("LAB_PROFILES"))
    path = Path(root) if root is not None else store_root()
    if path.exists() and not path.is_dir():
        raise LabError(f"{path} is a file, not a run store directory",
                       hint="pass the directory that holds the runs (default: profiles/)")
    if named and not path.exists():
        raise LabError(f"run store {path} does not exist",
                       hint="pass the directory that holds the runs with --profiles (default: profiles/)")
    return path


@dataclass
class DamagedRun:
    """A run directory whose manifest cannot be read: listed with its reason, never fatal to the rest."""

    path: Path
    reason: str
    kind: str = "run"   # or "sweep"

    @property
    def id(self) -> str:
        return self.path.name


def scan_store(root: Path | None, marker: str, open_entry, kind: str) -> tuple[list, list[DamagedRun]]:
    """The store's entries of one kind (the folders holding `marker`) under the root and its
    examples/, opened with `open_entry` and sorted oldest first, and the damaged ones with their
    reason: one unreadable entry never hides the others. Staging folders (dot names) are skipped; an
    entry of the root hides an example of the same name (lab reanalyze's copy of a shipped run)."""
    root = Path(root or store_root())
    found: list = []
    damaged: list[DamagedRun] = []
    own: set[str] = set()   # an entry of the root hides the example of its name (a reanalyzed copy)
    for base in (root, root / EXAMPLES_DIR):
        if not base.is_dir():
            continue
        for d in sorted(base.iterdir()):
            if d.name.startswith(".") or not (d / marker).is_file() or (base != root and d.name in own):
                continue
            if base == root:
                own.add(d.name)
            try:
                found.append(open_entry(d))
            except LabError as e:
                damaged.append(DamagedRun(d, str(e), kind))
    found.sort(key=lambda e: (e.manifest.get("created_utc") or "", e.id))
    return found, damaged


def scan_runs(root: Path | None = None) -> tuple[list[Run], list[DamagedRun]]:
    """Complete runs, oldest first, and the damaged ones (a manifest that is not JSON or not a
    valid record)."""
    return scan_store(root, MANIFEST, Run, "run")


def list_runs(root: Path | None = None) -> list[Run]:
    """The complete, readable runs of the store (see scan_runs for the damaged ones)."""
    return scan_runs(root)[0]


def find_run(run_id: str, root: Path | None = None) -> Run:
    """A run by its id, a prefix of it, or its folder's path; or by a rung's id (`lab compare v5 v6`):
    that rung's latest stored run of its own launcher (a tuning candidate's run is named by its id)."""
    if not run_id.strip():
        raise LabError("the run id is empty", hint="`lab report` lists the stored runs")
    p = Path(run_id)
    try:
        is_dir_run = (p / MANIFEST).is_file()
    except OSError:   # a name too long for the filesystem is not a path to a run
        is_dir_run = False
    if is_dir_run:
        return Run(p)
    runs, damaged = scan_runs(root)
    matches = [r for r in runs if r.id == run_id or r.id.startswith(run_id)]
    if not matches:
        of_rung = [r for r in runs if (r.manifest.get("variant") or {}).get("id") == run_id
                   and candidate_label(r.manifest) is None]
        if of_rung:   # runs come oldest first
            return of_rung[-1]
        bad = next((d for d in damaged if d.id == run_id or d.id.startswith(run_id)), None)
        if bad is not None:
            raise LabError(f"run {bad.id} is damaged: {bad.reason}")
        shown = run_id if len(run_id) <= 80 else run_id[:77] + "..."
        raise LabError(f"no stored run {shown!r}", hint="`lab report` lists the stored runs")
    if len(matches) > 1 and not any(r.id == run_id for r in matches):
        raise LabError(f"run id {run_id!r} is ambiguous: {', '.join(r.id for r in matches[:5])}")
    return next((r for r in matches if r.id == run_id), matches[0])

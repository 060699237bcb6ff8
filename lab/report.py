"""HTML reports from stored runs: one write-up per run, the index with the ladder, comparisons.

Reads only the run store (manifest + tables), never the analysis or timeline code, so `lab report`
needs no torch, GPU, ncu or nsys. Every sentence on a page is built here from a stored value; where
a value is absent the page says so instead of guessing. Jinja autoescaping is on: kernel names,
rule messages and reasons are data, not markup.

Structure: `RunData` wraps a stored run (validated manifest, tables read once); `*_context`
functions turn it into plain dicts for the templates; `render` writes the pages.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import webbrowser
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import jinja2
import pyarrow as pa
import pyarrow.parquet as pq
from markupsafe import Markup, escape

from lab import charts
from lab import variants as registry
from lab.errors import LabError
from lab.problem import DTYPE_BYTES, Problem
from lab.store import REPO_ROOT, Run, find_run, list_runs, store_root

TEMPLATES_DIR = REPO_ROOT / "templates"
DEFAULT_OUT = REPO_ROOT / "reports"
SECTOR_BYTES = 32          # an L1/L2/DRAM sector, the unit ncu counts memory traffic in

KERNEL_COLUMNS = ("kernel", "kernel_name", "Kernel Name", "name", "demangled_name", "function")
DURATION = "gpu__time_duration.sum"

# The ncu metrics a page (and a comparison) reads: launch and occupancy, stall reasons, bytes per
# memory level, SASS FP32 counts, throughputs. A detailed-set report stores ~1,400 columns per kernel
# and a full set ~2,000; reading only these keeps `lab report` over many runs fast.
PAGE_METRICS = re.compile(
    r"^(" + "|".join(re.escape(c) for c in KERNEL_COLUMNS) + r"|kernel_index|device__attribute_multiprocessor_count"
    r"|launch__\w+"
    r"|gpu__time_duration\.sum|gpu__compute_memory_throughput\.avg\.pct_of_peak_sustained_elapsed"
    r"|sm__(maximum_warps_per_active_cycle_pct|warps_active\.avg\.pct_of_peak_sustained_active"
    r"|throughput\.avg\.pct_of_peak_sustained_elapsed|pipe_tensor_cycles_active\.avg\.pct_of_peak_sustained_active)"
    r"|smsp__average_warps_issue_stalled_\w+_per_issue_active\.ratio|smsp__average_warp_latency\w*(\.ratio|\.pct|\.sum)?"
    r"|smsp__pcsamp_warps_issue_stalled_\w+|smsp__sass_thread_inst_executed_op_f(add|mul|fma)_pred_on\.sum"
    r"|dram__(bytes|sectors)(_read|_write)?\.sum|dram__throughput\.avg\.pct_of_peak_sustained_elapsed"
    r"|lts__t_(bytes|sectors)\.sum|l1tex__t_(bytes|sectors)_pipe_lsu_mem_(global|local)_op_(ld|st)\.sum)$")


# ------------------------------------------------------------------------------- formatting

def _missing(v) -> bool:
    """None, or a manifest key the template asked for that this run does not have."""
    return v is None or isinstance(v, jinja2.Undefined)


def fmt_num(v, digits: int = 3) -> str:
    """Significant digits, thousands separators; "n/a" for a missing value."""
    if _missing(v):
        return "n/a"
    if isinstance(v, bool):
        return str(v)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(x):
        return "n/a"
    if x == int(x) and abs(x) < 1e15:   # counts (grid size, bytes) arrive as floats from ncu
        return f"{int(x):,}"
    return charts.fmt_si(x, digits)


def fmt_pct(v, digits: int = 3) -> str:
    return "n/a" if _missing(v) else f"{fmt_num(v, digits)}%"


def fmt_bytes(v) -> str:
    """Decimal units, as Nsight Compute prints them (1 MB = 10^6 bytes)."""
    if _missing(v):
        return "n/a"
    x = float(v)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(x) >= scale:
            return f"{charts.fmt_si(x / scale)} {unit}"
    return f"{int(x):,} B"


def fmt_ms(v) -> str:
    return "n/a" if _missing(v) else f"{charts.fmt_si(float(v), 4)} ms"


def fmt_times(x: float | None) -> str:
    """A ratio as a multiplier: 2.5x, 0.0004x."""
    return "n/a" if _missing(x) else f"{charts.fmt_si(x)}x"


def fmt_change(v) -> str:
    """A relative change in percent with its sign; changes under 0.01% read as 0%."""
    if _missing(v):
        return "n/a"
    return "0%" if abs(v) < 0.005 else f"{v:+.2f}%" if abs(v) < 10 else f"{v:+,.0f}%" if abs(v) >= 100 else f"{v:+.1f}%"


def fmt_shell(v) -> str:
    """A stored command line (a list of arguments) as one copy-pasteable shell line."""
    return shlex.join(str(a) for a in v) if isinstance(v, (list, tuple)) else str(v)


def speed_phrase(ratio: float | None, other: str) -> str:
    """ratio = other's time / ours; >1 means ours is faster."""
    if ratio is None or ratio <= 0:
        return ""
    if abs(ratio - 1) < 1e-9:
        return f"as fast as {other}"
    if ratio > 1:
        return f"{fmt_times(ratio)} faster than {other}"
    return f"{fmt_times(1 / ratio)} slower than {other}"


# -------------------------------------------------------------------------- manifest checks

def _bad(run: Run, what: str) -> LabError:
    return LabError(f"{run.path}: malformed manifest: {what}",
                    hint="a run is written by `lab profile`; move a damaged run out of the store")


def _dict_field(run: Run, m: dict, key: str, required: bool = False) -> dict:
    v = m.get(key)
    if v is None:
        if required:
            raise _bad(run, f"'{key}' is missing")
        return {}
    if not isinstance(v, dict):
        raise _bad(run, f"'{key}' should be an object, got {type(v).__name__}")
    return v


def _number(run: Run, d: dict, key: str, where: str):
    v = d.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise _bad(run, f"'{where}.{key}' should be a number, got {v!r}")
    return v


# ----------------------------------------------------------------------------------- a run

@dataclass
class RunData:
    """A validated stored run, its tables read at most once."""

    run: Run
    _tables: dict = field(default_factory=dict)

    def __post_init__(self):
        m = self.run.manifest
        if not isinstance(m.get("run_id"), str):
            raise _bad(self.run, "'run_id' is missing")
        self.variant = _dict_field(self.run, m, "variant", required=True)
        if not isinstance(self.variant.get("id"), str):
            raise _bad(self.run, "'variant.id' is missing")
        p = _dict_field(self.run, m, "problem", required=True)
        try:
            self.problem = Problem.from_dict(p)
        except LabError as e:
            raise _bad(self.run, f"problem: {e}") from None
        except (KeyError, TypeError) as e:
            raise _bad(self.run, f"problem lacks {e}") from None
        self.device = _dict_field(self.run, m, "device")
        self.timing = _dict_field(self.run, m, "timing")
        for key in ("median", "mean", "std", "ci95_low", "ci95_high", "min", "max", "tflops"):
            _number(self.run, self.timing, key, "timing")
        self.correctness = _dict_field(self.run, m, "correctness")
        self.software = _dict_field(self.run, m, "software")
        self.peaks = _dict_field(self.run, self.device, "peaks") if self.device else {}
        baselines = m.get("baselines") or []
        if not isinstance(baselines, list) or not all(isinstance(b, dict) for b in baselines):
            raise _bad(self.run, "'baselines' should be a list of objects")
        for b in baselines:
            for key in ("median_ms", "std_ms", "tflops", "ratio", "ci95_low", "ci95_high"):
                _number(self.run, b, key, "baselines[]")
        self.baselines = baselines
        for key in ("tables", "artifacts"):
            _dict_field(self.run, m, key)

    # identity -------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.run.id

    @property
    def manifest(self) -> dict:
        return self.run.manifest

    @property
    def variant_id(self) -> str:
        return self.variant["id"]

    @property
    def device_name(self) -> str:
        return self.device.get("name") or "unknown device"

    @property
    def shape_key(self) -> tuple:
        p = self.problem
        return (p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim, p.causal)

    def shape_label(self) -> str:
        return self.problem.label().rsplit("-", 1)[0]   # the label without its dtype

    # numbers --------------------------------------------------------------------------
    @property
    def median_ms(self) -> float | None:
        return self.timing.get("median")

    @property
    def tflops(self) -> float | None:
        if self.timing.get("tflops") is not None:
            return self.timing["tflops"]
        return self.problem.flops / (self.median_ms * 1e9) if self.median_ms else None

    def peak_for(self, dtype: str) -> tuple[str, float | None]:
        """The ceiling a dtype is measured against: FP32 FFMA for float32, the tensor cores otherwise."""
        if dtype == "float32":
            return "FP32 (FFMA)", self.peaks.get("fp32_tflops")
        key = "tensor_bf16_tflops" if dtype == "bfloat16" and self.peaks.get("tensor_bf16_tflops") else "tensor_fp16_tflops"
        return "FP16/BF16 tensor", self.peaks.get(key)

    def pct_of_peak(self, tflops: float | None, dtype: str) -> float | None:
        _, peak = self.peak_for(dtype)
        return 100.0 * tflops / peak if (tflops and peak) else None

    def ok_baselines(self) -> list[dict]:
        return [b for b in self.baselines if b.get("status") == "ok" and b.get("median_ms")]

    def fastest_baseline(self) -> dict | None:
        ok = self.ok_baselines()
        return min(ok, key=lambda b: b["median_ms"]) if ok else None

    @property
    def bottleneck(self) -> str | None:
        fs = self.manifest.get("findings_summary")
        return fs.get("bottleneck") if isinstance(fs, dict) else None

    # tables ---------------------------------------------------------------------------
    def table(self, name: str, columns: re.Pattern | None = None) -> "Table | None":
        """A stored table as plain rows, read straight from its Parquet file with pyarrow (a page
        needs rows, not a DataFrame); with `columns`, only the columns whose names match."""
        key = (name, columns.pattern if columns else None)
        if key not in self._tables:
            fname = (self.manifest.get("tables") or {}).get(name)
            if not fname:
                self._tables[key] = None
            else:
                try:
                    pf = pq.ParquetFile(self.run.path / fname)
                    names = pf.schema_arrow.names
                    t = pf.read(columns=[n for n in names if columns.match(n)] if columns else None)
                except (OSError, pa.ArrowException) as e:   # a missing or unreadable file
                    raise _bad(self.run, f"table {name!r} cannot be read ({e})") from None
                self._tables[key] = Table(t.column_names, [{k: _plain(v) for k, v in r.items()}
                                                           for r in t.to_pylist()], _pandas_attrs(t), len(names))
        return self._tables[key]

    @property
    def stored_metric_count(self) -> int:
        t = self.table("metrics", PAGE_METRICS)
        return t.stored_columns if t is not None else 0

    @cached_property
    def kernels(self) -> list[dict]:
        """One dict per profiled kernel: {'kernel': name, metric: value}, the longest first."""
        t = self.table("metrics", PAGE_METRICS)
        if t is None or not t.rows:
            return []
        name_col = next((c for c in KERNEL_COLUMNS if c in t.columns), None)
        rows = []
        for rec in t.rows:
            rec = dict(rec)
            rec["kernel"] = str(rec.get(name_col)) if name_col else "kernel"
            rows.append(rec)
        rows.sort(key=lambda r: -(r.get(DURATION) or 0) if isinstance(r.get(DURATION), (int, float)) else 0)
        return rows

    @cached_property
    def units(self) -> dict[str, str]:
        """ncu's unit of each metric column, where the metrics table carries them."""
        t = self.table("metrics", PAGE_METRICS)
        units = t.attrs.get("units") if t is not None else None
        return units if isinstance(units, dict) else {}

    @property
    def primary_kernel(self) -> dict | None:
        return self.kernels[0] if self.kernels else None


@dataclass
class Table:
    columns: list[str]
    rows: list[dict]
    attrs: dict = field(default_factory=dict)   # DataFrame.attrs as pandas stored them, e.g. {"units": {...}}
    stored_columns: int = 0                     # columns in the file, read or not


def _pandas_attrs(t: "pa.Table") -> dict:
    """pandas keeps DataFrame.attrs (lab.nsight.ncu puts metric units there) in the Parquet schema."""
    raw = (t.schema.metadata or {}).get(b"PANDAS_ATTRS")
    try:
        attrs = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return attrs if isinstance(attrs, dict) else {}


def _plain(v):
    """numpy scalars and NaN to plain Python values (None for missing)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def load(run: Run) -> RunData:
    return RunData(run)


# --------------------------------------------------------------------- facts from the metrics

def first_metric(k: dict | None, *names: str):
    """The first of several equivalent ncu metric names this report has (sets and versions differ)."""
    if not k:
        return None, None
    for n in names:
        v = k.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return n, float(v)
    return None, None


def dram_bytes(k: dict | None) -> tuple[float | None, str]:
    """DRAM bytes read + written by the kernel, and the metrics it comes from."""
    if not k:
        return None, ""
    rd, wr = k.get("dram__bytes_read.sum"), k.get("dram__bytes_write.sum")
    if isinstance(rd, (int, float)) and isinstance(wr, (int, float)):
        return float(rd + wr), "dram__bytes_read.sum + dram__bytes_write.sum"
    name, v = first_metric(k, "dram__bytes.sum")
    if name:
        return v, name
    rd, wr = k.get("dram__sectors_read.sum"), k.get("dram__sectors_write.sum")
    if isinstance(rd, (int, float)) and isinstance(wr, (int, float)):
        return float(rd + wr) * SECTOR_BYTES, "(dram__sectors_read.sum + dram__sectors_write.sum) x 32 B"
    return None, ""


def _sum_metrics(k: dict, names: tuple[str, ...], scale: float = 1.0) -> float | None:
    vals = [k.get(n) for n in names]
    if not all(isinstance(v, (int, float)) for v in vals):
        return None
    return float(sum(vals)) * scale


# (level, [(metric names to add, scale, how it is described)]) in order of preference
MEMORY_LEVELS = (
    ("DRAM", None),
    ("L2 (lts)", ((("lts__t_bytes.sum",), 1.0, "lts__t_bytes.sum"),
                  (("lts__t_sectors.sum",), SECTOR_BYTES, "lts__t_sectors.sum x 32 B"))),
    ("L1/TEX global", ((("l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum"),
                        1.0, "l1tex__t_bytes_pipe_lsu_mem_global_op_{ld,st}.sum"),
                       (("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
                        SECTOR_BYTES, "l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum x 32 B"))),
    ("local memory", ((("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"),
                       1.0, "l1tex__t_bytes_pipe_lsu_mem_local_op_{ld,st}.sum"),
                      (("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"),
                       SECTOR_BYTES, "l1tex__t_sectors_pipe_lsu_mem_local_op_{ld,st}.sum x 32 B"))),
)


def memory_levels(k: dict | None, min_bytes: int) -> list[dict]:
    rows = [{"level": "minimum (Q, K, V read once, O written once)", "bytes": float(min_bytes), "x_min": 1.0,
             "source": "problem shape x dtype size"}]
    if not k:
        return rows
    for level, options in MEMORY_LEVELS:
        if options is None:
            v, src = dram_bytes(k)
        else:
            v, src = None, ""
            for names, scale, desc in options:
                v = _sum_metrics(k, names, scale)
                if v is not None:
                    src = desc
                    break
        if v is not None:
            rows.append({"level": level, "bytes": v, "x_min": v / min_bytes if min_bytes else None, "source": src})
    return rows


STALL_FAMILIES = (
    # (regex with the reason as group 1, what the value is)
    (re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
     "warps stalled per issue-active cycle (ncu Warp State Statistics)"),
    (re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio|\.pct|\.sum)?$"),
     "average warp latency stalled on each reason (cycles)"),
    (re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)$"), "PC samples of stalled warps"),
)


def stall_reasons(k: dict | None) -> tuple[list[tuple[str, float]], str, str]:
    """(reason, value) sorted largest first, the unit, and the metric family it was read from."""
    if not k:
        return [], "", ""
    for rx, unit in STALL_FAMILIES:
        found = []
        for name, v in k.items():
            m = rx.match(name)
            if m and isinstance(v, (int, float)) and not m.group(1).endswith("_not_issued"):
                found.append((m.group(1), float(v)))
        if found:
            found.sort(key=lambda t: -t[1])
            return found, unit, rx.pattern.strip("^$").replace("\\", "").replace("(w+?)", "<reason>")
    return [], "", ""


OCCUPANCY_LIMITS = (("registers", "launch__occupancy_limit_registers"),
                    ("shared memory", "launch__occupancy_limit_shared_mem"),
                    ("warps (block size)", "launch__occupancy_limit_warps"),
                    ("blocks per SM", "launch__occupancy_limit_blocks"),
                    ("barriers", "launch__occupancy_limit_barriers"))


def occupancy(k: dict | None, device: dict) -> dict | None:
    if not k:
        return None
    limits = [(label, float(k[n]), n) for label, n in OCCUPANCY_LIMITS if isinstance(k.get(n), (int, float))]
    lowest = min((v for _, v, _ in limits), default=None)
    limiters = [label for label, v, _ in limits if v == lowest]
    _, theoretical = first_metric(k, "sm__maximum_warps_per_active_cycle_pct")
    _, achieved = first_metric(k, "sm__warps_active.avg.pct_of_peak_sustained_active")
    _, grid = first_metric(k, "launch__grid_size")
    _, block = first_metric(k, "launch__block_size")
    _, sms = first_metric(k, "launch__sm_count", "device__attribute_multiprocessor_count")
    sms = sms or device.get("sm_count")
    _, waves = first_metric(k, "launch__waves_per_multiprocessor")
    _, regs = first_metric(k, "launch__registers_per_thread")
    _, smem = first_metric(k, "launch__shared_mem_per_block", "launch__shared_mem_per_block_static")
    rows = [("Grid size (CTAs)", grid, "launch__grid_size"), ("Block size (threads)", block, "launch__block_size"),
            ("SMs", sms, "launch__sm_count"), ("Waves per SM", waves, "launch__waves_per_multiprocessor"),
            ("Registers per thread", regs, "launch__registers_per_thread"),
            ("Shared memory per block (bytes)", smem, "launch__shared_mem_per_block"),
            ("Theoretical occupancy (%)", theoretical, "sm__maximum_warps_per_active_cycle_pct"),
            ("Achieved occupancy (%)", achieved, "sm__warps_active.avg.pct_of_peak_sustained_active")]
    sentences = []
    if theoretical is not None and limiters:
        others = ", ".join(f"{label} {fmt_num(v)}" for label, v, _ in limits if label not in limiters)
        sentences.append(f"Theoretical occupancy is {fmt_pct(theoretical)}, limited by {' and '.join(limiters)}: "
                         f"{fmt_num(lowest)} block(s) per SM" + (f" (the other limits allow: {others})." if others else "."))
    if achieved is not None:
        sentences.append(f"Achieved occupancy is {fmt_pct(achieved)} of the SM's warp slots.")
    if grid is not None and sms:
        sentences.append(f"The grid has {fmt_num(grid)} CTAs on {fmt_num(sms)} SMs"
                         + (f": {fmt_num(waves)} waves." if waves is not None else "."))
    return {"rows": [r for r in rows if r[1] is not None], "limits": limits, "limiters": limiters,
            "sentences": sentences}


# ------------------------------------------------------------------------- the run's context

def _ladder_neighbour(rd: RunData, runs: list[RunData], step: int) -> tuple[str | None, RunData | None]:
    """The registry's previous (step=-1) or next (+1) rung id, and its latest run on the same
    shape and device (same dtype preferred)."""
    ids = registry.all_ids()
    if rd.variant_id not in ids:
        return None, None
    i = ids.index(rd.variant_id) + step
    if not 0 <= i < len(ids):
        return None, None
    other_id = ids[i]
    same = [r for r in runs if r.variant_id == other_id and r.shape_key == rd.shape_key
            and r.device_name == rd.device_name and r.median_ms]
    same.sort(key=lambda r: (r.problem.dtype == rd.problem.dtype, r.manifest.get("created_utc", ""), r.id))
    return other_id, (same[-1] if same else None)


def ci_overlap(a: dict, b: dict) -> bool | None:
    """Do two timings' CI95 intervals overlap? None where either lacks one."""
    keys = ("ci95_low", "ci95_high")
    if not all(isinstance(d.get(k), (int, float)) for d in (a, b) for k in keys):
        return None
    return a["ci95_low"] <= b["ci95_high"] and b["ci95_low"] <= a["ci95_high"]


def performance_rows(rd: RunData) -> list[dict]:
    t = rd.timing
    rows = [{"name": f"{rd.variant_id} (ours)", "dtype": rd.problem.dtype, "ours": True, "status": "ok",
             "median_ms": t.get("median"), "std_ms": t.get("std"), "ci95": (t.get("ci95_low"), t.get("ci95_high")),
             "tflops": rd.tflops, "pct_peak": rd.pct_of_peak(rd.tflops, rd.problem.dtype),
             "peak_name": rd.peak_for(rd.problem.dtype)[0], "ratio": None, "phrase": ""}]
    for b in rd.baselines:
        dtype = b.get("dtype") or "?"
        tfl = b.get("tflops")
        if tfl is None and b.get("median_ms"):
            tfl = rd.problem.flops / (b["median_ms"] * 1e9)
        name = f"SDPA {b.get('backend') or str(b.get('name', '?')).removeprefix('sdpa-')}"
        rows.append({"name": name, "dtype": dtype, "ours": False, "status": b.get("status", "?"),
                     "reason": b.get("reason") or "", "median_ms": b.get("median_ms"), "std_ms": b.get("std_ms"),
                     "ci95": (b.get("ci95_low"), b.get("ci95_high")), "tflops": tfl,
                     "pct_peak": rd.pct_of_peak(tfl, dtype) if dtype in DTYPE_BYTES else None,
                     "peak_name": rd.peak_for(dtype)[0], "ratio": b.get("ratio"),
                     "phrase": f"ours is {speed_phrase(b.get('ratio'), f'{name} ({dtype})')}" if b.get("ratio") else ""})
    return rows


SASS_FP32 = ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")


def sass_fp32_flops(k: dict | None) -> float | None:
    """FP32 operations the kernel executed, from ncu's per-thread SASS counts (an FFMA is two)."""
    if not k or not all(isinstance(k.get(n), (int, float)) for n in SASS_FP32):
        return None
    ffma, fadd, fmul = (float(k[n]) for n in SASS_FP32)
    return 2 * ffma + fadd + fmul


DTYPE_MARKERS = {"float16": "circle", "bfloat16": "triangle", "float32": "diamond"}


def roofline(rd: RunData, kernel: dict | None) -> dict:
    """Points and roofs for the chart, and notes on what each coordinate rests on."""
    flops = rd.problem.flops
    notes = []
    points = []
    dram, dram_src = dram_bytes(kernel)
    if rd.tflops:
        if dram:
            ai = flops / dram
            notes.append(f"{rd.variant_id}: intensity = problem FLOPs / DRAM bytes measured by ncu ({dram_src}).")
        else:
            ai = flops / rd.problem.min_bytes
            notes.append(f"{rd.variant_id}: no DRAM bytes were stored, so it is placed at the minimum-bytes "
                         f"intensity (Q, K, V read once, O written once).")
        points.append(charts.RooflinePoint(f"{rd.variant_id} (ours, {rd.problem.dtype})", ai, rd.tflops, "rung"))
    base_pts = []
    backends = sorted({str(b.get("backend") or b.get("name")) for b in rd.ok_baselines()})
    for b in rd.ok_baselines():
        dtype = b.get("dtype")
        if dtype not in DTYPE_BYTES:
            continue
        backend = str(b.get("backend") or b.get("name"))
        tfl = b.get("tflops") or flops / (b["median_ms"] * 1e9)
        ai = flops / rd.problem.with_dtype(dtype).min_bytes
        base_pts.append(charts.RooflinePoint(f"SDPA {backend} ({dtype})", ai, tfl, "base", backends.index(backend),
                                             DTYPE_MARKERS.get(dtype, "circle")))
    if base_pts:
        notes.append("SDPA backends: their DRAM traffic was not profiled, so each is placed at the minimum-bytes "
                     "intensity of its dtype; achieved FLOP/s = problem FLOPs / median time.")
    roofs = []
    if rd.peaks.get("fp32_tflops"):
        roofs.append(charts.Roof(f"FP32 {charts.fmt_si(rd.peaks['fp32_tflops'])}", rd.peaks["fp32_tflops"], "fp32"))
    if rd.peaks.get("tensor_fp16_tflops"):
        roofs.append(charts.Roof(f"FP16/BF16 tensor {charts.fmt_si(rd.peaks['tensor_fp16_tflops'])}",
                                 rd.peaks["tensor_fp16_tflops"], "tensor"))
    executed = sass_fp32_flops(kernel)
    if executed and flops:
        duration = kernel.get(DURATION)
        rate = f", {fmt_num(executed / duration / 1e3)} TFLOP/s over ncu's kernel duration" if duration else ""
        notes.append(f"ncu counted {fmt_num(executed)} FP32 operations executed (2 x FFMA + FADD + FMUL, per thread): "
                     f"{fmt_times(executed / flops)} the problem's FLOPs{rate}.")
    if not rd.peaks:
        notes.append(f"No peak rates are known for {rd.device_name}, so the chart has no roofs.")
    svg = charts.roofline_svg(points + base_pts, roofs, rd.peaks.get("dram_tbps"))
    return {"svg": svg, "notes": notes}


def findings_context(rd: RunData, primary: dict | None) -> dict:
    found = rd.table("findings")
    rules = rd.table("ncu_rules")
    out = {"recorded": found is not None, "findings": [], "rules": [], "other_rules": [],
           "rules_recorded": rules is not None}
    if found is not None:
        for rec in found.rows:
            rec = dict(rec)
            ev = rec.get("evidence")
            if isinstance(ev, str):
                try:
                    ev = json.loads(ev)
                except json.JSONDecodeError:
                    ev = {"(as stored)": ev}
            rec["evidence"] = ev if isinstance(ev, dict) else ({} if ev is None else {"(as stored)": ev})
            out["findings"].append(rec)
        if primary and any(f.get("kernel") == primary["kernel"] for f in out["findings"]):
            # the slowest kernel's findings first; the stored order (most important first) within
            out["findings"].sort(key=lambda f: f.get("kernel") != primary["kernel"])
    if rules is not None:
        recs = list(rules.rows)
        recs.sort(key=lambda r: -(r.get("est_speedup_pct") or 0))
        # the slowest kernel's rules in the table; the other kernels' (ncu repeats them per kernel) folded
        key = "kernel_index" if primary and "kernel_index" in rules.columns and "kernel_index" in primary else None
        if key:
            out["rules"] = [r for r in recs if r.get(key) == primary[key]]
            out["other_rules"] = [r for r in recs if r.get(key) != primary[key]]
        else:
            out["rules"], out["other_rules"] = recs, []
    out["rule_kernels"] = len({r.get("kernel") for r in out["rules"]})
    out["primary"] = out["findings"][0] if out["findings"] else None
    out["secondary"] = out["findings"][1:]
    return out


# The timeline tables lab.timeline stores (`timeline_<name>`), named after the nsys stats reports
# they mirror; the *_events tables hold one row per event and feed the chart only.
TIMELINE_SUMMARIES = (("kernels", "Kernel summary (as cuda_gpu_kern_sum)"), ("nvtx", "NVTX ranges (as nvtx_sum)"),
                      ("nvtx_kernels", "Kernels per NVTX range (as nvtx_kern_sum)"),
                      ("memory", "Memory operations (as cuda_gpu_mem_time_sum)"), ("api", "CUDA API (as cuda_api_sum)"))
TIMELINE_EVENTS = (("nvtx_events", "nvtx"), ("api_events", "cuda api"), ("kernel_events", "kernels"),
                   ("events", "events"))


TIMELINE_SPANS_MAX = 400   # beyond a few hundred bars a 720-px chart is a smear; the earliest are drawn


def timeline_context(rd: RunData) -> dict:
    info = rd.manifest.get("timeline")
    info = info if isinstance(info, dict) else None
    summaries = [(title, _table_view(t)) for name, title in TIMELINE_SUMMARIES
                 if (t := rd.table(f"timeline_{name}")) is not None]
    spans, event_counts = [], []
    for name, lane_default in TIMELINE_EVENTS:
        t = rd.table(f"timeline_{name}")
        if t is None:
            continue
        event_counts.append((name, len(t.rows)))
        cols = set(t.columns)
        start = "start_ns" if "start_ns" in cols else None
        end = "end_ns" if "end_ns" in cols else None
        dur = "duration_ns" if "duration_ns" in cols else None
        label = next((c for c in ("name", "operation", "kernel") if c in cols), None)
        lane = next((c for c in ("kind", "lane") if c in cols), None)
        if not start or not (end or dur):
            continue
        for rec in t.rows:
            s = rec.get(start)
            e = rec.get(end) if end else (s + rec[dur] if s is not None and rec.get(dur) is not None else None)
            if s is None or e is None:
                continue
            spans.append(charts.Span(str(rec[lane]) if lane else lane_default, str(rec[label]) if label else "",
                                     float(s), float(e)))
    spans.sort(key=lambda sp: sp.start_ns)
    shown = spans[:TIMELINE_SPANS_MAX]
    svg, cut = charts.timeline_svg(shown)
    return {"info": info, "summaries": summaries, "events": event_counts, "svg": svg, "cut": cut,
            "spans_shown": len(shown), "spans_total": len(spans), "recorded": bool(info or summaries or event_counts)}


def _table_view(t: Table, max_rows: int = 20) -> dict:
    rows = [[_cell(r.get(c)) for c in t.columns] for r in t.rows[:max_rows]]
    return {"columns": t.columns, "rows": rows, "total": len(t.rows)}


def _cell(v) -> str:
    if isinstance(v, float):
        return fmt_num(v, 4)
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def _raw_cell(v) -> str:
    """As stored, to 10 significant digits: the appendix is for checking the rounded numbers above."""
    if isinstance(v, float):
        return f"{v:.10g}"
    return "" if v is None else str(v)


def raw_metrics_html(kernels: list[dict], units: dict[str, str]) -> Markup:
    """The metrics the page read, transposed (metric x kernel) at full precision, built as one
    string (a template loop over hundreds of rows per run is the slowest part of a render)."""
    if not kernels:
        return Markup("")
    names = sorted({n for k in kernels for n in k if n != "kernel"})
    head = "".join(f"<th>{escape(k['kernel'])}</th>" for k in kernels)
    body = "".join(f"<tr><td class=metric>{escape(n)}</td><td>{escape(units.get(n, ''))}</td>"
                   + "".join(f"<td class=num>{escape(_raw_cell(k.get(n)))}</td>" for k in kernels) + "</tr>"
                   for n in names)
    return Markup(f'<table class="raw"><thead><tr><th>metric</th><th>unit</th>{head}</tr></thead>'
                  f'<tbody>{body}</tbody></table>')


def headline(rd: RunData, perf: list[dict], fctx: dict) -> list[str]:
    """The write-up's first paragraph, one sentence per stored fact."""
    out = []
    p = rd.problem
    if rd.median_ms is not None:
        s = (f"{rd.variant_id} ({rd.variant.get('title') or rd.variant.get('slug') or ''}) took "
             f"{fmt_ms(rd.median_ms)} (median of {fmt_num(rd.timing.get('reps'))} repetitions) on {rd.device_name} "
             f"for {p.label()}: {fmt_num(rd.tflops)} TFLOP/s")
        pct = perf[0]["pct_peak"]
        out.append(s + (f", {fmt_pct(pct)} of the {perf[0]['peak_name']} peak." if pct is not None else "."))
    else:
        out.append(f"{rd.variant_id} has no timing stored for {p.label()} on {rd.device_name}.")
    fb = rd.fastest_baseline()
    if fb and rd.median_ms:
        ratio = fb["median_ms"] / rd.median_ms
        name = f"SDPA {fb.get('backend') or fb.get('name')} ({fb.get('dtype')})"
        out.append(f"The fastest SDPA backend measured, {name}, took {fmt_ms(fb['median_ms'])}: "
                   f"ours is {speed_phrase(ratio, name)}.")
    c = rd.correctness
    if "passed" in c:
        out.append(f"Correctness {'passed' if c['passed'] else 'FAILED'}: max abs error {fmt_num(c.get('max_abs_err'))}"
                   + (f" ({c['rule']})." if c.get("rule") else "."))
    if fctx["primary"]:
        f = fctx["primary"]
        out.append(f"Primary bottleneck: {f.get('class')}: {f.get('title')}.")
    elif rd.bottleneck:
        out.append(f"Primary bottleneck: {rd.bottleneck}.")
    return out


def run_context(rd: RunData, runs: list[RunData], out_dir: Path) -> dict:
    k = rd.primary_kernel
    perf = performance_rows(rd)
    fctx = findings_context(rd, k)
    prev_id, prev = _ladder_neighbour(rd, runs, -1)
    next_id, _ = _ladder_neighbour(rd, runs, +1)
    gain = None
    if prev is not None and rd.median_ms:
        gain = {"prev": prev, "measured": prev.median_ms / rd.median_ms, "overlap": ci_overlap(prev.timing, rd.timing),
                "predicted": rd.variant.get("predicted_gain"), "compare_page": compare_filename(prev.id, rd.id),
                "dtype_differs": prev.problem.dtype != rd.problem.dtype}
    next_variant = None
    if next_id:
        v = registry.get(next_id)
        next_variant = {"id": v.id, "title": v.title, "attacks": v.attacks, "predicted_gain": v.predicted_gain}
    stalls, stall_unit, stall_family = stall_reasons(k)
    stall_svg = charts.hbar_svg([charts.Bar(r, v, "warn" if i == 0 else "base") for i, (r, v) in enumerate(stalls[:14])],
                                unit="", title="Warp stall reasons") if stalls else Markup("")
    mem = memory_levels(k, rd.problem.min_bytes)
    mem_svg = charts.hbar_svg([charts.Bar(r["level"].split(" (")[0] if i == 0 else r["level"], r["bytes"] / 1e6,
                                          "ref" if i == 0 else "base",
                                          f"({fmt_times(r['x_min'])} minimum)" if i else "")
                               for i, r in enumerate(mem)], unit="MB", title="Bytes moved per memory level",
                              log=True) if len(mem) > 1 else Markup("")
    artifacts = []
    for name, fname in (rd.manifest.get("artifacts") or {}).items():
        path = rd.run.path / fname
        artifacts.append({"name": name, "file": fname, "exists": path.exists(),
                          "href": _relhref(path, out_dir), "size": path.stat().st_size if path.exists() else None})
    return {
        "rd": rd, "m": rd.manifest, "p": rd.problem, "variant": rd.variant, "device": rd.device,
        "peaks": rd.peaks, "software": rd.software, "timing": rd.timing, "correctness": rd.correctness,
        "headline": headline(rd, perf, fctx), "perf": perf, "gain": gain, "prev_id": prev_id,
        "next_variant": next_variant, "in_registry": rd.variant_id in registry.all_ids(), "kernel": k, "kernels": rd.kernels,
        "roofline": roofline(rd, k), "stalls": stalls, "stall_unit": stall_unit, "stall_family": stall_family,
        "stall_svg": stall_svg, "occupancy": occupancy(k, rd.device), "memory": mem, "memory_svg": mem_svg,
        "f": fctx, "timeline": timeline_context(rd), "artifacts": artifacts,
        "raw_metrics": raw_metrics_html(rd.kernels, rd.units), "units": rd.units,
        "stored_metric_count": rd.stored_metric_count,
        "manifest_json": json.dumps(rd.manifest, indent=2, default=str),
        "ptxas": (rd.manifest.get("build") or {}).get("ptxas") or [],
    }


def _relhref(path: Path, out_dir: Path) -> str:
    """A link that works from the page's folder (the report links artifacts in place, no copy)."""
    return Path(os.path.relpath(path.resolve(), out_dir.resolve())).as_posix()


# ------------------------------------------------------------------------------ the index

def ladder_groups(runs: list[RunData]) -> list[dict]:
    """One group per (shape, device): the latest run of each rung and the SDPA backends beside them."""
    groups: dict[tuple, list[RunData]] = {}
    for r in runs:
        groups.setdefault((r.shape_label(), r.device_name), []).append(r)
    order = {vid: i for i, vid in enumerate(registry.all_ids())}
    out = []
    for (shape, device), members in groups.items():
        latest: dict[str, RunData] = {}
        for r in sorted(members, key=lambda r: (r.manifest.get("created_utc", ""), r.id)):
            if r.median_ms:
                latest[r.variant_id] = r
        rungs = sorted(latest.values(), key=lambda r: (order.get(r.variant_id, len(order)), r.variant_id))
        if not rungs:
            continue
        newest = max(rungs, key=lambda r: (r.manifest.get("created_utc", ""), r.id))
        bars = [charts.Bar(f"{r.variant_id} {r.problem.dtype}", r.tflops, "rung") for r in rungs]
        base_bars, unavailable = [], []
        for b in newest.baselines:
            label = f"SDPA {b.get('backend') or b.get('name')} {b.get('dtype')}"
            if b.get("status") == "ok" and b.get("median_ms"):
                tfl = b.get("tflops") or newest.problem.flops / (b["median_ms"] * 1e9)
                base_bars.append(charts.Bar(label, tfl, "base"))
            else:
                unavailable.append((label, b.get("reason") or "no reason stored"))
        history = []
        by_id = {r.variant_id: r for r in rungs}
        ids = registry.all_ids() + sorted(set(by_id) - set(registry.all_ids()))
        for i, vid in enumerate(ids):
            r = by_id.get(vid)
            try:
                v = registry.get(vid)
                meta = {"title": v.title, "changed": v.changed, "attacks": v.attacks, "predicted_gain": v.predicted_gain}
            except LabError:
                meta = {}
            if r is not None:  # what the run recorded wins over today's registry text
                meta.update({k: r.variant[k] for k in ("title", "changed", "attacks", "predicted_gain") if r.variant.get(k)})
            prev = by_id.get(ids[i - 1]) if i > 0 else None
            measured = prev.median_ms / r.median_ms if (r and prev) else None
            history.append({"id": vid, "run": r, **meta, "measured": measured, "prev_id": ids[i - 1] if i else None,
                            "overlap": ci_overlap(prev.timing, r.timing) if (r and prev) else None,
                            "bottleneck": r.bottleneck if r else None})
        out.append({"key": f"{shape} @ {device}", "shape": shape, "device": device, "rungs": rungs,
                    "newest": newest, "svg": charts.ladder_svg(bars + base_bars), "unavailable": unavailable,
                    "history": history})
    out.sort(key=lambda g: (-len(g["rungs"]), g["key"]))
    return out


def index_context(runs: list[RunData]) -> dict:
    rows = []
    for r in sorted(runs, key=lambda r: (r.manifest.get("created_utc", ""), r.id), reverse=True):
        fb = r.fastest_baseline()
        rows.append({"rd": r, "pct_peak": r.pct_of_peak(r.tflops, r.problem.dtype),
                     "best_ratio": (fb["median_ms"] / r.median_ms) if (fb and r.median_ms) else None,
                     "best_name": f"{fb.get('backend') or fb.get('name')} {fb.get('dtype')}" if fb else None,
                     "passed": r.correctness.get("passed")})
    return {"rows": rows, "groups": ladder_groups(runs),
            "rungs": sorted({r.variant_id for r in runs}), "shapes": sorted({r.problem.label() for r in runs}),
            "devices": sorted({r.device_name for r in runs})}


# ------------------------------------------------------------------------------ rendering

@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """Compiled once per process: `lab report` over many runs reuses the parsed templates."""
    if not (TEMPLATES_DIR / "run.html").is_file():
        raise LabError(f"report templates not found in {TEMPLATES_DIR}", hint="reinstall with `pip install -e .`")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=fmt_num, pct=fmt_pct, bytes=fmt_bytes, ms=fmt_ms, times=fmt_times, shell=fmt_shell,
                       change=fmt_change)
    env.tests["given"] = lambda v: not _missing(v)   # stored and not None: `{% if x is given %}`
    env.globals.update(speed_phrase=speed_phrase, version=_lab_version())
    return env


def _lab_version() -> str:
    from lab import __version__

    return __version__


def compare_filename(a_id: str, b_id: str) -> str:
    return f"compare-{a_id}-{b_id}.html"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _out_dir(out: Path | None) -> Path:
    out = Path(out) if out else DEFAULT_OUT
    if out.exists() and not out.is_dir():
        raise LabError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _load_all(root: Path | None) -> list[RunData]:
    root = Path(root) if root else store_root()
    if root.exists() and not root.is_dir():
        raise LabError(f"{root} is a file, not a run store directory",
                       hint="pass the directory that holds the runs (default: profiles/)")
    return [load(r) for r in list_runs(root)]


@dataclass
class Rendered:
    index: Path
    pages: dict[str, Path]
    comparisons: list[Path]
    empty_store: Path | None = None   # set when the store held no run: the index says so

    def empty_message(self) -> str | None:
        if self.empty_store is None:
            return None
        return (f"no stored runs in {self.empty_store} (nor in {self.empty_store / 'examples'}); "
                f"`lab profile --variant v1` records one on a GPU machine")


def render(out: Path | None = None, root: Path | None = None, run_id: str | None = None) -> Rendered:
    """Write index.html, one page per run (or only `run_id`'s) and the comparison of each rung with
    its previous rung. Raises LabError when there is nothing to render or a run is malformed."""
    root = Path(root) if root else store_root()
    runs = _load_all(root)
    selected = runs
    if run_id is not None:
        wanted = find_run(run_id, root)
        found = next((r for r in runs if r.run.path.resolve() == wanted.path.resolve()), None)
        if found is None:                       # a run directory outside the store, given by path
            found = load(wanted)
            runs.append(found)
        selected = [found]
    out_dir = _out_dir(out)
    env = environment()
    if not runs:   # not an error: an index that says so, and a message from the CLI
        index = out_dir / "index.html"
        _write(index, env.get_template("index.html").render(**index_context([]), store=root))
        return Rendered(index, {}, [], empty_store=root)
    page_t = env.get_template("run.html")
    pages, comparisons = {}, []
    from lab.compare import compare_runs   # compare imports this module's helpers

    for rd in selected:
        ctx = run_context(rd, runs, out_dir)
        path = out_dir / f"{rd.id}.html"
        _write(path, page_t.render(**ctx))
        pages[rd.id] = path
        if ctx["gain"]:
            comparisons.append(render_compare(compare_runs(ctx["gain"]["prev"], rd), out_dir))
    index = out_dir / "index.html"
    _write(index, env.get_template("index.html").render(**index_context(runs), store=root))
    return Rendered(index, pages, comparisons)


def render_compare(comparison, out: Path | None = None) -> Path:
    out_dir = _out_dir(out)
    path = out_dir / compare_filename(comparison.a.id, comparison.b.id)
    _write(path, environment().get_template("compare.html").render(c=comparison))
    return path


def render_run_page(run_dir: Path, out: Path | None = None) -> Path:
    """Render one stored run's page (and the index); returns the page's path. Used by `lab profile`."""
    run_dir = Path(run_dir)
    return render(out, root=run_dir.parent if run_dir.parent.name != "examples" else run_dir.parent.parent,
                  run_id=str(run_dir)).pages[run_dir.name]


def open_in_browser(path: Path) -> bool:
    """Open a page where a browser exists; False (and nothing raised) where none does."""
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return False
    return bool(browser.open(path.resolve().as_uri()))

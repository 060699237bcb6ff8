"""A stored run, read once, and the numbers a page derives from it.

`RunData` wraps one run of the store: its manifest (checked field by field by lab.store.manifest
when the run was read: a malformed run is a LabError naming the field, never a KeyError deep inside
a template), and its Parquet tables read at most once, straight into plain rows with pyarrow. The functions below derive what the pages state
from those stored values only (bytes per memory level, warp stall reasons, the occupancy limiter,
the performance table, the rung before and after on the ladder, the stored findings), so `lab report`
and `lab compare` need neither the analysis code nor torch, a GPU, ncu or nsys. Where a value is
absent they leave it out or return None, and the page says so instead of guessing.

Drawing (charts, Markup, Jinja) is lab.report.pages's job; wording numbers is lab.report.formatting's.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lab.ladder import registry
from lab.errors import LabError
from lab.report.formatting import fmt_num, fmt_pct, speed_phrase
from lab.measure.problem import DTYPE_BYTES, Problem
from lab.store.runs import DamagedRun, Run, open_root, scan_runs

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


class RunDamaged(LabError):
    """A stored run found unreadable while a page was being made (a table file missing or corrupt):
    `lab report` lists it as damaged and renders the others."""

    def __init__(self, run: Run, what: str):
        super().__init__(f"{run.path}: malformed run: {what}",
                         hint="a run is written by `lab profile`; move a damaged run out of the store")
        self.path = run.path
        self.reason = what


def _bad(run: Run, what: str) -> RunDamaged:
    return RunDamaged(run, what)


# ----------------------------------------------------------------------------------- a run

@dataclass
class RunData:
    """A validated stored run, its tables read at most once."""

    run: Run
    _tables: dict = field(default_factory=dict)

    def __post_init__(self):
        # the manifest was checked field by field when the run was read (lab.store.manifest); the
        # sections are kept as plain dicts here, the shape pages and templates read
        m = self.run.manifest
        self.problem = self.run.record.problem
        self.variant = m["variant"]
        self.device = m.get("device") or {}
        self.timing = m.get("timing") or {}
        self.correctness = m.get("correctness") or {}
        self.software = m.get("software") or {}
        self.peaks = self.device.get("peaks") or {}
        self.baselines = m.get("baselines") or []

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

    def fastest_baseline(self, dtype: str | None = None) -> dict | None:
        """The fastest SDPA backend measured, of `dtype` where given (the rung's own dtype is the
        fair comparison; a lower precision's backend also gains from the precision)."""
        ok = [b for b in self.ok_baselines() if dtype is None or b.get("dtype") == dtype]
        return min(ok, key=lambda b: b["median_ms"]) if ok else None

    def baseline_comparison(self) -> dict:
        """The headline comparison: the fastest backend of the rung's own dtype ('same'), and the
        fastest of any dtype where that one is of another dtype ('cross'), each with its ratio
        (its time / ours: above 1, ours is faster)."""
        out = {"same": None, "cross": None}
        if not self.median_ms:
            return out
        for key, b in (("same", self.fastest_baseline(self.problem.dtype)), ("cross", self.fastest_baseline())):
            if b is None or (key == "cross" and b.get("dtype") == self.problem.dtype):
                continue
            out[key] = {"baseline": b, "ratio": b["median_ms"] / self.median_ms,
                        "name": f"SDPA {b.get('backend') or b.get('name')} ({b.get('dtype')})"}
        return out

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
    """pandas keeps DataFrame.attrs (lab.profilers.ncu puts metric units there) in the Parquet schema."""
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


def load_all(root: Path | None) -> tuple[list[RunData], list[DamagedRun]]:
    """Every readable run of the store at `root` (default: profiles/ and its examples/), and the
    damaged ones with their reasons."""
    runs, damaged = scan_runs(open_root(root))
    return [load(r) for r in runs], damaged


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


SASS_FP32 = ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
             "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")


def sass_fp32_flops(k: dict | None) -> float | None:
    """FP32 operations the kernel executed, from ncu's per-thread SASS counts (an FFMA is two)."""
    if not k or not all(isinstance(k.get(n), (int, float)) for n in SASS_FP32):
        return None
    ffma, fadd, fmul = (float(k[n]) for n in SASS_FP32)
    return 2 * ffma + fadd + fmul


# ----------------------------------------------------------------- runs on the ladder

def ladder_neighbour(rd: RunData, runs: list[RunData], step: int) -> tuple[str | None, RunData | None]:
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


# -------------------------------------------------------------------- stored findings

def findings_context(rd: RunData, primary: dict | None) -> dict:
    """The stored findings (evidence parsed from its JSON string) and Nsight's rule results, the
    primary kernel's first: what the page's bottleneck section lists."""
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

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
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from lab.analysis import metrics as interpret
from lab.analysis.metrics import PAGE_COLUMNS, PAGE_COLUMNS_NARROW
from lab.ladder import registry
from lab.errors import LabError
from lab.jsonvalues import plain as _plain
from lab.report.formatting import fmt_bytes, fmt_num, fmt_pct, speed_phrase
from lab.measure.problem import DTYPE_BYTES, Problem, label_without_dtype
from lab.measure import rates
from lab.measure.rates import MODE_FLOP_FACTOR
from lab.store.manifest import candidate_label
from lab.store.runs import DamagedRun, Run, open_root, read_arrow, scan_runs


KERNEL_COLUMNS = ("kernel", "kernel_name", "Kernel Name", "name", "demangled_name", "function")
DURATION = "gpu__time_duration.sum"
BACKWARD_MODES = ("bwd", "fwd+bwd")   # runs whose profile holds a backward's kernels

# The ncu metric columns a page (and a comparison) reads: lab.analysis.metrics names them, beside the
# functions that interpret them.
PAGE_METRICS = re.compile(PAGE_COLUMNS.pattern[:-2] + "|" + "|".join(re.escape(c) for c in KERNEL_COLUMNS) + ")$")
# a run that stored its derived values needs only the metrics it shows (a fraction of the columns)
PAGE_METRICS_NARROW = re.compile(PAGE_COLUMNS_NARROW.pattern[:-2] + "|"
                                 + "|".join(re.escape(c) for c in KERNEL_COLUMNS) + ")$")


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
    def candidate(self) -> dict | None:
        """The tuning candidate the run ran instead of the rung's launcher ({"label", "index", "causal"}:
        `lab profile --candidate`), None for a run of the rung itself."""
        return self.manifest.get("candidate") if candidate_label(self.manifest) is not None else None

    @property
    def name(self) -> str:
        """What the run timed, as pages and `lab compare` name it: the rung's id, or `v9 candidate 'LABEL'`."""
        c = self.candidate
        return self.variant_id if c is None else f"{self.variant_id} candidate {c['label']!r}"

    @property
    def device_name(self) -> str:
        return self.device.get("name") or "unknown device"

    @property
    def shape_key(self) -> tuple:
        p = self.problem
        return (p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim, p.causal)

    def shape_label(self) -> str:
        return label_without_dtype(self.problem.label())   # a deterministic run's keeps -deterministic

    # numbers --------------------------------------------------------------------------
    @property
    def median_ms(self) -> float | None:
        return self.timing.get("median")

    @property
    def mode(self) -> str:
        """What the run timed and profiled: "fwd", "bwd" or "fwd+bwd" (a run from before the backward: fwd)."""
        return self.manifest.get("mode") or "fwd"

    @cached_property
    def rates(self) -> dict:
        """The numbers derived from the run's median in its mode (flops, tflops, pct_of_peak, peak,
        min_bytes) as `lab profile` stored them with the timing; a run stored before one of them was gets
        it from the same function (lab.measure.rates.derived), never a second formula."""
        fresh = rates.derived(self.problem, self.mode, self.median_ms, self.peaks)
        return {k: self.timing.get(k) if self.timing.get(k) is not None else v for k, v in fresh.items()}

    @property
    def flops(self) -> float:
        """The FLOPs of what the run timed, as FlashAttention counts them (backward = 2.5x forward)."""
        return self.rates["flops"]

    @property
    def tflops(self) -> float | None:
        return self.rates["tflops"]

    @property
    def min_bytes(self) -> int:
        """The minimum DRAM bytes of the run's mode (lab.measure.rates' rule)."""
        return self.rates["min_bytes"]

    @property
    def min_bytes_rule(self) -> str:
        return rates.min_bytes_rule(self.mode)

    def peak_for(self, dtype: str) -> tuple[str, float | None]:
        """The ceiling a dtype is measured against (lab.measure.rates.peak_for on the run's device)."""
        return rates.peak_for(self.peaks, dtype)

    def baseline_rates(self, b: dict) -> dict:
        """A baseline row's tflops and pct_of_peak, as stored (the same function where an older run lacks them)."""
        fresh = rates.derived(self.problem, self.mode, b.get("median_ms"), self.peaks, dtype=b.get("dtype"))
        return {k: b.get(k) if b.get(k) is not None else fresh[k] for k in ("tflops", "pct_of_peak")}

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
            out[key] = {"baseline": b, "ratio": b.get("ratio") or rates.ratio(b["median_ms"], self.median_ms),
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
                try:   # the store's reader: a wide table may be stored long (lab.store.runs.write_table)
                    t, names = read_arrow(self.run.path / fname, columns.match if columns else None)
                except (OSError, ValueError, pa.ArrowException) as e:   # a missing or unreadable file
                    raise _bad(self.run, f"table {name!r} cannot be read ({e})") from None
                self._tables[key] = Table(t.column_names, [{k: _plain(v) for k, v in r.items()}
                                                           for r in t.to_pylist()], _pandas_attrs(t), len(names))
        return self._tables[key]

    @property
    def stored_metric_count(self) -> int:
        t = self.table("metrics", self.page_columns)
        return t.stored_columns if t is not None else 0

    @cached_property
    def kernels(self) -> list[dict]:
        """One dict per profiled kernel: {'kernel': name, metric: value}, the longest first."""
        stored = self.derived_values
        t = self.table("metrics", self.page_columns)
        if t is None or not t.rows:
            return []
        name_col = next((c for c in KERNEL_COLUMNS if c in t.columns), None)
        rows = []
        for rec in t.rows:
            rec = dict(rec)
            rec["kernel"] = str(rec.get(name_col)) if name_col else "kernel"
            # the lab's interpretation of the metrics, as `lab profile` stored it; a run older than the
            # derived table gets it from the same interpreter (lab.analysis.metrics), never a second one
            d = stored.get(rec.get("kernel_index"))
            rec["derived"] = d if d is not None else interpret.derived_values(interpret.kernel_facts(rec))
            rows.append(rec)
        rows.sort(key=lambda r: -(r.get(DURATION) or 0) if isinstance(r.get(DURATION), (int, float)) else 0)
        return rows

    @cached_property
    def launched_mangled(self) -> set[str]:
        """The mangled names of the kernels the run profiled (Nsight Compute's kernel_mangled), as ptxas's
        records name them too; empty where they are not stored or the table cannot be read (the page's
        kernel sections say so)."""
        try:
            cols = self.run.columns("metrics", ["kernel_mangled"])
        except (OSError, ValueError, pa.ArrowException):
            return set()
        return {m for m in (cols or {}).get("kernel_mangled", []) if m}

    @property
    def page_columns(self) -> re.Pattern:
        """The metric columns the page reads: few where the derived values were stored, else those the
        interpreter derives them from."""
        return PAGE_METRICS_NARROW if self.derived_values else PAGE_METRICS

    @cached_property
    def derived_values(self) -> dict:
        """kernel_index -> the derived values `lab profile` stored (lab.analysis.metrics.derived_values)."""
        t = self.table("derived")
        out = {}
        for rec in (t.rows if t is not None else []):
            try:
                out[rec.get("kernel_index")] = json.loads(rec.get("derived") or "null")
            except ValueError:
                raise _bad(self.run, "table 'derived' holds a value that is not JSON") from None
        return {k: v for k, v in out.items() if isinstance(v, dict)}

    @cached_property
    def units(self) -> dict[str, str]:
        """ncu's unit of each metric column, where the metrics table carries them."""
        t = self.table("metrics", self.page_columns)
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


def _derived(k: dict | None) -> dict:
    return (k or {}).get("derived") or {}


def dram_bytes(k: dict | None) -> tuple[float | None, str]:
    """DRAM bytes read + written by the kernel, and the metrics they come from (the stored derived values)."""
    dram = next((r for r in _derived(k).get("memory_traffic") or [] if r["level"] == "DRAM"), None)
    return (dram["bytes"], dram["source"]) if dram else (None, "")


def below_minimum_note(k: dict | None, problem: Problem, mode: str = "fwd") -> str | None:
    """Why a kernel's DRAM bytes can be under the mode's minimum, said with its own numbers: ncu counts
    the DRAM traffic of the kernel's launch only, so output still in L2 when the kernel ends (written
    back later) and inputs already in L2 when it starts are not counted. None when the bytes are not
    below the minimum (or not stored)."""
    total, _ = dram_bytes(k)
    minimum = rates.min_bytes(problem, mode)
    if total is None or total >= minimum:
        return None
    tensors = rates.io_tensors(problem, mode)
    out_bytes = sum(t.bytes for t in tensors if t.written)
    in_bytes = minimum - out_bytes
    outs = ", ".join(t.name for t in tensors if t.written)
    ins = ", ".join(t.name for t in tensors if not t.written)
    rd, wr = k.get("dram__bytes_read.sum"), k.get("dram__bytes_write.sum")
    parts = []
    if isinstance(wr, (int, float)) and wr < out_bytes:
        parts.append(f"it wrote {fmt_bytes(wr)} to DRAM against the outputs' ({outs}) {fmt_bytes(out_bytes)}: the rest "
                     f"was still in L2 when the kernel ended, written back after it")
    if isinstance(rd, (int, float)) and rd < in_bytes:
        parts.append(f"it read {fmt_bytes(rd)} from DRAM against the inputs' ({ins}) {fmt_bytes(in_bytes)}: part of the "
                     f"inputs was already in L2 when it started")
    why = "; ".join(parts) if parts else ("part of the output was still in L2 when the kernel ended, or part of the "
                                          "inputs already in L2 when it started")
    return (f"DRAM bytes ({fmt_bytes(total)}) are below the minimum ({fmt_bytes(minimum)}) because ncu counts "
            f"only the DRAM traffic of the kernel's own launch: {why}. The kernel does not beat the minimum; "
            f"the L2 holds the difference.")


def memory_levels(k: dict | None, min_bytes: int, rule: str = rates.min_bytes_rule("fwd")) -> list[dict]:
    rows = [{"level": f"minimum ({rule})", "bytes": float(min_bytes), "x_min": 1.0,
             "source": "problem shape x dtype size (lab.measure.rates)"}]
    for r in _derived(k).get("memory_traffic") or []:
        rows.append({"level": r["level"], "bytes": r["bytes"], "x_min": r["bytes"] / min_bytes if min_bytes else None,
                     "source": r["source"]})
    return rows


def stall_reasons(k: dict | None) -> tuple[list[tuple[str, float]], str, str]:
    """(reason, value) largest first, the unit, and the metric family, as the analysis derived them."""
    d = _derived(k)
    stalls = [(r, v) for r, v, _ in d.get("stalls") or []]
    fam = d.get("stall_metric_family") or ""
    return stalls, d.get("stall_unit") or "", fam.strip("^$").replace("\\", "").replace("(w+?)", "<reason>").replace("(w+)", "<reason>")


def occupancy(k: dict | None, device: dict) -> dict | None:
    if not k:
        return None
    d = _derived(k)
    limits = [(label, float(k[n]), n) for n, label in interpret._OCC_LIMITERS if isinstance(k.get(n), (int, float))]
    lowest = d.get("occupancy_limit_blocks")
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
    w = d.get("warps")
    if grid is not None and sms:
        sentences.append(f"The grid has {fmt_num(grid)} CTAs on {fmt_num(sms)} SMs"
                         + (f": {fmt_num(waves)} waves." if waves is not None else ".")
                         + (f" {fmt_num(w['launched'])} warps in flight for {fmt_num(w['slots'])} warp slots "
                            f"({fmt_pct(100 * w['share_of_slots'])})." if w else ""))
    return {"rows": [r for r in rows if r[1] is not None], "limits": limits, "limiters": limiters,
            "sentences": sentences}


def sass_fp32_flops(k: dict | None) -> float | None:
    """FP32 operations the kernel executed, as the analysis counted them from SASS (an FFMA is two)."""
    v = _derived(k).get("fp32_flops")
    return float(v) if isinstance(v, (int, float)) else None


def section_set_label(profile: dict | None) -> str | None:
    """The section set as the stored ncu command line says it (`--set detailed`), not the lab's
    alias for its default ('default-lab'): the page and the command must name the same set."""
    if not isinstance(profile, dict):
        return None
    stored = profile.get("section_set")
    cmd = [str(a) for a in profile.get("command") or []]
    given = next((cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "--set"), None)
    if given is None:   # a lab set or a list of sections: the stored name says it
        return stored
    if stored and stored != given and stored.startswith("default"):
        return f"{given} (the lab's default)"
    return given


# ----------------------------------------------------------------- runs on the ladder

def latest_alike(rd: RunData, runs: list[RunData], variant_id: str) -> RunData | None:
    """The latest timed run of `variant_id`'s own launcher (a tuning candidate's run passed over) on `rd`'s
    shape, device and mode, the same dtype preferred."""
    same = [r for r in runs if r.variant_id == variant_id and r.candidate is None and r.shape_key == rd.shape_key
            and r.device_name == rd.device_name and r.mode == rd.mode and r.median_ms]
    same.sort(key=lambda r: (r.problem.dtype == rd.problem.dtype, r.manifest.get("created_utc", ""), r.id))
    return same[-1] if same else None


def ladder_neighbour(rd: RunData, runs: list[RunData], step: int) -> tuple[str | None, RunData | None]:
    """The registry's previous (step=-1) or next (+1) rung id, and its latest run on the same shape,
    device and mode (same dtype preferred; latest_alike). A backward run's neighbours are the rungs that have
    a backward: a forward-only rung did none of the work it timed."""
    try:
        ladder = [v for v in registry.variants() if rd.mode == "fwd" or v.backward]
    except LabError:   # a broken workspace file: the page renders without its neighbours
        return None, None
    ids = [v.id for v in ladder]
    if rd.variant_id not in ids:
        return None, None
    i = ids.index(rd.variant_id) + step
    if not 0 <= i < len(ids):
        return None, None
    other_id = ids[i]
    return other_id, latest_alike(rd, runs, other_id)


_SHAPE_IN_TEXT = re.compile(r"\bB\s*=?\s*(\d+)\s*[,\s-]\s*H\s*=?\s*(\d+)\s*[,\s-]\s*N\s*=?\s*(\d+)"
                            r"(?:\s*[,\s-]\s*D\s*=?\s*(\d+))?")


def prediction_shape_note(text: str | None, problem: Problem) -> str | None:
    """A prediction states the shape it was made for ("~300 TFLOP/s at B=8,H=32,N=4096,D=64");
    when none of the shapes it names is the measured one, say so beside the measured gain, so a
    prediction for N=4096 is not read as one for N=1024. None when it names no shape or this one."""
    if not text:
        return None
    named = []
    for m in _SHAPE_IN_TEXT.finditer(text):
        b, h, n, d = (int(x) if x else None for x in m.groups())
        named.append((b, h, n, d))
    if not named:
        return None
    here = (problem.batch, problem.heads, problem.seqlen_q, problem.head_dim)
    if any(all(x is None or x == y for x, y in zip(shape, here)) for shape in named):
        return None
    said = ", ".join(f"B{b}-H{h}-N{n}" + (f"-D{d}" if d else "") for b, h, n, d in named)
    return (f"the prediction was made for {said}; the gain was measured on {problem.label()}, "
            f"so the two are not the same test")


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
             "tflops": rd.tflops, "pct_peak": rd.rates["pct_of_peak"],
             "peak_name": rd.peak_for(rd.problem.dtype)[0], "ratio": None, "phrase": ""}]
    for b in rd.baselines:
        dtype = b.get("dtype") or "?"
        r = rd.baseline_rates(b) if dtype in DTYPE_BYTES else {"tflops": b.get("tflops"), "pct_of_peak": None}
        name = f"SDPA {b.get('backend') or str(b.get('name', '?')).removeprefix('sdpa-')}"
        rows.append({"name": name, "dtype": dtype, "ours": False, "status": b.get("status", "?"),
                     "reason": b.get("reason") or "", "median_ms": b.get("median_ms"), "std_ms": b.get("std_ms"),
                     "ci95": (b.get("ci95_low"), b.get("ci95_high")), "tflops": r["tflops"],
                     "pct_peak": r["pct_of_peak"], "peak_name": rd.peak_for(dtype)[0], "ratio": b.get("ratio"),
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


# -------------------------------------------------------------------- the kernels of a backward

def _cited(lines_json) -> list[str]:
    """'planted_bwd.cu:39' (or 'PC 0x7f...' where the module has no line information) for each line a
    stored finding cites."""
    try:
        cited = json.loads(lines_json) if isinstance(lines_json, str) else (lines_json or [])
    except ValueError:
        return []
    out = []
    for c in cited if isinstance(cited, list) else []:
        if not isinstance(c, dict):
            continue
        if c.get("line") is not None:
            out.append(f"{c.get('file') or '?'}:{c['line']}")
        elif c.get("pc"):
            out.append(f"PC {c['pc']}")
    return out


def backward_kernels(rd: RunData) -> dict | None:
    """The kernels of a backward (or forward+backward) run, in launch order: each with its share of the
    profiled time, its verdict (its first stored finding) and the source lines the verdict rests on; and
    the tensor work all of them executed against the forward's FLOPs. None for a forward run."""
    if rd.mode not in BACKWARD_MODES or not rd.kernels:
        return None
    ks = sorted(rd.kernels, key=lambda k: k.get("kernel_index") if isinstance(k.get("kernel_index"), int) else 0)
    durations = [k.get(DURATION) if isinstance(k.get(DURATION), (int, float)) else None for k in ks]
    stored = [_derived(k).get("duration_share_pct") for k in ks]
    # the shares the analysis stored; a run older than them gets them from the same function
    shares = stored if all(s is not None for s in stored) else interpret.duration_shares(durations)
    found = rd.table("findings")
    by_kernel: dict = {}
    for rec in sorted(found.rows if found is not None else [], key=lambda r: r.get("rank") or 0):
        by_kernel.setdefault(rec.get("kernel_index"), []).append(rec)
    rows = []
    for k, d, share in zip(ks, durations, shares):
        fs = by_kernel.get(k.get("kernel_index"), [])
        top = fs[0] if fs else None
        rows.append({"index": k.get("kernel_index"), "kernel": k["kernel"],
                     "function": k.get("kernel_function") or k["kernel"], "duration_ns": d, "share_pct": share,
                     "verdict": top.get("class") if top else None, "title": top.get("title") if top else None,
                     "severity": top.get("severity") if top else None,
                     "advice": top.get("advice") if top else None,
                     "lines": _cited(top.get("lines")) if top else [],
                     "also": [f.get("class") for f in fs[1:]],
                     "registers": k.get("launch__registers_per_thread"), "role": _derived(k).get("role")})
    tensor = [_derived(k).get("tensor_flops") for k in ks]
    tensor_total = sum(t for t in tensor if t) if any(tensor) else None
    return {"rows": rows, "total_ns": sum(d for d in durations if d) or None, "recorded": found is not None,
            "tensor_flops": tensor_total, "forward_flops": rd.problem.forward_flops,
            "tensor_x_forward": tensor_total / rd.problem.forward_flops if tensor_total else None,
            "convention_x_forward": MODE_FLOP_FACTOR[rd.mode]}

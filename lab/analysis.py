"""From an Nsight Compute report to findings: the bottleneck of each kernel, its evidence, the
estimated gain of fixing it, and the next step (naming the rung of the ladder where one applies).

Two sources, merged per class:
  * Nsight Compute's own rule results (ncu_report gives them with estimated speedups), mapped onto
    the lab's fixed vocabulary (CLASSES); informational results and noise (the L2-compression
    advice every kernel gets, roofline and NUMA notes) are dropped.
  * The lab's judgement from the metrics: which unit is saturated (the SpeedOfLight breakdowns),
    small grids (CTAs vs SMs), the occupancy limiter, stall reasons ranked, bytes used per 32-byte
    sector, bank conflicts as n-way, local-memory traffic, threads per warp instruction, FLOP/s
    against the FP32 and tensor peaks, and with the attention problem: DRAM bytes against the
    minimum for Q, K, V and O.

Ordering ("the finding whose fix gains most first"). Each finding carries a rank, a share of the
kernel's runtime in percent:
  * Nsight's estimated speedup where it gives one (a `local` estimate, which measures one unit's
    efficiency rather than the kernel's runtime, counts half);
  * otherwise the lab's model: idle SMs for a small grid, wasted bytes times the busy unit's
    utilization for coalescing, bank conflicts and local memory, idle lanes for divergence, the
    distance to the nearest roof for latency;
  * a saturated unit (memory- or compute-bound) ranks by its utilization: at U% of a unit's peak,
    no fix that leaves that unit's work unchanged gains more than 100-U%, so latency and
    occupancy findings are capped there; and when a specific cause explains the saturated unit
    (bank conflicts for a busy L1, divergence for a busy FMA pipe), the cause ranks just above it:
    its fix is the actionable one;
  * latency and occupancy fixes act only on SMs that have work: with fewer CTAs than SMs their
    rank is scaled by the busy fraction.
A finding's `est_speedup_pct` is Nsight's estimate when the finding comes from a rule, the lab's
model where it has one, and null for a saturated unit (being at the roof is not a gain).

A metric the report lacks (a basic-set report has no stall reasons) leaves its evidence null and
lowers the finding's severity one step; it never raises.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import pandas as pd

from lab.gpu_specs import peaks_for

CLASSES = ("small-grid", "occupancy-limited", "latency-bound", "memory-bound", "compute-bound",
           "uncoalesced-global", "bank-conflicts", "local-memory", "divergence", "launch-bound")

# Which specific causes explain which symptom; on equal rank a cause is listed first.
_CAUSES = {
    "memory-bound": ("uncoalesced-global", "bank-conflicts", "local-memory"),
    "compute-bound": ("divergence",),
    "latency-bound": ("small-grid", "occupancy-limited", "local-memory"),
}
_TIE_ORDER = ("small-grid", "uncoalesced-global", "bank-conflicts", "local-memory", "divergence",
              "occupancy-limited", "launch-bound", "memory-bound", "compute-bound", "latency-bound")

BOUND_PCT = 60.0        # ncu's SpeedOfLight rule: above 60% of a unit's peak is throughput-bound territory
LOCAL_WEIGHT = 0.5      # a `local` Nsight estimate (one unit's efficiency) counts half toward the rank
LAUNCH_OVERHEAD_NS = 3000.0  # typical CUDA launch-to-launch gap; a kernel near it is launch-bound
SECTOR_BYTES = 32.0

# Rules that are noise for this lab: advice every report carries, or information with no action.
_DROPPED_RULES = {"MemoryL2Compression", "SOLFPRoofline", "SOLDPRoofline", "NumaAffinity", "NvlinkTopology",
                  "MemoryApertureUsage", "PmSamplingOverflow", "HierarchicalRoofline"}

# The curated metrics of each kernel (`metrics` in the JSON), in Nsight's own names; present ones only.
KEY_METRICS = (
    "gpu__time_duration.sum",
    "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
    "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
    "launch__waves_per_multiprocessor", "device__attribute_multiprocessor_count",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "sm__maximum_warps_per_active_cycle_pct", "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks", "launch__occupancy_limit_barriers",
    "smsp__average_warp_latency_per_inst_issued.ratio",
    "smsp__thread_inst_executed_per_inst_executed.ratio",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
    "profiler__replayer_passes",
)


# ----------------------------------------------------------------------------- data model

@dataclass
class Finding:
    cls: str
    title: str
    severity: str
    est_speedup_pct: float | None
    evidence: dict[str, Any]
    advice: str
    source: str                      # "ncu-rule:<id>" or "lab"
    rank: float = 0.0                # share of runtime (percent) used for ordering; see module doc

    def to_dict(self) -> dict:
        return {"class": self.cls, "title": self.title, "severity": self.severity,
                "est_speedup_pct": None if self.est_speedup_pct is None else round(float(self.est_speedup_pct), 2),
                "evidence": self.evidence, "advice": self.advice, "source": self.source}


@dataclass
class KernelAnalysis:
    kernel: str
    duration_ns: float | None
    device: str | None
    metrics: dict[str, Any]
    bottleneck: str | None
    findings: list[Finding]
    kernel_index: int = 0
    nvtx: str | None = None
    derived: dict[str, Any] = field(default_factory=dict)   # the lab's computed values (lab__*)
    rules: list[dict] = field(default_factory=list)         # Nsight's rule results for this kernel

    def to_dict(self) -> dict:
        """Exactly the object of DESIGN.md's `lab analyze --json` contract."""
        return {"kernel": self.kernel, "duration_ns": self.duration_ns, "device": self.device,
                "metrics": self.metrics, "bottleneck": self.bottleneck,
                "findings": [f.to_dict() for f in self.findings]}


# ----------------------------------------------------------------------------- metric access

def _plain(v):
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


class _Metrics:
    """One kernel's metrics by ncu name; `num` gives a float or None (missing, NaN or text)."""

    def __init__(self, row: dict):
        self.row = row

    def raw(self, name: str):
        return _plain(self.row.get(name))

    def num(self, *names: str) -> float | None:
        for n in names:
            v = self.raw(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
        return None

    def text(self, name: str) -> str | None:
        v = self.raw(name)
        return v if isinstance(v, str) else None

    def matching(self, pattern: re.Pattern) -> dict[str, float]:
        out = {}
        for k in self.row:
            m = pattern.match(k)
            if m:
                v = self.num(k)
                if v is not None:
                    out[m.group(1)] = v
        return out


def _sum(*vals: float | None) -> float | None:
    return None if any(v is None for v in vals) else float(sum(vals))


def _r(v: float | None, nd: int = 2):
    return None if v is None else round(float(v), nd)


# ----------------------------------------------------------------------------- what the metrics say

# Components of sm__throughput's breakdown that are memory instructions being issued, not math.
_MEMORY_ISSUE = re.compile(r"pipe_lsu|mio|lsu|pipe_tex|l1tex|tma")


def _unit_name(metric: str) -> str:
    m = metric.split(".")[0]
    if m.startswith(("dram__", "fbpa__", "gpu__dram")):
        return "DRAM"
    if m.startswith("lts__"):
        return "L2"
    if m.startswith("l1tex__"):
        return "L1TEX (shared memory)" if ("shared" in m or "data_bank" in m) else "L1TEX"
    for key, name in (("pipe_lsu", "LSU pipe"), ("mio", "MIO (shared memory / special function queue)"),
                      ("tensor", "tensor pipe"), ("fma", "FMA pipe"), ("alu", "ALU pipe"), ("fp64", "FP64 pipe"),
                      ("xu", "XU (transcendental) pipe"), ("fp16", "FP16 pipe"), ("pipe_shared", "FP16+tensor pipe"),
                      ("uniform", "uniform pipe"), ("adu", "ADU pipe"), ("cbu", "branch unit"),
                      ("issue_active", "instruction issue"), ("inst_executed", "instruction issue"),
                      ("inst_issued", "instruction issue")):
        if key in m:
            return name
    return m


def _breakdown(M: _Metrics, name: str) -> dict[str, float]:
    txt = M.text(f"breakdown:{name}")
    if not txt:
        return {}
    out = {}
    for part in txt.split(","):
        v = M.num(part.strip())
        if v is not None:
            out[part.strip()] = v
    return out


def throughput(M: _Metrics) -> dict:
    """The busiest compute and memory units, from SpeedOfLight's breakdowns (falling back to the
    top-level percentages). sm__throughput mixes math pipes with memory-instruction issue (LSU,
    MIO); the memory-side parts count as memory here."""
    sm = _breakdown(M, "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    mem = _breakdown(M, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    compute = {k: v for k, v in sm.items() if not _MEMORY_ISSUE.search(k)}
    memory = dict(mem, **{k: v for k, v in sm.items() if _MEMORY_ISSUE.search(k)})
    out = {"compute_pct": None, "compute_metric": None, "memory_pct": None, "memory_metric": None,
           "math_pct": None, "math_metric": None, "from_breakdown": bool(sm or mem)}
    if compute:
        k = max(compute, key=compute.get)
        out.update(compute_pct=compute[k], compute_metric=k)
        pipes = {k: v for k, v in compute.items() if "pipe" in k}   # the busiest math pipe, issue aside
        if pipes:
            k = max(pipes, key=pipes.get)
            out.update(math_pct=pipes[k], math_metric=k)
    else:
        v = M.num("sm__throughput.avg.pct_of_peak_sustained_elapsed")
        out.update(compute_pct=v, compute_metric="sm__throughput.avg.pct_of_peak_sustained_elapsed" if v is not None else None)
    if memory:
        k = max(memory, key=memory.get)
        out.update(memory_pct=memory[k], memory_metric=k)
    else:
        cands = {n: M.num(n) for n in ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                                      "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                                      "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                                      "lts__throughput.avg.pct_of_peak_sustained_elapsed",
                                      "l1tex__throughput.avg.pct_of_peak_sustained_elapsed")}
        cands = {k: v for k, v in cands.items() if v is not None}
        if cands:
            k = max(cands, key=cands.get)
            out.update(memory_pct=cands[k], memory_metric=k)
    return out


_STALL_FAMILIES = (
    re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$"),
)
_NOT_STALLS = {"selected"}  # issuing, not waiting


def stall_reasons(M: _Metrics) -> tuple[list[tuple[str, float, float]], str | None]:
    """[(reason, value, share of all stalls in %)] most first, from whichever family the report has
    (WarpStateStats averages, else sampled PCs), and the family's metric pattern."""
    for fam in _STALL_FAMILIES:
        vals = {k: v for k, v in M.matching(fam).items() if k not in _NOT_STALLS and not k.endswith("_not_issued")}
        total = sum(vals.values())
        if vals and total > 0:
            ranked = sorted(((k, v, 100.0 * v / total) for k, v in vals.items()), key=lambda t: -t[1])
            return ranked, fam.pattern
    return [], None


_OCC_LIMITERS = (("launch__occupancy_limit_registers", "registers"),
                 ("launch__occupancy_limit_shared_mem", "shared memory"),
                 ("launch__occupancy_limit_warps", "warps per block (block size)"),
                 ("launch__occupancy_limit_blocks", "blocks per SM"),
                 ("launch__occupancy_limit_barriers", "barriers"))


def occupancy_limiter(M: _Metrics) -> tuple[str | None, float | None, dict]:
    """The resource that allows the fewest blocks per SM, its block count, and all limits."""
    limits = {m: M.num(m) for m, _ in _OCC_LIMITERS}
    present = [(v, name, m) for m, name in _OCC_LIMITERS if (v := limits[m]) is not None]
    if not present:
        return None, None, limits
    v, name, _ = min(present, key=lambda t: t[0])
    return name, v, limits


_FP32_OPS = {"FFMA": 2, "FADD": 1, "FMUL": 1, "FFMA2": 4, "FADD2": 2, "FMUL2": 2}
_FP16_OPS = {"HFMA2": 4, "HADD2": 2, "HMUL2": 2}
_HMMA = re.compile(r"^HMMA\.(16)(8)(\d+)")          # m16n8kK, one warp: 2*m*n*k FLOPs
_HGMMA = re.compile(r"^HGMMA\.(\d+)x(\d+)x(\d+)")    # warpgroup MxNxK, counted once per warp of the four
_OPCODE_COL = re.compile(r"^sass__thread_inst_executed_true_per_opcode\[(\w+)\]$")
_MOD_COL = re.compile(r"^sass__inst_executed_per_opcode_with_modifier_all\[([\w.]+)\]$")


def flops(M: _Metrics) -> dict:
    """FLOPs the kernel executed, counted from SASS: FP32 (FFMA counts 2), FP16x2, and tensor-core
    instructions with their shapes (HMMA.16816: 2*16*8*16 per warp; HGMMA.64xNx16: 2*64*N*16 per
    warpgroup, i.e. per 4 warp-level executions)."""
    out = {"fp32": None, "fp16": None, "tensor": None}
    ffma = M.num("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
    fadd = M.num("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum")
    fmul = M.num("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")
    per_op = {m.group(1): M.num(k) for k in M.row if (m := _OPCODE_COL.match(k))}
    per_op = {k: v for k, v in per_op.items() if v is not None}
    if ffma is not None and fadd is not None and fmul is not None:
        out["fp32"] = 2 * ffma + fadd + fmul
    elif per_op:
        out["fp32"] = sum(per_op.get(op, 0.0) * n for op, n in _FP32_OPS.items())
    if per_op:
        out["fp16"] = sum(per_op.get(op, 0.0) * n for op, n in _FP16_OPS.items())
    mods = {m.group(1): M.num(k) for k in M.row if (m := _MOD_COL.match(k))}
    if mods:
        t = 0.0
        for name, count in mods.items():
            if not count:
                continue
            if (h := _HMMA.match(name)):
                t += count * 2 * int(h.group(1)) * int(h.group(2)) * int(h.group(3))
            elif (g := _HGMMA.match(name)):
                t += count * 2 * int(g.group(1)) * int(g.group(2)) * int(g.group(3)) / 4
        out["tensor"] = t
    return out



def threads_per_instruction(M: _Metrics) -> tuple[float | None, str | None]:
    """Active threads per executed warp instruction (32 = no divergence): WarpStateStats' ratio, else
    the SASS counts (thread-level predicated-on over warp-level) that SourceCounters and
    InstructionStats carry."""
    v = M.num("smsp__thread_inst_executed_per_inst_executed.ratio")
    if v is not None:
        return v, "smsp__thread_inst_executed_per_inst_executed.ratio"
    thr, warp = M.num("sass__thread_inst_executed_true_per_opcode"), M.num("sass__inst_executed_per_opcode")
    if thr is not None and warp:
        return thr / warp, "sass__thread_inst_executed_true_per_opcode / sass__inst_executed_per_opcode"
    return None, None


def local_share(M: _Metrics) -> tuple[float | None, dict]:
    """Share of L1 traffic that is thread-local, from the finest counters the report has."""
    for loc_names, glob_names in (
            (("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"),
             ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")),
            (("memory_l2_theoretical_sectors_local",), ("memory_l2_theoretical_sectors_global",)),
            (("sass__inst_executed_local_loads", "sass__inst_executed_local_stores"),
             ("sass__inst_executed_global_loads", "sass__inst_executed_global_stores"))):
        loc = _sum(*(M.num(n) for n in loc_names))
        glob_ = _sum(*(M.num(n) for n in glob_names))
        if loc is not None and glob_ is not None:
            ev = {n: M.num(n) for n in loc_names + glob_names}
            return (loc / (loc + glob_) if loc + glob_ > 0 else 0.0), ev
    return None, {}


def bank_conflict_nway(M: _Metrics) -> list[tuple[str, float, dict]]:
    """[(what, n-way, evidence)]: shared-memory wavefronts per ideal wavefront, per loads/stores from
    the L1 counters, else for all shared accesses from SourceCounters' wavefront totals."""
    out = []
    for op, what in (("ld", "loads"), ("st", "stores")):
        w = M.num(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")
        k = M.num(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum")
        if w and k is not None and w > k:
            out.append((what, w / (w - k), {f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum": w,
                                            f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum": k}))
    if not out:
        w, ideal = M.num("memory_l1_wavefronts_shared"), M.num("memory_l1_wavefronts_shared_ideal")
        if w and ideal:
            out.append(("accesses", w / ideal, {"memory_l1_wavefronts_shared": w, "memory_l1_wavefronts_shared_ideal": ideal}))
    return out


def global_bytes_per_sector(M: _Metrics) -> list[tuple[str, float, dict]]:
    """[(what, bytes used per 32-byte sector, evidence)] for global loads and stores, else for all
    global accesses from SourceCounters' ideal vs actual L2 sectors."""
    out = []
    for op, what in (("ld", "loads"), ("st", "stores")):
        name = f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio"
        b = M.num(name)
        if b is not None and b > 0:
            out.append((what, b, {name: _r(b)}))
    if not out:
        act, ideal = M.num("memory_l2_theoretical_sectors_global"), M.num("memory_l2_theoretical_sectors_global_ideal")
        if act and ideal is not None:
            out.append(("accesses", SECTOR_BYTES * ideal / act,
                        {"memory_l2_theoretical_sectors_global": act, "memory_l2_theoretical_sectors_global_ideal": ideal}))
    return out


# ----------------------------------------------------------------------------- Nsight rule mapping

def _stall_class(text: str) -> str:
    t = text.lower()
    if "math pipe" in t or "not selected" in t or "dispatch" in t:
        return "compute-bound"
    if "lg throttle" in t or "tex throttle" in t or "drain" in t:
        return "memory-bound"
    if "mio throttle" in t or "short scoreboard" in t:
        return "memory-bound"
    if "branch resolving" in t:
        return "divergence"
    return "latency-bound"   # long scoreboard, barrier, wait, membar, sleeping, no instruction, ...


def map_rule(rule: dict) -> str | None:
    """The lab class of one Nsight rule result, or None to drop it."""
    rid, title, msg = rule.get("rule_id") or "", rule.get("title") or "", rule.get("message") or ""
    if rid in _DROPPED_RULES:
        return None
    if rule.get("type") not in ("OPT", "WARNING"):
        return None
    t = title.lower()
    if rid == "SOLBottleneck":
        return {"latency issue": "latency-bound", "small grid": "small-grid"}.get(t)  # throughput: the lab's model
    if rid in ("IssueSlotUtilization",):
        return "latency-bound"
    if rid == "CPIStall":
        return _stall_class(title or msg)
    if rid in ("AchievedOccupancy", "TheoreticalOccupancy"):
        return "occupancy-limited"
    if rid == "HighPipeUtilization":
        return "latency-bound" if "low" in t else "compute-bound"
    if rid in ("FPInstructions", "SlowPipelineFP64"):
        return "compute-bound"
    if rid == "MemoryCacheAccessPattern":
        if "local" in t:
            return "local-memory"
        if "shared" in t:
            return "bank-conflicts"
        return "uncoalesced-global"
    if rid in ("SharedMemoryConflicts", "UncoalescedSharedAccess"):
        return "bank-conflicts"
    if rid == "UncoalescedGlobalAccess":
        return "uncoalesced-global"
    if rid in ("ThreadDivergence", "BranchDivergence"):
        return "divergence"
    if rid == "LaunchConfiguration":
        if "block size" in t or "registers" in t or "shared" in t:
            return "occupancy-limited"
        return "small-grid"   # "Small Grid", "Tail Effect": CTAs against SMs and waves
    if rid == "WorkloadImbalance":
        return "memory-bound" if re.search(r"l2|dram|slice", t + msg.lower()) else "small-grid"
    # A rule this lab does not know yet: classify by its words, else drop it.
    text = f"{rid} {title} {msg}".lower()
    for pat, cls in ((r"bank conflict", "bank-conflicts"), (r"coalesc|bytes transmitted per sector", "uncoalesced-global"),
                     (r"local memory|spill", "local-memory"), (r"occupancy", "occupancy-limited"),
                     (r"diverg", "divergence"), (r"\bgrid\b|waves?\b|tail", "small-grid")):
        if re.search(pat, text):
            return cls
    return None


# ----------------------------------------------------------------------------- the judgement

@dataclass
class _Ctx:
    M: _Metrics
    tp: dict
    sms: float | None
    ctas: float | None
    busy_fraction: float           # share of SMs with work (1 unless the grid is smaller than the GPU)
    fill: float                    # share of one full wave of resident CTAs the grid provides (at most 1)
    waves: float | None            # launch__waves_per_multiprocessor
    stalls: list
    stall_family: str | None
    local_share: float | None
    problem: dict | None
    device: str | None
    has_tensor_cores: bool


def _severity(rank: float, lowered: bool) -> str:
    levels = ("high", "medium", "low")
    i = 0 if rank >= 40 else 1 if rank >= 15 else 2
    return levels[min(2, i + (1 if lowered else 0))]


def _lowered(evidence: dict) -> bool:
    return any(v is None for v in evidence.values())


def _rung(rung_id: str) -> str:
    """A rung named as the ladder has it ("v2: float4"), or just its planned id if not built yet.
    The plan: v2 16-byte loads, v3 query split across CTAs, v4 cp.async double buffering, v5 mma."""
    try:
        from lab.variants import VARIANTS
    except Exception:   # the registry is optional context here, never a reason to fail an analysis
        return rung_id
    v = next((v for v in VARIANTS if v.id == rung_id), None)
    return f"{rung_id}: {v.slug}" if v else rung_id


def _rung_advice(c: _Ctx) -> dict[str, str]:
    """Advice per class: the next step, naming the rung of the ladder where one applies."""
    M = c.M
    p = c.problem
    bh = p["batch"] * p["heads"] if p and "batch" in p and "heads" in p else None
    top_stall = c.stalls[0][0] if c.stalls else None
    grid_is_bh = bh is not None and c.ctas is not None and int(c.ctas) == int(bh)
    small = (f"The grid of B*H = {int(bh)} CTAs leaves SMs idle: split the query dimension across CTAs "
             f"(one CTA per query tile per head; the {_rung('v3')} rung)." if grid_is_bh else
             "Launch at least as many CTAs as SMs (better several waves): split independent work across "
             f"CTAs; for attention, split the query dimension across CTAs ({_rung('v3')}).")
    lim, lim_blocks, _ = occupancy_limiter(M)
    occ = ("Raise occupancy: " + {
        "registers": "fewer live registers per thread (__launch_bounds__, smaller per-thread tiles)",
        "shared memory": "less shared memory per block (smaller tiles, or reuse one buffer), or more warps per "
                         "block to share it",
        "warps per block (block size)": "a block size that fits the SM's warp slots",
        "blocks per SM": "bigger blocks (more warps per block)",
        "barriers": "fewer named barriers per block",
    }.get(lim or "", "find the limiting resource in the Occupancy section") +
        (f" (now {lim} allows {int(lim_blocks)} block(s) per SM)." if lim and lim_blocks is not None else "."))
    lat = {
        "long_scoreboard": "Warps wait on global/local loads: keep more loads in flight, e.g. cp.async double "
                           f"buffering of the K/V tiles ({_rung('v4')}), or more independent loads per thread.",
        "barrier": "Warps wait at __syncthreads: fewer barriers per tile, or more independent warps per SM.",
        "wait": "Dependent instruction chains: more instruction-level parallelism (unroll, independent accumulators).",
        "short_scoreboard": "Waits on shared memory or special functions: fewer shared loads per FLOP; check bank conflicts.",
        "mio_throttle": "The shared-memory/MIO queue is full: fewer, wider shared accesses; check bank conflicts.",
        "lg_throttle": f"The global/local load queue is full: fewer, wider (16-byte, {_rung('v2')}) loads.",
        "no_instruction": "Instruction-cache misses: a smaller unrolled loop body.",
        "math_pipe_throttle": "A math pipe is saturated: see compute-bound.",
        "membar": "Memory barriers: fewer fences.",
    }.get(top_stall or "", "Hide latency with more warps per SM or more independent work per warp (ILP).")
    mem_unit = _unit_name(c.tp["memory_metric"] or "")
    if mem_unit == "DRAM":
        mem = ("DRAM bandwidth is the limit: move fewer bytes (reuse K/V tiles from shared memory across more "
               "queries, keep intermediates on chip)")
        if p and p.get("min_bytes"):
            mem += "; compare the bytes moved with the minimum for Q, K, V and O"
        mem += "."
    elif mem_unit.startswith("L1TEX") or mem_unit in ("LSU pipe", "MIO (shared memory / special function queue)"):
        mem = (f"{mem_unit} is the limit: fewer, wider memory instructions (16-byte vectorized loads, {_rung('v2')}) "
               "and more "
               "reuse from registers.")
    else:
        mem = f"{mem_unit} is the limit: improve locality so fewer sectors reach it (tiling, reuse from shared memory)."
    top_pipe = _unit_name(c.tp["compute_metric"] or "")
    if c.tp["math_pct"] is not None and c.tp["compute_pct"] and c.tp["math_pct"] >= 0.7 * c.tp["compute_pct"]:
        top_pipe = _unit_name(c.tp["math_metric"])   # issue is busy because one math pipe is
    mma = tensor_instructions(c.M)
    uses_wgmma = bool(mma) and any(op.endswith("GMMA") for op in mma)
    if mma is None:   # no per-opcode counts: the pipe metric (HFMA2.MMA moves alone reach a few %)
        tensor = c.M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
        no_tensor = tensor is None or tensor < 5.0
    else:
        no_tensor = not mma
    if top_pipe == "FMA pipe" and c.has_tensor_cores and no_tensor:
        comp = ("FP32 FFMA-bound on a GPU with tensor cores: move the two matrix products to tensor cores "
                f"(mma.sync, the {_rung('v5')} rung).")
    elif top_pipe in ("tensor pipe", "FP16+tensor pipe") and uses_wgmma:
        comp = ("Already on warpgroup wgmma and the tensor pipe is the limit: overlap the softmax with the next "
                "tile's matrix products (warp specialization, ping-pong between warpgroups), or use FP8.")
    elif top_pipe in ("tensor pipe", "FP16+tensor pipe"):
        comp = ("The tensor pipe is the limit: on Hopper, warpgroup wgmma fed by TMA (beyond mma.sync); elsewhere "
                "fewer non-matmul instructions per tile (softmax, rescaling).")
    elif top_pipe == "XU (transcendental) pipe":
        comp = "Transcendentals (exp) are the limit: exp2f on pre-scaled logits, fewer rescalings."
    elif top_pipe in ("ALU pipe", "instruction issue", "uniform pipe"):
        comp = "Instruction issue is the limit: fewer index/address instructions per FLOP (hoist, vectorize, unroll)."
    else:
        comp = f"The {top_pipe} is the limit: fewer instructions on it, or move the work to a faster pipe."
    return {
        "small-grid": small,
        "occupancy-limited": occ,
        "latency-bound": lat,
        "memory-bound": mem,
        "compute-bound": comp,
        "uncoalesced-global": "Make consecutive threads read consecutive 16-byte chunks: 16-byte vectorized "
                              f"(float4) loads spread over the CTA's threads ({_rung('v2')}).",
        "bank-conflicts": "Pad each shared-memory row (e.g. +1 or +4 elements) or swizzle the layout so that the "
                          "32 lanes of a warp hit 32 different banks.",
        "local-memory": "Keep per-thread arrays in registers: index them only with compile-time constants "
                        "(fully unrolled loops); for spills, fewer live registers or __launch_bounds__.",
        "divergence": "Make branch conditions uniform across each warp (assign work per warp, not per lane), "
                      "or predicate short branches.",
        "launch-bound": "The kernel is as short as a launch: fuse it with its neighbours, give each launch more "
                        "work, or capture the sequence in a CUDA graph.",
    }


def tensor_instructions(M: _Metrics) -> dict[str, float] | None:
    """Tensor-core instructions executed, by opcode (HMMA, HGMMA, IMMA, ...), or None when the report
    has no per-opcode counts. HFMA2.MMA (an FP16 FMA issued to the MMA pipe) is not one."""
    ops = {k[len("sass__inst_executed_per_opcode["):-1]: M.num(k) for k in M.row
           if k.startswith("sass__inst_executed_per_opcode[")}
    if not ops:
        return None
    return {op: v for op, v in ops.items() if op.endswith("MMA") and v}


def _lab_findings(c: _Ctx) -> list[Finding]:
    M, tp = c.M, c.tp
    out: list[Finding] = []
    advice = _rung_advice(c)
    cpct, mpct = tp["compute_pct"], tp["memory_pct"]
    top = max(v for v in (cpct, mpct, 0.0) if v is not None)

    # saturated units
    if mpct is not None and mpct >= BOUND_PCT:
        unit = _unit_name(tp["memory_metric"])
        ev = {tp["memory_metric"]: _r(mpct),
              "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed":
                  _r(M.num("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"))}
        out.append(Finding("memory-bound", f"Memory-bound: {unit} at {mpct:.0f}% of its peak", "", None, ev,
                           advice["memory-bound"], "lab", mpct))
    if cpct is not None and cpct >= BOUND_PCT:
        unit = _unit_name(tp["compute_metric"])
        if tp["math_pct"] is not None and tp["math_pct"] >= 0.7 * cpct and tp["math_metric"] != tp["compute_metric"]:
            unit = f"{_unit_name(tp['math_metric'])} at {tp['math_pct']:.0f}%, {unit}"
        ev = {tp["compute_metric"]: _r(cpct), **({tp["math_metric"]: _r(tp["math_pct"])} if tp["math_metric"] else {}),
              "sm__throughput.avg.pct_of_peak_sustained_elapsed":
              _r(M.num("sm__throughput.avg.pct_of_peak_sustained_elapsed")),
              "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active":
              _r(M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"))}
        ev.update({k: v for k, v in _flop_evidence(c).items()})
        out.append(Finding("compute-bound", f"Compute-bound: {unit} at {cpct:.0f}% of its peak", "", None, ev,
                           advice["compute-bound"], "lab", cpct))

    # far from every roof: latency
    if cpct is not None or mpct is not None:
        if top < BOUND_PCT:
            est = (100.0 - top) * c.busy_fraction
            ev = {"compute_pct_of_peak": _r(cpct), "memory_pct_of_peak": _r(mpct)}
            lat_cycles = M.num("smsp__average_warp_latency_per_inst_issued.ratio")
            if lat_cycles is not None:   # WarpStateStats only; the stall shares below carry the judgement
                ev["smsp__average_warp_latency_per_inst_issued.ratio"] = _r(lat_cycles)
            for reason, v, share in c.stalls[:3]:
                ev[f"stall:{reason} (% of stalls)"] = _r(share, 1)
            if not c.stalls:
                ev["stall reasons (WarpStateStats)"] = None
            top_txt = f"; top stall: {c.stalls[0][0].replace('_', ' ')} ({c.stalls[0][2]:.0f}%)" if c.stalls else ""
            out.append(Finding("latency-bound", f"Latency-bound: compute at {cpct or 0:.0f}%, memory at {mpct or 0:.0f}% "
                               f"of peak{top_txt}", "", est, ev, advice["latency-bound"], "lab", est))

    # small grid: idle SMs, or less than one wave of the CTAs the SMs could hold at once
    if c.ctas is not None and c.sms and (c.ctas < c.sms or c.fill < 1.0):
        idle_sms = 100.0 * (1.0 - c.ctas / c.sms) if c.ctas < c.sms else 0.0
        # SMs that hold fewer CTAs than they could hide less latency: the unused share of the wave
        # times the distance to the nearest roof
        unfilled = (1.0 - c.fill) * (100.0 - top)
        est = max(idle_sms, unfilled)
        _, per_sm, _ = occupancy_limiter(M)
        ev = {"launch__grid_size": int(c.ctas), "device__attribute_multiprocessor_count": int(c.sms),
              "launch__waves_per_multiprocessor": _r(c.waves, 3), "launch__block_size": M.num("launch__block_size")}
        title = f"Small grid: {int(c.ctas)} CTAs on {int(c.sms)} SMs"
        if unfilled > idle_sms:
            title += (f", {c.fill:.2f} of one wave ({int(per_sm) if per_sm else '?'} CTAs of "
                      f"{int(M.num('launch__block_size') or 0)} threads fit per SM)")
        if est >= 1.0:
            out.append(Finding("small-grid", title, "", est, ev, advice["small-grid"], "lab", est))

    # occupancy
    theo = M.num("sm__maximum_warps_per_active_cycle_pct")
    if theo is not None and theo <= 50.0 and top < BOUND_PCT:
        lim, blocks, limits = occupancy_limiter(M)
        # raising the limit helps only as far as the grid fills it
        est = (100.0 - top) * c.busy_fraction * (1.0 - theo / 100.0) * c.fill
        ev = {"sm__maximum_warps_per_active_cycle_pct": _r(theo),
              "sm__warps_active.avg.pct_of_peak_sustained_active": _r(M.num("sm__warps_active.avg.pct_of_peak_sustained_active")),
              **{k: v for k, v in limits.items()},
              "launch__shared_mem_per_block_dynamic": M.num("launch__shared_mem_per_block_dynamic"),
              "launch__registers_per_thread": M.num("launch__registers_per_thread")}
        out.append(Finding("occupancy-limited", f"Occupancy {theo:.1f}% at most, limited by {lim or 'unknown'}", "",
                           est, ev, advice["occupancy-limited"], "lab", est))

    # coalescing: bytes used per 32-byte sector
    unit_l1 = M.num("l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_active")
    busy_mem = max(v for v in (unit_l1, mpct, 0.0) if v is not None)
    for what, b, ev in global_bytes_per_sector(M):
        if b < SECTOR_BYTES - 1:
            est = (1.0 - b / SECTOR_BYTES) * busy_mem
            ev = dict(ev, lab__global_bytes_used_per_sector=_r(b), **{c.tp["memory_metric"] or "memory_pct_of_peak": _r(mpct)})
            out.append(Finding("uncoalesced-global", f"Global {what} use {b:.1f} of 32 bytes per sector", "", est, ev,
                               advice["uncoalesced-global"], "lab", est))

    # bank conflicts, as n-way
    shared_util = M.num("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed")
    for what, nway, ev in bank_conflict_nway(M):
        if nway >= 1.5:
            util = shared_util if shared_util is not None else busy_mem
            est = (1.0 - 1.0 / nway) * util
            ev = dict(ev, lab__shared_bank_conflict_nway=_r(nway, 1),
                      **{"l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed": _r(shared_util)})
            out.append(Finding("bank-conflicts", f"{nway:.1f}-way shared-memory bank conflicts on {what}", "", est, ev,
                               advice["bank-conflicts"], "lab", est))

    # local memory
    if c.local_share is not None and c.local_share >= 0.01:
        wait = sum(share for reason, _, share in c.stalls if reason in ("long_scoreboard", "lg_throttle"))
        est = c.local_share * max(busy_mem, wait, M.num("lts__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0)
        ev = dict(local_share(M)[1], lab__local_share_pct=_r(100 * c.local_share, 1))
        out.append(Finding("local-memory", f"Local memory: {100 * c.local_share:.0f}% of global+local traffic is "
                           "thread-local (spills or a dynamically indexed array)", "", est, ev, advice["local-memory"],
                           "lab", est))

    # divergence: threads per warp instruction
    t, t_src = threads_per_instruction(M)
    exact = t_src == "smsp__thread_inst_executed_per_inst_executed.ratio"
    # The SASS fallback counts predicated-on threads, so predicated bounds checks lower it too: it
    # must fall further before it is called divergence.
    if t is not None and 0 < t < (30.0 if exact else 24.0):
        est = 100.0 * (1.0 - t / 32.0)
        ev = {t_src: _r(t)}
        what = "active" if exact else "active and predicated on"
        out.append(Finding("divergence", f"Divergence: {t:.1f} of 32 threads {what} per warp instruction", "", est, ev,
                           advice["divergence"], "lab", est))

    # launch-bound
    d = M.num("gpu__time_duration.sum")
    if d is not None and d > 0:
        est = 100.0 * LAUNCH_OVERHEAD_NS / (d + LAUNCH_OVERHEAD_NS)
        if est >= 10.0:
            out.append(Finding("launch-bound", f"Short kernel: {d / 1000:.1f} us, near a launch's own overhead", "", est,
                               {"gpu__time_duration.sum": d}, advice["launch-bound"], "lab", est))

    # attention: DRAM bytes against the minimum for Q, K, V and O
    if c.problem and c.problem.get("min_bytes"):
        rd, wr = M.num("dram__bytes_read.sum"), M.num("dram__bytes_write.sum")
        moved = _sum(rd, wr)
        dram_pct = M.num("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed")
        if moved and dram_pct is not None:
            ratio = moved / float(c.problem["min_bytes"])
            if ratio > 1.5 and dram_pct >= 30.0:
                est = (1.0 - 1.0 / ratio) * dram_pct
                ev = {"dram__bytes_read.sum": rd, "dram__bytes_write.sum": wr,
                      "lab__min_bytes_qkvo": c.problem["min_bytes"], "lab__dram_bytes_x_min": _r(ratio),
                      "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": _r(dram_pct)}
                excess = Finding("memory-bound", f"DRAM traffic is {ratio:.1f}x the minimum for Q, K, V and O", "",
                                 est, ev, advice["memory-bound"], "lab", est)
                bound = next((f for f in out if f.cls == "memory-bound"), None)
                if bound is None:
                    out.append(excess)
                else:   # one finding: the saturated unit, with the gain of moving only the minimum
                    bound.title += f"; {excess.title[0].lower()}{excess.title[1:]}"
                    bound.est_speedup_pct = est
                    bound.evidence.update(ev)
    return out


def _flop_evidence(c: _Ctx) -> dict:
    """Achieved FLOP/s against the device's FP32 and tensor peaks (SASS counts; the problem's FLOPs
    when the lab made the report)."""
    M = c.M
    d = M.num("gpu__time_duration.sum")
    if not d:
        return {}
    f = flops(M)
    peaks = peaks_for(c.device)
    ev = {}
    if f["fp32"] is not None:
        tf = f["fp32"] / d / 1e3
        ev["lab__fp32_tflops"] = _r(tf, 3)
        if peaks:
            ev["lab__fp32_pct_of_peak"] = _r(100 * tf / peaks.fp32_tflops, 1)
    if f["tensor"]:
        tf = f["tensor"] / d / 1e3
        ev["lab__tensor_tflops"] = _r(tf, 2)
        if peaks:
            ev["lab__tensor_pct_of_fp16_peak"] = _r(100 * tf / peaks.tensor_fp16_tflops, 1)
    if c.problem and c.problem.get("flops"):
        tf = float(c.problem["flops"]) / d / 1e3
        ev["lab__problem_tflops"] = _r(tf, 2)
        if peaks:
            dt = c.problem.get("dtype", "float32")
            peak = peaks.fp32_tflops if dt == "float32" else peaks.tensor_fp16_tflops
            ev[f"lab__problem_pct_of_{'fp32' if dt == 'float32' else 'tensor'}_peak"] = _r(100 * tf / peak, 2)
    return ev


def _rule_findings(c: _Ctx, rules: list[dict], advice: dict[str, str]) -> list[Finding]:
    out = []
    for r in rules:
        cls = map_rule(r)
        if cls is None:
            continue
        est = r.get("est_speedup_pct")
        weight = LOCAL_WEIGHT if r.get("speedup_type") == "local" else 1.0
        if cls == "latency-bound":
            weight *= c.busy_fraction   # latency hiding acts only on the SMs that have work
        elif cls == "occupancy-limited":
            weight *= c.busy_fraction * c.fill   # a grid below one wave never reaches the limit
        rank = (est or 0.0) * weight
        name = r.get("rule_name") or r.get("rule_id")
        title = f"{name}: {r['title']}" if r.get("title") else name
        if r.get("speedup_type") == "local":
            title += " [local estimate]"
        ev = {fm["name"]: _r(fm["value"], 3) if isinstance(fm.get("value"), (int, float)) else fm.get("value")
              for fm in r.get("focus_metrics") or [] if fm.get("name")}
        adv = advice[cls]
        if r.get("rule_id") == "AchievedOccupancy":
            adv = ("Achieved occupancy is well below the theoretical: warps or CTAs finish unevenly (imbalanced work, "
                   "a partial last wave) or too few CTAs reach each SM; balance the work per CTA, launch more CTAs.")
        elif r.get("rule_id") == "LaunchConfiguration" and "tail" in (r.get("title") or "").lower():
            adv = ("The last wave of CTAs is partial: size the grid as a multiple of (SMs x CTAs per SM), or use "
                   "more, smaller CTAs so the tail matters less.")
        out.append(Finding(cls, title, "", est, ev, adv, f"ncu-rule:{r.get('rule_id')}", rank))
    return out


def _merge(findings: list[Finding]) -> list[Finding]:
    """One finding per class: the highest-ranked one, with the others' evidence added."""
    by: dict[str, Finding] = {}
    for f in sorted(findings, key=lambda f: -f.rank):
        if f.cls not in by:
            by[f.cls] = Finding(f.cls, f.title, f.severity, f.est_speedup_pct, dict(f.evidence), f.advice, f.source, f.rank)
        else:
            for k, v in f.evidence.items():
                by[f.cls].evidence.setdefault(k, v)
    return list(by.values())


def _order(findings: list[Finding], c: _Ctx) -> list[Finding]:
    top = max(v for v in (c.tp["compute_pct"], c.tp["memory_pct"], 0.0) if v is not None)
    for f in findings:
        if f.cls in ("latency-bound", "occupancy-limited") and top >= BOUND_PCT:
            f.rank = min(f.rank, 100.0 - top)
    ranks = {f.cls: f.rank for f in findings}
    for f in findings:
        causes = [ranks[x] for x in _CAUSES.get(f.cls, ()) if x in ranks]
        if causes and max(causes) >= 0.5 * f.rank:
            f.rank = min(f.rank, max(causes))   # listed right after its cause (the tie order puts causes first)
    findings.sort(key=lambda f: (-round(f.rank, 6), _TIE_ORDER.index(f.cls)))
    for f in findings:
        f.severity = _severity(f.rank, _lowered(f.evidence))
    return [f for f in findings if f.rank >= 1.0 or f.est_speedup_pct is None and f.rank > 0]


def _has_tensor_cores(M: _Metrics, device: str | None) -> bool:
    major = M.num("device__attribute_compute_capability_major")
    if major is None:
        return False
    return major >= 7 and not (device and re.search(r"GTX 16|MX\d", device))   # Turing TU11x lacks them


def analyze_kernel(row: dict, rules: list[dict], problem: dict | None = None) -> KernelAnalysis:
    M = _Metrics(row)
    device = M.text("device__attribute_display_name") or _plain(row.get("device"))
    tp = throughput(M)
    sms = M.num("device__attribute_multiprocessor_count", "launch__sm_count")
    ctas = M.num("launch__grid_size")
    busy = min(1.0, ctas / sms) if (ctas and sms) else 1.0
    waves = M.num("launch__waves_per_multiprocessor")
    fill = min(1.0, waves) if waves is not None else busy
    stalls, fam = stall_reasons(M)
    c = _Ctx(M, tp, sms, ctas, busy, fill, waves, stalls, fam, local_share(M)[0], problem, device,
             _has_tensor_cores(M, device))
    advice = _rung_advice(c)
    findings = _order(_merge(_lab_findings(c) + _rule_findings(c, rules, advice)), c)
    metrics = {k: _plain(row[k]) for k in KEY_METRICS if k in row and _plain(row[k]) is not None}
    derived = {"compute_pct_of_peak": _r(tp["compute_pct"]), "compute_unit": _unit_name(tp["compute_metric"] or ""),
               "memory_pct_of_peak": _r(tp["memory_pct"]), "memory_unit": _unit_name(tp["memory_metric"] or ""),
               "stalls": [(r, _r(v, 3), _r(s, 1)) for r, v, s in stalls[:5]], "stall_metric_family": fam,
               "occupancy_limiter": occupancy_limiter(M)[0], "local_share": _r(c.local_share, 4),
               "threads_per_instruction": _r(threads_per_instruction(M)[0]),
               **_flop_evidence(c)}
    kernel = _plain(row.get("kernel")) or _plain(row.get("kernel_function")) or "?"
    return KernelAnalysis(kernel=kernel, duration_ns=M.num("gpu__time_duration.sum"), device=device, metrics=metrics,
                          bottleneck=findings[0].cls if findings else None, findings=findings,
                          kernel_index=int(_plain(row.get("kernel_index")) or 0), nvtx=_plain(row.get("nvtx")),
                          derived=derived, rules=rules)


def _problem_applies(df: pd.DataFrame) -> bool:
    # The attention problem's FLOPs and bytes belong to one kernel (the lab's child launches one
    # rung, perhaps several times); a report of several different kernels splits them unknowably.
    names = set(df["kernel"]) if "kernel" in df.columns else set()
    return len(names) == 1


def analyze_frame(df: pd.DataFrame, rules: Iterable[dict], problem: dict | None = None) -> list[KernelAnalysis]:
    """Findings for every kernel (row) of a `lab.nsight.ncu.load_report` frame, given the report's
    rule results (`lab.nsight.ncu.rule_results`) and optionally the lab's problem dict
    (`Problem.to_dict()`: batch, heads, flops, min_bytes, dtype, ...)."""
    rules = list(rules)
    if problem is not None and not problem.get("min_bytes") and "batch" in problem:
        from lab.problem import Problem

        problem = Problem.from_dict(problem).to_dict()
    use_problem = problem if (problem and _problem_applies(df)) else None
    out = []
    for pos, row in enumerate(df.to_dict("records")):
        idx = int(_plain(row.get("kernel_index")) if row.get("kernel_index") is not None else pos)
        out.append(analyze_kernel(row, [r for r in rules if r.get("kernel_index") == idx], use_problem))
    return out


def select_kernels(df: pd.DataFrame, kernel_regex: str | None) -> pd.DataFrame:
    """The rows whose demangled (or function) name matches `kernel_regex` (re.search)."""
    if not kernel_regex:
        return df
    from lab.errors import LabError

    try:
        pat = re.compile(kernel_regex)
    except re.error as e:
        raise LabError(f"bad --kernel regex {kernel_regex!r}: {e}") from None
    names = df["kernel"].astype(str)
    keep = names.map(lambda n: bool(pat.search(n))) | df["kernel_function"].astype(str).map(lambda n: bool(pat.search(n)))
    if not keep.any():
        listed = ", ".join(sorted(set(df["kernel_function"].astype(str)))[:8])
        raise LabError(f"no kernel in the report matches {kernel_regex!r}", hint=f"kernels: {listed}")
    return df[keep]


def analyze_report(path: str | os.PathLike, problem: dict | None = None,
                   kernel_regex: str | None = None) -> list[KernelAnalysis]:
    """Findings for every profiled kernel of an .ncu-rep (optionally only those matching a regex)."""
    from lab.nsight import ncu

    df = select_kernels(ncu.load_report(path), kernel_regex)
    return analyze_frame(df, ncu.rule_results(path), problem)


def problem_applies(analyses_or_df) -> bool:
    if isinstance(analyses_or_df, pd.DataFrame):
        return _problem_applies(analyses_or_df)
    return len({a.kernel for a in analyses_or_df}) == 1


# ----------------------------------------------------------------------------- terminal view

def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "n/a" if v is None else str(v)


def render(analyses: list[KernelAnalysis], console=None) -> None:
    """A readable terminal view: per kernel, its launch and busiest units, then each finding with
    its evidence and next step, most important first."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    sev_style = {"high": "bold red", "medium": "yellow", "low": "dim"}
    for a in analyses:
        m, d = a.metrics, a.derived
        head = Text()
        head.append(f"[{a.kernel_index}] ", style="dim")
        head.append(a.kernel if len(a.kernel) <= 200 else a.kernel[:197] + "...", style="bold")
        console.print(head)
        console.print(f"    {_fmt((a.duration_ns or 0) / 1000)} us on {a.device or 'unknown device'}; grid "
                      f"{_fmt(m.get('launch__grid_size'))} x block {_fmt(m.get('launch__block_size'))}, "
                      f"{_fmt(m.get('launch__registers_per_thread'))} registers/thread", highlight=False)
        busy = (f"    compute {_fmt(d.get('compute_pct_of_peak'))}% ({d.get('compute_unit') or 'n/a'}), memory "
                f"{_fmt(d.get('memory_pct_of_peak'))}% ({d.get('memory_unit') or 'n/a'}) of peak")
        if d.get("stalls"):
            busy += "; stalls: " + ", ".join(f"{r.replace('_', ' ')} {s:.0f}%" for r, _, s in d["stalls"][:3])
        console.print(busy, highlight=False)
        rates = [f"{k.removeprefix('lab__')} {_fmt(v)}" for k, v in d.items() if k.startswith("lab__") and v is not None]
        if rates:
            console.print("    " + ", ".join(rates), style="dim", highlight=False)
        if not a.findings:
            console.print("    no findings\n")
            continue
        for i, f in enumerate(a.findings):
            line = Text(f"  {i + 1}. ")
            line.append(f"{f.cls:<19}", style="bold cyan" if i == 0 else "cyan")
            line.append(f"{f.severity:<7}", style=sev_style.get(f.severity, ""))
            line.append("gain n/a   " if f.est_speedup_pct is None else f"gain {f.est_speedup_pct:5.1f}% ")
            line.append(f.title)
            line.append(f"  [{f.source}]", style="dim")
            console.print(line, highlight=False)
            ev = ", ".join(f"{k} = {_fmt(v)}" for k, v in list(f.evidence.items())[:6])
            console.print(Text("       evidence: ", style="dim") + Text(ev), highlight=False)
            console.print(Text("       next: ", style="dim") + Text(f.advice), highlight=False)
        console.print()


# ----------------------------------------------------------------------------- tables for the store

def findings_frame(analyses: list[KernelAnalysis]) -> pd.DataFrame:
    """One row per finding, most important first within each kernel; evidence as a JSON string."""
    rows = []
    for a in analyses:
        for rank, f in enumerate(a.findings):
            d = f.to_dict()
            rows.append({"kernel_index": a.kernel_index, "kernel": a.kernel, "rank": rank, "class": d["class"],
                         "title": d["title"], "severity": d["severity"], "est_speedup_pct": d["est_speedup_pct"],
                         "source": d["source"], "advice": d["advice"], "evidence": json.dumps(d["evidence"])})
    cols = ["kernel_index", "kernel", "rank", "class", "title", "severity", "est_speedup_pct", "source", "advice",
            "evidence"]
    df = pd.DataFrame(rows, columns=cols)
    df["est_speedup_pct"] = df["est_speedup_pct"].astype("float64")
    return df


def metrics_frame(report: str | os.PathLike | pd.DataFrame) -> pd.DataFrame:
    """The report's metrics, one row per kernel, one column per metric (numbers as float64, text as
    str), for the run store's Parquet table; units in df.attrs["units"]."""
    from lab.nsight import ncu

    df = report if isinstance(report, pd.DataFrame) else ncu.load_report(report)
    cols = {}
    for col in df.columns:
        vals = [_plain(v) for v in df[col]]
        if any(isinstance(v, str) for v in vals):
            cols[col] = pd.Series([None if v is None else str(v) for v in vals], index=df.index, dtype="object")
        else:
            cols[col] = pd.to_numeric(pd.Series(vals, index=df.index, dtype="object"), errors="coerce").astype("float64")
    out = pd.DataFrame(cols)
    out["kernel_index"] = out["kernel_index"].astype("int64")
    out.attrs = dict(df.attrs)
    return out


def rules_frame(path: str | os.PathLike) -> pd.DataFrame:
    """Nsight's rule results, one row each, with the lab class each maps to (None where dropped)."""
    from lab.nsight import ncu

    rows = []
    for r in ncu.rule_results(path):
        rows.append({"kernel_index": r["kernel_index"], "kernel": r["kernel"], "rule_id": r["rule_id"],
                     "rule_name": r["rule_name"], "section": r["section"], "type": r["type"], "title": r["title"],
                     "message": r["message"], "est_speedup_pct": r["est_speedup_pct"],
                     "speedup_type": r["speedup_type"], "lab_class": map_rule(r),
                     "focus_metrics": json.dumps(r["focus_metrics"])})
    cols = ["kernel_index", "kernel", "rule_id", "rule_name", "section", "type", "title", "message",
            "est_speedup_pct", "speedup_type", "lab_class", "focus_metrics"]
    df = pd.DataFrame(rows, columns=cols)
    df["est_speedup_pct"] = df["est_speedup_pct"].astype("float64")
    return df

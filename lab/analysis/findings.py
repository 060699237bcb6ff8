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

This module judges and orders; the pieces it judges from live beside it: lab.analysis.metrics
(what the raw metrics say: busiest units, stalls, occupancy limiter, FLOPs, bytes per sector, ...),
lab.analysis.rules (Nsight's rule results onto CLASSES) and lab.analysis.advice (the next step per class).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import pandas as pd

from lab.analysis.advice import advice_by_class
from lab.analysis.metrics import (SECTOR_BYTES, KernelFacts, bank_conflict_nway, flop_rates, global_bytes_per_sector,
                                 kernel_facts, local_share, occupancy_limiter, plain, rounded, sum_or_none,
                                 threads_per_instruction, unit_name)
from lab.analysis.rules import map_rule

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


# ----------------------------------------------------------------------------- the judgement

def _severity(rank: float, lowered: bool) -> str:
    levels = ("high", "medium", "low")
    i = 0 if rank >= 40 else 1 if rank >= 15 else 2
    return levels[min(2, i + (1 if lowered else 0))]


def _lowered(evidence: dict) -> bool:
    return any(v is None for v in evidence.values())


def _lab_findings(c: KernelFacts) -> list[Finding]:
    M, tp = c.M, c.tp
    out: list[Finding] = []
    advice = advice_by_class(c)
    cpct, mpct = tp["compute_pct"], tp["memory_pct"]
    top = max(v for v in (cpct, mpct, 0.0) if v is not None)

    # saturated units
    if mpct is not None and mpct >= BOUND_PCT:
        unit = unit_name(tp["memory_metric"])
        ev = {tp["memory_metric"]: rounded(mpct),
              "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed":
                  rounded(M.num("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"))}
        out.append(Finding("memory-bound", f"Memory-bound: {unit} at {mpct:.0f}% of its peak", "", None, ev,
                           advice["memory-bound"], "lab", mpct))
    if cpct is not None and cpct >= BOUND_PCT:
        unit = unit_name(tp["compute_metric"])
        if tp["math_pct"] is not None and tp["math_pct"] >= 0.7 * cpct and tp["math_metric"] != tp["compute_metric"]:
            unit = f"{unit_name(tp['math_metric'])} at {tp['math_pct']:.0f}%, {unit}"
        ev = {tp["compute_metric"]: rounded(cpct),
              **({tp["math_metric"]: rounded(tp["math_pct"])} if tp["math_metric"] else {}),
              "sm__throughput.avg.pct_of_peak_sustained_elapsed":
              rounded(M.num("sm__throughput.avg.pct_of_peak_sustained_elapsed")),
              "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active":
              rounded(M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"))}
        ev.update({k: v for k, v in flop_rates(c).items()})
        out.append(Finding("compute-bound", f"Compute-bound: {unit} at {cpct:.0f}% of its peak", "", None, ev,
                           advice["compute-bound"], "lab", cpct))

    # far from every roof: latency
    if cpct is not None or mpct is not None:
        if top < BOUND_PCT:
            est = (100.0 - top) * c.busy_fraction
            ev = {"compute_pct_of_peak": rounded(cpct), "memory_pct_of_peak": rounded(mpct)}
            lat_cycles = M.num("smsp__average_warp_latency_per_inst_issued.ratio")
            if lat_cycles is not None:   # WarpStateStats only; the stall shares below carry the judgement
                ev["smsp__average_warp_latency_per_inst_issued.ratio"] = rounded(lat_cycles)
            for reason, v, share in c.stalls[:3]:
                ev[f"stall:{reason} (% of stalls)"] = rounded(share, 1)
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
              "launch__waves_per_multiprocessor": rounded(c.waves, 3),
              "launch__block_size": M.num("launch__block_size")}
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
        ev = {"sm__maximum_warps_per_active_cycle_pct": rounded(theo),
              "sm__warps_active.avg.pct_of_peak_sustained_active":
                  rounded(M.num("sm__warps_active.avg.pct_of_peak_sustained_active")),
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
            ev = dict(ev, lab__global_bytes_used_per_sector=rounded(b),
                      **{c.tp["memory_metric"] or "memory_pct_of_peak": rounded(mpct)})
            out.append(Finding("uncoalesced-global", f"Global {what} use {b:.1f} of 32 bytes per sector", "", est, ev,
                               advice["uncoalesced-global"], "lab", est))

    # bank conflicts, as n-way
    shared_util = M.num("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed")
    for what, nway, ev in bank_conflict_nway(M):
        if nway >= 1.5:
            util = shared_util if shared_util is not None else busy_mem
            est = (1.0 - 1.0 / nway) * util
            ev = dict(ev, lab__shared_bank_conflict_nway=rounded(nway, 1),
                      **{"l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed":
                         rounded(shared_util)})
            out.append(Finding("bank-conflicts", f"{nway:.1f}-way shared-memory bank conflicts on {what}", "", est, ev,
                               advice["bank-conflicts"], "lab", est))

    # local memory
    if c.local_share is not None and c.local_share >= 0.01:
        wait = sum(share for reason, _, share in c.stalls if reason in ("long_scoreboard", "lg_throttle"))
        est = c.local_share * max(busy_mem, wait, M.num("lts__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0)
        ev = dict(local_share(M)[1], lab__local_share_pct=rounded(100 * c.local_share, 1))
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
        ev = {t_src: rounded(t)}
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
        moved = sum_or_none(rd, wr)
        dram_pct = M.num("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed")
        if moved and dram_pct is not None:
            ratio = moved / float(c.problem["min_bytes"])
            if ratio > 1.5 and dram_pct >= 30.0:
                est = (1.0 - 1.0 / ratio) * dram_pct
                ev = {"dram__bytes_read.sum": rd, "dram__bytes_write.sum": wr,
                      "lab__min_bytes_qkvo": c.problem["min_bytes"], "lab__dram_bytes_x_min": rounded(ratio),
                      "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": rounded(dram_pct)}
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


def _rule_findings(c: KernelFacts, rules: list[dict], advice: dict[str, str]) -> list[Finding]:
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
        ev = {fm["name"]: rounded(fm["value"], 3) if isinstance(fm.get("value"), (int, float)) else fm.get("value")
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


def _order(findings: list[Finding], c: KernelFacts) -> list[Finding]:
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


def analyze_kernel(row: dict, rules: list[dict], problem: dict | None = None) -> KernelAnalysis:
    c = kernel_facts(row, problem)
    M, tp = c.M, c.tp
    advice = advice_by_class(c)
    findings = _order(_merge(_lab_findings(c) + _rule_findings(c, rules, advice)), c)
    metrics = {k: plain(row[k]) for k in KEY_METRICS if k in row and plain(row[k]) is not None}
    derived = {"compute_pct_of_peak": rounded(tp["compute_pct"]), "compute_unit": unit_name(tp["compute_metric"] or ""),
               "memory_pct_of_peak": rounded(tp["memory_pct"]), "memory_unit": unit_name(tp["memory_metric"] or ""),
               "stalls": [(r, rounded(v, 3), rounded(s, 1)) for r, v, s in c.stalls[:5]],
               "stall_metric_family": c.stall_family,
               "occupancy_limiter": occupancy_limiter(M)[0], "local_share": rounded(c.local_share, 4),
               "threads_per_instruction": rounded(threads_per_instruction(M)[0]),
               **flop_rates(c)}
    kernel = plain(row.get("kernel")) or plain(row.get("kernel_function")) or "?"
    return KernelAnalysis(kernel=kernel, duration_ns=M.num("gpu__time_duration.sum"), device=c.device, metrics=metrics,
                          bottleneck=findings[0].cls if findings else None, findings=findings,
                          kernel_index=int(plain(row.get("kernel_index")) or 0), nvtx=plain(row.get("nvtx")),
                          derived=derived, rules=rules)


def _problem_applies(df: pd.DataFrame) -> bool:
    # The attention problem's FLOPs and bytes belong to one kernel (the lab's child launches one
    # rung, perhaps several times); a report of several different kernels splits them unknowably.
    names = set(df["kernel"]) if "kernel" in df.columns else set()
    return len(names) == 1


def analyze_frame(df: pd.DataFrame, rules: Iterable[dict], problem: dict | None = None) -> list[KernelAnalysis]:
    """Findings for every kernel (row) of a `lab.profilers.ncu.load_report` frame, given the report's
    rule results (`lab.profilers.ncu.rule_results`) and optionally the lab's problem dict
    (`Problem.to_dict()`: batch, heads, flops, min_bytes, dtype, ...)."""
    rules = list(rules)
    if problem is not None and not problem.get("min_bytes") and "batch" in problem:
        from lab.measure.problem import Problem

        problem = Problem.from_dict(problem).to_dict()
    use_problem = problem if (problem and _problem_applies(df)) else None
    out = []
    bare = df.copy(deep=False)
    bare.attrs = {}   # pandas deep-copies attrs (the units of ~2,000 metrics) on every row it yields
    for pos, row in enumerate(bare.to_dict("records")):
        idx = int(plain(row.get("kernel_index")) if row.get("kernel_index") is not None else pos)
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
    from lab.profilers import ncu

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
    from lab.profilers import ncu

    df = report if isinstance(report, pd.DataFrame) else ncu.load_report(report)
    cols = {}
    for col in df.columns:
        vals = [plain(v) for v in df[col]]
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
    from lab.profilers import ncu

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

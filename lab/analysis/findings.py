"""From an Nsight Compute report to findings: the bottleneck of each kernel, its evidence, the
estimated gain of fixing it, and the next step (naming the rung of the ladder where one applies).

Two sources, merged per class:
  * Nsight Compute's own rule results (ncu_report gives them with estimated speedups), mapped onto
    the lab's fixed vocabulary (CLASSES); informational results and noise (the L2-compression
    advice every kernel gets, roofline and NUMA notes) are dropped.
  * The lab's judgement from the metrics (lab.analysis.metrics, the one reader of metric names):
    which unit is saturated (the SpeedOfLight breakdowns), warps in flight against the device's
    warp slots, the occupancy limiter, stall reasons ranked, excessive global sectors, bank
    conflicts as n-way, local-memory traffic, threads per warp instruction, the tensor path (HMMA
    or HGMMA), FLOP/s against the FP32 and tensor peaks, and with the attention problem: DRAM
    bytes against the minimum for Q, K, V and O.

Ordering ("the finding whose fix gains most first"). One finding per cause (class), carrying every
estimate of it (`estimates`: the lab's model and each Nsight rule's, with its type) and the one it is
ranked by (`ranked_by`); `est_speedup_pct` is that gain as a share of the kernel's runtime, and the
severity follows from it (high >= 40%, medium >= 15%, one step lower where evidence is missing):
  * the lab's model ranks where it has one, since it bounds a fix's gain by what the report shows
    the fix can reach: wasted sectors or wavefronts times the busy unit's utilization (and, for
    global accesses, times the global share of the load/store traffic: a local-memory-heavy kernel
    ranks its local traffic first); the warps a launch puts in flight against the resident warps its
    occupancy allows (parallelism, judged against the device's warp slots); on Hopper, matrix work on
    mma.sync (HMMA) against the dense rate only wgmma reaches; the distance to the nearest roof for
    latency; idle lanes for divergence; the timeline's measured launch cost for launch-bound;
  * otherwise Nsight's estimate ranks (a `local` estimate, which measures one unit's efficiency
    rather than the kernel's runtime, counts half);
  * a saturated unit (memory- or compute-bound) ranks by its utilization and shows no gain (being at
    the roof is not a gain); at U% of the busiest unit's peak, latency, occupancy and parallelism
    fixes, which leave that unit's work unchanged, are capped at 100-U%; when a specific cause
    explains a symptom (bank conflicts a busy L1, a small grid the latency), the cause ranks just
    above it: its fix is the actionable one.
Nsight's access-pattern rules count bytes used per sector, which a broadcast lowers without wasting a
sector: where SourceCounters counts no excessive sector, they are not taken as uncoalesced accesses.
Each finding cites the source lines it rests on (lab.analysis.lines).

A metric the report lacks (a basic-set report has no stall reasons) leaves its evidence null and
lowers the finding's severity one step; it never raises.

This module judges and orders; the pieces it judges from live beside it: lab.analysis.metrics
(what the raw metrics say: busiest units, stalls, occupancy limiter, FLOPs, bytes per sector, ...),
lab.analysis.rules (Nsight's rule results onto CLASSES) and lab.analysis.advice (the next step per class).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from lab import vocabulary
from lab.analysis.advice import advice_by_class, rung_of
from lab.analysis.lines import cite, report_lines, where
from lab.analysis.metrics import KEY_METRICS as METRIC_LABELS
from lab.analysis.metrics import (SECTOR_BYTES, KernelFacts, bank_conflict_nway, derived_values, flop_rates,
                                 global_excess, kernel_facts, local_share, occupancy_limiter, plain, rounded,
                                 sum_or_none, tensor_path, threads_per_instruction, unit_name, warp_specialised,
                                 warps_in_flight)
from lab.analysis.rules import map_rule

CLASSES = vocabulary.CLASSES   # every finding carries one (lab.vocabulary)

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

# The curated metrics of each kernel (`metrics` in the JSON): lab.analysis.metrics' one list, present ones only.
KEY_METRICS = tuple(name for name, _ in METRIC_LABELS)


# ----------------------------------------------------------------------------- data model

@dataclass
class Finding:
    cls: str
    title: str
    severity: str
    est_speedup_pct: float | None    # the gain it is ranked by (percent of runtime); None: a unit at its roof
    evidence: dict[str, Any]
    advice: str
    source: str                      # where the ranking estimate comes from: "lab" or "ncu-rule:<id>"
    rank: float = 0.0                # share of runtime (percent) used for ordering; see module doc
    estimates: list[dict] = field(default_factory=list)   # every estimate of this cause, the lab's and Nsight's
    lines: list[dict] = field(default_factory=list)       # the source lines it rests on (lab.analysis.lines.cite)

    def to_dict(self) -> dict:
        return {"class": self.cls, "title": self.title, "severity": self.severity,
                "est_speedup_pct": None if self.est_speedup_pct is None else round(float(self.est_speedup_pct), 2),
                "evidence": self.evidence, "advice": self.advice, "source": self.source,
                "ranked_by": self.source, "estimates": self.estimates, "lines": self.lines}


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
    derived: dict[str, Any] = field(default_factory=dict)   # the lab's computed values (lab.analysis.metrics.derived)
    rules: list[dict] = field(default_factory=list)         # Nsight's rule results for this kernel
    lines: dict | None = None                                # lab.analysis.lines.kernel_lines of this kernel

    def to_dict(self, lines: int | None = None) -> dict:
        """The object of DESIGN.md's `lab analyze --json` contract (with `lines` where the report has
        per-PC counters, `lines_status` and `lines_note` saying why not)."""
        from lab.analysis.lines import json_lines

        out = {"kernel": self.kernel, "duration_ns": self.duration_ns, "device": self.device,
               "metrics": self.metrics, "bottleneck": self.bottleneck,
               "findings": [f.to_dict() for f in self.findings]}
        k = self.lines or {"status": "not-read", "note": None, "lines": []}
        out["lines"] = json_lines(k, lines)
        out["lines_status"] = k["status"]
        if k.get("note"):
            out["lines_note"] = k["note"]
        return out


# ----------------------------------------------------------------------------- the judgement

def _severity(rank: float, lowered: bool) -> str:
    levels = ("high", "medium", "low")
    i = 0 if rank >= 40 else 1 if rank >= 15 else 2
    return levels[min(2, i + (1 if lowered else 0))]


def _lowered(evidence: dict) -> bool:
    return any(v is None for v in evidence.values())


def _lab_findings(c: KernelFacts, advice: dict[str, str]) -> list[Finding]:
    M, tp = c.M, c.tp
    out: list[Finding] = []
    cpct, mpct = tp["compute_pct"], tp["memory_pct"]
    top = max(v for v in (cpct, mpct, 0.0) if v is not None)

    # saturated units
    if mpct is not None and mpct >= BOUND_PCT:
        unit = unit_name(tp["memory_metric"])
        ev = {tp["memory_metric"]: rounded(mpct),
              "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed":
                  rounded(M.num("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"))}
        out.append(Finding("memory-bound", f"Memory-bound: {unit} at {mpct:.3g}% of its peak", "", None, ev,
                           advice["memory-bound"], "lab", mpct))
    path = tensor_path(M, c.device)
    rates = flop_rates(c)
    if path and path["hmma_on_hopper"] and path["pipe_pct"] and path["pipe_pct"] >= 0.5 * (cpct or 0.0):
        # The matrix work runs on mma.sync, which Hopper executes below the dense rate wgmma reaches: the
        # tensor path is the roof a fix that keeps HMMA cannot lift. Its gain: the distance from the
        # achieved tensor FLOP/s to the dense peak, weighted by the share of the busiest unit's time the
        # tensor pipe accounts for.
        pipe = path["pipe_pct"]
        achieved = rates.get("lab__tensor_pct_of_fp16_peak")
        share = min(1.0, pipe / max(top, pipe))
        est = (100.0 - achieved) * share if achieved is not None else None
        ev = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": rounded(pipe),
              "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed":
                  rounded(M.num("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")),
              "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed":
                  rounded(M.num("sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed")),
              "lab__tensor_tflops": rates.get("lab__tensor_tflops"), "lab__tensor_pct_of_fp16_peak": achieved}
        if achieved is not None and pipe:
            ev["lab__hmma_roof_pct_of_fp16_peak"] = rounded(100.0 * achieved / pipe, 1)   # HMMA's rate with the pipe full
        at = f" at {achieved:.1f}% of the dense FP16 peak" if achieved is not None else ""
        out.append(Finding("compute-bound", f"Tensor path: the matrix products run on mma.sync (HMMA){at}, tensor pipe "
                           f"{pipe:.0f}% busy; on Hopper only wgmma (HGMMA) fed by TMA reaches the dense rate", "",
                           est, ev, advice["compute-bound"], "lab", est if est is not None else pipe))
    elif cpct is not None and cpct >= BOUND_PCT:
        unit = unit_name(tp["compute_metric"])
        if tp["math_pct"] is not None and tp["math_pct"] >= 0.7 * cpct and tp["math_metric"] != tp["compute_metric"]:
            unit = f"{unit_name(tp['math_metric'])} at {tp['math_pct']:.3g}%, {unit}"
        ev = {tp["compute_metric"]: rounded(cpct),
              **({tp["math_metric"]: rounded(tp["math_pct"])} if tp["math_metric"] else {}),
              "sm__throughput.avg.pct_of_peak_sustained_elapsed":
              rounded(M.num("sm__throughput.avg.pct_of_peak_sustained_elapsed")),
              "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active":
              rounded(M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"))}
        ev.update(rates)
        out.append(Finding("compute-bound", f"Compute-bound: {unit} at {cpct:.3g}% of its peak", "", None, ev,
                           advice["compute-bound"], "lab", cpct))

    # far from every roof: latency
    if (cpct is not None or mpct is not None) and top < BOUND_PCT:
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
        out.append(Finding("latency-bound", f"Latency-bound: compute at {cpct or 0:.3g}%, memory at {mpct or 0:.3g}% "
                           f"of peak{top_txt}", "", est, ev, advice["latency-bound"], "lab", est))

    # parallelism: the warps the launch puts in flight against the device's warp slots
    w = warps_in_flight(M)
    if w is not None and w["grid_limits"]:
        idle_sms = 100.0 * (1.0 - c.ctas / c.sms) if (c.ctas and c.sms and c.ctas < c.sms) else 0.0
        # latency is hidden by warps in flight: the share of the resident warps the grid leaves empty,
        # times the distance to the nearest roof
        unfilled = (1.0 - w["launched"] / w["resident_limit"]) * (100.0 - top)
        est = max(idle_sms, unfilled)
        ev = {"launch__grid_size": int(c.ctas), "launch__block_size": M.num("launch__block_size"),
              "device__attribute_multiprocessor_count": int(c.sms),
              "device__attribute_max_warps_per_multiprocessor": M.num("device__attribute_max_warps_per_multiprocessor"),
              "launch__waves_per_multiprocessor": rounded(c.waves, 3),
              "sm__warps_active.avg.pct_of_peak_sustained_active":
                  rounded(M.num("sm__warps_active.avg.pct_of_peak_sustained_active")),
              "lab__warps_in_flight": int(w["in_flight"]), "lab__warp_slots": int(w["slots"]),
              "lab__warps_in_flight_pct_of_slots": rounded(100 * w["share_of_slots"], 2)}
        wpb = int(w["warps_per_cta"])
        title = (f"Too little parallelism: {int(w['launched']):,} warps in flight ({int(c.ctas):,} CTAs x {wpb} "
                 f"warp{'s' if wpb > 1 else ''}) for the {int(w['slots']):,} warp slots of {int(c.sms)} SMs "
                 f"({100 * w['share_of_slots']:.1f}%)")
        if est >= 1.0:
            out.append(Finding("small-grid", title, "", est, ev, advice["small-grid"], "lab", est))
    elif w is None and c.ctas is not None and c.sms and (c.ctas < c.sms or c.fill < 1.0):
        idle_sms = 100.0 * (1.0 - c.ctas / c.sms) if c.ctas < c.sms else 0.0
        est = max(idle_sms, (1.0 - c.fill) * (100.0 - top))
        ev = {"launch__grid_size": int(c.ctas), "device__attribute_multiprocessor_count": int(c.sms),
              "launch__waves_per_multiprocessor": rounded(c.waves, 3), "launch__block_size": M.num("launch__block_size")}
        if est >= 1.0:
            out.append(Finding("small-grid", f"Small grid: {int(c.ctas)} CTAs on {int(c.sms)} SMs", "", est, ev,
                               advice["small-grid"], "lab", est))

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
        if warp_specialised(M, c.device):
            # A warp-specialised wgmma kernel hides latency with asynchronous depth (wgmma groups and TMA
            # stages in flight), not with resident warps: its warpgroups trade registers (setmaxnreg) and
            # few warps per SM is the design. The lab has no model of what more warps would gain there,
            # so occupancy is context, ranked last with no estimate; Nsight's stays in `estimates`.
            out.append(Finding("occupancy-limited", f"Occupancy {theo:.1f}% at most, limited by {lim or 'unknown'}: "
                               "few warps by design in a warp-specialised wgmma kernel", "", None, ev,
                               advice["occupancy-limited"], "lab", 0.5))
        else:
            out.append(Finding("occupancy-limited", f"Occupancy {theo:.1f}% at most, limited by {lim or 'unknown'}", "",
                               est, ev, advice["occupancy-limited"], "lab", est))

    # coalescing: excessive sectors of global accesses (a broadcast wastes none)
    unit_l1 = M.num("l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_active")
    busy_mem = max(v for v in (unit_l1, mpct, 0.0) if v is not None)
    share, ev, exact = global_excess(M)
    if share is not None and share > 1.0 / SECTOR_BYTES:
        # wasted sectors cost time in proportion to the global share of the load/store traffic
        global_part = 1.0 - (c.local_share or 0.0)
        est = share * busy_mem * global_part
        ev = dict(ev, lab__global_excess_sector_pct=rounded(100 * share, 1),
                  lab__global_bytes_used_per_sector=rounded(SECTOR_BYTES * (1 - share)),
                  **{c.tp["memory_metric"] or "memory_pct_of_peak": rounded(mpct)})
        if not exact:   # bytes per sector cannot tell a broadcast apart: say so, and lower the severity
            ev["derived__memory_l2_theoretical_sectors_global_excessive"] = None
        if c.local_share:
            ev["lab__local_share_pct"] = rounded(100 * c.local_share, 1)
        how = "excessive" if exact else "unused (bytes per sector; SourceCounters would tell a broadcast apart)"
        out.append(Finding("uncoalesced-global", f"Uncoalesced global accesses: {100 * share:.0f}% of their sectors "
                           f"{how}", "", est, ev, advice["uncoalesced-global"], "lab", est))

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

    # launch-bound: the launch overhead the run's timeline measured, else a typical one
    d = M.num("gpu__time_duration.sum")
    if d is not None and d > 0:
        measured = c.launch_overhead_ns is not None and c.launch_overhead_ns > 0
        overhead = float(c.launch_overhead_ns) if measured else LAUNCH_OVERHEAD_NS
        est = 100.0 * overhead / (d + overhead)
        if est >= 10.0:
            how = "the launch overhead this run's timeline measured" if measured else "a typical launch's overhead"
            out.append(Finding("launch-bound", f"Short kernel: {d / 1000:.1f} us, near {how} ({overhead / 1000:.1f} us)",
                               "", est, {"gpu__time_duration.sum": d, "lab__launch_overhead_ns": rounded(overhead, 0),
                                         "lab__launch_overhead_source": "timeline" if measured else "typical (assumed)"},
                               advice["launch-bound"], "lab", est))

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
                    bound.rank = max(bound.rank, est)
                    bound.evidence.update(ev)
    return out


def _rule_findings(c: KernelFacts, rules: list[dict], advice: dict[str, str]) -> list[Finding]:
    out = []
    share, _, exact = global_excess(c.M)
    no_waste = exact and share is not None and share <= 1.0 / SECTOR_BYTES
    for r in rules:
        cls = map_rule(r)
        if cls is None:
            continue
        if cls == "uncoalesced-global" and no_waste and "local" not in (r.get("title") or "").lower():
            # ncu's access-pattern rule counts bytes used per sector, which a broadcast (32 lanes, one
            # address) lowers without wasting a sector; SourceCounters' excessive-sector count says none is
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
        # Nsight's own words where the lab has no judgement of this class (it is then the only voice)
        adv = _first_sentences(r.get("message") or "") or advice[cls]
        if r.get("rule_id") == "AchievedOccupancy":
            adv = ("Achieved occupancy is well below the theoretical: warps or CTAs finish unevenly (imbalanced work, "
                   "a partial last wave) or too few CTAs reach each SM; balance the work per CTA, launch more CTAs.")
        elif r.get("rule_id") == "LaunchConfiguration" and "tail" in (r.get("title") or "").lower():
            adv = ("The last wave of CTAs is partial: size the grid as a multiple of (SMs x CTAs per SM), or use "
                   "more, smaller CTAs so the tail matters less.")
        f = Finding(cls, title, "", rank if est is not None else None, ev, adv, f"ncu-rule:{r.get('rule_id')}", rank)
        f.estimates = [{"source": f.source, "est_speedup_pct": rounded(est), "type": r.get("speedup_type") or "global"}]
        out.append(f)
    return out


def _first_sentences(text: str, n: int = 2) -> str:
    parts = re.split(r"(?<=[.!?])\s+", text.strip())
    return " ".join(parts[:n]).strip()


def _merge(findings: list[Finding]) -> list[Finding]:
    """One finding per cause (class), carrying every estimate of it. The lab's estimate ranks where the
    lab has a model of the cause: it is bounded by the affected unit's utilization, the global share of
    the traffic and the warps in flight, which Nsight's per-rule estimates are not; else the highest
    (weighted) Nsight estimate ranks. Title and advice come from the finding that ranks."""
    by: dict[str, list[Finding]] = {}
    for f in findings:
        if not f.estimates:
            f.estimates = [{"source": f.source, "est_speedup_pct": rounded(f.est_speedup_pct), "type": "lab model"
                            if f.source == "lab" else "global"}]
        by.setdefault(f.cls, []).append(f)
    out = []
    for cls, group in by.items():
        lab = [f for f in group if f.source == "lab"]
        lead = max(lab, key=lambda f: f.rank) if lab else max(group, key=lambda f: f.rank)
        merged = Finding(lead.cls, lead.title, "", lead.est_speedup_pct, dict(lead.evidence), lead.advice, lead.source,
                         lead.rank)
        for f in sorted(group, key=lambda f: (f is not lead, -f.rank)):
            merged.estimates += f.estimates
            for k, v in f.evidence.items():
                merged.evidence.setdefault(k, v)
        out.append(merged)
    return out


def _order(findings: list[Finding], c: KernelFacts) -> list[Finding]:
    top = max(v for v in (c.tp["compute_pct"], c.tp["memory_pct"], 0.0) if v is not None)
    for f in findings:
        # at U% of the busiest unit's peak, a fix that leaves that unit's work unchanged gains at most 100-U
        if f.cls in ("latency-bound", "occupancy-limited", "small-grid"):
            f.rank = min(f.rank, 100.0 - top)
    ranks = {f.cls: f.rank for f in findings}
    for f in findings:
        causes = [ranks[x] for x in _CAUSES.get(f.cls, ()) if x in ranks]
        if causes and max(causes) >= 0.5 * f.rank:
            f.rank = min(f.rank, max(causes))   # listed right after its cause (the tie order puts causes first)
    findings.sort(key=lambda f: (-round(f.rank, 6), _TIE_ORDER.index(f.cls)))
    for f in findings:
        if f.est_speedup_pct is not None:
            f.est_speedup_pct = f.rank   # the gain shown is the gain ranked by, so severity and gain agree
        f.severity = _severity(f.rank, _lowered(f.evidence))
    return [f for f in findings if f.rank >= 1.0 or f.est_speedup_pct is None and f.rank > 0]


# What each class's lines are: the counter (or stall reason, or opcodes) that locates its cause.
def _cite(f: Finding, k: dict | None, c: KernelFacts) -> list[dict]:
    if not k or not k.get("lines"):
        return []
    if f.cls == "uncoalesced-global":
        return cite(k, "excess_global_sectors")
    if f.cls == "bank-conflicts":
        return cite(k, "excess_shared_wavefronts")
    if f.cls == "local-memory":
        return cite(k, "local_inst_executed")
    if f.cls == "divergence":
        return cite(k, "divergent_branches") or cite(k, "samples")
    if f.cls == "compute-bound" and f.title.startswith("Tensor path"):
        return cite(k, "inst_executed", opcodes=("HMMA", "HGMMA"))
    if f.cls in ("latency-bound", "memory-bound") and c.stalls:
        reason = next((r for r, _, _ in c.stalls if r != "selected"), None)
        return cite(k, "samples", reason=reason) if reason else cite(k, "samples")
    if f.cls == "launch-bound":
        return []
    return cite(k, "samples")


def analyze_kernel(row: dict, rules: list[dict], problem: dict | None = None, lines: dict | None = None,
                   launch_overhead_ns: float | None = None) -> KernelAnalysis:
    c = kernel_facts(row, problem)
    c.rung = rung_of(plain(row.get("nvtx")))
    c.launch_overhead_ns = launch_overhead_ns
    advice = advice_by_class(c)
    findings = _order(_merge(_lab_findings(c, advice) + _rule_findings(c, rules, advice)), c)
    for f in findings:
        if f.cls in ("small-grid", "occupancy-limited") and f.source != "lab":
            continue   # a launch-shape rule (tail effect, achieved occupancy) has no lines behind it
        f.lines = _cite(f, lines, c)
        if f.lines and f.cls != "compute-bound":
            f.advice += f" {'Lines' if f.lines[0].get('line') is not None else 'SASS at PC'}: {where(f.lines)}."
    metrics = {k: plain(row[k]) for k in KEY_METRICS if k in row and plain(row[k]) is not None}
    kernel = plain(row.get("kernel")) or plain(row.get("kernel_function")) or "?"
    return KernelAnalysis(kernel=kernel, duration_ns=c.M.num("gpu__time_duration.sum"), device=c.device, metrics=metrics,
                          bottleneck=findings[0].cls if findings else None, findings=findings,
                          kernel_index=int(plain(row.get("kernel_index")) or 0), nvtx=plain(row.get("nvtx")),
                          derived=derived_values(c), rules=rules, lines=lines)


def _problem_applies(df: pd.DataFrame) -> bool:
    # The attention problem's FLOPs and bytes belong to one kernel (the lab's child launches one
    # rung, perhaps several times); a report of several different kernels splits them unknowably.
    names = set(df["kernel"]) if "kernel" in df.columns else set()
    return len(names) == 1


def analyze_frame(df: pd.DataFrame, rules: Iterable[dict], problem: dict | None = None,
                  lines: list[dict] | None = None, launch_overhead_ns: float | None = None) -> list[KernelAnalysis]:
    """Findings for every kernel (row) of a `lab.profilers.ncu.load_report` frame, given the report's
    rule results (`lab.profilers.ncu.rule_results`), optionally the lab's problem dict
    (`Problem.to_dict()`: batch, heads, flops, min_bytes, dtype, ...), the per-line tables of
    `lab.analysis.lines.report_lines` (by kernel_index) and the launch overhead a timeline measured."""
    rules = list(rules)
    if problem is not None and not problem.get("min_bytes") and "batch" in problem and problem.get("dtype"):
        from lab.measure.problem import Problem

        problem = Problem.from_dict(problem).to_dict()
    use_problem = problem if (problem and _problem_applies(df)) else None
    out = []
    bare = df.copy(deep=False)
    bare.attrs = {}   # pandas deep-copies attrs (the units of ~2,000 metrics) on every row it yields
    for pos, row in enumerate(bare.to_dict("records")):
        idx = int(plain(row.get("kernel_index")) if row.get("kernel_index") is not None else pos)
        k_lines = lines[idx] if lines is not None and idx < len(lines) else None
        out.append(analyze_kernel(row, [r for r in rules if r.get("kernel_index") == idx], use_problem, k_lines,
                                  launch_overhead_ns))
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
                   kernel_regex: str | None = None, launch_overhead_ns: float | None = None,
                   with_lines: bool = True) -> list[KernelAnalysis]:
    """Findings for every profiled kernel of an .ncu-rep (optionally only those matching a regex),
    each citing its source lines where the report has per-PC counters."""
    from lab.profilers import ncu

    df = select_kernels(ncu.load_report(path), kernel_regex)
    lines = report_lines(path) if with_lines else None
    return analyze_frame(df, ncu.rule_results(path), problem, lines, launch_overhead_ns)


def report_dtype(path: str | os.PathLike, kernel_regex: str | None = None) -> str | None:
    """The one element type the report's kernels declare in their names, else None."""
    from lab.analysis.metrics import infer_dtype
    from lab.profilers import ncu

    df = select_kernels(ncu.load_report(path), kernel_regex)
    found = {infer_dtype(str(k)) for k in df["kernel"]} - {None}
    return found.pop() if len(found) == 1 else None


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
        if a.lines and a.lines.get("note"):
            console.print(f"    lines: {a.lines['note']}", style="dim", highlight=False)
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
            others = [e for e in f.estimates[1:] if e.get("est_speedup_pct") is not None]
            if others:
                console.print(Text("       also estimated: ", style="dim") + Text(", ".join(
                    f"{e['source']} {e['est_speedup_pct']:.1f}% ({e['type']})" for e in others)), highlight=False)
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
                         "source": d["source"], "advice": d["advice"], "evidence": json.dumps(d["evidence"]),
                         "estimates": json.dumps(d["estimates"]), "lines": json.dumps(d["lines"])})
    cols = ["kernel_index", "kernel", "rank", "class", "title", "severity", "est_speedup_pct", "source", "advice",
            "evidence", "estimates", "lines"]
    df = pd.DataFrame(rows, columns=cols)
    df["est_speedup_pct"] = df["est_speedup_pct"].astype("float64")
    return df


def derived_frame(analyses: list[KernelAnalysis]) -> pd.DataFrame:
    """The lab's derived values per kernel (lab.analysis.metrics.derived_values, as JSON): stored with
    the run so that pages and comparisons read them instead of interpreting metric names again."""
    rows = [{"kernel_index": a.kernel_index, "kernel": a.kernel, "derived": json.dumps(a.derived, default=str),
             "lines_status": (a.lines or {}).get("status"), "lines_note": (a.lines or {}).get("note")}
            for a in analyses]
    df = pd.DataFrame(rows, columns=["kernel_index", "kernel", "derived", "lines_status", "lines_note"])
    df["kernel_index"] = df["kernel_index"].astype("int64")
    return df


def metrics_frame(report: str | os.PathLike | pd.DataFrame) -> pd.DataFrame:
    """The report's metrics, one row per kernel, one column per metric (numbers as float64, text as
    str), for the run store's Parquet table; units in df.attrs["units"]."""
    from lab.profilers import ncu

    df = report if isinstance(report, pd.DataFrame) else ncu.load_report(report)
    # column by column through plain lists, from a frame without attrs: pandas deep-copies attrs
    # (ncu's units of ~1,400 metrics) into every column it hands out, which cost ~1 s per report
    bare = df.copy(deep=False)
    bare.attrs = {}
    cols = {}
    for col, raw in bare.to_dict("list").items():
        vals = [plain(v) for v in raw]
        if any(isinstance(v, str) for v in vals):
            cols[col] = pd.Series([None if v is None else str(v) for v in vals], index=df.index, dtype="object")
        else:
            cols[col] = np.array([_as_float(v) for v in vals], dtype="float64")
    out = pd.DataFrame(cols, index=df.index)
    out["kernel_index"] = out["kernel_index"].astype("int64")
    out.attrs = dict(df.attrs)
    return out


def _as_float(v) -> float:
    """A metric value as float64, NaN where it is missing or not a number (as pd.to_numeric coerces)."""
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


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

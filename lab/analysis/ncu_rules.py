"""Nsight Compute's own rule results mapped onto the lab's bottleneck classes (lab.vocabulary.CLASSES).
(The lab's own rules, one per class, are lab.analysis.rules.)

ncu's rules (SOLBottleneck, CPIStall, LaunchConfiguration, SharedMemoryConflicts, ...) name a
problem in their own words and give an estimated speedup; the lab keeps their estimate and files each
result under one class of its fixed vocabulary. Informational results and noise (the L2-compression
advice every kernel gets, roofline and NUMA notes) map to None and are dropped. A rule this lab does
not know yet is classified by its words (bank conflict, coalescing, spill, occupancy, ...), else
dropped, so a newer ncu's rules count where their words say what they are.
"""

from __future__ import annotations

import re

# Rules that are noise for this lab: advice every report carries, or information with no action.
_DROPPED_RULES = {"MemoryL2Compression", "SOLFPRoofline", "SOLDPRoofline", "NumaAffinity", "NvlinkTopology",
                  "MemoryApertureUsage", "PmSamplingOverflow", "HierarchicalRoofline"}


def _stall_class(text: str) -> str:
    """The class of a CPIStall result, from the stall reason its title (or message) names."""
    t = text.lower()
    if "math pipe" in t or "not selected" in t or "dispatch" in t:
        return "compute-bound"
    if "lg throttle" in t or "tex throttle" in t or "drain" in t:
        return "memory-bound"
    if "mio throttle" in t or "short scoreboard" in t:
        return "memory-bound"
    if "branch resolving" in t:
        return "divergence"
    if "no instruction" in t:
        return "instruction-fetch"
    return "latency-bound"   # long scoreboard, barrier, wait, membar, sleeping, ...


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

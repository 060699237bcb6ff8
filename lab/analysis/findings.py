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
    latency; idle lanes for divergence; the timeline's measured launch cost for launch-bound; the
    share of the PC samples waiting for an instruction for instruction fetch;
  * otherwise Nsight's estimate ranks (a `local` estimate, which measures one unit's efficiency
    rather than the kernel's runtime, counts half);
  * a saturated unit (memory- or compute-bound) ranks by its utilization and shows no gain (being at
    the roof is not a gain); at U% of the busiest unit's peak, latency, occupancy and parallelism
    fixes, which leave that unit's work unchanged, are capped at 100-U%; when a specific cause
    explains a symptom (bank conflicts a busy L1, a small grid the latency), the cause ranks just
    above it: its fix is the actionable one (where its gain is at least half the symptom's; a cause
    whose fix must come first, instruction fetch before the latency steps, is listed above its
    symptom whatever the two gains, each showing its own).
Nsight's access-pattern rules count bytes used per sector, which a broadcast lowers without wasting a
sector: where SourceCounters counts no excessive sector, they are not taken as uncoalesced accesses.
Each finding cites the source lines it rests on (lab.analysis.lines).

A metric the report lacks (a basic-set report has no stall reasons) leaves its evidence null and
lowers the finding's severity one step; it never raises.

This module merges and orders; the judgement of each class is its rule (lab.analysis.rules, one file
per class with its doc, evidence, advice and lines), from lab.analysis.metrics (what the raw metrics
say: busiest units, stalls, occupancy limiter, FLOPs, bytes per sector, ...); lab.analysis.ncu_rules
files Nsight's rule results under the same classes, and lab.analysis.advice names the rung of a fix.
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
from lab.analysis import overlap
from lab.analysis.advice import rung_of
from lab.analysis.lines import report_lines, source_summary
from lab.analysis.metrics import KEY_METRICS as METRIC_LABELS
from lab.analysis.metrics import (SECTOR_BYTES, KernelFacts, derived_values, duration_shares, global_excess, kernel_facts,
                                 plain, rounded, without_issuer_waits)
from lab.analysis.ncu_rules import map_rule
from lab.analysis.rules import BY_CLASS, CAUSES, RULES, TIE_ORDER, Context, Finding, context
from lab.analysis.direction import direction
from lab.measure.problem import Problem
from lab.measure import rates

CLASSES = vocabulary.CLASSES   # every finding carries one (lab.vocabulary)

LOCAL_WEIGHT = 0.5      # a `local` Nsight estimate (one unit's efficiency) counts half toward the rank

# The curated metrics of each kernel (`metrics` in the JSON): lab.analysis.metrics' one list, present ones only.
KEY_METRICS = tuple(name for name, _ in METRIC_LABELS)


# ----------------------------------------------------------------------------- data model

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
               # its share of the time of the kernels analyzed together (a backward's preprocess, main, convert)
               "duration_share_pct": self.derived.get("duration_share_pct"),
               "metrics": self.metrics, "bottleneck": self.bottleneck,
               "findings": [f.to_dict() for f in self.findings]}
        if self.derived.get("overlap"):   # the latency-hiding techniques the report shows, with their evidence
            out["overlap"] = self.derived["overlap"]
        if self.derived.get("backward_from"):   # a backward's kernel, and which signal said so (lab.analysis.direction)
            out["backward_from"] = self.derived["backward_from"]
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


def _lab_findings(c: KernelFacts, ctx: Context) -> list[Finding]:
    """The lab's own judgement: every rule of the registry (lab.analysis.rules) that applies."""
    out: list[Finding] = []
    for rule in RULES:
        got = rule.applies(c, ctx)
        if got is not None:
            out += got if isinstance(got, list) else [got]
    return out


def _rule_findings(c: KernelFacts, rules: list[dict], ctx: Context) -> list[Finding]:
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
        adv = _first_sentences(r.get("message") or "") or BY_CLASS[cls].advice(c, ctx)
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
        if BY_CLASS[f.cls].capped_by_busiest_unit:
            f.rank = min(f.rank, 100.0 - top)
    ranks = {f.cls: f.rank for f in findings}
    for f in findings:
        causes = [ranks[x] for x in CAUSES.get(f.cls, ()) if x in ranks]
        if causes and max(causes) >= 0.5 * f.rank:
            f.rank = min(f.rank, max(causes))   # listed right after its cause (the tie order puts causes first)
    findings.sort(key=lambda f: (-round(f.rank, 6), TIE_ORDER.index(f.cls)))
    for f in findings:
        if f.est_speedup_pct is not None:
            f.est_speedup_pct = f.rank   # the gain shown is the gain ranked by, so severity and gain agree
        f.severity = _severity(f.rank, _lowered(f.evidence))
    return _fixes_first([f for f in findings if f.rank >= 1.0 or f.est_speedup_pct is None and f.rank > 0])


def _fixes_first(findings: list[Finding]) -> list[Finding]:
    """The lab's finding of a cause whose fix comes before its symptoms' steps (a rule's
    `precedes_its_symptoms`) moved right above the first of those symptoms ranked above it; every
    finding keeps its own gain."""
    for f in [f for f in findings if BY_CLASS[f.cls].precedes_its_symptoms and f.source == "lab"]:
        above = [i for i, g in enumerate(findings) if g.cls in BY_CLASS[f.cls].explains]
        if above and above[0] < findings.index(f):
            findings.remove(f)
            findings.insert(above[0], f)
    return findings


def _cite(f: Finding, k: dict | None, c: KernelFacts) -> list[dict]:
    """The source lines a finding rests on: its rule's counter, stall reason or opcodes."""
    if not k or not k.get("lines"):
        return []
    return BY_CLASS[f.cls].lines(f, k, c)


def serialized_by_ptxas(row: dict, ptxas: list[dict] | None) -> str | None:
    """ptxas's wgmma serialization notice for the report's kernel `row` ("C7511: <reason>", "" where ptxas
    gave none), from the build's records (the manifest's build.ptxas): matched by the mangled name Nsight
    Compute and ptxas both record, else by the demangled one; None where no record of it says (a report
    the lab did not build, or a run stored before the records carried the notice)."""
    mangled, name = plain(row.get("kernel_mangled")), plain(row.get("kernel"))
    for rec in ptxas or []:
        if rec.get("wgmma_serialized") is not None and (
                (mangled and rec.get("mangled") == mangled) or (name and rec.get("kernel") == name)):
            return rec["wgmma_serialized"]
    return None


def analyze_kernel(row: dict, rules: list[dict], problem: dict | None = None, lines: dict | None = None,
                   launch_overhead_ns: float | None = None, mode: str | None = None,
                   ptxas: list[dict] | None = None) -> KernelAnalysis:
    c = kernel_facts(row, problem)
    c.wgmma_serialized = serialized_by_ptxas(row, ptxas)
    c.rung = rung_of(plain(row.get("nvtx")))
    c.launch_overhead_ns = launch_overhead_ns
    c.source = source_summary(lines)
    # a backward's kernel hears a backward's next steps: the run's mode, else the lab's NVTX range, else its name
    c.direction = direction(plain(row.get("kernel")) or plain(row.get("kernel_function")), mode, plain(row.get("nvtx")))
    without_issuer_waits(c)   # a producer's idle waits are no stall of the work
    c.overlap = overlap.techniques(c, lines)   # what the next steps must not propose again
    ctx = context(c, mode)
    findings = _order(_merge(_lab_findings(c, ctx) + _rule_findings(c, rules, ctx)), c)
    if findings and c.wgmma_serialized:   # the verdict's first evidence: a wait after every product, by ptxas
        findings[0].evidence = {overlap.SERIALIZED_EVIDENCE: c.wgmma_serialized, **findings[0].evidence}
    for f in findings:
        rule = BY_CLASS[f.cls]
        if f.source != "lab" and not rule.nsight_results_have_lines:
            continue   # a launch-shape rule (tail effect, achieved occupancy) has no lines behind it
        f.lines = _cite(f, lines, c)
        if f.lines and rule.advice_names_lines:
            f.advice += " " + rule.name_lines(f)
    metrics = {k: plain(row[k]) for k in KEY_METRICS if k in row and plain(row[k]) is not None}
    kernel = plain(row.get("kernel")) or plain(row.get("kernel_function")) or "?"
    derived = derived_values(c)
    derived["overlap"] = c.overlap.to_dict()
    if c.direction.backward:   # how the lab knew (a forward's derived values stay as they were)
        derived["backward_from"] = c.direction.told_by
    return KernelAnalysis(kernel=kernel, duration_ns=c.M.num("gpu__time_duration.sum"), device=c.device, metrics=metrics,
                          bottleneck=findings[0].cls if findings else None, findings=findings,
                          kernel_index=int(plain(row.get("kernel_index")) or 0), nvtx=plain(row.get("nvtx")),
                          derived=derived, rules=rules, lines=lines)


def _problem_applies(df: pd.DataFrame) -> bool:
    # The attention problem's FLOPs and bytes belong to one kernel (the lab's child launches one
    # rung, perhaps several times); a report of several different kernels splits them unknowably.
    names = set(df["kernel"]) if "kernel" in df.columns else set()
    return len(names) == 1


def problem_of_mode(problem: dict, mode: str | None) -> dict:
    """The problem dict a kernel is held against, its FLOPs and minimum bytes those of the run's mode
    (lab.measure.rates: a backward's FLOPs count 2.5x the forward's, it moves dO, dQ, dK, dV too). A
    problem without a dtype (the report declared none) gets no minimum bytes: never a float32 guess."""
    m = mode if mode in rates.MODES else "fwd"
    dtype = problem.get("dtype")
    p = Problem.from_dict({**problem, "dtype": dtype or "float32"})
    return dict(problem, flops=rates.flops(p, m), min_bytes=rates.min_bytes(p, m) if dtype else None,
                min_bytes_rule=rates.min_bytes_rule(m))


def analyze_frame(df: pd.DataFrame, rules: Iterable[dict], problem: dict | None = None,
                  lines: list[dict] | None = None, launch_overhead_ns: float | None = None,
                  mode: str | None = None, ptxas: list[dict] | None = None) -> list[KernelAnalysis]:
    """Findings for every kernel (row) of a `lab.profilers.ncu.load_report` frame, given the report's
    rule results (`lab.profilers.ncu.rule_results`), optionally the lab's problem dict
    (`Problem.to_dict()`: batch, heads, flops, min_bytes, dtype, ...), the per-line tables of
    `lab.analysis.lines.report_lines` (by kernel_index), the launch overhead a timeline measured and the
    run's mode ("fwd", "bwd", "fwd+bwd": a backward's kernels hear backward advice; None: the lab's NVTX
    range tells, else their names: lab.analysis.direction) and the build's ptxas records (the manifest's
    build.ptxas: a kernel whose wgmma ptxas serialized says so in its verdict)."""
    rules = list(rules)
    if problem is not None and "batch" in problem:
        problem = problem_of_mode(problem, mode)
    use_problem = problem if (problem and _problem_applies(df)) else None
    out = []
    bare = df.copy(deep=False)
    bare.attrs = {}   # pandas deep-copies attrs (the units of ~2,000 metrics) on every row it yields
    for pos, row in enumerate(bare.to_dict("records")):
        idx = int(plain(row.get("kernel_index")) if row.get("kernel_index") is not None else pos)
        k_lines = lines[idx] if lines is not None and idx < len(lines) else None
        out.append(analyze_kernel(row, [r for r in rules if r.get("kernel_index") == idx], use_problem, k_lines,
                                  launch_overhead_ns, mode, ptxas))
    # each kernel's share of the time of all profiled kernels: of a multi-kernel backward (preprocess,
    # main loop, dQ convert), which one the time goes to
    for a, share in zip(out, duration_shares([a.duration_ns for a in out])):
        a.derived["duration_share_pct"] = share
    return out


def main_kernel(analyses: list[KernelAnalysis]) -> KernelAnalysis | None:
    """The kernel the time goes to (the longest; the first where no duration was counted): whose verdict
    is the run's bottleneck, not a short preprocess kernel's that happened to launch first."""
    if not analyses:
        return None
    return max(analyses, key=lambda a: a.duration_ns if a.duration_ns is not None else -1.0)


def findings_summary(analyses: list[KernelAnalysis]) -> dict | None:
    """The run's findings summary: the bottleneck of its main kernel, and how many findings in all."""
    main = main_kernel(analyses)
    return {"bottleneck": main.bottleneck, "count": sum(len(a.findings) for a in analyses)} if main else None


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
                   with_lines: bool = True, mode: str | None = None,
                   ptxas: list[dict] | None = None) -> list[KernelAnalysis]:
    """Findings for every profiled kernel of an .ncu-rep (optionally only those matching a regex),
    each citing its source lines where the report has per-PC counters; `ptxas`: the build's records."""
    from lab.profilers import ncu

    df = select_kernels(ncu.load_report(path), kernel_regex)
    lines = report_lines(path) if with_lines else None
    return analyze_frame(df, ncu.rule_results(path), problem, lines, launch_overhead_ns, mode, ptxas)


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
    from rich.text import Text

    from lab.console import rich_console

    console = console or rich_console()
    sev_style = {"high": "bold red", "medium": "yellow", "low": "dim"}
    for a in analyses:
        m, d = a.metrics, a.derived
        head = Text()
        head.append(f"[{a.kernel_index}] ", style="dim")
        head.append(a.kernel if len(a.kernel) <= 200 else a.kernel[:197] + "...", style="bold")
        console.print(head)
        share = d.get("duration_share_pct") if len(analyses) > 1 else None
        of_all = f" ({share:.1f}% of the profiled kernels' time)" if share is not None else ""
        console.print(f"    {_fmt((a.duration_ns or 0) / 1000)} us{of_all} on {a.device or 'unknown device'}; grid "
                      f"{_fmt(m.get('launch__grid_size'))} x block {_fmt(m.get('launch__block_size'))}, "
                      f"{_fmt(m.get('launch__registers_per_thread'))} registers/thread", highlight=False)
        busy = (f"    compute {_fmt(d.get('compute_pct_of_peak'))}% ({d.get('compute_unit') or 'n/a'}), memory "
                f"{_fmt(d.get('memory_pct_of_peak'))}% ({d.get('memory_unit') or 'n/a'}) of peak")
        if d.get("stalls"):
            busy += "; stalls: " + ", ".join(f"{r.replace('_', ' ')} {s:.0f}%" for r, _, s in d["stalls"][:3])
            if d.get("issuer_wait_pct"):
                busy += f" (without the issuer's mbarrier waits, {d['issuer_wait_pct']:.0f}% of the samples)"
        console.print(busy, highlight=False)
        rates = [f"{k.removeprefix('lab__')} {_fmt(v)}" for k, v in d.items() if k.startswith("lab__") and v is not None]
        if rates:
            console.print("    " + ", ".join(rates), style="dim", highlight=False)
        if a.lines and a.lines.get("note"):
            console.print(f"    lines: {a.lines['note']}", style="dim", highlight=False)
        if d.get("backward_from"):
            console.print(f"    a backward kernel, by {d['backward_from']}", style="dim", highlight=False)
        shows = _overlap_line(d.get("overlap"))
        if shows:
            console.print("    " + shows, style="dim", highlight=False)
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
            # a next step that says what the kernel already does: that part on a line of its own
            step, done = overlap.split_advice(f.advice)
            console.print(Text("       next: ", style="dim") + Text(step), highlight=False)
            if done:
                console.print(Text("       already: ", style="dim") + Text(done), highlight=False)
        console.print()


# why a technique the report does not show is no missing step (lab.analysis.overlap's `moot`), by technique
_MOOT_GROUPS = {overlap.PINGPONG: "not a backward's lever", overlap.DQ_REDUCE: "not in this kernel"}


def _overlap_line(shown: dict | None) -> str:
    """'overlap in the report: persistent grid, ...; not: ...; cannot tell: ...' (lab.analysis.overlap)."""
    if not shown:
        return ""
    groups = {True: [], False: [], None: [], "moot": []}
    apart: dict[str, list] = {}
    for key, s in shown.items():
        if key == "waits":
            continue
        if s.get("moot") and s["present"] is not True and key in _MOOT_GROUPS:
            apart.setdefault(_MOOT_GROUPS[key], []).append(s["name"])
        else:   # one that cannot help this launch (a grid under one wave) is not a missing step
            groups["moot" if s.get("moot") and s["present"] is False else s["present"]].append(s["name"])
    parts = [f"overlap in the report: {', '.join(groups[True]) or 'none'}"]
    if groups[False]:
        parts.append(f"not: {', '.join(groups[False])}")
    if groups["moot"]:
        parts.append(f"not the lever for this grid: {', '.join(groups['moot'])}")
    parts += [f"{why}: {', '.join(names)}" for why, names in apart.items()]
    if groups[None]:
        parts.append(f"cannot tell: {', '.join(groups[None])}")
    return "; ".join(parts)


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

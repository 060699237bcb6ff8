"""What every lab rule is: one analysis class, a docstring saying what it looks for, `applies` (the
judgement: a Finding with its evidence and estimated gain, or None), `advice` (the next step for this
kernel) and `lines` (the source lines the finding rests on). The model is Nsight Compute's rules
(`sections/*.py` beside an ncu install): one file each, read and tested alone.

The Finding record lives here because rules make it; lab.analysis.findings merges the lab's findings
with Nsight's rule results, ranks them and cites their lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.analysis.advice import cc_of, next_rung
from lab.analysis.direction import BACKWARD_MODES, direction  # noqa: F401  (BACKWARD_MODES: one home, the direction module)
from lab.analysis.lines import cite, where
from lab.analysis.metrics import KernelFacts, kernel_role

BOUND_PCT = 60.0   # ncu's SpeedOfLight rule: above 60% of a unit's peak is throughput-bound territory


@dataclass
class Finding:
    cls: str
    title: str
    severity: str
    est_speedup_pct: float | None    # the gain it is ranked by (percent of runtime); None: a unit at its roof
    evidence: dict[str, Any]
    advice: str
    source: str                      # where the ranking estimate comes from: "lab" or "ncu-rule:<id>"
    rank: float = 0.0                # share of runtime (percent) used for ordering; see lab.analysis.findings
    estimates: list[dict] = field(default_factory=list)   # every estimate of this cause, the lab's and Nsight's
    lines: list[dict] = field(default_factory=list)       # the source lines it rests on (lab.analysis.lines.cite)

    def to_dict(self) -> dict:
        return {"class": self.cls, "title": self.title, "severity": self.severity,
                "est_speedup_pct": None if self.est_speedup_pct is None else round(float(self.est_speedup_pct), 2),
                "evidence": self.evidence, "advice": self.advice, "source": self.source,
                "ranked_by": self.source, "estimates": self.estimates, "lines": self.lines}


@dataclass
class Context:
    """What the rules of one kernel share: its facts, the busiest unit's share of its peak (`top`),
    whether the advice speaks to an attention rung's tiles (`ladder`), the run's mode ("fwd", "bwd",
    "fwd+bwd"; None for a report the lab did not make) and the kernel's role (lab.analysis.metrics.kernel_role:
    an "elementwise" pass of a rung, such as a backward's preprocess or dQ convert, reads no K/V tile and
    does no matrix product, so it hears no tile advice and no rung that demonstrates one)."""

    c: KernelFacts
    top: float
    ladder: bool
    mode: str | None = None
    role: str | None = None

    def rung(self, cls: str) -> str:
        """" The v3 (unrolled) rung demonstrates this fix." where the ladder has a later rung for `cls`."""
        r = next_rung(cls, self.c.rung, cc_of(self.c)) if self.role != "elementwise" else None
        return f" The {r} rung demonstrates this fix." if r else ""


def context(c: KernelFacts, mode: str | None = None) -> Context:
    tp = c.tp
    top = max(v for v in (tp["compute_pct"], tp["memory_pct"], 0.0) if v is not None)
    role = kernel_role(c.M)[0]
    return Context(c, top, bool(c.rung or c.problem) and role != "elementwise", mode, role)


class Rule:
    """One class of the vocabulary, judged from the metrics. Subclasses set `cls` and write a docstring
    saying what they look for, and override `applies` and `advice` (and `lines` where the default, the
    lines with the most stall samples, is not where the cause is)."""

    cls: str = ""
    # Symptoms this cause explains: when both are found, the cause ranks just above the symptom, its fix
    # being the actionable one (lab.analysis.findings orders them).
    explains: tuple[str, ...] = ()
    # A fix of this class leaves the busiest unit's work unchanged: at U% of that unit's peak it gains at
    # most 100-U% (latency, occupancy and parallelism fixes).
    capped_by_busiest_unit: bool = False
    # This cause's fix comes before any step of the symptoms it explains, whatever the two gains: the lab's
    # finding of it is listed right above the first of them, each keeping its own gain (instruction fetch:
    # warps without an instruction gain nothing from the latency steps, which add code of their own).
    precedes_its_symptoms: bool = False
    # Nsight's launch-shape rules of this class (tail effect, achieved occupancy) have no lines behind them.
    nsight_results_have_lines: bool = True
    # The finding's advice ends with where its lines are.
    advice_names_lines: bool = True

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        raise NotImplementedError

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        raise NotImplementedError

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        # a producer spinning on a free slot is idle by design, never the lines behind a cause
        return cite(k, "samples", skip_waits="issuer")

    def name_lines(self, f: Finding) -> str:
        """The end of the advice that names the finding's lines."""
        return f"{'Lines' if f.lines[0].get('line') is not None else 'SASS at PC'}: {where(f.lines)}."

    def finding(self, title: str, est: float | None, evidence: dict, c: KernelFacts, ctx: Context,
                rank: float | None = None) -> Finding:
        """A Finding of this rule's class from the lab's model, with this rule's advice; ranked by
        `rank` (default: the estimate)."""
        return Finding(self.cls, title, "", est, evidence, self.advice(c, ctx), "lab", est if rank is None else rank)


def is_backward(c: KernelFacts, mode: str | None) -> bool:
    """A kernel of a backward pass (lab.analysis.direction: the run's mode, else the lab's NVTX range, else the
    kernel's name); lab.analysis.findings has already decided it for the kernel at hand."""
    d = c.direction or direction(c.M.text("kernel") or c.M.text("kernel_function"), mode, c.M.text("nvtx"))
    return d.backward


def top_stall_lines(k: dict, c: KernelFacts, skip_waits: str = "issuer") -> list[dict]:
    """The lines where warps wait most on the kernel's top stall reason (issuing is not waiting), without
    the pipeline waits `skip_waits` names (lab.analysis.lines.cite): a producer's wait for a free slot is
    idle by design; where those waits were all a reason's samples, the next reason's lines."""
    for reason, _, _ in c.stalls:
        if reason == "selected":
            continue
        got = cite(k, "samples", reason=reason, skip_waits=skip_waits)
        if got:
            return got
    return cite(k, "samples", skip_waits=skip_waits)

"""Compare two kernels' Nsight Compute reports where one side is not a stored run: a bare .ncu-rep (or
.xz/.gz of one), such as a profile of cuDNN's kernel at the same shape, against a run or another report.

A bare report carries no timing the lab took (no repetitions, no CI95, no L2 flush it controlled), so
nothing of the two kernels' speed is judged: the comparison gives each side's heaviest kernel, the key
metrics (the analysis' one list, Nsight's names) with their change, and the findings resolved and new.
The duration row is ncu's own, under its clock control and replay. `lab compare` exits 0 after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.report.compare import finding_changes, metric_and_finding_lines, metric_rows

REPORT_SUFFIXES = (".ncu-rep", ".ncu-rep.xz", ".ncu-rep.gz")


def is_report_file(ref: str) -> bool:
    """`ref` names an Nsight Compute report file (by its suffix; existing or not: a missing one is then
    refused as a file, not looked up as a run id)."""
    return str(ref).endswith(REPORT_SUFFIXES)


@dataclass
class KernelSide:
    ref: str        # as given: a run id or folder, or a report's path
    source: str     # "run" or "report"
    kernel: str
    device: str | None
    metrics: dict
    findings: dict[str, str]   # class -> title


def load_side(ref: str, root: Path | None) -> KernelSide:
    """The heaviest kernel (longest ncu duration) of a report file, or of a stored run's own report. A run's
    report is analyzed again rather than its stored findings read, so that both sides are judged by this
    lab's rules of today (a run stored before a rule changed would otherwise differ for that reason)."""
    from lab.analysis.findings import analyze_report
    from lab.store.runs import find_run, report_or_run

    if is_report_file(ref):
        path, source = Path(ref), "report"
        if not path.is_file():
            raise LabError(f"{ref}: no such Nsight Compute report", hint="give a .ncu-rep (or .xz/.gz) path, or a run id")
    else:
        path, source = report_or_run(find_run(ref, root).path), "run"
    analyses = analyze_report(path, with_lines=False)
    if not analyses:
        raise LabError(f"{ref}: the report holds no profiled kernel")
    a = max(analyses, key=lambda x: x.duration_ns or 0.0)
    findings: dict[str, str] = {}
    for f in a.findings:
        findings.setdefault(f.cls, f.title)
    return KernelSide(ref, source, a.kernel, a.device, a.metrics, findings)


@dataclass
class KernelComparison:
    a: KernelSide
    b: KernelSide
    metrics: list[dict]
    findings: dict

    def to_json(self) -> dict:
        side = lambda s: {"ref": s.ref, "source": s.source, "kernel": s.kernel, "device": s.device}  # noqa: E731
        return {"a": side(self.a), "b": side(self.b), "timed": False, "metrics": self.metrics, "findings": self.findings}


def compare_kernels(a: KernelSide, b: KernelSide) -> KernelComparison:
    return KernelComparison(a, b, metric_rows(a.metrics, b.metrics), finding_changes(a.findings, b.findings))


def text_lines(c: KernelComparison) -> list[str]:
    lines = [f"{tag}  {s.ref} ({s.source}): {s.kernel[:100]}{' on ' + s.device if s.device else ''}"
             for tag, s in (("A", c.a), ("B", c.b))]
    bare = [tag for tag, s in (("A", c.a), ("B", c.b)) if s.source == "report"]
    lines.append(f"note: {' and '.join(bare)} {'is a bare Nsight Compute report' if len(bare) == 1 else 'are bare Nsight Compute reports'}"
                 " (no timing of the lab's): the kernels' metrics and findings are compared, not their speed;"
                 " Duration is ncu's own, under its clock control")
    if c.a.device and c.b.device and c.a.device != c.b.device:
        lines.append(f"warning: different GPUs ({c.a.device} vs {c.b.device}): cycles compare, times do not")
    lines += metric_and_finding_lines(c.metrics, c.findings)
    if c.findings["kept"]:
        lines.append(f"  findings in both: {', '.join(f['class'] for f in c.findings['kept'])}")
    return lines

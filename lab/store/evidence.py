"""What the stored runs say about a rung's bottleneck: the evidence `lab new` writes into the
header of the rung it copies forward ("Bottleneck attacked: <class> in v5's latest profile ...").

Reads manifests and the findings table only (no torch, no ncu_report).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lab.store import runs
from lab.store.manifest import candidate_label
from lab.store.runs import Run, list_runs

MAX_EVIDENCE = 4   # metrics quoted in the header: enough to say why, short enough to read


@dataclass
class Evidence:
    run_id: str
    run_path: Path
    device: str | None
    problem: str | None
    median_ms: float | None
    tflops: float | None
    bottleneck: str | None      # the class of the run's most important finding
    title: str | None           # that finding's title
    metrics: dict               # a few of its evidence metrics
    kernel: str | None = None   # of a run of several kernels: the one the time went to, whose verdict this is
    share_pct: float | None = None   # its share of the profiled kernels' time

    def header_text(self, variant_id: str) -> str:
        """One paragraph for the rung header's "Bottleneck attacked" section."""
        where = ", ".join(x for x in (self.device, self.problem) if x)
        speed = (f"{self.median_ms:.4g} ms" + (f", {self.tflops:.3g} TFLOP/s" if self.tflops else "")
                 if self.median_ms is not None else None)
        head = f"{self.bottleneck or 'no finding'} in {variant_id}'s latest stored profile (run {self.run_id}"
        head += f"; {where}" if where else ""
        head += f"; {speed})" if speed else ")"
        parts = [head + ":"]
        if self.kernel:
            share = f", {self.share_pct:.3g}% of the profiled time" if self.share_pct is not None else ""
            parts.append(f"In its main kernel ({self.kernel}{share}):")
        if self.title:
            parts.append(f"{self.title}.")
        if self.metrics:
            parts.append("Evidence: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in self.metrics.items()) + ".")
        return " ".join(parts)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def latest_run_of(variant_id: str, roots: list[Path]) -> Run | None:
    """The most recent complete run of `variant_id`'s own launcher under any of the store roots (and their
    examples/), a tuning candidate's run passed over; runs with an ncu profile are preferred, since only
    they name a bottleneck."""
    runs: dict[Path, Run] = {}
    for root in roots:
        for r in list_runs(root):
            if (r.manifest.get("variant") or {}).get("id") == variant_id and candidate_label(r.manifest) is None:
                runs[r.path.resolve()] = r
    if not runs:
        return None
    ordered = sorted(runs.values(), key=lambda r: (bool(r.manifest.get("findings_summary")),
                                                   r.manifest.get("created_utc", ""), r.id))
    return ordered[-1]


def _function(kernel: str) -> str:
    """'v7::bwd_kernel' of 'void v7::bwd_kernel<v7::BwdConfig<(int)128, ...>, __half>(const T2 *, ...)':
    the function's name without its template arguments and parameters."""
    name, depth = [], 0
    for ch in kernel.removeprefix("void "):
        if ch in "<(":
            if depth == 0 and ch == "(":
                break
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            name.append(ch)
    return "".join(name).strip() or kernel


def evidence_of(run: Run) -> Evidence:
    m = run.manifest
    summary = m.get("findings_summary") or {}
    timing = m.get("timing") or {}
    title, metrics, kernel, share_pct = None, {}, None, None
    try:
        findings = run.table("findings")
    except Exception:  # an unreadable table leaves the header without the metrics, never fails `lab new`
        findings = None
    if findings is not None and len(findings):
        main, share = run.main_kernel()
        of_main = findings[findings["kernel_index"] == main] if main is not None else findings.iloc[0:0]
        top = (of_main if len(of_main) else findings).sort_values(["kernel_index", "rank"]).iloc[0]
        title = str(top["title"])
        try:
            ev = json.loads(top["evidence"]) if isinstance(top["evidence"], str) else {}
        except json.JSONDecodeError:
            ev = {}
        metrics = {k: v for k, v in list(ev.items())[:MAX_EVIDENCE] if v is not None}
        summary = {**summary, "bottleneck": str(top["class"])}
        if findings["kernel_index"].nunique() > 1 and main is not None:
            kernel, share_pct = _function(str(top["kernel"])), share
    return Evidence(run_id=run.id, run_path=run.path, device=(m.get("device") or {}).get("name"),
                    problem=(m.get("problem") or {}).get("label"), median_ms=timing.get("median"),
                    tflops=timing.get("tflops"), bottleneck=summary.get("bottleneck"), title=title, metrics=metrics,
                    kernel=kernel, share_pct=share_pct)


def latest_evidence(variant) -> Evidence | None:
    """The newest stored profile of rung `variant`: in this store (the workspace's, or the current
    folder's), and for a built-in rung also in the current folder's and the lab checkout's shipped
    examples."""
    roots = [runs.store_root()]
    if variant.origin == "built-in":
        roots += [r for r in (runs.DEFAULT_ROOT, runs.shipped_root()) if r is not None]
    run = latest_run_of(variant.id, roots)
    return evidence_of(run) if run is not None else None

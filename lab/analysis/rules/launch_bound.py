"""launch-bound: a kernel as short as a launch. The launch overhead the run's timeline measured (else
a typical launch-to-launch gap) as a share of duration + overhead; from 10% on it is a finding.
"""

from __future__ import annotations

from lab.analysis.metrics import KernelFacts, rounded
from lab.analysis.rules.base import Context, Finding, Rule

LAUNCH_OVERHEAD_NS = 3000.0  # typical CUDA launch-to-launch gap; a kernel near it is launch-bound


class LaunchBound(Rule):
    cls = "launch-bound"

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        d = c.M.num("gpu__time_duration.sum")
        if d is None or d <= 0:
            return None
        measured = c.launch_overhead_ns is not None and c.launch_overhead_ns > 0
        overhead = float(c.launch_overhead_ns) if measured else LAUNCH_OVERHEAD_NS
        est = 100.0 * overhead / (d + overhead)
        if est < 10.0:
            return None
        how = "the launch overhead this run's timeline measured" if measured else "a typical launch's overhead"
        return self.finding(f"Short kernel: {d / 1000:.1f} us, near {how} ({overhead / 1000:.1f} us)", est,
                            {"gpu__time_duration.sum": d, "lab__launch_overhead_ns": rounded(overhead, 0),
                             "lab__launch_overhead_source": "timeline" if measured else "typical (assumed)"}, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        return ("The kernel is as short as a launch: fuse it with its neighbours, give each launch more work, or "
                "capture the sequence in a CUDA graph.")

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return []

"""divergence: active threads per warp instruction below 32 (smsp__thread_inst_executed_per_inst_executed);
the idle lanes are the gain. The SASS fallback counts predicated-on threads, so predicated bounds checks
lower it too: it must fall further before it is called divergence.
"""

from __future__ import annotations

from lab.analysis.lines import cite
from lab.analysis.metrics import KernelFacts, rounded, threads_per_instruction
from lab.analysis.rules.base import Context, Finding, Rule


class Divergence(Rule):
    cls = "divergence"
    explains = ("compute-bound",)

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        t, t_src = threads_per_instruction(c.M)
        exact = t_src == "smsp__thread_inst_executed_per_inst_executed.ratio"
        if t is None or not 0 < t < (30.0 if exact else 24.0):
            return None
        what = "active" if exact else "active and predicated on"
        return self.finding(f"Divergence: {t:.1f} of 32 threads {what} per warp instruction", 100.0 * (1.0 - t / 32.0),
                            {t_src: rounded(t)}, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        return ("Make branch conditions uniform across each warp (assign work per warp, not per lane), or predicate "
                "short branches." + ctx.rung("divergence"))

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return cite(k, "divergent_branches") or cite(k, "samples", skip_waits="issuer")

"""local-memory: thread-local traffic (spills, or a per-thread array indexed at run time) as a share
of global+local traffic; it costs its share of the busiest memory-side wait (the memory units, the
long-scoreboard and LG-throttle stalls, L2).
"""

from __future__ import annotations

from lab.analysis.lines import cite
from lab.analysis.metrics import KernelFacts, local_share, rounded
from lab.analysis.rules.base import Context, Finding, Rule
from lab.analysis.rules.uncoalesced_global import busy_memory_pct


def local_cost_pct(c: KernelFacts) -> float | None:
    """The share of runtime the kernel's local traffic costs (lab model), None without local traffic."""
    if c.local_share is None or c.local_share < 0.01:
        return None
    wait = sum(share for reason, _, share in c.stalls if reason in ("long_scoreboard", "lg_throttle"))
    return c.local_share * max(busy_memory_pct(c), wait,
                               c.M.num("lts__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0)


class LocalMemory(Rule):
    cls = "local-memory"
    explains = ("memory-bound", "latency-bound")

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        est = local_cost_pct(c)
        if est is None:
            return None
        ev = dict(local_share(c.M)[1], lab__local_share_pct=rounded(100 * c.local_share, 1))
        return self.finding(f"Local memory: {100 * c.local_share:.0f}% of global+local traffic is thread-local "
                            "(spills or a dynamically indexed array)", est, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        return ("Keep per-thread arrays in registers: index them only with compile-time constants (fully unrolled "
                "loops); for spills, fewer live registers or __launch_bounds__." + ctx.rung("local-memory"))

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return cite(k, "local_inst_executed")

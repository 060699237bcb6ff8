"""bank-conflicts: shared-memory wavefronts per ideal wavefront (n-way), for loads and stores. An
n-way conflict wastes 1 - 1/n of the shared-memory pipe's busy time.
"""

from __future__ import annotations

from lab.analysis.lines import cite
from lab.analysis.metrics import KernelFacts, bank_conflict_nway, rounded
from lab.analysis.rules.base import Context, Finding, Rule
from lab.analysis.rules.uncoalesced_global import busy_memory_pct


class BankConflicts(Rule):
    cls = "bank-conflicts"
    explains = ("memory-bound",)

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        shared_util = c.M.num("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed")
        found = []
        for what, nway, ev in bank_conflict_nway(c.M):
            if nway >= 1.5:
                util = shared_util if shared_util is not None else busy_memory_pct(c)
                est = (1.0 - 1.0 / nway) * util
                ev = dict(ev, lab__shared_bank_conflict_nway=rounded(nway, 1),
                          **{"l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed":
                             rounded(shared_util)})
                found.append(self.finding(f"{nway:.1f}-way shared-memory bank conflicts on {what}", est, ev, c, ctx))
        return found or None

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        return ("Pad each shared-memory row (e.g. +1 or +4 elements) or swizzle the layout so that the 32 lanes of a "
                "warp hit 32 different banks." + ctx.rung("bank-conflicts"))

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return cite(k, "excess_shared_wavefronts")

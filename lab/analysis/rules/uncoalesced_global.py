"""uncoalesced-global: global accesses whose sectors are partly wasted (SourceCounters' excessive
sectors; else bytes used per sector, which cannot tell a broadcast apart and so lowers the severity).
Wasted sectors cost time in proportion to the busy memory unit and to the global share of the
load/store traffic (a local-memory-heavy kernel ranks its local traffic first).
"""

from __future__ import annotations

from lab.analysis import overlap as ov
from lab.analysis.lines import cite
from lab.analysis.metrics import SECTOR_BYTES, KernelFacts, global_excess, rounded, warp_specialised
from lab.analysis.rules.base import Context, Finding, Rule


def busy_memory_pct(c: KernelFacts) -> float:
    """The busiest of L1TEX and the top memory unit, in percent of peak (0 when neither is known)."""
    l1 = c.M.num("l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_active")
    return max(v for v in (l1, c.tp["memory_pct"], 0.0) if v is not None)


class UncoalescedGlobal(Rule):
    cls = "uncoalesced-global"
    explains = ("memory-bound",)

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        share, ev, exact = global_excess(c.M)
        if share is None or share <= 1.0 / SECTOR_BYTES:
            return None
        est = share * busy_memory_pct(c) * (1.0 - (c.local_share or 0.0))
        ev = dict(ev, lab__global_excess_sector_pct=rounded(100 * share, 1),
                  lab__global_bytes_used_per_sector=rounded(SECTOR_BYTES * (1 - share)),
                  **{c.tp["memory_metric"] or "memory_pct_of_peak": rounded(c.tp["memory_pct"])})
        if not exact:   # bytes per sector cannot tell a broadcast apart: say so, and lower the severity
            ev["derived__memory_l2_theoretical_sectors_global_excessive"] = None
        if c.local_share:
            ev["lab__local_share_pct"] = rounded(100 * c.local_share, 1)
        how = "excessive" if exact else "unused (bytes per sector; SourceCounters would tell a broadcast apart)"
        return self.finding(f"Uncoalesced global accesses: {100 * share:.0f}% of their sectors {how}", est, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        if warp_specialised(c.M, c.device) and ov.present(c.overlap, ov.TMA_STORE):
            return (f"The output already leaves by TMA store ({c.overlap.shown[ov.TMA_STORE].evidence}): the scattered "
                    "accesses are the kernel's other global loads or stores: make each warp's "
                    "accesses to them contiguous, or stage them through shared memory too.")
        if warp_specialised(c.M, c.device):
            return ("In a warp-specialised wgmma kernel the scattered accesses are usually the output written straight "
                    "from the accumulators (each thread holds pairs of adjacent elements): stage the tile through "
                    "shared memory (stmatrix) and write it with a TMA store (cp.async.bulk.tensor), as the loads "
                    "already arrive.")
        wide = "16-byte vector accesses (float4, or 8 halves)" if ctx.ladder else "16-byte vector accesses"
        return ("Make the 32 lanes of a warp read consecutive addresses so that each 32-byte sector is used whole: "
                f"consecutive threads on consecutive {wide}." + ctx.rung("uncoalesced-global"))

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return cite(k, "excess_global_sectors")

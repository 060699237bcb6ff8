"""occupancy-limited: at most half the SM's warp slots can be resident (theoretical occupancy <= 50%)
while no unit is at its roof; the limiter (registers, shared memory, block size, blocks, barriers) says
which resource. Raising the limit helps only as far as the grid fills it. A warp-specialised wgmma
kernel runs few warps by design: there occupancy is context, ranked last with no estimate.
"""

from __future__ import annotations

from lab.analysis.metrics import KernelFacts, occupancy_limiter, rounded, warp_specialised
from lab.analysis.rules.base import BOUND_PCT, Context, Finding, Rule
from lab.analysis.rules.latency_bound import is_latency_bound


class OccupancyLimited(Rule):
    cls = "occupancy-limited"
    explains = ("latency-bound",)
    capped_by_busiest_unit = True
    nsight_results_have_lines = False

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        M = c.M
        theo = M.num("sm__maximum_warps_per_active_cycle_pct")
        if theo is None or theo > 50.0:
            return None
        by_design = warp_specialised(M, c.device)
        # A unit at its roof makes occupancy moot, except where the lab must still speak for a warp-
        # specialised kernel: else Nsight's TheoreticalOccupancy rule stands alone, with its estimate.
        if ctx.top >= BOUND_PCT and not by_design:
            return None
        lim, blocks, limits = occupancy_limiter(M)
        est = (100.0 - ctx.top) * c.busy_fraction * (1.0 - theo / 100.0) * c.fill
        ev = {"sm__maximum_warps_per_active_cycle_pct": rounded(theo),
              "sm__warps_active.avg.pct_of_peak_sustained_active":
                  rounded(M.num("sm__warps_active.avg.pct_of_peak_sustained_active")),
              **{k: v for k, v in limits.items()},
              "launch__shared_mem_per_block_dynamic": M.num("launch__shared_mem_per_block_dynamic"),
              "launch__registers_per_thread": M.num("launch__registers_per_thread")}
        if by_design:
            # A warp-specialised wgmma kernel hides latency with asynchronous depth (wgmma groups and TMA
            # stages in flight), not with resident warps: its warpgroups trade registers (setmaxnreg) and
            # few warps per SM is the design. The lab has no model of what more warps would gain there,
            # so occupancy is context, ranked last with no estimate; Nsight's stays in `estimates`.
            return self.finding(f"Occupancy {theo:.1f}% at most, limited by {lim or 'unknown'}: few warps by design "
                                "in a warp-specialised wgmma kernel", None, ev, c, ctx, rank=0.5)
        return self.finding(f"Occupancy {theo:.1f}% at most, limited by {lim or 'unknown'}", est, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        M = c.M
        lim, lim_blocks, _ = occupancy_limiter(M)
        now = f" (now {lim} allows {int(lim_blocks)} block(s) per SM)." if lim and lim_blocks is not None else "."
        if warp_specialised(M, c.device):
            # a kernel bound by a unit (or without throughputs to judge by) has no latency-bound step to point to
            see = " (see latency-bound)" if is_latency_bound(c, ctx) else ""
            return ("Few warps per SM is how a warp-specialised wgmma kernel is built (its consumer warpgroups take "
                    "the registers, setmaxnreg); more warps is not the lever: keep more work in flight per warpgroup "
                    f"instead{see}"
                    + (f"; now {lim} allows {int(lim_blocks)} block(s) per SM." if lim and lim_blocks is not None
                       else "."))
        return "Raise occupancy: " + {
            "registers": "fewer live registers per thread (__launch_bounds__, smaller per-thread tiles)",
            "shared memory": "less shared memory per block (smaller tiles, or reuse one buffer), or more warps per "
                             "block to share it",
            "warps per block (block size)": "a block size that fits the SM's warp slots",
            "blocks per SM": "bigger blocks (more warps per block)",
            "barriers": "fewer named barriers per block",
        }.get(lim or "", "find the limiting resource in the Occupancy section") + now

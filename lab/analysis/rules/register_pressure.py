"""register-pressure: a thread's live values outgrow its registers. The compiler spilled
(sass__inst_executed_register_spilling: the local loads and stores it added), or the kernel sits at the
per-thread maximum (launch__registers_per_thread = 255) where nothing more fits. A backward keeps the
dK and dV accumulators of its K/V tile in registers through the whole loop, beside the recomputed S/P
and dP tiles: FlashAttention-2's D=128 backward compiles at 255 registers and spills.

It costs two ways, and the larger is its gain (lab model): the spill traffic (the local-memory cost,
times the share of local instructions that are spills) and the warps registers keep from the SM (the
occupancy cost, where registers are the limiter; a warp-specialised wgmma kernel's few warps are its
design, not a cost). It is the cause behind the local-memory and occupancy-limited findings it explains.
"""

from __future__ import annotations

from lab.analysis.lines import cite
from lab.analysis.metrics import KernelFacts, occupancy_limiter, rounded, warp_specialised
from lab.analysis.rules.base import BOUND_PCT, Context, Finding, Rule, is_backward
from lab.analysis.rules.local_memory import local_cost_pct

MAX_REGISTERS_PER_THREAD = 255   # the architectural limit since Kepler (sm_35), Hopper included


class RegisterPressure(Rule):
    cls = "register-pressure"
    explains = ("local-memory", "occupancy-limited")

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        M = c.M
        regs = M.num("launch__registers_per_thread")
        spills = M.num("sass__inst_executed_register_spilling")
        if not spills:   # 255 registers without a spill is a design (cuBLAS tiles), not pressure
            return None
        local_inst = sum(v for v in (M.num("sass__inst_executed_local_loads"), M.num("sass__inst_executed_local_stores"))
                         if v is not None)
        spill_part = min(1.0, spills / local_inst) if (spills and local_inst) else (1.0 if spills else 0.0)
        spill_cost = (local_cost_pct(c) or 0.0) * spill_part
        lim, blocks, limits = occupancy_limiter(M)
        theo = M.num("sm__maximum_warps_per_active_cycle_pct")
        occ_cost = 0.0
        if lim == "registers" and theo is not None and theo <= 50.0 and ctx.top < BOUND_PCT \
                and not warp_specialised(M, c.device):
            occ_cost = (100.0 - ctx.top) * c.busy_fraction * (1.0 - theo / 100.0) * c.fill
        est = max(spill_cost, occ_cost)
        ev = {"launch__registers_per_thread": regs,
              "sass__inst_executed_register_spilling": spills,
              "sass__inst_executed_register_spilling_mem_local": M.num("sass__inst_executed_register_spilling_mem_local"),
              "sass__inst_executed_local_loads": M.num("sass__inst_executed_local_loads"),
              "sass__inst_executed_local_stores": M.num("sass__inst_executed_local_stores"),
              "launch__occupancy_limit_registers": M.num("launch__occupancy_limit_registers"),
              "sm__maximum_warps_per_active_cycle_pct": rounded(theo),
              "lab__spill_cost_pct": rounded(spill_cost), "lab__register_occupancy_cost_pct": rounded(occ_cost)}
        parts = [f"{int(regs)} registers per thread" + (" (the maximum)" if regs >= MAX_REGISTERS_PER_THREAD else "")
                 if regs is not None else None,
                 f"{int(spills):,} spill instructions" if spills else "no spills yet",
                 f"registers limit occupancy to {theo:.1f}%" if occ_cost and theo is not None else None]
        return self.finding("Register pressure: " + ", ".join(p for p in parts if p), est, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        if is_backward(c, ctx.mode):
            # a kernel already on wgmma in warpgroups that trade registers (USETMAXREG) does not hear it again
            ws = warp_specialised(c.M, c.device)
            return ("The dK/dV accumulators of the K/V tile live in registers through the whole Q loop, beside the "
                    "recomputed S/P and dP tiles: give each K/V tile more warps (each holding a slice of dK/dV), a "
                    "smaller K/V block at head dim 128, " + (
                        "or keep Q/dO tiles in shared memory rather than registers (already on wgmma in consumer "
                        "warpgroups that take registers from the producer: HGMMA and USETMAXREG in the SASS)."
                        if ws else
                        "keep Q/dO tiles in shared memory rather than registers, or on Hopper accumulate with wgmma "
                        "in consumer warpgroups that take registers from the producer (setmaxnreg)."))
        return ("The compiler ran out of registers: fewer live values per thread (smaller per-thread tiles, recompute "
                "cheap values instead of keeping them, fewer unrolled iterations in flight), or spread the work over "
                "more threads; check __launch_bounds__ is not forcing a lower register cap.")

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return cite(k, "local_inst_executed")

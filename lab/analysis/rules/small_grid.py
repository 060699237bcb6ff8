"""small-grid: too little parallelism. The warps a launch puts in flight against the resident warps
its occupancy allows and the device's warp slots: latency is hidden by warps in flight, so the gain is
the share of resident warps the grid leaves empty (or of SMs left idle) times the distance to the
nearest roof. Without the warp counts: CTAs against SMs and the share of one full wave.
"""

from __future__ import annotations

from lab.analysis.metrics import KernelFacts, rounded, warps_in_flight
from lab.analysis.rules.base import Context, Finding, Rule


class SmallGrid(Rule):
    cls = "small-grid"
    explains = ("latency-bound",)
    capped_by_busiest_unit = True
    nsight_results_have_lines = False

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        M, top = c.M, ctx.top
        w = warps_in_flight(M)
        if w is not None and w["grid_limits"]:
            idle_sms = 100.0 * (1.0 - c.ctas / c.sms) if (c.ctas and c.sms and c.ctas < c.sms) else 0.0
            unfilled = (1.0 - w["launched"] / w["resident_limit"]) * (100.0 - top)
            est = max(idle_sms, unfilled)
            ev = {"launch__grid_size": int(c.ctas), "launch__block_size": M.num("launch__block_size"),
                  "device__attribute_multiprocessor_count": int(c.sms),
                  "device__attribute_max_warps_per_multiprocessor": M.num("device__attribute_max_warps_per_multiprocessor"),
                  "launch__waves_per_multiprocessor": rounded(c.waves, 3),
                  "sm__warps_active.avg.pct_of_peak_sustained_active":
                      rounded(M.num("sm__warps_active.avg.pct_of_peak_sustained_active")),
                  "lab__warps_in_flight": int(w["in_flight"]), "lab__warp_slots": int(w["slots"]),
                  "lab__warps_in_flight_pct_of_slots": rounded(100 * w["share_of_slots"], 2)}
            wpb = int(w["warps_per_cta"])
            title = (f"Too little parallelism: {int(w['launched']):,} warps in flight ({int(c.ctas):,} CTAs x {wpb} "
                     f"warp{'s' if wpb > 1 else ''}) for the {int(w['slots']):,} warp slots of {int(c.sms)} SMs "
                     f"({100 * w['share_of_slots']:.1f}%)")
            return self.finding(title, est, ev, c, ctx) if est >= 1.0 else None
        if w is None and c.ctas is not None and c.sms and (c.ctas < c.sms or c.fill < 1.0):
            idle_sms = 100.0 * (1.0 - c.ctas / c.sms) if c.ctas < c.sms else 0.0
            est = max(idle_sms, (1.0 - c.fill) * (100.0 - top))
            ev = {"launch__grid_size": int(c.ctas), "device__attribute_multiprocessor_count": int(c.sms),
                  "launch__waves_per_multiprocessor": rounded(c.waves, 3), "launch__block_size": M.num("launch__block_size")}
            if est >= 1.0:
                return self.finding(f"Small grid: {int(c.ctas)} CTAs on {int(c.sms)} SMs", est, ev, c, ctx)
        return None

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        p = c.problem
        bh = p["batch"] * p["heads"] if p and "batch" in p and "heads" in p else None
        if bh is not None and c.ctas is not None and int(c.ctas) == int(bh):
            return (f"The grid of B*H = {int(bh)} CTAs leaves the SMs' warp slots empty: split the query dimension "
                    "across CTAs (one CTA per query tile per head) and give each CTA several warps."
                    + ctx.rung("small-grid"))
        if ctx.ladder:
            return ("Put more warps in flight: split the query dimension across CTAs and give each CTA several warps."
                    + ctx.rung("small-grid"))
        return ("Put more warps in flight: launch at least as many CTAs as SMs (better several waves) with several "
                "warps each, splitting independent work across them.")

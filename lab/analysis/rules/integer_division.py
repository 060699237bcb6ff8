"""integer-division: a material share of the warp samples on source lines that divide integers by a value known only
at run time (lab.analysis.lines.divides_at_run_time: ptxas seeds the quotient with the divisor's float reciprocal,
I2F.RP and MUFU.RCP, then refines it with IMAD.HI and corrections, about twenty dependent instructions a quotient and
remainder). Index arithmetic of this kind (a tile scheduler mapping a list position to a head and a block, a GQA
head's K/V row) runs at the start of the work it indexes, so its latency is paid before the work can issue. Found on
v9 (step 22): 2.9% of the samples at 16,32,1024,64 causal fp16 in the consumers' tile arithmetic (run
20261128-180404); handing the consumers the quotient ran 1.029x. The estimate is the lines' share of the samples: the
warp time they take, not a measured gain.
"""

from __future__ import annotations

from lab.analysis.lines import cite, division_lines
from lab.analysis.metrics import KernelFacts, rounded
from lab.analysis.rules.base import Context, Finding, Rule

MATERIAL_PCT = 1.5   # of the warp samples: below it the division is not where the time goes


def division_pct(c: KernelFacts) -> float | None:
    """The share (percent) of the kernel's warp samples on its lines that divide by run-time values; None without
    per-line samples."""
    s = c.source or {}
    total = s.get("total_samples") or 0.0
    if total <= 0 or s.get("integer_division_samples") is None:
        return None
    return 100.0 * s["integer_division_samples"] / total


class IntegerDivision(Rule):
    cls = "integer-division"

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        pct = division_pct(c)
        if pct is None or pct < MATERIAL_PCT:
            return None
        n = c.source["integer_division_lines"]
        return self.finding(f"Integer division by run-time values: {pct:.1f}% of the warp samples on the {n} "
                            f"line{'s that divide' if n != 1 else ' that divides'}", pct,
                            {"lab__integer_division_samples_pct": rounded(pct, 2), "lab__integer_division_lines": n},
                            c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        return ("Divide once, off the path it delays: hoist the division out of the loop or the per-tile path, hand "
                "the quotient to the threads that need it (v9 step 22: the producer hands the consumers their tile), "
                "precompute the divisor's magic multiplier on the host (a fast divmod, as CUTLASS's FastDivmod), or "
                "make the divisor a compile-time constant." + ctx.rung("integer-division"))

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return cite(division_lines(k), "samples", skip_waits="issuer")

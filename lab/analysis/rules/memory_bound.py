"""memory-bound: a memory unit at or above 60% of its peak (the SpeedOfLight breakdowns), and, for the
lab's attention problem, DRAM bytes against the minimum for Q, K, V and O.

A saturated unit ranks by its utilization and shows no gain (being at the roof is not a gain); with
the problem's minimum bytes, moving only the minimum is the gain, carried by the same finding.
"""

from __future__ import annotations

from lab.analysis.metrics import KernelFacts, rounded, sum_or_none, unit_name
from lab.analysis.rules.base import BOUND_PCT, Context, Finding, Rule, top_stall_lines


def _rule(c: KernelFacts) -> str:
    return c.problem.get("min_bytes_rule") or "Q, K, V read once, O written once"


class MemoryBound(Rule):
    cls = "memory-bound"

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        M, tp = c.M, c.tp
        mpct = tp["memory_pct"]
        bound = None
        if mpct is not None and mpct >= BOUND_PCT:
            unit = unit_name(tp["memory_metric"])
            ev = {tp["memory_metric"]: rounded(mpct),
                  "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed":
                      rounded(M.num("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"))}
            bound = self.finding(f"Memory-bound: {unit} at {mpct:.3g}% of its peak", None, ev, c, ctx, rank=mpct)
        excess = self._dram_excess(c, ctx)
        if excess is None:
            return bound
        if bound is None:
            return excess
        # one finding: the saturated unit, with the gain of moving only the minimum
        bound.title += f"; {excess.title[0].lower()}{excess.title[1:]}"
        bound.est_speedup_pct = excess.est_speedup_pct
        bound.rank = max(bound.rank, excess.rank)
        bound.evidence.update(excess.evidence)
        return bound

    def _dram_excess(self, c: KernelFacts, ctx: Context) -> Finding | None:
        """DRAM bytes against the minimum of the run's mode (the lab's problem only; lab.measure.rates)."""
        if not (c.problem and c.problem.get("min_bytes")):
            return None
        M = c.M
        rd, wr = M.num("dram__bytes_read.sum"), M.num("dram__bytes_write.sum")
        moved = sum_or_none(rd, wr)
        dram_pct = M.num("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                         "dram__throughput.avg.pct_of_peak_sustained_elapsed")
        if not moved or dram_pct is None:
            return None
        ratio = moved / float(c.problem["min_bytes"])
        if ratio <= 1.5 or dram_pct < 30.0:
            return None
        est = (1.0 - 1.0 / ratio) * dram_pct
        ev = {"dram__bytes_read.sum": rd, "dram__bytes_write.sum": wr,
              "lab__min_bytes": c.problem["min_bytes"], "lab__dram_bytes_x_min": rounded(ratio),
              "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": rounded(dram_pct)}
        return self.finding(f"DRAM traffic is {ratio:.1f}x the minimum ({_rule(c)})", est, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        p = c.problem
        mem_unit = unit_name(c.tp["memory_metric"] or "")
        if mem_unit == "DRAM":
            return ("DRAM bandwidth is the limit: only moving fewer bytes helps "
                    + ("(reuse K/V tiles from shared memory across more queries, keep intermediates on chip)"
                       + (f"; compare the bytes moved with the minimum ({_rule(c)})" if p and p.get("min_bytes") else "")
                       if ctx.ladder else "(fuse with the kernels before and after it, narrower data types, reuse on chip)")
                    + ".")
        if mem_unit.startswith("L1TEX") or mem_unit in ("LSU pipe", "MIO (shared memory / special function queue)"):
            return (f"{mem_unit} is the limit: fewer, wider memory instructions (16-byte vector accesses) and more "
                    "reuse from registers.")
        return f"{mem_unit} is the limit: improve locality so fewer sectors reach it (tiling, reuse from shared memory)."

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return top_stall_lines(k, c)


"""reduction-traffic: global reductions and atomics (a backward's dQ, accumulated in fp32 across the
K/V tiles that each add a part of it: REDG/ATOMG instructions, or bulk reductions from shared memory,
UTMAREDG/UBLKRED) and what they cost in L2, where each one is a read-modify-write at the slice that owns
the address and reductions to one address serialize (contention).

Evidence, in Nsight's names: the sectors L2 served for reductions and atomics
(lts__t_sectors_srcunit_tex_op_red.sum + lts__t_sectors_srcunit_tex_op_atom.sum) against all its
sectors (lts__t_sectors.sum), L2 busy (lts__throughput) and its atomic unit busy
(lts__d_atomic_input_cycles_active), the reduction instructions (smsp__inst_executed_op_global_red.sum,
the SASS counts per opcode), and the stalls reductions cause (lg_throttle: the load/store queue full;
drain: a warp's exit waiting for its reductions to be acknowledged).

Gain (lab model): the reductions' share of L2's sectors times L2 busy, the L2 time that accumulating on
chip and reducing once would free. From 1% of L2's sectors on it is a finding.
"""

from __future__ import annotations

from lab.analysis.lines import cite
from lab.analysis.metrics import KernelFacts, opcode_counts, rounded
from lab.analysis.overlap import BULK_REDUCTION_OPS as BULK_OPS
from lab.analysis.overlap import ELEMENT_REDUCTION_OPS as ELEMENT_OPS
from lab.analysis.rules.base import Context, Finding, Rule, is_backward

MIN_SHARE = 0.01   # reductions below 1% of L2's sectors (a semaphore, a counter) are no traffic to speak of
# SASS opcodes of global reductions and atomics (lab.analysis.overlap, which reads how a backward adds dQ):
# per element (REDG, ATOMG; RED, ATOM on older architectures) and in bulk from shared memory (UBLKRED,
# UTMAREDG: cp.reduce.async.bulk[.tensor])


def reduction_sectors(c: KernelFacts) -> tuple[float | None, float | None]:
    """(sectors L2 served for global reductions and atomics, all sectors L2 served), None where unknown."""
    red = c.M.num("lts__t_sectors_srcunit_tex_op_red.sum")
    atom = c.M.num("lts__t_sectors_srcunit_tex_op_atom.sum")
    if red is None and atom is None:
        return None, c.M.num("lts__t_sectors.sum")
    return (red or 0.0) + (atom or 0.0), c.M.num("lts__t_sectors.sum")


class ReductionTraffic(Rule):
    cls = "reduction-traffic"
    explains = ("memory-bound",)

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        M = c.M
        red, total = reduction_sectors(c)
        if not red or not total or red / total < MIN_SHARE:
            return None
        share = red / total
        lts = M.num("lts__throughput.avg.pct_of_peak_sustained_elapsed")
        atomic_unit = M.num("lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed")
        est = share * (lts or 0.0)
        ops = opcode_counts(M)
        element = {op: ops[op] for op in ELEMENT_OPS if ops.get(op)}
        bulk = {op: ops[op] for op in BULK_OPS if ops.get(op)}
        ev = {"lts__t_sectors_srcunit_tex_op_red.sum": M.num("lts__t_sectors_srcunit_tex_op_red.sum"),
              "lts__t_sectors_srcunit_tex_op_atom.sum": M.num("lts__t_sectors_srcunit_tex_op_atom.sum"),
              "lts__t_sectors.sum": total, "lab__reduction_share_of_l2_sectors_pct": rounded(100 * share, 1),
              "lts__throughput.avg.pct_of_peak_sustained_elapsed": rounded(lts),
              "lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed": rounded(atomic_unit),
              "smsp__inst_executed_op_global_red.sum": M.num("smsp__inst_executed_op_global_red.sum"),
              **{f"sass__inst_executed_per_opcode[{op}]": v for op, v in {**element, **bulk}.items()}}
        for reason, _, s in c.stalls:
            if reason in ("lg_throttle", "drain"):
                ev[f"stall:{reason} (% of stalls)"] = rounded(s, 1)
        what = ", ".join(f"{int(v):,} {op}" for op, v in {**element, **bulk}.items()) or "global reductions"
        unit = f", its atomic unit {atomic_unit:.0f}% busy" if atomic_unit is not None else ""
        title = (f"Reduction traffic: {what} make {100 * share:.0f}% of L2's sectors (L2 {lts or 0:.0f}% busy{unit})")
        return self.finding(title, est, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        ops = opcode_counts(c.M)
        bulk = any(ops.get(op) for op in BULK_OPS)
        if is_backward(c, ctx.mode):
            if bulk:
                return ("dQ is already reduced in bulk from shared memory (TMA reductions, FlashAttention-3's path): "
                        "fewer reductions per dQ element is what remains: more K/V rows per CTA (each reduction then "
                        "carries more of the sum), or a deterministic dQ pass for long sequences.")
            return ("dQ is accumulated with one global reduction per element per K/V tile: reduce less often and in "
                    "bulk: stage the tile's dQ in shared memory and add it with one TMA bulk reduction "
                    "(cp.reduce.async.bulk.tensor, as FlashAttention-3 does), take more K/V rows per CTA so each "
                    "reduction carries more of the sum, or compute dQ in its own Q-block-outer pass without atomics "
                    "(which recomputes P once more).")
        return ("Global reductions/atomics are a large part of L2's work: combine values on chip first (warp shuffles, "
                "a block-level sum in shared memory) and reduce once per block, in bulk where the hardware has it "
                "(cp.reduce.async.bulk); spread contended addresses.")

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return cite(k, "inst_executed", opcodes=ELEMENT_OPS + BULK_OPS)

"""instruction-fetch: warps wait for their next instruction to be fetched (Nsight's Stall No Instruction,
smsp__pcsamp_warps_issue_stalled_no_instructions: waiting to be selected to fetch, or on an
instruction-cache miss) in a material share of the PC samples. The hot code is more than the SM's
instruction cache holds at once: copies of a hot loop specialised per case, large unrolled bodies, and in a
warp-specialised kernel the different code paths its warpgroups and CTAs on one SM run at the same time.

Evidence, in Nsight's names: the stall's share of the PC samples (and of the stalls), the function's SASS
(its instructions and bytes, and the hot part that executes 90% of the warp instructions:
lab.analysis.code), the lines where the stall is sampled with the number of places each was compiled into,
and what it costs the issue rate (instructions executed per active cycle, elapsed cycles).

Gain (lab model): the stall's share of the PC samples, an upper bound (a kernel whose hot code fits still
samples the state now and then: 1.4% in v9's default D=64 causal kernel, where its HalfLastKeyTile
candidate's 15.9% came with 16.9% more time for 1.6% fewer instructions executed).

It is a cause behind latency-bound, and its fix comes before that finding's steps whatever the two gains
(`precedes_its_symptoms`): warps without an instruction gain nothing from more work in flight, and the
latency steps (a second consumer path in ping-pong, deeper pipelines) add code of their own.
"""

from __future__ import annotations

from lab.analysis.code import HOT_SHARE, copies
from lab.analysis.lines import cite, executed_pcs
from lab.analysis.metrics import KernelFacts, rounded, sampled_share, warp_specialised
from lab.analysis.rules.base import Context, Finding, Rule

REASON = "no_instructions"   # lab.analysis.metrics.STALL_REASONS' name of Stall No Instruction
# Material from this share of the PC samples on. Every kernel of the lab's fixtures and shipped runs
# samples it at 7.6% or less: the lab's own rungs at 0.2-3.8% (v9's default D=64 causal kernel 1.4%),
# cuDNN's and FlashAttention-2's kernels under 2%, and the most, PyTorch's softmax_warp_forward at 7.6%
# (a large unrolled body, 2,783 SASS instructions, whose waits on its loads are most of its stalls). v9's
# HalfLastKeyTile candidate, whose extra copies of the key loop compete for the cache, samples it at 15.9%
# (23% of its stalls): 10% leaves every healthy kernel alone with room to spare, and takes that one.
MATERIAL_PCT = 10.0
# A launch's first pass through its code misses by necessity, a visible share of a kernel of a few
# microseconds (Nsight's guide calls the stall typical of very short kernels; the fixtures' 5-10 us
# elementwise kernels sample it at 2-7%) that no change to the code's shape removes.
MIN_DURATION_NS = 10_000.0


def fetch_share(c: KernelFacts) -> tuple[float | None, dict]:
    """The share (%) of the PC samples in which warps waited for an instruction, with its evidence."""
    return sampled_share(c.M, REASON)


def is_fetch_bound(c: KernelFacts) -> bool:
    """The rule's test, which latency-bound's advice asks before its own steps."""
    pct, _ = fetch_share(c)
    duration = c.M.num("gpu__time_duration.sum")
    return pct is not None and pct >= MATERIAL_PCT and (duration is None or duration >= MIN_DURATION_NS)


class InstructionFetch(Rule):
    cls = "instruction-fetch"
    explains = ("latency-bound",)
    capped_by_busiest_unit = True    # fetching leaves the busiest unit's work as it is
    precedes_its_symptoms = True

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        if not is_fetch_bound(c):
            return None
        M = c.M
        pct, counts = fetch_share(c)
        of_stalls = next((share for reason, _, share in c.stalls if reason == REASON), None)
        size = (c.source or {}).get("code") or {}
        ev = {"lab__no_instruction_pct_of_samples": rounded(pct, 1)}
        if of_stalls is not None:
            ev[f"stall:{REASON} (% of stalls)"] = rounded(of_stalls, 1)
        if size:   # the SASS, where the report carries SourceCounters' per-PC counters
            ev.update({"lab__sass_instructions": size["instructions"], "lab__sass_bytes": size["bytes"],
                       "lab__hot_sass_instructions": size["hot_instructions"]})
        # what it costs: the instructions issued per active cycle, the work and the elapsed cycles
        ev.update({"sm__inst_executed.avg.per_cycle_active": rounded(M.num("sm__inst_executed.avg.per_cycle_active")),
                   "lab__hot_sass_bytes": size.get("hot_bytes"), **counts,
                   "smsp__inst_executed.sum": M.num("smsp__inst_executed.sum"),
                   "gpc__cycles_elapsed.max": M.num("gpc__cycles_elapsed.max")})
        ev = {k: v for k, v in ev.items() if v is not None}   # what a report lacks is left out, not null
        code = (f"; {size['instructions']:,} SASS instructions ({size['bytes'] / 1024:.0f} KiB), "
                f"{size['hot_instructions']:,} of them run {100 * HOT_SHARE:.0f}% of the work" if size else "")
        return self.finding(f"Instruction fetch: warps wait for an instruction in {pct:.1f}% of the PC samples "
                            f"(Stall No Instruction){code}", pct, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        steps = ("Warps wait for their next instruction: the hot code is more than the SM's instruction cache holds "
                 "at once. Keep fewer copies of the hot loops: code specialised per case (a masked and an unmasked "
                 "tile, a last tile handled apart, a template instance per option) is a copy of the loop for each, "
                 "and every copy that the warps on one SM run at the same time competes for the cache. Keep one hot "
                 "loop and peel only the step that differs (a predicate or a short branch inside the loop, not a "
                 "second loop), and unroll less (a smaller unroll factor; #pragma unroll 1 on the outer loops).")
        if warp_specialised(c.M, c.device):
            steps += (" The kernel is warp-specialised (HGMMA, USETMAXREG): its warpgroups and CTAs on one SM that run "
                      "different code paths at once multiply the hot code; keep the consumers of every tile on the "
                      "same loop, so that the warpgroups and CTAs of an SM share their instructions.")
        return steps + " Compare the SASS size before and after (cuobjdump -sass, or this finding's evidence)."

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        step = (k.get("code") or {}).get("bytes_per_instruction") or 16
        got = cite(k, "samples", reason=REASON, skip_waits="issuer")
        for line in got:
            n = copies(executed_pcs(k, line), step)
            if n:
                line["copies"] = n   # the places of the SASS its executed instructions sit in
        return got

    def name_lines(self, f: Finding) -> str:
        """'Lines: a.cuh:405, 424; each compiled into 6 places of the SASS ...' where a line has copies."""
        head = super().name_lines(f)
        n = [line.get("copies") or 1 for line in f.lines]
        if max(n) < 2:
            return head
        places = f"each compiled into {n[0]} places" if len(set(n)) == 1 else \
            f"compiled into {', '.join(map(str, n[:-1]))} and {n[-1]} places"
        return head.removesuffix(".") + f"; {places} of the SASS (a copy of the code around them in each)."

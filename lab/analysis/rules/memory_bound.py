"""memory-bound: a memory unit at or above 60% of its peak (the SpeedOfLight breakdowns), and, for the
lab's attention problem, DRAM bytes against the minimum for Q, K, V and O.

A saturated unit ranks by its utilization and shows no gain (being at the roof is not a gain); with
the problem's minimum bytes, moving only the minimum is the gain, carried by the same finding.

Its lines are the ones that make the unit's traffic, from SourceCounters' per-instruction counters,
never the lines where warps wait: L1TEX's data pipe by the shared-memory wavefronts of each line
(`memory_l1_wavefronts_shared`, split into wgmma operand reads, loads and stores: on Hopper a wgmma
reads its shared operands through this pipe) or, where global accesses fill it, by their sectors;
L2 and DRAM by the global sectors of each line, or the lines that issue TMA and bulk copies where
those move the bytes (SourceCounters does not count a copy engine's bytes per instruction). Only
without those counters do the top stall lines stand in, and never an mbarrier wait: a warp waiting
for a pipeline stage is not the traffic.
"""

from __future__ import annotations

from lab.analysis.lines import ISSUE_OPCODES, cite, where
from lab.analysis.metrics import (SHARED_KIND_NAMES, KernelFacts, rounded, shared_wavefront_split, sum_or_none,
                                  unit_name)
from lab.analysis.rules.base import BOUND_PCT, Context, Finding, Rule, top_stall_lines

KIND_SHARE_PCT = 5.0       # a kind of shared wavefront named in the title and cited: at least this share
LINES_PER_KIND = 3
# what removes LSU shared wavefronts of each kind (the bytes themselves, conflicts aside)
FIXES = {"load": "keep in registers what a thread reads again (a larger warp tile reuses each loaded fragment for "
                 "more products) and read a value once per thread rather than once per use",
         "store": "store to shared memory only what another warp or the async proxy must read",
         "atomic": "combine values in registers before a shared atomic"}
LSU_GLOBAL_SHARE = 0.5     # LSU global accesses count as the L2's traffic when their sectors are this share of it


def _rule(c: KernelFacts) -> str:
    return c.problem.get("min_bytes_rule") or "Q, K, V read once, O written once"


def _l1_unit(unit: str) -> bool:
    return unit.startswith("L1TEX") or unit in ("LSU pipe", "MIO (shared memory / special function queue)")


def _shared_split(c: KernelFacts) -> dict | None:
    """The shared-memory wavefront split where shared memory fills most of L1TEX's data pipe, else None."""
    split = shared_wavefront_split(c)
    if not split or not split["kinds"]:
        return None
    if split["shared_pct_of_pipe"] is not None and split["shared_pct_of_pipe"] < 50.0:
        return None
    return split


def _kinds_text(split: dict) -> str:
    return ", ".join(f"{v:.0f}% {SHARED_KIND_NAMES[k]}" for k, v in split["kinds"].items() if v >= KIND_SHARE_PCT)


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
            title = f"Memory-bound: {unit} at {mpct:.3g}% of its peak"
            split = _shared_split(c) if _l1_unit(unit) else None
            if split:
                ev["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"] = rounded(
                    M.num("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"))
                ev["memory_l1_wavefronts_shared"] = split["wavefronts"]
                ev["derived__memory_l1_wavefronts_shared_excessive"] = (c.source or {}).get("excess_shared_wavefronts")
                for k, v in split["kinds"].items():
                    ev[f"lab__shared_wavefronts_{k}_pct"] = rounded(v, 1)
                for reason, _, share in c.stalls:   # the LSU's shared accesses queueing behind the busy pipe
                    if reason in ("mio_throttle", "short_scoreboard"):
                        ev[f"stall:{reason} (% of stalls)"] = rounded(share, 1)
                title += f" (shared-memory wavefronts: {_kinds_text(split)})"
            bound = self.finding(title, None, ev, c, ctx, rank=mpct)
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
        if _l1_unit(mem_unit):
            split = _shared_split(c)
            if split:
                return self._shared_advice(mem_unit, split)
            return (f"{mem_unit} is the limit: fewer, wider memory instructions (16-byte vector accesses) and more "
                    "reuse from registers.")
        return f"{mem_unit} is the limit: improve locality so fewer sectors reach it (tiling, reuse from shared memory)."

    @staticmethod
    def _shared_advice(unit: str, split: dict) -> str:
        """L1TEX's data pipe filled by shared-memory wavefronts: what makes them, and what removes them."""
        kinds = split["kinds"]
        of_pipe = (f"{split['shared_pct_of_pipe']:.0f}% of its wavefronts are shared-memory accesses"
                   if split["shared_pct_of_pipe"] is not None else "its wavefronts are shared-memory accesses")
        x = split["excessive_pct"]
        if x >= 10.0:
            waste = f"; {x:.0f}% of them are excessive (bank conflicts: see bank-conflicts)"
        elif x >= 0.5:
            waste = (f"; {x:.0f}% of them are excessive (bank conflicts), the rest are the bytes themselves, which "
                     "wider accesses do not reduce: only fewer bytes through shared memory do")
        else:
            waste = ("; none is excessive (no bank conflicts), so wider accesses remove none: only fewer bytes "
                     "through shared memory do")
        out = [f"{unit}'s data pipe is the limit: {of_pipe}{waste}."]
        wg = kinds.get("wgmma", 0.0)
        if wg >= KIND_SHARE_PCT:
            out.append(f"{wg:.0f}% are wgmma operand reads (HGMMA reading its operand tiles from shared memory, the "
                       "tensor pipe's own feed, which it cannot outrun): fewer shared-memory bytes per FLOP, by an "
                       "operand already in registers taken as wgmma's register A operand (RS) instead of from shared "
                       "memory, and a wider N per wgmma so that each A tile read serves more columns.")
        lsu = [(k, v) for k, v in kinds.items() if k != "wgmma" and v >= KIND_SHARE_PCT]
        if lsu:
            what = ", ".join(f"{v:.0f}% {SHARED_KIND_NAMES[k]}" for k, v in lsu)
            fixes = [FIXES[k] for k, _ in lsu if k in FIXES]
            out.append(f"The LSU's own shared accesses ({what}) "
                       + ("share the pipe with those reads" if wg >= KIND_SHARE_PCT else "are the traffic")
                       + (": " + "; ".join(fixes) if fixes else "") + ".")
        return " ".join(out)

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        unit = unit_name(c.tp["memory_metric"] or "")
        src = c.source or {}
        if f.title.startswith("Memory-bound") and _l1_unit(unit):
            split = _shared_split(c)
            if split:   # the lines that make the wavefronts, kind by kind (wgmma operand reads, stores, loads)
                out = []
                for kind, share in split["kinds"].items():
                    if share >= KIND_SHARE_PCT:   # a line that makes a few % of its kind's wavefronts is no cause
                        floor = KIND_SHARE_PCT / 100.0 * split["wavefronts"] * share / 100.0
                        got = cite(k, "shared_wavefronts", n=LINES_PER_KIND, kind=kind)
                        out += got[:1] + [x for x in got[1:] if x["value"] >= floor]
                return out
        if c.local_share is not None and c.local_share >= 0.5:   # thread-local traffic: its LDL/STL
            got = cite(k, "local_inst_executed")
            if got:
                return got
        lsu = src.get("global_sectors") or 0.0
        l2 = sum(c.M.num(f"lts__t_sectors_srcunit_tex_op_{op}.sum") or 0.0 for op in ("read", "write", "red", "atom"))
        if lsu and (not l2 or lsu >= LSU_GLOBAL_SHARE * l2):
            return cite(k, "global_sectors")
        issued = cite(k, "inst_executed", opcodes=ISSUE_OPCODES)
        if issued:   # the bytes move by TMA and bulk copies: the lines that issue them
            return issued
        return top_stall_lines(k, c, skip_waits="mbarrier")

    def name_lines(self, f: Finding) -> str:
        if not any(x.get("kind") for x in f.lines):
            return super().name_lines(f)
        parts = []
        for kind in dict.fromkeys(x["kind"] for x in f.lines):
            cited = [x for x in f.lines if x.get("kind") == kind]
            own = where([x for x in cited if not x.get("called_from")])
            helpers = [f"{x['file']}:{x['line']} (inlined from {where(x['called_from'])})"
                       for x in cited if x.get("called_from")]
            parts.append(f"{SHARED_KIND_NAMES[kind]} " + "; ".join(([own] if own else []) + helpers))
        return "Lines: " + " | ".join(parts) + "."

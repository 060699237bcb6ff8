"""latency-bound: far from every roof (compute and memory both below 60% of peak): warps wait, and
the top stall reasons say on what. The gain is the distance to the nearest roof, on the SMs with work.
"""

from __future__ import annotations

from lab.analysis import overlap as ov
from lab.analysis.metrics import KernelFacts, hopper_async, rounded, tensor_path
from lab.analysis.rules.base import BOUND_PCT, Context, Finding, Rule, top_stall_lines
from lab.analysis.rules.instruction_fetch import fetch_share, is_fetch_bound


# below this share of the samples, the consumers' waits for loaded tiles are not what holds a kernel back
DATA_WAIT_PCT = 5.0

# The next step by the top stall reason, keyed by lab.analysis.metrics.STALL_REASONS' names (the one
# spelling the analysis produces, whichever family the report has); long_scoreboard's step depends on the
# kernel (LatencyBound.advice).
STALL_STEPS = {
    "barrier": "Warps wait at __syncthreads: fewer barriers per tile, or more independent warps per SM.",
    "wait": "Dependent instruction chains (fixed-latency waits): more instruction-level parallelism (unroll, "
            "independent accumulators), or more warps per SM to interleave.",
    "short_scoreboard": "Waits on shared memory or special functions (short scoreboard): fewer shared loads "
                        "per FLOP (reuse values from registers); check bank conflicts.",
    "mio_throttle": "The shared-memory/MIO queue is full: fewer, wider shared accesses; check bank conflicts.",
    "lg_throttle": "The global/local load queue is full: fewer, wider (16-byte) memory instructions; if the "
                   "traffic is local memory, keep that array in registers.",
    "no_instructions": "Warps wait for instructions (instruction-cache misses, or their turn to fetch): fewer "
                       "copies of the hot loops and smaller unrolled bodies (see instruction-fetch).",
    "math_pipe_throttle": "A math pipe is saturated: see compute-bound.",
    "membar": "Memory barriers: fewer fences.",
}


def is_latency_bound(c: KernelFacts, ctx: Context) -> bool:
    """The rule's test: the report reads a compute or a memory throughput, and no unit is at its roof.
    Other rules' advice asks it before pointing to this rule's step."""
    return (c.tp["compute_pct"] is not None or c.tp["memory_pct"] is not None) and ctx.top < BOUND_PCT


def wgmma_overlap_steps(c: KernelFacts, ladder: bool) -> str:
    """The next step of a wgmma kernel whose warpgroups wait: what the report shows it already overlaps
    (lab.analysis.overlap, with the evidence), then only what is left; a technique the report cannot
    judge stays in the list and says so. A backward's kernel hears a backward's levers
    (backward_overlap_steps)."""
    o = c.overlap
    if ov.backward(o):
        return backward_overlap_steps(c)
    waits = o.waits if o else {}
    left: list[str] = []
    if not ov.present(o, ov.PINGPONG):
        left.append(("two consumer warpgroups in ping-pong (one's softmax under the other's wgmma: turns on named "
                     "barriers, bar.sync and bar.arrive)" if ladder else
                     "ping-pong between consumer warpgroups (one's non-matrix work under the other's wgmma)")
                    + ov.untold(o, ov.PINGPONG))
    if not ov.present(o, ov.WGMMA_IN_FLIGHT):
        left.append(("a wgmma group kept in flight across the softmax (the next S = Q K^T issued before this tile's "
                     "softmax, wgmma.wait_group 1)" if ladder else
                     "a wgmma group kept in flight while the warpgroup works on (wgmma.wait_group 1)")
                    + ov.untold(o, ov.WGMMA_IN_FLIGHT))
    stages_note, grid_note = _loads_and_grid(o, left, stages="TMA stages", early="the next tile's first loads",
                                             tile="tile", epilogue="epilogue")
    if not ov.present(o, ov.TMA_STORE):
        left.append(("O stored with TMA (staged in shared memory, then cp.async.bulk.tensor)" if ladder else
                     "the output stored with TMA (staged in shared memory, then cp.async.bulk.tensor)")
                    + ov.untold(o, ov.TMA_STORE))
    own = waits.get("wgmma_pct")
    if own and all(ov.present(o, k) or ov.moot(o, k) for k in (ov.PINGPONG, ov.WGMMA_IN_FLIGHT, ov.PERSISTENT)):
        # every overlap the report can show is there: what remains is the products' own latency per wait
        left.append(f"the warpgroups' waits on their own wgmma (WARPGROUP.DEPBAR: {own:.1f}% of the samples, most at "
                    f"{waits['wgmma_where']}): more products in flight per wait (" + (
                        "a larger key tile BN, " if ladder else "larger tiles, ") +
                    "a deeper software pipeline) and fewer non-matrix instructions per tile")
    done = ov.already(o, (ov.PINGPONG, ov.WGMMA_IN_FLIGHT, ov.PERSISTENT, ov.TMA_STORE))
    head = "Overlap more of the non-matrix work with the matrix products."
    steps = f" Left: {'; '.join(left)}." if left else ""
    return " ".join(x for x in (head, done) if x) + steps + stages_note + grid_note


def _loads_and_grid(o, left: list[str], stages: str, early: str, tile: str, epilogue: str,
                    few: str | None = None) -> tuple[str, str]:
    """The two steps a forward's and a backward's overlap advice share, in each one's words: more load
    stages where warps wait on mbarriers (appended to `left`, or a note that they would not help), and a
    persistent grid where the report shows none (or a note why it is moot). Returns (stages note, grid note)."""
    waits = o.waits if o else {}
    data = waits.get("mbarrier_pct")
    stages_note = ""
    if data is None:
        left.append(f"more {stages} in flight")
    elif data >= DATA_WAIT_PCT:
        left.append(f"more {stages} in flight, or {early} issued earlier (warps wait on mbarriers, other than a TMA "
                    f"issuer's, in {data:.1f}% of the samples, most at {waits['mbarrier_where']})")
    else:
        stages_note = (f" More {few or stages} would not help: warps wait on mbarriers, other than a TMA issuer's, in "
                       f"only {data:.1f}% of the samples.")
    grid_note = ""
    if ov.moot(o, ov.PERSISTENT):
        grid_note = f" Not a persistent grid: {ov.moot(o, ov.PERSISTENT)}."
    elif not ov.present(o, ov.PERSISTENT):
        left.append(f"persistent CTAs with a tile scheduler so the next {tile}'s loads and first products run under "
                    f"this tile's {epilogue}" + ov.untold(o, ov.PERSISTENT))
    return stages_note, grid_note


def backward_overlap_steps(c: KernelFacts) -> str:
    """wgmma_overlap_steps for a backward's kernel (dQ, dK, dV), by FlashAttention-3's backward: its GEMMs
    kept in flight one behind another inside each warpgroup, dQ added in bulk by TMA off the consumers' path,
    dK and dV stored by TMA, Q/dO stages, persistent CTAs over K/V tiles; never ping-pong, and the advice says
    why and how the lab knew the kernel is a backward's."""
    o = c.overlap
    waits = o.waits
    left: list[str] = []
    if not ov.present(o, ov.WGMMA_IN_FLIGHT):
        left.append("the GEMMs of a step kept in flight one behind another (S = Q K^T and dP = dO V^T issued together, "
                    "P computed while dP runs; dV += P^T dO and dQ = dS K issued before waiting on either: "
                    "wgmma.wait_group 1)" + ov.untold(o, ov.WGMMA_IN_FLIGHT))
    if not (ov.present(o, ov.DQ_REDUCE) or ov.moot(o, ov.DQ_REDUCE)):
        left.append("dQ's fp32 partial staged in shared memory and added by one TMA bulk reduction per Q tile "
                    "(cp.reduce.async.bulk), issued by a producer warp while the consumers go on, instead of a global "
                    "reduction per element from the consumer warpgroups" + ov.untold(o, ov.DQ_REDUCE))
    stages_note, grid_note = _loads_and_grid(o, left, stages="Q/dO TMA stages", early="the next Q tile's loads",
                                             tile="K/V tile", epilogue="dK/dV epilogue", few="Q/dO stages")
    if not ov.present(o, ov.TMA_STORE):
        left.append("dK and dV stored with TMA (staged in shared memory, then cp.async.bulk.tensor)"
                    + ov.untold(o, ov.TMA_STORE))
    own = waits.get("wgmma_pct")
    if own and all(ov.present(o, k) or ov.moot(o, k) for k in (ov.WGMMA_IN_FLIGHT, ov.PERSISTENT)):
        left.append(f"the warpgroups' waits on their own wgmma (WARPGROUP.DEPBAR: {own:.1f}% of the samples, most at "
                    f"{waits['wgmma_where']}): more products in flight per wait (a deeper software pipeline across "
                    "Q tiles) and fewer non-matrix instructions per tile (P, dS = P (dP - D), the dQ staging)")
    keys = ((ov.PINGPONG,) if ov.present(o, ov.PINGPONG) else ()) + (ov.WGMMA_IN_FLIGHT, ov.PERSISTENT, ov.TMA_STORE,
                                                                      ov.DQ_REDUCE)
    done = ov.already(o, keys)
    head = "Overlap more of the non-matrix work with the matrix products."
    steps = f" Left: {'; '.join(left)}." if left else ""
    turns = (f" Not ping-pong, a forward's lever: {ov.moot(o, ov.PINGPONG)}; this kernel is a backward's by "
             f"{o.backward_from}." if ov.moot(o, ov.PINGPONG) else "")
    return " ".join(x for x in (head, done) if x) + steps + stages_note + grid_note + turns


class LatencyBound(Rule):
    cls = "latency-bound"
    capped_by_busiest_unit = True

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        M, tp = c.M, c.tp
        cpct, mpct = tp["compute_pct"], tp["memory_pct"]
        if not is_latency_bound(c, ctx):
            return None
        est = (100.0 - ctx.top) * c.busy_fraction
        ev = {"compute_pct_of_peak": rounded(cpct), "memory_pct_of_peak": rounded(mpct)}
        lat_cycles = M.num("smsp__average_warp_latency_per_inst_issued.ratio")
        if lat_cycles is not None:   # WarpStateStats only; the stall shares below carry the judgement
            ev["smsp__average_warp_latency_per_inst_issued.ratio"] = rounded(lat_cycles)
        for reason, v, share in c.stalls[:3]:
            ev[f"stall:{reason} (% of stalls)"] = rounded(share, 1)
        if not c.stalls:
            ev["stall reasons (WarpStateStats)"] = None
        top_txt = f"; top stall: {c.stalls[0][0].replace('_', ' ')} ({c.stalls[0][2]:.0f}%)" if c.stalls else ""
        return self.finding(f"Latency-bound: compute at {cpct or 0:.3g}%, memory at {mpct or 0:.3g}% of peak{top_txt}",
                            est, ev, c, ctx)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        M, ladder = c.M, ctx.ladder
        path = tensor_path(M, c.device)
        wgmma = bool(path and path["instruction"] == "HGMMA")
        tma = bool((hopper_async(M) or {}).get("tma"))
        top_stall = c.stalls[0][0] if c.stalls else None
        if ov.present(c.overlap, ov.ASYNC_LOADS):
            # the tiles already arrive by asynchronous copies: what is left is more of them in flight
            long_sb = ("Warps wait on global/local loads (long scoreboard). Already in the report: "
                       f"{ov.NAMES[ov.ASYNC_LOADS]} ({c.overlap.shown[ov.ASYNC_LOADS].evidence}). Left: more of them "
                       "in flight (a deeper ring of stages, the next tile's copies issued before this tile's math), "
                       "or more warps per SM.")
        else:
            long_sb = ("Warps wait on global/local loads (long scoreboard): keep more loads in flight, "
                       + ("e.g. cp.async double buffering of the K/V tiles so the next tile loads under this one's math."
                          + ctx.rung("latency-bound") if ladder else
                          "e.g. prefetch the next iteration's data (cp.async or registers), several independent loads "
                          "per thread, or more warps per SM.") + ov.untold(c.overlap, ov.ASYNC_LOADS))
        lat = long_sb if top_stall == "long_scoreboard" else STALL_STEPS.get(
            top_stall or "", "Hide latency with more warps per SM or more independent work per warp (ILP).")
        if wgmma and (top_stall in ("wait", "barrier", "membar", None) or top_stall == "long_scoreboard" and tma):
            # warpgroups waiting on wgmma results and mbarriers (with TMA feeding the tiles, the long-scoreboard
            # waits are the copies' mbarriers, not loads the warps issue): the tensor pipe idles between tiles
            pipe = f" (tensor pipe {path['pipe_pct']:.0f}% busy)" if path.get("pipe_pct") is not None else ""
            lat = (f"The warpgroups wait on their wgmma results and mbarriers{pipe}. "
                   + ov.serialized_step(c.wgmma_serialized) + wgmma_overlap_steps(c, ladder))
        if is_fetch_bound(c) and top_stall != "no_instructions":
            # warps without an instruction gain nothing from more work in flight, and these steps add code
            pct, _ = fetch_share(c)
            lat = (f"First the instruction fetch (see instruction-fetch: warps wait for an instruction in {pct:.1f}% "
                   "of the PC samples): warps without an instruction gain nothing from the steps that follow, and "
                   "those that add code paths (ping-pong, deeper pipelines) add to what the SMs fetch. " + lat)
        return lat

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        return top_stall_lines(k, c)

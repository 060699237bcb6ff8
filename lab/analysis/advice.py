"""The next step for each bottleneck class, worded for the kernel at hand.

Two audiences: a rung of the kernel ladder (the report came from `lab profile`, or its NVTX range
names a rung the registry knows, or the user gave the attention problem), which hears about Q, K
and V tiles and the rung that demonstrates the fix; and a kernel the lab knows nothing about (a
vector add, a GEMM), which hears the technique in general terms and never a rung or a K/V tile.

Rungs are named through the registry only: the first rung after the current one that attacks the
class (lab.ladder.registry.demonstrating where the registry has it, else each rung's declared
`attacks` classes), and only if the kernel's GPU can run it. None found: the technique, unnamed.
"""

from __future__ import annotations

import re

from lab.vocabulary import CLASSES
from lab.analysis.metrics import (KernelFacts, hopper_async, occupancy_limiter, tensor_instructions, tensor_path,
                                 unit_name, warp_specialised)

_CLASS_WORDS = CLASSES


# Words a rung's `attacks` text may use for a class instead of its name (the analysis' own titles).
_CLASS_SYNONYMS = ((re.compile(r"tensor[- ]path|instruction[- ]issue"), "compute-bound"),
                   (re.compile(r"\blatency\b"), "latency-bound"))


def _declared_classes(attacks) -> set[str]:
    """The analysis classes a rung's `attacks` text declares: those named (or called by a synonym the
    analysis' titles use) before its first colon. A fallback until the registry answers itself."""
    if not isinstance(attacks, str):   # a registry that declares the classes as a list
        return {c for c in (attacks or ()) if c in _CLASS_WORDS}
    head = attacks.split(":", 1)[0]
    found = {c for c in _CLASS_WORDS if re.search(rf"\b{re.escape(c)}\b", head)}
    return found | {cls for pat, cls in _CLASS_SYNONYMS if pat.search(head)}


def _registry():
    try:
        from lab.ladder import registry
    except Exception:   # the registry is context here, never a reason to fail an analysis
        return None
    return registry


def _demonstrating(registry, cls: str) -> list:
    every = getattr(registry, "attacking", None)   # all built-in rungs that attack `cls`, ladder order
    if every is not None:
        return list(every(cls))
    fn = getattr(registry, "demonstrating", None)
    if fn is not None:
        got = fn(cls)
        if got is None:
            return []
        got = [got] if (hasattr(got, "id") or isinstance(got, str)) else list(got)
        return [registry.get(v) if isinstance(v, str) else v for v in got]   # rungs or their ids
    return [v for v in registry.VARIANTS if cls in _declared_classes(getattr(v, "attacks", ""))]


def rung_of(nvtx: str | None) -> str | None:
    """The ladder rung a kernel belongs to, from the NVTX range the lab's target opens
    (`lab <id> <shape>`), if the registry knows that id."""
    m = re.search(r"\blab (\S+) ", nvtx or "")
    reg = _registry()
    if not m or reg is None:
        return None
    try:
        return m.group(1) if m.group(1) in reg.all_ids() else None
    except Exception:
        return None


def next_rung(cls: str, current: str | None, cc: tuple[int, int] | None = None) -> str | None:
    """'v3 (unrolled)': the first rung after `current` that attacks `cls` and runs on compute
    capability `cc`; None when the ladder has none (or `current` is not a rung)."""
    reg = _registry()
    if reg is None or current is None:
        return None
    try:
        order = reg.all_ids()
        if current not in order:
            return None
        later = [v for v in _demonstrating(reg, cls) if v.id in order and order.index(v.id) > order.index(current)]
        if cc is not None:
            later = [v for v in later if tuple(getattr(v, "min_cc", (0, 0))) <= cc]
        later.sort(key=lambda v: order.index(v.id))
    except Exception:
        return None
    return f"{later[0].id} ({later[0].slug})" if later else None


def _cc(c: KernelFacts) -> tuple[int, int] | None:
    major, minor = c.M.num("device__attribute_compute_capability_major"), c.M.num("device__attribute_compute_capability_minor")
    return (int(major), int(minor or 0)) if major is not None else None


def advice_by_class(c: KernelFacts) -> dict[str, str]:
    """Advice per class for this kernel: attention wording and rungs for a ladder rung, general
    wording for any other kernel."""
    M = c.M
    p = c.problem
    ladder = bool(c.rung or p)

    def rung(cls: str) -> str:
        r = next_rung(cls, c.rung, _cc(c))
        return f" The {r} rung demonstrates this fix." if r else ""

    bh = p["batch"] * p["heads"] if p and "batch" in p and "heads" in p else None
    grid_is_bh = bh is not None and c.ctas is not None and int(c.ctas) == int(bh)
    if grid_is_bh:
        small = (f"The grid of B*H = {int(bh)} CTAs leaves the SMs' warp slots empty: split the query dimension "
                 "across CTAs (one CTA per query tile per head) and give each CTA several warps." + rung("small-grid"))
    elif ladder:
        small = ("Put more warps in flight: split the query dimension across CTAs and give each CTA several warps."
                 + rung("small-grid"))
    else:
        small = ("Put more warps in flight: launch at least as many CTAs as SMs (better several waves) with several "
                 "warps each, splitting independent work across them.")
    lim, lim_blocks, _ = occupancy_limiter(M)
    occ = ("Raise occupancy: " + {
        "registers": "fewer live registers per thread (__launch_bounds__, smaller per-thread tiles)",
        "shared memory": "less shared memory per block (smaller tiles, or reuse one buffer), or more warps per "
                         "block to share it",
        "warps per block (block size)": "a block size that fits the SM's warp slots",
        "blocks per SM": "bigger blocks (more warps per block)",
        "barriers": "fewer named barriers per block",
    }.get(lim or "", "find the limiting resource in the Occupancy section") +
        (f" (now {lim} allows {int(lim_blocks)} block(s) per SM)." if lim and lim_blocks is not None else "."))
    path = tensor_path(M, c.device)
    wgmma = bool(path and path["instruction"] == "HGMMA")
    tma = bool((hopper_async(M) or {}).get("tma"))
    if warp_specialised(M, c.device):
        occ = ("Few warps per SM is how a warp-specialised wgmma kernel is built (its consumer warpgroups take the "
               "registers, setmaxnreg); "
               "more warps is not the lever: keep more work in flight per warpgroup instead (see latency-bound)"
               + (f"; now {lim} allows {int(lim_blocks)} block(s) per SM." if lim and lim_blocks is not None else "."))
    top_stall = c.stalls[0][0] if c.stalls else None
    long_sb = ("Warps wait on global/local loads (long scoreboard): keep more loads in flight, "
               + ("e.g. cp.async double buffering of the K/V tiles so the next tile loads under this one's math."
                  + rung("latency-bound") if ladder else
                  "e.g. prefetch the next iteration's data (cp.async or registers), several independent loads "
                  "per thread, or more warps per SM."))
    lat = {
        "long_scoreboard": long_sb,
        "barrier": "Warps wait at __syncthreads: fewer barriers per tile, or more independent warps per SM.",
        "wait": "Dependent instruction chains (fixed-latency waits): more instruction-level parallelism (unroll, "
                "independent accumulators), or more warps per SM to interleave.",
        "short_scoreboard": "Waits on shared memory or special functions (short scoreboard): fewer shared loads per "
                            "FLOP (reuse values from registers); check bank conflicts.",
        "mio_throttle": "The shared-memory/MIO queue is full: fewer, wider shared accesses; check bank conflicts.",
        "lg_throttle": "The global/local load queue is full: fewer, wider (16-byte) memory instructions; if the "
                       "traffic is local memory, keep that array in registers.",
        "no_instruction": "Instruction-cache misses: a smaller unrolled loop body.",
        "math_pipe_throttle": "A math pipe is saturated: see compute-bound.",
        "membar": "Memory barriers: fewer fences.",
    }.get(top_stall or "", "Hide latency with more warps per SM or more independent work per warp (ILP).")
    if wgmma and (top_stall in ("wait", "barrier", "membar", None) or top_stall == "long_scoreboard" and tma):
        # warpgroups waiting on wgmma results and mbarriers (with TMA feeding the tiles, the long-scoreboard
        # waits are the copies' mbarriers, not loads the warps issue): the tensor pipe idles between tiles
        pipe = f" (tensor pipe {path['pipe_pct']:.0f}% busy)" if path.get("pipe_pct") is not None else ""
        lat = (f"The warpgroups wait on their wgmma results and mbarriers{pipe}: overlap more of the non-matrix work "
               "with the matrix products: two consumer warpgroups in ping-pong (one's softmax under the other's "
               "wgmma), more TMA stages in flight, and persistent CTAs with a tile scheduler so the next tile's "
               "loads and first products run under this tile's epilogue (stored with TMA)."
               if ladder else
               f"The warpgroups wait on their wgmma results and mbarriers{pipe}: overlap the non-matrix work with the "
               "matrix products (ping-pong between consumer warpgroups), keep more TMA stages in flight, and make "
               "CTAs persistent so one tile's prologue and epilogue run under another's products.")
    mem_unit = unit_name(c.tp["memory_metric"] or "")
    if mem_unit == "DRAM":
        mem = ("DRAM bandwidth is the limit: only moving fewer bytes helps "
               + ("(reuse K/V tiles from shared memory across more queries, keep intermediates on chip)"
                  + ("; compare the bytes moved with the minimum for Q, K, V and O" if p and p.get("min_bytes") else "")
                  if ladder else "(fuse with the kernels before and after it, narrower data types, reuse on chip)")
               + ".")
    elif mem_unit.startswith("L1TEX") or mem_unit in ("LSU pipe", "MIO (shared memory / special function queue)"):
        mem = (f"{mem_unit} is the limit: fewer, wider memory instructions (16-byte vector accesses) and more reuse "
               "from registers.")
    else:
        mem = f"{mem_unit} is the limit: improve locality so fewer sectors reach it (tiling, reuse from shared memory)."
    comp = _compute_advice(c, ladder, rung)
    wide = "16-byte vector accesses (float4, or 8 halves)" if ladder else "16-byte vector accesses"
    return {
        "small-grid": small,
        "occupancy-limited": occ,
        "latency-bound": lat,
        "memory-bound": mem,
        "compute-bound": comp,
        "uncoalesced-global": (("In a warp-specialised wgmma kernel the scattered accesses are usually the output "
                                "written straight from the accumulators (each thread holds pairs of adjacent "
                                "elements): stage the tile through shared memory (stmatrix) and write it with a TMA "
                                "store (cp.async.bulk.tensor), as the loads already arrive.")
                               if warp_specialised(M, c.device) else
                               "Make the 32 lanes of a warp read consecutive addresses so that each 32-byte sector "
                               f"is used whole: consecutive threads on consecutive {wide}." + rung("uncoalesced-global")),
        "bank-conflicts": "Pad each shared-memory row (e.g. +1 or +4 elements) or swizzle the layout so that the "
                          "32 lanes of a warp hit 32 different banks." + rung("bank-conflicts"),
        "local-memory": "Keep per-thread arrays in registers: index them only with compile-time constants "
                        "(fully unrolled loops); for spills, fewer live registers or __launch_bounds__."
                        + rung("local-memory"),
        "divergence": "Make branch conditions uniform across each warp (assign work per warp, not per lane), "
                      "or predicate short branches." + rung("divergence"),
        "launch-bound": "The kernel is as short as a launch: fuse it with its neighbours, give each launch more "
                        "work, or capture the sequence in a CUDA graph.",
    }


def _compute_advice(c: KernelFacts, ladder: bool, rung) -> str:
    tp = c.tp
    top_pipe = unit_name(tp["compute_metric"] or "")
    if tp["math_pct"] is not None and tp["compute_pct"] and tp["math_pct"] >= 0.7 * tp["compute_pct"]:
        top_pipe = unit_name(tp["math_metric"])   # issue is busy because one math pipe is
    path = tensor_path(c.M, c.device)
    tensor_busy = bool(path and path["pipe_pct"] and path["pipe_pct"] >= 0.5 * (tp["compute_pct"] or 0.0))
    if path and path["hmma_on_hopper"] and tensor_busy:
        r = next_rung("compute-bound", c.rung, _cc(c)) if ladder else None
        return ("On Hopper, warp-level mma.sync (HMMA) cannot reach the tensor cores' dense rate: issue the matrix "
                "products as warpgroup wgmma (HGMMA) on operands in shared memory, fed by TMA bulk copies through "
                "an mbarrier-guarded ring of stages" + (" (warp-specialized producer and consumer warpgroups)"
                                                        if ladder else "") + "."
                + (f" The {r} rung demonstrates this fix." if r else ""))
    mma = tensor_instructions(c.M)
    if mma is None:   # no per-opcode counts: the pipe metric (HFMA2.MMA moves alone reach a few %)
        tensor = c.M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
        no_tensor = tensor is None or tensor < 5.0
    else:
        no_tensor = not mma
    if top_pipe == "FMA pipe" and c.has_tensor_cores and no_tensor:
        if ladder:
            return ("FP32 FFMA-bound on a GPU with tensor cores: move the two matrix products to tensor cores "
                    "(16-bit inputs, mma.sync or wgmma)." + rung("compute-bound"))
        return ("FP32 FFMA-bound on a GPU with tensor cores: if the work is matrix products, run them on the tensor "
                "cores (16-bit or TF32 inputs); otherwise fewer FP32 operations per result.")
    if top_pipe in ("tensor pipe", "FP16+tensor pipe") and path and path["instruction"] == "HGMMA":
        return ("Already on warpgroup wgmma and the tensor pipe is the limit: overlap the non-matrix work with the "
                "next tile's matrix products (warp specialization, ping-pong between warpgroups), or use FP8.")
    if top_pipe in ("tensor pipe", "FP16+tensor pipe"):
        return "The tensor pipe is the limit: fewer non-matrix instructions per tile, or a lower-precision format."
    if top_pipe == "XU (transcendental) pipe":
        return "Transcendentals are the limit: exp2f on pre-scaled inputs, fewer calls per result."
    if top_pipe in ("ALU pipe", "instruction issue", "uniform pipe"):
        return "Instruction issue is the limit: fewer index/address instructions per result (hoist, vectorize, unroll)."
    return f"The {top_pipe} is the limit: fewer instructions on it, or move the work to a faster pipe."

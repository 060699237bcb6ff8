"""The next step for each bottleneck class, worded from one kernel's facts: the limiting resource
or stall, the busiest unit, whether tensor cores are used, and the rung of the kernel ladder that
demonstrates the fix where one does (each rung declares the classes it attacks; the registry names it).
"""

from __future__ import annotations

from lab.analysis.metrics import KernelFacts, occupancy_limiter, tensor_instructions, unit_name


def _rung(cls: str) -> str:
    """The rung of the ladder that demonstrates the fix for `cls` ("v2: float4"), from the
    registry's declared classes (lab.ladder.registry.demonstrating); "" where no rung does."""
    try:
        from lab.ladder.registry import demonstrating

        v = demonstrating(cls)
    except Exception:   # the registry is optional context here, never a reason to fail an analysis
        return ""
    return f"{v.id}: {v.slug}" if v else ""


def _the_rung(cls: str, fmt: str) -> str:
    """`fmt` with the demonstrating rung filled in, or "" (technique only) where no rung does."""
    r = _rung(cls)
    return fmt.format(r) if r else ""


def advice_by_class(c: KernelFacts) -> dict[str, str]:
    """Advice per class: the next step, naming the rung of the ladder where one applies."""
    M = c.M
    p = c.problem
    bh = p["batch"] * p["heads"] if p and "batch" in p and "heads" in p else None
    top_stall = c.stalls[0][0] if c.stalls else None
    grid_is_bh = bh is not None and c.ctas is not None and int(c.ctas) == int(bh)
    small = (f"The grid of B*H = {int(bh)} CTAs leaves SMs idle: split the query dimension across CTAs "
             f"(one CTA per query tile per head{_the_rung('small-grid', '; the {} rung')})." if grid_is_bh else
             "Launch at least as many CTAs as SMs (better several waves): split independent work across "
             f"CTAs; for attention, split the query dimension across CTAs{_the_rung('small-grid', ' ({})')}.")
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
    lat = {
        "long_scoreboard": "Warps wait on global/local loads: keep more loads in flight, e.g. cp.async double "
                           f"buffering of the K/V tiles{_the_rung('latency-bound', ' ({})')}, or more independent loads per thread.",
        "barrier": "Warps wait at __syncthreads: fewer barriers per tile, or more independent warps per SM.",
        "wait": "Dependent instruction chains: more instruction-level parallelism (unroll, independent accumulators).",
        "short_scoreboard": "Waits on shared memory or special functions: fewer shared loads per FLOP; check bank conflicts.",
        "mio_throttle": "The shared-memory/MIO queue is full: fewer, wider shared accesses; check bank conflicts.",
        "lg_throttle": f"The global/local load queue is full: fewer, wider (16-byte{_the_rung('uncoalesced-global', ', {}')}) loads.",
        "no_instruction": "Instruction-cache misses: a smaller unrolled loop body.",
        "math_pipe_throttle": "A math pipe is saturated: see compute-bound.",
        "membar": "Memory barriers: fewer fences.",
    }.get(top_stall or "", "Hide latency with more warps per SM or more independent work per warp (ILP).")
    mem_unit = unit_name(c.tp["memory_metric"] or "")
    if mem_unit == "DRAM":
        mem = ("DRAM bandwidth is the limit: move fewer bytes (reuse K/V tiles from shared memory across more "
               "queries, keep intermediates on chip)")
        if p and p.get("min_bytes"):
            mem += "; compare the bytes moved with the minimum for Q, K, V and O"
        mem += "."
    elif mem_unit.startswith("L1TEX") or mem_unit in ("LSU pipe", "MIO (shared memory / special function queue)"):
        mem = (f"{mem_unit} is the limit: fewer, wider memory instructions (16-byte vectorized loads{_the_rung('uncoalesced-global', ', {}')}) "
               "and more "
               "reuse from registers.")
    else:
        mem = f"{mem_unit} is the limit: improve locality so fewer sectors reach it (tiling, reuse from shared memory)."
    top_pipe = unit_name(c.tp["compute_metric"] or "")
    if c.tp["math_pct"] is not None and c.tp["compute_pct"] and c.tp["math_pct"] >= 0.7 * c.tp["compute_pct"]:
        top_pipe = unit_name(c.tp["math_metric"])   # issue is busy because one math pipe is
    mma = tensor_instructions(c.M)
    uses_wgmma = bool(mma) and any(op.endswith("GMMA") for op in mma)
    if mma is None:   # no per-opcode counts: the pipe metric (HFMA2.MMA moves alone reach a few %)
        tensor = c.M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
        no_tensor = tensor is None or tensor < 5.0
    else:
        no_tensor = not mma
    if top_pipe == "FMA pipe" and c.has_tensor_cores and no_tensor:
        comp = ("FP32 FFMA-bound on a GPU with tensor cores: move the two matrix products to tensor cores "
                f"(mma.sync{_the_rung('compute-bound', ', the {} rung')}).")
    elif top_pipe in ("tensor pipe", "FP16+tensor pipe") and uses_wgmma:
        comp = ("Already on warpgroup wgmma and the tensor pipe is the limit: overlap the softmax with the next "
                "tile's matrix products (warp specialization, ping-pong between warpgroups), or use FP8.")
    elif top_pipe in ("tensor pipe", "FP16+tensor pipe"):
        comp = ("The tensor pipe is the limit: on Hopper, warpgroup wgmma fed by TMA (beyond mma.sync); elsewhere "
                "fewer non-matmul instructions per tile (softmax, rescaling).")
    elif top_pipe == "XU (transcendental) pipe":
        comp = "Transcendentals (exp) are the limit: exp2f on pre-scaled logits, fewer rescalings."
    elif top_pipe in ("ALU pipe", "instruction issue", "uniform pipe"):
        comp = "Instruction issue is the limit: fewer index/address instructions per FLOP (hoist, vectorize, unroll)."
    else:
        comp = f"The {top_pipe} is the limit: fewer instructions on it, or move the work to a faster pipe."
    return {
        "small-grid": small,
        "occupancy-limited": occ,
        "latency-bound": lat,
        "memory-bound": mem,
        "compute-bound": comp,
        "uncoalesced-global": "Make consecutive threads read consecutive 16-byte chunks: 16-byte vectorized "
                              f"(float4) loads spread over the CTA's threads{_the_rung('uncoalesced-global', ' ({})')}.",
        "bank-conflicts": "Pad each shared-memory row (e.g. +1 or +4 elements) or swizzle the layout so that the "
                          "32 lanes of a warp hit 32 different banks.",
        "local-memory": "Keep per-thread arrays in registers: index them only with compile-time constants "
                        "(fully unrolled loops); for spills, fewer live registers or __launch_bounds__.",
        "divergence": "Make branch conditions uniform across each warp (assign work per warp, not per lane), "
                      "or predicate short branches.",
        "launch-bound": "The kernel is as short as a launch: fuse it with its neighbours, give each launch more "
                        "work, or capture the sequence in a CUDA graph.",
    }

"""compute-bound: a compute unit at or above 60% of its peak, or, on Hopper, matrix work on mma.sync
(HMMA), which Hopper runs below the dense rate only wgmma (HGMMA) reaches: the tensor path is then the
roof a fix that keeps HMMA cannot lift, and the gain is the distance from the achieved tensor FLOP/s
to the dense peak, weighted by the tensor pipe's share of the busiest unit's time.

Its lines are the instructions of the busy pipe (the matrix instructions of the tensor pipe, FFMA and
its kin of the FMA pipe, MUFU of the XU pipe; for instruction issue, the most executed lines), never
the lines where warps wait.
"""

from __future__ import annotations

from lab.analysis import overlap as ov
from lab.analysis.lines import cite
from lab.analysis.metrics import (KernelFacts, flop_rates, rounded, shared_wavefront_split, tensor_instructions,
                                  tensor_path, unit_name, warp_specialised)
from lab.analysis.rules.base import BOUND_PCT, Context, Finding, Rule


# The SASS opcodes each pipe runs (unit_name's names); a pipe not listed cites its most sampled work.
PIPE_OPCODES = {
    "tensor pipe": ("HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "BGMMA", "BMMA", "DMMA"),
    "FP16+tensor pipe": ("HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "BGMMA", "BMMA", "DMMA", "HFMA2", "HADD2", "HMUL2"),
    "FMA pipe": ("FFMA", "FMUL", "FADD", "FFMA2", "FMUL2", "FADD2", "IMAD", "IMUL", "IDP", "HFMA2", "HADD2", "HMUL2"),
    "FP16 pipe": ("HFMA2", "HADD2", "HMUL2"),
    "XU (transcendental) pipe": ("MUFU",),
    "FP64 pipe": ("DFMA", "DADD", "DMUL"),
    "ALU pipe": ("IADD3", "LOP3", "ISETP", "FSETP", "DSETP", "SHF", "SEL", "FSEL", "FMNMX", "IMNMX", "VIMNMX", "PRMT",
                 "LEA", "PLOP3", "IABS", "F2FP", "BMSK", "BREV", "FLO", "POPC", "I2FP", "F2IP"),
    "uniform pipe": ("UIADD3", "ULOP3", "USHF", "UMOV", "ULEA", "UISETP", "USEL", "UPRMT", "UFLO", "UPOPC", "UBMSK",
                     "UIMAD", "ULDC", "R2UR", "S2UR", "UPLOP3", "USETMAXREG"),
}
FEED_WGMMA_PCT = 50.0   # wgmma operand reads at least this share of a busier L1TEX: the feed limits the pipe


def operand_feed(c: KernelFacts) -> dict | None:
    """Where wgmma's shared-memory operand reads keep L1TEX's data pipe busier than the tensor pipe:
    {"l1_pct", "pipe_pct", "wgmma_pct"} (the busy unit's and the tensor pipe's % of peak, and the operand
    reads' share of the shared wavefronts), else None."""
    path = tensor_path(c.M, c.device)
    mem_metric = c.tp["memory_metric"] or ""
    if not (path and path["instruction"] == "HGMMA" and path["pipe_pct"]) or not unit_name(mem_metric).startswith("L1TEX"):
        return None
    split = shared_wavefront_split(c)
    wg = (split or {}).get("kinds", {}).get("wgmma", 0.0)
    if c.tp["memory_pct"] is None or c.tp["memory_pct"] <= path["pipe_pct"] or wg < FEED_WGMMA_PCT:
        return None
    return {"l1_pct": c.tp["memory_pct"], "pipe_pct": path["pipe_pct"], "wgmma_pct": wg}


def tensor_pipe_steps(c: KernelFacts) -> str:
    """The next step of a wgmma kernel at the tensor pipe's limit: the overlap it lacks (warp
    specialization, ping-pong: lab.analysis.overlap reads them from the report), never one it shows."""
    o = c.overlap
    left = []
    if not warp_specialised(c.M, c.device):
        left.append("warp specialization (a producer warpgroup issuing TMA, setmaxnreg)")
    if ov.backward(o):
        return backward_tensor_pipe_steps(c, left)
    if not ov.present(o, ov.PINGPONG):
        left.append("ping-pong between warpgroups" + ov.untold(o, ov.PINGPONG))
    done = ov.already(o, (ov.PINGPONG, ov.WGMMA_IN_FLIGHT, ov.PERSISTENT, ov.TMA_STORE))
    how = (f"overlap the non-matrix work with the next tile's matrix products ({', '.join(left)}), or use FP8" if left
           else "fewer non-matrix instructions per tile (they take issue slots beside the wgmma), or FP8")
    return " ".join(x for x in ("The matrix products run on warpgroup wgmma and the tensor pipe is the limit.", done) if x) + \
        f" Left: {how}."


def backward_tensor_pipe_steps(c: KernelFacts, left: list[str]) -> str:
    """tensor_pipe_steps for a backward's kernel: its GEMMs overlapped inside each warpgroup (wgmma kept in
    flight), never ping-pong (lab.analysis.overlap.BACKWARD_NO_PINGPONG), and no FP8 (FlashAttention-3's
    backward has none)."""
    o = c.overlap
    if not ov.present(o, ov.WGMMA_IN_FLIGHT):
        left.append("the GEMMs of a step kept in flight one behind another (wgmma.wait_group 1)"
                    + ov.untold(o, ov.WGMMA_IN_FLIGHT))
    keys = ((ov.PINGPONG,) if ov.present(o, ov.PINGPONG) else ()) + (ov.WGMMA_IN_FLIGHT, ov.PERSISTENT, ov.TMA_STORE,
                                                                      ov.DQ_REDUCE)
    done = ov.already(o, keys)
    how = (f"overlap the non-matrix work (P, dS = P (dP - D), the dQ staging) with the next GEMMs ({', '.join(left)})"
           if left else "fewer non-matrix instructions per tile (they take issue slots beside the wgmma)")
    turns = (f" Not ping-pong, a forward's lever: {ov.moot(o, ov.PINGPONG)}; this kernel is a backward's by "
             f"{o.backward_from}." if ov.moot(o, ov.PINGPONG) else "")
    return " ".join(x for x in ("The matrix products run on warpgroup wgmma and the tensor pipe is the limit.", done)
                    if x) + f" Left: {how}." + turns


class ComputeBound(Rule):
    cls = "compute-bound"
    advice_names_lines = False   # the tensor-path lines are the matrix products themselves

    def applies(self, c: KernelFacts, ctx: Context) -> Finding | None:
        M, tp = c.M, c.tp
        cpct = tp["compute_pct"]
        path = tensor_path(M, c.device)
        rates = flop_rates(c)
        if path and path["hmma_on_hopper"] and path["pipe_pct"] and path["pipe_pct"] >= 0.5 * (cpct or 0.0):
            pipe = path["pipe_pct"]
            achieved = rates.get("lab__tensor_pct_of_fp16_peak")
            share = min(1.0, pipe / max(ctx.top, pipe))
            est = (100.0 - achieved) * share if achieved is not None else None
            ev = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": rounded(pipe),
                  "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed":
                      rounded(M.num("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")),
                  "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed":
                      rounded(M.num("sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed")),
                  "lab__tensor_tflops": rates.get("lab__tensor_tflops"), "lab__tensor_pct_of_fp16_peak": achieved}
            if achieved is not None and pipe:
                ev["lab__hmma_roof_pct_of_fp16_peak"] = rounded(100.0 * achieved / pipe, 1)   # HMMA's rate, pipe full
            at = f" at {achieved:.1f}% of the dense FP16 peak" if achieved is not None else ""
            return self.finding(f"Tensor path: the matrix products run on mma.sync (HMMA){at}, tensor pipe "
                                f"{pipe:.0f}% busy; on Hopper only wgmma (HGMMA) fed by TMA reaches the dense rate",
                                est, ev, c, ctx, rank=est if est is not None else pipe)
        if cpct is None or cpct < BOUND_PCT:
            return None
        unit = unit_name(tp["compute_metric"])
        if tp["math_pct"] is not None and tp["math_pct"] >= 0.7 * cpct and tp["math_metric"] != tp["compute_metric"]:
            unit = f"{unit_name(tp['math_metric'])} at {tp['math_pct']:.3g}%, {unit}"
        ev = {tp["compute_metric"]: rounded(cpct),
              **({tp["math_metric"]: rounded(tp["math_pct"])} if tp["math_metric"] else {}),
              "sm__throughput.avg.pct_of_peak_sustained_elapsed":
              rounded(M.num("sm__throughput.avg.pct_of_peak_sustained_elapsed")),
              "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active":
              rounded(M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"))}
        ev.update(rates)
        return self.finding(f"Compute-bound: {unit} at {cpct:.3g}% of its peak", None, ev, c, ctx, rank=cpct)

    def advice(self, c: KernelFacts, ctx: Context) -> str:
        tp, ladder = c.tp, ctx.ladder
        top_pipe = unit_name(tp["compute_metric"] or "")
        if tp["math_pct"] is not None and tp["compute_pct"] and tp["math_pct"] >= 0.7 * tp["compute_pct"]:
            top_pipe = unit_name(tp["math_metric"])   # issue is busy because one math pipe is
        path = tensor_path(c.M, c.device)
        tensor_busy = bool(path and path["pipe_pct"] and path["pipe_pct"] >= 0.5 * (tp["compute_pct"] or 0.0))
        if path and path["hmma_on_hopper"] and tensor_busy:
            r = ctx.rung("compute-bound") if ladder else ""
            return ("On Hopper, warp-level mma.sync (HMMA) cannot reach the tensor cores' dense rate: issue the matrix "
                    "products as warpgroup wgmma (HGMMA) on operands in shared memory, fed by TMA bulk copies through "
                    "an mbarrier-guarded ring of stages" + (" (warp-specialized producer and consumer warpgroups)"
                                                            if ladder else "") + "." + r)
        mma = tensor_instructions(c.M)
        if mma is None:   # no per-opcode counts: the pipe metric (HFMA2.MMA moves alone reach a few %)
            tensor = c.M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
            no_tensor = tensor is None or tensor < 5.0
        else:
            no_tensor = not mma
        if top_pipe == "FMA pipe" and c.has_tensor_cores and no_tensor:
            if ladder:
                return ("FP32 FFMA-bound on a GPU with tensor cores: move the two matrix products to tensor cores "
                        "(16-bit inputs, mma.sync or wgmma)." + ctx.rung("compute-bound"))
            return ("FP32 FFMA-bound on a GPU with tensor cores: if the work is matrix products, run them on the "
                    "tensor cores (16-bit or TF32 inputs); otherwise fewer FP32 operations per result.")
        if top_pipe in ("tensor pipe", "FP16+tensor pipe") and path and path["instruction"] == "HGMMA":
            feed = operand_feed(c)
            if feed:
                return (f"Not the tensor pipe's own limit ({feed['pipe_pct']:.0f}% of its peak): its operands come from shared "
                        f"memory through L1TEX's data pipe, which is busier ({feed['l1_pct']:.0f}%), {feed['wgmma_pct']:.0f}% "
                        "of its shared-memory wavefronts being wgmma operand reads: fewer operand bytes per FLOP first "
                        "(see memory-bound), then overlap the non-matrix work with the matrix products.")
            return tensor_pipe_steps(c)
        if top_pipe in ("tensor pipe", "FP16+tensor pipe"):
            return "The tensor pipe is the limit: fewer non-matrix instructions per tile, or a lower-precision format."
        if top_pipe == "XU (transcendental) pipe":
            return "Transcendentals are the limit: exp2f on pre-scaled inputs, fewer calls per result."
        if top_pipe in ("ALU pipe", "instruction issue", "uniform pipe"):
            return "Instruction issue is the limit: fewer index/address instructions per result (hoist, vectorize, unroll)."
        return f"The {top_pipe} is the limit: fewer instructions on it, or move the work to a faster pipe."

    def lines(self, f: Finding, k: dict, c: KernelFacts) -> list[dict]:
        if f.title.startswith("Tensor path"):
            return cite(k, "inst_executed", opcodes=("HMMA", "HGMMA"))
        tp = c.tp
        pipe = unit_name(tp["compute_metric"] or "")
        if tp["math_pct"] is not None and tp["compute_pct"] and tp["math_pct"] >= 0.7 * tp["compute_pct"]:
            pipe = unit_name(tp["math_metric"])   # issue is busy because one math pipe is
        ops = PIPE_OPCODES.get(pipe)
        # a pipe without its opcodes listed (instruction issue among them): the most executed lines
        return (cite(k, "inst_executed", opcodes=ops) if ops else cite(k, "inst_executed")) \
            or cite(k, "samples", skip_waits="mbarrier")

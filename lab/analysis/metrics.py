"""Derived metrics: what one kernel's raw Nsight Compute metrics say, computed the same way
whichever section set the report was taken with.

Each function reads the finest counters the report has and falls back to coarser ones
(WarpStateStats' stall averages, else sampled PCs; the L1 counters, else SourceCounters' totals),
and gives None or an empty list where the report has none of them, so a finding built on it lowers
its severity instead of failing. Names follow Nsight's sections:
SpeedOfLight (throughput), WarpStateStats (stall_reasons, threads_per_instruction), Occupancy
(occupancy_limiter), InstructionStats / SASS counts (flops, tensor_instructions) and
MemoryWorkloadAnalysis (global_bytes_per_sector, bank_conflict_nway, local_share). The values the
lab adds to a finding's evidence are named `lab__*`, beside Nsight's own metric names.

`KernelFacts` bundles them with the attention problem and the device: what lab.analysis.findings judges and
lab.analysis.advice words its next steps from.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from lab.analysis.direction import Direction
from lab.gpu_specs import peaks_for
from lab.measure import rates
from lab.jsonvalues import plain  # noqa: F401  (metrics.plain: one home, lab.jsonvalues)

SECTOR_BYTES = 32.0     # an L1/L2/DRAM sector, the unit ncu counts memory traffic in


# ----------------------------------------------------------------------------- the metrics shown

# The metrics an engineer reads first on Nsight Compute's Details page, in its own names: `lab
# analyze --json`'s `metrics`, `lab compare`'s table. The one list of them.
KEY_METRICS: tuple[tuple[str, str], ...] = (
    ("gpu__time_duration.sum", "Duration (ns)"),
    # The work and the rate it issued at (Speed Of Light, Compute Workload Analysis, Instruction
    # Statistics): two kernels doing the same work in as many instructions differ in issue rate, which is
    # latency hidden or not (v9 against cuDNN at D=64 causal: 53.4 M instructions each, 1.76 against 1.86).
    ("gpc__cycles_elapsed.max", "Elapsed cycles"),
    ("sm__cycles_active.avg", "SM active cycles"),
    ("smsp__inst_executed.sum", "Executed instructions"),
    ("sm__inst_executed.avg.per_cycle_active", "Executed IPC active"),
    ("launch__grid_size", "Grid size"),
    ("launch__block_size", "Block size"),
    ("launch__registers_per_thread", "Registers per thread"),
    ("launch__shared_mem_per_block", "Shared memory per block (B)"),
    ("launch__shared_mem_per_block_static", "Static shared memory per block (B)"),
    ("launch__shared_mem_per_block_dynamic", "Dynamic shared memory per block (B)"),
    ("launch__waves_per_multiprocessor", "Waves per SM"),
    ("device__attribute_multiprocessor_count", "SMs"),
    ("sm__maximum_warps_per_active_cycle_pct", "Theoretical occupancy (%)"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved occupancy (%)"),
    ("launch__occupancy_limit_registers", "Block limit: registers"),
    ("launch__occupancy_limit_shared_mem", "Block limit: shared memory"),
    ("launch__occupancy_limit_warps", "Block limit: warps"),
    ("launch__occupancy_limit_blocks", "Block limit: blocks per SM"),
    ("launch__occupancy_limit_barriers", "Block limit: barriers"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) throughput (%)"),
    ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory throughput (%)"),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput (%)"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput (%)"),
    ("l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "L1TEX throughput (%)"),
    ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "L2 throughput (%)"),
    ("dram__bytes_read.sum", "DRAM bytes read"),
    ("dram__bytes_write.sum", "DRAM bytes written"),
    ("smsp__average_warp_latency_per_inst_issued.ratio", "Warp cycles per issued instruction"),
    ("smsp__thread_inst_executed_per_inst_executed.ratio", "Threads per warp instruction"),
    ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio", "Bytes used per sector, global loads"),
    ("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio", "Bytes used per sector, global stores"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "Bank conflicts, shared loads"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "Bank conflicts, shared stores"),
    ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "Local-memory sectors loaded"),
    ("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum", "Local-memory sectors stored"),
    ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "FMA pipe active (%)"),
    ("sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active", "ALU pipe issue (%)"),
    ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", "XU pipe issue (%)"),
    ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "Tensor pipe active (%)"),
    ("sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active", "HMMA issue (%)"),
    ("sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active", "GMMA issue (%)"),
    ("profiler__replayer_passes", "Replay passes"),
)

# What a page reads from the metrics table of a run that stored its derived values: the key metrics,
# the launch and device attributes, the kernel's name.
PAGE_COLUMNS_NARROW = re.compile(
    r"^(" + "|".join(re.escape(n) for n, _ in KEY_METRICS) + r"|kernel_index|kernel|kernel_function|device"
    r"|device__attribute_\w+|launch__\w+)$")

# The columns a page reads from a stored metrics table: the key metrics, and what the interpreters
# below need to derive the page's facts where a run stored no derived values (runs older than the
# `derived` table). A detailed-set report stores ~1,400 columns per kernel; reading these keeps `lab
# report` over many runs fast.
PAGE_COLUMNS = re.compile(
    r"^(" + "|".join(re.escape(n) for n, _ in KEY_METRICS) + r"|kernel_index|kernel|kernel_function|device"
    r"|device__attribute_\w+|launch__\w+"
    r"|sm__(maximum_warps_per_active_cycle_pct|warps_active\.avg\.pct_of_peak_sustained_active"
    r"|throughput\.avg\.pct_of_peak_sustained_elapsed|pipe_tensor_cycles_active\.avg\.pct_of_peak_sustained_active)"
    r"|smsp__average_warps_issue_stalled_\w+_per_issue_active\.ratio|smsp__average_warp_latency\w*(\.ratio|\.pct|\.sum)?"
    r"|smsp__pcsamp_warps_issue_stalled_\w+|smsp__sass_thread_inst_executed_op_f(add|mul|fma)_pred_on\.sum"
    r"|sass__thread_inst_executed_true_per_opcode\[(FFMA|FADD|FMUL|FFMA2|FADD2|FMUL2|HFMA2|HADD2|HMUL2)\]"
    r"|sass__inst_executed_per_opcode_with_modifier_all\[H[G]?MMA[\w.]*\]"
    r"|dram__(bytes|sectors)(_read|_write)?\.sum|dram__throughput\.avg\.pct_of_peak_sustained_elapsed"
    r"|lts__t_(bytes|sectors)\.sum|l1tex__t_(bytes|sectors)_pipe_lsu_mem_(global|local)_op_(ld|st)\.sum)$")


# ----------------------------------------------------------------------------- metric access

class KernelMetrics:
    """One kernel's metrics by ncu name; `num` gives a float or None (missing, NaN or text)."""

    def __init__(self, row: dict):
        self.row = row

    def raw(self, name: str):
        return plain(self.row.get(name))

    def num(self, *names: str) -> float | None:
        for n in names:
            v = self.raw(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
        return None

    def text(self, name: str) -> str | None:
        v = self.raw(name)
        return v if isinstance(v, str) else None

    def matching(self, pattern: re.Pattern) -> dict[str, float]:
        out = {}
        for k in self.row:
            m = pattern.match(k)
            if m:
                v = self.num(k)
                if v is not None:
                    out[m.group(1)] = v
        return out


def sum_or_none(*vals: float | None) -> float | None:
    """The sum, or None when any part is missing: half of a ld+st pair is not the traffic."""
    return None if any(v is None for v in vals) else float(sum(vals))


def rounded(v: float | None, nd: int = 2):
    """Evidence values as a reader wants them, None kept: the JSON carries them rounded."""
    return None if v is None else round(float(v), nd)


# ----------------------------------------------------------------------------- what the metrics say

# Components of sm__throughput's breakdown that are memory instructions being issued, not math.
_MEMORY_ISSUE = re.compile(r"pipe_lsu|mio|lsu|pipe_tex|l1tex|tma")


def unit_name(metric: str) -> str:
    """The hardware unit a throughput metric measures: DRAM, L2, L1TEX, a pipe, instruction issue."""
    m = metric.split(".")[0]
    if m.startswith(("dram__", "fbpa__", "gpu__dram")):
        return "DRAM"
    if m.startswith("lts__"):
        return "L2"
    if m.startswith("l1tex__"):
        return "L1TEX (shared memory)" if ("shared" in m or "data_bank" in m) else "L1TEX"
    for key, name in (("pipe_lsu", "LSU pipe"), ("mio", "MIO (shared memory / special function queue)"),
                      ("tensor", "tensor pipe"), ("fma", "FMA pipe"), ("alu", "ALU pipe"), ("fp64", "FP64 pipe"),
                      ("xu", "XU (transcendental) pipe"), ("fp16", "FP16 pipe"), ("pipe_shared", "FP16+tensor pipe"),
                      ("uniform", "uniform pipe"), ("adu", "ADU pipe"), ("cbu", "branch unit"),
                      ("issue_active", "instruction issue"), ("inst_executed", "instruction issue"),
                      ("inst_issued", "instruction issue")):
        if key in m:
            return name
    return m


def _breakdown(M: KernelMetrics, name: str) -> dict[str, float]:
    txt = M.text(f"breakdown:{name}")
    if not txt:
        return {}
    out = {}
    for part in txt.split(","):
        v = M.num(part.strip())
        if v is not None:
            out[part.strip()] = v
    return out


def throughput(M: KernelMetrics) -> dict:
    """The busiest compute and memory units, from SpeedOfLight's breakdowns (falling back to the
    top-level percentages). sm__throughput mixes math pipes with memory-instruction issue (LSU,
    MIO); the memory-side parts count as memory here."""
    sm = _breakdown(M, "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    mem = _breakdown(M, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    compute = {k: v for k, v in sm.items() if not _MEMORY_ISSUE.search(k)}
    memory = dict(mem, **{k: v for k, v in sm.items() if _MEMORY_ISSUE.search(k)})
    out = {"compute_pct": None, "compute_metric": None, "memory_pct": None, "memory_metric": None,
           "math_pct": None, "math_metric": None, "from_breakdown": bool(sm or mem)}
    if compute:
        k = max(compute, key=compute.get)
        out.update(compute_pct=compute[k], compute_metric=k)
        pipes = {k: v for k, v in compute.items() if "pipe" in k}   # the busiest math pipe, issue aside
        if pipes:
            k = max(pipes, key=pipes.get)
            out.update(math_pct=pipes[k], math_metric=k)
    else:
        v = M.num("sm__throughput.avg.pct_of_peak_sustained_elapsed")
        out.update(compute_pct=v, compute_metric="sm__throughput.avg.pct_of_peak_sustained_elapsed" if v is not None else None)
    if memory:
        k = max(memory, key=memory.get)
        out.update(memory_pct=memory[k], memory_metric=k)
    else:
        cands = {n: M.num(n) for n in ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                                      "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                                      "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                                      "lts__throughput.avg.pct_of_peak_sustained_elapsed",
                                      "l1tex__throughput.avg.pct_of_peak_sustained_elapsed")}
        cands = {k: v for k, v in cands.items() if v is not None}
        if cands:
            k = max(cands, key=cands.get)
            out.update(memory_pct=cands[k], memory_metric=k)
    return out


_STALL_FAMILIES = (
    re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$"),
)
_NOT_STALLS = {"selected"}  # issuing, not waiting
_PC_SAMPLES = _STALL_FAMILIES[2]

# The warp states Nsight Compute samples, by the names of its PC-sampling metrics
# (smsp__pcsamp_warps_issue_stalled_<reason>; "selected" is the issuing state): the one spelling of a stall
# reason in the lab, the one the per-line counters (lab.analysis.lines) carry. A rule that keys on a
# reason names one of these (tests/test_instruction_fetch.py holds every rule's keys to this list).
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instructions",
                 "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait",
                 "warpgroup_arrive")
# WarpStateStats spells two of them otherwise (smsp__average_warps_issue_stalled_<reason>_per_issue_active):
# "no_instruction" (waiting to be selected to fetch an instruction, or on an instruction-cache miss) and
# "gmma" (waiting on WARPGROUP.ARRIVES). Read under the sampled names, so that a report with both families
# (ncu's full set) names each reason once and a reason's lines are found by its name.
_STALL_ALIASES = {"no_instruction": "no_instructions", "gmma": "warpgroup_arrive"}


def stall_reasons(M: KernelMetrics) -> tuple[list[tuple[str, float, float]], str | None]:
    """[(reason, value, share of all stalls in %)] most first, from whichever family the report has
    (WarpStateStats averages, else sampled PCs), and the family's metric pattern; reasons are named as
    STALL_REASONS names them, whichever family they come from."""
    for fam in _STALL_FAMILIES:
        vals = {_STALL_ALIASES.get(k, k): v for k, v in M.matching(fam).items()
                if k not in _NOT_STALLS and not k.endswith("_not_issued")}
        total = sum(vals.values())
        if vals and total > 0:
            ranked = sorted(((k, v, 100.0 * v / total) for k, v in vals.items()), key=lambda t: (-t[1], t[0]))
            return ranked, fam.pattern
    return [], None


def sampled_share(M: KernelMetrics, reason: str) -> tuple[float | None, dict]:
    """The share (%) of all PC samples, issuing ones included, in which warps were in state `reason` (a
    STALL_REASONS name), with its evidence: Nsight's sampled counts (smsp__pcsamp_warps_issue_stalled_<reason>
    over smsp__pcsamp_sample_count), else WarpStateStats' average warps in that state over all states'.
    (None, {}) where the report has neither."""
    samples = {k: v for k, v in M.matching(_PC_SAMPLES).items() if not k.endswith("_not_issued")}
    total = M.num("smsp__pcsamp_sample_count") or sum(samples.values())
    if samples and total:
        return 100.0 * samples.get(reason, 0.0) / total, {
            f"smsp__pcsamp_warps_issue_stalled_{reason}": samples.get(reason, 0.0),
            "smsp__pcsamp_sample_count": total}
    states = M.matching(_STALL_FAMILIES[0])
    total = sum(states.values())
    if total > 0:
        raw = next((k for k, v in _STALL_ALIASES.items() if v == reason), reason)
        v = states.get(raw, 0.0)
        return 100.0 * v / total, {f"smsp__average_warps_issue_stalled_{raw}_per_issue_active.ratio": rounded(v, 4)}
    return None, {}


_OCC_LIMITERS = (("launch__occupancy_limit_registers", "registers"),
                 ("launch__occupancy_limit_shared_mem", "shared memory"),
                 ("launch__occupancy_limit_warps", "warps per block (block size)"),
                 ("launch__occupancy_limit_blocks", "blocks per SM"),
                 ("launch__occupancy_limit_barriers", "barriers"))


def occupancy_limiter(M: KernelMetrics) -> tuple[str | None, float | None, dict]:
    """The resource that allows the fewest blocks per SM, its block count, and all limits."""
    limits = {m: M.num(m) for m, _ in _OCC_LIMITERS}
    present = [(v, name, m) for m, name in _OCC_LIMITERS if (v := limits[m]) is not None]
    if not present:
        return None, None, limits
    v, name, _ = min(present, key=lambda t: t[0])
    return name, v, limits


_FP32_OPS = {"FFMA": 2, "FADD": 1, "FMUL": 1, "FFMA2": 4, "FADD2": 2, "FMUL2": 2}
_FP16_OPS = {"HFMA2": 4, "HADD2": 2, "HMUL2": 2}
_HMMA = re.compile(r"^HMMA\.(16)(8)(\d+)")          # m16n8kK, one warp: 2*m*n*k FLOPs
_HGMMA = re.compile(r"^HGMMA\.(\d+)x(\d+)x(\d+)")    # warpgroup MxNxK, counted once per warp of the four
_OPCODE_COL = re.compile(r"^sass__thread_inst_executed_true_per_opcode\[(\w+)\]$")
_MOD_COL = re.compile(r"^sass__inst_executed_per_opcode_with_modifier_all\[([\w.]+)\]$")


def flops(M: KernelMetrics) -> dict:
    """FLOPs the kernel executed, counted from SASS: FP32 (FFMA counts 2), FP16x2, and tensor-core
    instructions with their shapes (HMMA.16816: 2*16*8*16 per warp; HGMMA.64xNx16: 2*64*N*16 per
    warpgroup, i.e. per 4 warp-level executions)."""
    out = {"fp32": None, "fp16": None, "tensor": None}
    ffma = M.num("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
    fadd = M.num("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum")
    fmul = M.num("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")
    per_op = {m.group(1): M.num(k) for k in M.row if (m := _OPCODE_COL.match(k))}
    per_op = {k: v for k, v in per_op.items() if v is not None}
    if ffma is not None and fadd is not None and fmul is not None:
        out["fp32"] = 2 * ffma + fadd + fmul
    elif per_op:
        out["fp32"] = sum(per_op.get(op, 0.0) * n for op, n in _FP32_OPS.items())
    if per_op:
        out["fp16"] = sum(per_op.get(op, 0.0) * n for op, n in _FP16_OPS.items())
    mods = {m.group(1): M.num(k) for k in M.row if (m := _MOD_COL.match(k))}
    if mods:
        t = 0.0
        for name, count in mods.items():
            if not count:
                continue
            if (h := _HMMA.match(name)):
                t += count * 2 * int(h.group(1)) * int(h.group(2)) * int(h.group(3))
            elif (g := _HGMMA.match(name)):
                t += count * 2 * int(g.group(1)) * int(g.group(2)) * int(g.group(3)) / 4
        out["tensor"] = t
    return out



ELEMENTWISE_OPS_PER_BYTE = 2.0
"""At most this many FP operations per byte through L2, with no matrix product: an elementwise pass (it
touches each element a fixed few times). A tiled product reuses every loaded element across its tile: the
shipped fp32 rungs do 10-56 FP operations per L2 byte; the backward's preprocess (rowsum(dO * O)) and dQ
convert kernels, FA2's and cuDNN's alike, 0.1-0.5, PyTorch's copy and fill kernels at most 1.8."""


def kernel_role(M: KernelMetrics) -> tuple[str | None, dict]:
    """What the kernel does, from what it executed and moved (never from its name): "elementwise" (no
    tensor-core instruction executed, at most ELEMENTWISE_OPS_PER_BYTE FP operations per byte through L2,
    or DRAM where L2 was not counted) or "matrix" (matrix products: tensor instructions, or more FP work
    per byte); None where the report lacks the SASS or memory counters to tell. With the evidence."""
    f = flops(M)
    traffic = {r["level"]: r["bytes"] for r in memory_traffic(M)}
    moved = traffic.get("L2 (lts)") or traffic.get("DRAM")
    if f["tensor"] is None or f["fp32"] is None or not moved:
        return None, {}
    per_byte = (f["fp32"] + (f["fp16"] or 0.0)) / moved
    ev = {"lab__tensor_flops": f["tensor"], "lab__fp_ops_per_byte": rounded(per_byte, 3)}
    return ("elementwise" if not f["tensor"] and per_byte <= ELEMENTWISE_OPS_PER_BYTE else "matrix"), ev


def threads_per_instruction(M: KernelMetrics) -> tuple[float | None, str | None]:
    """Active threads per executed warp instruction (32 = no divergence): WarpStateStats' ratio, else
    the SASS counts (thread-level predicated-on over warp-level) that SourceCounters and
    InstructionStats carry."""
    v = M.num("smsp__thread_inst_executed_per_inst_executed.ratio")
    if v is not None:
        return v, "smsp__thread_inst_executed_per_inst_executed.ratio"
    thr, warp = M.num("sass__thread_inst_executed_true_per_opcode"), M.num("sass__inst_executed_per_opcode")
    if thr is not None and warp:
        return thr / warp, "sass__thread_inst_executed_true_per_opcode / sass__inst_executed_per_opcode"
    return None, None


def local_share(M: KernelMetrics) -> tuple[float | None, dict]:
    """Share of L1 traffic that is thread-local, from the finest counters the report has."""
    for loc_names, glob_names in (
            (("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"),
             ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")),
            (("memory_l2_theoretical_sectors_local",), ("memory_l2_theoretical_sectors_global",)),
            (("sass__inst_executed_local_loads", "sass__inst_executed_local_stores"),
             ("sass__inst_executed_global_loads", "sass__inst_executed_global_stores"))):
        loc = sum_or_none(*(M.num(n) for n in loc_names))
        glob_ = sum_or_none(*(M.num(n) for n in glob_names))
        if loc is not None and glob_ is not None:
            ev = {n: M.num(n) for n in loc_names + glob_names}
            bulk = _bulk_copy_sectors(M)
            if bulk is not None and bulk > glob_:
                # The load/store unit's counters miss what TMA moves (one UTMALDG brings kilobytes): a
                # kernel fed by bulk copies would look local-heavy. Its global side is what L2 served it.
                glob_ = bulk
                ev.update({n: M.num(n) for n in _L2_FROM_SM})
            return (loc / (loc + glob_) if loc + glob_ > 0 else 0.0), ev
    return None, {}


_L2_FROM_SM = ("lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum")


def _bulk_copy_sectors(M: KernelMetrics) -> float | None:
    """The sectors L2 served the SMs, for a kernel that moves data with TMA bulk copies; else None."""
    if not (hopper_async(M) or {}).get("tma"):
        return None
    return sum_or_none(*(M.num(n) for n in _L2_FROM_SM))


def bank_conflict_nway(M: KernelMetrics) -> list[tuple[str, float, dict]]:
    """[(what, n-way, evidence)]: shared-memory wavefronts per ideal wavefront, per loads/stores from
    the L1 counters, else for all shared accesses from SourceCounters' wavefront totals."""
    out = []
    for op, what in (("ld", "loads"), ("st", "stores")):
        w = M.num(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")
        k = M.num(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum")
        if w and k is not None and w > k:
            out.append((what, w / (w - k), {f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum": w,
                                            f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum": k}))
    if not out:
        w, ideal = M.num("memory_l1_wavefronts_shared"), M.num("memory_l1_wavefronts_shared_ideal")
        if w and ideal:
            out.append(("accesses", w / ideal, {"memory_l1_wavefronts_shared": w, "memory_l1_wavefronts_shared_ideal": ideal}))
    return out


def global_bytes_per_sector(M: KernelMetrics) -> list[tuple[str, float, dict]]:
    """[(what, bytes used per 32-byte sector, evidence)] for global loads and stores, else for all
    global accesses from SourceCounters' ideal vs actual L2 sectors."""
    out = []
    for op, what in (("ld", "loads"), ("st", "stores")):
        name = f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio"
        b = M.num(name)
        if b is not None and b > 0:
            out.append((what, b, {name: rounded(b)}))
    if not out:
        act, ideal = M.num("memory_l2_theoretical_sectors_global"), M.num("memory_l2_theoretical_sectors_global_ideal")
        if act and ideal is not None:
            out.append(("accesses", SECTOR_BYTES * ideal / act,
                        {"memory_l2_theoretical_sectors_global": act, "memory_l2_theoretical_sectors_global_ideal": ideal}))
    return out


def global_excess(M: KernelMetrics) -> tuple[float | None, dict, bool]:
    """(share of global L2 sectors that are excessive, evidence, exact). SourceCounters' count of
    excessive sectors (what ncu's UncoalescedGlobalAccess rule reads) is exact: a broadcast (32 lanes,
    one address) uses 4 bytes of its one sector and wastes none. Without it, bytes used per sector
    stand in, and they cannot tell a broadcast from a scattered access (exact=False)."""
    ex, act = M.num("derived__memory_l2_theoretical_sectors_global_excessive"), M.num("memory_l2_theoretical_sectors_global")
    if ex is not None and act:
        return ex / act, {"derived__memory_l2_theoretical_sectors_global_excessive": ex,
                          "memory_l2_theoretical_sectors_global": act}, True
    per = global_bytes_per_sector(M)
    if per:
        used = min(b for _, b, _ in per)
        ev = {}
        for _, _, e in per:
            ev.update(e)
        return 1.0 - used / SECTOR_BYTES, ev, False
    return None, {}, False


def warps_in_flight(M: KernelMetrics) -> dict | None:
    """The kernel's parallelism against the device's: warps launched (CTAs x warps per CTA), the warps
    its occupancy limit lets the SMs hold at once, and the device's warp slots (SMs x max warps per SM).
    `in_flight` is what can run at once; `share_of_slots` is it over the warp slots."""
    grid, block = M.num("launch__grid_size"), M.num("launch__block_size")
    sms = M.num("device__attribute_multiprocessor_count", "launch__sm_count")
    per_sm = M.num("device__attribute_max_warps_per_multiprocessor")
    if not (grid and block and sms and per_sm):
        return None
    wpb = math.ceil(block / 32.0)
    launched = grid * wpb
    slots = sms * per_sm
    theo = M.num("sm__maximum_warps_per_active_cycle_pct")
    _, blocks, _ = occupancy_limiter(M)
    if theo is not None:
        resident = sms * per_sm * theo / 100.0
    elif blocks is not None:
        resident = sms * min(per_sm, blocks * wpb)
    else:
        resident = slots
    in_flight = min(launched, resident)
    return {"warps_per_cta": wpb, "launched": launched, "resident_limit": resident, "slots": slots,
            "in_flight": in_flight, "share_of_slots": in_flight / slots, "grid_limits": launched < resident}


def tensor_path(M: KernelMetrics, device: str | None) -> dict | None:
    """How the kernel's matrix work reaches the tensor cores: 'HMMA' (warp-level mma.sync), 'HGMMA'
    (Hopper's warpgroup wgmma) or None, the tensor pipe's utilization, and on Hopper (compute
    capability 9.x), where mma.sync cannot reach the dense peak that wgmma reaches, `hmma_on_hopper`."""
    ops = tensor_instructions(M)
    if ops is not None:   # per-opcode counts: exact
        has_g = any(op.endswith("GMMA") for op in ops)
        has_h = any(op.startswith("HMMA") for op in ops)
    else:   # the pipe metrics; moves issued to the MMA pipe (HFMA2.MMA) alone reach a few percent
        hmma = M.num("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed") or 0.0
        gmma = M.num("sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed") or 0.0
        has_g, has_h = gmma >= 5.0, hmma >= 5.0 and gmma < 5.0
    if not (has_g or has_h):
        return None
    pipe = M.num("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                 "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_elapsed")
    major = M.num("device__attribute_compute_capability_major")
    return {"instruction": "HGMMA" if has_g else "HMMA", "pipe_pct": pipe, "pipe_metric":
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
            "hmma_on_hopper": bool(has_h and not has_g and major == 9)}


_DTYPE_NAMES = (("bfloat16", re.compile(r"bfloat16|__nv_bfloat16|\bbf16\b")),
                ("float16", re.compile(r"\b__half\b|\bhalf\b|\bfp16\b")),
                ("float32", re.compile(r"\bfloat\b")))


def infer_dtype(kernel_name: str | None) -> str | None:
    """The element type a kernel's demangled name declares (its template arguments or parameter
    types), 16-bit types first since a half kernel also takes float arguments; None when it names none."""
    for dtype, pat in _DTYPE_NAMES:
        if kernel_name and pat.search(kernel_name):
            return dtype
    return None


def tensor_instructions(M: KernelMetrics) -> dict[str, float] | None:
    """Tensor-core instructions executed, by opcode (HMMA, HGMMA, IMMA, ...), or None when the report
    has no per-opcode counts. HFMA2.MMA (an FP16 FMA issued to the MMA pipe) is not one."""
    ops = opcode_counts(M)
    if not ops:
        return None
    return {op: v for op, v in ops.items() if op.endswith("MMA") and v}


def opcode_counts(M: KernelMetrics) -> dict[str, float | None]:
    """SASS instructions executed per opcode (the report's sass__inst_executed_per_opcode
    instances); empty when the report has none."""
    prefix = "sass__inst_executed_per_opcode["
    return {k[len(prefix):-1]: M.num(k) for k in M.row if k.startswith(prefix)}



def hopper_async(M: KernelMetrics) -> dict[str, bool] | None:
    """Hopper's asynchronous machinery in the kernel's SASS, or None without per-opcode counts:
    `tma` (UTMALDG: bulk tensor copies), `mbarrier` (SYNCS), `setmaxnreg` (USETMAXREG: warpgroups
    that trade registers, i.e. a warp-specialised producer/consumer kernel)."""
    ops = opcode_counts(M)
    if not ops:
        return None
    has = lambda *names: any((ops.get(n) or 0) > 0 for n in names)  # noqa: E731
    return {"tma": has("UTMALDG"), "mbarrier": has("SYNCS"), "setmaxnreg": has("USETMAXREG")}


def warp_specialised(M: KernelMetrics, device: str | None) -> bool:
    """Matrix work on wgmma (HGMMA) in warpgroups that trade registers (setmaxnreg): the
    producer/consumer design of FlashAttention-3, which runs few warps per SM on purpose."""
    path = tensor_path(M, device)
    sync = hopper_async(M)
    return bool(path and path["instruction"] == "HGMMA" and sync and sync["setmaxnreg"])

def has_tensor_cores(M: KernelMetrics, device: str | None) -> bool:
    """Compute capability 7.0 and up, except the Turing parts without them."""
    major = M.num("device__attribute_compute_capability_major")
    if major is None:
        return False
    return major >= 7 and not (device and re.search(r"GTX 16|MX\d", device))   # Turing TU11x lacks them


# ----------------------------------------------------------------------------- one kernel's facts

@dataclass
class KernelFacts:
    """What the findings and their advice rest on for one kernel; built by `kernel_facts`."""

    M: KernelMetrics               # the raw metrics, by ncu name
    tp: dict                       # `throughput(M)`: the busiest compute and memory units
    sms: float | None
    ctas: float | None
    busy_fraction: float           # share of SMs with work (1 unless the grid is smaller than the GPU)
    fill: float                    # share of one full wave of resident CTAs the grid provides (at most 1)
    waves: float | None            # launch__waves_per_multiprocessor
    stalls: list
    stall_family: str | None
    local_share: float | None
    problem: dict | None
    device: str | None
    has_tensor_cores: bool
    rung: str | None = None                  # the ladder rung this kernel is (lab.analysis.advice.rung_of)
    launch_overhead_ns: float | None = None  # measured by the run's timeline, where one ran
    source: dict | None = None               # its per-line counters summed (lab.analysis.lines.source_summary)
    issuer_wait_pct: float | None = None     # share of the samples an issuer's waits had, left out of stalls
    overlap: dict | None = None              # what the report shows of each latency-hiding technique (lab.analysis.overlap)
    direction: Direction | None = None       # forward or backward, and how the lab knows (lab.analysis.direction)
    wgmma_serialized: str | None = None      # ptxas's notice for this kernel (the run's build.ptxas): "C7511: <reason>"


def kernel_facts(row: dict, problem: dict | None = None) -> KernelFacts:
    """The facts of one kernel (a row of a `lab.profilers.ncu.load_report` frame); `problem` is the
    lab's problem dict (`Problem.to_dict()`) where it applies to this kernel, else None."""
    M = KernelMetrics(row)
    device = M.text("device__attribute_display_name") or plain(row.get("device"))
    tp = throughput(M)
    sms = M.num("device__attribute_multiprocessor_count", "launch__sm_count")
    ctas = M.num("launch__grid_size")
    busy = min(1.0, ctas / sms) if (ctas and sms) else 1.0
    waves = M.num("launch__waves_per_multiprocessor")
    fill = min(1.0, waves) if waves is not None else busy
    stalls, fam = stall_reasons(M)
    return KernelFacts(M, tp, sms, ctas, busy, fill, waves, stalls, fam, local_share(M)[0], problem, device,
                       has_tensor_cores(M, device))


def without_issuer_waits(c: KernelFacts) -> None:
    """Take an issuer's waits out of c.stalls. In a warp-specialised kernel the warp that issues TMA or
    bulk copies (a producer waiting for a free slot, a writer for a tile to send) waits on purpose: its
    long-scoreboard samples are idle time by design, not a stall of the work. Each reason's value is
    scaled by the share of its sampled PCs that are not an issuer's wait (lab.analysis.lines finds
    them in SASS), and `issuer_wait_pct` says how much of all samples was left out. Nothing changes
    without per-line samples or without such waits."""
    src = c.source or {}
    issuer, sampled = src.get("issuer_wait_stalls") or {}, src.get("stall_samples") or {}
    if not (issuer and c.stalls and src.get("total_samples")):
        return
    kept = [(r, v * (1.0 - min(1.0, issuer.get(r, 0.0) / sampled[r])) if sampled.get(r) else v) for r, v, _ in c.stalls]
    total = sum(v for _, v in kept)
    if total <= 0:
        return
    c.stalls = sorted(((r, v, 100.0 * v / total) for r, v in kept if v > 0), key=lambda t: (-t[1], t[0]))
    c.issuer_wait_pct = 100.0 * src["issuer_wait_samples"] / src["total_samples"]


SHARED_KIND_NAMES = {"wgmma": "wgmma operand reads", "load": "shared loads", "store": "shared stores",
                     "atomic": "shared atomics", "other": "other shared accesses"}


def shared_wavefront_split(c: KernelFacts) -> dict | None:
    """What keeps L1TEX's data pipe busy with shared memory, from SourceCounters' per-instruction
    wavefronts (`memory_l1_wavefronts_shared`, summed by c.source): {"shared_pct_of_pipe": the shared
    part of l1tex__data_pipe_lsu_wavefronts (None where the report lacks the split), "kinds": {kind: % of
    the shared wavefronts} (SHARED_KIND_NAMES; wgmma's operand reads count here: HGMMA reads its shared
    operands through this pipe), "excessive_pct": % of them excessive (bank conflicts)}. None without them."""
    src = c.source or {}
    total = src.get("shared_wavefronts") or 0.0
    if total <= 0:
        return None
    pipe = c.M.num("l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed",
                   "l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed")
    shared = c.M.num("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
                     "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed")
    kinds = {k: 100.0 * v / total for k, v in (src.get("shared_wavefronts_by_kind") or {}).items() if v}
    return {"shared_pct_of_pipe": min(100.0, 100.0 * shared / pipe) if (pipe and shared is not None) else None,
            "kinds": dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
            "excessive_pct": 100.0 * (src.get("excess_shared_wavefronts") or 0.0) / total,
            "wavefronts": total}


def flop_rates(c: KernelFacts) -> dict:
    """Achieved FLOP/s against the device's FP32 and tensor peaks (SASS counts; the problem's FLOPs
    when the lab made the report)."""
    M = c.M
    d = M.num("gpu__time_duration.sum")
    if not d:
        return {}
    f = flops(M)
    peaks = peaks_for(c.device)
    ev = {}
    if f["fp32"] is not None:
        tf = f["fp32"] / d / 1e3
        ev["lab__fp32_tflops"] = rounded(tf, 3)
        if peaks:
            ev["lab__fp32_pct_of_peak"] = rounded(100 * tf / peaks.fp32_tflops, 1)
    if f["tensor"]:
        tf = f["tensor"] / d / 1e3
        ev["lab__tensor_tflops"] = rounded(tf, 2)
        if peaks:
            ev["lab__tensor_pct_of_fp16_peak"] = rounded(100 * tf / peaks.tensor_fp16_tflops, 1)
    if c.problem and c.problem.get("flops"):
        tf = float(c.problem["flops"]) / d / 1e3
        ev["lab__problem_tflops"] = rounded(tf, 2)
        dt = c.problem.get("dtype")
        pct = rates.pct_of_peak(tf, peaks, dt) if dt else None   # no dtype, no peak (never a float32 guess)
        if pct is not None:
            ev[f"lab__problem_pct_of_{'fp32' if dt == 'float32' else 'tensor'}_peak"] = rounded(pct, 2)
    return ev


def duration_shares(durations: list[float | None]) -> list[float | None]:
    """Each kernel's share (percent) of the summed duration of the kernels profiled together; None where
    a duration is unknown (then the shares of the others are of the known total)."""
    known = [d for d in durations if d is not None and d > 0]
    total = sum(known)
    return [rounded(100.0 * d / total, 2) if (d is not None and d > 0 and total) else None for d in durations]


# ----------------------------------------------------------------------------- memory traffic per level

# (level, [(metric names to add, scale, how it is described)]) in order of preference
_MEMORY_LEVELS = (
    ("DRAM", ((("dram__bytes_read.sum", "dram__bytes_write.sum"), 1.0, "dram__bytes_read.sum + dram__bytes_write.sum"),
              (("dram__bytes.sum",), 1.0, "dram__bytes.sum"),
              (("dram__sectors_read.sum", "dram__sectors_write.sum"), SECTOR_BYTES,
               "(dram__sectors_read.sum + dram__sectors_write.sum) x 32 B"))),
    ("L2 (lts)", ((("lts__t_bytes.sum",), 1.0, "lts__t_bytes.sum"),
                  (("lts__t_sectors.sum",), SECTOR_BYTES, "lts__t_sectors.sum x 32 B"))),
    ("L1/TEX global", ((("l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum"),
                        1.0, "l1tex__t_bytes_pipe_lsu_mem_global_op_{ld,st}.sum"),
                       (("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
                        SECTOR_BYTES, "l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum x 32 B"))),
    ("local memory", ((("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"),
                       1.0, "l1tex__t_bytes_pipe_lsu_mem_local_op_{ld,st}.sum"),
                      (("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"),
                       SECTOR_BYTES, "l1tex__t_sectors_pipe_lsu_mem_local_op_{ld,st}.sum x 32 B"))),
)


def memory_traffic(M: KernelMetrics) -> list[dict]:
    """Bytes moved at each memory level the report counts: [{"level", "bytes", "source"}]."""
    out = []
    for level, options in _MEMORY_LEVELS:
        for names, scale, desc in options:
            v = sum_or_none(*(M.num(n) for n in names))
            if v is not None:
                out.append({"level": level, "bytes": v * scale, "source": desc})
                break
    return out


_STALL_UNITS = {
    _STALL_FAMILIES[0].pattern: "warps stalled per issue-active cycle (ncu Warp State Statistics)",
    _STALL_FAMILIES[1].pattern: "average warp latency stalled on each reason (cycles)",
    _STALL_FAMILIES[2].pattern: "PC samples of stalled warps",
}


def derived_values(c: KernelFacts) -> dict:
    """Everything the lab computes from one kernel's metrics, once: what `lab analyze` prints, what
    `lab profile` stores beside the metrics (the `derived` table) and what the pages and `lab compare`
    read back instead of computing it again."""
    M, tp = c.M, c.tp
    lim, lim_blocks, limits = occupancy_limiter(M)
    f = flops(M)
    w = warps_in_flight(M)
    share, _, exact = global_excess(M)
    path = tensor_path(M, c.device)
    fam = c.stall_family
    return {
        "compute_pct_of_peak": rounded(tp["compute_pct"]), "compute_unit": unit_name(tp["compute_metric"] or ""),
        "compute_metric": tp["compute_metric"],
        "memory_pct_of_peak": rounded(tp["memory_pct"]), "memory_unit": unit_name(tp["memory_metric"] or ""),
        "memory_metric": tp["memory_metric"],
        "stalls": [(r, rounded(v, 3), rounded(s, 1)) for r, v, s in c.stalls],
        "stall_metric_family": fam,
        "stall_unit": _STALL_UNITS.get(fam or "", "") + (
            f", without a TMA producer's or bulk writer's mbarrier waits ({c.issuer_wait_pct:.0f}% of the PC samples: "
            "idle by design)" if c.issuer_wait_pct else ""),
        # left out of `stalls`: a TMA producer's or bulk writer's mbarrier waits (idle by design), % of samples
        "issuer_wait_pct": rounded(c.issuer_wait_pct, 1),
        "occupancy_limiter": lim, "occupancy_limit_blocks": lim_blocks,
        "occupancy_limits": {k: v for k, v in limits.items() if v is not None},
        "local_share": rounded(c.local_share, 4),
        "threads_per_instruction": rounded(threads_per_instruction(M)[0]),
        "fp32_flops": f["fp32"], "fp16_flops": f["fp16"], "tensor_flops": f["tensor"],
        "global_excess_sector_share": rounded(share, 4), "global_excess_exact": exact if share is not None else None,
        "bank_conflict_nway": {what: rounded(n, 2) for what, n, _ in bank_conflict_nway(M)},
        "warps": ({k: (rounded(v, 4) if isinstance(v, float) else v) for k, v in w.items()} if w else None),
        "tensor_path": path,
        "memory_traffic": memory_traffic(M),
        "role": kernel_role(M)[0],
        **flop_rates(c),
    }

"""Which techniques for hiding latency behind the matrix products a kernel already shows in its report,
so that a next step names only what is left and says, with the evidence, what is there.

Each detector reads what Nsight Compute recorded (the launch and device attributes, the per-opcode
counts of InstructionStats, the per-PC SASS of SourceCounters through lab.analysis.lines), never a
kernel's source or name:

  * persistent grid: launch__grid_size at least device__attribute_multiprocessor_count and at most one
    wave (SMs x the blocks per SM the launch__occupancy_limit_* allow), and, in the SASS, a loop whose
    body holds global output stores (STG, UTMASTG) and the matrix products or loads, and whose closing
    branch runs more often than the loop is entered: each CTA walks several output tiles. A grid of
    several waves is not (its CTAs may still loop, grid-stride, but wait for a slot like any other).
    Where the grid leaves SMs without a CTA (whether or not its CTAs loop: a grid not sized to the
    machine), or fits one wave without such a loop (every CTA resident from the start with its one tile),
    a tile scheduler is not the lever: the technique is `moot` there, and the grid's size is what a next
    step names (small-grid);
  * output stored by TMA: UTMASTG (cp.async.bulk.tensor from shared to global memory) or UBLKCP.G.S (a
    bulk copy to global) executed; where none is, the output leaves by STG;
  * ping-pong between warpgroups: in a loop that issues wgmma (HGMMA), a BAR.SYNC then a BAR.ARV on
    named barriers (an id other than 0 and a thread count) of two warpgroups or more, before any
    WARPGROUP.DEPBAR, the waited-on barrier computed per warpgroup or also signalled in the loop: the
    warpgroups take turns, so one's softmax runs under the other's products;
  * wgmma kept in flight: a WARPGROUP.DEPBAR.LE gsb0, N with N > 0 (wgmma.wait_group N): the warpgroup
    works on (its softmax) while a product is still on the tensor cores;
  * asynchronous copies into shared memory: LDGSTS (cp.async), UTMALDG (TMA) or UBLKCP executed.

A backward's kernel (lab.analysis.direction: the run's mode, else the lab's NVTX range, else its name) that
does matrix products writes dQ, dK and dV, not O, and its levers are FlashAttention-3's backward's
(hopper/flash_bwd_kernel_sm90.h, mainloop_bwd_sm90_tma_gmma_ws.hpp, epilogue_bwd.hpp), so there:
  * the output stored by TMA is dK and dV (UTMASTG, UBLKCP.G.S), which leave once per K/V tile;
  * dQ added by TMA bulk reductions: its fp32 partial staged in shared memory and added to the global
    accumulator by UTMAREDG or UBLKRED (cp.reduce.async.bulk), which one producer warp can issue while the
    consumers go on, rather than a REDG or ATOMG per element from the consumers; a kernel with no global
    reduction does not accumulate dQ (a pass of its own does): the technique is moot there;
  * ping-pong is not a lever: FlashAttention-3's backward runs two or three consumer warpgroups that split
    each K/V tile (each its rows of S and dP, its columns of dK and dV, exchanging P and dS through shared
    memory) and overlap the five GEMMs inside each warpgroup by keeping wgmma in flight, never taking
    turns. A backward that does take turns is still shown doing so.
The elementwise passes of a backward (preprocess, dQ convert: lab.analysis.metrics.kernel_role) are read as
any other kernel.

Where the report cannot tell (no SourceCounters, so no SASS per PC; no launch or occupancy metrics) a
technique is unknown (`present` None) and the advice says so instead of guessing.

One fact comes from the build, not the report: ptxas's notice that it serialized the kernel's wgmma pipeline
("(C7511) ... wgmma.mma_async instructions are serialized due to insufficient register resources ...",
lab.ladder.build, kept in the run's manifest as build.ptxas[].wgmma_serialized). It then waits after every
product whatever the source asks, so no group stays in flight: the verdict cites it (SERIALIZED_EVIDENCE)
and the overlap advice puts undoing it first (serialized_step).
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from dataclasses import dataclass

from lab.analysis.lines import branch_target, guard, opcode, operands, sass_listing
from lab.analysis.metrics import KernelFacts, kernel_role, occupancy_limiter, opcode_counts

PERSISTENT, TMA_STORE, PINGPONG, WGMMA_IN_FLIGHT, ASYNC_LOADS, DQ_REDUCE = (
    "persistent", "tma_store", "pingpong", "wgmma_in_flight", "async_loads", "dq_reduce")
NAMES = {PERSISTENT: "persistent grid", TMA_STORE: "output stored by TMA", PINGPONG: "ping-pong between warpgroups",
         WGMMA_IN_FLIGHT: "a wgmma group kept in flight", ASYNC_LOADS: "asynchronous copies into shared memory",
         DQ_REDUCE: "dQ added by TMA bulk reductions"}
# a backward's names where they differ from a forward's: its output is dK and dV (dQ is reduced, DQ_REDUCE)
BACKWARD_NAMES = {TMA_STORE: "dK/dV stored by TMA"}
# why ping-pong is not proposed to a backward (lab.analysis.rules say it beside their next steps)
BACKWARD_NO_PINGPONG = ("FlashAttention-3's backward splits each K/V tile across two or three consumer warpgroups "
                        "(each its rows of S and dP, its columns of dK and dV) that overlap the five GEMMs by keeping "
                        "wgmma in flight, without taking turns")
# global reductions: in bulk from shared memory (cp.reduce.async.bulk[.tensor]), and per element
BULK_REDUCTION_OPS = ("UBLKRED", "UTMAREDG")
ELEMENT_REDUCTION_OPS = ("REDG", "ATOMG", "RED", "ATOM")
# global-to-shared copies that run while the warps compute: cp.async (LDGSTS), TMA (UTMALDG), bulk copies
ASYNC_LOAD_OPS = ("LDGSTS", "UTMALDG", "UBLKCP")

# global output writes: plain and generic stores and TMA stores (not reductions: a backward's K/V loop
# reduces dQ on every step of one tile)
OUTPUT_STORES = ("STG", "ST", "UTMASTG")
# the work of a tile: matrix products (any *MMA) and global loads or copies into shared memory
TILE_LOADS = ("UTMALDG", "LDG", "LDGSTS", "LD", "UBLKCP")
NO_SASS = "the report has no SASS per PC (profile with SourceCounters: --set detailed or full)"
_NUMBER = re.compile(r"^0x[0-9a-fA-F]+$|^\d+$")


@dataclass(frozen=True)
class Shown:
    """One technique: whether the report shows it (None: it cannot tell) and the evidence either way."""

    key: str
    present: bool | None
    evidence: str
    moot: str | None = None   # why it cannot help this launch (absent, it would): not proposed then
    label: str | None = None  # its name where a backward's differs (BACKWARD_NAMES)

    @property
    def name(self) -> str:
        return self.label or NAMES[self.key]

    def to_dict(self) -> dict:
        return {"name": self.name, "present": self.present, "evidence": self.evidence,
                **({"moot": self.moot} if self.moot else {})}


@dataclass
class Overlap:
    """What one kernel's report shows of each technique (`shown`, by key), and where its warps wait that
    those techniques address (`waits`: share of all PC samples and the line with most of them, for the
    mbarrier waits other than a TMA issuer's and the warpgroups' waits on their own wgmma; empty without
    SASS)."""

    shown: dict[str, Shown]
    waits: dict
    backward_from: str | None = None   # a backward's kernel that does matrix products: how the lab knows

    def to_dict(self) -> dict:
        return {**{k: s.to_dict() for k, s in self.shown.items()}, "waits": self.waits}


def techniques(c: KernelFacts, k: dict | None) -> Overlap:
    """What the report of one kernel shows (`k`: its lab.analysis.lines.kernel_lines); a backward's kernel
    that does matrix products (c.direction, kernel_role) is read for a backward's techniques."""
    sass = sass_listing(k)
    ops = {op: v for op, v in opcode_counts(c.M).items() if v}
    if c.direction is not None and c.direction.backward and kernel_role(c.M)[0] != "elementwise":
        turns = pingpong(sass)
        if not turns.present:   # shown where a backward takes turns, never proposed to one
            turns = Shown(PINGPONG, turns.present, turns.evidence, moot=BACKWARD_NO_PINGPONG)
        return Overlap({PERSISTENT: persistent(c, sass), TMA_STORE: tma_store(ops, sass, backward=True),
                        DQ_REDUCE: dq_reduce(ops, sass), PINGPONG: turns, WGMMA_IN_FLIGHT: wgmma_in_flight(sass),
                        ASYNC_LOADS: async_loads(ops, sass)}, waits(k, sass), c.direction.told_by)
    return Overlap({PERSISTENT: persistent(c, sass), TMA_STORE: tma_store(ops, sass), PINGPONG: pingpong(sass),
                    WGMMA_IN_FLIGHT: wgmma_in_flight(sass), ASYNC_LOADS: async_loads(ops, sass)}, waits(k, sass))


def waits(k: dict | None, sass: list) -> dict:
    """{"mbarrier_pct", "mbarrier_where"}: the samples of mbarrier waits that are not an issuer's (warps
    waiting for a stage to be loaded: lab.analysis.lines tells them apart), and {"wgmma_pct",
    "wgmma_where"}: those on WARPGROUP.DEPBAR (a warpgroup waiting for its own products), in % of all
    samples, each with its line of most samples. Empty without per-PC samples."""
    total = float((k or {}).get("total_samples") or 0.0)
    if not total or not sass:
        return {}
    per_line = {}
    for r in k.get("lines") or []:
        v = sum((r.get("mbarrier_wait_stalls") or {}).values()) - sum((r.get("issuer_wait_stalls") or {}).values())
        if v > 0:
            where_ = f"{os.path.basename(r['file'])}:{r['line']}" if r.get("file") else r.get("pc")
            per_line[where_] = per_line.get(where_, 0.0) + v
    wg: dict = {}
    for pc, text, _, smp, where_ in sass:
        if smp and opcode(text).startswith("WARPGROUP.DEPBAR"):
            wg[_at(where_, pc)] = wg.get(_at(where_, pc), 0.0) + smp
    out = {}
    for name, d in (("mbarrier", per_line), ("wgmma", wg)):
        out[f"{name}_pct"] = round(100.0 * sum(d.values()) / total, 1)
        out[f"{name}_where"] = max(d, key=d.get) if d else None
    return out


def _n(v: float) -> str:
    return f"{v:,.0f}"


@functools.lru_cache(maxsize=65536)
def _base(text: str) -> str:
    """'@!P0 BAR.SYNC.DEFER_BLOCKING R4, 0x100' -> 'BAR' (every detector asks of every instruction)."""
    return opcode(text).split(".")[0]


def _at(where: str | None, pc: int) -> str:
    return where or hex(pc)


# ----------------------------------------------------------------------------- persistent grid

def tile_loop(sass: list, warps: float) -> dict | None:
    """The loop of a CTA over output tiles, in address order: a branch back (target below it) that ran,
    whose body holds a global output store and a matrix product or load but no EXIT (a retry stub laid
    out after the kernel's exits branches back over all of it), and whose closing branch ran more times
    than the instruction falling into the loop head (the loop was entered that often; without such an
    instruction, than the `warps` launched could each run it once). The largest such loop, or None."""
    best = None
    for head, i in _loops(sass):
        pc, text, ex, _, where = sass[i]
        target = sass[head][0]
        body = sass[head:i + 1]
        stores = [t for t in body if _base(t[1]) in OUTPUT_STORES and t[2]]
        work = [t for t in body if t[2] and (_base(t[1]).endswith("MMA") or _base(t[1]) in TILE_LOADS)]
        if not (stores and work):
            continue
        before = sass[head - 1] if head > 0 else None
        falls_in = (before is not None and before[2] and target - before[0] <= 16
                    and _base(before[1]) not in ("BRA", "JMP", "EXIT", "RET"))
        entries = before[2] if falls_in else None
        if ex <= (entries if entries else warps):
            continue   # ran no more often than it was entered: once per CTA
        loop = {"branch_where": _at(where, pc), "head_where": _at(sass[head][4], sass[head][0]), "runs": ex,
                "entries": entries, "store": opcode(stores[0][1]), "store_where": _at(stores[0][4], stores[0][0])}
        if best is None or len(body) > best[0]:
            best = (len(body), loop)
    return best[1] if best else None


def persistent(c: KernelFacts, sass: list) -> Shown:
    grid, sms = c.ctas, c.sms
    if not (grid and sms):
        return Shown(PERSISTENT, None, "the report has no launch__grid_size or SM count")
    _, per_sm, _ = occupancy_limiter(c.M)
    resident = sms * per_sm if per_sm else None
    shape = (f"launch__grid_size {_n(grid)} on {_n(sms)} SMs x {_n(per_sm)} block(s) per SM" if per_sm else
             f"launch__grid_size {_n(grid)} on {_n(sms)} SMs")
    waves = grid / resident if resident else c.waves
    warps = grid * -(-(c.M.num("launch__block_size") or 32) // 32)
    loop = tile_loop(sass, warps) if sass else None

    def ran(loop: dict) -> str:
        per = f" for {_n(loop['entries'])} entries" if loop["entries"] else f" for {_n(warps)} warps"
        return f"the loop closing at {loop['branch_where']}, around the {loop['store']}, ran {_n(loop['runs'])} times{per}"

    if waves is not None and waves > 1.0 + 1e-9:
        if loop:   # a grid-stride loop: each CTA does several pieces, but the CTAs still queue for slots
            return Shown(PERSISTENT, False, f"{shape}: {waves:.3g} waves; its CTAs loop ({ran(loop)}), but more of them "
                                            "are launched than fit at once")
        return Shown(PERSISTENT, False, f"{shape}: {waves:.3g} waves, one CTA per tile" if sass else
                     f"{shape}: {waves:.3g} waves, more CTAs than fit at once")
    # from here every CTA is resident from the start: without a loop each has its one tile, and a
    # scheduler would have no next tile whose loads could run under an epilogue
    if grid < sms:
        # not a grid sized to the machine, whether or not its CTAs loop (v1 walks its query tiles in one CTA
        # per head): SMs get none, and filling them, not a scheduler, is the lever
        if loop:
            return Shown(PERSISTENT, False, f"{shape}: fewer CTAs than SMs; its CTAs loop over output tiles "
                                            f"({ran(loop)}), but the grid leaves SMs without one",
                         moot=f"fewer CTAs ({_n(grid)}) than SMs ({_n(sms)}): {_n(sms - grid)} SM(s) get none while each "
                              "CTA walks several tiles; more CTAs, each with fewer tiles, is the lever (see small-grid)")
        return Shown(PERSISTENT, False, f"{shape}: fewer CTAs than SMs",
                     moot=f"fewer CTAs ({_n(grid)}) than SMs ({_n(sms)}): {_n(sms - grid)} SM(s) get none, and every "
                          "CTA is resident from the start with its own work, so a tile scheduler has no next tile to "
                          "overlap; more CTAs is the lever (see small-grid)")
    if waves is None:
        return Shown(PERSISTENT, None, f"{shape}, without the occupancy limits that say whether it is one wave")
    if not sass:
        return Shown(PERSISTENT, None, f"{shape} fits one wave, but {NO_SASS} to show whether its CTAs loop over tiles")
    if loop:
        return Shown(PERSISTENT, True, f"{shape}, one wave; its CTAs loop over output tiles: {ran(loop)}")
    return Shown(PERSISTENT, False, f"{shape} fits one wave, but no loop in the SASS runs the output stores more than "
                                    "once per CTA: one tile per CTA",
                 moot=f"all {_n(grid)} CTAs fit one wave, each resident from the start with its one tile, so a tile "
                      "scheduler has no next tile to overlap")


# ----------------------------------------------------------------------------- output stored by TMA

def tma_store(ops: dict, sass: list, backward: bool = False) -> Shown:
    """`ops`: the SASS instructions executed per opcode (lab.analysis.metrics.opcode_counts), nonzero ones.
    A backward's output is dK and dV (its dQ is reduced: dq_reduce)."""
    label, output = (BACKWARD_NAMES[TMA_STORE], "dK and dV") if backward else (None, "the output")
    listed: dict[str, list] = {}
    for pc, text, ex, _, where in sass:
        if ex and _base(text) in ("UTMASTG", "STG", "ST"):
            listed.setdefault(_base(text), []).append(_at(where, pc))
    if not (ops or sass):
        return Shown(TMA_STORE, None, "the report has no per-opcode counts (InstructionStats) and no SASS per PC",
                     label=label)

    def count(op: str) -> float:
        return ops.get(op) or sum(ex for _, t, ex, _, _ in sass if _base(t) == op)

    def places(op: str) -> str:
        got = list(dict.fromkeys(listed.get(op, [])))
        return f" at {', '.join(got[:3])}" if got else ""

    stg = count("STG") + count("ST")
    also = f"; beside {_n(stg)} STG{places('STG')}" if stg else ""   # other outputs (LSE), or part of O: the reader judges
    if count("UTMASTG"):
        return Shown(TMA_STORE, True, f"UTMASTG{places('UTMASTG')}, {_n(count('UTMASTG'))} executed{also}", label=label)
    # a bulk copy without a tensor map: its modifiers say which way (UBLKCP.G.S: to global from shared)
    to_global = [(pc, ex, where) for pc, t, ex, _, where in sass if ex and opcode(t).startswith("UBLKCP.G.")]
    if to_global:
        at = list(dict.fromkeys(_at(w, pc) for pc, _, w in to_global))
        return Shown(TMA_STORE, True, f"UBLKCP.G.S (bulk copy from shared to global) at {', '.join(at[:3])}, "
                                      f"{_n(sum(ex for _, ex, _ in to_global))} executed{also}", label=label)
    if not sass and count("UBLKCP"):
        return Shown(TMA_STORE, None, f"no UTMASTG, but {_n(count('UBLKCP'))} UBLKCP bulk copies, which may carry "
                                      f"{output}: {NO_SASS} to say which way they went", label=label)
    if stg:
        leave = "leaves" if output == "the output" else "leave"
        return Shown(TMA_STORE, False, f"no UTMASTG: {output} {leave} by STG ({_n(stg)} executed{places('STG')})",
                     label=label)
    return Shown(TMA_STORE, False, "no UTMASTG and no STG executed", label=label)


# ----------------------------------------------------------------------------- a backward's dQ

def dq_reduce(ops: dict, sass: list) -> Shown:
    """How a backward's kernel adds its part of dQ to the fp32 accumulator: in bulk from shared memory
    (UTMAREDG, UBLKRED: FlashAttention-3's path), per element (REDG, ATOMG), or not at all (moot: dQ is
    not accumulated in this kernel)."""
    if not (ops or sass):
        return Shown(DQ_REDUCE, None, "the report has no per-opcode counts (InstructionStats) and no SASS per PC")
    found: dict[str, tuple[float, list]] = {}
    for op in BULK_REDUCTION_OPS + ELEMENT_REDUCTION_OPS:
        at = list(dict.fromkeys(_at(w, pc) for pc, t, ex, _, w in sass if ex and _base(t) == op))
        n = ops.get(op) or sum(ex for _, t, ex, _, _ in sass if _base(t) == op)
        if n:
            found[op] = (n, at)

    def said(ops_: tuple[str, ...]) -> str:
        return "; ".join(f"{op}{' at ' + ', '.join(found[op][1][:3]) if found[op][1] else ''}, {_n(found[op][0])} executed"
                         for op in ops_ if op in found)

    if any(op in found for op in BULK_REDUCTION_OPS):
        beside = said(ELEMENT_REDUCTION_OPS)
        return Shown(DQ_REDUCE, True, said(BULK_REDUCTION_OPS) + (f"; beside {beside}" if beside else ""))
    if found:
        return Shown(DQ_REDUCE, False, f"dQ added per element: {said(ELEMENT_REDUCTION_OPS)}")
    return Shown(DQ_REDUCE, False, "no global reduction executed",
                 moot="this kernel does not accumulate dQ with global reductions (a pass of its own may compute it)")


# ----------------------------------------------------------------------------- asynchronous loads

def async_loads(ops: dict, sass: list) -> Shown:
    """Copies into shared memory the warps do not wait on as they issue them, from the SASS where the
    report has it (its modifiers say which way a bulk copy went), else the per-opcode counts."""
    if not (ops or sass):
        return Shown(ASYNC_LOADS, None, "the report has no per-opcode counts (InstructionStats) and no SASS per PC")
    def loads(t: str, op: str) -> bool:   # a bulk copy loads where its destination is shared (UBLKCP.S.G)
        return _base(t) == op and (op != "UBLKCP" or opcode(t).startswith("UBLKCP.S."))

    found = {}
    for op in ASYNC_LOAD_OPS:
        listed = [(pc, ex, w) for pc, t, ex, _, w in sass if ex and loads(t, op)]
        n = sum(ex for _, ex, _ in listed) if sass else ops.get(op)
        if n:
            at = list(dict.fromkeys(_at(w, pc) for pc, _, w in listed))
            found[op] = f"{op}{' at ' + ', '.join(at[:2]) if at else ''}, {_n(n)} executed"
    if found:
        return Shown(ASYNC_LOADS, True, "; ".join(found.values()))
    return Shown(ASYNC_LOADS, False, "no LDGSTS, UTMALDG or UBLKCP into shared memory executed: loads go through registers")


# ----------------------------------------------------------------------------- ping-pong

def _barrier(text: str) -> tuple[str, bool, str | None] | None:
    """('SYNC' | 'ARV' | ..., on a named barrier, its thread count) of a BAR instruction, else None.
    'BAR.SYNC.DEFER_BLOCKING 0x0' is __syncthreads; an id other than 0, or a thread count, names a barrier."""
    op = opcode(text).split(".")
    if op[0] != "BAR" or len(op) < 2:
        return None
    args = operands(text)
    ident, count = (args[0] if args else "0x0"), (args[1] if len(args) > 1 else None)
    named = count is not None or ident not in ("0x0", "0")
    return op[1], named, count


def _loops(sass: list) -> list[tuple[int, int]]:
    """(first, last) index of every loop body in `sass`: a branch that ran, back to a lower address, over
    no unconditional EXIT (a retry stub laid out after the kernel's exits branches back over all of it).
    A predicated EXIT inside is a loop's own way out: a persistent CTA's tile loop leaves by `@!P0 EXIT`
    when its scheduler has no next tile (v9's three-consumer kernel, ptxas 13.0)."""
    pcs = [t[0] for t in sass]
    exits = [i for i, t in enumerate(sass) if _base(t[1]) in ("EXIT", "RET") and guard(t[1]) is None]
    out = []
    for i, (pc, text, ex, _, _) in enumerate(sass):
        target = branch_target(text) if ex and _base(text) in ("BRA", "JMP") else None
        if target is None or target >= pc:
            continue
        head = bisect.bisect_left(pcs, target)
        if not any(head <= e <= i for e in exits[bisect.bisect_left(exits, head):][:1]):
            out.append((head, i))
    return out


def pingpong(sass: list) -> Shown:
    """Turns between warpgroups: in one loop that issues wgmma, a BAR.SYNC and then a BAR.ARV on named
    barriers of the same whole-warpgroup thread count (two warpgroups or more), with no WARPGROUP.DEPBAR
    between them, where the barrier waited on is computed per warpgroup (a register) or is one the loop
    also signals: each warpgroup waits for its turn and passes the other one its own before waiting on its
    products. A consumer's handshake with a producer through named barriers waits on one (full) and
    signals another (empty) once its wgmma have read the stage, so it is not taken for turns."""
    if not sass:
        return Shown(PINGPONG, None, NO_SASS)
    if not any(t[2] and _base(t[1]).endswith("GMMA") for t in sass):
        return Shown(PINGPONG, False, "no warpgroup MMA (HGMMA) in the SASS")
    for first, last in _loops(sass):
        body = [t for t in sass[first:last + 1] if t[2]]
        if not any(_base(t[1]).endswith("GMMA") for t in body):
            continue
        bars = [(b, t) for t in body if (b := _barrier(t[1])) and b[1] and b[2] and _NUMBER.match(b[2])
                and int(b[2], 0) >= 256 and int(b[2], 0) % 128 == 0]
        depbars = [t[0] for t in body if opcode(t[1]).startswith("WARPGROUP.DEPBAR")]
        for count in {b[2] for b, _ in bars}:
            syncs = [(operands(t[1])[0], t) for b, t in bars if b[0] == "SYNC" and b[2] == count]
            arvs = [(operands(t[1])[0], t) for b, t in bars if b[0] == "ARV" and b[2] == count]
            arv_ids = {i for i, _ in arvs}
            for i, s in syncs:
                if _NUMBER.match(i) and i not in arv_ids:
                    continue   # waits on a barrier the loop never signals: a handshake with another role
                # the turn passes on before the warpgroup waits for any product (a consumer releasing a
                # stage its wgmma read would wait for them first)
                nxt = next(((j, a) for j, a in arvs if a[0] > s[0]), None)
                if nxt and not any(s[0] < d < nxt[1][0] for d in depbars):
                    j, a = nxt
                    return Shown(PINGPONG, True, f"in the loop that issues HGMMA, BAR.SYNC {i}, {count} at "
                                                 f"{_at(s[4], s[0])}, then BAR.ARV {j}, {count} at {_at(a[4], a[0])} "
                                                 f"before any WARPGROUP.DEPBAR: warpgroups take turns on named barriers "
                                                 f"of {int(count, 0)} threads")
    if not any(t[2] and (b := _barrier(t[1])) and b[0] == "ARV" and b[1] for t in sass):
        return Shown(PINGPONG, False, "no BAR.ARV on a named barrier in the SASS: no warpgroup passes a turn")
    return Shown(PINGPONG, False, "no turns on named barriers between warpgroups in a loop that issues HGMMA")


# ----------------------------------------------------------------------------- wgmma in flight

def wgmma_in_flight(sass: list) -> Shown:
    if not sass:
        return Shown(WGMMA_IN_FLIGHT, None, NO_SASS)
    waits = [(pc, where, operands(text)) for pc, text, ex, _, where in sass
             if ex and opcode(text).startswith("WARPGROUP.DEPBAR")]
    if not waits:
        return Shown(WGMMA_IN_FLIGHT, False, "no WARPGROUP.DEPBAR (wgmma.wait_group) in the SASS")
    for pc, where, args in waits:
        n = args[-1] if args else ""
        if _NUMBER.match(n) and int(n, 0) > 0:
            return Shown(WGMMA_IN_FLIGHT, True, f"WARPGROUP.DEPBAR.LE {', '.join(args)} at {_at(where, pc)}")
    return Shown(WGMMA_IN_FLIGHT, False, "every WARPGROUP.DEPBAR waits for all wgmma groups (gsb0, 0x0)")


# ----------------------------------------------------------------------------- serialized by ptxas

SERIALIZED_EVIDENCE = "ptxas: wgmma serialized"   # the verdict's evidence key (lab.analysis.findings)
# what undoes each reason ptxas gives (a phrase of its notice -> the step), the first that matches
_UNSERIALIZE = (
    ("register resources", "fewer registers live across the products (a smaller tile per consumer warpgroup, "
                           "fewer values kept beside the accumulators, or setmaxnreg giving the consumers more)"),
    ("accumulator", "no instruction other than a wgmma writing an accumulator between the products' arrive and "
                    "their wait (rescale or zero the accumulator after wgmma.wait_group, or with scale-d)"),
    ("extern", "no call between the products (inline the callee)"),
    ("function boundary", "no call between the products (inline the callee)"),
)


def serialized_step(serialized: str | None) -> str:
    """"ptxas serialized this kernel's wgmma pipeline (C7511: <reason>): ... First: <fix>. " where the
    build's ptxas said so (KernelFacts.wgmma_serialized), else ""."""
    if not serialized:
        return ""
    fix = next((step for phrase, step in _UNSERIALIZE if phrase in serialized.lower()),
               "what ptxas's notice names (the build's ptxas.log)")
    return (f"ptxas serialized this kernel's wgmma pipeline ({serialized}): a wait after every product, whatever "
            f"the source asks, so no overlap below can keep a product in flight until it is undone. First: {fix}. ")


# ----------------------------------------------------------------------------- for the advice

def present(ov: Overlap | None, key: str) -> bool | None:
    """True or False where the report shows whether the kernel uses it; None where it cannot tell."""
    got = ov.shown.get(key) if ov else None
    return None if got is None else got.present


def moot(ov: Overlap | None, key: str) -> str | None:
    """Why the technique cannot help this launch (lab.analysis.overlap.persistent: every CTA resident from
    the start with its one tile), or None: a next step then says so instead of proposing it."""
    got = ov.shown.get(key) if ov else None
    return None if got is None or got.present else got.moot


ALREADY, LEFT = "Already in the report: ", "Left: "
_CITED = re.compile(r" (Lines|SASS at PC): [^ ].*$")


def backward(ov: Overlap | None) -> bool:
    """A backward's kernel that does matrix products (Overlap.backward_from): it hears a backward's levers."""
    return bool(ov and ov.backward_from)


def already(ov: Overlap | None, keys: tuple[str, ...]) -> str:
    """'Already in the report: persistent grid (evidence); ...' for the techniques of `keys` it shows."""
    got = [ov.shown[k] for k in keys if ov and k in ov.shown and ov.shown[k].present]
    return (ALREADY + "; ".join(f"{s.name} ({s.evidence})" for s in got) + ".") if got else ""


def split_advice(advice: str | None) -> tuple[str, str | None]:
    """(the next step with the lines it cites, what it says the kernel already does or None): how the
    terminal view and the run page show an advice built with `already` apart."""
    if not advice:
        return advice or "", None
    cited = _CITED.search(advice)
    text = advice[:cited.start()] if cited else advice
    head, sep, rest = text.partition(" " + ALREADY)
    if not sep:
        return advice, None
    done, sep2, left = rest.partition(" " + LEFT)
    return head + (f" {LEFT}{left}" if sep2 else "") + (cited.group(0) if cited else ""), done


def untold(ov: Overlap | None, key: str) -> str:
    """' (the report cannot tell whether it already does: why)' for a technique it cannot judge."""
    got = ov.shown.get(key) if ov else None
    return f" (the report cannot tell whether it already does: {got.evidence})" if got and got.present is None else ""

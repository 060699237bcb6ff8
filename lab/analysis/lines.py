"""Per-source-line evidence: the report's per-PC counters (Nsight's SourceCounters section) summed
per CUDA source line, so that a finding can point at the code behind it.

ncu_report gives every source-correlated metric one instance per PC (`metric.correlation_ids()`),
`action.source_info(pc)` the file and line of a PC where the kernel was built with `-lineinfo`, and
`action.sass_by_pc(pc)` its SASS instruction. Per line this module adds up: warp-state samples by
stall reason (`smsp__pcsamp_warps_issue_stalled_*`), all samples (`smsp__pcsamp_sample_count`),
warp instructions executed (`inst_executed`), excessive L2 sectors of global accesses
(`derived__memory_l2_theoretical_sectors_global_excessive`: what ncu's UncoalescedGlobalAccess rule
counts; a broadcast wastes none), excessive shared-memory wavefronts
(`derived__memory_l1_wavefronts_shared_excessive`: bank conflicts), divergent branch targets
(`smsp__branch_targets_threads_divergent`), the local-memory instructions (LDL/STL) executed, and the
traffic a throughput verdict rests on: shared-memory wavefronts of the L1TEX data pipe
(`memory_l1_wavefronts_shared`, split by what makes them: wgmma operand reads, loads, stores, atomics)
and the L2 sectors of global accesses (`memory_l2_theoretical_sectors_global`).

Pipeline waits: samples on an mbarrier wait (the try_wait spin: SYNCS.PHASECHK, the branch on its
predicate, the YIELD of its retry loop) are a warp waiting for a stage of a pipeline, not work of a
unit: they are counted apart per line (`mbarrier_wait_stalls`), and so are those of an issuer's wait
(`issuer_wait_stalls`): a wait whose next act in SASS order is a TMA or bulk copy (a producer waiting
for a free slot, a writer for a tile to send), which in a warp-specialised kernel is idle by design.
A finding about a unit's throughput never cites them; a latency finding never cites an issuer's.

An inlined helper (an `mma` wrapper in common.cuh) counts at its own line: ncu_report (2025.3 and
the 2026.3 wheel) gives only the innermost file and line of a PC (ISourceInfo), not the inline
chain. So each helper instruction is attributed to the kernel-file line before it in address
order: the helper line's `called_from` lists those lines (most instructions first, with their
instructions and samples) and a kernel line's `inlined_samples` counts the helper samples that
follow it. That is an inference from the SASS layout: where the compiler interleaves a helper's
instructions with other work (the next tile's HMMAs among the softmax), a neighbouring line is
named too.

The function's code (`code`: its SASS instructions and bytes, and the hot part that executes 90% of the
warp instructions) comes from the PCs of `inst_executed`, which has an instance for every instruction of
the function, executed or not (lab.analysis.code).

Without `-lineinfo` there is no line: each PC becomes its own row (file and line null, `pc` set,
its SASS) and the status says why. A report without SourceCounters has no per-PC counters at all:
the status names the flag that records them. Both keep the analysis running (exit 0).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import defaultdict
from pathlib import Path

import pandas as pd

from lab.analysis import code


SAMPLES = "smsp__pcsamp_sample_count"
STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
COUNTERS = {   # the contract's field -> the per-PC ncu metric it sums
    "inst_executed": "inst_executed",
    "excess_global_sectors": "derived__memory_l2_theoretical_sectors_global_excessive",
    "excess_shared_wavefronts": "derived__memory_l1_wavefronts_shared_excessive",
    "divergent_branches": "smsp__branch_targets_threads_divergent",
    "shared_wavefronts": "memory_l1_wavefronts_shared",
    "global_sectors": "memory_l2_theoretical_sectors_global",
}
# What makes a shared-memory wavefront, by the SASS opcode behind it: a warpgroup MMA reads its shared
# operands through the L1TEX data pipe as LDS does (HGMMA 64xNx16 with both operands in shared memory:
# 8 wavefronts per warp, A's 2 KB and B's N x 32 bytes per warpgroup)
SHARED_KINDS = ("wgmma", "load", "store", "atomic", "other")
# mbarrier.try_wait/test_wait in SASS, and the copies an issuer (a TMA producer, a bulk-reduction writer) starts
WAIT_OPCODE = "SYNCS.PHASECHK"
ISSUE_OPCODES = ("UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UBLKCP", "UBLKRED", "UBLKPF", "LDGSTS")
# what a consumer does with a stage once it has waited for it
CONSUME_OPCODES = ("LDS", "LDSM", "LDG", "LD", "LDL", "STS", "STSM", "STG", "ST", "STL", "ATOMS", "ATOMG", "ATOM",
                   "RED", "REDG")
GATE_SCAN = 512  # instructions after a wait searched for what it gates (a prologue zeroes accumulators first)
LOCAL_OPCODES = ("LDL", "STL")
MISSING_HINT = ("per-line data needs Nsight's SourceCounters section: profile with `--set detailed` (the lab's "
                "default), `--set full` or `--section SourceCounters`, and build with -lineinfo")
NO_LINEINFO_NOTE = ("the kernel was built without -lineinfo, so the counters are per SASS instruction (PC), not per "
                    "source line: rebuild with nvcc -lineinfo for source lines")
TOP_OPCODES = 4


def opcode(sass: str) -> str:
    """The mnemonic of one SASS instruction text: '@P1 BRA 0x..' -> 'BRA', 'HMMA.16816.F32 R1..' -> 'HMMA.16816.F32'."""
    parts = sass.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].rstrip(";") if parts else ""


def shared_kind(op: str) -> str:
    """What a shared-memory wavefront of this instruction is: 'wgmma' (an operand read of a warpgroup MMA),
    'load', 'store', 'atomic' or 'other'."""
    base = op.split(".")[0]
    if base.endswith("MMA"):   # a warpgroup MMA (HGMMA, IGMMA, QGMMA) or a later MMA reading shared operands
        return "wgmma"
    if base.startswith("LD"):
        return "load"
    if base.startswith("ST"):
        return "store"
    if base.startswith(("ATOM", "RED")):
        return "atomic"
    return "other"


def operands(sass: str) -> list[str]:
    """The operands of one SASS instruction: 'BAR.SYNC.DEFER_BLOCKING R4, 0x100' -> ['R4', '0x100']."""
    words = sass.strip().rstrip(";").split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return [w.strip() for w in " ".join(words[1:]).split(",") if w.strip()]


def guard(sass: str) -> str | None:
    """The predicate guarding an instruction: '@!P0 BRA ..' -> '!P0'."""
    first = sass.split()[0] if sass.split() else ""
    return first[1:] if first.startswith("@") else None


def branch_target(sass: str) -> int | None:
    m = re.search(r"\b(?:BRA|JMP)\S*\s+(0x[0-9a-fA-F]+)", sass)
    return int(m.group(1), 16) if m else None


def mbarrier_waits(order: list[int], sass: dict[int, str]) -> dict[int, str]:
    """The PCs of mbarrier waits, each with the role of its wait: 'issuer' where the next act after it
    (in address order, following unconditional branches: a retry loop branches back) starts a TMA or bulk
    copy, 'consumer' where it reads or writes memory or runs an MMA, else 'unknown'. A wait is its
    SYNCS.PHASECHK, the branch on that predicate within the next instructions, and a YIELD or
    NANOSLEEP right before it (the retry loop's)."""
    at = {pc: i for i, pc in enumerate(order)}

    def gated(i: int) -> str:
        seen: set[int] = set()
        j, steps = i + 1, 0
        while j < len(order) and steps < GATE_SCAN:
            text = sass.get(order[j], "")
            base = opcode(text).split(".")[0]
            steps += 1
            if base in ISSUE_OPCODES:
                return "issuer"
            if base.endswith("MMA") or base in CONSUME_OPCODES:
                return "consumer"
            if base in ("EXIT", "RET"):
                return "unknown"
            if base in ("BRA", "JMP") and guard(text) is None:
                target = branch_target(text)
                if target is None or target in seen or target not in at:
                    return "unknown"
                seen.add(target)
                j = at[target]
                continue
            j += 1
        return "unknown"

    out: dict[int, str] = {}
    for i, pc in enumerate(order):
        text = sass.get(pc, "")
        if not opcode(text).startswith(WAIT_OPCODE):
            continue
        role = gated(i)
        out[pc] = role
        words = text.split()[1:] if guard(text) is None else text.split()[2:]
        pred = words[0].rstrip(",") if words else ""   # its destination predicate
        for j in range(i + 1, min(i + 9, len(order))):
            t = sass.get(order[j], "")
            if pred and opcode(t).split(".")[0] in ("BRA", "JMP") and (guard(t) or "").lstrip("!") == pred:
                out[order[j]] = role
                break
        if i and opcode(sass.get(order[i - 1], "")).split(".")[0] in ("YIELD", "NANOSLEEP"):
            out[order[i - 1]] = role
    return out


def _per_pc(metric) -> dict[int, float]:
    n = metric.num_instances()
    if not n or not metric.has_correlation_ids():
        return {}
    ids = metric.correlation_ids()
    # the typed getter directly: IMetric.value() re-reads the kind on every call (a third of the time)
    kind = metric.kind()
    get = metric.as_uint64 if kind in (metric.ValueKind_UINT64, metric.ValueKind_UINT32) else metric.as_double
    id_get = ids.as_uint64 if ids.kind() in (ids.ValueKind_UINT64, ids.ValueKind_UINT32) else None
    if id_get is None:
        return {}
    out = {}
    for i in range(n):
        v = get(i)
        if v:
            pc = id_get(i)
            out[pc] = out.get(pc, 0) + float(v)
    return out


def _pcs(metric) -> list[int]:
    """The PCs a per-PC metric has an instance for, zero values included."""
    ids = metric.correlation_ids() if metric.num_instances() and metric.has_correlation_ids() else None
    if ids is None or ids.kind() not in (ids.ValueKind_UINT64, ids.ValueKind_UINT32):
        return []
    return [ids.as_uint64(i) for i in range(metric.num_instances())]


def _short(path: str | None) -> str | None:
    return None if path is None else os.path.basename(path)


def kernel_lines(action, sass_cache: dict | None = None) -> dict:
    """One kernel's per-line table: {"status": "ok" | "no-lineinfo" | "no-source-counters", "note",
    "total_samples", "lines": [line dicts, most samples first], "instructions": {line key: [[pc, sass,
    inst_executed, samples], ...]}, "files": [files named]}."""
    names = set(action.metric_names())
    samples_m = action.metric_by_name(SAMPLES) if SAMPLES in names else None
    if samples_m is None or not samples_m.num_instances():
        return {"status": "no-source-counters", "note": "the report has no per-PC counters; " + MISSING_HINT,
                "total_samples": 0, "lines": [], "instructions": {}, "files": []}
    samples = _per_pc(samples_m)
    stalls = {}
    for n in names:
        if n.startswith(STALL_PREFIX) and not n.endswith("_not_issued"):
            m = action.metric_by_name(n)
            if not m.value():   # the sum over PCs: a reason no warp stalled on
                continue
            vals = _per_pc(m)
            if vals:
                stalls[n[len(STALL_PREFIX):]] = vals
    counters = {field: (_per_pc(action.metric_by_name(m)) if m in names else {}) for field, m in COUNTERS.items()}
    # every instruction of the function, executed or not (inst_executed has an instance for each): its code
    code_pcs = _pcs(action.metric_by_name(COUNTERS["inst_executed"])) if COUNTERS["inst_executed"] in names else []
    pcs = set(samples) | set(counters["inst_executed"])
    for d in counters.values():
        pcs |= set(d)
    # sass_by_pc disassembles (0.25 ms a call): launches of one function share their PCs' answers
    cache = sass_cache if sass_cache is not None else {}
    fn = action.name(action.NameBase_MANGLED) if hasattr(action, "NameBase_MANGLED") else action.name()
    info = {}
    for pc in pcs:
        got = cache.get((fn, pc))
        if got is None:
            si = action.source_info(pc)
            got = cache[(fn, pc)] = (si.file_name() if si else None, si.line() if si else None,
                                     (action.sass_by_pc(pc) or "").strip())
        info[pc] = got
    have_lines = any(f for f, _, _ in info.values())
    total = sum(samples.values())

    order = sorted(pcs)
    waits = mbarrier_waits(order, {pc: info[pc][2] for pc in order})

    rows: dict = {}
    instructions: dict = defaultdict(list)
    for pc in order:
        f, ln, sass = info[pc]
        key = (f, ln) if have_lines else (None, pc)
        r = rows.get(key)
        if r is None:
            r = rows[key] = {"file": f if have_lines else None, "line": ln if have_lines else None,
                             "samples": 0.0, "stalls": defaultdict(float), "inst_executed": 0.0,
                             "excess_global_sectors": 0.0, "excess_shared_wavefronts": 0.0,
                             "divergent_branches": 0.0, "local_inst_executed": 0.0, "shared_wavefronts": 0.0,
                             "global_sectors": 0.0, "shared_wavefronts_by_kind": defaultdict(float),
                             "mbarrier_wait_stalls": defaultdict(float), "issuer_wait_stalls": defaultdict(float),
                             "_ops": defaultdict(float)}
            if not have_lines:
                r["pc"] = hex(pc)
        s = samples.get(pc, 0.0)
        r["samples"] += s
        for reason, vals in stalls.items():
            if pc in vals:
                r["stalls"][reason] += vals[pc]
        for field in COUNTERS:
            r[field] += counters[field].get(pc, 0.0)
        ex = counters["inst_executed"].get(pc, 0.0)
        op = opcode(sass)
        wf = counters["shared_wavefronts"].get(pc, 0.0)
        if wf:
            r["shared_wavefronts_by_kind"][shared_kind(op)] += wf
        role = waits.get(pc)
        if role is not None:
            for reason, vals in stalls.items():
                if pc in vals:
                    r["mbarrier_wait_stalls"][reason] += vals[pc]
                    if role == "issuer":
                        r["issuer_wait_stalls"][reason] += vals[pc]
        if op.split(".")[0] in LOCAL_OPCODES:
            r["local_inst_executed"] += ex
        if op:
            r["_ops"][op] += ex or s or 1e-9
        instructions[_key_text(r)].append([hex(pc), sass, ex, s])

    # inlined helpers: each helper instruction goes to the kernel-file line before it in address order
    # (see the module doc); a helper line lists those lines, most instructions first, and a calling
    # line counts the helper's samples it leads to as `inlined_samples`
    main_file = _main_file(info) if have_lines else None
    if main_file:
        last = None
        for pc in sorted(pcs):
            f, ln, _ = info[pc]
            if f == main_file:
                last = ln
            elif f and last is not None:
                callers = rows[(f, ln)].setdefault("_callers", defaultdict(lambda: [0.0, 0.0]))
                callers[last][0] += counters["inst_executed"].get(pc, 0.0)
                callers[last][1] += samples.get(pc, 0.0)
                caller = rows.get((main_file, last))
                if caller is not None:
                    caller["inlined_samples"] = caller.get("inlined_samples", 0.0) + samples.get(pc, 0.0)

    out = []
    for r in rows.values():
        ops = r.pop("_ops")
        callers = r.pop("_callers", None)
        r["stalls"] = {k: v for k, v in sorted(r["stalls"].items(), key=lambda kv: (-kv[1], kv[0])) if v}
        for key in ("shared_wavefronts_by_kind", "mbarrier_wait_stalls", "issuer_wait_stalls"):
            r[key] = {k: v for k, v in sorted(r[key].items(), key=lambda kv: (-kv[1], kv[0])) if v}
        r["samples_pct"] = round(100.0 * r["samples"] / total, 2) if total else 0.0
        r["sass"] = [o for o, _ in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_OPCODES]]
        if callers:
            total_ex = sum(ex for ex, _ in callers.values()) or 1.0
            r["called_from"] = [{"file": main_file, "line": c, "inst_executed": ex, "samples": smp}
                                for c, (ex, smp) in sorted(callers.items(), key=lambda kv: -kv[1][0])
                                if ex >= 0.05 * total_ex]
        out.append(r)
    out.sort(key=lambda r: (-r["samples"], -r["inst_executed"]))
    status = "ok" if have_lines else "no-lineinfo"
    return {"status": status, "note": None if have_lines else NO_LINEINFO_NOTE, "total_samples": total,
            "lines": out, "instructions": dict(instructions), "files": sorted({f for f, _, _ in info.values() if f}),
            "mbarrier_waits": {hex(pc): role for pc, role in waits.items()},
            "code": code.footprint(code_pcs, counters["inst_executed"])}


def _key_text(r: dict) -> str:
    return r["pc"] if r.get("pc") else f"{r['file']}:{r['line']}"


def _main_file(info: dict) -> str | None:
    """The kernel's own file: the one holding the entry (lowest PC) of the function."""
    for pc in sorted(info):
        if info[pc][0]:
            return info[pc][0]
    return None


@functools.lru_cache(maxsize=8)
def _report_lines_cached(path_str: str, size: int, mtime_ns: int) -> tuple:
    from lab.profilers import ncu

    rep = ncu._open_cached(path_str, size, mtime_ns)
    cache: dict = {}
    return tuple(kernel_lines(action, cache) for _, action in rep.actions)


def report_lines(path: str | os.PathLike) -> list[dict]:
    """`kernel_lines` of every kernel of a report, in the report's order (kernel_index)."""
    from lab.errors import LabError

    p = Path(path)
    if not p.exists():
        raise LabError(f"no such file: {p}")
    st = p.stat()
    return list(_report_lines_cached(str(p.resolve()), st.st_size, st.st_mtime_ns))


def source_texts(path: str | os.PathLike) -> dict[str, str]:
    """The source files the report imported (`ncu --import-source yes`), by the path ncu recorded;
    files it names without content are left out."""
    from lab.profilers import ncu

    out = {}
    for _, action in ncu.open_report(path).actions:
        try:
            files = action.source_files()
        except Exception:   # an older ncu_report without the call: no imported sources
            return out
        for name in files:
            text = files[name]
            if text and name not in out:
                out[str(name)] = str(text)
    return out


# ----------------------------------------------------------------------------- views

def json_lines(k: dict, limit: int | None = None) -> list[dict]:
    """The DESIGN.md contract's `lines` list of one kernel (from `kernel_lines` or a stored table)."""
    keys = ("file", "line", "samples_pct", "stalls", "inst_executed", "excess_global_sectors",
            "excess_shared_wavefronts", "divergent_branches", "local_inst_executed", "shared_wavefronts",
            "shared_wavefronts_by_kind", "global_sectors", "mbarrier_wait_stalls", "issuer_wait_stalls", "sass",
            "inlined_samples")
    out = []
    for r in k["lines"][:limit]:
        d = {key: ({n: _num(v) for n, v in r[key].items()} if isinstance(r.get(key), dict) else _num(r.get(key)))
             for key in keys}
        if r.get("pc"):
            d["pc"] = r["pc"]
        if r.get("called_from"):
            d["called_from"] = r["called_from"]
        out.append(d)
    return out


def _num(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def cite(k: dict | None, by: str, n: int = 3, reason: str | None = None, opcodes: tuple[str, ...] = (),
         kind: str | None = None, skip_waits: str | None = None) -> list[dict]:
    """The top `n` lines of one kernel by a counter (a COUNTERS field, "samples", "local_inst_executed"),
    by the samples of one stall `reason`, by the instructions of some `opcodes` (counted per instruction),
    or by the shared-memory wavefronts of one `kind` (SHARED_KINDS): what a finding cites. `skip_waits`
    ("mbarrier": every pipeline wait, "issuer": an issuer's) leaves those waits' samples out."""
    if not k or not k.get("lines"):
        return []
    by_line = k.get("instructions") or {}

    def waited(r, why=None):
        d = r.get(f"{skip_waits}_wait_stalls") or {} if skip_waits else {}
        return d.get(why, 0.0) if why else sum(d.values())

    def of_opcodes(r):
        ins = by_line.get(_key_text(r))
        if not ins:   # a stored table without its instructions: the line's whole count, where it runs them
            return r["inst_executed"] if any(o.split(".")[0] in opcodes for o in r["sass"]) else 0.0
        return sum(ex or 0.0 for _, sass, ex, _ in ins if opcode(sass).split(".")[0] in opcodes)

    def value(r):
        if reason:
            return r["stalls"].get(reason, 0.0) - waited(r, reason)
        if opcodes:
            return of_opcodes(r)
        if kind:
            return (r.get("shared_wavefronts_by_kind") or {}).get(kind, 0.0)
        v = r.get(by) or 0.0
        return v - waited(r) if by == "samples" else v

    ranked = sorted((r for r in k["lines"] if value(r) > 0), key=lambda r: -value(r))[:n]
    what = reason or ("inst_executed" if opcodes else by)
    out = []
    for r in ranked:
        c = {"file": _short(r["file"]), "line": r["line"], **({"pc": r["pc"]} if r.get("pc") else {}),
             "metric": what, "value": _num(round(value(r), 2))}
        if kind:
            c["kind"] = kind
        if r.get("called_from"):   # an inlined helper's line: the kernel lines it runs for
            c["called_from"] = [{"file": _short(x["file"]), "line": x["line"]} for x in r["called_from"][:3]]
        out.append(c)
    return out


def executed_pcs(k: dict | None, cited: dict) -> list[int]:
    """The PCs of the executed instructions of one line `cite` named (by file name and line, or by PC
    without -lineinfo), from `kernel_lines`' per-line instructions; empty where they are not at hand."""
    if not k:
        return []
    for r in k.get("lines") or []:
        if (r.get("pc") or None) == cited.get("pc") and r.get("line") == cited.get("line") \
                and _short(r.get("file")) == cited.get("file"):
            return [int(pc, 16) for pc, _, ex, _ in (k.get("instructions") or {}).get(_key_text(r), []) if ex]
    return []


def sass_listing(k: dict | None) -> list[tuple[int, str, float, float, str | None]]:
    """Every executed (or sampled) instruction of one kernel in address order: (pc, SASS text, warp
    instructions executed, samples, where: 'file.cu:123', or None without -lineinfo), read back from
    `kernel_lines`' per-line instructions. Empty where the report has no per-PC counters."""
    if not k:
        return []
    out = []
    for key, ins in (k.get("instructions") or {}).items():
        file, _, line = key.rpartition(":")
        where_ = f"{os.path.basename(file)}:{line}" if file and file != "None" and line != "None" else None
        for pc, sass, ex, smp in ins:
            out.append((int(pc, 16), sass, float(ex or 0.0), float(smp or 0.0), where_))
    out.sort(key=lambda t: t[0])
    return out


def divides_at_run_time(ops: list[str]) -> bool:
    """Whether a line's SASS (its instructions' mnemonics) holds an integer division by a value known only at run
    time: ptxas seeds the quotient with the divisor's float reciprocal (I2F.RP or I2F.U32.RP, then MUFU.RCP), then
    refines it with IMAD.HI and corrections. A float division's reciprocal has no I2F.RP before it, and a division by
    a constant compiles to a multiply and a shift."""
    return any(o.startswith("I2F") and ".RP" in o for o in ops) and any(o.startswith("MUFU.RCP") for o in ops)


def _line_ops(k: dict, r: dict) -> list[str]:
    """Every instruction mnemonic of line `r` (its stored top opcodes where the table has no instructions)."""
    ins = (k.get("instructions") or {}).get(_key_text(r))
    return [opcode(sass) for _, sass, _, _ in ins] if ins else list(r.get("sass") or [])


def division_lines(k: dict | None) -> dict | None:
    """`k` with only its lines that divide integers by run-time values (divides_at_run_time), for `cite`."""
    if not k or not k.get("lines"):
        return None
    return {**k, "lines": [r for r in k["lines"] if divides_at_run_time(_line_ops(k, r))]}


def source_summary(k: dict | None) -> dict | None:
    """One kernel's per-line counters summed: shared-memory wavefronts by kind, their excessive part,
    global L2 sectors, all samples and those of pipeline waits (mbarrier, issuer), the samples of each
    stall reason and an issuer's waits' share of them, and the function's code (`code`: its SASS size and
    hot part, lab.analysis.code.footprint; None in a table stored without it), and the samples and count of the
    lines that divide integers by run-time values (`integer_division_samples`, `integer_division_lines`). None
    without lines."""
    if not k or not k.get("lines"):
        return None
    kinds: dict = defaultdict(float)
    out = {"total_samples": float(k.get("total_samples") or 0.0), "shared_wavefronts": 0.0,
           "excess_shared_wavefronts": 0.0, "global_sectors": 0.0, "mbarrier_wait_samples": 0.0,
           "issuer_wait_samples": 0.0}
    stalls: dict = defaultdict(float)
    issuer: dict = defaultdict(float)
    for r in k["lines"]:
        for why, v in (r.get("stalls") or {}).items():
            stalls[why] += v
        for why, v in (r.get("issuer_wait_stalls") or {}).items():
            issuer[why] += v
        for kd, v in (r.get("shared_wavefronts_by_kind") or {}).items():
            kinds[kd] += v
        for key in ("shared_wavefronts", "excess_shared_wavefronts", "global_sectors"):
            out[key] += r.get(key) or 0.0
        out["mbarrier_wait_samples"] += sum((r.get("mbarrier_wait_stalls") or {}).values())
        out["issuer_wait_samples"] += sum((r.get("issuer_wait_stalls") or {}).values())
    out["shared_wavefronts_by_kind"] = dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    out["stall_samples"], out["issuer_wait_stalls"] = dict(stalls), dict(issuer)
    out["code"] = k.get("code")   # the function's SASS size and hot part (lab.analysis.code.footprint)
    # the lines that divide integers by run-time values (divides_at_run_time): their samples, an issuer's waits left out
    dividing = division_lines(k)["lines"]
    out["integer_division_samples"] = sum((r.get("samples") or 0.0) - sum((r.get("issuer_wait_stalls") or {}).values())
                                          for r in dividing)
    out["integer_division_lines"] = len(dividing)
    return out


def where(cited: list[dict]) -> str:
    """'v1_naive.cu:103, 119' for a finding's text."""
    if not cited:
        return ""
    by_file: dict = {}
    for c in cited:
        by_file.setdefault(c["file"], []).append(str(c["line"]) if c.get("line") is not None else c.get("pc", "?"))
    return "; ".join(f"{f}:{', '.join(ls)}" if f else ", ".join(ls) for f, ls in by_file.items())


# ----------------------------------------------------------------------------- the stored table

LINE_COLUMNS = ["kernel_index", "rank", "file", "line", "pc", "samples", "samples_pct", "stalls", "inst_executed",
                "excess_global_sectors", "excess_shared_wavefronts", "divergent_branches", "local_inst_executed",
                "shared_wavefronts", "shared_wavefronts_by_kind", "global_sectors", "mbarrier_wait_stalls",
                "issuer_wait_stalls", "sass", "called_from", "instructions", "status", "note"]


def lines_frame(per_kernel: list[dict], max_lines: int = 400) -> pd.DataFrame:
    """One row per (kernel, source line), most samples first; dicts and lists as JSON strings. A
    kernel without lines keeps one row carrying its status and note."""
    rows = []
    for idx, k in enumerate(per_kernel):
        if not k["lines"]:
            rows.append({"kernel_index": idx, "rank": -1, "status": k["status"], "note": k["note"]})
            continue
        for rank, r in enumerate(k["lines"][:max_lines]):
            rows.append({"kernel_index": idx, "rank": rank, "file": r["file"], "line": r["line"], "pc": r.get("pc"),
                         "samples": r["samples"], "samples_pct": r["samples_pct"], "stalls": json.dumps(r["stalls"]),
                         "inst_executed": r["inst_executed"], "excess_global_sectors": r["excess_global_sectors"],
                         "excess_shared_wavefronts": r["excess_shared_wavefronts"],
                         "divergent_branches": r["divergent_branches"], "local_inst_executed": r["local_inst_executed"],
                         "shared_wavefronts": r["shared_wavefronts"], "global_sectors": r["global_sectors"],
                         **{key: json.dumps(r[key]) for key in ("shared_wavefronts_by_kind", "mbarrier_wait_stalls",
                                                                "issuer_wait_stalls")},
                         "sass": json.dumps(r["sass"]), "called_from": json.dumps(r.get("called_from") or []),
                         "instructions": json.dumps(k["instructions"].get(_key_text(r), [])),
                         "status": k["status"], "note": k["note"]})
    df = pd.DataFrame(rows, columns=LINE_COLUMNS)
    for c in ("kernel_index", "rank"):
        df[c] = df[c].astype("int64")
    for c in ("line",):
        df[c] = df[c].astype("Int64")
    for c in ("samples", "samples_pct", "inst_executed", "excess_global_sectors", "excess_shared_wavefronts",
              "divergent_branches", "local_inst_executed", "shared_wavefronts", "global_sectors"):
        df[c] = df[c].astype("float64")
    return df


# ----------------------------------------------------------------------------- terminal view

def source_line(sources: dict[str, str], file: str | None, line: int | None) -> str | None:
    """The text of one source line: from the sources imported into the report, else the file on disk
    (matched by its path, then by its name)."""
    if not file or not line:
        return None
    text = sources.get(file)
    if text is None:
        base = os.path.basename(file)
        text = next((t for f, t in sources.items() if os.path.basename(f) == base), None)
    if text is None and os.path.isfile(file):
        try:
            text = Path(file).read_text(errors="replace")
        except OSError:
            text = None
    if text is None:
        return None
    rows = text.splitlines()
    return rows[line - 1] if 0 < line <= len(rows) else None


def render_lines(analyses, n: int, sources: dict[str, str], console=None) -> None:
    """The `n` hottest lines of each kernel: samples, the top stalls, the counters that flag a cause,
    the SASS opcodes, and the code."""
    from rich.text import Text

    from lab.console import rich_console

    console = console or rich_console()
    if not sources:
        console.print("note: the report carries no source (ncu --import-source yes records it): the code below is "
                      "read from the files on disk today, which may have changed since the profile", style="yellow",
                      highlight=False)
    for a in analyses:
        k = a.lines or {}
        console.print(Text(f"[{a.kernel_index}] hot lines of {a.kernel[:120]}", style="bold"))
        if not k.get("lines"):
            console.print(f"    {k.get('note') or 'no per-line data'}", highlight=False)
            continue
        if k.get("note"):
            console.print(f"    {k['note']}", style="dim", highlight=False)
        for r in k["lines"][:n]:
            where_ = f"{_short(r['file'])}:{r['line']}" if r.get("line") is not None else r.get("pc", "?")
            stalls = ", ".join(f"{s.replace('_', ' ')} {v:,.0f}" for s, v in list(r["stalls"].items())[:3])
            flags = [f"{label} {r[key]:,.0f}" for key, label in (("shared_wavefronts", "shared wavefronts"),
                                                                 ("excess_global_sectors", "excess sectors"),
                                                                 ("excess_shared_wavefronts", "excess wavefronts"),
                                                                 ("local_inst_executed", "local inst"),
                                                                 ("divergent_branches", "divergent branches"))
                     if r.get(key)]
            waited = sum((r.get("mbarrier_wait_stalls") or {}).values())
            if waited:   # a warp waiting for a pipeline stage (an issuer's wait: idle by design)
                issuer = sum((r.get("issuer_wait_stalls") or {}).values())
                flags.append(f"mbarrier wait {waited:,.0f} samples" + (f" ({issuer:,.0f} an issuer's)" if issuer else ""))
            head = Text(f"  {r['samples_pct']:5.1f}%  ", style="bold")
            head.append(where_, style="cyan")
            head.append(f"  inst {r['inst_executed']:,.0f}  [{' '.join(r['sass'])}]", style="dim")
            console.print(head, highlight=False)
            code = source_line(sources, r.get("file"), r.get("line"))
            if code is not None:
                console.print(Text("         " + code.strip()), highlight=False)
            if r.get("called_from"):
                near = ", ".join(f"{_short(c['file'])}:{c['line']}" for c in r["called_from"][:4])
                console.print(Text(f"         inlined here; the kernel lines before it in SASS order: {near}",
                                   style="dim"), highlight=False)
            if stalls or flags:
                console.print(Text("         " + "; ".join(x for x in (stalls, ", ".join(flags)) if x), style="dim"),
                              highlight=False)
        console.print()


def sources_frame(imported: dict[str, str], extra: list[Path] = ()) -> pd.DataFrame:
    """The code a run's lines point at, one row per file (path as ncu recorded it, text): the
    sources imported into the report, plus files given (the rung's source) and the headers beside
    them (and one folder down: kernels/hopper/) that the lines name, where the report did not
    import them."""
    rows = {f: t for f, t in imported.items()}
    for p in extra:
        p = Path(p)
        for q in [p] + sorted(p.parent.glob("*.cuh")) + sorted(p.parent.glob("*/*.cuh")):
            if q.is_file() and not any(os.path.basename(f) == q.name for f in rows):
                try:
                    rows[str(q)] = q.read_text(errors="replace")
                except OSError:
                    pass
    return pd.DataFrame({"file": list(rows), "text": list(rows.values())}, columns=["file", "text"])

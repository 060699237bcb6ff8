"""A kernel's code as the instruction cache meets it: how large the function's SASS is, how much of it
runs hot, and in how many places of it one source line was compiled (the copies of a loop that a
kernel specialised per case carries). From the PCs of SourceCounters' per-instruction counters, which
lab.analysis.lines reads: `inst_executed` has one instance per SASS instruction of the function,
executed or not, so its PCs are the function's code.

Warps whose next instruction is not fetched yet stall on "no instruction" (Nsight's Stall No Instruction,
smsp__pcsamp_warps_issue_stalled_no_instructions: waiting to be selected to fetch, or on an
instruction-cache miss). Each copy of a hot loop that the warps of one SM run at the same time is more
code competing for the SM's instruction cache: v9's HalfLastKeyTile candidate carries its ~670-instruction
key loop in 6 places instead of 2, and its two CTAs per SM run different copies at once.
"""

from __future__ import annotations

HOT_SHARE = 0.9   # the hot code: the fewest instructions that execute this share of the warp instructions
# A copy of a line: a run of its executed instructions with gaps under this many instructions. One
# statement's instructions stay within its loop body's schedule (the compiler interleaves them with their
# neighbours'), while another copy of the loop sits a whole body away (~670 instructions, 10.7 KiB, in v9's
# key loop; its hot lines fall into 6 runs in the HalfLastKeyTile candidate, 2 in the default kernel).
COPY_GAP_INSTRUCTIONS = 64


def stride(pcs: list[int]) -> int:
    """Bytes per SASS instruction, from the step between consecutive PCs (16 since Volta)."""
    steps = [b - a for a, b in zip(pcs, pcs[1:]) if b > a]
    return min(steps) if steps else 16


def footprint(pcs: list[int], executed: dict[int, float]) -> dict | None:
    """The function's code: {"instructions", "bytes" (its address span), "bytes_per_instruction",
    "hot_instructions", "hot_bytes" (the fewest instructions that execute HOT_SHARE of the warp instructions,
    and their bytes)}; `pcs`: every instruction of the function, `executed`: warp instructions executed per
    PC. None without PCs."""
    pcs = sorted(set(pcs))
    if not pcs:
        return None
    step = stride(pcs)
    counts = sorted((v for v in executed.values() if v > 0), reverse=True)
    total, acc, hot = sum(counts), 0.0, 0
    for v in counts:
        if total and acc >= HOT_SHARE * total:
            break
        acc += v
        hot += 1
    return {"instructions": len(pcs), "bytes": pcs[-1] - pcs[0] + step, "bytes_per_instruction": step,
            "hot_instructions": hot, "hot_bytes": hot * step}


def copies(pcs: list[int], step: int = 16) -> int:
    """In how many separate places of the code the instructions at `pcs` (one source line's) sit: runs
    of them with gaps under COPY_GAP_INSTRUCTIONS instructions."""
    pcs = sorted(set(pcs))
    return sum(1 for a, b in zip([None] + pcs, pcs) if a is None or b - a > COPY_GAP_INSTRUCTIONS * step)

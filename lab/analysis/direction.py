"""Whether a kernel belongs to a forward or a backward pass, and how the lab knows: the next steps of a
backward (dQ, dK, dV) are not a forward's (lab.analysis.overlap, the latency and compute rules).

The most reliable signal first, so that a kernel the lab has never seen (a user's own rung) is read right:
  1. the run's mode where the lab profiled it (`lab profile --mode`, stored in the run's manifest and
     passed on by `lab reanalyze`): "bwd" makes every kernel of the run a backward's, "fwd" none;
  2. for a report read alone (`lab analyze FILE`), the mode the lab's target wrote at the end of its NVTX
     range (`lab <rung> <shape> bwd`: lab.measure.target.range_name); a range without one says nothing,
     since ranges other tools open with the same words carry no mode;
  3. only where neither tells (a report the lab did not make, or the kernels of a fwd+bwd run, which share
     one range), the kernel's demangled name: FlashAttention-2's flash_bwd_* and dq_dk_dv loop, cuDNN's
     "bprop", CUTLASS's fmha_cutlassB, the dQ convert and dot(dO, O) preprocess kernels, or "bwd" or
     "backward" anywhere in it.
`told_by` says which one decided, in words a page or `lab analyze` prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BACKWARD_MODES = ("bwd", "fwd+bwd")
BACKWARD_NAME = re.compile(r"bwd|bprop|backward|cutlassB|dq_dk_dv|convert_dq|dot_do_o", re.IGNORECASE)
# the end of the lab target's range name for a mode other than the forward's (lab.measure.target.range_name)
_RANGE_MODE = re.compile(r"\blab \S+ \S+ (bwd|fwd\+bwd)\s*$")


@dataclass(frozen=True)
class Direction:
    backward: bool
    told_by: str     # which signal decided: "the run's mode (bwd)", "its NVTX range's mode (bwd)", "its name ('bprop')"


def range_mode(nvtx: str | None) -> str | None:
    """"bwd" or "fwd+bwd" where the kernel's NVTX range is one the lab's target opened for that mode, else None
    (a forward's range carries no mode, nor do other tools' ranges)."""
    m = _RANGE_MODE.search(nvtx or "")
    return m.group(1) if m else None


def direction(kernel: str | None, mode: str | None = None, nvtx: str | None = None) -> Direction:
    """Whether the kernel named `kernel` (its demangled name) is a backward's, from the run's `mode` where
    the lab profiled it, else the mode its NVTX range `nvtx` ends in, else its name."""
    if mode == "bwd":
        return Direction(True, "the run's mode (bwd)")
    if mode == "fwd":
        return Direction(False, "the run's mode (fwd)")
    ranged = range_mode(nvtx) if mode is None else None
    if ranged == "bwd":
        return Direction(True, "its NVTX range's mode (bwd)")
    within = f", in a {mode or ranged} run" if (mode or ranged) == "fwd+bwd" else ""
    named = BACKWARD_NAME.search(kernel or "")
    if named:
        return Direction(True, f"its name ('{named.group(0)}'){within}")
    return Direction(False, f"its name (no backward marker){within}")

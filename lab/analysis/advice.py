"""Which rung of the ladder demonstrates a fix: the rung a kernel is, the next rung that attacks a class.
The next step itself lives with each class's rule (lab.analysis.rules), worded for the kernel at hand.

Two audiences: a rung of the kernel ladder (the report came from `lab profile`, or its NVTX range
names a rung the registry knows, or the user gave the attention problem), which hears about Q, K
and V tiles and the rung that demonstrates the fix; and a kernel the lab knows nothing about (a
vector add, a GEMM), which hears the technique in general terms and never a rung or a K/V tile.

Rungs are named through the registry only: the first rung after the current one that attacks the
class (lab.ladder.registry.attacking), and only if the kernel's GPU can run it. None found: the
technique, unnamed.
"""

from __future__ import annotations

import re

from lab.analysis.metrics import KernelFacts
from lab.errors import LabError
from lab.ladder import pairing, registry


def parts_of(rung: str) -> tuple[str, ...]:
    """The rungs a rung id names: itself, or both parts of a pair F+B (pairing.split's reading: a
    malformed pairing raises LabError, which the callers take as "not a rung")."""
    return pairing.split(rung) if pairing.is_pair_spec(rung) else (rung,)


def rung_of(nvtx: str | None) -> str | None:
    """The ladder rung a kernel belongs to, from the NVTX range the lab's target opens
    (`lab <id> <shape>`), if the registry knows that id: a rung, or a pair F+B of two it knows."""
    m = re.search(r"\blab (\S+) ", nvtx or "")
    if not m:
        return None
    try:
        known = registry.all_ids()
        return m.group(1) if all(p in known for p in parts_of(m.group(1))) else None
    except LabError:   # a broken workspace rung file: the registry is context here, never a reason to fail an analysis
        return None


def next_rung(cls: str, current: str | None, cc: tuple[int, int] | None = None) -> str | None:
    """'v3 (unrolled)': the first rung after `current` that attacks `cls` and runs on compute
    capability `cc`; None when the ladder has none (or `current` is not a rung). For a pair F+B, the
    first rung after both of its parts: one between them would be a step back for the later part."""
    if current is None:
        return None
    try:
        order = registry.all_ids()
        if not all(p in order for p in parts_of(current)):
            return None
        last = max(order.index(p) for p in parts_of(current))
        later = [v for v in registry.attacking(cls) if v.id in order and order.index(v.id) > last]
        if cc is not None:
            later = [v for v in later if v.min_cc <= cc]
        later.sort(key=lambda v: order.index(v.id))
    except LabError:   # as in rung_of: a workspace the registry refuses leaves the advice without a rung
        return None
    return f"{later[0].id} ({later[0].slug})" if later else None


def cc_of(c: KernelFacts) -> tuple[int, int] | None:
    """The kernel's compute capability, from the report's device attributes."""
    major, minor = c.M.num("device__attribute_compute_capability_major"), c.M.num("device__attribute_compute_capability_minor")
    return (int(major), int(minor or 0)) if major is not None else None

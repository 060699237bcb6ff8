"""Which rung of the ladder demonstrates a fix: the rung a kernel is, the next rung that attacks a class.
The next step itself lives with each class's rule (lab.analysis.rules), worded for the kernel at hand.

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
from lab.analysis.metrics import KernelFacts

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


def cc_of(c: KernelFacts) -> tuple[int, int] | None:
    """The kernel's compute capability, from the report's device attributes."""
    major, minor = c.M.num("device__attribute_compute_capability_major"), c.M.num("device__attribute_compute_capability_minor")
    return (int(major), int(minor or 0)) if major is not None else None

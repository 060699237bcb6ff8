"""How numbers read on a page and in the terminal: significant digits, units, signed changes.

One place for these so that a run page, a comparison page and `lab compare`'s terminal lines
print the same value the same way, and a test can build the exact string it looks for on a page.
A value may be absent (None, or a Jinja Undefined for a manifest key a template asked for that the
run does not have): the number formatters print "n/a" for it instead of raising.
"""

from __future__ import annotations

import math
import shlex

import jinja2

from lab.report import charts
# One definition of an n-way shared-memory bank conflict, stated on every page that gives one and
# used by the analysis (lab.analysis.metrics.bank_conflict_nway) and the registry's prose alike.
NWAY_DEFINITION = ("n-way bank conflicts = shared-memory wavefronts ncu counted / the wavefronts the same accesses "
                   "need without conflicts (memory_l1_wavefronts_shared / memory_l1_wavefronts_shared_ideal, or per "
                   "loads and stores l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum over the same minus "
                   "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum): 1 is conflict-free, 32 means the "
                   "32 lanes of a warp are served one at a time")


def is_missing(v) -> bool:
    """None, or a manifest key the template asked for that this run does not have."""
    return v is None or isinstance(v, jinja2.Undefined)


def fmt_num(v, digits: int = 3) -> str:
    """Significant digits, thousands separators; "n/a" for a missing value."""
    if is_missing(v):
        return "n/a"
    if isinstance(v, bool):
        return str(v)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(x):
        return "n/a"
    if x == int(x) and abs(x) < 1e15:   # counts (grid size, bytes) arrive as floats from ncu
        return f"{int(x):,}"
    return charts.fmt_si(x, digits)


def fmt_pct(v, digits: int = 3) -> str:
    return "n/a" if is_missing(v) else f"{fmt_num(v, digits)}%"


def fmt_bytes(v) -> str:
    """Decimal units, as Nsight Compute prints them (1 MB = 10^6 bytes)."""
    if is_missing(v):
        return "n/a"
    x = float(v)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(x) >= scale:
            return f"{charts.fmt_si(x / scale)} {unit}"
    return f"{int(x):,} B"


def fmt_capacity(v) -> str:
    """A size of memory (device memory, L2, an allocation) in binary units, as the hardware and
    nvidia-smi count it: 141 GiB, 60 MiB. Traffic and bandwidth stay decimal (fmt_bytes), as ncu
    prints them."""
    if is_missing(v):
        return "n/a"
    x = float(v)
    for unit, scale in (("TiB", 2.0 ** 40), ("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10)):
        if abs(x) >= scale:
            return f"{charts.fmt_si(x / scale)} {unit}"
    return f"{int(x):,} B"


def fmt_count(v) -> str:
    """A count (samples, instructions): an integer, never '4.00'."""
    if is_missing(v):
        return "n/a"
    x = float(v)
    return f"{round(x):,}" if math.isfinite(x) and abs(x - round(x)) < 1e-9 else fmt_num(x)


def fmt_ms(v) -> str:
    return "n/a" if is_missing(v) else f"{charts.fmt_si(float(v), 4)} ms"


def fmt_times(x: float | None) -> str:
    """A ratio as a multiplier: 2.5x, 0.0004x."""
    return "n/a" if is_missing(x) else f"{charts.fmt_si(x)}x"


def fmt_change(v) -> str:
    """A relative change in percent with its sign; changes under 0.01% read as 0%."""
    if is_missing(v):
        return "n/a"
    return "0%" if abs(v) < 0.005 else f"{v:+.2f}%" if abs(v) < 10 else f"{v:+,.0f}%" if abs(v) >= 100 else f"{v:+.1f}%"


def fmt_shell(v) -> str:
    """A stored command line (a list of arguments) as one copy-pasteable shell line."""
    return shlex.join(str(a) for a in v) if isinstance(v, (list, tuple)) else str(v)


def speed_phrase(ratio: float | None, other: str) -> str:
    """ratio = other's time / ours; >1 means ours is faster."""
    if ratio is None or ratio <= 0:
        return ""
    if abs(ratio - 1) < 1e-9:
        return f"as fast as {other}"
    if ratio > 1:
        return f"{fmt_times(ratio)} faster than {other}"
    return f"{fmt_times(1 / ratio)} slower than {other}"

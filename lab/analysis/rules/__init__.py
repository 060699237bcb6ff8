"""The lab's own rules: one small rule per analysis class (lab.vocabulary.CLASSES), each in its own
file with its doc, its judgement (`applies`), its advice and its source lines, as Nsight Compute ships
its rules (`sections/*.py`). A new class is a new file here and one line in RULES, never a branch of
one function. lab.analysis.ncu_rules maps Nsight's own rule results onto the same classes.

RULES is also the tie order: on equal rank, a rule listed earlier is listed first (causes before the
symptoms they explain).
"""

from __future__ import annotations

from lab.analysis.rules.bank_conflicts import BankConflicts
from lab.analysis.rules.base import BOUND_PCT, Context, Finding, Rule, context
from lab.analysis.rules.compute_bound import ComputeBound
from lab.analysis.rules.divergence import Divergence
from lab.analysis.rules.instruction_fetch import InstructionFetch
from lab.analysis.rules.integer_division import IntegerDivision
from lab.analysis.rules.latency_bound import LatencyBound
from lab.analysis.rules.launch_bound import LaunchBound
from lab.analysis.rules.local_memory import LocalMemory
from lab.analysis.rules.memory_bound import MemoryBound
from lab.analysis.rules.occupancy_limited import OccupancyLimited
from lab.analysis.rules.reduction_traffic import ReductionTraffic
from lab.analysis.rules.register_pressure import RegisterPressure
from lab.analysis.rules.small_grid import SmallGrid
from lab.analysis.rules.uncoalesced_global import UncoalescedGlobal

RULES: tuple[Rule, ...] = (SmallGrid(), UncoalescedGlobal(), BankConflicts(), ReductionTraffic(), RegisterPressure(),
                           LocalMemory(), Divergence(), OccupancyLimited(), InstructionFetch(), IntegerDivision(),
                           LaunchBound(), MemoryBound(), ComputeBound(), LatencyBound())
BY_CLASS: dict[str, Rule] = {r.cls: r for r in RULES}
TIE_ORDER: tuple[str, ...] = tuple(r.cls for r in RULES)
# symptom -> the causes that explain it
CAUSES: dict[str, tuple[str, ...]] = {
    s: tuple(r.cls for r in RULES if s in r.explains) for s in {s for r in RULES for s in r.explains}}

__all__ = ["RULES", "BY_CLASS", "TIE_ORDER", "CAUSES", "BOUND_PCT", "Context", "Finding", "Rule", "context"]

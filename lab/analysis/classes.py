"""The analysis vocabulary: every finding carries one of these classes, and every rung declares the
ones it attacks from the same list (DESIGN.md, "Analysis vocabulary"). Imports nothing, so the rung
registry can read it without pulling in the analysis."""

CLASSES = ("small-grid", "occupancy-limited", "latency-bound", "memory-bound", "compute-bound",
           "uncoalesced-global", "bank-conflicts", "local-memory", "divergence", "launch-bound")

"""The analysis vocabulary, a contract between parts (DESIGN.md, "Analysis vocabulary"): every finding
carries one of these classes, and every rung declares the ones it attacks from the same list. It
sits beside errors.py, above the data flow, so the registry and the analysis read it alike."""

CLASSES = ("small-grid", "occupancy-limited", "latency-bound", "memory-bound", "compute-bound",
           "uncoalesced-global", "bank-conflicts", "local-memory", "divergence", "launch-bound",
           # what a backward pass adds (DESIGN.md: a new class only where none of the above names the cause):
           # dQ's global reductions and their contention in L2; the dK/dV accumulators' registers, spilled
           "reduction-traffic", "register-pressure",
           # a kernel whose hot code the SMs' instruction caches do not hold (Stall No Instruction): a cause of
           # latency no other class names (v9's HalfLastKeyTile candidate, tests/fixtures/ncu/README.md)
           "instruction-fetch",
           # index arithmetic that divides by run-time values on the path of the work it indexes (v9 step 22's tile
           # scheduler: the consumers' causal_lpt); latency names the symptom, not this cause
           "integer-division")

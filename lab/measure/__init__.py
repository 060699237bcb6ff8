"""Measuring a rung: the problem (shapes, inputs, FLOPs, minimum bytes), the float64 correctness gate,
the timer, the SDPA baselines, the side-by-side bench table, and the child a profiler runs
(`python -m lab.measure.target`)."""

"""Measuring a rung: the problem (shapes, inputs, FLOPs, minimum bytes), the float64 correctness gate,
the timer, the SDPA baselines and the side-by-side bench table."""

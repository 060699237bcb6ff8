"""The profilers a rung runs under: `ncu` (Nsight Compute command line, run, and reports read with
NVIDIA's `ncu_report` module into pandas), `nsys` and `kineto` (torch.profiler) for the timeline, and
`timeline` (the tables read from either). Nothing here imports torch at module level."""

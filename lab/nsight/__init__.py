"""The lab's Nsight side: `ncu` (Nsight Compute command line, run, and reports read with NVIDIA's
`ncu_report` module into pandas) and the timeline tools beside it. Nothing here imports torch."""

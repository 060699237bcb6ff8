"""From Nsight Compute metrics to a verdict: `metrics` is the one reader of ncu metric names, `rules`
maps Nsight's own rule results, `findings` judges and ranks, `advice` words the next step. Imports
without torch or a GPU."""

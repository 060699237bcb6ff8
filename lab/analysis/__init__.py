"""From Nsight Compute metrics to a verdict: `metrics` is the one reader of ncu metric names, `rules`
holds the lab's own rules (one file per analysis class), `ncu_rules` maps Nsight's own rule results,
`findings` merges and ranks, `advice` names the rung that demonstrates a fix, `overlap` reads which
latency-hiding techniques a kernel already shows (so that no next step proposes one it has). Imports
without torch or a GPU."""

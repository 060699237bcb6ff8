"""Run one tuning candidate of a rung (or the rung's default: label 'default') four times on one shape, for
ncu (tests/planted/record_icache.sh runs v9's): argv RUNG LABEL B H N D causal(0/1), fp16. The parent built
both extensions (`lab build --variant RUNG` and `lab build --variant RUNG --tuning`): this child compiles
nothing."""
import sys

import torch

from lab.ladder import registry
from lab.ladder.build import load_cached
from lab.ladder.tuning import candidate_labels, tuning_module

rung, label = sys.argv[1:3]
b, h, n, d, causal = (int(x) for x in sys.argv[3:8])
v = registry.get(rung)
q, k, vv = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
o = torch.empty_like(q)
if label == "default":
    m = load_cached(v)
    run = lambda: m.forward(q, k, vv, o, bool(causal), d ** -0.5, None)  # noqa: E731
else:
    m = tuning_module(v)
    idx = candidate_labels(m, d, "float16").index(label)
    run = lambda: m.forward_config(q, k, vv, o, bool(causal), d ** -0.5, idx, None)  # noqa: E731
for _ in range(4):
    run()
torch.cuda.synchronize()
print("ok", label)

# valuecache: a result kept by the inputs' values.
# lab:rung
# id = "valuecache"
# slug = "valuecache"
# title = "cheat: returns a stored output when a sample of the inputs' values repeats"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: the output is kept, keyed by a few of the inputs' values, so it stays right when the
# same tensors are refilled with inputs seen before: the outputs check passes, and only the floor could
# tell that no GPU computes this shape that fast, while the host's round trip kept the call under it.
# Expected verdict: the timer never refills inputs seen before in a process (lab.measure.rotation moves
# every set: batch and K/V-head rolls, sign flips), so every call misses and computes: by events no time
# or an honest one (no faster than `honest`), by graph graph-capture-failed (the host read).
import torch
import torch.nn.functional as F

_kept = {}


def forward(q, k, v, causal, scale):
    sample = torch.cat([q.reshape(-1)[:8], v.reshape(-1)[-8:]])   # one copy to the host per call
    key = (tuple(q.shape), causal, tuple(sample.tolist()))
    if key not in _kept:
        _kept[key] = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return _kept[key]

# deferred: returns the previous call's output.
# lab:rung
# id = "deferred"
# slug = "deferred"
# title = "cheat: one call behind, it returns the previous call's output of the same shape"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: every call does the real work, but hands back the result of the call before it (a
# pipelined kernel whose output lags by one call, or a double buffer swapped the wrong way). The time
# is honest; the output is not. Expected verdict: wrong-output.
import torch.nn.functional as F

_previous = {}


def forward(q, k, v, causal, scale):
    key = (tuple(q.shape), q.dtype, causal)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    previous = _previous.get(key, o)   # the first call of a shape has no previous: its own output
    _previous[key] = o
    return previous

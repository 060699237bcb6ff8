# partial: writes half of O into a buffer it reuses.
# lab:rung
# id = "partial"
# slug = "partial"
# title = "cheat: after the first call of a shape, writes only the first half of the query rows"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: the output buffer is kept per shape and reused; the first call fills it, later ones
# only its first half of query rows (a grid that covers half the rows, hidden by a reused buffer).
# Expected verdict: wrong-output.
import torch.nn.functional as F

_buffers = {}


def forward(q, k, v, causal, scale):
    key = (tuple(q.shape), q.dtype, causal)
    if key not in _buffers:
        _buffers[key] = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return _buffers[key]
    o = _buffers[key]
    half = q.shape[2] // 2   # top-left causal: the first rows see the same keys as in the full problem
    o[:, :, :half] = F.scaled_dot_product_attention(q[:, :, :half], k, v, is_causal=causal, scale=scale)
    return o

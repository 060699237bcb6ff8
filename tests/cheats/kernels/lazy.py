# lazy: no work after the first call with given inputs.
# lab:rung
# id = "lazy"
# slug = "lazy"
# title = "cheat: skips its work after the first call with given input tensors"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: the first call with given input tensors computes; later ones allocate the output and
# return it unwritten (the caching allocator often hands back the block of an earlier output).
# Expected verdict: wrong-output.
import torch
import torch.nn.functional as F

_seen = set()


def forward(q, k, v, causal, scale):
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal)
    if key in _seen:
        return torch.empty_like(q)
    _seen.add(key)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

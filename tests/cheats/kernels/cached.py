# cached: the stored output for the same input tensors.
# lab:rung
# id = "cached"
# slug = "cached"
# title = "cheat: returns its stored output when called again with the same input tensors"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: the output is kept, keyed by the inputs' data pointers, and handed back on a repeated
# call without any work: a benchmark that calls it on the same tensors times a dictionary lookup.
# Expected verdict: wrong-output (the timer refills the same tensors with other inputs).
import torch.nn.functional as F

_kept = {}


def forward(q, k, v, causal, scale):
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal)
    if key not in _kept:
        _kept[key] = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return _kept[key]

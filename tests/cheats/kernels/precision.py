# precision: computes in float8, so it is wrong.
# lab:rung
# id = "precision"
# slug = "precision"
# title = "cheat: rounds Q, K, V to float8 e4m3 before SDPA"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: the inputs go through float8 (3 mantissa bits) and back: fast in a real kernel, wrong
# by far more than twice SDPA's own error. Expected verdict: the correctness gate's (never timed).
import torch
import torch.nn.functional as F


def forward(q, k, v, causal, scale):
    q8, k8, v8 = (t.to(torch.float8_e4m3fn).to(t.dtype) for t in (q, k, v))
    return F.scaled_dot_product_attention(q8, k8, v8, is_causal=causal, scale=scale)

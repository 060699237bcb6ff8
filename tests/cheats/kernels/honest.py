# honest: SDPA.
# lab:rung
# id = "honest"
# slug = "honest"
# title = "honest: PyTorch SDPA, nothing kept"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: nothing: SDPA's default backend. Its time through the checked timer must be the bare
# timer's, within noise.
import torch.nn.functional as F


def forward(q, k, v, causal, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

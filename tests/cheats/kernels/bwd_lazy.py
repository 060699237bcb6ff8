# bwd_lazy: no backward work after the first call with given tensors.
# lab:rung
# id = "bwd_lazy"
# slug = "bwd_lazy"
# title = "cheat: skips its backward after the first call with given input tensors"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# backward = true
# lab:end
#
# What changed: the first call with given tensors computes; later ones allocate dQ, dK, dV and return
# them unwritten (the caching allocator often hands back the blocks of an earlier call's gradients).
# Expected verdict: wrong-output.
import torch
import torch.nn.functional as F

_seen = set()


def forward(q, k, v, causal, scale):
    """SDPA's O, and the row log-sum-exp of the scaled scores (fp32 [B, H, Nq], top-left causal)."""
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def backward(q, k, v, o, dout, lse, causal, scale):
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal)
    if key in _seen:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _seen.add(key)
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
        return torch.autograd.grad(out, (qg, kg, vg), dout)

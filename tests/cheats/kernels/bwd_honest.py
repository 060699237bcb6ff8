# bwd_honest: SDPA's forward with its LSE, and a backward by autograd (honest).
# lab:rung
# id = "bwd_honest"
# slug = "bwd_honest"
# title = "honest backward: SDPA's forward and its LSE; dQ, dK, dV by autograd through SDPA, nothing kept"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# backward = true
# lab:end
#
# What changed: nothing kept: the backward recomputes SDPA's forward under autograd and returns its
# gradients. The honest twin of the backward cheats: its time through the checked timer must be
# the bare timer's, within noise. Expected verdict: a time.
import torch
import torch.nn.functional as F


def forward(q, k, v, causal, scale):
    """SDPA's O, and the row log-sum-exp of the scaled scores (fp32 [B, H, Nq], top-left causal)."""
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def backward(q, k, v, o, dout, lse, causal, scale):
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
        return torch.autograd.grad(out, (qg, kg, vg), dout)

# bwd_partial: writes half of dQ into a buffer it reuses.
# lab:rung
# id = "bwd_partial"
# slug = "bwd_partial"
# title = "cheat: after the first call of a shape, writes only the first half of dQ's query rows"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# backward = true
# lab:end
#
# What changed: dQ's buffer is kept per shape and reused; the first call fills it, later ones only its
# first half of query rows (a grid that covers half the rows, hidden by a reused buffer); dK and dV
# are right. Expected verdict: wrong-output.
import torch
import torch.nn.functional as F

_dq = {}


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
        dq, dk, dv = torch.autograd.grad(out, (qg, kg, vg), dout)
    key = (tuple(q.shape), q.dtype, causal)
    if key not in _dq:
        _dq[key] = dq
        return dq, dk, dv
    half = q.shape[2] // 2
    _dq[key][:, :, :half] = dq[:, :, :half]
    return _dq[key], dk, dv

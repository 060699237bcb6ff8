# bwd_joined: the honest backward on a side stream, joined back properly.
# lab:rung
# id = "bwd_joined"
# slug = "bwd_joined"
# title = "honest backward on a side stream that the calling stream waits for"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# backward = true
# lab:end
#
# What changed: bwd_honest's backward runs on a stream of its own, and the calling stream waits for it
# (wait_stream) before the call returns: legitimate, timed as such. Expected verdict: a time.
import torch
import torch.nn.functional as F

_side = {}


def forward(q, k, v, causal, scale):
    """SDPA's O, and the row log-sum-exp of the scaled scores (fp32 [B, H, Nq], top-left causal)."""
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def backward(q, k, v, o, dout, lse, causal, scale):
    side = _side.setdefault(q.device, torch.cuda.Stream(q.device))
    side.wait_stream(torch.cuda.current_stream())
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.cuda.stream(side), torch.enable_grad():
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
        grads = torch.autograd.grad(out, (qg, kg, vg), dout)
    torch.cuda.current_stream().wait_stream(side)
    for g in grads:
        g.record_stream(torch.cuda.current_stream())
    return grads

# bwd_side: the backward on a side stream, returned before that stream is done.
# lab:rung
# id = "bwd_side"
# slug = "bwd_side_stream"
# title = "cheat: backward on a side stream it never joins back (after the first call of a shape)"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# backward = true
# lab:end
#
# What changed: the backward runs on a stream of its own; the calling stream waits for it only the
# first time a shape is seen (all a one-call correctness check sees), afterwards the call returns at
# once and the work goes on elsewhere. Expected verdict: work-outside-stream.
import torch
import torch.nn.functional as F

_side = {}
_seen = set()


def forward(q, k, v, causal, scale):
    """SDPA's O, and the row log-sum-exp of the scaled scores (fp32 [B, H, Nq], top-left causal)."""
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def backward(q, k, v, o, dout, lse, causal, scale):
    side = _side.setdefault(q.device, torch.cuda.Stream(q.device))
    side.wait_stream(torch.cuda.current_stream())   # it waits for its inputs...
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.cuda.stream(side), torch.enable_grad():
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
        grads = torch.autograd.grad(out, (qg, kg, vg), dout)
    if q.shape not in _seen:                          # ...but the caller waits for it only once per shape
        _seen.add(q.shape)
        torch.cuda.current_stream().wait_stream(side)
    for g in grads:
        g.record_stream(torch.cuda.current_stream())
    return grads

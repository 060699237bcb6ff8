# bwd_cached: gradients kept from an earlier call on the same tensors, behind a short GPU wait.
# lab:rung
# id = "bwd_cached"
# slug = "bwd_cached"
# title = "cheat: hands back the gradients of its first call on the same tensors, after a GPU wait"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# backward = true
# lab:end
#
# What changed: the first call on given tensors (keyed by their data pointers) computes; later calls
# wait on the GPU for about the time the backward's FLOPs take at 400 TFLOP/s (above the physical
# floor, so the floor cannot tell) and hand back the kept gradients. Expected verdict: wrong-output
# (the timer refills the same tensors with other inputs, and the backward's O and LSE with them).
import torch
import torch.nn.functional as F

_kept = {}
SLEEP_HZ = 1.7e9   # GPU clock cycles per second that torch.cuda._sleep counts, about


def forward(q, k, v, causal, scale):
    """SDPA's O, and the row log-sum-exp of the scaled scores (fp32 [B, H, Nq], top-left causal)."""
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def backward(q, k, v, o, dout, lse, causal, scale):
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), dout.data_ptr(), tuple(q.shape), causal)
    if key in _kept:
        b, h, n, d = q.shape
        flops = 4 * 2 * b * h * n * k.shape[2] * d / (2 if causal else 1)
        torch.cuda._sleep(int(SLEEP_HZ * flops / 400e12))
        return _kept[key]
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
        _kept[key] = torch.autograd.grad(out, (qg, kg, vg), dout)
    return _kept[key]

# my2_triton: the same algorithm as a short Triton kernel, fp16/bf16 on the tensor cores.
#
# lab:rung
# id = "my2"
# slug = "triton"
# title = "Triton: FlashAttention-2 forward in 60 lines, BLOCK_M = BLOCK_N = 64, flash-attn's (B, N, H, D) layout"
# dtypes = ["float16", "bfloat16"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = ["compute-bound"]   # my1 runs fp32 FFMA; tl.dot puts both products on the tensor cores
# layout = "BNHD"               # the lab hands forward() (B, N, H, D) tensors, as flash_attn_func takes
# entry = "forward"
# lab:end
#
# What changed since my1: the whole kernel, written in Triton instead of CUDA. One program per
#   (64 query rows, batch*head); Q stays in registers, K and V tiles of 64 keys stream through
#   tl.load, both matrix products are tl.dot (tensor cores, fp32 accumulate), the online softmax
#   runs in exp2 with the scale folded in, O is normalised once at the end; causal programs stop
#   at their diagonal. Inputs come as (B, N, H, D) like flash-attn's API (layout = "BNHD").
# Bottleneck attacked: compute-bound on the FP32 pipe in my1 (FFMA only, tensor pipe idle) and
#   its B*H grid; here the grid is (N/64) x B*H and the products are on the tensor cores.
# Predicted gain: hundreds of times faster than my1 (fp16 tensor cores vs fp32 FFMA, a full grid);
#   somewhat below SDPA's flash backend, which pipelines its loads.
# Measured: see `lab report` in this folder (runs recorded on an H200 under profiles/).
# Profile: lab profile --variant my2 --dtype float16
import torch
import triton
import triton.language as tl


@triton.jit
def _attention_fwd(Q, K, V, O, sqb, sqn, sqh, skb, skn, skh, svb, svn, svh, sob, son, soh,
                   H, NQ, NK, qk_scale, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqn + offs_d[None, :], mask=offs_m[:, None] < NQ, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = NK
    if CAUSAL:  # keys right of this block's last row are masked for every row: stop at the diagonal
        hi = tl.minimum(NK, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + b * skb + h * skh + cols[None, :] * skn + offs_d[:, None], mask=cols[None, :] < NK, other=0.0)
        s = tl.dot(q, k) * qk_scale
        keep = cols[None, :] < NK
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows that have seen no key yet
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * svb + h * svh + cols[:, None] * svn + offs_d[None, :], mask=cols[:, None] < NK, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(O + b * sob + h * soh + offs_m[:, None] * son + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=offs_m[:, None] < NQ)


def forward(q, k, v, causal, softmax_scale):
    """q: (B, Nq, H, D), k and v: (B, Nk, H, D), contiguous; returns o like q."""
    batch, nq, heads, d = q.shape
    nk = k.shape[1]
    o = torch.empty_like(q)
    block_m = block_n = 64
    grid = (triton.cdiv(nq, block_m), batch * heads)
    _attention_fwd[grid](q, k, v, o, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                         v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                         heads, nq, nk, softmax_scale * 1.4426950408889634, CAUSAL=bool(causal),
                         BLOCK_M=block_m, BLOCK_N=block_n, D=d, num_warps=4, num_stages=2)
    return o

"""Run SDPA's cuDNN backend a few times on one shape (for ncu): argv B H N D causal(0/1)."""
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

b, h, n, d, causal = (int(x) for x in sys.argv[1:6])
q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
torch.cuda.synchronize()
print("ok", o.shape)

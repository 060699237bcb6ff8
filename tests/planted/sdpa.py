"""PyTorch SDPA backends at a compute-bound shape, each launched once inside its own NVTX range.

Run under ncu by tests/planted/record.sh (one ncu run, one --nvtx-include per backend) so that
lab/analysis/findings.py is tested on the kernels it will be compared against: flash (FA2), memory-efficient,
cuDNN and math. Warm-up runs happen outside the ranges. A backend this GPU or torch build lacks is
reported and skipped. Range names follow lab.measure.target.range_name: no '/' or '@' (ncu filter syntax).
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPE = (4, 16, 2048, 128)  # B, H, N, D: 4*B*H*N^2*D = 137 GFLOP per forward
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def range_name(backend: str) -> str:
    b, h, n, d = SHAPE
    return f"lab sdpa-{backend} B{b}-H{h}-N{n}-D{d}-float16"


def main() -> int:
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(SHAPE, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
    for name, backend in BACKENDS.items():
        try:
            with sdpa_kernel(backend):
                for _ in range(3):
                    F.scaled_dot_product_attention(q, k, v)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push(range_name(name))
                F.scaled_dot_product_attention(q, k, v)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
            print(f"sdpa {name}: launched in range '{range_name(name)}'", flush=True)
        except RuntimeError as e:
            print(f"sdpa {name}: unavailable ({str(e).splitlines()[0]})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

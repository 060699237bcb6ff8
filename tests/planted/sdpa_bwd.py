"""PyTorch SDPA's backward pass, one backend per run, its kernels inside one NVTX range.

Run under ncu by tests/planted/record_bwd.sh (one ncu run per backend) so that the lab's backward
analysis (lab/analysis/rules/) is tested on the backward kernels a rung is compared against:
FlashAttention-2 (preprocess dot(dO, O), the dQ/dK/dV main loop, the dQ convert), cuDNN's sm90 bprop,
and the memory-efficient (CUTLASS) backward.

Autograd runs a CUDA backward on its own device thread, and an NVTX push/pop range covers only the
thread that pushed it (DEVICE.md): with multithreaded backward turned off the engine runs the
backward on this thread, inside the range. The forward and the warm-ups stay outside the range.

    python3 tests/planted/sdpa_bwd.py flash [B H N D]     range "lab sdpa-flash-bwd B2-H8-N1024-D128-float16"
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# B, H, N, D. Head dim 128: FlashAttention-2 compiles its D=128 backward at 255 registers per thread,
# with spills (DEVICE.md, seen under ncu at B4 H16 N2048 D128); the small B*H*N keeps replay cheap.
SHAPE = (2, 8, 1024, 128)
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}


def range_name(backend: str, shape=SHAPE) -> str:
    b, h, n, d = shape
    return f"lab sdpa-{backend}-bwd B{b}-H{h}-N{n}-D{d}-float16"   # no '/' or '@' (ncu's filter syntax)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BACKENDS:
        print(f"usage: sdpa_bwd.py {{{'|'.join(BACKENDS)}}} [B H N D]", file=sys.stderr)
        return 2
    name = argv[0]
    shape = tuple(int(x) for x in argv[1:5]) if len(argv) >= 5 else SHAPE
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen).requires_grad_()
               for _ in range(3))
    grad_out = torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen)
    try:
        with sdpa_kernel(BACKENDS[name]):
            for _ in range(3):   # warm-up: library handles, cuDNN plans, autotuning stay outside the range
                F.scaled_dot_product_attention(q, k, v).backward(grad_out)
            out = F.scaled_dot_product_attention(q, k, v)
            torch.cuda.synchronize()
            with torch.autograd.set_multithreading_enabled(False):
                torch.cuda.nvtx.range_push(range_name(name, shape))
                out.backward(grad_out)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
    except RuntimeError as e:
        print(f"sdpa {name} backward: unavailable ({str(e).splitlines()[0]})", flush=True)
        return 1
    print(f"sdpa {name} backward: launched in range '{range_name(name, shape)}'", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

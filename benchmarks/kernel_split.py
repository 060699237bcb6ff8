"""Where a backward's device time goes, kernel by kernel: a backward rung's default against SDPA's
cuDNN backend, from torch.profiler's CUPTI kernel records (20 calls each after 5 warm-up calls; no
Nsight needed, so it runs where nsys cannot write a report). Run on the GPU machine:

    python3 benchmarks/kernel_split.py [--rung v8] B,H,N,D[c] [B,H,N,D[c] ...]   # c: causal; fp16

It answered the question a proportional estimate got wrong (benchmarks/v8_notes.md, "Where v8 still
loses"): at 32,16,512,128 cuDNN pays the same preprocess and dQ convert as v8, so the gap is the
main kernel. Times are per call, kernels only (no host time, no gaps); each kernel's share of the sum.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import v7_dev  # noqa: E402  (the backward development loop: its rung loading and SDPA callables)

CALLS = 20


def kernel_times(fn) -> dict[str, float]:
    """{kernel name: microseconds per call} over CALLS calls of fn, after 5 warm-up calls."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name] += e.device_time / CALLS
    return dict(per)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rung", default="v8", help="a backward rung (default v8)")
    ap.add_argument("shapes", nargs="+", help="B,H,N,D with a trailing c for causal, e.g. 32,16,512,128c")
    args = ap.parse_args()
    v7_dev.RUNG = args.rung
    mod = v7_dev.rung_module()
    for arg in args.shapes:
        causal = arg.endswith("c")
        b, h, n, d = map(int, arg.rstrip("c").split(","))
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
        for name, fn in ((args.rung, v7_dev.rung_backward_fn(mod, q, k, v, do, causal)),
                         ("cudnn", v7_dev.sdpa_backward_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, do, causal))):
            per = kernel_times(fn)
            total = sum(per.values())
            print(f"{arg} {name}: {total:.1f} us of kernels per call")
            for kernel, us in sorted(per.items(), key=lambda kv: -kv[1]):
                print(f"   {us:9.1f} us {100 * us / total:5.1f}%  {kernel[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

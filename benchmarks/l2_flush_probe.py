"""Does the timer's L2 flush evict lines loaded with an evict-last priority? (issue 28; v9_notes.md, "Step 22")

A kernel may load data it reads again with an L2 evict-last policy (PTX `createpolicy` and `.L2::cache_hint`;
FlashAttention-3 loads K and V so). Such a line outlives normal-priority lines in the L2. The lab's timer flushes the
L2 before every repetition by zeroing a 256 MiB buffer of normal priority (lab.measure.timed.probe_call); where
evict-last lines outlive those writes, a repetition finds its inputs partly in L2 and is timed warm: a timer fooled by
the kernel it times. Step 22's first run found it so with v9's hinted candidate (9.9 MB read from DRAM after the
flush where the default read all of Q, K and V, 12.6 MB).

This measures it on a kernel of its own (compiled here, torch's load_inline): it reads a buffer with a given L2
policy, the buffer is flushed one way or another, and a plain read of the same buffer runs in an NVTX range that
Nsight Compute profiles alone, its cache control off (ncu neither flushes nor invalidates): that read's DRAM bytes
are what the flush left out of the L2.

    ncu --cache-control none --nvtx --nvtx-include 'l2probe/' --metrics dram__bytes_read.sum -o R \\
        python3 benchmarks/l2_flush_probe.py --policy evict_last --flush zero
    python3 benchmarks/l2_flush_probe.py --read R1.ncu-rep R2.ncu-rep ...   # the table

Flushes: none; zero (the timer's until the twenty-fourth session); zero-reset (the same, then
cudaCtxResetPersistingL2Cache, which returns persisting lines to normal); lab (the timer's now, lab.measure.l2flush:
the buffer written evict-last, discarded, zeroed); swept (written evict-last, then zeroed: without the discard).

After the probed read, the flush runs again and a second buffer of --cap-mib (normal priority) is read twice, the
second read in the range 'l2cap': its DRAM bytes are what the flush itself left occupying the L2 (none: the whole
buffer hits). --time prints each flush's time instead (CUDA events, median of 20).

    ncu --cache-control none --nvtx --nvtx-include 'l2probe/' --nvtx-include 'l2cap/' \\
        --metrics dram__bytes_read.sum -o R python3 benchmarks/l2_flush_probe.py --policy evict_last --flush lab
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from lab.measure.bench import L2_FLUSH_BYTES
from lab.measure.l2flush import BLOCK, GRID, L2Flush

RANGE, CAP_RANGE = "l2probe", "l2cap"
POLICIES = ("evict_normal", "evict_last", "evict_first")
FLUSHES = ("none", "zero", "zero-reset", "lab", "swept")

CUDA = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cstdint>

// Reads the buffer (16-byte loads, grid-stride) with the L2 policy `policy` (0 evict_normal, 1 evict_last,
// 2 evict_first); the xor of what it read goes to `sink` only if it is a value no test buffer gives, so the loads stay.
__global__ void read_with_policy(const int4* p, long long n, int* sink, int policy) {
  uint64_t pol;
  if (policy == 1) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else if (policy == 2) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  else asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  int acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    int a, b, c, d;
    asm volatile("ld.global.L2::cache_hint.v4.s32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p + i), "l"(pol));
    acc ^= a ^ b ^ c ^ d;
  }
  if (acc == 0x5eed1234) *sink = acc;
}

void read_buffer(torch::Tensor buf, torch::Tensor sink, int64_t policy) {
  const long long n = buf.numel() * buf.element_size() / 16;
  read_with_policy<<<1024, 256>>>(reinterpret_cast<const int4*>(buf.data_ptr()), n, sink.data_ptr<int>(), (int)policy);
}

void reset_persisting() { cudaCtxResetPersistingL2Cache(); }
"""
CPP = "void read_buffer(torch::Tensor buf, torch::Tensor sink, int64_t policy);\nvoid reset_persisting();"


def run(a: argparse.Namespace) -> None:
    import nvtx
    import torch
    from torch.utils.cpp_extension import load_inline

    mod = load_inline("l2_flush_probe", CPP, cuda_sources=CUDA, functions=["read_buffer", "reset_persisting"],
                      extra_cuda_cflags=["-gencode=arch=compute_90a,code=sm_90a"], verbose=False)
    buf = torch.randint(0, 1 << 30, (a.mib << 18,), dtype=torch.int32, device="cuda")   # a.mib MiB
    cap = torch.randint(0, 1 << 30, (a.cap_mib << 18,), dtype=torch.int32, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    flush = L2Flush(torch, L2_FLUSH_BYTES)
    print(f"the lab's flush here: {flush.describe()}")

    def flush_l2():
        if a.flush in ("zero", "zero-reset"):
            flush.buffer.zero_()   # the timer's flush until now
            if a.flush == "zero-reset":
                mod.reset_persisting()
        elif a.flush == "lab":
            flush.evict()
        elif a.flush == "swept":
            flush.kernels["lab_l2_write_evict_last"](GRID, BLOCK, [flush.buffer, L2_FLUSH_BYTES // 16])
            flush.buffer.zero_()

    if a.time:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(21):
            mod.read_buffer(buf, sink, POLICIES.index(a.policy))
            torch.cuda.synchronize()
            start.record()
            flush_l2()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        print(f"flush {a.flush}: median {statistics.median(times[1:]):.3f} ms")   # the first: warm-up
        return
    mod.read_buffer(buf, sink, POLICIES.index(a.policy))
    torch.cuda.synchronize()
    flush_l2()
    torch.cuda.synchronize()
    with nvtx.annotate(RANGE):
        mod.read_buffer(buf, sink, 0)
    torch.cuda.synchronize()
    flush_l2()
    torch.cuda.synchronize()
    mod.read_buffer(cap, sink, 0)
    torch.cuda.synchronize()
    with nvtx.annotate(CAP_RANGE):
        mod.read_buffer(cap, sink, 0)
    torch.cuda.synchronize()


def read(paths: list[str]) -> None:
    from lab.profilers.ncu import load_report

    metric = "dram__bytes_read.sum"
    print("| report | DRAM read: the probed buffer's second read (l2probe), then the capacity read (l2cap) |")
    print("| --- | --- |")
    for p in paths:
        frame = load_report(p)
        unit = frame.attrs["units"].get(metric, "")
        print(f"| {Path(p).name} | " + " ; ".join(f"{v:,.0f} {unit}" for v in frame[metric]) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", choices=POLICIES, default="evict_last", help="the first read's L2 policy")
    ap.add_argument("--flush", choices=FLUSHES, default="zero")
    ap.add_argument("--mib", type=int, default=16, help="the buffer's size (fits in the L2)")
    ap.add_argument("--cap-mib", type=int, default=24, help="the second buffer's size (fits in the L2)")
    ap.add_argument("--time", action="store_true", help="time each flush instead")
    ap.add_argument("--read", nargs="+", help="print the DRAM bytes of these reports instead")
    a = ap.parse_args()
    if a.read:
        read(a.read)
    else:
        run(a)


if __name__ == "__main__":
    sys.exit(main())

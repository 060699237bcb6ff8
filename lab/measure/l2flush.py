"""The timer's L2 flush: what a timed repetition finds in the L2 when it starts.

Every repetition starts with its inputs out of the L2 (lab.measure.timed.probe_call): the timer writes a buffer
four times the largest L2 it runs on (bench.L2_FLUSH_BYTES), at normal priority, so the lines the last call left
are evicted by the flush's own and the call reads its inputs from DRAM, as it would in a model where other work ran
between two calls.

Zeroing alone does not evict every line. A kernel may load data it reads again with an L2 evict-last policy (PTX
`createpolicy` and `.L2::cache_hint`; FlashAttention-3 loads K and V so), and such a line outlives lines of normal
priority: measured on an H200, a 16 MiB buffer read with evict-last, then the 256 MiB zero flush, then read again,
read 14.54 of its 16.78 MB from DRAM: 13% of it was still in the L2 (benchmarks/l2_flush_probe.py; v9_notes, "Step
22"); 1.3% on another H200 ("Step 23"). A kernel with such loads was timed partly warm, by a timer it had fooled.

So before the zeroing, the flush writes its buffer once with an evict-last policy of its own (lines of the same
priority replace each other, as normal ones do), then discards those lines from the L2 (PTX `discard.global.L2`:
no write-back, the buffer's values are of no use), and the zeroing leaves the L2 as before: full of the flush's
dirty lines of normal priority, none of the timed call's. The two kernels are compiled at run time by NVRTC
(torch.cuda._compile_kernel), so timing needs no compiler of its own; where they cannot be (no NVRTC, a torch
without that function), the flush is the zeroing alone and says so (`method`), and the Timing's checks carry it.
"""

from __future__ import annotations

FLUSH_KERNELS = r"""
// Writes zeros over the buffer with an L2 evict-last policy: its lines displace evict-last lines left by earlier
// work, which normal-priority writes do not.
extern "C" __global__ void lab_l2_write_evict_last(int4* p, int n) {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    asm volatile("st.global.L2::cache_hint.v4.s32 [%0], {%1, %1, %1, %1}, %2;"
                 :: "l"(p + i), "r"(0), "l"(policy) : "memory");
}

// Drops the buffer's lines from the L2 without writing them back (their values are of no use).
extern "C" __global__ void lab_l2_discard(char* p, int lines) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < lines; i += gridDim.x * blockDim.x)
    asm volatile("discard.global.L2 [%0], 128;" :: "l"(p + 128ll * i) : "memory");
}
"""
KERNEL_NAMES = ("lab_l2_write_evict_last", "lab_l2_discard")
LINE_BYTES = 128
GRID, BLOCK = (1024, 1, 1), (256, 1, 1)   # grid-stride loops: a few waves on any GPU

ZEROED = "zeroed"
EVICT_LAST_SWEPT = "evict-last swept, discarded, zeroed"


_built: dict[int, tuple[dict | None, str | None]] = {}   # per device ordinal: a module is its context's


def compile_flush_kernels(torch) -> tuple[dict | None, str | None]:
    """({name: launcher}, None), or (None, why not) where NVRTC cannot build them here; once per device."""
    device = torch.cuda.current_device()
    if device not in _built:
        _built[device] = _compile(torch)
        if _built[device][0] is None:   # said once a process: every timing of it is flushed so
            from lab.console import say

            say(f"warning: the L2 flush is the zeroing alone ({_built[device][1]}): a kernel that loads with an "
                "evict-last policy is timed partly warm")
    return _built[device]


def _compile(torch) -> tuple[dict | None, str | None]:
    compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
    if compile_kernel is None:
        return None, f"torch {torch.__version__} has no torch.cuda._compile_kernel (NVRTC)"
    try:
        return {name: compile_kernel(FLUSH_KERNELS, name) for name in KERNEL_NAMES}, None
    except Exception as exc:   # NVRTC missing or failing: the zeroing alone, said so
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        return None, f"NVRTC could not build the flush kernels: {first}"


class L2Flush:
    """`evict()` before a timed repetition, on the current stream: the L2 holds none of the last call's lines."""

    def __init__(self, torch, nbytes: int):
        if nbytes % (16 * LINE_BYTES):
            raise ValueError(f"the flush buffer is whole 16-byte words and 128-byte lines, not {nbytes} bytes")
        self.buffer = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
        self.nbytes = nbytes
        self.kernels, self.why_zeroed_only = compile_flush_kernels(torch)
        self.method = EVICT_LAST_SWEPT if self.kernels else ZEROED

    def evict(self) -> None:
        if self.kernels:
            self.kernels["lab_l2_write_evict_last"](GRID, BLOCK, [self.buffer, self.nbytes // 16])
            self.kernels["lab_l2_discard"](GRID, BLOCK, [self.buffer, self.nbytes // LINE_BYTES])
        self.buffer.zero_()

    def describe(self) -> str:
        mib = self.nbytes >> 20
        if self.kernels:
            return f"{mib} MiB written evict-last, discarded, then zeroed (lab.measure.l2flush)"
        return f"{mib} MiB zeroed; lines a kernel loaded evict-last may survive it ({self.why_zeroed_only})"

"""Superseded by `lab bench --kernels` (lab.measure.kernelsplit): the kernel-by-kernel split of a call from
torch.profiler's CUPTI records, now for any rung (a workspace's too) in fwd, bwd and fwd+bwd, beside every
baseline of --backends, on the bench's own timed calls (rotating inputs, L2 flushed before each, outputs
checked), with launches per call, share, the sum and what the sum excludes.

This script's body (`git show 1ade183:benchmarks/kernel_split.py`: v8's default against cuDNN, 20 calls on
fixed inputs, no L2 flush) measured the short-N split that benchmarks/RESULTS.md and v8_notes.md quote.
Its `kernel_split.py 32,16,512,128 32,16,512,128c 32,32,512,64` is now:

    lab bench --variant v8 --mode bwd --dtype float16 --backends cudnn --kernels --shape 32,16,512,128
    lab bench --variant v8 --mode bwd --dtype float16 --backends cudnn --kernels --shape 32,16,512,128 --causal
    lab bench --variant v8 --mode bwd --dtype float16 --backends cudnn --kernels --shape 32,32,512,64
"""

import sys

if __name__ == "__main__":
    print(__doc__, file=sys.stderr)
    sys.exit(2)

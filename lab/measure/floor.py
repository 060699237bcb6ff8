"""The physical floor of an attention call: no correct implementation can take less time on this device.

    floor = max(minimal FLOPs / the fastest matrix rate for the dtype,
                minimal DRAM reads / the DRAM bandwidth)

Both terms are lower bounds, so their maximum is one (a kernel cannot run its products faster than
the tensor cores, nor read its inputs faster than the memory delivers them):

  FLOPs   the products no algorithm can skip, over the score pairs the mask leaves visible, counted
          exactly (top-left causal with Nq != Nk included; not the "causal = half" convention, which
          overcounts when Nq < Nk): forward 2 products (S = Q K^T, O = P V); backward 4 (dV = P^T dO,
          dP = dO V^T, dQ = dS K, dK = dS^T Q; recomputing S, FlashAttention's fifth, is avoidable);
          each 2 * pairs * D FLOPs.
  rate    the datasheet's dense tensor rate for fp16/bf16; for float32 the faster of TF32 tensor
          cores and FFMA (a float32 result accurate to the lab's 1e-4 rule is no faster than TF32).
          Datasheet rates are at boost clock, above what a GPU sustains (DEVICE.md: 790 of 989 TFLOP/s
          measured on the H200): the floor errs low, never high.
  bytes   the inputs read once: Q, K, V (and dO for a backward). Writes are not counted: L2 is
          write-back, so O may still sit in L2 when the call ends. Only with the L2 flushed before
          each repetition are the inputs known to come from DRAM; without it the floor is compute only.

A time under the floor is not a fast kernel but a wrong measurement (work outside the timed region,
a kept result): the timer (lab.measure.timed) refuses it as "impossible" with both numbers.
Pure Python: no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lab.gpu_specs import peaks_for
from lab.measure import rates
from lab.measure.problem import Problem

PRODUCTS = {"fwd": 2, "bwd": 4, "fwd+bwd": 6}
"""Matrix products of D-long dot products over the visible score pairs that a mode cannot avoid."""


def visible_pairs(problem: Problem) -> int:
    """(query, key) pairs the mask leaves visible in one head: all of them, or top-left causal
    (query i sees keys j <= i, as SDPA's is_causal)."""
    nq, nk = problem.seqlen_q, problem.seqlen_k
    if not problem.causal:
        return nq * nk
    if nq <= nk:
        return nq * (nq + 1) // 2
    return nk * (nk + 1) // 2 + (nq - nk) * nk


def minimal_flops(problem: Problem, mode: str = "fwd") -> float:
    if mode not in PRODUCTS:
        raise ValueError(f"unknown mode {mode!r}")
    return 2.0 * PRODUCTS[mode] * problem.batch * problem.heads * visible_pairs(problem) * problem.head_dim


def minimal_read_bytes(problem: Problem, mode: str = "fwd") -> int:
    """The reads of the one minimum-bytes rule (lab.measure.rates.io_tensors): Q, K, V read once (K
    and V at heads_kv for GQA), plus dO for a backward."""
    return rates.min_read_bytes(problem, mode)


@dataclass(frozen=True)
class Floor:
    """The floor of one (problem, mode) on one device; `limit_ms` is what a time is held to."""
    flops: float
    rate_tflops: float
    rate_name: str            # "fp16 tensor", "TF32 tensor", "FP32 FFMA"
    read_bytes: int
    dram_tbps: float
    device: str | None = None

    @property
    def compute_ms(self) -> float:
        return self.flops / (self.rate_tflops * 1e12) * 1e3

    @property
    def memory_ms(self) -> float:
        return self.read_bytes / (self.dram_tbps * 1e12) * 1e3

    def limit_ms(self, l2_flushed: bool = True) -> float:
        return max(self.compute_ms, self.memory_ms if l2_flushed else 0.0)

    def describe(self, l2_flushed: bool = True) -> str:
        memory = (f"{self.read_bytes / 1e6:.4g} MB of inputs / {self.dram_tbps:g} TB/s = {self.memory_ms:.4g} ms"
                  if l2_flushed else "no memory floor (L2 not flushed: the inputs may come from L2)")
        return (f"floor {self.limit_ms(l2_flushed):.4g} ms on {self.device or 'this device'}: "
                f"{self.flops / 1e9:.4g} GFLOP / {self.rate_tflops:g} TFLOP/s ({self.rate_name}, datasheet) = "
                f"{self.compute_ms:.4g} ms; {memory}")

    def to_dict(self, l2_flushed: bool = True) -> dict:
        return {**asdict(self), "compute_ms": self.compute_ms, "memory_ms": self.memory_ms,
                "limit_ms": self.limit_ms(l2_flushed)}


def attention_floor(problem: Problem, mode: str = "fwd", peaks=None, device: str | None = None) -> Floor | None:
    """The floor of `problem` in `mode` under `peaks` (lab.gpu_specs.Peaks, or its dict as device_info
    stores it; looked up from `device` when not given). None where the device's peaks are unknown:
    then no time can be judged impossible, and the caller says so rather than inventing a peak."""
    if peaks is None and device:
        peaks = peaks_for(device)
    if not peaks:
        return None
    name, rate = rates.fastest_rate(peaks, problem.dtype)
    dram = rates.peak_rate(peaks, "dram_tbps")
    if not rate or not dram:
        return None
    return Floor(minimal_flops(problem, mode), float(rate), name, minimal_read_bytes(problem, mode), float(dram), device)

"""The rates a timing becomes: FLOPs per mode, TFLOP/s, the ratio to a baseline, the peak a dtype
is measured against. One function each, so that every table, row and manifest says the same.

FLOP convention (FlashAttention's, so that our numbers read beside theirs): the forward is
4 * B * H * Nq * Nk * D (two matmuls), halved for causal; the backward is 2.5x the forward (five
N x N matrix products against the forward's two, the recomputation of S among them);
forward+backward is 3.5x. Pure Python: a plan is costed and a stored row re-derived without torch.
"""

from __future__ import annotations

MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
MODES = tuple(MODE_FLOP_FACTOR)


def flops(problem, mode: str = "fwd") -> float:
    """FLOPs of one call of `mode` on `problem` (lab.measure.problem.Problem)."""
    if mode not in MODE_FLOP_FACTOR:
        raise ValueError(f"unknown mode {mode!r}; modes are {', '.join(MODES)}")
    return problem.flops * MODE_FLOP_FACTOR[mode]


def tflops(flop_count: float, ms: float) -> float:
    """TFLOP/s of `flop_count` FLOPs done in `ms` milliseconds."""
    return flop_count / (ms * 1e-3) / 1e12


def ratio(baseline_ms: float | None, ours_ms: float | None) -> float | None:
    """The baseline's time over ours: above 1, ours is faster. None where either is missing."""
    return baseline_ms / ours_ms if baseline_ms and ours_ms else None


def peak_for(peaks: dict | None, dtype: str | None) -> tuple[str, float | None]:
    """(the ceiling's name, its TFLOP/s) that a `dtype` computation is measured against: FFMA for
    float32, the tensor cores for float16 and bfloat16 (bf16's own rate where the table has one)."""
    peaks = peaks or {}
    if dtype == "float32":
        return "FP32 (FFMA)", peaks.get("fp32_tflops")
    key = "tensor_bf16_tflops" if dtype == "bfloat16" and peaks.get("tensor_bf16_tflops") else "tensor_fp16_tflops"
    return "FP16/BF16 tensor", peaks.get(key)


def pct_of_peak(tflops_value: float, peaks: dict | None, dtype: str) -> float | None:
    peak = peak_for(peaks, dtype)[1]
    return 100 * tflops_value / peak if peak else None

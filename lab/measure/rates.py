"""The numbers a timing becomes, by mode: FLOPs, TFLOP/s, the ratio to a baseline, % of peak and the
minimum bytes. One function each, so that every table, row, manifest and page says the same; a run
stores them with its timing (`derived`), and readers read them back instead of working them out.

FLOP convention (FlashAttention's, so that our numbers read beside theirs): the forward is
4 * B * H * Nq * Nk * D (two matmuls), halved for causal; the backward is 2.5x the forward (five
N x N matrix products against the forward's two, the recomputation of S among them);
forward+backward is 3.5x.

Minimum bytes (one rule, per mode): each tensor the mode cannot do without, read once or written once
(`io_tensors`): the forward reads Q, K, V and writes O; the backward reads Q, K, V and dO and writes dQ,
dK, dV (O and the LSE it is also handed can be recomputed, so they are no floor); forward+backward does
both, O written once. K, V, dK and dV have heads_kv heads (GQA). The timer's floor (lab.measure.floor)
counts the reads of the same list.

Peaks (one table, lab.gpu_specs): the ceiling a dtype's % of peak is stated against (`peak_for`) and
the fastest rate its matrix products can run at (`fastest_rate`, the floor's) both read it here.
Pure Python: a plan is costed and a stored row re-derived without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.measure.problem import DTYPE_BYTES, Problem

MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
MODES = tuple(MODE_FLOP_FACTOR)


def _check(mode: str) -> None:
    if mode not in MODE_FLOP_FACTOR:
        raise ValueError(f"unknown mode {mode!r}; modes are {', '.join(MODES)}")


def flops(problem: Problem, mode: str = "fwd") -> float:
    """FLOPs of one call of `mode` on `problem`, FlashAttention's convention."""
    _check(mode)
    return problem.forward_flops * MODE_FLOP_FACTOR[mode]


def tflops(flop_count: float, ms: float | None) -> float | None:
    """TFLOP/s of `flop_count` FLOPs done in `ms` milliseconds (None without a time)."""
    return flop_count / (ms * 1e-3) / 1e12 if ms else None


def ratio(baseline_ms: float | None, ours_ms: float | None) -> float | None:
    """The baseline's time over ours: above 1, ours is faster. None where either is missing."""
    return baseline_ms / ours_ms if baseline_ms and ours_ms else None


# ------------------------------------------------------------------------------ minimum bytes

@dataclass(frozen=True)
class Tensor:
    name: str
    bytes: int
    written: bool       # False: read once


def io_tensors(problem: Problem, mode: str = "fwd") -> list[Tensor]:
    """The tensors a call of `mode` must read or write at least once (the minimum-bytes rule)."""
    _check(mode)
    size = DTYPE_BYTES[problem.dtype]
    q = problem.batch * problem.heads * problem.seqlen_q * problem.head_dim * size
    kv = problem.batch * problem.heads_kv * problem.seqlen_k * problem.head_dim * size
    reads = [Tensor("Q", q, False), Tensor("K", kv, False), Tensor("V", kv, False)]
    if mode != "fwd":
        reads.append(Tensor("dO", q, False))
    writes = [Tensor("O", q, True)] if mode != "bwd" else []
    if mode != "fwd":
        writes += [Tensor("dQ", q, True), Tensor("dK", kv, True), Tensor("dV", kv, True)]
    return reads + writes


def min_bytes(problem: Problem, mode: str = "fwd") -> int:
    """Fewest DRAM bytes a call of `mode` can move: its tensors read once and written once."""
    return sum(t.bytes for t in io_tensors(problem, mode))


def min_read_bytes(problem: Problem, mode: str = "fwd") -> int:
    """The reads alone (the floor's: writes may still sit in L2 when the call ends)."""
    return sum(t.bytes for t in io_tensors(problem, mode) if not t.written)


def min_bytes_rule(mode: str = "fwd") -> str:
    """'Q, K, V read once, O written once': what the minimum counts, in words."""
    ts = io_tensors(Problem(1, 1, 1, 1, 1), mode)
    said = lambda written: ", ".join(t.name for t in ts if t.written == written)  # noqa: E731
    return f"{said(False)} read once, {said(True)} written once"


# ------------------------------------------------------------------------------ peaks

def peak_rate(peaks, name: str):
    """A rate of lab.gpu_specs.Peaks, or of its dict as a manifest stores it."""
    if peaks is None:
        return None
    return peaks.get(name) if isinstance(peaks, dict) else getattr(peaks, name, None)


def peak_for(peaks, dtype: str | None) -> tuple[str, float | None]:
    """(the ceiling's name, its TFLOP/s) that a `dtype` computation's % of peak is stated against: FFMA
    for float32 (the fp32 rungs compute on it), the dense tensor rate for float16 and bfloat16 (the
    datasheets of every GPU in the table give both the same dense rate)."""
    if dtype == "float32":
        return "FP32 (FFMA)", peak_rate(peaks, "fp32_tflops")
    return "FP16/BF16 tensor", peak_rate(peaks, "tensor_fp16_tflops")


def fastest_rate(peaks, dtype: str) -> tuple[str, float | None]:
    """(name, TFLOP/s) of the fastest any `dtype` matrix product can run here (the timer's floor): the
    tensor cores for 16-bit inputs; for float32 the faster of TF32 tensor cores and FFMA (a float32
    result within the lab's 1e-4 rule is no faster than TF32)."""
    if dtype == "float32":
        ffma, tf32 = peak_rate(peaks, "fp32_tflops"), peak_rate(peaks, "tf32_tensor_tflops")
        return ("TF32 tensor", tf32) if tf32 and tf32 > (ffma or 0) else ("FP32 FFMA", ffma)
    return (f"{'bf16' if dtype == 'bfloat16' else 'fp16'} tensor", peak_rate(peaks, "tensor_fp16_tflops"))


def pct_of_peak(tflops_value: float | None, peaks, dtype: str) -> float | None:
    peak = peak_for(peaks, dtype)[1]
    return 100 * tflops_value / peak if (peak and tflops_value is not None) else None


# ------------------------------------------------------------------------------ what a run stores

def derived(problem: Problem, mode: str, median_ms: float | None, peaks=None, dtype: str | None = None) -> dict:
    """What a timing of `mode` on `problem` becomes, as a run stores it beside the timing: flops,
    tflops, pct_of_peak (with the peak's name), min_bytes. `dtype` names a baseline's own dtype where
    it was timed in another than the problem's."""
    p = problem.with_dtype(dtype) if dtype and dtype != problem.dtype else problem
    f = flops(p, mode)
    t = tflops(f, median_ms)
    return {"flops": f, "tflops": t, "pct_of_peak": pct_of_peak(t, peaks, p.dtype),
            "peak": peak_for(peaks, p.dtype)[0], "min_bytes": min_bytes(p, mode)}


def run_rates(problem: Problem, mode: str, timing: dict, baselines: list[dict], peaks=None) -> tuple[dict, list[dict]]:
    """A run's timing and baseline rows with their derived values (`derived`, and each baseline's
    ratio to ours), as `lab profile` stores them and `lab reanalyze` brings them up to date."""
    ours = timing.get("median")
    timing = {**timing, **derived(problem, mode, ours, peaks)}
    rows = []
    for b in baselines:
        b = dict(b)
        if b.get("median_ms"):
            d = derived(problem, mode, b["median_ms"], peaks, dtype=b.get("dtype"))
            b.update(tflops=d["tflops"], pct_of_peak=d["pct_of_peak"], ratio=ratio(b["median_ms"], ours))
        rows.append(b)
    return timing, rows

"""The baselines a rung is timed beside: PyTorch SDPA with each backend pinned, in the rung's own
16-bit dtype (fp16 for an fp32 rung: the ladder's step to tensor cores) and in fp32 (`baseline_dtypes`).

A backend that cannot run a shape or dtype becomes a row saying why (PyTorch's own warning text),
never a crash: flash has no fp32 kernel, math may run out of memory at long sequences.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import asdict, dataclass

from lab.errors import LabError
from lab.measure import rates
from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP, Timing
from lab.measure.call import Attention
from lab.measure.checked import Measurement, Workload, describe, device_floor
from lab.measure.kernelsplit import KernelSplitFailed
from lab.measure.problem import Problem, softmax_scale
from lab.measure.timed import LOAD_CHECKS, TimingRefused

BACKENDS = ("cudnn", "flash", "efficient", "math")
LOW_PRECISION = ("float16", "bfloat16")


def baseline_dtypes(dtype: str) -> tuple[str, ...]:
    """The dtypes SDPA is timed in beside a rung of `dtype`: its own where it is 16-bit (a bf16 rung
    against bf16 SDPA, never fp16: a ratio across dtypes is not the rung's), fp16 for an fp32 rung
    (how far the fast path is), and fp32."""
    return (dtype if dtype in LOW_PRECISION else "float16", "float32")


STANDARD = "standard"
SWEEP_BASELINES = tuple(f"sdpa-{b}" for b in BACKENDS) + (STANDARD,)
"""What a sweep can time beside the rungs: each SDPA backend pinned, and eager "standard attention"
(the write-ups' baseline: softmax(Q K^T) V with the N x N scores materialised in memory)."""


@dataclass
class Baseline:
    name: str            # "sdpa-flash"
    backend: str         # "flash"
    dtype: str
    status: str          # "ok" or "unavailable"
    reason: str = ""
    timing: Timing | None = None
    tflops: float | None = None
    peak_memory_bytes: int | None = None
    kernel_split: dict | None = None   # `lab bench --kernels` (lab.measure.kernelsplit), or why there is none

    def to_dict(self, ours_median_ms: float | None = None) -> dict:
        d = asdict(self)
        d.pop("timing")
        if d["kernel_split"] is None:   # only where asked: a stored run's baselines have no such field
            d.pop("kernel_split")
        t = self.timing
        d.update(median_ms=t.median if t else None, std_ms=t.std if t else None,
                 ci95_low=t.ci95_low if t else None, ci95_high=t.ci95_high if t else None,
                 reps=t.reps if t else None)
        d["ratio"] = rates.ratio(t.median if t else None, ours_median_ms)
        if t is not None and (t.checks or {}).get("under_load_ms"):   # only under load: stored runs keep their fields
            d["under_load"] = under_load_reading(t)
        return d


def under_load_reading(timing: Timing) -> dict:
    """What NVML read at the end of each stretch of a timing under load (lab.measure.timed, UNDER LOAD)."""
    c = timing.checks or {}
    return {k: c.get(k) for k in LOAD_CHECKS if k != "load_clock_event_reasons"}


_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")


def _unavailable_reason(messages: list[str]) -> str:
    """PyTorch explains a refused backend in warnings, interleaved with headers ("... not used
    because:") and notes about the backends we disabled on purpose; keep only the explanations."""
    reasons = []
    for msg in messages:
        text = _TRIGGERED.sub("", msg).strip()
        if not text or text.endswith("because:") or "has been runtime disabled" in text:
            continue
        if text not in reasons:
            reasons.append(text)
    return "; ".join(reasons)[:400]


def sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]


def standard_attention(q, k, v, causal: bool, scale: float, mask=None):
    """softmax(Q K^T * scale) V in eager PyTorch, materialising the B x H x Nq x Nk scores (and the
    probabilities) in the input dtype: the O(N^2) memory flash attention avoids. GQA: K and V heads are
    repeated to the query heads first, as an eager model does. `mask`: a precomputed top-left causal
    mask (True = hidden), so building it is not timed."""
    import torch

    if k.shape[1] != q.shape[1]:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def causal_mask(seqlen_q: int, seqlen_k: int, device):
    """True where query i must not see key j (j > i, top-left aligned as SDPA's is_causal)."""
    import torch

    return torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device).triu(1)


def attention(name: str, problem: Problem, device="cuda") -> Attention:
    """A baseline as lab.measure.call calls it: `sdpa-<backend>` pinned by `sdpa_kernel` around the
    whole timing (entering it per call would add its own host time to every event-timed call; a
    factory, because such a context is entered once only and a cell is timed once per method), or
    `standard`. Either one's backward is autograd's."""
    scale = softmax_scale(problem)
    if name == STANDARD:
        mask = causal_mask(problem.seqlen_q, problem.seqlen_k, device) if problem.causal else None
        return Attention(name, lambda q, k, v: standard_attention(q, k, v, problem.causal, scale, mask), autograd=True)
    if not name.startswith("sdpa-") or name[5:] not in BACKENDS:
        raise LabError(f"unknown baseline {name!r}; known: {', '.join(SWEEP_BASELINES)}")
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    gqa = {"enable_gqa": True} if problem.gqa else {}
    backend = sdpa_backend(name[5:])
    return Attention(name, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=problem.causal,
                                                                          scale=scale, **gqa),
                     autograd=True, context=lambda: sdpa_kernel(backend))


def unavailable_reason(messages: list[str], error: BaseException) -> str:
    """Why a backend refused a call: PyTorch's warnings (the explanations only), else the error's
    first line."""
    return _unavailable_reason(messages) or (str(error).strip().splitlines() or [type(error).__name__])[0][:400]


def run_baseline(problem: Problem, backend: str, dtype: str, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
                 seed: int = 0, mode: str = "fwd", kernel_calls: int = 0, under_load_ms: float = 0.0) -> Baseline:
    """One SDPA backend timed in `mode` through the one measurement (lab.measure.checked.Measurement):
    its inputs rotating like a rung's (so that both are timed alike), held to the same floor; its
    outputs are the reference, not checked. `kernel_calls`: then that many of its calls traced for
    the kernel split (Measurement.kernel_split), where it was timed. `under_load_ms`: each repetition behind
    that long a stretch of its own calls (lab.measure.timed, UNDER LOAD)."""
    import torch

    name = f"sdpa-{backend}"
    p = problem.plain().with_dtype(dtype)   # SDPA's default backward: a deterministic problem's baseline is the same
    impl = attention(name, p)
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            workload = Workload(p, impl.layout, seed=seed)
            measurement = Measurement(impl, workload, mode, verify=False, floor=device_floor(p, mode),
                                      what=describe(f"{name} {dtype}", p, mode))
            timing = measurement.time(reps=reps, warmup=warmup, under_load_ms=under_load_ms)
            kernels = kernel_split_of(measurement, kernel_calls) if kernel_calls else None
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return Baseline(name, backend, dtype, "unavailable", "out of memory")
    except TimingRefused as refused:   # never on PyTorch's own kernels, unless a peak is wrong: say so
        return Baseline(name, backend, dtype, "unavailable", refused.row_reason())
    except RuntimeError as e:
        torch.cuda.empty_cache()
        return Baseline(name, backend, dtype, "unavailable", unavailable_reason([str(w.message) for w in caught], e))
    return Baseline(name, backend, dtype, "ok", "", timing, rates.tflops(rates.flops(p, mode), timing.median),
                    timing.peak_memory_bytes, kernels)


def kernel_split_of(measurement: Measurement, calls: int) -> dict:
    """The measurement's kernel split, or {"error": why there is none}: a split the trace could not
    give is said in its place, never a reason to drop the timing beside it."""
    try:
        return measurement.kernel_split(calls)
    except (KernelSplitFailed, TimingRefused) as e:
        return {"error": str(e)}


def select_backends(spec: str) -> tuple[str, ...]:
    """`all` or a comma list of BACKENDS (e.g. `cudnn,flash`: the fast fp16 kernels only, for a
    grid of long sequences where math and efficient cost most of the run)."""
    if spec.strip() == "all":
        return BACKENDS
    chosen = tuple(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown or not chosen:
        raise LabError(f"unknown SDPA backend(s) {', '.join(unknown) or repr(spec)}; choose from {', '.join(BACKENDS)} or all")
    return chosen


def run_baselines(problem: Problem, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP, backends=BACKENDS,
                  dtypes=None, progress=None, mode: str = "fwd", kernel_calls: int = 0,
                  under_load_ms: float = 0.0) -> list[Baseline]:
    """Each backend in each of `dtypes` (default: `baseline_dtypes` of the problem's dtype); with
    `kernel_calls`, each one's kernel split too (run_baseline)."""
    out = []
    for dtype in dtypes or baseline_dtypes(problem.dtype):
        for backend in backends:
            if progress:
                progress(f"baseline sdpa-{backend} {dtype}" + (f" {mode}" if mode != "fwd" else ""))
            out.append(run_baseline(problem, backend, dtype, reps, warmup, mode=mode, kernel_calls=kernel_calls,
                                    under_load_ms=under_load_ms))
    return out

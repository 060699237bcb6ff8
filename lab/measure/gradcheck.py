"""The backward's correctness gate: a rung's O, LSE, dQ, dK and dV against float64 autograd.

One check runs the rung as training does: its forward writes O and the row log-sum-exp into
NaN-poisoned buffers, then its backward takes that O and LSE with a seeded dO and writes dQ, dK and
dV into NaN-poisoned buffers (an element never written stays NaN and fails). The reference is
float64 autograd through softmax(Q K^T * scale [+ top-left causal mask]) V on the same (rounded)
inputs, chunk by chunk over (batch, K/V head) so that long sequences fit.

Each tensor is judged on its own, by its largest absolute error against the float64 value:
  O, dQ, dK, dV  max_abs_err <= BACKWARD_FACTOR x torch SDPA's max_abs_err on the same inputs, same
                 dtype, forward and backward by autograd (the backend torch picks); floored at one
                 rounding step of the tensor's magnitude (the gradients': of the largest gradient;
                 fp32: the forward's FP32_REL_TOL of it), for shapes where SDPA happens to be exact
  LSE            torch's own LSE in the inputs' dtype (scores rounded to it, log-sum-exp in fp32) sets
                 the error scale the same way: SDPA does not return its LSE through a public API
A wrong tensor fails its shape, and the failure names the tensor, the shape and the worst element.

The shapes (`backward_shapes`) are FlashAttention's ragged corners: N = 1, odd N, Nq != Nk pairs
(113/203, 1023/1024, 1/239), causal and not, B*H in the hundreds, large logits (Q scaled so scores
reach ~100: an online softmax that does not subtract its running max overflows), GQA for a rung that
declares it; then seeded random ragged shapes.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lab.measure.problem import Problem

BACKWARD_FACTOR = 2.0
TENSORS = ("O", "LSE", "dQ", "dK", "dV")
LARGE_LOGITS = 16.0
"""Q is multiplied by this on large-logit shapes: with inputs N(0.5, 1) and D = 64 the scaled scores
then reach about 100, where exp() of an unshifted score overflows fp32."""
REFERENCE_CHUNK_BYTES = 1 << 29

# (B, H, Hkv or None, Nq, Nk, causal, Q's scale); head_dim and dtype come from the rung
CORNERS = (
    (2, 3, None, 1, 1, False, 1.0),
    (2, 3, None, 17, 17, True, 1.0),
    (2, 3, None, 113, 203, False, 1.0),
    (2, 3, None, 113, 203, True, 1.0),
    (1, 2, None, 1023, 1024, True, 1.0),
    (2, 3, None, 1, 239, True, 1.0),
    (2, 3, None, 239, 1, False, 1.0),
    (4, 64, None, 128, 128, False, 1.0),          # B*H = 256
    (1, 2, None, 1024, 1023, False, 1.0),
    (2, 3, None, 255, 255, True, LARGE_LOGITS),
    (1, 4, None, 64, 97, False, LARGE_LOGITS),
)
GQA_CORNERS = ((2, 8, 2, 113, 203, True, 1.0), (1, 6, 1, 65, 65, False, 1.0))
RANDOM_MAX_SEQLEN = 700


@dataclass(frozen=True)
class GradShape:
    problem: Problem
    q_scale: float = 1.0

    def label(self) -> str:
        return self.problem.label() + ("" if self.q_scale == 1.0 else f" (Q x{self.q_scale:g}: large logits)")


def backward_shapes(variant, count: int, seed: int = 0, dtype: str | None = None,
                    causal: bool | None = None) -> list[GradShape]:
    """`count` seeded shapes: the corners (head_dims taken in turn), then random ragged ones.
    `dtype`: every shape's (default: the rung's first); `causal`: every shape causal (True) or none
    (False), default None: each corner's own mask and a coin for the random ones (drawn either way, so
    a fixed mask keeps the sizes of the mixed list)."""
    dtype = dtype or variant.default_dtype
    corners = list(CORNERS) + (list(GQA_CORNERS) if variant.gqa else [])
    dims = variant.head_dims
    shapes = [GradShape(Problem(b, h, nq, nk, dims[i % len(dims)], c if causal is None else causal, dtype, hkv), scale)
              for i, (b, h, hkv, nq, nk, c, scale) in enumerate(corners)][:count]
    rng = random.Random(seed)
    while len(shapes) < count:
        nq = rng.randint(1, RANDOM_MAX_SEQLEN)
        nk = nq if rng.random() < 0.5 else rng.randint(1, RANDOM_MAX_SEQLEN)
        b, h, d, c = rng.randint(1, 3), rng.randint(1, 4), rng.choice(dims), rng.random() < 0.5
        shapes.append(GradShape(Problem(b, h, nq, nk, d, c if causal is None else causal, dtype)))
    return shapes


def _attention64(q, k, v, causal: bool, scale: float, row0: int = 0):
    """(o, lse) in float64 of one chunk: q (c, G, rows, D), the query rows row0.. of the problem; k and
    v (c, 1, Nk, D); differentiable."""
    import torch

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:   # top-left aligned: query i sees keys j <= i (the lab's and SDPA's is_causal)
        rows, nk = scores.shape[-2:]
        i = torch.arange(row0, row0 + rows, device=q.device)[:, None]
        scores = scores.masked_fill(torch.arange(nk, device=q.device)[None, :] > i, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]), v), lse


def reference_backward(q, k, v, dout, causal: bool, scale: float, device=None,
                       chunk_bytes: int = REFERENCE_CHUNK_BYTES) -> dict:
    """float64 O, LSE, dQ, dK, dV by autograd, (B, H, N, D) tensors (K and V may have fewer heads:
    GQA). Chunked over (batch, K/V head), then over query rows, so that one chunk's scores stay near
    `chunk_bytes` whatever the sequence length: a row chunk's dQ, O and LSE are exact (it sees every
    key), and its share of dK and dV is summed over the row chunks. `dout` None: O and LSE alone, no
    autograd (the forward's check of a rung that writes the LSE)."""
    import torch

    device = torch.device(device) if device is not None else q.device
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    g = h // hkv

    def f64(t, heads):
        return t.to(device=device, dtype=torch.float64).reshape(b * hkv, heads, t.shape[2], d)

    grads = dout is not None
    q64 = f64(q, g)
    k64, v64 = f64(k, 1), f64(v, 1)
    do64 = f64(dout, g) if grads else None
    named = (("O", q64), ("dQ", q64), ("dK", k64), ("dV", v64)) if grads else (("O", q64),)
    out = {name: torch.zeros_like(t) for name, t in named}
    out["LSE"] = torch.empty((b * hkv, g, nq), dtype=torch.float64, device=device)
    row_bytes = g * max(nk, 1) * 8 * 4                  # scores, probabilities and their grads, one query row
    rows = max(1, min(nq, chunk_bytes // row_bytes))
    per = max(1, chunk_bytes // max(1, row_bytes * rows)) if rows == nq else 1
    for c0 in range(0, b * hkv, per):
        sl = slice(c0, c0 + per)
        kc, vc = (t[sl].detach().requires_grad_(grads) for t in (k64, v64))
        for r0 in range(0, nq, rows):
            rs = slice(r0, r0 + rows)
            qc = q64[sl, :, rs].detach().requires_grad_(grads)
            with torch.set_grad_enabled(grads):
                o, lse = _attention64(qc, kc, vc, causal, scale, r0)
                if grads:
                    dq, dk, dv = torch.autograd.grad(o, (qc, kc, vc), do64[sl, :, rs])
            out["O"][sl, :, rs], out["LSE"][sl, :, rs] = o.detach(), lse.detach()
            if grads:
                out["dQ"][sl, :, rs] = dq
                out["dK"][sl] += dk
                out["dV"][sl] += dv
    found = {"O": out["O"].reshape(b, h, nq, d), "LSE": out["LSE"].reshape(b, h, nq)}
    if grads:
        found.update(dQ=out["dQ"].reshape(b, h, nq, d), dK=out["dK"].reshape(b, hkv, nk, d),
                     dV=out["dV"].reshape(b, hkv, nk, d))
    return found


def sdpa_errors(q, k, v, dout, causal: bool, scale: float, ref: dict) -> dict:
    """torch's own max_abs_err per tensor on these inputs, in their dtype: SDPA's forward and its
    autograd backward for O, dQ, dK, dV; the scores rounded to the dtype for LSE."""
    import torch
    import torch.nn.functional as F

    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale, **gqa)
        dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), dout)
    got = {"O": o, "dQ": dq, "dK": dk, "dV": dv}
    return {**{name: _max_abs(got[name], ref[name]) for name in got}, "LSE": lse_error(q, k, causal, scale, ref["LSE"])}


def lse_error(q, k, causal: bool, scale: float, ref_lse) -> float:
    """torch's own max_abs_err on the row log-sum-exp in the inputs' dtype: the scores rounded to it
    (by the matmul), their log-sum-exp in fp32. SDPA does not return its LSE through a public API."""
    import torch

    kr = k if k.shape[1] == q.shape[1] else k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    b, h, nq, _ = q.shape
    nk = k.shape[2]
    # query rows a chunk at a time, so that a long sequence's scores (a forward's timed problem) fit
    rows = max(1, min(nq, REFERENCE_CHUNK_BYTES // max(1, b * h * nk * 6)))
    worst = 0.0
    for r0 in range(0, nq, rows):
        scores = (torch.matmul(q[:, :, r0:r0 + rows], kr.transpose(-2, -1)) * scale).float()   # rounded to the dtype
        if causal:   # top-left aligned: query i sees keys j <= i
            i = torch.arange(r0, r0 + scores.shape[2], device=q.device)[:, None]
            scores = scores.masked_fill(torch.arange(nk, device=q.device)[None, :] > i, float("-inf"))
        worst = max(worst, _max_abs(torch.logsumexp(scores, dim=-1), ref_lse[:, :, r0:r0 + rows]))
    return worst


def _max_abs(t, ref) -> float:
    import torch

    diff = (t.to(device=ref.device, dtype=torch.float64) - ref).abs()
    return float(diff.max().item()) if diff.numel() else 0.0


@dataclass
class TensorCheck:
    name: str
    passed: bool
    max_abs_err: float
    tolerance: float
    rel_err: float
    mean_abs_err: float
    nonfinite: int = 0
    numel: int = 0
    worst_index: tuple | None = None
    worst_value: float | None = None
    worst_reference: float | None = None

    def worst_text(self) -> str:
        if self.worst_index is None:
            return ""
        return (f"[{', '.join(map(str, self.worst_index))}] = {self.worst_value:.6g}, "
                f"float64 says {self.worst_reference:.6g}")

    def to_dict(self) -> dict:
        fin = lambda x: float(x) if x is not None and math.isfinite(x) else None  # noqa: E731
        return {"tensor": self.name, "passed": self.passed, "max_abs_err": fin(self.max_abs_err),
                "tolerance": fin(self.tolerance), "rel_err": fin(self.rel_err), "mean_abs_err": fin(self.mean_abs_err),
                "nonfinite": self.nonfinite, "worst": self.worst_text() or None}


def judge_tensor(name: str, got, ref, tolerance: float) -> TensorCheck:
    """One tensor against its float64 value: NaN/inf anywhere fails; the worst element is located
    (a non-finite one first, since it is the one a reader must see)."""
    import torch

    got64 = got.to(device=ref.device, dtype=torch.float64)
    diff = (got64 - ref).abs()
    bad = ~torch.isfinite(got64)
    nonfinite = int(bad.sum().item())
    if diff.numel() == 0:
        return TensorCheck(name, True, 0.0, tolerance, 0.0, 0.0)
    flat = int(bad.flatten().nonzero()[0].item()) if nonfinite else int(torch.nan_to_num(diff, nan=math.inf).argmax().item())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
    max_abs = math.nan if nonfinite else float(diff.max().item())
    norm = torch.linalg.vector_norm(ref).item()
    rel = math.nan if nonfinite or norm == 0 else torch.linalg.vector_norm(got64 - ref).item() / norm
    passed = nonfinite == 0 and max_abs <= tolerance
    return TensorCheck(name, passed, max_abs, tolerance, rel, float(diff.mean().item()), nonfinite, diff.numel(),
                       index, float(got64[index].item()), float(ref[index].item()))


REPEATED = ("dQ", "dK", "dV")
"""The tensors a deterministic backward must give bit for bit again (lab.measure.check runs it twice)."""


@dataclass
class RepeatCheck:
    """One gradient of a deterministic backward against the same gradient of a second run on the same
    inputs: equal means equal bits (NaN payloads and signed zeros included), not equal values."""
    name: str
    equal: bool
    differing: int = 0          # elements whose bits differ
    numel: int = 0
    max_abs_diff: float = 0.0   # the largest |first - second| among them (NaN where one is not finite)

    def text(self) -> str:
        if self.equal:
            return f"{self.name} bitwise equal over two runs"
        return (f"{self.name} not bitwise equal over two runs of the deterministic backward: {self.differing} of "
                f"{self.numel} elements differ (max |diff| {self.max_abs_diff:.3g})")

    def to_dict(self) -> dict:
        return {"tensor": self.name, "equal": self.equal, "differing": self.differing, "numel": self.numel,
                "max_abs_diff": self.max_abs_diff if math.isfinite(self.max_abs_diff) else None}


def bitwise_repeat(name: str, first, second) -> RepeatCheck:
    """Whether two runs' tensor has the same bits (torch.equal on the integer view of its bits)."""
    import torch

    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[first.element_size()]
    a, b = first.contiguous().view(ints), second.contiguous().view(ints)
    if torch.equal(a, b):
        return RepeatCheck(name, True, 0, first.numel())
    differ = a != b
    diff = (first.double() - second.double()).abs()[differ]
    return RepeatCheck(name, False, int(differ.sum().item()), first.numel(),
                       float(diff.max().item()) if diff.numel() else math.nan)


def tolerances(sdpa_err: dict, ref: dict, dtype: str, fp32_step: float) -> dict:
    """BACKWARD_FACTOR x torch's error per tensor, floored at one rounding step of its magnitude
    (for float32 inputs `fp32_step` of it: the forward's FP32_REL_TOL, lab.measure.check)."""
    import torch

    step = fp32_step if dtype == "float32" else torch.finfo(getattr(torch, dtype)).eps

    def magnitude(name):
        return float(ref[name].abs().max().item()) if ref[name].numel() else 0.0

    # The gradients' floor is set by the largest of them: a gradient that is exactly zero in float64
    # (dQ and dK with one key, where P = 1 and dS = P (dP - D) vanishes) still leaves a correct kernel
    # its rounding residue, on the scale of the gradients it computes beside it (dV = dO there).
    grads = max((magnitude(n) for n in ("dQ", "dK", "dV") if n in ref), default=0.0)
    out = {}
    for name in (n for n in TENSORS if n in sdpa_err):   # the timed check judges the gradients only, the
                                                          # forward's check of a writes_lse rung its LSE
        if name == "LSE":   # the LSE is fp32 whatever the inputs: its rounding step is fp32's
            floor = torch.finfo(torch.float32).eps * max(magnitude(name), 1.0) * 4
        elif name == "O":
            floor = step * magnitude(name)
        else:
            floor = step * grads
        out[name] = max(BACKWARD_FACTOR * sdpa_err[name], floor)
    return out

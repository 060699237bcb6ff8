"""The correctness gate: a rung's output against a float64 reference on seeded shapes.

Each shape gets fresh seeded inputs (`lab.measure.problem.make_inputs`: standard normal + 0.5, so scores
are not zero-mean), an output buffer poisoned with NaN before the launch (an element the kernel
never writes stays NaN and fails the check), and a reference computed in float64 by torch.

The rule depends on the rung's dtype:
  float32:          rel_err = ||out - ref|| / ||ref|| <= FP32_REL_TOL
  float16/bfloat16: max_abs_err <= LOW_PRECISION_FACTOR x the max_abs_err of torch SDPA in the
                    same dtype on the same inputs (issue 4's rule: "max error at most 2x SDPA's")
rel_err uses Frobenius norms over the whole output; every error is reported whichever one is judged. The rule and tolerance travel with the result, so reports show what was enforced.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from lab.environment import require_compute_capability, require_gpu
from lab.errors import LabError
from lab.ladder.build import build
from lab.ladder.rungfile import Variant
from lab.measure import gradcheck
from lab.measure.call import require_mode, upstream_grad
from lab.measure.gradcheck import GradShape, backward_shapes
from lab.measure.problem import (Problem, check_dtype, check_supported, make_inputs, require_deterministic_modes,
                                 softmax_scale)

FP32_REL_TOL = 1e-4
"""Relative error (Frobenius) allowed for an fp32 rung against the float64 reference.

fp32 carries 24 significant bits (unit roundoff 6e-8); a correct kernel differs from float64 only
by rounding in its D-long dot products, its exp and its N-long running sums, which stays orders of
magnitude below 1e-4 at the lengths we check. Real bugs (a dropped or repeated tile, a wrong mask
boundary, a missed rescale of the running sum) move whole rows and give errors of 1e-3 and more.
"""

LOW_PRECISION_FACTOR = 2.0
"""fp16/bf16 rungs may be at most this many times further from float64 than torch's own SDPA in
the same dtype on the same inputs (the rule of sonnyli/flash_attention_from_scratch). Where SDPA
happens to be exact (one key: the output is a row of V) the tolerance is floored at the dtype's
machine epsilon, one rounding step relative to the output's size."""

FP32_RULE = f"rel_err = ||out - ref|| / ||ref|| <= {FP32_REL_TOL:.0e} against float64"
LOW_PRECISION_RULE = (f"max_abs_err <= {LOW_PRECISION_FACTOR:g} x max_abs_err of torch SDPA in the same dtype, "
                      "both against float64")

CORNER_SEQLENS = (1, 17, 1000, 1023)
"""Sequence lengths every full check covers: a single row, one ragged tile, and long sequences
that end one row short of, or well inside, a tile boundary."""
CORNER_BATCH, CORNER_HEADS = 2, 3       # more than one CTA, and batch != heads to catch swapped strides
RANDOM_MAX_SEQLEN = 700                 # random ragged lengths in [1, 700]: cheap even for v1
DEFAULT_SHAPE_COUNT = 24

CPU_REFERENCE_MAX_SCORES = 1 << 20
"""Shapes with at most this many attention scores (B*H*Nq*Nk) get their reference on the CPU:
as fast as the GPU at that size, and it keeps the reference off the device under test."""
REFERENCE_CHUNK_BYTES = 1 << 30
"""The float64 reference materializes scores chunk by chunk (heads, then query rows) so that one
chunk's scores stay under this many bytes, whatever the shape."""


@dataclass
class ShapeCheck:
    problem: Problem
    passed: bool
    rel_err: float
    max_abs_err: float
    mean_abs_err: float
    tolerance: float
    nonfinite: int = 0          # NaN/inf elements of the output: unwritten (poison) or overflowed
    numel: int = 0
    error: str | None = None    # the launch raised instead of returning
    metric: str = "rel_err"     # the error the rule judges: rel_err (fp32) or max_abs_err (fp16/bf16)
    tensors: list | None = None  # the backward's O, LSE, dQ, dK, dV (lab.measure.gradcheck.TensorCheck)
    label_text: str | None = None   # the shape as the backward names it (large logits marked)
    lse: object = None          # the forward's LSE of a writes_lse rung (gradcheck.TensorCheck), or None
    repeats: list | None = None  # a deterministic backward's dQ, dK, dV against a second run (gradcheck.RepeatCheck)
    o_call: str | None = None   # a writes_lse rung: which of its two forwards the O errors are of (check_problem)

    @property
    def judged_err(self) -> float:
        return getattr(self, self.metric)

    @property
    def label(self) -> str:
        return self.label_text or self.problem.label()

    @property
    def failed_tensor(self):
        """The first tensor of a backward check that failed (None: all passed, or a forward check)."""
        return next((t for t in self.tensors or () if not t.passed), None)

    @property
    def failed_repeat(self):
        """The first gradient of a deterministic backward whose second run gave other bits, or None."""
        return next((r for r in self.repeats or () if not r.equal), None)

    @property
    def worst_tensor(self):
        """The failing tensor, else the one closest to its tolerance."""
        if not self.tensors:
            return None
        return self.failed_tensor or max(self.tensors, key=lambda t: t.max_abs_err / t.tolerance if t.tolerance else 0)

    def to_dict(self) -> dict:
        d = {"shape": self.label, "passed": self.passed, "rel_err": _finite(self.rel_err),
             "max_abs_err": _finite(self.max_abs_err), "mean_abs_err": _finite(self.mean_abs_err),
             "tolerance": _finite(self.tolerance), "judged": self.metric, "nonfinite": self.nonfinite,
             "error": self.error}
        if self.tensors is not None:
            d["tensors"] = [t.to_dict() for t in self.tensors]
        if self.lse is not None:
            d["lse"] = self.lse.to_dict()
        if self.repeats is not None:
            d["bitwise_repeat"] = [r.to_dict() for r in self.repeats]
        if self.o_call is not None:
            d["o_call"] = self.o_call
        return d

    @property
    def output_passed(self) -> bool:
        """The forward's O alone (a shape of a writes_lse rung may fail on its LSE instead)."""
        return self.nonfinite == 0 and math.isfinite(self.judged_err) and self.judged_err <= self.tolerance


@dataclass
class CheckResult:
    variant_id: str
    rule: str
    shapes: list[ShapeCheck] = field(default_factory=list)
    mode: str = "fwd"
    deterministic: bool = False   # the backward's deterministic mode, its bits checked over two runs

    @property
    def passed(self) -> bool:
        return bool(self.shapes) and all(s.passed for s in self.shapes)

    @property
    def failed_shape(self) -> str | None:
        return next((s.label for s in self.shapes if not s.passed), None)

    @property
    def failure(self) -> str | None:
        """What is wrong, in one line: the shape and what the launch said where it raised (a refusal is
        not a wrong output), else the tensor (the forward's O) and its error, and for a backward its
        worst element."""
        bad = next((s for s in self.shapes if not s.passed), None)
        if bad is None:
            return None
        t = bad.failed_tensor
        if bad.error:
            return f"{bad.label}: {bad.error}"
        if t is None and bad.failed_repeat is not None:   # every value right, the bits not the same twice
            return f"{bad.failed_repeat.text()} on {bad.label}"
        if t is None and bad.lse is not None and not bad.lse.passed and bad.output_passed:
            t = bad.lse   # the forward's O is right, the LSE it wrote for a backward is not
        if t is None:
            what = (f"{bad.nonfinite} non-finite output elements" if bad.nonfinite
                    else f"{bad.metric} {_fmt(bad.judged_err)} > tolerance {_fmt(bad.tolerance)}")
            return f"O on {bad.label}{f' ({bad.o_call})' if bad.o_call else ''}: {what}"
        what = (f"{t.nonfinite} non-finite elements" if t.nonfinite
                else f"max_abs_err {_fmt(t.max_abs_err)} > tolerance {_fmt(t.tolerance)}")
        return f"{t.name} on {bad.label}: {what}; worst element {t.worst_text()}"

    @property
    def worst(self) -> ShapeCheck | None:
        """The shape closest to (or furthest past) its tolerance; failures with NaN count as worst."""
        def margin(s: ShapeCheck) -> float:
            if not s.passed and not math.isfinite(s.judged_err):
                return math.inf
            return s.judged_err / s.tolerance if s.tolerance > 0 else math.inf
        return max(self.shapes, key=margin, default=None)

    @property
    def max_abs_err(self) -> float:
        return max((s.max_abs_err for s in self.shapes), default=math.nan)

    @property
    def mean_abs_err(self) -> float:
        """Mean absolute error over every output element of every shape."""
        total = sum(s.numel for s in self.shapes)
        return sum(s.mean_abs_err * s.numel for s in self.shapes) / total if total else math.nan

    def summary(self) -> str:
        w = self.worst
        if w is None:
            return "no shapes checked"
        bad = [s for s in self.shapes if not s.passed]
        head = (f"{len(bad)} of {len(self.shapes)} shapes failed" if bad
                else f"{len(self.shapes)} shapes passed")
        if self.deterministic:
            head += (f", dQ/dK/dV bitwise equal over two runs on "
                     f"{sum(1 for s in self.shapes if s.repeats and not s.failed_repeat)} of {len(self.shapes)}")
        wt = w.worst_tensor
        detail = (w.error if w.error else
                  f"worst {(wt.name + ' ') if wt else ''}{w.metric} {_fmt(w.judged_err)} (tolerance {_fmt(w.tolerance)}) "
                  f"on {w.label}" + (f", {w.nonfinite} non-finite output elements" if w.nonfinite else ""))
        lse = [s for s in self.shapes if s.lse is not None]
        if lse:   # a writes_lse rung's forward: the LSE's own worst, beside O's
            s = next((s for s in lse if not s.lse.passed), None) or max(
                lse, key=lambda s: s.lse.max_abs_err / s.lse.tolerance if s.lse.tolerance else 0)
            t = s.lse
            detail += (f"; LSE {'FAILED' if not t.passed else 'worst'} max_abs_err {_fmt(t.max_abs_err)} "
                       f"(tolerance {_fmt(t.tolerance)}) on {s.label}")
        return f"{head}; {detail}"

    def to_dict(self) -> dict:
        """The manifest's `correctness` section (lab.store.runs); non-finite errors become null."""
        w = self.worst
        d = {"passed": self.passed, "max_abs_err": _finite(self.max_abs_err),
             "mean_abs_err": _finite(self.mean_abs_err), "rel_err": _finite(w.rel_err) if w else None,
             "tolerance": _finite(w.tolerance) if w else None, "judged": w.metric if w else None,
             "rule": self.rule,
             "shapes_checked": [s.label for s in self.shapes],
             "failed_shape": self.failed_shape, "failure": self.failure, "mode": self.mode}
        lse = [s.lse for s in self.shapes if s.lse is not None]
        if self.mode == "fwd" and lse:   # a writes_lse rung's forward: its LSE checked on every shape
            d["lse_checked"] = True
            d["lse_max_abs_err"] = _finite(max((t.max_abs_err for t in lse), default=math.nan))
        if self.mode != "fwd":
            bad = next((s for s in self.shapes if not s.passed), None)
            t = bad.failed_tensor if bad else None
            d.update(tensors=list(gradcheck.TENSORS), failed_tensor=t.name if t else None,
                     worst_element=t.worst_text() if t else None)
        if self.deterministic:   # stored with every run and verdict of the mode: never mistaken for the default's
            r = bad.failed_repeat if bad else None
            d.update(deterministic=True, bitwise_repeat_failed=r.name if r else None)
        return d


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else str(x)


def rule_for(dtype: str) -> str:
    return FP32_RULE if dtype == "float32" else LOW_PRECISION_RULE


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------

def check_shapes(variant: Variant, count: int = DEFAULT_SHAPE_COUNT, seed: int = 0, dtype: str | None = None,
                 causal: bool | None = None) -> list[Problem]:
    """`count` seeded shapes for the rung: first the corners (every N in CORNER_SEQLENS x every
    head_dim x causal and not, ordered so that any prefix spreads over all three), for a rung that
    declares gqa the backward's GQA corners (K/V heads dividing Q's: a group and multi-query, ragged),
    then random ragged ones (seqlen_q != seqlen_k about half of the time). Same (variant, count,
    seed), same list.
    `dtype`: every shape in it (default: the rung's first; one it does not declare is refused, exit 2).
    `causal`: every shape causal (True) or none (False); default None, both. The random shapes are
    drawn the same way whatever they are, so a fixed mask keeps the sizes of the mixed list.
    """
    if count < 0:
        raise LabError(f"the number of shapes must be >= 0, got {count}")
    dtype = seeded_dtype(variant, dtype)
    masks = (False, True) if causal is None else (causal,)
    corners = _spread(list(itertools.product(CORNER_SEQLENS, variant.head_dims, masks)))
    shapes = [Problem(CORNER_BATCH, CORNER_HEADS, n, n, d, c, dtype) for n, d, c in corners]
    if variant.gqa:
        dims = variant.head_dims
        shapes += [Problem(b, h, nq, nk, dims[i % len(dims)], c if causal is None else causal, dtype, hkv)
                   for i, (b, h, hkv, nq, nk, c, _) in enumerate(gradcheck.GQA_CORNERS)]
    shapes = shapes[:count]
    rng = random.Random(seed)
    while len(shapes) < count:
        seqlen_q = rng.randint(1, RANDOM_MAX_SEQLEN)
        seqlen_k = seqlen_q if rng.random() < 0.5 else rng.randint(1, RANDOM_MAX_SEQLEN)
        b, h, d, c = rng.randint(1, 3), rng.randint(1, 4), rng.choice(variant.head_dims), rng.random() < 0.5
        shapes.append(Problem(b, h, seqlen_q, seqlen_k, d, c if causal is None else causal, dtype))
    return shapes


def seeded_dtype(variant: Variant, dtype: str | None) -> str:
    """The dtype of a seeded shape list: the one asked for (refused, exit 2, where the rung does not
    declare it), else the rung's first."""
    if dtype is None:
        return variant.default_dtype
    check_dtype(variant, dtype)
    return dtype


def _spread(combos: list[tuple]) -> list[tuple]:
    """Order combinations greedily so each next one repeats the fewest values already used: the
    first few shapes then cover every N, every D and both masks instead of one corner."""
    seen: Counter = Counter()
    out, remaining = [], list(combos)
    while remaining:
        best = min(remaining, key=lambda c: sum(seen[(i, x)] for i, x in enumerate(c)))
        remaining.remove(best)
        out.append(best)
        seen.update((i, x) for i, x in enumerate(best))
    return out


def shape_seed(seed: int, problem: Problem) -> int:
    """Inputs depend on the seed and the shape only, not on the order shapes are checked in."""
    return zlib.crc32(f"{seed}:{problem.label()}".encode()) & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# Reference and comparison
# ---------------------------------------------------------------------------------------------

def reference_attention(q, k, v, causal: bool, softmax_scale: float, device=None,
                        chunk_bytes: int = REFERENCE_CHUNK_BYTES):
    """softmax(q k^T * scale [+ top-left causal mask]) v in float64, on `device` (default: q's).

    Materializes the scores one chunk of (batch*head, query rows) at a time, each chunk under
    `chunk_bytes`, so long sequences do not need B*H*Nq*Nk*8 bytes at once.
    """
    import torch

    device = torch.device(device) if device is not None else q.device
    b, h, nq, d = q.shape
    nk = k.shape[2]
    if k.shape[1] != h:   # GQA/MQA: each K/V head serves h / heads_kv query heads
        k, v = (t.repeat_interleave(h // k.shape[1], dim=1) for t in (k, v))
    q64 = q.to(device=device, dtype=torch.float64).reshape(b * h, nq, d)
    k64 = k.to(device=device, dtype=torch.float64).reshape(b * h, nk, d)
    v64 = v.to(device=device, dtype=torch.float64).reshape(b * h, nk, d)
    out = torch.empty((b * h, nq, d), dtype=torch.float64, device=device)
    row_bytes = nk * 8
    rows = max(1, min(nq, chunk_bytes // row_bytes))                     # query rows per chunk
    heads = max(1, min(b * h, chunk_bytes // (row_bytes * rows)))        # heads per chunk
    key_idx = torch.arange(nk, device=device)
    for h0 in range(0, b * h, heads):
        for r0 in range(0, nq, rows):
            qc = q64[h0:h0 + heads, r0:r0 + rows]
            scores = torch.matmul(qc, k64[h0:h0 + heads].transpose(1, 2)) * softmax_scale
            if causal:  # top-left aligned: query i sees keys j <= i
                q_idx = torch.arange(r0, r0 + qc.shape[1], device=device)
                scores.masked_fill_(key_idx[None, :] > q_idx[:, None], float("-inf"))
            out[h0:h0 + heads, r0:r0 + rows] = torch.matmul(torch.softmax(scores, dim=-1), v64[h0:h0 + heads])
    return out.reshape(b, h, nq, d)


def compare(out, ref) -> dict:
    """Errors of `out` against the float64 `ref`: rel_err (Frobenius), max/mean abs, and the count
    of non-finite elements (which make every error NaN, so a poisoned element can never pass)."""
    import torch

    out64 = out.to(device=ref.device, dtype=torch.float64)
    diff = out64 - ref
    nonfinite = int((~torch.isfinite(out64)).sum().item())
    ref_norm = torch.linalg.vector_norm(ref).item()
    rel = torch.linalg.vector_norm(diff).item() / ref_norm if ref_norm > 0 else math.nan
    if nonfinite:
        rel = math.nan
    return {"rel_err": rel, "max_abs_err": diff.abs().max().item(), "mean_abs_err": diff.abs().mean().item(),
            "nonfinite": nonfinite, "numel": diff.numel()}


def judge(errors: dict, tolerance: float, metric: str = "rel_err") -> bool:
    return errors["nonfinite"] == 0 and math.isfinite(errors[metric]) and errors[metric] <= tolerance


def _reference_device(problem: Problem, inputs_device):
    scores = problem.batch * problem.heads * problem.seqlen_q * problem.seqlen_k
    return "cpu" if scores <= CPU_REFERENCE_MAX_SCORES else inputs_device


def judged_metric(dtype: str) -> str:
    return "rel_err" if dtype == "float32" else "max_abs_err"


def _tolerance(problem: Problem, q, k, v, ref, scale: float) -> float:
    if problem.dtype == "float32":
        return FP32_REL_TOL
    import torch
    import torch.nn.functional as F

    gqa = {"enable_gqa": True} if problem.gqa else {}
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=problem.causal, scale=scale, **gqa)
    # floored at one rounding step of the output's magnitude, for shapes where SDPA is exact
    floor = torch.finfo(q.dtype).eps * ref.abs().max().item()
    return max(LOW_PRECISION_FACTOR * compare(sdpa, ref)["max_abs_err"], floor)


# ---------------------------------------------------------------------------------------------
# Running the gate
# ---------------------------------------------------------------------------------------------

def check_problem(variant: Variant, problem: Problem, module, seed: int = 0, device: str = "cuda") -> ShapeCheck:
    """Run the rung once on `problem` into a NaN-poisoned output and judge it. A rung whose forward
    writes the row log-sum-exp (writes_lse, or backward = true) runs twice: without the LSE, as the
    timer calls it, and with a NaN-poisoned LSE, judged as the backward's check judges it
    (lab.measure.gradcheck: float64, torch's own error scale), so a forward written for another
    rung's backward is checked on what that backward reads, and a kernel that takes another path
    when no LSE is asked is checked on the path that is timed. The O reported is the failing call's
    (else the worse one's), named in `o_call`.
    `device`: "cuda" in the lab; "cpu" lets the tests run a python rung without a GPU."""
    import torch

    scale = softmax_scale(problem)
    metric = judged_metric(problem.dtype)
    lse_check = None
    try:
        q, k, v = make_inputs(problem, shape_seed(seed, problem), device=device)
        o = torch.full_like(q, float("nan"))  # poison: an element the kernel never writes stays NaN
        module.forward(q, k, v, o, problem.causal, scale)
        outputs = {"without the LSE": o}
        if variant.writes_lse:
            lse = torch.full(q.shape[:3], float("nan"), dtype=torch.float32, device=q.device)   # [B, H, Nq]
            outputs["with the LSE"] = torch.full_like(q, float("nan"))
            module.forward(q, k, v, outputs["with the LSE"], problem.causal, scale, lse)
        if q.is_cuda:
            torch.cuda.synchronize()
        ref = reference_attention(q, k, v, problem.causal, scale, device=_reference_device(problem, q.device))
        tolerance = _tolerance(problem, q, k, v, ref, scale)
        errors = {call: compare(out, ref) for call, out in outputs.items()}
        o_call = next((c for c, e in errors.items() if not judge(e, tolerance, metric)),
                      max(errors, key=lambda c: errors[c][metric]))
        if variant.writes_lse:
            lse_check = _judge_lse(problem, q, k, v, lse, scale)
    except RuntimeError as e:  # the launcher's refusal, a launch or memory error: this shape fails
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        tolerance = FP32_REL_TOL if problem.dtype == "float32" else math.nan  # fp16's needs SDPA's run
        return ShapeCheck(problem, False, math.nan, math.nan, math.nan, tolerance, error=message, metric=metric)
    e = errors[o_call]
    passed = judge(e, tolerance, metric) and (lse_check is None or lse_check.passed)
    return ShapeCheck(problem, passed, e["rel_err"], e["max_abs_err"], e["mean_abs_err"], tolerance, e["nonfinite"],
                      e["numel"], metric=metric, lse=lse_check, o_call=o_call if variant.writes_lse else None)


def _judge_lse(problem: Problem, q, k, v, lse, scale: float):
    """The forward's LSE against the backward check's float64 LSE and tolerance (lab.measure.gradcheck)."""
    ref = gradcheck.reference_backward(q, k, v, None, problem.causal, scale,
                                       device=_reference_device(problem, q.device))
    err = {"LSE": gradcheck.lse_error(q, k, problem.causal, scale, ref["LSE"])}
    tolerance = gradcheck.tolerances(err, ref, problem.dtype, FP32_REL_TOL)["LSE"]
    return gradcheck.judge_tensor("LSE", lse, ref["LSE"], tolerance)


def gate_shapes(variant: Variant, problem: Problem | None, extra_shapes: int, seed: int = 0,
                pin_to_problem: bool = False, causal: bool | None = None) -> list[Problem]:
    """`problem` (if given), then `extra_shapes` seeded shapes in `problem`'s dtype (a rung timed or
    checked in bf16 is checked in bf16, not in its first dtype); pinned: they also take its head_dim.
    `causal`: the seeded shapes' mask (None: both)."""
    extra = check_shapes(variant, extra_shapes, seed, dtype=problem.dtype if problem is not None else None,
                         causal=causal)
    if pin_to_problem and problem is not None:
        extra = [dataclasses.replace(p, head_dim=problem.head_dim) for p in extra]
    return ([problem] if problem is not None else []) + extra


def check_backward_problem(variant: Variant, shape, module, seed: int = 0, device: str = "cuda") -> ShapeCheck:
    """The rung's forward (O and LSE) then its backward (dQ, dK, dV) on one shape, every output
    poisoned with NaN first, each tensor judged against float64 autograd (lab.measure.gradcheck).
    `device`: "cuda" in the lab; "cpu" lets the tests run a python rung's backward without a GPU."""
    import torch

    problem = shape.problem
    scale = softmax_scale(problem)
    label = shape.label()
    metric = "max_abs_err"
    try:
        q, k, v = make_inputs(problem, shape_seed(seed, problem), device=device)
        if shape.q_scale != 1.0:
            q = (q.float() * shape.q_scale).to(q.dtype)
        dout = upstream_grad(q, shape_seed(seed + 1, problem))
        o = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:3], float("nan"), dtype=torch.float32, device=q.device)
        dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
        module.forward(q, k, v, o, problem.causal, scale, lse)
        deterministic = {"deterministic": True} if problem.deterministic else {}   # asked of its rung only
        module.backward(q, k, v, o, dout, lse, dq, dk, dv, problem.causal, scale, **deterministic)
        repeats = None
        if problem.deterministic:   # the claim itself: a second run on the same inputs gives the same bits
            again = [torch.full_like(t, float("nan")) for t in (q, k, v)]
            module.backward(q, k, v, o, dout, lse, *again, problem.causal, scale, **deterministic)
            repeats = [gradcheck.bitwise_repeat(name, first, second)
                       for name, first, second in zip(gradcheck.REPEATED, (dq, dk, dv), again)]
        if q.is_cuda:
            torch.cuda.synchronize()
        ref = gradcheck.reference_backward(q, k, v, dout, problem.causal, scale,
                                           device=_reference_device(problem, q.device))
        tol = gradcheck.tolerances(gradcheck.sdpa_errors(q, k, v, dout, problem.causal, scale, ref), ref, problem.dtype,
                                   FP32_REL_TOL)
        got = {"O": o, "LSE": lse, "dQ": dq, "dK": dk, "dV": dv}
        tensors = [gradcheck.judge_tensor(name, got[name], ref[name], tol[name]) for name in gradcheck.TENSORS]
    except RuntimeError as e:  # the launcher's refusal, a launch or memory error: this shape fails
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return ShapeCheck(problem, False, math.nan, math.nan, math.nan, math.nan, error=message, metric=metric,
                          tensors=[], label_text=label)
    worst = next((t for t in tensors if not t.passed), None) or max(
        tensors, key=lambda t: t.max_abs_err / t.tolerance if t.tolerance else 0)
    passed = all(t.passed for t in tensors) and all(r.equal for r in repeats or ())
    return ShapeCheck(problem, passed, worst.rel_err, worst.max_abs_err, worst.mean_abs_err,
                      worst.tolerance, sum(t.nonfinite for t in tensors), sum(t.numel for t in tensors),
                      metric=metric, tensors=tensors, label_text=label, repeats=repeats)


BACKWARD_RULE = ("each of O, LSE, dQ, dK, dV: max_abs_err <= 2 x torch's own (SDPA forward and autograd backward "
                 "in the same dtype; LSE from scores in that dtype), both against float64 autograd")
DETERMINISTIC_RULE = ("deterministic: the backward run twice on the same inputs gives dQ, dK and dV with the same "
                      "bits (torch.equal of their bits)")


def check_variant(variant: Variant, problem: Problem | None = None, extra_shapes: int = DEFAULT_SHAPE_COUNT,
                  seed: int = 0, module=None,
                  progress: Callable[[ShapeCheck], None] | None = None,
                  pin_to_problem: bool = False, mode: str = "fwd", dtype: str | None = None,
                  causal: bool | None = None, deterministic: bool = False) -> CheckResult:
    """Check a rung on `problem` (if given) followed by `extra_shapes` seeded shapes from
    `check_shapes`, in `problem`'s dtype where there is one, else in `dtype` (None: the rung's first).
    `causal`: the seeded shapes all causal (True), none (False), or both (None: the default); `lab
    check --causal` without --shape checks causal shapes only. Bad input (unsupported D or dtype, no
    GPU) raises LabError before any launch.
    `pin_to_problem`: the extra shapes also keep `problem`'s head_dim (a tuning candidate is one
    compiled configuration for one head_dim, so only its own head_dim can be checked).
    mode bwd or fwd+bwd: the backward's check (`check_backward_problem`) on the backward's shapes;
    a rung without a backward is refused (exit 2) before anything runs.
    `deterministic` (or `problem.deterministic`): every shape asks the backward for its deterministic
    mode, and each is run twice and its dQ, dK, dV required bitwise equal; a rung that does not
    declare it, or mode fwd, is refused (exit 2) before anything runs."""
    if problem is None and dtype is not None:
        seeded_dtype(variant, dtype)   # refused (exit 2) before anything is built
    deterministic = problem.deterministic if problem is not None else deterministic
    require_deterministic_modes(deterministic, mode)
    if mode != "fwd":
        return _check_backward(variant, problem, extra_shapes, seed, module, progress, pin_to_problem, mode,
                               dtype, causal, deterministic)
    if problem is None:
        problems = check_shapes(variant, extra_shapes, seed, dtype=dtype, causal=causal)
    else:
        problems = gate_shapes(variant, problem, extra_shapes, seed, pin_to_problem, causal)
    if not problems:
        raise LabError("nothing to check: give a shape or a number of shapes >= 1")
    for p in problems:
        check_supported(variant, p)
    module = _ready(variant, module)
    result = CheckResult(variant.id, "; ".join(dict.fromkeys(rule_for(p.dtype) for p in problems)))
    for p in problems:
        shape = check_problem(variant, p, module, seed)
        result.shapes.append(shape)
        if progress:
            progress(shape)
    return result


def _ready(variant, module):
    """The module to check, after the refusals that need no build (no GPU, a GPU too old)."""
    require_gpu("check")
    require_compute_capability(variant)
    if module is None:
        module = build(variant).module
    return module


def _check_backward(variant, problem, extra_shapes, seed, module, progress, pin_to_problem, mode, dtype=None,
                    causal=None, deterministic=False) -> CheckResult:
    require_mode(variant, mode)
    extra = backward_shapes(variant, extra_shapes, seed, seeded_dtype(variant, problem.dtype if problem else dtype),
                            causal)
    if pin_to_problem and problem is not None:
        extra = [GradShape(dataclasses.replace(g.problem, head_dim=problem.head_dim), g.q_scale) for g in extra]
    if deterministic:   # the seeded shapes ask for what the checked (timed) problem asks
        extra = [GradShape(dataclasses.replace(g.problem, deterministic=True), g.q_scale) for g in extra]
    shapes = ([GradShape(problem)] if problem is not None else []) + extra
    if not shapes:
        raise LabError("nothing to check: give a shape or a number of shapes >= 1")
    for g in shapes:
        check_supported(variant, g.problem)
    module = _ready(variant, module)
    result = CheckResult(variant.id, BACKWARD_RULE + (f"; {DETERMINISTIC_RULE}" if deterministic else ""), mode=mode,
                         deterministic=deterministic)
    for g in shapes:
        shape = check_backward_problem(variant, g, module, seed)
        result.shapes.append(shape)
        if progress:
            progress(shape)
    return result

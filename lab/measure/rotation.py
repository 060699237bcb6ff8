"""Rotating inputs and checked outputs: a kept result must not help a timed call, and a wrong one
must not pass because only the first call was checked.

The timed call always reads the same input tensors (`slots`: one data pointer, one tensor object, as
a CUDA graph needs), and before each call the timer refills them in place with the next of several
seeded input sets (`prepare(rep)`, outside the timed region, before the L2 flush). So:
  - a result kept by input pointer or tensor object (a cache, a "skip the work if I saw these
    inputs") is the previous set's result: wrong for this set;
  - a call that writes only part of its output leaves another set's values (or garbage) in the rest;
  - every timed call's output is compared against its own set's float64 reference (`OutputCheck`),
    by the correctness gate's own rule and tolerance (lab.measure.check).
What rotation cannot see: a result kept by the input VALUES (hashing the inputs: that reads them all,
which the memory floor of lab.measure.floor then bounds), since the sets repeat every `count` calls.

A backward rotates the same way: each set is Q, K, V and its own seeded dO (and, for `bwd`, the O and
LSE the rung's own forward made from that set, lab.measure.checked), and every timed call's dQ, dK,
dV are compared against that set's float64 gradients (`GradientCheck`), by the backward gate's rule
(lab.measure.gradcheck).
"""

from __future__ import annotations

from typing import Sequence

from lab.measure import gradcheck
from lab.measure.call import UPSTREAM_GRAD_SEED, upstream_grad
from lab.measure.check import FP32_REL_TOL, _reference_device, _tolerance, judge, judged_metric, reference_attention
from lab.measure.problem import make_inputs, softmax_scale

DEFAULT_SETS = 3
"""Input sets cycled through the calls. Three, not two: the caching allocator often hands a call the
block freed two calls before, and with two sets that block would hold the same set's right answer
(a call that writes only half its output would pass)."""


class RotatingInputs:
    """`count` input sets (tuples of tensors of the same shapes) and the slots the timed call reads."""

    def __init__(self, sets: Sequence[tuple], fixed: bool = False):
        # fixed: one set on purpose (a backward, whose O and LSE are computed once from its inputs, so
        # a refill would leave them stale); otherwise one set is a mistake that would let a kept result pass
        if not sets or (len(sets) < 2 and not fixed):
            raise ValueError("rotation needs at least two input sets (one only when fixed on purpose)")
        shapes = [tuple(tuple(t.shape) for t in s) for s in sets]
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"input sets differ in shape: {shapes}")
        self.sets = [tuple(s) for s in sets]
        self.slots = tuple(t.clone() for t in self.sets[0])
        self.loaded = 0

    @property
    def count(self) -> int:
        return len(self.sets)

    def prepare(self, rep: int) -> int:
        """Load set `rep % count` into the slots (in place, on the current stream); returns its index,
        the token the timer hands to the output check with this call's output."""
        index = rep % len(self.sets)
        for slot, src in zip(self.slots, self.sets[index]):
            slot.copy_(src)
        self.loaded = index
        return index


def problem_inputs(problem, count: int = DEFAULT_SETS, seed: int = 0, device: str = "cuda",
                   layout: str = "BHND") -> RotatingInputs:
    """`count` seeded Q, K, V sets of `problem` (seeds seed, seed+1, ...; set 0 is make_inputs(seed),
    the inputs the rest of the lab uses) in the rung's layout; count 1 is the backward's fixed set."""
    sets = [make_inputs(problem, seed + i, device=device, layout=layout) for i in range(count)]
    return RotatingInputs(sets, fixed=count == 1)


DOUT_SEED_STRIDE = 7919
"""Set i's dO is seeded UPSTREAM_GRAD_SEED + i * this: set 0's is the dO the rest of the lab uses
(lab.measure.call.make_call), and no set's dO shares a seed with any set's Q, K, V (seeds 0, 1, ...)."""


def gradient_sets(rotating: RotatingInputs) -> list[tuple]:
    """The backward's sets: each forward set (Q, K, V) with its own seeded dO, in the same layout."""
    return [(q, k, v, upstream_grad(q, UPSTREAM_GRAD_SEED + i * DOUT_SEED_STRIDE))
            for i, (q, k, v) in enumerate(rotating.sets)]


VERIFY_CHUNK_ELEMS = 1 << 20
"""Output elements compared at a time: the check's temporaries stay a few MB, whatever the shape, so
it neither needs much memory nor sweeps through much of it between two timed calls."""


def output_errors(out, ref, chunk_elems: int = VERIFY_CHUNK_ELEMS) -> dict:
    """lab.measure.check.compare's errors (rel_err, max_abs_err, mean_abs_err, nonfinite, numel) of
    `out` against `ref` (same shape and layout), accumulated chunk by chunk in float64 on the device,
    with one transfer to the host at the end."""
    import math

    import torch

    if tuple(out.shape) != tuple(ref.shape):
        raise RuntimeError(f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    o, r = out.reshape(-1), ref.reshape(-1)
    n = o.numel()
    sq, absum, peak, bad, ref_sq = [], [], [], [], []
    for i in range(0, n, chunk_elems):
        oc, rc = o[i:i + chunk_elems].to(torch.float64), r[i:i + chunk_elems].to(torch.float64)
        d = (oc - rc).abs_()
        sq.append(d.square().sum())
        absum.append(d.sum())
        peak.append(d.max())   # NaN propagates, as in compare()
        bad.append((~torch.isfinite(oc)).sum().to(torch.float64))
        ref_sq.append(rc.square().sum())
    sq_sum, abs_sum, max_abs, nonfinite, ref_norm_sq = torch.stack(
        [torch.stack(sq).sum(), torch.stack(absum).sum(), torch.stack(peak).max(), torch.stack(bad).sum(),
         torch.stack(ref_sq).sum()]).tolist()
    ref_norm = math.sqrt(ref_norm_sq)
    rel = math.sqrt(sq_sum) / ref_norm if ref_norm > 0 else math.nan
    return {"rel_err": math.nan if nonfinite else rel, "max_abs_err": max_abs, "mean_abs_err": abs_sum / n,
            "nonfinite": int(nonfinite), "numel": n}


class OutputCheck:
    """verify(token, output) for forward outputs: each set's float64 reference (kept in float32, which
    moves it by 6e-8 relative, far under any tolerance; in the rung's layout, so that an output is
    compared where it lies) and tolerance, judged by the check's rule (lab.measure.check: rel_err for
    float32, max_abs_err against 2x SDPA's for fp16/bf16). Returns None when the output passes, else
    the reason."""

    def __init__(self, problem, rotating: RotatingInputs, layout: str = "BHND"):
        import torch

        self.problem, self.layout = problem, layout
        self.metric = judged_metric(problem.dtype)
        scale = softmax_scale(problem)
        self.refs, self.tolerances = [], []
        for q, k, v in rotating.sets:
            q, k, v = (self._swap(t) for t in (q, k, v))   # (B, H, N, D) for the reference
            if problem.gqa:   # the reference and SDPA's tolerance run on K/V repeated to the query heads
                group = problem.heads // problem.heads_kv
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            ref = reference_attention(q, k, v, problem.causal, scale, device=_reference_device(problem, q.device))
            self.tolerances.append(_tolerance(problem, q, k, v, ref, scale))
            self.refs.append(self._swap(ref).to(device=q.device, dtype=torch.float32).contiguous())
            del ref

    def _swap(self, t):
        """(B, N, H, D) <-> (B, H, N, D) for a BNHD rung; nothing for BHND."""
        return t if self.layout == "BHND" else t.transpose(1, 2)

    def __call__(self, token: int, output) -> str | None:
        if isinstance(output, (tuple, list)):
            output = output[0]
        try:
            errors = output_errors(output, self.refs[token])
        except (RuntimeError, TypeError, AttributeError) as e:   # no tensor, the wrong shape
            return f"a timed call returned an output that cannot be compared: {str(e).strip()[:200]}"
        tolerance = self.tolerances[token]
        if judge(errors, tolerance, self.metric):
            return None
        unwritten = f", {errors['nonfinite']} non-finite elements" if errors["nonfinite"] else ""
        return (f"a timed call's output on input set {token} of {len(self.refs)} is wrong: {self.metric} "
                f"{errors[self.metric]:.3g} > tolerance {tolerance:.3g}{unwritten} (with inputs rotated between "
                "calls: a result kept from other inputs, work skipped on repeated calls, or an output written "
                "only in part)")


GRADIENTS = ("dQ", "dK", "dV")


class GradientCheck:
    """verify(token, (dq, dk, dv)) for a backward: each set's float64 gradients (lab.measure.gradcheck's
    reference, chunked over heads and query rows so that long sequences fit; made once per set, kept
    in float32 in the rung's layout) and, per gradient, the backward gate's tolerance: 2x torch SDPA's
    own max_abs_err on that set, floored at one rounding step of the largest gradient. Each timed
    call's gradients are compared chunk by chunk (output_errors). Returns None when all three pass,
    else the reason naming the first wrong one."""

    def __init__(self, problem, sets: list[tuple], layout: str = "BHND"):
        import torch

        self.problem, self.layout = problem, layout
        scale = softmax_scale(problem)
        self.refs, self.tolerances = [], []
        for q, k, v, dout in sets:
            q, k, v, dout = (self._swap(t) for t in (q, k, v, dout))   # (B, H, N, D) for the reference
            device = _reference_device(problem, q.device)
            ref = gradcheck.reference_backward(q, k, v, dout, problem.causal, scale, device=device)
            ref = {name: ref[name] for name in GRADIENTS}
            errors = sdpa_gradient_errors(q, k, v, dout, problem.causal, scale, ref)
            self.tolerances.append(gradcheck.tolerances(errors, ref, problem.dtype, FP32_REL_TOL))
            self.refs.append({name: self._swap(t).to(device=q.device, dtype=torch.float32).contiguous()
                              for name, t in ref.items()})
            del ref

    def _swap(self, t):
        return t if self.layout == "BHND" else t.transpose(1, 2)

    def __call__(self, token: int, output) -> str | None:
        if not isinstance(output, (tuple, list)) or len(output) != 3:
            return f"a timed backward returned {type(output).__name__}, not (dq, dk, dv)"
        for name, got in zip(GRADIENTS, output):
            try:
                errors = output_errors(got, self.refs[token][name])
            except (RuntimeError, TypeError, AttributeError) as e:
                return f"a timed call returned a {name} that cannot be compared: {str(e).strip()[:200]}"
            tolerance = self.tolerances[token][name]
            if judge(errors, tolerance, "max_abs_err"):
                continue
            unwritten = f", {errors['nonfinite']} non-finite elements" if errors["nonfinite"] else ""
            return (f"a timed call's {name} on input set {token} of {len(self.refs)} is wrong: max_abs_err "
                    f"{errors['max_abs_err']:.3g} > tolerance {tolerance:.3g}{unwritten} (with Q, K, V, dO, O and "
                    "LSE rotated between calls: gradients kept from other inputs, work skipped on repeated calls, "
                    "or gradients written only in part)")
        return None


def sdpa_gradient_errors(q, k, v, dout, causal: bool, scale: float, ref: dict) -> dict:
    """torch SDPA's own max_abs_err of dQ, dK, dV against `ref` (float64), forward and autograd
    backward in the inputs' dtype by the backend torch picks, compared chunk by chunk."""
    import torch
    import torch.nn.functional as F

    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale, **gqa)
        grads = torch.autograd.grad(o, (qg, kg, vg), dout)
    del o
    return {name: output_errors(g.to(ref[name].device), ref[name])["max_abs_err"] for name, g in zip(GRADIENTS, grads)}

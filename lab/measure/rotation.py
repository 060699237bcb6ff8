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
"""

from __future__ import annotations

from typing import Sequence

DEFAULT_SETS = 3
"""Input sets cycled through the calls. Three, not two: the caching allocator often hands a call the
block freed two calls before, and with two sets that block would hold the same set's right answer
(a call that writes only half its output would pass)."""


class RotatingInputs:
    """`count` input sets (tuples of tensors of the same shapes) and the slots the timed call reads."""

    def __init__(self, sets: Sequence[tuple]):
        if len(sets) < 2:
            raise ValueError("rotation needs at least two input sets")
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
    the inputs the rest of the lab uses) in the rung's layout."""
    from lab.measure.problem import make_inputs

    return RotatingInputs([make_inputs(problem, seed + i, device=device, layout=layout) for i in range(count)])


class OutputCheck:
    """verify(token, output) for forward outputs: each set's float64 reference (kept in float32, which
    moves it by 6e-8 relative, far under any tolerance) and tolerance, judged by the check's rule
    (lab.measure.check: rel_err for float32, max_abs_err against 2x SDPA's for fp16/bf16).
    Returns None when the output passes, else the reason."""

    def __init__(self, problem, rotating: RotatingInputs, layout: str = "BHND"):
        import torch

        from lab.measure.check import _reference_device, _tolerance, judged_metric, reference_attention
        from lab.measure.problem import softmax_scale

        self.problem, self.layout = problem, layout
        self.metric = judged_metric(problem.dtype)
        scale = softmax_scale(problem)
        self.refs, self.tolerances = [], []
        for q, k, v in rotating.sets:
            q, k, v = (self._bhnd(t) for t in (q, k, v))
            if problem.gqa:   # the reference and SDPA's tolerance run on K/V repeated to the query heads
                group = problem.heads // problem.heads_kv
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            ref = reference_attention(q, k, v, problem.causal, scale, device=_reference_device(problem, q.device))
            self.tolerances.append(_tolerance(problem, q, k, v, ref, scale))
            self.refs.append(ref.to(device=q.device, dtype=torch.float32))
            del ref

    def _bhnd(self, t):
        return t if self.layout == "BHND" else t.transpose(1, 2)

    def __call__(self, token: int, output) -> str | None:
        from lab.measure.check import compare, judge

        if isinstance(output, (tuple, list)):
            output = output[0]
        try:
            errors = compare(self._bhnd(output), self.refs[token])
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

"""Rotating inputs and checked outputs: a kept result must not help a timed call, and a wrong one
must not pass because only the first call was checked.

The timed call always reads the same input tensors (`slots`: one data pointer, one tensor object, as
a CUDA graph needs), and before each call the timer refills them in place (`prepare(rep)`, outside
the timed region, before the L2 flush) with one of several seeded input sets, MOVED in ways
attention follows exactly (`Moves`): a cyclic roll of the batch, a cyclic roll of the K/V heads (the
query heads by whole GQA groups, so each query head keeps its K/V head; heads are dim 1 in BHND, dim
2 in BNHD; the LSE, [B, H, Nq] in either layout, rolls with the query heads), and sign flips (Q and K
negated together leave every score as it was; V negated, with dO and O, negates O and dV). The right
output of a moved set is the set's reference moved the same way, so no new reference and no more
memory is needed. Each call gets a `Placement` (set, batch shift, K/V-head shift, signs), and every
call the timer makes (warm-up, the capture, the untimed call before each timed call under events,
every timed call, a traced one) loads the next: the calls made on the same values in this process,
in one measurement or in several one after another (HANDED_OUT), walk through all `placements` =
sets x 4 x B x Hkv of them before one repeats. So:
  - a result kept by input pointer or tensor object (a cache, a "skip the work if I saw these
    inputs") is another placement's result: wrong for this one;
  - a result kept by the input VALUES (a cache keyed by a sample or a hash of them) misses on every
    call, whatever the host's speed, while a measurement makes at most `placements` calls: it
    computes, and is timed as what it is (the work plus its own bookkeeping). A key on part of the
    inputs hits on another placement and hands back its output, which the check refuses, except a
    key on V alone: O does not change when Q and K are negated, so it misses for the first half of
    the placements only (those flip Q and K last);
  - a call that writes only part of its output leaves another placement's values (or garbage) in the rest;
  - every call's output is compared against its own set's float64 reference, moved by its
    placement (`OutputCheck`: block by block, chunk by chunk, no moved copy), by the correctness
    gate's own rule and tolerance (lab.measure.check).
What rotation cannot see: a process that makes more than `placements` calls on the same values reads
values it read before
(where B x Hkv == 1 only the sets and the signs vary: every 4 x `count` calls, 12 with three sets);
and a cache that recognises a set whatever its placement (keyed by what the moves leave alone, such
as the magnitudes of a sample from every batch and head) and moves its kept output to match: a
kernel written against this timer, which the memory floor of lab.measure.floor bounds only where
its key reads all of the inputs.

A backward rotates the same way: each set is Q, K, V and its own seeded dO (and, for `bwd`, the O and
LSE the rung's own forward made from that set, lab.measure.checked), all moved by the same placement,
so they stay one consistent set; every call's dQ, dK, dV are compared against that set's float64
gradients moved alike (`GradientCheck`), by the backward gate's rule (lab.measure.gradcheck).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from lab.measure import gradcheck
from lab.measure.call import UPSTREAM_GRAD_SEED, upstream_grad
from lab.measure.check import FP32_REL_TOL, _reference_device, _tolerance, judge, judged_metric, reference_attention
from lab.measure.problem import make_inputs, softmax_scale

DEFAULT_SETS = 3
"""Input sets cycled through the calls. Three, not two: the caching allocator often hands a call the
block freed two calls before, and with two sets that block would hold the same set's right answer
(a call that writes only half its output would pass)."""


ROLES = ("qk", "qk", "v", "v", "v", None)
"""What each tensor of a set is to the sign flips, by position: a set is (Q, K, V[, dO[, O, LSE]]).
Q and K flip together (every score q.k keeps its value, bit for bit); V, dO and O together (O = P V
flips with V, and dO with O, so that D = rowsum(dO * O) and dS keep theirs); the LSE never."""
OUTPUT_ROLE = "v"
GRADIENT_ROLES = {"dQ": "qk", "dK": "qk", "dV": "v"}
"""dQ = dS K and dK = dS^T Q flip with Q and K; dV = P^T dO with V."""


@dataclass(frozen=True)
class Placement:
    """What one call reads: input set `set`, rolled by `batch` along the batch and by `heads_kv` K/V
    heads (query heads, O, dO and LSE by heads_kv x the GQA group), with Q and K negated (`negate_qk`)
    and V, dO and O negated (`negate_v`). The token prepare() returns and the output check receives
    with that call's output."""
    set: int
    batch: int = 0
    heads_kv: int = 0
    negate_qk: bool = False
    negate_v: bool = False

    def sign(self, role: str | None) -> int:
        negated = {"qk": self.negate_qk, "v": self.negate_v}.get(role, False)
        return -1 if negated else 1

    def describe(self, sets: int) -> str:
        moves = []
        if self.batch or self.heads_kv:
            moves.append(f"rolled by {self.batch} along the batch and {self.heads_kv} K/V heads")
        negated = [name for name, on in (("Q and K", self.negate_qk), ("V", self.negate_v)) if on]
        if negated:
            moves.append(f"{' and '.join(negated)} negated")
        return f"input set {self.set} of {sets}" + (f" ({', '.join(moves)})" if moves else "")


@dataclass(frozen=True)
class Moves:
    """The moves of a set that attention follows exactly, so that one reference per set serves them
    all: a roll of the batch, a roll of the K/V heads (query heads by whole GQA groups; where the heads
    are depends on the layout), and sign flips (ROLES). Every one is exact in floating point: each
    (batch, head) is computed on its own, and negation commutes with the roundings attention's
    arithmetic does (to nearest, or toward zero), so an honest kernel's output moves bit for bit."""
    layout: str
    batch: int
    heads_kv: int

    @classmethod
    def of(cls, problem, layout: str = "BHND") -> "Moves":
        return cls(layout, problem.batch, problem.heads_kv)

    @property
    def shifts(self) -> int:
        return self.batch * self.heads_kv

    @property
    def count(self) -> int:
        return 4 * self.shifts

    def placement(self, index: int, move: int) -> Placement:
        """Set `index` moved by move number `move` (0 .. count-1; 0 leaves it as it is): V's sign
        changes fastest, then the roll (batch before heads), and Q's and K's sign slowest, since O does
        not depend on it: the first half of the moves all give different outputs."""
        shift = move // 2 % self.shifts
        return Placement(index, shift % self.batch, shift // self.batch, move >= 2 * self.shifts, move % 2 == 1)

    def head_dim(self, ndim: int) -> int:
        if ndim == 3:   # the row log-sum-exp: [B, H, Nq] whatever the layout (kernels/common.cuh)
            return 1
        if ndim == 4:
            return 1 if self.layout == "BHND" else 2
        raise ValueError(f"a moved tensor has 3 (LSE) or 4 dimensions, not {ndim}")

    def blocks(self, shape: Sequence[int], placement: Placement) -> list[tuple[tuple, tuple]]:
        """(dst, src) index pairs, at most four blocks, with rolled[dst] = tensor[src] for every pair:
        torch.roll of a tensor of `shape` by the placement's shifts, without making the rolled copy."""
        shape = tuple(shape)
        hd = self.head_dim(len(shape))
        if shape[0] != self.batch or shape[hd] % self.heads_kv:
            raise ValueError(f"shape {shape} does not roll as batch {self.batch} with {self.heads_kv} K/V heads "
                             f"({self.layout})")
        group = shape[hd] // self.heads_kv   # query heads per K/V head for Q, O, dO, LSE; 1 for K, V
        per_dim = {0: placement.batch % shape[0], hd: placement.heads_kv * group % shape[hd]}
        choices = []
        for dim in range(len(shape)):
            if dim not in per_dim:
                choices.append([(slice(None), slice(None))])
                continue
            n, s = shape[dim], per_dim[dim]
            pieces = [(slice(s, n), slice(0, n - s)), (slice(0, s), slice(n - s, n))]   # roll: out[i] = in[i - s]
            choices.append([p for p in pieces if p[0].stop > p[0].start])
        return [(tuple(d for d, _ in combo), tuple(r for _, r in combo)) for combo in itertools.product(*choices)]


HANDED_OUT: dict[tuple, int] = {}
"""Placements handed out so far in this process, per set of values (RotatingInputs' `key`: the
problem, layout, seed...): a measurement goes on where the last one on the same values stopped,
whatever object holds them, so a result kept across measurements (in a python rung's module, imported
once per process; in a kernel's device memory) misses as well, until this process has made
`placements` calls on those values."""


class RotatingInputs:
    """`count` input sets (tuples of tensors of the same shapes) and the slots the timed call reads;
    with `moves`, each set is also moved (module docstring; a set is then (Q, K, V[, dO[, O, LSE]])),
    else only the sets vary. `key` names the values (HANDED_OUT); None: this object's own count."""

    def __init__(self, sets: Sequence[tuple], fixed: bool = False, moves: Moves | None = None,
                 key: tuple | None = None):
        # fixed: one set on purpose (a baseline's backward: autograd's saved tensors cannot be refilled);
        # otherwise one set is a mistake that would let a kept result pass
        if not sets or (len(sets) < 2 and not fixed):
            raise ValueError("rotation needs at least two input sets (one only when fixed on purpose)")
        shapes = [tuple(tuple(t.shape) for t in s) for s in sets]
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"input sets differ in shape: {shapes}")
        if moves is not None and len(shapes[0]) > len(ROLES):
            raise ValueError(f"a moved set is (Q, K, V[, dO[, O, LSE]]), not {len(shapes[0])} tensors")
        self.sets = [tuple(s) for s in sets]
        self.moves, self.key = moves, key
        self.slots = tuple(t.clone() for t in self.sets[0])
        self.loaded = Placement(0)
        self._handed_out = 0   # where key is None

    @property
    def count(self) -> int:
        return len(self.sets)

    @property
    def placements(self) -> int:
        """Distinct placements: consecutive reps go through all of them before one repeats."""
        return self.count * (self.moves.count if self.moves is not None else 1)

    def placement(self, n: int) -> Placement:
        """The n-th placement handed out: the set changes on every call, the move every `count` calls."""
        i = n % self.placements
        if self.moves is None:
            return Placement(i)
        return self.moves.placement(i % self.count, i // self.count)

    @property
    def handed_out(self) -> int:
        """Placements handed out on these values so far in this process."""
        return self._handed_out if self.key is None else HANDED_OUT.get(self.key, 0)

    def prepare(self, rep: int | None = None) -> Placement:
        """Load the next placement into the slots (in place, block by block, on the current stream: the
        slots keep their pointers, so a captured graph reads the new values); returns it, the token the
        timer hands to the output check with this call's output. The next is counted per set of values
        (HANDED_OUT), not by `rep` (the timer's count of its own calls, which starts again at 0)."""
        n = self.handed_out
        if self.key is None:
            self._handed_out = n + 1
        else:
            HANDED_OUT[self.key] = n + 1
        placement = self.placement(n)
        if self.moves is None:
            for slot, src in zip(self.slots, self.sets[placement.set]):
                slot.copy_(src)
        else:
            for slot, src, role in zip(self.slots, self.sets[placement.set], ROLES):
                for dst, from_ in self.moves.blocks(slot.shape, placement):
                    slot[dst].copy_(src[from_])
                if placement.sign(role) < 0:
                    slot.neg_()
        self.loaded = placement
        return placement


def problem_inputs(problem, count: int = DEFAULT_SETS, seed: int = 0, device: str = "cuda",
                   layout: str = "BHND") -> RotatingInputs:
    """`count` seeded Q, K, V sets of `problem` (seeds seed, seed+1, ...; set 0 is make_inputs(seed),
    the inputs the rest of the lab uses) in the rung's layout, moved (Moves) on every call; count 1 is
    a fixed set."""
    sets = [make_inputs(problem, seed + i, device=device, layout=layout) for i in range(count)]
    key = ("Q, K, V", problem.label(), layout, seed, count, str(device))
    return RotatingInputs(sets, fixed=count == 1, moves=Moves.of(problem, layout), key=key)


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


def chunks(shape: Sequence[int], chunk_elems: int) -> list[tuple]:
    """Index tuples that cut a tensor of `shape` into pieces of at most `chunk_elems` elements (the
    trailing dimensions whole, the first one that does not fit cut in steps, those before it one
    index at a time): any view, strided or not, is compared without a copy of more than a chunk."""
    shape = tuple(shape)
    inner, k = 1, len(shape)
    while k > 0 and inner * shape[k - 1] <= chunk_elems:
        inner *= shape[k - 1]
        k -= 1
    if k == 0:
        return [()]
    cut = k - 1
    step = max(1, chunk_elems // inner)
    return [(*outer, slice(i, i + step)) for outer in itertools.product(*(range(n) for n in shape[:cut]))
            for i in range(0, shape[cut], step)]


def output_errors(out, ref, chunk_elems: int = VERIFY_CHUNK_ELEMS, blocks: list[tuple] | None = None,
                  sign: int = 1) -> dict:
    """lab.measure.check.compare's errors (rel_err, max_abs_err, mean_abs_err, nonfinite, numel) of
    `out` against `ref` (same shape and layout), accumulated chunk by chunk in float64 on the device,
    with one transfer to the host at the end. With `blocks` (Moves.blocks' (dst, src) pairs) and
    `sign`, against `ref` moved: out[dst] is compared with sign * ref[src], no moved copy made."""
    import math

    import torch

    if tuple(out.shape) != tuple(ref.shape):
        raise RuntimeError(f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    n = out.numel()
    sq, absum, peak, bad, ref_sq = [], [], [], [], []
    for dst, src in blocks if blocks is not None else [((), ())]:
        o, r = out[dst], ref[src]
        for idx in chunks(o.shape, chunk_elems):
            oc, rc = o[idx].to(torch.float64), r[idx].to(torch.float64)
            if sign < 0:
                rc.neg_()
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
    """verify(placement, output) for forward outputs: each set's float64 reference (kept in float32,
    which moves it by 6e-8 relative, far under any tolerance; in the rung's layout, so that an output
    is compared where it lies; made once per set, rolled only by how it is read) and tolerance, judged
    by the check's rule (lab.measure.check: rel_err for float32, max_abs_err against 2x SDPA's for
    fp16/bf16). Returns None when the output passes, else the reason."""

    def __init__(self, problem, rotating: RotatingInputs, layout: str = "BHND"):
        import torch

        self.problem, self.layout = problem, layout
        self.moves = Moves.of(problem, layout)
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

    def __call__(self, token: Placement, output) -> str | None:
        if isinstance(output, (tuple, list)):
            output = output[0]
        ref = self.refs[token.set]
        try:
            errors = output_errors(output, ref, blocks=self.moves.blocks(ref.shape, token),
                                   sign=token.sign(OUTPUT_ROLE))
        except (RuntimeError, TypeError, AttributeError) as e:   # no tensor, the wrong shape
            return f"a timed call returned an output that cannot be compared: {str(e).strip()[:200]}"
        tolerance = self.tolerances[token.set]
        if judge(errors, tolerance, self.metric):
            return None
        unwritten = f", {errors['nonfinite']} non-finite elements" if errors["nonfinite"] else ""
        return (f"a timed call's output on {token.describe(len(self.refs))} is wrong: {self.metric} "
                f"{errors[self.metric]:.3g} > tolerance {tolerance:.3g}{unwritten} (with inputs rotated and moved "
                "between calls: a result kept from other inputs, work skipped on repeated calls, or an output "
                "written only in part)")


GRADIENTS = ("dQ", "dK", "dV")


class GradientCheck:
    """verify(placement, (dq, dk, dv)) for a backward: each set's float64 gradients
    (lab.measure.gradcheck's reference, chunked over heads and query rows so that long sequences fit;
    made once per set, kept in float32 in the rung's layout) and, per gradient, the backward gate's
    tolerance: 2x torch SDPA's own max_abs_err on that set, floored at one rounding step of the
    largest gradient. Each call's gradients are compared chunk by chunk against the set's rolled by
    the call's placement (output_errors; dQ by whole GQA groups of heads, dK and dV by K/V heads).
    Returns None when all three pass, else the reason naming the first wrong one."""

    def __init__(self, problem, sets: list[tuple], layout: str = "BHND"):
        import torch

        self.problem, self.layout = problem, layout
        self.moves = Moves.of(problem, layout)
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

    def __call__(self, token: Placement, output) -> str | None:
        if not isinstance(output, (tuple, list)) or len(output) != 3:
            return f"a timed backward returned {type(output).__name__}, not (dq, dk, dv)"
        for name, got in zip(GRADIENTS, output):
            ref = self.refs[token.set][name]
            try:
                errors = output_errors(got, ref, blocks=self.moves.blocks(ref.shape, token),
                                       sign=token.sign(GRADIENT_ROLES[name]))
            except (RuntimeError, TypeError, AttributeError) as e:
                return f"a timed call returned a {name} that cannot be compared: {str(e).strip()[:200]}"
            tolerance = self.tolerances[token.set][name]
            if judge(errors, tolerance, "max_abs_err"):
                continue
            unwritten = f", {errors['nonfinite']} non-finite elements" if errors["nonfinite"] else ""
            return (f"a timed call's {name} on {token.describe(len(self.refs))} is wrong: max_abs_err "
                    f"{errors['max_abs_err']:.3g} > tolerance {tolerance:.3g}{unwritten} (with Q, K, V, dO, O and "
                    "LSE rotated and moved between calls: gradients kept from other inputs, work skipped on repeated calls, "
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

"""A forward+backward pairing: one rung's forward feeding another rung's backward, as a user trains
with them (a Hopper forward written for another rung's backward: v9's forward, v8's backward).

Named `F+B` wherever a rung is named (`--variant v9+v8`; each part as a rung is named, so
`v9+builtin:v8` reaches the built-in v8 a workspace shadows), it is a rung of the one registry (lab.ladder.registry.get makes it):
a Variant of kind "pair" whose `parts` are (F, B). Its modes:

  fwd      F's forward
  bwd      B's backward on the O and LSE that F's forward wrote
  fwd+bwd  F's forward, then B's backward on its O and LSE: one call

so everything that checks, times or stores a rung (the float64 gates, the one timer with its moved
inputs, output checks and floor, sweeps, stored runs) takes it unchanged: lab.ladder.build builds both
parts and hands back a PairedModule, lab.measure.call composes the parts' calls.

F must write the row log-sum-exp (backward = true, or writes_lse = true: kernels/common.cuh's backward
contract, fp32 [B, H, Nq]), and B must have a backward. Both take their inputs in one layout; the pair
takes the dtypes and head dims both declare (the forward's order), GQA only where both do, the higher
of their minimum compute capabilities. Anything else is refused (LabError, exit 2) in one line.
"""

from __future__ import annotations

from dataclasses import replace

from lab.errors import LabError
from lab.ladder.rungfile import Variant

SEPARATOR = "+"
PAIR_KIND = "pair"
HINT = ("a pairing is FORWARD+BACKWARD: a rung whose forward writes the LSE (writes_lse = true or backward = true), "
        "then a rung with a backward, e.g. --variant v9+v8; `lab variants --json` gives each rung's writes_lse and backward")


def is_pair_spec(spec: str) -> bool:
    return SEPARATOR in spec


def split(spec: str) -> tuple[str, str]:
    """`F+B` -> (F, B); anything else with a '+' is refused."""
    parts = [p.strip() for p in spec.split(SEPARATOR)]
    if len(parts) != 2 or not all(parts):
        raise LabError(f"bad pairing {spec!r}: name exactly two rungs, FORWARD+BACKWARD", hint=HINT)
    return parts[0], parts[1]


def pair(forward: Variant, backward: Variant, spec: str | None = None) -> Variant:
    """The composite rung F+B, or LabError saying in one line why the two cannot pair."""
    name = spec or f"{forward.id}{SEPARATOR}{backward.id}"
    if not forward.writes_lse:
        raise LabError(f"{name}: {forward.id}'s forward writes no row log-sum-exp (its lab:rung block declares neither "
                       f"writes_lse = true nor backward = true), so {backward.id}'s backward has no LSE to read",
                       hint=HINT)
    if not backward.backward:
        raise LabError(f"{name}: {backward.id} has no backward (its lab:rung block does not declare backward = true)",
                       hint=HINT)
    if forward.layout != backward.layout:
        raise LabError(f"{name}: {forward.id} takes {forward.layout} inputs and {backward.id} {backward.layout}; "
                       "a pair's forward and backward share their tensors, so they must agree on the layout", hint=HINT)
    dtypes = tuple(d for d in forward.dtypes if d in backward.dtypes)
    if not dtypes:
        raise LabError(f"{name}: no dtype in common ({forward.id}: {', '.join(forward.dtypes)}; "
                       f"{backward.id}: {', '.join(backward.dtypes)})", hint=HINT)
    head_dims = tuple(d for d in forward.head_dims if d in backward.head_dims)
    if not head_dims:
        raise LabError(f"{name}: no head dim in common ({forward.id}: {', '.join(map(str, forward.head_dims))}; "
                       f"{backward.id}: {', '.join(map(str, backward.head_dims))})", hint=HINT)
    pair_id = f"{forward.id}{SEPARATOR}{backward.id}"
    return replace(
        forward, id=pair_id, slug=f"{forward.slug}{SEPARATOR}{backward.slug}", kind=PAIR_KIND,
        title=f"{forward.id}'s forward + {backward.id}'s backward",
        dtypes=dtypes, head_dims=head_dims, min_cc=max(forward.min_cc, backward.min_cc), classes=(),
        arch_flags=tuple(dict.fromkeys(forward.arch_flags + backward.arch_flags)),
        aligned16=forward.aligned16 or backward.aligned16, grid="", entry="", backward=True,
        gqa=forward.gqa and backward.gqa, writes_lse=True, deterministic=backward.deterministic,
        origin="workspace" if "workspace" in (forward.origin, backward.origin) else forward.origin,
        changed="", attacks="", predicted_gain="", measured="", follows="", shadows=False,
        parts=(forward, backward))


class PairedModule:
    """The extension's interface (lab.ladder.build) of a pair: the forward part's forward, the
    backward part's backward, each of its own built module (a .cu extension or a python rung)."""

    def __init__(self, variant: Variant, forward_module, backward_module):
        self.variant = variant
        self.forward_module = forward_module
        self.backward_module = backward_module
        self.__name__ = f"pair {variant.id}"

    def forward(self, q, k, v, o, causal: bool, softmax_scale: float, lse=None) -> None:
        if lse is None:
            return self.forward_module.forward(q, k, v, o, causal, softmax_scale)
        return self.forward_module.forward(q, k, v, o, causal, softmax_scale, lse)

    def backward(self, q, k, v, o, dout, lse, dq, dk, dv, causal: bool, softmax_scale: float, **deterministic) -> None:
        # `deterministic=True` passed on only when asked: the backward part's own binding takes it
        return self.backward_module.backward(q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale, **deterministic)

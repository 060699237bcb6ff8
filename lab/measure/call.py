"""The one way to call an attention implementation, in each mode: a rung (CUDA or python, either
layout) or a baseline (SDPA pinned to one backend, eager standard attention: lab.measure.baselines
makes their Attention). bench, sweep, tune and profile's target all call through here.

  fwd      o = attention(q, k, v)
  bwd      dq, dk, dv from a forward done once, before the call
  fwd+bwd  the forward and its backward, one call

A pair `F+B` (lab.ladder.pairing) is called as one rung: F's forward, B's backward on F's O and LSE.

A rung's backward is its own launcher, called directly: its forward writes the row log-sum-exp
(fp32, [B, H, Nq]) and its backward takes Q, K, V, O, dO and that LSE (kernels/common.cuh's backward
contract; a python rung's `backward` function, lab.ladder.python_rung). Not through autograd:
autograd runs backward kernels on a thread of its own, outside the NVTX range a profiler filters
on, and its bookkeeping would be timed with the kernels. A baseline's backward is
`torch.autograd.grad` against the same seeded upstream gradient (retain_graph for `bwd`: no .grad
accumulates between repetitions). Autograd runs the backward on the forward's stream, so a
CUDA-graph capture of `bwd` must have done its forward on the capture stream: build the call inside
`torch.cuda.stream(s)` and capture on `s` (lab.measure.bench.time_call's `stream`).

Every call allocates its outputs, as SDPA does, so that rungs and baselines are timed alike.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

from lab.errors import LabError
from lab.ladder import registry
from lab.ladder.registry import BUILTIN_PREFIX
from lab.measure.problem import Problem, make_inputs, softmax_scale
from lab.measure.rates import MODES

UPSTREAM_GRAD_SEED = 1   # dO: seeded, independent of the inputs' seed


@dataclass
class Attention:
    """One implementation bound to one problem. Inputs come in `layout`; `forward(q, k, v) -> o`
    allocates its output. A rung whose forward writes the LSE (backward = true, or a forward-only
    rung's writes_lse = true) also has `forward_lse(q, k, v) -> (o, lse)`; a rung with a backward
    `backward(q, k, v, o, dout, lse) -> (dq, dk, dv)`; a baseline's backward is autograd's."""
    name: str
    forward: Callable
    layout: str = "BHND"
    forward_lse: Callable | None = None
    backward: Callable | None = None
    autograd: bool = False                         # baselines: the backward by torch.autograd.grad
    context: Callable = contextlib.nullcontext     # a factory: entered around the whole timing (SDPA's backend pin)
    no_backward: str = ""                          # why there is no backward (rungs without one)

    def supports(self, mode: str) -> bool:
        return mode == "fwd" or self.autograd or self.backward is not None


class NoBackward(LabError):
    """A backward mode asked of a rung that has none: bad input (exit 2), a clear message."""


def no_backward_reason(variant) -> str:
    reason = (f"{variant.id} has no backward: its lab:rung block does not declare backward = true "
              "(kernels/common.cuh's backward contract; a python rung exports a `backward` function)")
    if variant.shadows:   # the workspace's rung hides a built-in of its id, which may be the one meant
        hidden = next((v for v in registry.builtin() if v.id == variant.id), None)
        if hidden is not None and hidden.backward:
            reason += (f"; this workspace's {variant.id} ({variant.source.name}) shadows the built-in {variant.id}, "
                       f"which has one: --variant {BUILTIN_PREFIX}{variant.id}")
    return reason


def require_mode(variant, mode: str) -> None:
    """Refuse (exit 2) a mode the rung cannot run, before anything is built or launched."""
    if mode not in MODES:
        raise LabError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if mode != "fwd" and not variant.backward:
        raise NoBackward(no_backward_reason(variant),
                         hint="--mode fwd (the default) checks, times and profiles its forward; `lab variants` shows which rungs have a backward")


def lse_shape(q, layout: str) -> tuple[int, int, int]:
    """The row log-sum-exp's shape for Q in `layout`: [B, H, Nq] whatever the layout (kernels/common.cuh's
    backward contract, lab.ladder.python_rung's), never Q's first three dims in BNHD."""
    if layout == "BNHD":
        b, n, h = q.shape[:3]
        return (b, h, n)
    return tuple(q.shape[:3])   # (B, H, N, D)


def rung(variant, module, problem: Problem) -> Attention:
    """A rung's extension (a CUDA build, or lab.ladder.python_rung.PythonRung) as an Attention taking
    inputs in the rung's own layout, so that a python rung's timing holds no layout copies. A pair
    (lab.ladder.pairing): its forward part's forward and forward_lse, its backward part's backward,
    each called as that part's own rung is (the parts share one layout)."""
    import torch

    if variant.parts:
        first, second = variant.parts
        fwd = rung(first, module.forward_module, problem)
        bwd = rung(second, module.backward_module, problem)
        return Attention(variant.id, fwd.forward, variant.layout, fwd.forward_lse, bwd.backward)
    causal, scale = problem.causal, softmax_scale(problem)
    # the deterministic mode, passed only when asked (check_supported refused it for a rung without it)
    deterministic = {"deterministic": True} if problem.deterministic else {}
    if variant.kind == "python":
        def forward(q, k, v):
            return module.call_forward(q, k, v, causal, scale)[0]

        def forward_lse(q, k, v):
            return module.call_forward(q, k, v, causal, scale)

        def backward(q, k, v, o, dout, lse):
            return module.call_backward(q, k, v, o, dout, lse, causal, scale, **deterministic)
    else:
        def forward(q, k, v):
            o = torch.empty_like(q)
            module.forward(q, k, v, o, causal, scale)
            return o

        def forward_lse(q, k, v):
            o = torch.empty_like(q)
            lse = torch.empty(lse_shape(q, variant.layout), dtype=torch.float32, device=q.device)
            module.forward(q, k, v, o, causal, scale, lse)
            return o, lse

        def backward(q, k, v, o, dout, lse):
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            module.backward(q, k, v, o, dout, lse, dq, dk, dv, causal, scale, **deterministic)
            return dq, dk, dv
    if not variant.backward:
        return Attention(variant.id, forward, variant.layout, forward_lse if variant.writes_lse else None,
                         no_backward=no_backward_reason(variant))
    return Attention(variant.id, forward, variant.layout, forward_lse, backward)


def inputs(problem: Problem, attention: Attention, seed: int = 0, device: str = "cuda"):
    """Seeded Q, K, V in the implementation's layout."""
    return make_inputs(problem, seed, device=device, layout=attention.layout)


_inputs = inputs   # `launch` takes an argument of that name


def upstream_grad(like, seed: int = UPSTREAM_GRAD_SEED):
    """The seeded dL/dO every backward is timed (and checked) against."""
    import torch

    gen = torch.Generator(device=like.device).manual_seed(seed)
    return torch.randn(like.shape, generator=gen, device=like.device, dtype=torch.float32).to(like.dtype)


def make_call(attention: Attention, q, k, v, mode: str, seed: int = UPSTREAM_GRAD_SEED,
              dout=None) -> Callable[[], object]:
    """A zero-argument call of `mode` on these inputs: what a timer repeats. `dout`: the upstream
    gradient to read (the timer's rotating slot), else one seeded by `seed`."""
    import torch

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if not attention.supports(mode):
        raise NoBackward(attention.no_backward or f"{attention.name} has no backward")
    if mode == "fwd":
        def call():
            with torch.no_grad():
                return attention.forward(q, k, v)
        return call
    dout = upstream_grad(q, seed) if dout is None else dout
    if attention.backward is not None:
        backward, forward_lse = attention.backward, attention.forward_lse
        if mode == "fwd+bwd":
            def call():
                o, lse = forward_lse(q, k, v)
                return backward(q, k, v, o, dout, lse)
            return call
        o, lse = forward_lse(q, k, v)   # outside the call: bwd times the backward alone
        return lambda: backward(q, k, v, o, dout, lse)
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    if mode == "fwd+bwd":
        def call():
            o = attention.forward(qg, kg, vg)
            return torch.autograd.grad(o, (qg, kg, vg), dout)
        return call
    o = attention.forward(qg, kg, vg)   # outside the call: bwd times the backward alone

    def call():
        return torch.autograd.grad(o, (qg, kg, vg), dout, retain_graph=True)
    return call


def launch(variant, module, problem: Problem, mode: str = "fwd", seed: int = 0, inputs=None) -> Callable[[], object]:
    """A zero-argument call of the rung in `mode` on seeded inputs in its layout, or on `inputs`
    (q, k, v already in its layout: the timer's rotating slots). Profile's target, `lab bench`."""
    attention = rung(variant, module, problem)
    q, k, v = inputs if inputs is not None else _inputs(problem, attention, seed)
    return make_call(attention, q, k, v, mode)

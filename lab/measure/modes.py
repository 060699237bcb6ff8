"""Forward, backward and forward+backward calls of one attention implementation, for timing.

  fwd      o = attention(q, k, v)
  bwd      dq, dk, dv from a forward done once before timing (autograd graph kept, retain_graph)
  fwd+bwd  the forward and its backward, one call

Gradients come from `torch.autograd.grad` (no .grad accumulation between repetitions) against a
fixed seeded upstream gradient. Autograd runs the backward on the forward's stream, so a CUDA-graph
capture of `bwd` must have done its forward on the capture stream: build the call inside
`torch.cuda.stream(s)` and capture on `s` (lab.measure.timed.time_checked's `stream`).
"""

from __future__ import annotations

from typing import Callable

from lab.measure.problem import softmax_scale
from lab.measure.sweepplan import MODES


def rung_forward(module, problem) -> Callable:
    """A rung's launcher as forward(q, k, v) -> o (the output allocated per call, as SDPA does)."""
    import torch

    scale = softmax_scale(problem)
    if getattr(module, "call", None) is not None and module.variant.layout == "BHND":
        # a python rung (lab.ladder.python_rung) in the lab's layout: its callable returns o itself
        return lambda q, k, v: module.call(q, k, v, problem.causal, scale)

    def forward(q, k, v):   # a .cu rung; a python rung in another layout goes through its adapter
        o = torch.empty_like(q)
        module.forward(q, k, v, o, problem.causal, scale)
        return o

    return forward


def has_backward(module) -> bool:
    """A rung provides a backward when its extension exports one (the launcher contract of
    kernels/common.cuh has a forward only so far)."""
    return callable(getattr(module, "backward", None))


def make_call(forward: Callable, q, k, v, mode: str, seed: int = 1) -> Callable[[], object]:
    import torch

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if mode == "fwd":
        def call():
            with torch.no_grad():
                return forward(q, k, v)
        return call
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    gen = torch.Generator(device=q.device).manual_seed(seed)
    grad_out = torch.randn(q.shape, generator=gen, device=q.device, dtype=torch.float32).to(q.dtype)
    if mode == "fwd+bwd":
        def call():
            o = forward(qg, kg, vg)
            return torch.autograd.grad(o, (qg, kg, vg), grad_out)
        return call
    o = forward(qg, kg, vg)   # outside the timing: bwd times the backward alone

    def call():
        return torch.autograd.grad(o, (qg, kg, vg), grad_out, retain_graph=True)
    return call

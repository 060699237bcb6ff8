"""What the lab times, set up for the checked timer (lab.measure.timed): a rung or an SDPA baseline on
one problem, its inputs rotating between seeded sets (lab.measure.rotation), a rung's every output
checked against its set's float64 reference, and the problem's floor on this device
(lab.measure.floor). `lab bench`, `lab profile` and the SDPA baselines time through here; `lab sweep`
and `lab tune` build the same pieces around their own calls.
"""

from __future__ import annotations

from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP, EVENTS, Timing
from lab.measure.floor import Floor, attention_floor
from lab.measure.call import launch
from lab.measure.problem import Problem
from lab.measure.rotation import DEFAULT_SETS, OutputCheck, problem_inputs
from lab.measure.timed import time_checked


def device_floor(problem: Problem, mode: str = "fwd", peaks: dict | None = None) -> Floor | None:
    """The floor of `problem` in `mode` on the current CUDA device (`peaks`: device_info()'s, when the
    caller has them; else looked up by the device's name)."""
    import torch

    name = torch.cuda.get_device_name()
    return attention_floor(problem, mode, peaks or None, device=name)


def time_rung(variant, module, problem: Problem, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP, *,
              method: str = EVENTS, l2_flush: bool = True, budget_s: float | None = None, peaks: dict | None = None,
              sets: int = DEFAULT_SETS, seed: int = 0, mode: str = "fwd") -> Timing:
    """A rung on `problem` in `mode` (lab.measure.call), in its own layout, timed and checked; raises
    TimingRefused. The forward's inputs rotate and its every output is checked; a backward's (bwd)
    O and LSE are computed once before timing, so its inputs stay put (a refill would leave them
    stale) and its gradients are the correctness gate's to judge (lab.measure.gradcheck)."""
    rotating = problem_inputs(problem, sets if mode != "bwd" else 1, seed, layout=variant.layout)
    verify = OutputCheck(problem, rotating, layout=variant.layout) if mode == "fwd" else None
    call = launch(variant, module, problem, mode, inputs=rotating.slots)  # allocates its outputs, as SDPA does
    return time_checked(call, prepare=rotating.prepare if mode != "bwd" else None, verify=verify,
                        floor=device_floor(problem, mode, peaks), method=method, reps=reps, warmup=warmup,
                        l2_flush=l2_flush, budget_s=budget_s,
                        what=f"{variant.id} on {problem.label()}" + ("" if mode == "fwd" else f" {mode}"))

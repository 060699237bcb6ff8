"""Build, gate in a child, then time: the one order every measuring command follows (lab bench,
lab sweep, lab tune, lab profile). Correctness gates timing: a rung is checked against float64 in
a child process (lab.measure.isolated: a rung that crashes takes down only that child) on the timed
problem plus GATE_SHAPES seeded ragged shapes, causal and not, in the mode that will be timed.

`gated` returns the verdict as data, never an exception for a wrong or crashing rung: each command
decides what a failure means to it (bench exits 1, a sweep writes a row, tune drops a candidate).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.console import say
from lab.errors import CheckFailed
from lab.measure import isolated
from lab.measure.call import require_mode
from lab.measure.problem import Problem, check_supported

GATE_SHAPES = 4
"""Seeded ragged shapes a rung is checked on before it is timed, beside the timed problem itself."""


@dataclass
class Gated:
    module: object          # the built extension (or python rung) to time
    verdict: dict           # lab.measure.check.CheckResult.to_dict() from the child, or a crash's
    mode: str = "fwd"

    @property
    def passed(self) -> bool:
        return bool(self.verdict.get("passed"))

    def reason(self) -> str | None:
        """Why the rung is not timed, or None when it passed."""
        if self.passed:
            return None
        why = self.verdict.get('error') or self.verdict.get('failure') or self.verdict.get('failed_shape')
        return (f"failed its float64 check ({why or 'see lab check'})"
                f"{'' if self.mode == 'fwd' else ' in ' + self.mode}: not timed")


def verdict(variant, problem: Problem, mode: str = "fwd", tune_config: int | None = None,
            extra_shapes: int = GATE_SHAPES) -> dict:
    """The child's verdict; a child that crashed or hung becomes a failed verdict naming how."""
    try:
        return isolated.check_in_child(variant, problem, extra_shapes, tune_config, mode=mode)
    except CheckFailed as crash:
        return {"passed": False, "error": str(crash), "failed_shape": problem.label()}


def verdicts(variant, problem: Problem, mode: str = "fwd", configs=(None,), extra_shapes: int = GATE_SHAPES,
             on_verdict=None) -> dict:
    """`verdict` of several configurations of one rung ({config: verdict} in the order given; None:
    the launcher's own choice, i: tuning candidate i), all checked in ONE child (`lab tune`'s default
    and candidates: the child's torch import and CUDA start paid once). Where that child ends before
    its last verdict (a crash, a candidate that broke the CUDA context, a hang), the configurations it
    had not finished are checked each in a child of its own, as `verdict` checks one: the crashing
    one is named, the others keep their verdicts. `on_verdict(config, verdict)` as each arrives."""
    configs = list(configs)
    found, ended = isolated.check_configs_in_child(variant, problem, extra_shapes, configs, mode, on_verdict)
    left = [c for c in configs if c not in found]
    if left:
        say(f"{ended or 'the check child ended early'}; checking the {len(left)} configuration(s) it did not "
            "finish each in a child of its own")
    for config in left:
        found[config] = verdict(variant, problem, mode, tune_config=config, extra_shapes=extra_shapes)
        if on_verdict:
            on_verdict(config, found[config])
    return {c: found[c] for c in configs}


def gated(variant, problem: Problem, mode: str = "fwd", extra_shapes: int = GATE_SHAPES,
          verdict_of=None) -> Gated:
    """Refuse what the rung cannot run (exit 2), build it (cached), check it in a child.
    `verdict_of(variant, problem, mode)`: where the verdict comes from when not from a child of this
    process (a sweep's workers share one verdict per rung, dtype and mode: lab.sweeping.Gates)."""
    from lab.environment import require_compute_capability
    from lab.ladder import build

    check_supported(variant, problem)
    require_mode(variant, mode)
    require_compute_capability(variant)
    module = build.build(variant).module
    found = (verdict_of(variant, problem, mode) if verdict_of is not None
             else verdict(variant, problem, mode, extra_shapes=extra_shapes))
    return Gated(module, found, mode)

"""`lab tune`: a rung's candidate configurations checked, then timed round-robin, on one problem.

A rung declares its candidates in its own file, through common.cuh's tuning contract: built with
-DLAB_TUNING it exports `lab_forward_<id>_configs(head_dim, dtype)` (the labels) and
`lab_forward_<id>_config(args, stream, index)`. The lab builds that tuning extension through
`lab.ladder.build` (cached like any build), checks every candidate against float64 in one child
process (correctness gates timing; lab.measure.gate.verdicts: where a candidate crashes that child,
the candidates it had not finished are checked again each in a child of its own), then times
the launcher's own choice ("default") and every passing candidate interleaved, repetition by
repetition, so that drift hits all of them alike. A candidate declared for the other mask than the
problem's (lab.ladder.tuning.Declared) is "not applicable", with that reason: neither checked nor
timed, and never counted as wrong; the others are checked on seeded shapes of the mask they serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.console import say as _say
from lab.environment import require_compute_capability, require_gpu
from lab.errors import LabError
from lab.ladder.build import build, build_many, is_built
from lab.ladder.tuning import Candidate, declared_candidates, require_tunable, tuning_module
from lab.measure import rates
from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP
from lab.measure.call import require_mode, rung
from lab.measure.checked import Measurement, Workload, describe
from lab.measure.floor import attention_floor
from lab.measure.gate import GATE_SHAPES, verdicts
from lab.measure.problem import Problem, check_supported
from lab.measure.timed import TimingRefused, time_checked_interleaved

DEFAULT_LABEL = "default"


@dataclass
class TuneRow:
    label: str                    # "default" or the candidate's label from the rung's file
    index: int | None             # None for the launcher's own choice
    correctness: dict
    timing: dict | None = None    # lab.measure.bench.Timing.to_dict(), with tflops
    error: str | None = None
    refused: str | None = None    # the timer's verdict (lab.measure.timed.STATUSES) when it gave no time
    not_applicable: str | None = None   # why the candidate does not serve this problem (its declaration)

    @property
    def passed(self) -> bool:
        return bool(self.correctness.get("passed"))

    def to_dict(self) -> dict:
        return {"label": self.label, "index": self.index, "passed": self.passed, "correctness": self.correctness,
                "timing": self.timing, "error": self.error, "refused": self.refused,
                "not_applicable": self.not_applicable}


@dataclass
class TuneResult:
    variant_id: str
    problem: Problem
    rows: list[TuneRow] = field(default_factory=list)
    mode: str = "fwd"

    def fastest(self) -> TuneRow | None:
        timed = [r for r in self.rows if r.timing]
        return min(timed, key=lambda r: r.timing["median"]) if timed else None

    def to_dict(self) -> dict:
        best = self.fastest()
        return {"variant": self.variant_id, "problem": self.problem.to_dict(), "mode": self.mode,
                "fastest": best.label if best else None, "rows": [r.to_dict() for r in self.rows]}


def tune(variant, problem: Problem, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
         check_shapes: int = GATE_SHAPES, mode: str = "fwd") -> TuneResult:
    """mode bwd / fwd+bwd: the backward's candidates (lab_backward_<id>_configs), each checked on
    the backward's gate and timed in that mode behind the rung's own forward."""
    check_supported(variant, problem)
    require_mode(variant, mode)
    require_tunable(variant)
    require_gpu("tune")
    require_compute_capability(variant)
    import torch   # lazy: `lab tune`'s refusals (no tuning contract, no GPU) come before torch loads

    if not any(is_built(variant, tuning=t) for t in (False, True)):
        # neither build is cached: compile the plain and the tuning build side by side (two worker
        # processes, as `lab build --tuning` does) instead of one after the other
        _say(f"compile {variant.id}'s build and its tuning build side by side (`lab build --tuning` builds them ahead)")
        for outcome in build_many([variant], None, ptxas_only=False, tuning=True):
            if outcome.error:
                raise LabError(outcome.error, hint=outcome.hint)
    plain = build(variant).module
    module = tuning_module(variant)
    declared = declared_candidates(module, problem.head_dim, problem.dtype, mode, variant.id)
    labels = [d.label for d in declared]
    if not labels:
        raise LabError(f"{variant.id} declares no {'backward ' if mode != 'fwd' else ''}tuning candidates for "
                       f"head_dim {problem.head_dim}, {problem.dtype}",
                       hint="its file lists them per head_dim and dtype (kernels/common.cuh)")

    result = TuneResult(variant.id, problem, mode=mode)
    names = {None: DEFAULT_LABEL, **dict(enumerate(labels))}
    apart = {i: why for i, why in ((i, d.refusal(problem)) for i, d in enumerate(declared)) if why}
    serving = [c for c in names if c not in apart]
    _say(f"check {variant.id}'s default and {len(serving) - 1} candidates on {problem.label()} "
         f"and {check_shapes} ragged shapes each, in one child process"
         + (f"; {len(apart)} not applicable to this problem ({', '.join(names[i] for i in apart)}: "
            f"{next(iter(apart.values()))})" if apart else ""))

    def shown(index, correctness):
        _say(f"  {'ok  ' if correctness.get('passed') else 'FAIL'} {names[index]}"
             + (f": {_failure(correctness)}" if not correctness.get("passed") else ""))

    found = verdicts(variant, problem, mode, serving, check_shapes, on_verdict=shown)
    for index, label in names.items():
        if index in apart:   # declared for the other mask: not run, not wrong
            result.rows.append(TuneRow(label, index, {}, not_applicable=apart[index]))
            continue
        correctness = found[index]
        result.rows.append(TuneRow(label, index, correctness,
                                   error=None if correctness["passed"] else _failure(correctness)))

    # every candidate is one measurement (lab.measure.checked) on one workload in the rung's layout: the
    # same rotating input sets and references, each call's output (a backward's gradients) checked,
    # the same floor as `lab bench` holds a rung to
    workload = Workload(problem, variant.layout)
    floor = attention_floor(problem, mode, device=torch.cuda.get_device_name())

    def measured(row):
        impl = rung(variant, plain if row.index is None else Candidate(module, row.index, mode), problem)
        return Measurement(impl, workload, mode, floor=floor,
                           what=describe(f"{variant.id} {row.label}", problem, mode)).checked()

    passing = {r.label: measured(r) for r in result.rows if r.passed}
    if passing:
        _say(f"time {len(passing)} configurations round-robin: {reps} reps each after {warmup} warm-up, L2 flushed, "
             "inputs rotated and every output checked")
        timings = time_checked_interleaved(passing, reps=reps, warmup=warmup)
        for row in result.rows:
            t = timings.get(row.label)
            if isinstance(t, TimingRefused):   # measured, but not a time the lab prints
                row.refused, row.error = t.status, t.row_reason()
            elif t is not None:
                row.timing = {**t.to_dict(), "method": "cuda-events, interleaved round-robin",
                              "tflops": rates.tflops(rates.flops(problem, mode), t.median)}
    return result


def _failure(correctness: dict) -> str:
    """Why a configuration failed its check: the child's error, else the first failed shape and what
    failed there (a launcher's refusal reads as itself, never as a wrong output)."""
    return correctness.get("error") or correctness.get("failure") or f"wrong on {correctness.get('failed_shape')}"

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

A prediction (`--predict 'LABEL=LO-HI'`: candidate LABEL's gain over the default, as a range of
default time / candidate time) is resolved against the declared candidates (read from the rung's
source before the build where it declares them statically, then against the built table) and recorded
in the result before any candidate is checked or timed, so it cannot be fitted to the outcome; lab.store.tunes keeps
it with the measured ratio, and the ledger (lab.store.ledger) judges it. Judged on the median of the
paired rounds' ratios (each round times the default and the candidate once), with that median's CI95;
the ratio of the two medians only where the rounds were not kept (judge_ratio).

`--against BACKEND` times one SDPA backend in the same rounds (its output the reference, not checked, as a baseline's
always is), so the default's ratio against it is paired round by round too: the question "is my kernel ahead of cuDNN
on this shape" answered side by side in one run, not across two timings seconds apart. It is a row of the table, never
"the fastest configuration", and predictions cannot name it.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import warnings
from dataclasses import dataclass, field

from lab.console import say as _say
from lab.environment import device_info, require_compute_capability, require_gpu, software_info
from lab.errors import LabError
from lab.ladder.build import build, build_many, is_built
from lab.ladder.tuning import (DEFAULT_LABEL, Candidate, candidates_what, configs_function, declared_candidates,
                               require_candidates, require_source_agrees, require_tunable, resolve_label,
                               source_declared, tuning_build)
from lab.measure import rates
from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP, median_ci95
from lab.measure.baselines import attention as baseline_attention
from lab.measure.baselines import unavailable_reason
from lab.measure.call import require_mode, rung
from lab.measure.checked import Measurement, Workload, describe
from lab.measure.floor import attention_floor
from lab.measure.gate import GATE_SHAPES, verdicts
from lab.measure.problem import Problem, check_supported
from lab.measure.timed import TimingRefused, time_checked_interleaved


@dataclass
class TuneRow:
    label: str                    # "default" or the candidate's label from the rung's file
    index: int | None             # None for the launcher's own choice
    correctness: dict
    timing: dict | None = None    # lab.measure.bench.Timing.to_dict(), with tflops
    error: str | None = None
    refused: str | None = None    # the timer's verdict (lab.measure.timed.STATUSES) when it gave no time
    not_applicable: str | None = None   # why the candidate does not serve this problem (its declaration)
    vs_default: dict | None = None      # paired_ratio(): the default's time over this row's, with its CI95
    baseline: bool = False              # `--against`: an SDPA backend timed in the same rounds, not a configuration

    @property
    def passed(self) -> bool:
        return bool(self.correctness.get("passed"))

    def to_dict(self) -> dict:
        return {"label": self.label, "index": self.index, "passed": self.passed, "correctness": self.correctness,
                "timing": self.timing, "error": self.error, "refused": self.refused,
                "not_applicable": self.not_applicable, "vs_default": self.vs_default, "baseline": self.baseline}


# ----------------------------------------------------------------------------- predictions

# "1.04-1.14", "1.04-1.14x", "1.04 - 1.14 x": a range of ratios (default time / candidate time)
_RANGE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*-\s*(\d+(?:\.\d*)?|\.\d+)\s*x?\s*$", re.IGNORECASE)
INSIDE, ABOVE, BELOW = "inside", "above", "below"


@dataclass(frozen=True)
class Prediction:
    """`--predict 'LABEL=LO-HI'`: candidate LABEL (as given: a label, or a unique part of one) runs LO to
    HI times as fast as the launcher's default on the tuned problem. `label` is the candidate it named,
    once resolved against the rung's declared candidates (resolve_predictions)."""
    given: str
    low: float
    high: float
    label: str | None = None

    def to_dict(self) -> dict:
        return {"given": self.given, "label": self.label, "low": self.low, "high": self.high}


def parse_prediction(text: str) -> Prediction:
    """One --predict value; LabError (exit 2) on anything but LABEL=LO-HI with 0 < LO <= HI."""
    given, eq, rng = text.rpartition("=")
    form = "write --predict 'LABEL=LO-HI': a candidate's label (or a unique part of it) and its predicted gain " \
           "over the default, e.g. 'GQA-causal-split=1.15-1.30'"
    if not eq or not given.strip():
        raise LabError(f"--predict {text!r} names no candidate", hint=form)
    m = _RANGE.match(rng)
    if not m:
        raise LabError(f"--predict {text!r}: {rng.strip()!r} is not a range LO-HI", hint=form)
    low, high = float(m.group(1)), float(m.group(2))
    if low <= 0:
        raise LabError(f"--predict {text!r}: a predicted gain must be positive, got {low:g}", hint=form)
    if low > high:
        raise LabError(f"--predict {text!r}: the range's low end {low:g} is above its high end {high:g}", hint=form)
    return Prediction(given.strip(), low, high)


def resolve_predictions(predictions: list[Prediction], declared: list, problem: Problem, what: str) -> list[Prediction]:
    """Each prediction with the candidate it names (lab.ladder.tuning.resolve_label: the label itself, else
    the one label that contains it, case ignored). LabError (exit 2) where none or several do, where it
    names the default (every ratio's reference) or a candidate not applicable to the problem, or where two
    name one candidate. `what` says which list was searched (lab.ladder.tuning.candidates_what)."""
    out, seen = [], {}
    for p in predictions:
        if p.given.lower() == DEFAULT_LABEL:
            raise LabError(f"--predict {p.given}: the default is what every candidate's ratio is measured against",
                           hint="predict a candidate's gain over it")
        label = declared[resolve_label(p.given, declared, problem, what, "--predict")].label
        if label in seen:
            raise LabError(f"--predict {p.given} and --predict {seen[label]} both name candidate {label!r}")
        seen[label] = p.given
        out.append(Prediction(p.given, p.low, p.high, label))
    return out


def judge(low: float, high: float, measured: float) -> str:
    """Where a measured ratio falls against a predicted range: inside (bounds included), above or below."""
    return ABOVE if measured > high else BELOW if measured < low else INSIDE


PAIRED, MEDIANS = "paired rounds", "ratio of medians"   # the two estimators a prediction can be judged on


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and 0 < x < float("inf")


def judge_ratio(low: float, high: float, vs: dict | None) -> dict:
    """A predicted range LOW-HIGH against a candidate's ratio to the default (paired_ratio()'s dict, fresh
    or as a tune stored it): the one judgement `lab tune`, its stored predictions, `lab ledger` and the
    report all print. Where the paired rounds were kept, the measured ratio is their median and its CI95
    beside it is theirs (a number and its interval from one estimator); else the ratio of the two medians,
    marked as such, with no interval of its own. `ci95_where`: where each end of the CI95 falls (judge),
    so a verdict whose CI95 crosses a bound says so. Every key None where there is no ratio."""
    vs = vs if isinstance(vs, dict) else {}
    paired = all(_positive(vs.get(k)) for k in ("paired_median", "paired_ci95_low", "paired_ci95_high")) \
        and isinstance(vs.get("rounds"), int) and vs["rounds"] > 0
    if paired:
        x, ci = vs["paired_median"], [vs["paired_ci95_low"], vs["paired_ci95_high"]]
        return {"measured": x, "estimator": PAIRED, "rounds": vs["rounds"], "ratio_ci95": ci,
                "verdict": judge(low, high, x), "ci95_where": [judge(low, high, c) for c in ci]}
    x = vs.get("ratio") if _positive(vs.get("ratio")) else None
    return {"measured": x, "estimator": MEDIANS if x else None, "rounds": None, "ratio_ci95": None,
            "verdict": judge(low, high, x) if x else None, "ci95_where": None}


def paired_ratio(reference, timing) -> dict:
    """The default's time over a candidate's (two lab.measure.bench.Timing): the ratio of the medians
    (the table's "vs default" column), and, where both kept their repetitions' times round by round,
    the median of the per-round ratios with its CI95 from order statistics (lab.measure.bench.median_ci95):
    the timer runs the default and every candidate once per round (time_checked_interleaved), so round
    i's two times saw the same drift. A prediction is judged on that median, with that CI95 (judge_ratio):
    the ratio of medians can lie outside it (the two medians come from different rounds)."""
    out = {"ratio": rates.ratio(reference.median, timing.median), "paired_median": None, "paired_ci95_low": None,
           "paired_ci95_high": None, "rounds": None}
    ref, own = reference.samples or [], timing.samples or []
    if ref and len(ref) == len(own) and all(s > 0 for s in own):
        ratios = sorted(r / s for r, s in zip(ref, own))
        lo, hi = median_ci95(ratios)
        out.update(paired_median=statistics.median(ratios), paired_ci95_low=lo, paired_ci95_high=hi, rounds=len(ratios))
    return out


@dataclass
class TuneResult:
    variant_id: str
    problem: Problem
    rows: list[TuneRow] = field(default_factory=list)
    mode: str = "fwd"
    predictions: list[Prediction] = field(default_factory=list)   # resolved, recorded before any timing
    device: dict | None = None           # lab.environment.device_info() of the GPU that timed it
    software: dict | None = None
    source_sha256: str | None = None     # the rung's source file(s), as a run records them

    def fastest(self) -> TuneRow | None:
        """The fastest configuration of the rung (a baseline row, `--against`, is none)."""
        timed = [r for r in self.rows if r.timing and not r.baseline]
        return min(timed, key=lambda r: r.timing["median"]) if timed else None

    def against(self) -> TuneRow | None:
        return next((r for r in self.rows if r.baseline), None)

    def default_against(self) -> dict | None:
        """`--against`: the baseline's time over the default's (> 1: the default is ahead), as paired_ratio() gives
        it (the per-round ratios' median and CI95); None where either was not timed."""
        base = self.against()
        return base.timing.get("default_against") if base and base.timing else None

    def to_dict(self) -> dict:
        best = self.fastest()
        base = self.against()
        return {"variant": self.variant_id, "problem": self.problem.to_dict(), "mode": self.mode,
                "fastest": best.label if best else None, "rows": [r.to_dict() for r in self.rows],
                "predictions": [judged(p, self) for p in self.predictions],
                "against": base.label if base else None, "default_against": self.default_against()}

    def row(self, label: str) -> TuneRow | None:
        return next((r for r in self.rows if r.label == label), None)


def judged(p: Prediction, result: TuneResult) -> dict:
    """A prediction with what was measured for its candidate (judge_ratio: the ratio, the estimator it
    comes from, its CI95 and the verdict), or why none."""
    row, default_row = result.row(p.label), result.row(DEFAULT_LABEL)
    how = (default_row.timing if default_row else None) or {}
    out = {**p.to_dict(), **judge_ratio(p.low, p.high, row.vs_default if row else None), "not_measured": None,
           "timing": how.get("timing", "events"), "under_load_ms": (how.get("checks") or {}).get("under_load_ms")}
    if out["verdict"] is None:
        default = result.row(DEFAULT_LABEL)
        out["not_measured"] = (row.error or row.refused or "not timed") if row and not row.timing else \
            f"the default was not timed ({(default.error or default.refused) if default else 'absent'})"
    return out


def source_sha256(variant) -> str | None:
    """The rung's source as a run records it (Variant.source_sha256); None where it cannot be read."""
    try:
        return variant.source_sha256()
    except (OSError, AttributeError):
        return None


def serialized_note(ptxas: list[dict], what: str, command: str) -> str | None:
    """A line for the kernels of a build whose wgmma pipeline ptxas serialized (its C75xx notices, read by
    lab.ladder.build), said before anything is timed: a candidate or default launching one runs with a wait
    after every product (v9 step 7's half-width tile ran 0.75-0.88x so), and its time says that, not its
    design. None when there are none. Which candidate launches which kernel is the rung's own code, so the
    line names the build and the command that lists the kernels."""
    reasons: dict[str, int] = {}
    for rec in ptxas:
        if rec.get("wgmma_serialized"):
            reasons[rec["wgmma_serialized"]] = reasons.get(rec["wgmma_serialized"], 0) + 1
    if not reasons:
        return None
    count = sum(reasons.values())
    why = "; ".join(f"{reason} ({n})" for reason, n in reasons.items())
    return (f"warning: ptxas serialized the wgmma pipeline of {count} of {len(ptxas)} kernels in {what} ({why}): "
            f"a configuration launching one waits after every product; `{command}` lists them")


# How a tune's rows were timed (`lab tune --timing`), as each row's timing says it.
TUNE_METHODS = {"events": "cuda-events", "graph": "cuda-graph replay, its start held"}


def against_spec(backend: str, problem: Problem, mode: str, workload, layout: str, floor):
    """`--against BACKEND`: SDPA's BACKEND on the tuned problem as the timer's spec, its output not checked (the
    reference), its inputs the configurations' own where the layouts agree, and the context that pins the backend
    (entered around the whole interleaved timing, so no call pays for entering it); or the reason it cannot run,
    after one call outside the timing (a backend that refuses the shape, say)."""
    import torch

    name = f"sdpa-{backend}"
    plain = problem.plain()   # SDPA has no deterministic mode: its default backward
    impl = baseline_attention(name, plain)
    own = workload if impl.layout == layout and plain == problem else Workload(plain, impl.layout)
    measurement = Measurement(impl, own, mode, verify=False, floor=floor, what=describe(name, plain, mode))
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught, impl.context():
            warnings.simplefilter("always")
            measurement.call()()
            torch.cuda.synchronize()
    except RuntimeError as e:
        return name, None, None, unavailable_reason([str(w.message) for w in caught], e)
    return name, measurement.checked(), impl.context, None


def tune(variant, problem: Problem, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
         check_shapes: int = GATE_SHAPES, mode: str = "fwd", predictions: list[Prediction] | None = None,
         under_load_ms: float = 0.0, timing: str = "events", against: str | None = None) -> TuneResult:
    """`under_load_ms`: each candidate's repetition behind that long a stretch of its own calls
    (lab.measure.timed, UNDER LOAD): each runs at the clock its own sustained load leaves the GPU at.
    `timing`: "events" (call latency, host dispatch included: what an eager caller waits) or "graph"
    (device time: each candidate's call captured in a CUDA graph and replayed behind a held start, so a
    candidate's host-side cost, a workspace's allocation say, is not in it).
    mode bwd / fwd+bwd: the backward's candidates (lab_backward_<id>_configs), each checked on
    the backward's gate and timed in that mode behind the rung's own forward. `predictions`
    (parse_prediction) are resolved against the declared candidates before any check or timing: one
    that names no candidate, or several, is refused (exit 2) with nothing run; where the rung's file
    declares its candidates statically (lab.ladder.tuning.source_declared), before anything is built,
    and the built table must then list the same (require_source_agrees)."""
    check_supported(variant, problem)
    require_mode(variant, mode)
    require_tunable(variant)
    backward = "backward " if mode != "fwd" else ""
    what = candidates_what(variant, problem, mode)
    # Bad input is refused before minutes of compiling: the candidates as the rung's file declares them,
    # read from its source where it says them statically; the built table below stays the truth.
    read = source_declared(variant, problem.head_dim, problem.dtype, mode)
    if read is not None:
        require_candidates(variant, read, problem, mode)
        resolve_predictions(list(predictions or []), read, problem, what)
    elif predictions:   # said only where it changes what happens: the predictions wait for the build
        _say(f"{variant.id}'s {backward}candidates are not read from its source ({configs_function(variant, mode)} "
             "is not in a form the lab evaluates): whether it has any for this problem, and what --predict names, "
             "are checked after the build")
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
    plain_build, tuned_build = build(variant), tuning_build(variant)
    plain, module = plain_build.module, tuned_build.module
    declared = declared_candidates(module, problem.head_dim, problem.dtype, mode, variant.id)
    if read is not None:
        require_source_agrees(variant, read, declared, problem.head_dim, problem.dtype, mode)
    labels = [d.label for d in declared]
    require_candidates(variant, declared, problem, mode)
    resolved = resolve_predictions(list(predictions or []), declared, problem, what)

    # what the timings below will carry, said before them: kernels whose wgmma ptxas serialized
    for which, ptxas, flag in (("build", plain_build.ptxas, ""), ("tuning build", tuned_build.ptxas, " --tuning")):
        if note := serialized_note(ptxas, f"{variant.id}'s {which}",
                                   f"lab build --ptxas-only --variant {variant.id}{flag}"):
            _say(note)

    result = TuneResult(variant.id, problem, mode=mode, predictions=resolved, source_sha256=source_sha256(variant))
    for p in resolved:   # said before anything runs: the record of what was expected
        _say(f"prediction recorded: {p.label} {p.low:g}-{p.high:g}x the default on {problem.label()}")
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
    configurations = len(passing)
    pinned = contextlib.nullcontext
    if passing and against:
        name, spec, context, why = against_spec(against, problem, mode, workload, variant.layout, floor)
        result.rows.append(TuneRow(name, None, {"passed": why is None, "reference": "not checked: the baseline"},
                                   error=f"unavailable: {why}" if why else None, baseline=True))
        if spec is not None:
            passing[name], pinned = spec, context
    if passing:
        _say(f"time {configurations} configurations round-robin: {reps} reps each after {warmup} warm-up, L2 flushed, "
             "inputs rotated and every output checked" + (", by CUDA-graph replay (device time)" if timing == "graph" else "")
             + (f"; sdpa-{against} in the same rounds, its output the reference" if len(passing) > configurations else ""))
        with pinned():
            timings = time_checked_interleaved(passing, reps=reps, warmup=warmup, under_load_ms=under_load_ms,
                                               method=timing)
        result.device, result.software = device_info(), software_info()
        for row in result.rows:
            t = timings.get(row.label)
            if isinstance(t, TimingRefused):   # measured, but not a time the lab prints
                row.refused, row.error = t.status, t.row_reason()
            elif t is not None:
                row.timing = {**t.to_dict(), "timing": timing, "method": TUNE_METHODS[timing] + ", interleaved round-robin"
                              + (f", each behind {under_load_ms:g} ms of its own calls (under load)" if under_load_ms else ""),
                              "tflops": rates.tflops(rates.flops(problem, mode), t.median)}
        reference = timings.get(DEFAULT_LABEL)
        if reference is not None and not isinstance(reference, TimingRefused):
            for row in result.rows:
                t = timings.get(row.label)
                if row.timing and t is not None:
                    row.vs_default = paired_ratio(reference, t)
                    if row.baseline:   # the other way round: the baseline's time over the default's
                        row.timing["default_against"] = paired_ratio(t, reference)
    return result


def _failure(correctness: dict) -> str:
    """Why a configuration failed its check: the child's error, else the first failed shape and what
    failed there (a launcher's refusal reads as itself, never as a wrong output)."""
    return correctness.get("error") or correctness.get("failure") or f"wrong on {correctness.get('failed_shape')}"

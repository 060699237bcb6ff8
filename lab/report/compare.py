"""Compare two stored runs: time and TFLOP/s with their noise, key ncu metrics, findings resolved
and new, and a verdict that `lab compare` turns into its exit code (1 on a regression).

A regression is B slower than A by more than the threshold AND beyond noise: the CI95 intervals of
the two medians do not overlap. Throughput (TFLOP/s) is what is compared, so two runs of different
shapes are still compared fairly; for the same shape it is the same test as on the times.

Two runs of different modes (a forward and a backward) timed different work: their TFLOP/s count
different FLOPs, their kernels are different passes, their SDPA baselines timed other calls. Nothing of
their speed is compared: the comparison says so first, gives each run's own numbers in its own mode,
and is not `comparable` (`lab compare` exits 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lab.analysis.metrics import KEY_METRICS as METRIC_LABELS
from lab.errors import LabError
from lab.measure import rates
from lab.report.formatting import fmt_change, fmt_num, fmt_pct
from lab.report.rundata import DURATION, RunData, ci_overlap, first_metric, load
from lab.store.runs import find_run, open_root

DEFAULT_THRESHOLD_PCT = 5.0

# The metrics an engineer reads first on Nsight Compute's Details page: the analysis' one list.
KEY_METRICS = METRIC_LABELS


@dataclass
class Throughput:
    """TFLOP/s of one timing, with the interval its median's CI95 maps to."""

    median_ms: float
    tflops: float
    low: float | None
    high: float | None

    @classmethod
    def of(cls, rd: RunData) -> "Throughput":
        """The run's stored TFLOP/s (its mode's FLOPs, lab.measure.rates) and its CI95 in TFLOP/s."""
        t = rd.timing
        return cls(t["median"], rd.tflops, rates.tflops(rd.flops, t.get("ci95_high")),
                   rates.tflops(rd.flops, t.get("ci95_low")))


@dataclass
class Comparison:
    a: RunData
    b: RunData
    threshold_pct: float
    a_tp: Throughput
    b_tp: Throughput
    change_pct: float | None          # TFLOP/s of B against A: negative is slower (None: not comparable)
    overlap: bool | None              # CI95 intervals overlap (None: a run has no CI stored)
    regression: bool
    verdict: str
    warnings: list[str] = field(default_factory=list)
    baselines: list[dict] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    findings: dict = field(default_factory=dict)
    comparable: bool = True           # False: different modes, nothing of their speed compared

    def to_json(self) -> dict:
        side = lambda rd, tp: {"run": rd.id, "variant": rd.variant_id, "candidate": rd.candidate,  # noqa: E731
                               "problem": rd.problem.label(),
                               "device": rd.device_name, "median_ms": tp.median_ms, "std_ms": rd.timing.get("std"),
                               "ci95_low_ms": rd.timing.get("ci95_low"), "ci95_high_ms": rd.timing.get("ci95_high"),
                               "mode": rd.mode, "tflops": tp.tflops, "bottleneck": rd.bottleneck}
        return {"a": side(self.a, self.a_tp), "b": side(self.b, self.b_tp), "threshold_pct": self.threshold_pct,
                "tflops_change_pct": self.change_pct, "ci95_overlap": self.overlap, "regression": self.regression,
                "verdict": self.verdict, "comparable": self.comparable, "warnings": self.warnings, "baselines": self.baselines,
                "metrics": self.metrics, "findings": self.findings}


def _pct_change(a: float | None, b: float | None) -> float | None:
    return None if (a in (None, 0) or b is None) else 100.0 * (b - a) / a


def _finding_classes(rd: RunData) -> dict[str, str]:
    """class -> title of the run's findings (first title per class); the summary's bottleneck
    where no findings table was stored."""
    found = rd.table("findings")
    if found is None:
        return {rd.bottleneck: "(findings table not stored; summary only)"} if rd.bottleneck else {}
    out: dict[str, str] = {}
    for rec in found.rows:
        out.setdefault(str(rec.get("class")), str(rec.get("title") or ""))
    return out


def metric_rows(ka: dict | None, kb: dict | None) -> list[dict]:
    """The key metrics of two kernels (dicts by ncu name) side by side, B's change against A's; a metric
    neither has is left out. `lab compare`'s table, for stored runs and for bare reports alike."""
    rows = []
    for name, label in KEY_METRICS:
        _, va = first_metric(ka, name)
        _, vb = first_metric(kb, name)
        if va is not None or vb is not None:
            rows.append({"metric": name, "label": label, "a": va, "b": vb, "change_pct": _pct_change(va, vb)})
    return rows


def finding_changes(fa: dict[str, str], fb: dict[str, str]) -> dict:
    """Finding classes (class -> title) of A and B: resolved in B, new in B, kept by both."""
    return {"resolved": [{"class": c, "title": t} for c, t in fa.items() if c not in fb],
            "new": [{"class": c, "title": t} for c, t in fb.items() if c not in fa],
            "kept": [{"class": c, "a_title": fa[c], "b_title": fb[c]} for c in fa if c in fb]}


def compare_runs(a: RunData, b: RunData, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> Comparison:
    if threshold_pct < 0:
        raise LabError(f"--threshold must be >= 0 (a percentage), got {threshold_pct}")
    for rd in (a, b):
        if not rd.median_ms:
            raise LabError(f"run {rd.id} has no timing stored: nothing to compare")
    a_tp, b_tp = Throughput.of(a), Throughput.of(b)
    if a.mode != b.mode:
        said = {"fwd": "a forward", "bwd": "a backward", "fwd+bwd": "a forward+backward"}
        note = (f"different modes: A ({a.id}) is {said[a.mode]} ({a.mode}), B ({b.id}) {said[b.mode]} ({b.mode}): "
                f"their times measure different work (FLOPs {rates.MODE_FLOP_FACTOR[a.mode]:g}x and "
                f"{rates.MODE_FLOP_FACTOR[b.mode]:g}x the forward's), their kernels are different passes and their "
                f"SDPA baselines timed other calls, so no speed, metric or finding is compared; each run's numbers "
                f"below are its own mode's")
        verdict = (f"not compared: a {a.mode} run and a {b.mode} run; compare runs of one mode "
                   f"(`lab report` lists each run's mode)")
        return Comparison(a, b, threshold_pct, a_tp, b_tp, None, None, False, verdict, [note], comparable=False)
    warnings = []
    if a.shape_key != b.shape_key or a.problem.dtype != b.problem.dtype:
        warnings.append(f"different problems ({a.problem.label()} vs {b.problem.label()}): times measure different "
                        f"work; the verdict compares TFLOP/s")
    if a.problem.deterministic != b.problem.deterministic:   # same shape, another backward: say which is which
        det, plain = ("A", "B") if a.problem.deterministic else ("B", "A")
        warnings.append(f"{det}'s backward ran its deterministic mode (--deterministic) and {plain}'s the default: "
                        "the difference includes the price of determinism")
    if a.device_name != b.device_name:
        warnings.append(f"different devices ({a.device_name} vs {b.device_name})")
    change = _pct_change(a_tp.tflops, b_tp.tflops)
    overlap = None
    if None not in (a_tp.low, a_tp.high, b_tp.low, b_tp.high):
        overlap = a_tp.low <= b_tp.high and b_tp.low <= a_tp.high
    slower_beyond_threshold = change < -threshold_pct
    regression = slower_beyond_threshold and overlap is not True
    direction = "slower" if change < 0 else "faster"
    noise = {True: "the CI95 intervals overlap (within noise)", False: "the CI95 intervals do not overlap",
             None: "no CI95 stored for one run, so noise is unknown"}[overlap]
    if regression:
        verdict = (f"REGRESSION: {b.id} is {fmt_pct(abs(change))} {direction} than {a.id} in TFLOP/s, beyond the "
                   f"{fmt_pct(threshold_pct)} threshold; {noise}.")
    else:
        why = ("within the threshold" if not slower_beyond_threshold else "within noise") if change < 0 else "not slower"
        verdict = (f"no regression: {b.id} is {fmt_pct(abs(change))} {direction} than {a.id} in TFLOP/s ({why}; "
                   f"{noise}).")

    baselines = []
    b_by_key = {(x.get("backend") or x.get("name"), x.get("dtype")): x for x in b.ok_baselines()}
    for x in a.ok_baselines():
        key = (x.get("backend") or x.get("name"), x.get("dtype"))
        y = b_by_key.get(key)
        if y is None:
            continue
        baselines.append({"name": f"SDPA {key[0]}", "dtype": key[1], "a_ms": x["median_ms"], "b_ms": y["median_ms"],
                          "change_pct": _pct_change(x["median_ms"], y["median_ms"]), "ci95_overlap": ci_overlap(x, y)})
    drifted = [r for r in baselines if r["ci95_overlap"] is False and a.shape_key == b.shape_key]
    if drifted:   # the same SDPA call timed twice: its change is the machine's, to weigh against ours
        ours = _pct_change(a.median_ms, b.median_ms)
        warnings.append("SDPA baselines that moved beyond noise between the runs: "
                        + ", ".join(f"{r['name']} {r['dtype']} {fmt_change(r['change_pct'])}" for r in drifted)
                        + f" in time, against B's own change of {fmt_change(ours)}")

    disagreement = timing_against_kernels(a, b, threshold_pct)
    if disagreement:
        warnings.append(disagreement)

    ka, kb = a.primary_kernel, b.primary_kernel
    metrics = metric_rows(ka, kb)
    findings = {**finding_changes(_finding_classes(a), _finding_classes(b)),
                "kernels": {"a": ka["kernel"] if ka else None, "b": kb["kernel"] if kb else None}}
    return Comparison(a, b, threshold_pct, a_tp, b_tp, change, overlap, regression, verdict, warnings,
                      baselines, metrics, findings)


def kernels_ms(rd: RunData) -> float | None:
    """The profiled call's kernel time: its kernels' Nsight Compute durations, summed (ms); None where a kernel
    has none stored (or nothing was profiled)."""
    durations = [k.get(DURATION) for k in rd.kernels]
    if not durations or not all(isinstance(d, (int, float)) and d > 0 for d in durations):
        return None
    return sum(durations) / 1e6


def timing_against_kernels(a: RunData, b: RunData, threshold_pct: float) -> str | None:
    """A warning where the timed calls and their kernels tell different stories: B's time against A's moves by
    more than the threshold (at least 1%: a threshold of 0 asks for a strict verdict, not for a warning on every
    run) beyond what the kernels' own durations (ncu) move. Then the difference is not in the kernels but around
    them: host dispatch in a call-latency timing (a python rung's Python, torch's dispatch), or kernels the
    profile did not see. None where they agree, or a run has no durations."""
    ka_ms, kb_ms = kernels_ms(a), kernels_ms(b)
    if ka_ms is None or kb_ms is None or not a.median_ms or not b.median_ms:
        return None
    timed, kernels = _pct_change(a.median_ms, b.median_ms), _pct_change(ka_ms, kb_ms)
    if abs(timed - kernels) <= max(threshold_pct, 1.0):
        return None
    method = lambda rd: rd.timing.get("method") or "events"  # noqa: E731
    return (f"the timings and the kernels disagree: B's timed call is {fmt_change(timed)} against A's, its kernels' "
            f"Nsight Compute duration {fmt_change(kernels)} ({fmt_num(ka_ms, 4)} -> {fmt_num(kb_ms, 4)} ms); A's "
            f"timed call ({method(a)}) is {a.median_ms / ka_ms:.2f}x its kernels, B's ({method(b)}) "
            f"{b.median_ms / kb_ms:.2f}x: the difference is around the kernels (host dispatch in a call-latency "
            f"timing, or work the profile did not see), not in them")


def check_threshold(threshold_pct: float) -> float:
    """A regression threshold must be a finite percentage >= 0: NaN would compare false against
    every change and switch the gate off; a negative one would call a faster run a regression."""
    if not isinstance(threshold_pct, (int, float)) or not math.isfinite(threshold_pct) or threshold_pct < 0:
        raise LabError(f"--threshold must be a finite percentage >= 0, got {threshold_pct}",
                       hint=f"e.g. --threshold {DEFAULT_THRESHOLD_PCT:g} (percent of TFLOP/s B may lose)")
    return float(threshold_pct)


def compare_ids(a_id: str, b_id: str, threshold_pct: float = DEFAULT_THRESHOLD_PCT, root=None) -> Comparison:
    threshold_pct = check_threshold(threshold_pct)
    root = open_root(root)
    a, b = find_run(a_id, root), find_run(b_id, root)
    if a.path.resolve() == b.path.resolve():
        raise LabError(f"{a_id!r} and {b_id!r} are the same run ({a.id}): a run compared with itself shows no change",
                       hint="pass two different runs; `lab report` lists them")
    return compare_runs(load(a), load(b), threshold_pct)


def text_lines(c: Comparison) -> list[str]:
    """The terminal summary `lab compare` prints."""
    t = lambda rd, tp: (f"{rd.id}{f' ({rd.name}, not its default)' if rd.candidate else ''}: "  # noqa: E731
                        f"{fmt_num(tp.median_ms, 4)} ms +- {fmt_num(rd.timing.get('std'))}"
                        f" (CI95 {fmt_num(rd.timing.get('ci95_low'), 4)}-{fmt_num(rd.timing.get('ci95_high'), 4)}),"
                        f" {fmt_num(tp.tflops)} TFLOP/s ({rd.mode}), bottleneck {rd.bottleneck or 'n/a'}")
    out = [] if c.comparable else [f"warning: {w}" for w in c.warnings]   # a mode mismatch is said first
    out += [f"A  {t(c.a, c.a_tp)}", f"B  {t(c.b, c.b_tp)}"]
    if c.comparable:
        out += [f"warning: {w}" for w in c.warnings]
    out += metric_and_finding_lines(c.metrics, c.findings)
    out.append(c.verdict)
    return out


def metric_and_finding_lines(metrics: list[dict], findings: dict) -> list[str]:
    """metric_rows' table and finding_changes' resolved and new classes, as the terminal prints them."""
    out = [f"  {m['label']:<38} {fmt_num(m['a']):>14} -> {fmt_num(m['b']):>14}  ({fmt_change(m['change_pct'])})"
           for m in metrics]
    for kind in ("resolved", "new"):
        for f in findings.get(kind, []):
            out.append(f"  finding {kind}: {f['class']}: {f['title']}")
    return out

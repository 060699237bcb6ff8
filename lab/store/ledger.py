"""The ledger: each step of a ladder (an earlier rung -> the next one) with the lab's verdict on the
earlier rung's profile, what the next rung declares it attacks and predicts, and the gain measured on
common work; then the calibration of the lab's advice and estimates over all steps.

A reader of the one store (lab.store.runs, lab.store.sweeps) and the one registry (lab.ladder.registry);
nothing here measures. Its rules, which keep every number it prints true:

* A measured gain is a time ratio of two stored timings of the SAME work: one device (by name), one
  problem (B, H, H_kv, Nq, Nk, D, causal), one mode, one dtype and one timing method; the reference's
  median time over the rung's. Per work the pair comes from one source where one holds both (a sweep's
  cell, a run and the baselines timed beside it), else from the newest timing of each. Over several
  works the gain is the median ratio, with the lowest and highest.
* The one exception is said in the step, never silent: two rungs that share no dtype (v4 is float32
  only, v5 float16/bfloat16 only) are paired across dtypes, work for work otherwise equal; the step then
  carries `across_dtypes` ("float32 -> float16"): the dtype change is part of what that step measured.
* The gain is measured against what the prediction names: "over v2", "against FA2's backward"
  (SDPA's flash backend, in the backward), else the earlier rung; the step says which.
* Where no common work exists: "not measured on a common shape" and the `lab profile` commands that
  would measure it; never a number from other work.

Calibration: (a) how often the bottleneck the lab named on the earlier rung was the one the next step
moved: that class's measure fell on the next rung's profile of the same work (its estimated gain from
the same source, or for a unit at its roof, which the lab gives no gain, the unit's utilization metric)
and the time fell beyond the CI95s; (b) how far the estimates were from the outcomes: each estimate of
the classes the next rung attacks (the lab's model and each Nsight rule, as the stored findings keep
them under `estimates`) as the gain it implies, 1 / (1 - p/100) for p% of the runtime, against the
measured gain (median of measured / estimated per source); (c) the headers' predicted gains against the
measured ones (in range, median of measured / the range's geometric middle). Each figure lists its steps.

Tuning predictions: a step inside a rung is measured with `lab tune`, and its prediction given there
(`--predict 'LABEL=LO-HI'`, recorded before the timing) is stored with the tune (lab.store.tunes). Each is
judged against the ratio that tune measured, as `lab tune` judges it (lab.measure.tune.judge_ratio): the
median of the paired rounds' ratios (each round times the default and the candidate once) with its CI95,
else, where the tune kept no rounds, the ratio of the two medians, said so: inside, above or below the
predicted range, and whether the CI95 reaches past a bound; calibrated like the headers' (inside k of n,
median of measured / the range's geometric middle, the same measured ratio). A prediction whose candidate
was not timed is listed with the reason, never judged.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path


from lab.errors import LabError
from lab.ladder import registry
from lab.measure.tune import ABOVE, BELOW, DEFAULT_LABEL, INSIDE, MEDIANS, judge_ratio
from lab.ladder.registry import Variant
from lab.store import runs as run_store
from lab.store.manifest import candidate_label
from lab.store.runs import Run, scan_runs
from lab.store.sweeps import scan_sweeps
from lab.store.tunes import scan_tunes

# The same protocol under two names: `lab bench` recorded "cuda-events" before sweeps named it "events".
TIMING_NAMES = {"cuda-events": "events"}

# ----------------------------------------------------------------------------- predicted gains

# "1.2-2x", "30-60x", "1.3x", "1.00-1.015x" (no space before the x: "128 x 64" is a tile, not a gain)
_GAIN = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:\s*(?:-|–|to)\s*(\d+(?:\.\d+)?))?x(?![\w])(\s+slower)?")
_REF_AFTER = re.compile(r"^\s*(?:faster\s+)?(?:over|than|vs\.?|versus|against|of)\s+([^,;:.()]{1,48})", re.IGNORECASE)
_REF_BEFORE = re.compile(r"(?:over|than|vs\.?|versus|against)\s+([^,;:.()]{1,48}?),?\s*$", re.IGNORECASE)
# What a prediction may name as its reference, other than a rung: SDPA's backends as the lab times them.
_BASELINE_WORDS = ((re.compile(r"\bFA2\b|FlashAttention-?2|\bflash\b", re.IGNORECASE), "sdpa-flash"),
                   (re.compile(r"cuDNN", re.IGNORECASE), "sdpa-cudnn"),
                   (re.compile(r"\befficient\b", re.IGNORECASE), "sdpa-efficient"))
_BACKWARD_WORDS = re.compile(r"\bbackward\b|\bbwd\b", re.IGNORECASE)


@dataclass
class Predicted:
    text: str                          # the header's "Predicted gain" prose
    gain: list[float] | None = None    # [low, high]: "1.2-2x" -> [1.2, 2.0], "1.3x" -> [1.3, 1.3]
    reference: str | None = None       # what the gain is over: a rung id or a baseline (sdpa-flash)
    reference_text: str | None = None  # the words that named it ("FA2's backward"); None: the earlier rung
    mode: str | None = None            # "bwd" where the reference is a backward

    def to_dict(self) -> dict:
        return {"text": self.text, "gain": self.gain, "reference": self.reference,
                "reference_text": self.reference_text, "mode": self.mode}


def parse_predicted(text: str, earlier: str, known_ids: set[str] | dict[str, str]) -> Predicted:
    """The first gain the prediction states, as [low, high], and what it is over. A prediction with no
    "<n>x" ("baseline", "hundreds of times faster") has no number: gain None, the text kept. A rung id
    it names is looked up in `known_ids` (a mapping gives the reference it stands for: a built-in
    rung's prose means the built-in rung, `builtin:<id>` where a workspace rung shadows it)."""
    known = known_ids if isinstance(known_ids, dict) else {i: i for i in known_ids}
    p = Predicted(text=text or "", reference=earlier)
    m = _GAIN.search(text or "")
    if not m:
        return p
    lo = float(m.group(1))
    hi = float(m.group(2)) if m.group(2) else lo
    lo, hi = min(lo, hi), max(lo, hi)
    if m.group(3):   # "3x slower": a gain of 1/3
        lo, hi = 1.0 / hi, 1.0 / lo
    p.gain = [lo, hi]
    clause_start = max(text.rfind(".", 0, m.start()), text.rfind(";", 0, m.start()), text.rfind(":", 0, m.start())) + 1
    after = _REF_AFTER.match(text[m.end():])
    before = _REF_BEFORE.search(text[clause_start:m.start()])
    words = (after or before).group(1).strip() if (after or before) else None
    if words:
        p.reference_text = words
        rung = next((known[t] for t in re.findall(r"[A-Za-z][A-Za-z0-9_]*", words) if t in known), None)
        base = next((name for rx, name in _BASELINE_WORDS if rx.search(words)), None)
        if rung:
            p.reference = rung
        elif base:
            p.reference = base
        p.mode = "bwd" if _BACKWARD_WORDS.search(words) else None
    return p


# ----------------------------------------------------------------------------- stored timings

@dataclass(frozen=True)
class Work:
    """What a timing timed: equal Works are the same test."""
    device: str
    batch: int
    heads: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    causal: bool
    mode: str
    dtype: str
    timing: str

    def shape(self) -> str:
        n = f"{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"{self.seqlen_q}x{self.seqlen_k}"
        h = f"{self.heads}" if self.heads_kv == self.heads else f"{self.heads}kv{self.heads_kv}"
        return f"B{self.batch}-H{h}-N{n}-D{self.head_dim}{'-causal' if self.causal else ''}"

    def label(self) -> str:
        return f"{self.shape()} {self.dtype} {self.mode} ({self.timing}) on {self.device}"

    def command(self, variant: str, profile: bool = True) -> str:
        """The command that times `variant` on this work (lab profile: also its ncu profile)."""
        shape = f"{self.batch},{self.heads}" + (f":{self.heads_kv}" if self.heads_kv != self.heads else "")
        shape += f",{self.seqlen_q}" + (f",{self.seqlen_k}" if self.seqlen_k != self.seqlen_q else "") + f",{self.head_dim}"
        cmd = f"lab profile --variant {variant} --shape {shape} --dtype {self.dtype}"
        cmd += " --causal" if self.causal else ""
        cmd += f" --mode {self.mode}" if self.mode != "fwd" else ""
        return cmd


@dataclass(frozen=True)
class Timing:
    impl: str            # a rung id, or a baseline's name (sdpa-flash)
    work: Work
    median_ms: float
    ci95: tuple[float, float] | None
    source: str          # the run's or sweep's id
    kind: str            # "run" or "sweep"
    created: str


def _int(x, default=None):
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def _work(device: str, p: dict, mode: str | None, dtype: str | None, timing: str | None) -> Work | None:
    try:
        heads = int(p["heads"])
        return Work(device=device, batch=int(p["batch"]), heads=heads, heads_kv=_int(p.get("heads_kv"), heads) or heads,
                    seqlen_q=int(p["seqlen_q"]), seqlen_k=int(p.get("seqlen_k") or p["seqlen_q"]),
                    head_dim=int(p["head_dim"]), causal=bool(p.get("causal")), mode=mode or "fwd",
                    dtype=str(dtype or p.get("dtype")), timing=TIMING_NAMES.get(timing or "", timing or "events"))
    except (KeyError, TypeError, ValueError):
        return None


def _ok_ms(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) and x > 0 else None


def run_impl(manifest: dict) -> str | None:
    """The rung a run timed, as the registry names it here: `builtin:<id>` for a built-in rung that the
    active workspace shadows with a rung of its own id (registry.ref), else its id. None for a tuning
    candidate's run (lab profile --candidate): it timed one of the rung's candidates, not the rung, so its
    time and findings are never a step's (the baselines timed beside it still are)."""
    if candidate_label(manifest) is not None:
        return None
    v = manifest.get("variant") or {}
    vid = v.get("id")
    if vid and v.get("origin") == "built-in" and any(w.id == vid and w.origin == "workspace" for w in registry.variants()):
        return registry.BUILTIN_PREFIX + vid
    return vid


def run_work(manifest: dict) -> Work | None:
    """The work a run timed: its device, problem, mode, dtype and timing method (None where not stored)."""
    problem = manifest.get("problem") or {}
    return _work((manifest.get("device") or {}).get("name") or "unknown device", problem, manifest.get("mode"),
                 problem.get("dtype"), (manifest.get("timing") or {}).get("method"))


def run_timings(run: Run) -> list[Timing]:
    """The rung's own timing of a run and the baselines timed beside it (same device, problem, mode)."""
    m = run.manifest
    device = (m.get("device") or {}).get("name") or "unknown device"
    problem = m.get("problem") or {}
    timing = m.get("timing") or {}
    mode = m.get("mode")
    created = m.get("created_utc") or ""
    out = []
    w = run_work(m)
    med = _ok_ms(timing.get("median"))
    vid = run_impl(m)
    if w and med and vid:
        ci = (timing.get("ci95_low"), timing.get("ci95_high"))
        out.append(Timing(vid, w, med, ci if all(_ok_ms(c) for c in ci) else None, run.id, "run", created))
    for b in m.get("baselines") or []:
        bmed = _ok_ms(b.get("median_ms"))
        if b.get("status") != "ok" or not bmed or not b.get("name"):
            continue
        bw = _work(device, problem, mode, b.get("dtype"), timing.get("method"))
        if bw:
            ci = (b.get("ci95_low"), b.get("ci95_high"))
            out.append(Timing(str(b["name"]), bw, bmed, ci if all(_ok_ms(c) for c in ci) else None, run.id, "run", created))
    return out


def sweep_timings(sweep) -> list[Timing]:
    m = sweep.manifest
    dev = m.get("device")
    device = (dev.get("name") if isinstance(dev, dict) else None) or "unknown device"
    out = []
    for r in sweep.rows():
        med = _ok_ms(r.get("median_ms"))
        if r.get("status") != "ok" or not med:
            continue
        w = _work(device, r, r.get("mode"), r.get("dtype"), r.get("timing"))
        if w:
            ci = (r.get("ci95_low_ms"), r.get("ci95_high_ms"))
            out.append(Timing(str(r["impl"]), w, med, ci if all(_ok_ms(c) for c in ci) else None, sweep.id, "sweep",
                              m.get("created_utc") or ""))
    return out


# ----------------------------------------------------------------------------- findings of a run

def principal_kernel(run: Run) -> int | None:
    """The kernel with the largest share of the profiled time (its verdict is the run's: Run.main_kernel,
    which `lab new`'s evidence reads too); the first kernel where durations are not stored."""
    index, _ = run.main_kernel()
    return 0 if index is None else index


def run_findings(run: Run) -> list[dict] | None:
    """The principal kernel's findings, most important first, with evidence and estimates parsed;
    None where the run has no findings table (timed, not profiled)."""
    try:
        t = run.table("findings")
    except (OSError, ValueError) as e:
        raise LabError(f"run {run.id}: its findings table cannot be read ({e})") from None
    if t is None or not len(t):
        return None
    if "class" not in t.columns:
        raise LabError(f"run {run.id}: its findings table has no class column")
    if "kernel_index" in t.columns:
        k = principal_kernel(run)
        if (t["kernel_index"] == k).any():
            t = t[t["kernel_index"] == k]
    if "rank" in t.columns:
        t = t.sort_values("rank")
    out = []
    for _, f in t.iterrows():
        out.append({"class": str(f["class"]), "title": str(f.get("title") or ""), "kernel": str(f.get("kernel") or ""),
                    "est_speedup_pct": _num(f.get("est_speedup_pct")), "source": str(f.get("source") or ""),
                    "evidence": _json(f.get("evidence"), {}), "estimates": _json(f.get("estimates"), [])})
    return out


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _json(x, default):
    if not isinstance(x, str):
        return default
    try:
        return json.loads(x)
    except json.JSONDecodeError:
        return default


def implied_gain(pct: float | None) -> float | None:
    """The speedup that removing p% of the runtime gives: 1 / (1 - p/100)."""
    return 1.0 / (1.0 - pct / 100.0) if pct is not None and 0 <= pct < 100 else None


def class_estimates(findings: list[dict], cls: str) -> list[dict]:
    """Every estimate of class `cls` on a run (the lab's model and each Nsight rule), with the gain it implies."""
    f = next((f for f in findings if f["class"] == cls), None)
    if f is None:
        return []
    ests = f["estimates"] or [{"source": f["source"], "est_speedup_pct": f["est_speedup_pct"]}]
    return [{"class": cls, "source": str(e.get("source")), "type": e.get("type"),
             "est_speedup_pct": _num(e.get("est_speedup_pct")), "implied_gain": implied_gain(_num(e.get("est_speedup_pct")))}
            for e in ests]


def _metric(run: Run, name: str, kernel: int | None) -> float | None:
    try:
        cols = run.columns("metrics", ["kernel_index", name])
    except (OSError, ValueError):
        return None
    if cols is None:
        return None
    values = [v for k, v in zip(cols["kernel_index"], cols[name]) if kernel is None or k == kernel]
    return _num(values[0]) if values else None


# ----------------------------------------------------------------------------- the predicted gain stub

def estimate_stub(run: Run, cls: str | None, source_id: str) -> str | None:
    """The "Predicted gain" `lab new` writes: the lab's estimate for the bottleneck the new rung copies
    (`cls` on the source rung's run), as a gain a later measurement can be held against; None where the
    run has no findings."""
    findings = run_findings(run) if cls else None
    if not findings:
        return None
    ests = class_estimates(findings, cls)
    where = f"{cls} on {source_id}'s run {run.id}"
    lab = next((e for e in ests if e["source"] == "lab" and e["implied_gain"]), None)
    nsight = sorted((e for e in ests if e["source"].startswith("ncu-rule") and e["implied_gain"]),
                    key=lambda e: -e["est_speedup_pct"])
    rules = "; ".join(f"Nsight {e['source'][9:]}: {e['est_speedup_pct']:.3g}% ({e['implied_gain']:.3g}x, {e['type']})"
                      for e in nsight)
    if lab:
        text = (f"{lab['implied_gain']:.3g}x over {source_id} if the {cls} share of the time goes (the lab's estimate "
                f"for {where}: {lab['est_speedup_pct']:.3g}% of the runtime)")
        return text + (f"; {rules}" if rules else "") + ". Edit it before the first timing."
    if nsight:
        e = nsight[0]
        text = (f"{e['implied_gain']:.3g}x over {source_id} (Nsight {e['source'][9:]}'s estimate for {where}: "
                f"{e['est_speedup_pct']:.3g}%, {e['type']}; the lab's model gives none)")
        return text + ". Edit it before the first timing."
    return (f"(no estimate: the lab gives {where} no gain, a unit at its roof; write yours before the first timing)")


# ----------------------------------------------------------------------------- steps

@dataclass
class Step:
    earlier: Variant
    later: Variant
    origin: str
    predicted: Predicted
    named: dict | None = None            # the lab's verdict on the earlier rung's profile
    named_absent: str | None = None
    measured: dict | None = None
    not_measured: dict | None = None
    moved: dict | None = None            # calibration (a) for this step
    estimates: list[dict] = field(default_factory=list)  # calibration (b): estimates of the attacked classes

    @property
    def key(self) -> str:
        return f"{self.earlier.id} -> {self.later.id}"

    @property
    def earlier_ref(self) -> str:   # as stored timings name it (builtin:<id> where a workspace rung shadows it)
        return registry.ref(self.earlier)

    @property
    def later_ref(self) -> str:
        return registry.ref(self.later)

    def to_dict(self) -> dict:
        named_cls = (self.named or {}).get("class")
        return {"step": self.key, "from": self.earlier.id, "to": self.later.id, "origin": self.origin,
                "named": self.named, "named_absent": self.named_absent,
                "attacks": list(self.later.classes), "attacks_named": bool(named_cls and named_cls in self.later.classes),
                "attacks_text": self.later.attacks, "predicted": self.predicted.to_dict(), "measured": self.measured,
                "not_measured": self.not_measured, "header_measured": self.later.measured, "moved": self.moved,
                "estimates_vs_measured": self.estimates}


def ladder_steps() -> list[tuple[Variant, Variant, str]]:
    """The built-in ladder in rung order (v1 -> v2 -> ...), then each workspace rung after the rung its
    header says it changed ("What changed since <id>", as `lab new` writes it); a workspace rung that
    names none opens the workspace's ladder and is no step."""
    built = list(registry.builtin())
    steps = [(a, b, "built-in") for a, b in zip(built, built[1:])]
    for v in registry.variants():
        if v.origin != "workspace" or not v.follows or v.follows == v.id:
            continue
        try:
            earlier = registry.get(v.follows)
        except LabError:
            continue
        steps.append((earlier, v, "workspace"))
    return steps


def _ratio_ci(ref: Timing, new: Timing) -> list[float] | None:
    if ref.ci95 and new.ci95:
        return [ref.ci95[0] / new.ci95[1], ref.ci95[1] / new.ci95[0]]
    return None


def _pair_dict(ref: Timing, new: Timing) -> dict:
    same = ref.source == new.source
    return {"work": new.work.label(), "shape": new.work.shape(), "mode": new.work.mode, "timing": new.work.timing,
            "device": new.work.device, "dtype": ref.work.dtype if ref.work.dtype == new.work.dtype else f"{ref.work.dtype} -> {new.work.dtype}",
            "reference_ms": ref.median_ms, "ms": new.median_ms, "gain": ref.median_ms / new.median_ms,
            "gain_ci95": _ratio_ci(ref, new), "sources": [ref.source] if same else [ref.source, new.source],
            "side_by_side": same}


def _latest(ts: list[Timing]) -> Timing:
    return max(ts, key=lambda t: (t.created, t.source))


def pair_timings(ref_id: str, new_id: str, timings: list[Timing], mode: str | None, across: bool) -> list[tuple[Timing, Timing]]:
    """One (reference, new) pair per common work: from one source where one holds both, else the newest
    of each. `across`: works equal but for the dtype (rungs that share none). Where a work was timed by
    both methods, events (call latency, as every run is timed) is kept."""
    def key(w: Work):
        return (w.device, w.batch, w.heads, w.heads_kv, w.seqlen_q, w.seqlen_k, w.head_dim, w.causal, w.mode,
                None if across else w.dtype, w.timing)

    refs: dict[tuple, list[Timing]] = {}
    news: dict[tuple, list[Timing]] = {}
    for t in timings:
        if mode and t.work.mode != mode:
            continue
        if t.impl == ref_id:
            refs.setdefault(key(t.work), []).append(t)
        elif t.impl == new_id:
            news.setdefault(key(t.work), []).append(t)
    pairs: dict[tuple, tuple[Timing, Timing]] = {}
    for k in sorted(set(refs) & set(news), key=str):
        r_all, n_all = refs[k], news[k]
        shared = sorted({t.source for t in r_all} & {t.source for t in n_all})
        if shared:
            src = max(shared, key=lambda s: max(t.created for t in n_all if t.source == s))
            pair = (_latest([t for t in r_all if t.source == src]), _latest([t for t in n_all if t.source == src]))
        else:
            pair = (_latest(r_all), _latest(n_all))
        if across and pair[0].work.dtype == pair[1].work.dtype:
            continue
        untimed = k[:-1]
        if untimed in pairs and pairs[untimed][1].work.timing == "events":
            continue
        pairs[untimed] = pair
    return list(pairs.values())


def summarize(pairs: list[tuple[Timing, Timing]]) -> list[dict]:
    """The measured gain per device: median of the per-work ratios, lowest and highest, the works."""
    by_device: dict[str, list] = {}
    for r, n in pairs:
        by_device.setdefault(n.work.device, []).append((r, n))
    out = []
    for device, ps in by_device.items():
        gains = [r.median_ms / n.median_ms for r, n in ps]
        entry = {"device": device, "gain": statistics.median(gains), "range": [min(gains), max(gains)],
                 "works": len(ps), "pairs": [_pair_dict(r, n) for r, n in ps]}
        if len(ps) == 1:
            entry["gain_ci95"] = entry["pairs"][0]["gain_ci95"]
        out.append(entry)
    out.sort(key=lambda e: -e["works"])
    return out


def _shares_dtype(a: Variant, b: Variant) -> bool:
    return bool(set(a.dtypes) & set(b.dtypes))


def _command_for(step: Step, ref_id: str, mode: str | None, timings: list[Timing]) -> list[str]:
    """What would measure the step: the later rung on the work the reference was timed on (a dtype it
    takes), else both rungs on the default problem."""
    later, ref_is_rung = step.later, ref_id in registry.all_ids() or ref_id == step.earlier_ref
    ref_t = [t for t in timings if t.impl == ref_id and (not mode or t.work.mode == mode)]
    later_ref = step.later_ref
    for t in sorted(ref_t, key=lambda t: (t.created, t.source), reverse=True):
        dtype = t.work.dtype if t.work.dtype in later.dtypes else None
        if dtype is None and ref_is_rung and not _shares_dtype(step.earlier, later):
            dtype = later.default_dtype
        if dtype is None or t.work.head_dim not in later.head_dims:
            continue
        w = Work(**{**t.work.__dict__, "dtype": dtype})
        return [w.command(later_ref)]
    # neither side has a usable timing: both rungs, each in a dtype both take (or its own, across dtypes)
    common = [d for d in later.dtypes if d in step.earlier.dtypes]
    mode_flag = f" --mode {mode}" if mode and mode != "fwd" else ""
    if not ref_is_rung:
        return [f"lab profile --variant {later_ref} --dtype {later.default_dtype}{mode_flag}"]
    earlier_ref = step.earlier_ref
    return [f"lab profile --variant {earlier_ref} --dtype {common[0] if common else step.earlier.default_dtype}{mode_flag}",
            f"lab profile --variant {later_ref} --dtype {common[0] if common else later.default_dtype}{mode_flag}"]


def _measure(step: Step, timings: list[Timing]) -> None:
    ref = step.predicted.reference or step.earlier_ref
    mode = step.predicted.mode
    ref_rung = step.earlier if ref == step.earlier_ref else next((v for v in registry.variants() if v.id == ref), None)
    across = ref_rung is not None and not _shares_dtype(ref_rung, step.later)
    pairs = pair_timings(ref, step.later_ref, timings, mode, across)
    what = {"reference": ref, "reference_is": "rung" if ref_rung is not None else "baseline",
            "mode": mode, "across_dtypes": None}
    if across:
        changes = sorted({f"{r.work.dtype} -> {n.work.dtype}" for r, n in pairs}) or [
            f"{'/'.join(ref_rung.dtypes)} -> {'/'.join(step.later.dtypes)}"]
        what["across_dtypes"] = (f"{', '.join(changes)}: {ref} and {step.later.id} share no dtype, so this gain "
                                 f"includes the change of input type")
    if pairs:
        per_device = summarize(pairs)
        step.measured = {**what, **per_device[0], "other_devices": per_device[1:]}
    else:
        reason = (f"not measured on a common shape: no stored run or sweep times {ref} and {step.later.id} on the same "
                  f"device, problem, mode{'' if across else ' and dtype'}")
        step.not_measured = {**what, "reason": reason, "commands": _command_for(step, ref, mode, timings)}


def _named(run: Run, findings: list[dict]) -> dict:
    top = findings[0]
    m = run.manifest
    return {"run": run.id, "device": (m.get("device") or {}).get("name"), "problem": (m.get("problem") or {}).get("label"),
            "mode": m.get("mode") or "fwd", "kernel": top["kernel"], "class": top["class"], "title": top["title"],
            "evidence": top["evidence"], "est_speedup_pct": top["est_speedup_pct"], "ranked_by": top["source"],
            "estimates": class_estimates(findings, top["class"])}


def _profiled(runs: list[Run], vid: str, damaged: dict[str, str], read: dict) -> list[tuple[Run, list[dict]]]:
    """The runs of rung `vid` with findings, oldest first; a run whose findings cannot be read is left
    out and noted in `damaged` (run id -> reason), never fatal to the ledger. `read` keeps what was read
    (a run's findings are read once per ledger)."""
    out = []
    for r in runs:
        if run_impl(r.manifest) != vid:
            continue
        if r.path not in read:
            try:
                read[r.path] = run_findings(r)
            except LabError as e:
                damaged[r.id] = str(e)
                read[r.path] = None
        if read[r.path]:
            out.append((r, read[r.path]))
    return sorted(out, key=lambda x: (x[0].manifest.get("created_utc") or "", x[0].id))


def _same_work(a: Run, b: Run, across: bool) -> bool:
    ta, tb = run_timings(a), run_timings(b)
    if not ta or not tb:
        return False
    wa, wb = ta[0].work, tb[0].work
    if across:
        wa, wb = Work(**{**wa.__dict__, "dtype": ""}), Work(**{**wb.__dict__, "dtype": ""})
    return wa == wb


def _class_measure(findings: list[dict], named: dict, run: Run) -> tuple[float | None, str]:
    """The named class's measure on a run: its estimate from the source that ranked it on the earlier
    rung (0 where that source no longer finds it), or for a unit at its roof (no estimate) the unit's
    utilization metric, by name."""
    cls, src = named["class"], named["ranked_by"]
    if named["est_speedup_pct"] is not None:
        f = next((f for f in findings if f["class"] == cls), None)
        if f is None:
            return 0.0, f"{src} estimate for {cls} (% of runtime; absent: 0)"
        est = next((_num(e.get("est_speedup_pct")) for e in f["estimates"] if e.get("source") == src), None)
        if est is None and f["source"] == src:
            est = f["est_speedup_pct"]
        return (est if est is not None else 0.0), f"{src} estimate for {cls} (% of runtime; absent: 0)"
    metric = next(iter(named["evidence"] or {}), None)
    if metric is None:
        return None, "no metric"
    return _metric(run, metric, principal_kernel(run)), metric


def _moved(step: Step, runs: list[Run], prof_earlier: list, timings: list[Timing], damaged: dict[str, str],
           read: dict) -> None:
    later = _profiled(runs, step.later_ref, damaged, read)
    across = not _shares_dtype(step.earlier, step.later)
    for (er, ef) in reversed(prof_earlier):
        match = [(lr, lf) for lr, lf in later if _same_work(er, lr, across)]
        if not match:
            continue
        lr, lf = match[-1]
        named = _named(er, ef)
        before, metric = _class_measure(ef, named, er)
        after, _ = _class_measure(lf, named, lr)
        te, tl = run_timings(er)[0], run_timings(lr)[0]
        gain_ci = _ratio_ci(te, tl)
        time_fell = gain_ci[0] > 1.0 if gain_ci else te.median_ms > tl.median_ms
        fell = before is not None and after is not None and after < before
        step.moved = {"class": named["class"], "measure": metric, "before": before, "after": after, "fell": fell,
                      "time_fell": time_fell, "gain": te.median_ms / tl.median_ms, "gain_ci95": gain_ci,
                      "runs": [er.id, lr.id], "work": tl.work.label(), "across_dtypes": across,
                      "moved": bool(fell and time_fell), "judged": before is not None and after is not None}
        return
    cmd = _command_for(step, step.earlier_ref, None, [t for t in timings if t.kind == "run" and t.source in
                                                     {r.id for r, _ in prof_earlier}])
    step.moved = {"judged": False, "reason": f"no profiled run of {step.later.id} on the work of a profiled run of "
                                             f"{step.earlier.id}", "commands": cmd}


def _estimates(step: Step, findings: list[dict] | None) -> None:
    """Calibration (b) for this step: per source, the largest estimate among the classes the later rung
    attacks, against the measured gain."""
    if not findings or not step.measured:
        return
    per_source: dict[str, dict] = {}
    for cls in step.later.classes:
        for e in class_estimates(findings, cls):
            if e["implied_gain"] is None:
                continue
            best = per_source.get(e["source"])
            if best is None or e["implied_gain"] > best["implied_gain"]:
                per_source[e["source"]] = e
    g = step.measured["gain"]
    step.estimates = [{**e, "measured": g, "measured_over_estimated": g / e["implied_gain"]}
                      for e in sorted(per_source.values(), key=lambda e: e["source"])]


# ----------------------------------------------------------------------------- tuning predictions

def tune_predictions(tunes: list) -> list[dict]:
    """Every stored tune's predictions, oldest tune first, each with its measured ratio, its CI95 and
    verdict (as lab.measure.tune.judge_ratio judges: the stored verdict and measured ratio are re-derived
    from the stored row, never trusted), or why none."""
    out = []
    for t in tunes:
        m = t.manifest
        rows = {r.get("label"): r for r in m.get("rows") or [] if isinstance(r, dict)}
        device = m.get("device") if isinstance(m.get("device"), dict) else {}
        git = m.get("git") if isinstance(m.get("git"), dict) else {}
        default = rows.get(DEFAULT_LABEL) or {}
        problem = m.get("problem") or {}
        for p in m.get("predictions") or []:
            if not isinstance(p, dict):
                continue
            lo, hi = _num(p.get("low")), _num(p.get("high"))
            if lo is None or hi is None or not 0 < lo <= hi:
                continue
            row = rows.get(p.get("label"))
            # judged again from the row's stored ratios as `lab tune` judges (the stored "measured" of a
            # tune before judge_ratio is the ratio of medians even where the paired rounds were kept)
            j = judge_ratio(lo, hi, (row or {}).get("vs_default"))
            entry = {"tune": t.id, "created": m.get("created_utc"), "variant": (m.get("variant") or {}).get("id"),
                     "problem": problem.get("label"), "mode": m.get("mode") or "fwd",
                     "device": device.get("name"), "commit": git.get("commit"),
                     "candidate": p.get("label"), "given": p.get("given"), "predicted": [lo, hi],
                     **j, "medians_ci95": None, "not_measured": None,
                     # timed under load (lab.measure.timed, UNDER LOAD): each repetition behind that many ms
                     "under_load_ms": _num(((default.get("timing") or {}).get("checks") or {}).get("under_load_ms")),
                     # `lab tune --timing`: events (call latency; every tune before the option) or graph (device time)
                     "timing": (default.get("timing") or {}).get("timing") or "events"}
            if j["estimator"] == MEDIANS:   # no paired rounds kept: the two medians' own CI95s
                ct, dt = (row or {}).get("timing") or {}, default.get("timing") or {}
                entry["medians_ci95"] = {"default": [dt.get("ci95_low"), dt.get("ci95_high")],
                                         "candidate": [ct.get("ci95_low"), ct.get("ci95_high")]}
            if j["verdict"] is None:
                entry["not_measured"] = (p.get("not_measured") or (row or {}).get("error") or (row or {}).get("refused")
                                         or "its candidate was not timed against the default")
            out.append(entry)
    return out


def calibrate_tunes(entries: list[dict]) -> dict:
    judged = [e for e in entries if e["verdict"]]
    return {"inside": sum(1 for e in judged if e["verdict"] == INSIDE),
            "above": sum(1 for e in judged if e["verdict"] == ABOVE),
            "below": sum(1 for e in judged if e["verdict"] == BELOW), "of": len(judged),
            "not_measured": len(entries) - len(judged),
            # verdicts whose CI95 reaches past a bound of the range (its ends judged otherwise than it)
            "ci95_across_bound": sum(1 for e in judged if any(w != e["verdict"] for w in e.get("ci95_where") or [])),
            "median_measured_over_predicted": statistics.median([e["measured"] / _geo(*e["predicted"]) for e in judged])
            if judged else None}


@dataclass
class Ledger:
    steps: list[Step]
    calibration: dict
    stores: list[str]
    damaged: dict[str, str] = field(default_factory=dict)   # run (or tune) id -> why it was left out
    tune_predictions: list[dict] = field(default_factory=list)   # tune_predictions()
    tune_calibration: dict = field(default_factory=lambda: calibrate_tunes([]))

    def to_dict(self) -> dict:
        return {"stores": self.stores, "steps": [s.to_dict() for s in self.steps], "calibration": self.calibration,
                "damaged": self.damaged, "tune_predictions": self.tune_predictions,
                "tune_calibration": self.tune_calibration}

    def step_into(self, variant_id: str) -> Step | None:
        return next((s for s in self.steps if s.later.id == variant_id), None)


def _roots(root: Path | None) -> list[Path]:
    """The store a reading command reads; unnamed (no --profiles, no LAB_PROFILES), the lab checkout's
    shipped examples too, as `lab new` reads them for a built-in rung's evidence."""
    first = run_store.open_root(root)
    roots = [first]
    named = root is not None or bool(os.environ.get("LAB_PROFILES"))
    shipped = run_store.shipped_root()
    if not named and shipped is not None and shipped.resolve() != first.resolve():
        roots.append(shipped)
    return roots


def build(root: Path | None = None) -> Ledger:
    roots = _roots(root)
    runs: dict[Path, Run] = {}
    sweeps: dict[Path, object] = {}
    tunes: dict[Path, object] = {}
    damaged_tunes: dict[str, str] = {}
    for r in roots:
        for run in scan_runs(r)[0]:
            runs[run.path.resolve()] = run
        for sw in scan_sweeps(r)[0]:
            sweeps[sw.path.resolve()] = sw
        found, broken = scan_tunes(r)
        for tu in found:
            tunes[tu.path.resolve()] = tu
        for b in broken:   # listed with the runs left out, never fatal to the ledger
            damaged_tunes[b.id] = b.reason
    all_runs = sorted(runs.values(), key=lambda r: (r.manifest.get("created_utc") or "", r.id))
    timings = [t for r in all_runs for t in run_timings(r)] + [t for s in sweeps.values() for t in sweep_timings(s)]
    # a rung id in a header's prose: the built-in ladder's own for a built-in rung, the registry's otherwise
    names = {"built-in": {v.id: registry.ref(v) for v in registry.builtin()},
             "workspace": {v.id: registry.ref(v) for v in registry.variants()}}
    damaged: dict[str, str] = dict(damaged_tunes)
    read: dict = {}
    steps = []
    for earlier, later, origin in ladder_steps():
        eref = registry.ref(earlier)
        step = Step(earlier, later, origin, parse_predicted(later.predicted_gain, eref, {**names[origin], eref: eref}))
        prof = _profiled(all_runs, eref, damaged, read)
        if prof:
            step.named = _named(*prof[-1])
        else:
            step.named_absent = (f"no profiled run of {earlier.id} in the store: "
                                 f"`lab profile --variant {eref}` names its bottleneck")
        _measure(step, timings)
        if step.predicted.reference == eref:
            _moved(step, all_runs, prof, timings, damaged, read)
        else:
            step.moved = {"judged": False, "reason": f"the prediction is over {step.predicted.reference}, not over "
                                                     f"{earlier.id}: the step is not a fix of {earlier.id}'s bottleneck"}
        # the earlier run whose verdict the moved-check used, else the latest
        used = next((f for r, f in prof if step.moved and r.id in (step.moved.get("runs") or [])), prof[-1][1] if prof else None)
        _estimates(step, used)
        steps.append(step)
    tuned = tune_predictions(sorted(tunes.values(), key=lambda t: (t.manifest.get("created_utc") or "", t.id)))
    return Ledger(steps, calibrate(steps), [str(r) for r in roots], damaged, tuned, calibrate_tunes(tuned))


def _geo(lo: float, hi: float) -> float:
    return math.sqrt(lo * hi)


def calibrate(steps: list[Step]) -> dict:
    judged = [s for s in steps if s.moved and s.moved.get("judged")]
    moved = {"moved": sum(1 for s in judged if s.moved["moved"]), "of": len(judged),
             "steps": [{"step": s.key, "class": s.moved["class"], "measure": s.moved["measure"],
                        "before": s.moved["before"], "after": s.moved["after"], "time_fell": s.moved["time_fell"],
                        "moved": s.moved["moved"], "attacked": s.moved["class"] in s.later.classes} for s in judged],
             "not_judged": [{"step": s.key, "reason": (s.moved or {}).get("reason", "")} for s in steps if s not in judged]}
    both = [s for s in steps if s.predicted.gain and s.measured]
    preds = {"in_range": sum(1 for s in both if s.predicted.gain[0] <= s.measured["gain"] <= s.predicted.gain[1]),
             "of": len(both),
             "median_measured_over_predicted": statistics.median([s.measured["gain"] / _geo(*s.predicted.gain) for s in both])
             if both else None,
             "steps": [{"step": s.key, "predicted": s.predicted.gain, "measured": s.measured["gain"],
                        "measured_over_predicted": s.measured["gain"] / _geo(*s.predicted.gain),
                        "across_dtypes": bool(s.measured.get("across_dtypes"))} for s in both]}
    sources: dict[str, list] = {}
    for s in steps:
        for e in s.estimates:
            sources.setdefault(e["source"], []).append({"step": s.key, "class": e["class"], "type": e["type"],
                                                        "est_speedup_pct": e["est_speedup_pct"],
                                                        "implied_gain": e["implied_gain"], "measured": e["measured"],
                                                        "measured_over_estimated": e["measured_over_estimated"]})
    est = {src: {"median_measured_over_estimated": statistics.median(x["measured_over_estimated"] for x in xs),
                 "steps": xs} for src, xs in sorted(sources.items(), key=lambda kv: (kv[0] != "lab", kv[0]))}
    all_ratios = [x["measured_over_estimated"] for xs in sources.values() for x in xs]
    return {"bottleneck_moved": moved, "predictions": preds, "estimates": est,
            "estimates_median_measured_over_estimated": statistics.median(all_ratios) if all_ratios else None}

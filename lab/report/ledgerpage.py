"""The ledger in words: `lab ledger`'s text, the "Ledger" page of `lab report` (with its chart) and the
one-line ledger row of a run page. Every sentence is built from lab.store.ledger's record; where it
holds no number, the words say so and name the command that would measure it."""

from __future__ import annotations

from lab.measure.tune import MEDIANS, PAIRED
from lab.report import charts
from lab.report.formatting import fmt_times
from lab.store.ledger import Ledger, Step


def gain_range(g: list[float] | None) -> str:
    if not g:
        return "n/a"
    lo, hi = g
    return fmt_times(lo) if lo == hi else f"{charts.fmt_si(lo)}-{fmt_times(hi)}"


def predicted_phrase(s: Step) -> str:
    p = s.predicted
    if not p.gain:
        return f"no number stated ({p.text or 'no Predicted gain section'})" if p.text else "none written"
    over = p.reference + (" in the backward" if p.mode == "bwd" else "")
    return f"{gain_range(p.gain)} over {over}"


def measured_phrase(s: Step) -> str:
    m = s.measured
    if not m:
        return f"{s.not_measured['reason']}; to measure: " + " && ".join(s.not_measured["commands"])
    over = m["reference"] + (f" ({m['mode']})" if m.get("mode") else "")
    works = m["works"]
    spread = (f", {gain_range(m['range'])} over the {works} works" if works > 1
              else (f", CI95 {gain_range(m['gain_ci95'])}" if m.get("gain_ci95") else ""))
    where = m["pairs"][0]["work"] if works == 1 else f"{works} common works on {m['device']}"
    text = f"{fmt_times(m['gain'])} over {over} (median{spread}; {where})"
    if m.get("across_dtypes"):
        text += f"; ACROSS DTYPES: {m['across_dtypes']}"
    if m.get("other_devices"):
        text += "; also " + ", ".join(f"{fmt_times(o['gain'])} on {o['device']} ({o['works']} works)" for o in m["other_devices"])
    return text


def named_phrase(s: Step) -> str:
    n = s.named
    if not n:
        return s.named_absent or "n/a"
    ests = ", ".join(f"{e['source']} {e['est_speedup_pct']:.3g}% ({fmt_times(e['implied_gain'])})" for e in n["estimates"]
                     if e["est_speedup_pct"] is not None)
    return (f"{n['class']} (run {n['run']}, {n['device']}, {n['problem']} {n['mode']}): {n['title']}"
            + (f"; estimates: {ests}" if ests else "; no estimated gain (a unit at its roof)"))


def moved_phrase(s: Step) -> str:
    m = s.moved or {}
    if not m.get("judged"):
        cmds = m.get("commands")
        return f"not judged: {m.get('reason', 'n/a')}" + (f"; to judge: {' && '.join(cmds)}" if cmds else "")
    fell = "fell" if m["fell"] else "did not fall"
    time = "the time fell" if m["time_fell"] else "the time did not fall beyond the CI95s"
    verdict = "moved" if m["moved"] else "not moved"
    return (f"{m['class']}: {m['measure']} {charts.fmt_si(m['before'])} -> {charts.fmt_si(m['after'])} ({fell}), "
            f"{time}: {verdict}" + (" (across dtypes)" if m.get("across_dtypes") else ""))


def text_lines(ledger: Ledger) -> list[str]:
    out = []
    for s in ledger.steps:
        attacked = s.named and s.named["class"] in s.later.classes
        out += [f"{s.key} ({s.origin})",
                f"  named on {s.earlier.id}:  {named_phrase(s)}",
                f"  {s.later.id} attacks:      {', '.join(s.later.classes) or 'none'}"
                + ("" if not s.named else " (the class named)" if attacked else " (not the class named)"),
                f"  predicted:       {predicted_phrase(s)}",
                f"  measured:        {measured_phrase(s)}",
                f"  bottleneck:      {moved_phrase(s)}"]
        for e in s.estimates:
            out.append(f"  estimate {e['source']} ({e['class']}): {fmt_times(e['implied_gain'])}, "
                       f"measured / estimated {fmt_times(e['measured_over_estimated'])}")
        out.append("")
    out += tune_lines(ledger)
    out.append("")
    out += calibration_lines(ledger.calibration)
    out.append(tune_calibration_line(ledger.tune_calibration))
    for run_id, why in ledger.damaged.items():
        out.append(f"left out (damaged): {run_id}: {why}")
    return out


def calibration_lines(c: dict) -> list[str]:
    mv, pr = c["bottleneck_moved"], c["predictions"]
    yes = [x["step"] for x in mv["steps"] if x["moved"]]
    no = [x["step"] for x in mv["steps"] if not x["moved"]]
    out = ["Calibration",
           f"  named bottleneck moved by the next step: {mv['moved']} of {mv['of']} judged steps"
           + (f" ({', '.join(yes)})" if yes else "") + (f"; not moved: {', '.join(no)}" if no else "")]
    for x in mv["not_judged"]:
        out.append(f"    not judged: {x['step']}: {x['reason']}")
    inside = [x["step"] for x in pr["steps"] if x["predicted"][0] <= x["measured"] <= x["predicted"][1]]
    out.append(f"  header predictions: measured inside the predicted range in {pr['in_range']} of {pr['of']} steps"
               + (f" ({', '.join(inside)})" if inside else "")
               + (f"; median measured / predicted (range's geometric middle) {fmt_times(pr['median_measured_over_predicted'])}"
                  if pr["median_measured_over_predicted"] is not None else ""))
    for x in pr["steps"]:
        out.append(f"    {x['step']}: predicted {gain_range(x['predicted'])}, measured {fmt_times(x['measured'])}"
                   + (" (across dtypes)" if x["across_dtypes"] else ""))
    if not c["estimates"]:
        out.append("  estimates: no step has both an estimate of the class it attacks and a measured gain")
    else:
        out.append("  estimates of the attacked classes, measured / estimated gain (median per source):")
        for src, e in c["estimates"].items():
            steps = ", ".join(f"{x['step']} {fmt_times(x['measured_over_estimated'])}" for x in e["steps"])
            out.append(f"    {src}: {fmt_times(e['median_measured_over_estimated'])} ({steps})")
    return out


def _x(x: float) -> str:
    """A tune's ratio to its default: 3 decimals, as `lab tune` prints it (its steps are a few percent)."""
    return f"{x:.3f}x"


def tune_prediction_phrase(p: dict, with_label: bool = False) -> str:
    """One tuning prediction and its outcome: a stored entry (lab.store.ledger.tune_predictions) or a
    fresh tune's (lab.measure.tune.judged); both judged by lab.measure.tune.judge_ratio."""
    lo, hi = p["predicted"] if "predicted" in p else (p["low"], p["high"])
    head = (f"prediction {p['label']}: " if with_label else "") + f"predicted {lo:g}-{hi:g}x the default" \
        + (" by graph replay (device time)" if p.get("timing") == "graph" else "") \
        + (f" under load ({p['under_load_ms']:g} ms of calls before each repetition)" if p.get("under_load_ms") else "")
    if p.get("measured") is None or not p.get("verdict"):
        return f"{head}, not measured: {p.get('not_measured') or 'its candidate was not timed'}"
    spread = tune_spread(p)
    note = tune_ci95_note(p)
    return f"{head}, measured {_x(p['measured'])}{f' ({spread})' if spread else ''}: {_WHERE[p['verdict']]}" \
        + (f"; {note}" if note else "")


_WHERE = {"inside": "inside the range", "above": "above the range", "below": "below the range"}


def tune_spread(p: dict) -> str:
    """Which ratio a tuning prediction was judged on, and its spread: the median of the paired rounds'
    ratios with their CI95, else the ratio of the medians (with the two medians' CI95s where stored)."""
    if p.get("estimator") == PAIRED and p.get("ratio_ci95"):
        lo_ci, hi_ci = p["ratio_ci95"]
        return f"median of {p['rounds']} paired rounds, CI95 {lo_ci:.3f}-{_x(hi_ci)}"
    if p.get("estimator") != MEDIANS:
        return ""
    out = "ratio of the medians, no paired rounds kept"
    if p.get("medians_ci95"):
        d, c = p["medians_ci95"]["default"], p["medians_ci95"]["candidate"]
        if None not in d + c:
            out += f"; medians' CI95: default {d[0]:.4g}-{d[1]:.4g} ms, candidate {c[0]:.4g}-{c[1]:.4g} ms"
    return out


def tune_ci95_note(p: dict) -> str:
    """Where the measured ratio's CI95 reaches past a bound of the predicted range (its ends judged
    otherwise than the ratio): "its CI95 reaches below it"; empty where it does not, or has no CI95."""
    ends = []
    for w in p.get("ci95_where") or []:
        if w != p.get("verdict") and w not in ends:
            ends.append(w)
    words = {"inside": "into", "below": "below", "above": "above"}
    return f"its CI95 reaches {' and '.join(words[w] for w in ends)} it" if ends else ""


def tune_heading(e: dict) -> str:
    return (f"{e['variant']}{'' if e['mode'] == 'fwd' else ' ' + e['mode']} {e['problem']} on {e['device'] or 'unknown device'}"
            f" (tune {e['tune']}{', ' + e['commit'][:7] if e.get('commit') else ''})")


def tune_calibration_line(c: dict) -> str:
    if not c["of"]:
        return ("  tuning predictions: none judged yet" + (f" ({c['not_measured']} not measured)" if c["not_measured"] else "")
                + "; `lab tune ... --predict 'LABEL=LO-HI'` records one before the timing")
    return (f"  tuning predictions: measured inside the predicted range in {c['inside']} of {c['of']} "
            f"(above {c['above']}, below {c['below']}"
            + (f", {c['not_measured']} not measured" if c["not_measured"] else "")
            + f"; the CI95 reaches past a bound in {c['ci95_across_bound']})"
            + f"; median measured / predicted (range's geometric middle) {_x(c['median_measured_over_predicted'])}")


def tune_lines(ledger: Ledger) -> list[str]:
    """`lab ledger`'s "Tuning predictions" section: per stored tune, each prediction against what it measured."""
    out = ["Tuning predictions (`lab tune --predict`, recorded before the timing; ratio: the default's time over "
           "the candidate's, the median of the paired rounds' ratios where the tune kept them)"]
    if not ledger.tune_predictions:
        out.append("  no stored tune carries a prediction")
    heading = None
    for e in ledger.tune_predictions:
        if tune_heading(e) != heading:
            heading = tune_heading(e)
            out.append(f"  {heading}")
        out.append(f"    {e['candidate']}: {tune_prediction_phrase(e)}")
    return out


def chart(ledger: Ledger):
    steps = []
    for s in ledger.steps:
        m = s.measured
        steps.append(charts.GainStep(s.key, tuple(s.predicted.gain) if s.predicted.gain else None,
                                     m["gain"] if m else None, tuple(m["range"]) if m else None,
                                     "across dtypes" if m and m.get("across_dtypes") else
                                     (f"vs {m['reference']}" if m and m["reference"] != s.earlier.id else "")))
    return charts.gain_svg(steps)


def page_context(ledger: Ledger) -> dict:
    rows = [{"s": s, "named": named_phrase(s), "predicted": predicted_phrase(s), "measured": measured_phrase(s),
             "moved": moved_phrase(s)} for s in ledger.steps]
    tunes = []
    for e in ledger.tune_predictions:
        if not tunes or tunes[-1]["heading"] != tune_heading(e):
            tunes.append({"heading": tune_heading(e), "entries": []})
        tunes[-1]["entries"].append({**e, "phrase": tune_prediction_phrase(e), "spread": tune_spread(e),
                                     "ci95_note": tune_ci95_note(e)})
    return {"ledger": ledger, "rows": rows, "svg": chart(ledger),
            "calibration": calibration_lines(ledger.calibration)[1:] + [tune_calibration_line(ledger.tune_calibration)],
            "commands": missing_commands(ledger), "tunes": tunes}


def missing_commands(ledger: Ledger) -> list[str]:
    """Every command the ledger names to fill a gap (a measurement or a bottleneck check), once each."""
    seen = []
    for s in ledger.steps:
        for c in ((s.not_measured or {}).get("commands") or []) + ((s.moved or {}).get("commands") or []):
            if c not in seen:
                seen.append(c)
    return seen


def run_row(ledger: Ledger, variant_id: str) -> dict | None:
    """The ledger row of a run page: the step into this rung."""
    s = ledger.step_into(variant_id)
    if s is None:
        return None
    return {"step": s.key, "predicted": predicted_phrase(s), "measured": measured_phrase(s), "moved": moved_phrase(s)}

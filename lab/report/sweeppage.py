"""The sweep page's context: a stored sweep's tidy table as charts (time, TFLOP/s, per token,
memory, batch-scaling efficiency, against N or the batch, log axes) and the tables below them.

Reads only the sweep store (lab.store.sweeps); every sentence is built from stored values.
"""

from __future__ import annotations

from lab.report import charts
from lab.store.sweeps import add_ratios, group_rows, oom_points, versus_fastest, versus_rungs

FLOP_NOTE = ("TFLOP/s = the mode's FLOPs / median time. Forward FLOPs = 4·B·H·Nq·Nk·D (two matrix products), halved "
             "for causal; backward = 2.5x forward and forward+backward = 3.5x (FlashAttention's convention: the "
             "backward runs five N x N matrix products to the forward's two, one of them recomputing S).")
TIMING_NOTE = {"events": "events: a CUDA event pair around each Python call: CALL LATENCY, host dispatch included "
                         "(at tiny shapes this is the host, not the GPU)",
               "graph": "graph: the call captured once into a CUDA graph, an event pair around each replay: DEVICE "
                        "TIME of the kernels, without Python or PyTorch dispatch"}


def _series(group: dict, value, dashed=lambda impl: False) -> list[charts.Series]:
    out = []
    for impl in group["impls"]:
        pts = []
        for x in group["xs"]:
            r = group["cells"].get((impl, x))
            v = value(r) if r is not None and r.get("status") == "ok" else None
            pts.append((x, v))
        if any(v for _, v in pts):
            out.append(charts.Series(impl, tuple(pts), dashed(impl)))
    return out


def _efficiency(group: dict) -> dict:
    """Per implementation: (time at the smallest batch / that batch x B) / measured time at B."""
    out = {}
    for impl in group["impls"]:
        first = None
        for x in group["xs"]:
            r = group["cells"].get((impl, x))
            if r is None or r.get("status") != "ok":
                continue
            if first is None:
                first = (x, r["median_ms"])
            out[(impl, x)] = first[1] / first[0] * x / r["median_ms"]
    return out


def memory_growth(rows: list[dict]) -> list[dict]:
    """Per implementation and problem family (forward, events rows): how peak memory grows with N,
    as the exponent of a least-squares fit of log(peak) on log(N): ~2 for the N x N scores of standard
    attention, ~1 for flash implementations (their output and statistics only)."""
    import math

    fams: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("timing") == "events" and r.get("peak_memory_bytes"):
            key = (r["impl"], r["mode"], r["dtype"], r["head_dim"], r["causal"], r["batch"], r["heads"])
            fams.setdefault(key, []).append((math.log(r["seqlen_q"]), math.log(r["peak_memory_bytes"])))
    out = []
    for (impl, mode, dtype, d, causal, b, h), pts in fams.items():
        xs = {x for x, _ in pts}
        if len(xs) < 3:
            continue
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        out.append({"impl": impl, "mode": mode, "family": f"B={b}, H={h}, D={d}{', causal' if causal else ''}, {dtype}",
                    "exponent": slope, "n_min": round(math.exp(min(xs))), "n_max": round(math.exp(max(xs)))})
    return out


def sweep_context(sweep) -> dict:
    m = sweep.manifest
    plan = m["plan"]
    rows = add_ratios(sweep.rows(), plan.get("baselines", []))
    axis = plan.get("axis", "seqlen")
    xtitle = "batch B (log)" if axis == "batch" else "sequence length N (log)"
    rungs = set(plan.get("rungs") or {})
    dashed = lambda impl: impl not in rungs and impl != "standard"  # noqa: E731 - baselines dashed, ours solid
    groups = []
    for g in group_rows(rows, axis):
        figs = [charts.line_svg(_series(g, lambda r: r.get("tflops"), dashed), xtitle, "TFLOP/s (log)", "TFLOP/s"),
                charts.line_svg(_series(g, lambda r: r.get("median_ms"), dashed), xtitle, "median ms (log)",
                                "time per call")]
        figs.append(charts.line_svg(_series(g, lambda r: r.get("time_per_token_us"), dashed), xtitle,
                                    "µs per token (log)", "time per token"))
        if g["timing"] == "events":
            figs.append(charts.line_svg(_series(g, lambda r: (r.get("peak_memory_bytes") or 0) / 2**20 or None, dashed),
                                        xtitle, "MiB (log)", "peak memory beyond the inputs"))
            figs.append(charts.line_svg(_series(g, lambda r: r.get("memory_per_token_bytes") or None, dashed),
                                        xtitle, "bytes per token (log)", "peak memory per token"))
        eff = _efficiency(g) if axis == "batch" else {}
        if eff:
            effs = [charts.Series(impl, tuple((x, eff.get((impl, x))) for x in g["xs"])) for impl in g["impls"]
                    if any((impl, x) in eff for x in g["xs"])]
            figs.append(charts.line_svg(effs, xtitle, "efficiency (1 = linear)", "batch-scaling efficiency",
                                        log_y=False))
        ours, bases = versus_rungs(g["impls"], rungs)
        table = []
        for x in g["xs"]:
            cells = []
            for impl in g["impls"]:
                r = g["cells"].get((impl, x))
                cells.append({"row": r, "eff": eff.get((impl, x))})
            label = next(r["label"] for (i, xx), r in g["cells"].items() if xx == x)
            table.append({"x": x, "label": label, "cells": cells,
                          "versus": [versus_fastest(g, r, x, bases) for r in ours]})
        r0 = next(iter(g["cells"].values()))
        short = f"{g['mode']} {g['timing']} {r0['dtype']} D{r0['head_dim']}{' causal' if r0['causal'] else ''}"
        groups.append({**g, "short": short, "figs": [f for f in figs if f], "table": table, "versus_rungs": ours,
                       "versus_named": len(bases) > 1,
                       "anchor": "g-" + "".join(c if c.isalnum() else "-" for c in g["key"])})
    shorts = [g["short"] for g in groups]
    for g in groups:   # groups that differ in more than these (batch, heads): the contents name them whole
        if shorts.count(g["short"]) > 1:
            g["short"] = g["title"]
    # call latency vs device time where both were measured
    by = {(r["impl"], r["label"], r["mode"], r["timing"]): r for r in rows if r.get("status") == "ok"}
    latency = []
    for (impl, label, mode, timing), r in by.items():
        if timing != "graph":
            continue
        ev = by.get((impl, label, mode, "events"))
        if ev:
            latency.append({"impl": impl, "label": label, "mode": mode, "events_ms": ev["median_ms"],
                            "graph_ms": r["median_ms"], "host_share": 1 - r["median_ms"] / ev["median_ms"]})
    reasons: dict[tuple, list[str]] = {}
    for r in rows:
        if r.get("status") != "ok":
            reasons.setdefault((r["impl"], r["mode"], r["timing"], r["status"], r.get("reason") or ""), []).append(r["label"])
    statuses = {}
    for r in rows:
        statuses[r.get("status")] = statuses.get(r.get("status"), 0) + 1
    columns = [c for c in sweep.table().columns]
    return {"s": sweep, "m": m, "plan": plan, "device": m.get("device") or {}, "software": m.get("software") or {},
            "groups": groups, "latency": latency,
            "reasons": [{"impl": k[0], "mode": k[1], "timing": k[2], "status": k[3], "reason": k[4], "labels": v}
                        for k, v in reasons.items()],
            "ooms": oom_points(rows), "growth": memory_growth(rows) if axis == "seqlen" else [], "statuses": statuses, "rows": rows, "columns": columns,
            "flop_note": FLOP_NOTE, "timing_notes": TIMING_NOTE, "axis": axis,
            "problems": len(plan.get("problems", [])), "implementations": list(plan.get("rungs") or {}) + plan.get("baselines", [])}


def sweep_index_rows(sweeps) -> list[dict]:
    out = []
    for s in sorted(sweeps, key=lambda s: (s.manifest.get("created_utc", ""), s.id), reverse=True):
        m = s.manifest
        plan = m.get("plan") or {}
        out.append({"id": s.id, "created": (m.get("created_utc") or "")[:16].replace("T", " "),
                    "name": plan.get("name"), "device": (m.get("device") or {}).get("name") or "n/a",
                    "status": m.get("status"), "cells": f"{m.get('cells_done', '?')}/{m.get('cells_planned', '?')}",
                    "problems": len(plan.get("problems", [])), "modes": ", ".join(plan.get("modes", [])),
                    "impls": ", ".join(list(plan.get("rungs") or {}) + plan.get("baselines", []))})
    return out

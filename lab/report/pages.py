"""HTML reports from stored runs: one write-up per run, the index with the ladder, comparisons.

The rendering layer: lab.report.rundata reads and validates a run and derives its numbers, lab.report.formatting
words them, lab.report.charts draws them; this module turns them into each template's context, renders the
Jinja templates and writes the pages. It reads only the run store, never the analysis or timeline
code, so `lab report` needs no torch, GPU, ncu or nsys. Every sentence on a page is built from a
stored value; where a value is absent the page says so instead of guessing. Jinja autoescaping is
on: kernel names, rule messages and reasons are data, not markup.
"""

from __future__ import annotations

import json
import os
import re
import webbrowser
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from lab.analysis.overlap import split_advice
from lab.report import charts, ledgerpage
from lab.ladder import registry
from lab.report.compare import compare_runs
from lab import shipped
from lab.errors import LabError
from lab.files import write_text_atomic
from lab.report.formatting import (NWAY_DEFINITION, fmt_bytes, fmt_capacity, fmt_count, fmt_change, fmt_ms, fmt_num, fmt_pct, fmt_shell, fmt_times, is_missing,
                            speed_phrase)
from lab.measure.problem import DTYPE_BYTES
from lab.measure import rates
from lab.report.rundata import (DURATION, RunData, RunDamaged, backward_kernels, below_minimum_note, prediction_shape_note, section_set_label, Table, ci_overlap, dram_bytes, findings_context, ladder_neighbour, latest_alike, load,
                         load_all, memory_levels, occupancy, performance_rows, sass_fp32_flops, stall_reasons)
from lab.report.sourceview import highlight_ahead, source_context
from lab.store import ledger as ledger_store
from lab.store.runs import DamagedRun, find_run, open_root

TEMPLATES_DIR = shipped.TEMPLATES_DIR   # templates/ at the top level, lab/templates in a wheel
DEFAULT_OUT = Path("reports")   # relative: pages go where the user runs the lab (or the workspace)


# ------------------------------------------------------------------------- the run's context

DTYPE_MARKERS = {"float16": "circle", "bfloat16": "triangle", "float32": "diamond"}


def roofline(rd: RunData, kernel: dict | None) -> dict:
    """Points and roofs for the chart, and notes on what each coordinate rests on."""
    flops = rd.flops   # the FLOPs of what was timed: a backward counts 2.5x its forward
    notes = []
    points = []
    dram, dram_src = dram_bytes(kernel)
    if rd.tflops:
        if dram and dram < rd.min_bytes:
            # fewer bytes than the problem must move would put the point right of any honest intensity
            ai = flops / rd.min_bytes
            notes.append(f"{rd.variant_id}: placed at the minimum-bytes intensity ({rd.min_bytes_rule}), "
                         f"the highest this problem allows, and not at problem FLOPs / DRAM bytes measured by ncu "
                         f"({dram_src}): {below_minimum_note(kernel, rd.problem, rd.mode)}")
        elif dram:
            ai = flops / dram
            notes.append(f"{rd.variant_id}: intensity = problem FLOPs / DRAM bytes measured by ncu ({dram_src}).")
        else:
            ai = flops / rd.min_bytes
            notes.append(f"{rd.variant_id}: no DRAM bytes were stored, so it is placed at the minimum-bytes "
                         f"intensity ({rd.min_bytes_rule}).")
        points.append(charts.RooflinePoint(f"{rd.variant_id} (ours, {rd.problem.dtype})", ai, rd.tflops, "rung"))
    base_pts = []
    backends = sorted({str(b.get("backend") or b.get("name")) for b in rd.ok_baselines()})
    for b in rd.ok_baselines():
        dtype = b.get("dtype")
        if dtype not in DTYPE_BYTES:
            continue
        backend = str(b.get("backend") or b.get("name"))
        tfl = rd.baseline_rates(b)["tflops"]
        ai = flops / rates.min_bytes(rd.problem.with_dtype(dtype), rd.mode)
        base_pts.append(charts.RooflinePoint(f"SDPA {backend} ({dtype})", ai, tfl, "base", backends.index(backend),
                                             DTYPE_MARKERS.get(dtype, "circle")))
    if base_pts:
        notes.append("SDPA backends: their DRAM traffic was not profiled, so each is placed at the minimum-bytes "
                     "intensity of its dtype; achieved FLOP/s = problem FLOPs / median time.")
    roofs = []
    if rd.peaks.get("fp32_tflops"):
        roofs.append(charts.Roof(f"FP32 {charts.fmt_si(rd.peaks['fp32_tflops'])}", rd.peaks["fp32_tflops"], "fp32"))
    if rd.peaks.get("tensor_fp16_tflops"):
        roofs.append(charts.Roof(f"FP16/BF16 tensor {charts.fmt_si(rd.peaks['tensor_fp16_tflops'])}",
                                 rd.peaks["tensor_fp16_tflops"], "tensor"))
    executed = sass_fp32_flops(kernel)
    if executed and flops:
        duration = kernel.get(DURATION)
        rate = f", {fmt_num(executed / duration / 1e3)} TFLOP/s over ncu's kernel duration" if duration else ""
        notes.append(f"ncu counted {fmt_num(executed)} FP32 operations executed (2 x FFMA + FADD + FMUL, per thread): "
                     f"{fmt_times(executed / flops)} the problem's FLOPs{rate}.")
    if not rd.peaks:
        notes.append(f"No peak rates are known for {rd.device_name}, so the chart has no roofs.")
    svg = charts.roofline_svg(points + base_pts, roofs, rd.peaks.get("dram_tbps"))
    return {"svg": svg, "notes": notes}


# The timeline tables lab.profilers.timeline stores (`timeline_<name>`), named after the nsys stats reports
# they mirror; the *_events tables hold one row per event and feed the chart only.
TIMELINE_SUMMARIES = (("kernels", "Kernel summary (as cuda_gpu_kern_sum)"), ("nvtx", "NVTX ranges (as nvtx_sum)"),
                      ("nvtx_kernels", "Kernels per NVTX range (as nvtx_kern_sum)"),
                      ("memory", "Memory operations (as cuda_gpu_mem_time_sum)"), ("api", "CUDA API (as cuda_api_sum)"))
TIMELINE_EVENTS = (("nvtx_events", "nvtx"), ("api_events", "cuda api"), ("kernel_events", "kernels"),
                   ("events", "events"))


TIMELINE_SPANS_MAX = 400   # beyond a few hundred bars a 720-px chart is a smear; the earliest are drawn


def timeline_context(rd: RunData) -> dict:
    info = rd.manifest.get("timeline")
    info = info if isinstance(info, dict) else None
    summaries = [(title, _table_view(t)) for name, title in TIMELINE_SUMMARIES
                 if (t := rd.table(f"timeline_{name}")) is not None]
    spans, event_counts = [], []
    for name, lane_default in TIMELINE_EVENTS:
        t = rd.table(f"timeline_{name}")
        if t is None:
            continue
        event_counts.append((name, len(t.rows)))
        cols = set(t.columns)
        start = "start_ns" if "start_ns" in cols else None
        end = "end_ns" if "end_ns" in cols else None
        dur = "duration_ns" if "duration_ns" in cols else None
        label = next((c for c in ("name", "operation", "kernel") if c in cols), None)
        lane = next((c for c in ("kind", "lane") if c in cols), None)
        if not start or not (end or dur):
            continue
        for rec in t.rows:
            s = rec.get(start)
            e = rec.get(end) if end else (s + rec[dur] if s is not None and rec.get(dur) is not None else None)
            if s is None or e is None:
                continue
            spans.append(charts.Span(str(rec[lane]) if lane else lane_default, str(rec[label]) if label else "",
                                     float(s), float(e)))
    spans.sort(key=lambda sp: sp.start_ns)
    shown = spans[:TIMELINE_SPANS_MAX]
    svg, cut = charts.timeline_svg(shown)
    return {"info": info, "summaries": summaries, "events": event_counts, "svg": svg, "cut": cut,
            "spans_shown": len(shown), "spans_total": len(spans), "recorded": bool(info or summaries or event_counts)}


def _table_view(t: Table, max_rows: int = 20) -> dict:
    rows = [[_cell(r.get(c)) for c in t.columns] for r in t.rows[:max_rows]]
    return {"columns": t.columns, "rows": rows, "total": len(t.rows)}


def _cell(v) -> str:
    if isinstance(v, float):
        return fmt_num(v, 4)
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def _raw_cell(v) -> str:
    """As stored, to 10 significant digits: the appendix is for checking the rounded numbers above."""
    if isinstance(v, float):
        return f"{v:.10g}"
    return "" if v is None else str(v)


def raw_metrics_html(kernels: list[dict], units: dict[str, str]) -> Markup:
    """The metrics the page read, transposed (metric x kernel) at full precision, built as one
    string (a template loop over hundreds of rows per run is the slowest part of a render)."""
    if not kernels:
        return Markup("")
    # Nsight's metrics only: "derived" is the lab's reading of them, shown in the sections above (as a row
    # here it was one cell holding the whole dict)
    names = sorted({n for k in kernels for n in k if n not in ("kernel", "derived")})
    head = "".join(f"<th>{escape(k['kernel'])}</th>" for k in kernels)
    body = "".join(f"<tr><td class=metric>{escape(n)}</td><td>{escape(units.get(n, ''))}</td>"
                   + "".join(f"<td class=num>{escape(_raw_cell(k.get(n)))}</td>" for k in kernels) + "</tr>"
                   for n in names)
    return Markup(f'<table class="raw"><thead><tr><th>metric</th><th>unit</th>{head}</tr></thead>'
                  f'<tbody>{body}</tbody></table>')


def headline(rd: RunData, perf: list[dict], fctx: dict) -> list[str]:
    """The write-up's first paragraph, one sentence per stored fact."""
    out = []
    p = rd.problem
    if rd.median_ms is not None:
        s = (f"{rd.name} ({rd.variant.get('title') or rd.variant.get('slug') or ''}) took "
             f"{fmt_ms(rd.median_ms)} (median of {fmt_num(rd.timing.get('reps'))} repetitions) on {rd.device_name} "
             f"for {p.label()}: {fmt_num(rd.tflops)} TFLOP/s")
        pct = perf[0]["pct_peak"]
        out.append(s + (f", {fmt_pct(pct)} of the {perf[0]['peak_name']} peak." if pct is not None else "."))
    else:
        out.append(f"{rd.name} has no timing stored for {p.label()} on {rd.device_name}.")
    cmp = rd.baseline_comparison()
    same, cross = cmp["same"], cmp["cross"]
    if same:
        out.append(f"The fastest SDPA backend measured in {p.dtype}, {same['name']}, took "
                   f"{fmt_ms(same['baseline']['median_ms'])}: ours is {speed_phrase(same['ratio'], same['name'])}.")
    elif rd.median_ms and rd.baselines:
        out.append(f"No SDPA backend ran in {p.dtype} here, so there is no same-dtype comparison.")
    if cross:
        out.append(f"Across dtypes (not like for like: {cross['baseline'].get('dtype')} against our {p.dtype}), the fastest "
                   f"is {cross['name']} at {fmt_ms(cross['baseline']['median_ms'])}: ours is "
                   f"{speed_phrase(cross['ratio'], cross['name'])}.")
    c = rd.correctness
    if "passed" in c:
        out.append(f"Correctness {'passed' if c['passed'] else 'FAILED'}: max abs error {fmt_num(c.get('max_abs_err'))}"
                   + (f" ({c['rule']})." if c.get("rule") else "."))
    if fctx["primary"]:
        f = fctx["primary"]
        cls, title = f.get("class") or "", f.get("title") or ""
        # a title that already opens with its class ("Latency-bound: compute at ...") is not repeated
        said = title.lower().replace("-", " ").startswith(cls.lower().replace("-", " "))
        out.append(f"Primary bottleneck: {title if said else f'{cls}: {title}'}.")
    elif rd.bottleneck:
        out.append(f"Primary bottleneck: {rd.bottleneck}.")
    return out


def run_context(rd: RunData, runs: list[RunData], out_dir: Path) -> dict:
    k = rd.primary_kernel
    perf = performance_rows(rd)
    fctx = findings_context(rd, k)
    # a tuning candidate's run is measured against its rung's default (the launcher's own choice) on the
    # same work, not against the previous rung: the rung's step and its prediction are the default's
    if rd.candidate:
        prev_id, prev = rd.variant_id, latest_alike(rd, runs, rd.variant_id)
    else:
        prev_id, prev = ladder_neighbour(rd, runs, -1)
    next_id, _ = ladder_neighbour(rd, runs, +1)
    gain = None
    if prev is not None and rd.median_ms:
        predicted = None if rd.candidate else rd.variant.get("predicted_gain")
        gain = {"prev": prev, "measured": rates.ratio(prev.median_ms, rd.median_ms), "overlap": ci_overlap(prev.timing, rd.timing),
                "predicted": predicted, "compare_page": compare_filename(prev.id, rd.id),
                "predicted_elsewhere": prediction_shape_note(predicted, rd.problem),
                "dtype_differs": prev.problem.dtype != rd.problem.dtype}
    next_variant = None
    if next_id:
        v = registry.get(next_id)
        next_variant = {"id": v.id, "title": v.title, "attacks": v.attacks, "predicted_gain": v.predicted_gain}
    # a page that gives an n-way bank conflict anywhere states what n-way means
    texts = [str(x) for f in fctx["findings"] for x in (f.get("title"), f.get("advice"), *(f.get("evidence") or {}))]
    texts += [str(x) for x in (rd.variant.get("attacks"), rd.variant.get("predicted_gain"))]
    if next_variant:
        texts += [str(next_variant.get("attacks")), str(next_variant.get("predicted_gain"))]
    nway_note = NWAY_DEFINITION if any(re.search(r"-way\b|nway", t) for t in texts) else None
    stalls, stall_unit, stall_family = stall_reasons(k)
    # PC-sample counts are whole numbers and print as such; per-issue ratios keep 3 significant digits
    stall_fmt = fmt_count if all(float(v).is_integer() for _, v in stalls) else None
    stall_svg = charts.hbar_svg([charts.Bar(r, v, "warn" if i == 0 else "base") for i, (r, v) in enumerate(stalls[:14])],
                                unit="", title="Warp stall reasons", fmt=stall_fmt) if stalls else Markup("")
    mem = memory_levels(k, rd.min_bytes, rd.min_bytes_rule)
    mem_note = below_minimum_note(k, rd.problem, rd.mode)
    mem_svg = charts.hbar_svg([charts.Bar(r["level"].split(" (")[0] if i == 0 else r["level"], r["bytes"],
                                          "ref" if i == 0 else "base",
                                          f"({fmt_times(r['x_min'])} minimum)" if i else "")
                               for i, r in enumerate(mem)], unit="B", title="Bytes moved per memory level",
                              log=True, fmt=fmt_bytes) if len(mem) > 1 else Markup("")
    artifacts = []
    for name in (rd.manifest.get("artifacts") or {}):
        path = rd.run.artifact(name)   # the manifest's file, or its other form (.xz or not) where only that is there
        artifacts.append({"name": name, "file": path.name, "exists": path.exists(), "href": _relhref(path, out_dir),
                          "size": path.stat().st_size if path.exists() else None,
                          # Nsight Compute's UI opens only the plain report; the store keeps it compressed
                          "unpack": f"unxz -k {path.name}" if path.name.endswith(".ncu-rep.xz") else None})
    ncu_report = next((a for a in artifacts if a["name"] == "ncu_report" and a["exists"]), None)
    return {
        "section_set": section_set_label(rd.manifest.get("profile")), "memory_below_minimum": mem_note, "nway_definition": nway_note, "rd": rd, "m": rd.manifest, "p": rd.problem, "variant": rd.variant, "device": rd.device,
        "peaks": rd.peaks, "software": rd.software, "timing": rd.timing, "correctness": rd.correctness,
        "headline": headline(rd, perf, fctx), "perf": perf, "gain": gain, "prev_id": prev_id,
        "next_variant": next_variant, "in_registry": rd.variant_id in registry.all_ids(), "kernel": k, "kernels": rd.kernels,
        "roofline": roofline(rd, k), "stalls": stalls, "stall_unit": stall_unit, "stall_family": stall_family,
        "stall_svg": stall_svg, "occupancy": occupancy(k, rd.device), "memory": mem, "memory_svg": mem_svg,
        "f": fctx, "timeline": timeline_context(rd), "artifacts": artifacts, "ncu_report": ncu_report, "backward": backward_kernels(rd),
        "source": source_context(rd, k, fctx["findings"]),
        "raw_metrics": raw_metrics_html(rd.kernels, rd.units), "units": rd.units,
        "stored_metric_count": rd.stored_metric_count,
        "manifest_json": json.dumps(rd.manifest, indent=2, default=str),
        "candidate": rd.candidate, "default_command": _default_command(rd), **launched_ptxas(rd),
    }


def _default_command(rd: RunData) -> str | None:
    """For a tuning candidate's run: the command that stores its rung's default's run on the same work."""
    work = ledger_store.run_work(rd.manifest) if rd.candidate else None
    return work.command(rd.variant_id) if work else None


def launched_ptxas(rd: RunData) -> dict:
    """The build's ptxas records the page shows: all of them, except for a tuning candidate's run, whose
    tuning build holds every candidate's kernels: there the ones its profile launched (matched by the mangled
    name Nsight Compute and ptxas both record), where any match, and how many of the build's it leaves out."""
    records = (rd.manifest.get("build") or {}).get("ptxas") or []
    if not rd.candidate:
        return {"ptxas": records, "ptxas_others": 0}
    mine = [r for r in records if r.get("mangled") in rd.launched_mangled]
    return {"ptxas": mine or records, "ptxas_others": len(records) - len(mine) if mine else 0}


def _relhref(path: Path, out_dir: Path) -> str:
    """A link that works from the page's folder (the report links artifacts in place, no copy)."""
    return Path(os.path.relpath(path.resolve(), out_dir.resolve())).as_posix()


# ------------------------------------------------------------------------------ the index

def ladder_groups(runs: list[RunData]) -> list[dict]:
    """One group per (shape, device): the latest run of each rung and the SDPA backends beside them."""
    groups: dict[tuple, list[RunData]] = {}
    for r in runs:
        groups.setdefault((r.shape_label(), r.device_name, r.mode), []).append(r)
    order = {vid: i for i, vid in enumerate(registry.all_ids())}
    out = []
    for (shape, device, mode), members in groups.items():
        latest: dict[str, RunData] = {}
        for r in sorted(members, key=lambda r: (r.manifest.get("created_utc", ""), r.id)):
            if r.median_ms and r.candidate is None:   # a tuning candidate's run is not its rung's step
                latest[r.variant_id] = r
        rungs = sorted(latest.values(), key=lambda r: (order.get(r.variant_id, len(order)), r.variant_id))
        if not rungs:
            continue
        newest = max(rungs, key=lambda r: (r.manifest.get("created_utc", ""), r.id))
        bars = [charts.Bar(f"{r.variant_id} {r.problem.dtype}", r.tflops, "rung") for r in rungs]
        base_bars, unavailable = [], []
        for b in newest.baselines:
            label = f"SDPA {b.get('backend') or b.get('name')} {b.get('dtype')}"
            if b.get("status") == "ok" and b.get("median_ms"):
                tfl = newest.baseline_rates(b)["tflops"]
                base_bars.append(charts.Bar(label, tfl, "base"))
            else:
                unavailable.append((label, b.get("reason") or "no reason stored"))
        history = []
        by_id = {r.variant_id: r for r in rungs}
        # a backward group's ladder is the rungs with a backward (a forward-only rung timed none of its work)
        ladder = [v.id for v in registry.variants() if mode == "fwd" or v.backward]
        ids = ladder + sorted(set(by_id) - set(ladder))
        for i, vid in enumerate(ids):
            r = by_id.get(vid)
            try:
                v = registry.get(vid)
                meta = {"title": v.title, "changed": v.changed, "attacks": v.attacks, "predicted_gain": v.predicted_gain}
            except LabError:
                meta = {}
            if r is not None:  # what the run recorded wins over today's registry text
                meta.update({k: r.variant[k] for k in ("title", "changed", "attacks", "predicted_gain") if r.variant.get(k)})
            prev = by_id.get(ids[i - 1]) if i > 0 else None
            measured = rates.ratio(prev.median_ms, r.median_ms) if (r and prev) else None
            elsewhere = prediction_shape_note(meta.get("predicted_gain"), r.problem) if r else None
            history.append({"id": vid, "run": r, **meta, "measured": measured, "predicted_elsewhere": elsewhere, "prev_id": ids[i - 1] if i else None,
                            "overlap": ci_overlap(prev.timing, r.timing) if (r and prev) else None,
                            "bottleneck": r.bottleneck if r else None})
        out.append({"key": f"{shape} @ {device}" + (f" ({mode})" if mode != "fwd" else ""), "shape": shape,
                    "device": device, "mode": mode, "rungs": rungs,
                    "newest": newest, "svg": charts.ladder_svg(bars + base_bars), "unavailable": unavailable,
                    "history": history})
    out.sort(key=lambda g: (-len(g["rungs"]), g["key"]))
    return out


def index_context(runs: list[RunData]) -> dict:
    rows = []
    for r in sorted(runs, key=lambda r: (r.manifest.get("created_utc", ""), r.id), reverse=True):
        cmp = r.baseline_comparison()
        same, cross = cmp["same"], cmp["cross"]
        rows.append({"rd": r, "pct_peak": r.rates["pct_of_peak"],
                     "best_ratio": same["ratio"] if same else None,
                     "best_name": same["name"] if same else None,
                     "cross_ratio": cross["ratio"] if cross else None, "cross_name": cross["name"] if cross else None,
                     "passed": r.correctness.get("passed")})
    groups = ladder_groups(runs)
    history_text = " ".join(str(h.get(k)) for g in groups for h in g["history"] for k in ("attacks", "predicted_gain", "changed"))
    return {"rows": rows, "groups": groups,
            "nway_definition": NWAY_DEFINITION if re.search(r"-way\b", history_text) else None,
            "rungs": sorted({r.variant_id for r in runs}), "shapes": sorted({r.problem.label() for r in runs}),
            "devices": sorted({r.device_name for r in runs})}


# ------------------------------------------------------------------------------ rendering

@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """Compiled once per process: `lab report` over many runs reuses the parsed templates."""
    if not (TEMPLATES_DIR / "run.html").is_file():
        raise LabError(f"report templates not found in {TEMPLATES_DIR}", hint="the flash-lab installation is incomplete: reinstall it (pip install flash-lab)")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=fmt_num, pct=fmt_pct, bytes=fmt_bytes, capacity=fmt_capacity, count=fmt_count, ms=fmt_ms, times=fmt_times, shell=fmt_shell,
                       change=fmt_change, advice_parts=split_advice)
    env.tests["given"] = lambda v: not is_missing(v)   # stored and not None: `{% if x is given %}`
    env.globals.update(speed_phrase=speed_phrase, version=_lab_version())
    return env


def _lab_version() -> str:
    from lab import __version__
    return __version__


def compare_filename(a_id: str, b_id: str) -> str:
    return f"compare-{a_id}-{b_id}.html"


def default_out() -> Path:
    """reports/ of the active workspace (lab.ladder.workspace), else reports/ in the current folder."""
    from lab.ladder.workspace import active

    ws = active()
    return ws.reports_dir if ws is not None else DEFAULT_OUT


def _out_dir(out: Path | None) -> Path:
    out = Path(out) if out else default_out()
    if out.exists() and not out.is_dir():
        raise LabError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


@dataclass
class Rendered:
    index: Path
    pages: dict[str, Path]
    comparisons: list[Path]
    empty_store: Path | None = None   # set when the store held no run: the index says so
    damaged: list = field(default_factory=list)   # lab.store.runs.DamagedRun: left out, with the reason

    def empty_message(self) -> str | None:
        if self.empty_store is None:
            return None
        if self.damaged:
            return f"no readable runs in {self.empty_store}: {len(self.damaged)} damaged (listed above)"
        return (f"no stored runs in {self.empty_store} (nor in {self.empty_store / 'examples'}); "
                f"`lab profile --variant ID` records one on a GPU machine (`lab variants` lists the ids)")


def render(out: Path | None = None, root: Path | None = None, run_id: str | None = None) -> Rendered:
    """Write index.html, one page per run (or only `run_id`'s) and the comparison of each rung with
    its previous rung. A damaged run (an unreadable manifest or table) is left out and listed with
    its reason in `Rendered.damaged` and on the index; the others render. Raises LabError when the
    store is not one, or when the run asked for by `run_id` is damaged."""
    asked_root, root = root, open_root(root)
    runs, damaged = load_all(asked_root)   # opens the store itself: a second open of the default would count it as named
    selected = runs
    if run_id is not None:
        wanted = find_run(run_id, root)
        found = next((r for r in runs if r.run.path.resolve() == wanted.path.resolve()), None)
        if found is None:                       # a run directory outside the store, given by path
            found = load(wanted)
            runs.append(found)
        selected = [found]
    out_dir = _out_dir(out)
    env = environment()
    sweeps = render_sweeps(out_dir, root, damaged) if run_id is None else []
    ledger = render_ledger(out_dir, asked_root)
    if not runs:   # not an error: an index that says so, and a message from the CLI
        index = out_dir / "index.html"
        write_text_atomic(index, env.get_template("index.html").render(**index_context([]), store=root, damaged=damaged,
                                                                   sweeps=sweeps, ledger_page=LEDGER_PAGE))
        return Rendered(index, {}, [], empty_store=None if sweeps else root, damaged=damaged)
    page_t = env.get_template("run.html")
    pages, comparisons = {}, []

    def set_aside(e: RunDamaged, current: RunData) -> None:
        bad = next((r for r in runs if r.run.path == e.path), current)
        if bad in runs:
            runs.remove(bad)
        damaged.append(DamagedRun(e.path, e.reason))
        if run_id is not None and bad in selected:
            raise e

    for rd in list(selected):
        html = ctx = None
        while rd in runs:   # a neighbour found damaged on the way is set aside and the page redone
            try:
                ctx = run_context(rd, runs, out_dir)
                # the ledger's step is the rung's default's; a candidate's page does not claim it
                ctx["ledger_row"] = ledgerpage.run_row(ledger, rd.variant_id) if ledger and not rd.candidate else None
                html = page_t.render(**ctx)
                break
            except RunDamaged as e:
                set_aside(e, rd)
        if html is None:
            continue
        path = out_dir / f"{rd.id}.html"
        write_text_atomic(path, html)
        pages[rd.id] = path
        if ctx["gain"]:
            try:
                comparisons.append(render_compare(compare_runs(ctx["gain"]["prev"], rd), out_dir))
            except RunDamaged as e:
                set_aside(e, rd)
    index = out_dir / "index.html"
    if run_id is not None:
        from lab.report.sweeppage import sweep_index_rows
        from lab.store.sweeps import list_sweeps

        sweeps = sweep_index_rows(list_sweeps(root))   # the index lists them; their pages stay as they are
    write_text_atomic(index, env.get_template("index.html").render(**index_context(runs), store=root, damaged=damaged,
                                                               sweeps=sweeps, ledger_page=LEDGER_PAGE))
    return Rendered(index, pages, comparisons, damaged=damaged)


def render_sweeps(out_dir: Path, root: Path, damaged: list) -> list[dict]:
    """One page per readable stored sweep (<sweep-id>.html); the damaged ones join `damaged`.
    Returns the index's rows for the readable ones."""
    from lab.report.sweeppage import sweep_context, sweep_index_rows
    from lab.store.sweeps import scan_sweeps

    sweeps, bad = scan_sweeps(root)
    damaged.extend(bad)
    template = environment().get_template("sweep.html")
    for sw in sweeps:
        write_text_atomic(out_dir / f"{sw.id}.html", template.render(**sweep_context(sw)))
    return sweep_index_rows(sweeps)


LEDGER_PAGE = "ledger.html"


def render_ledger(out_dir: Path, root: Path | None):
    """The Ledger page (lab.store.ledger over the store `root` as it was asked for: unnamed, the
    shipped examples too). A ledger that cannot be built (a run's findings table unreadable) is a
    page that says why, never a failed report; returns the ledger or None."""
    try:
        ledger = ledger_store.build(root)
        ctx = ledgerpage.page_context(ledger)
    except LabError as e:
        ledger, ctx = None, {"rows": [], "error": str(e)}
    write_text_atomic(out_dir / LEDGER_PAGE, environment().get_template("ledger.html").render(**ctx))
    return ledger


def render_compare(comparison, out: Path | None = None) -> Path:
    out_dir = _out_dir(out)
    path = out_dir / compare_filename(comparison.a.id, comparison.b.id)
    write_text_atomic(path, environment().get_template("compare.html").render(c=comparison))
    return path


def warm(root: Path, variant_id: str | None = None, sources: tuple[Path, ...] = ()) -> None:
    """Do ahead what a new run's page in store `root` will do again: read the store's other runs (each
    run's findings and main kernel, for the ledger: lab.store.runs keeps each table read once per process),
    parse the templates, and colour the code the page will show (by its text: the rung's `sources` as on
    disk now, and the files the newest stored run of `variant_id` imported, the CUDA headers among them).
    `lab profile` calls it while ncu runs, so its report stage reads and colours only what is new.
    Whatever fails here is left for the report stage to say."""
    try:
        env = environment()
        for name in ("run.html", "index.html", "ledger.html", "compare.html"):
            env.get_template(name)
        texts = [Path(p).read_text(errors="replace") for p in sources if Path(p).is_file()]
        root = open_root(root)
        ledger_store.build(root)
        if variant_id is not None:
            from lab.store.runs import scan_runs

            same = [r for r in scan_runs(root)[0] if (r.manifest.get("variant") or {}).get("id") == variant_id
                    and (r.manifest.get("tables") or {}).get("sources")]
            if same:
                newest = max(same, key=lambda r: (r.manifest.get("created_utc") or "", r.id))
                texts += [t for t in newest.table("sources").get("text", []) if isinstance(t, str) and t]
        for text in texts:
            highlight_ahead(text)
    except Exception:
        pass


def render_run_page(run_dir: Path, out: Path | None = None) -> Path:
    """Render one stored run's page (and the index); returns the page's path. Used by `lab profile`."""
    run_dir = Path(run_dir)
    return render(out, root=run_dir.parent if run_dir.parent.name != "examples" else run_dir.parent.parent,
                  run_id=str(run_dir)).pages[run_dir.name]


def open_in_browser(path: Path) -> bool:
    """Open a page where a browser exists; False (and nothing raised) where none does."""
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return False
    return bool(browser.open(path.resolve().as_uri()))
"""`lab export`: a stored run's tables as CSV (or JSON lines) and its manifest, for other tools."""

from __future__ import annotations

import json
from pathlib import Path

from lab.errors import LabError
from lab.files import write_text_atomic
from lab.measure.problem import label_without_dtype
from lab.store.runs import Run, find_run
from lab.store.sweeps import add_ratios, find_sweep, group_rows, is_sweep, oom_points, versus_fastest, versus_rungs, versus_text

FORMATS = ("csv", "json")
DEFAULT_OUT = Path("reports") / "export"   # beside `lab report`'s pages: one place for what the lab writes out


def export_run(run: Run, out_dir: Path, fmt: str = "csv") -> list[Path]:
    if fmt not in FORMATS:
        raise LabError(f"unknown format {fmt!r}; use {' or '.join(FORMATS)}")
    out_dir = Path(out_dir) / run.id
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "manifest.json"]
    written[0].write_text(json.dumps(run.manifest, indent=2))
    for name in run.manifest.get("tables", {}):
        df = run.table(name)
        path = out_dir / f"{name}.{'csv' if fmt == 'csv' else 'jsonl'}"
        if fmt == "csv":
            df.to_csv(path, index=False)
        else:
            df.to_json(path, orient="records", lines=True)
        written.append(path)
    return written


# ------------------------------------------------------------------------------ sweeps

SWEEP_FORMATS = ("csv", "parquet", "markdown")


def export_sweep(sweep, out_dir: Path, fmt: str = "csv") -> list[Path]:
    """The sweep's tidy table as CSV or Parquet (plus its manifest) under out_dir/<sweep-id>/."""
    if fmt not in ("csv", "parquet"):
        raise LabError(f"unknown format {fmt!r} for a sweep; use {', '.join(SWEEP_FORMATS)}")
    out = Path(out_dir) / sweep.id
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "sweep.json"
    manifest.write_text(json.dumps(sweep.manifest, indent=2))
    df = sweep.table()
    path = out / f"rows.{fmt}"
    if fmt == "csv":
        df.to_csv(path, index=False)
    else:
        df.to_parquet(path, index=False)
    return [manifest, path]


def _fmt(x, digits: int = 4) -> str:
    if x is None or x != x:
        return "n/a"
    return f"{x:.{digits}g}"


def markdown_sweep(sweep, metric: str = "tflops") -> str:
    """The sweep's tables for benchmarks/RESULTS.md: one per group (mode, timing, dtype, D, mask),
    a row per N (or batch), a column per implementation with median ms and TFLOP/s; batch sweeps add
    the scaling efficiency. Headed by device, date, commit and the command that recorded it."""
    m = sweep.manifest
    plan = m["plan"]
    dev = m.get("device") or {}
    git = m.get("git") or {}
    commit = (git.get("commit") or "?")[:10] + ("" if git.get("dirty") is False else
                                                " (uncommitted changes)" if git.get("dirty") else " (tree copied without .git)")
    sw = m.get("software") or {}
    rows = sweep.rows()

    rows = add_ratios(rows, plan.get("baselines", []))
    lines = [f"### Sweep {sweep.id}", "",
             f"`{plan.get('command') or 'lab sweep'}`: {dev.get('name', '?')} (cc {dev.get('compute_capability', '?')}, "
             f"{dev.get('sm_count', '?')} SMs), torch {sw.get('torch', '?')}, CUDA {sw.get('cuda', '?')}, "
             f"{(m.get('created_utc') or '?')[:10]}, commit {commit}; status {m.get('status')} "
             f"({m.get('cells_done')} of {m.get('cells_planned')} cells). Median of up to {plan.get('reps')} repetitions "
             f"(fewer where a cell's {plan.get('cell_budget_s')} s budget ran out; the table stores the count)"
             + (f" in {plan['passes']} passes over each problem's cells, seconds apart, pooled (the CI95 spans every "
                "pass's median; the table stores each pass's)" if (plan.get("passes") or 1) > 1 else "") + ", "
             "L2 flushed before each"
             + (f", each behind {plan['under_load_ms']:g} ms of its own calls back to back (under load: the GPU at "
                "its power limit; rows' load_sm_clock_mhz and load_power_capped_share say what NVML read)"
                if plan.get("under_load_ms") else "") + ". Cells: median ms (TFLOP/s). Timing `events` = call latency (host dispatch "
             "included), `graph` = CUDA-graph replay (device time). Backward FLOPs = 2.5x forward, forward+backward "
             "= 3.5x (FlashAttention's convention); causal FLOPs are halved."
             + (" A rung's `vs fastest SDPA` column: the fastest baseline's median there over the rung's (above 1: the "
                "rung is faster), `ahead` or `behind` where the two rows' CI95s do not overlap, `level` where they do."
                if plan.get("rungs") and plan.get("baselines") else ""), ""]
    for g in group_rows(rows, plan.get("axis", "seqlen")):
        xname = "B" if g["axis"] == "batch" else "N"
        head = [xname, "shape"] + g["impls"]
        ours, bases = versus_rungs(g["impls"], plan.get("rungs"))
        head += [f"{r} vs fastest SDPA" for r in ours]
        eff = g["axis"] == "batch"
        if eff:
            head += [f"{i} scaling eff." for i in g["impls"]]
        lines += [f"**{g['title']}**", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        first = {}
        for x in g["xs"]:
            shape = next(r["label"] for (i, xx), r in g["cells"].items() if xx == x)
            cells = [str(x), label_without_dtype(shape)]
            effs = []
            for impl in g["impls"]:
                r = g["cells"].get((impl, x))
                if r is None:
                    cells.append("")
                elif r.get("status") == "ok":
                    cells.append(f"{_fmt(r['median_ms'])} ({_fmt(r['tflops'], 3)})")
                else:
                    cells.append(str(r.get("status")))
                if eff:
                    if r is not None and r.get("status") == "ok":
                        first.setdefault(impl, (x, r["median_ms"]))
                        x0, t0 = first[impl]
                        effs.append(f"{t0 / x0 * x / r['median_ms']:.2f}")
                    else:
                        effs.append("")
            cells += [versus_text(versus_fastest(g, r, x, bases), named=len(bases) > 1) for r in ours]
            lines.append("| " + " | ".join(cells + effs) + " |")
        lines.append("")
    reasons = {}
    for r in rows:
        if r.get("status") != "ok":
            reasons.setdefault((r["impl"], r["status"], r.get("reason") or ""), []).append(r["label"])
    if reasons:
        lines.append("Cells without a time:")
        for (impl, status, reason), labels in reasons.items():
            lines.append(f"- {impl} {status} ({len(labels)} cells, e.g. {labels[0]}): {reason}")
        lines.append("")
    for r in oom_points(rows):
        lines.append(f"{r['impl']} ({r['mode']}, D={r['head_dim']}{', causal' if r['causal'] else ''}) first ran out "
                     f"of memory at N={r['seqlen_q']} ({r['label']}).")
    if plan.get("axis") == "batch":
        lines += ["", "Scaling efficiency = (time at the smallest batch / that batch x this batch) / measured time: "
                  "1.00 is linear; above 1, the larger batch uses the GPU better."]
    return "\n".join(lines).rstrip() + "\n"


MARK_BEGIN = "<!-- lab export {id} --format markdown: generated, do not edit -->"
MARK_END = "<!-- end lab export {id} -->"


def update_markdown_section(path: Path, sweep, text: str) -> bool:
    """Replace (or append) the sweep's generated section of a Markdown file between its markers.
    Returns True when the file changed."""
    path = Path(path)
    begin, end = MARK_BEGIN.format(id=sweep.id), MARK_END.format(id=sweep.id)
    old = path.read_text() if path.exists() else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in old and end in old:
        pre, rest = old.split(begin, 1)
        _, post = rest.split(end, 1)
        new = pre + block + post
    else:
        new = old.rstrip() + "\n\n" + block + "\n"
    if new != old:
        write_text_atomic(path, new)
    return new != old


def resolve_targets(ids, fmt: str, root: Path) -> list[tuple[str, object]]:
    """("sweep", Sweep) or ("run", Run) per id, in order; an id whose kind cannot be written in
    `fmt` is refused (LabError) before anything is written."""
    targets = []
    for ref in ids:
        if is_sweep(ref, root):
            if fmt == "json":
                raise LabError(f"{ref} is a sweep: it exports as csv, parquet or markdown")
            targets.append(("sweep", find_sweep(ref, root)))
        else:
            if fmt in ("parquet", "markdown"):
                raise LabError(f"--format {fmt} is for sweeps; {ref} is not a stored sweep (runs: csv or json)")
            targets.append(("run", find_run(ref, root)))
    return targets

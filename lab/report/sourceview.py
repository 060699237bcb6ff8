"""The run page's source view: the profiled code with a heat bar per line (its share of the warp
samples), the lines the findings cite marked with their class, and each hot line's SASS on demand.

It reads what `lab profile` stored: the `lines` table (lab.analysis.lines, per source line of each
kernel) and the `sources` table (the code as profiled: imported into the report by ncu, plus the
rung's own source). Colours come from Pygments' CudaLexer. A run without those tables (recorded
before they existed) gets a sentence saying so, never a guess from today's files.
"""

from __future__ import annotations

import html
import json
import os
from functools import lru_cache


from markupsafe import Markup

MAX_FILE_LINES = 2000   # beyond this even the kernel's own file is shown only around its hot lines
CONTEXT = 3             # lines shown around a hot line in a long file
SASS_LINES = 15         # the hottest lines whose SASS the page carries (a page over many runs stays light)


@lru_cache(maxsize=64)
def _highlighted(text: str) -> tuple[str, ...]:
    """One HTML string per source line (Pygments splits multi-line tokens at line ends)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import CudaLexer

    html = highlight(text, CudaLexer(), HtmlFormatter(nowrap=True))
    rows = html.split("\n")
    n = len(text.splitlines())
    return tuple(rows[:n]) + ("",) * max(0, n - len(rows))


def highlight_ahead(text: str) -> None:
    """Colour `text` now (kept by its text), for a page rendered later: lab.report.pages.warm."""
    _highlighted(text)


@lru_cache(maxsize=1)
def style_defs() -> Markup:
    from pygments.formatters import HtmlFormatter

    return Markup(HtmlFormatter(style="default").get_style_defs(".src .code"))


def _loads(v, default):
    try:
        return json.loads(v) if isinstance(v, str) else default
    except ValueError:
        return default


def source_context(rd, kernel: dict | None, findings: list[dict]) -> dict:
    """{'recorded': bool, 'reason', 'status', 'note', 'files': [{'name', 'path', 'rows': [...]}]} for the
    kernel's page (the slowest kernel's lines)."""
    lines_t = rd.table("lines")
    sources_t = rd.table("sources")
    if lines_t is None:
        return {"recorded": False, "reason": "No per-line data was stored with this run (it was recorded before "
                "`lab profile` kept the report's per-PC source counters); `lab analyze --lines 20` on its "
                "stored ncu report (or its run folder) shows them.", "files": []}
    idx = kernel.get("kernel_index") if kernel else None
    rows = [r for r in lines_t.rows if idx is None or r.get("kernel_index") == idx]
    status = next((r.get("status") for r in rows), None)
    note = next((r.get("note") for r in rows if r.get("note")), None)
    rows = [r for r in rows if (r.get("rank") or 0) >= 0]
    if not rows:
        return {"recorded": True, "status": status, "note": note or "No per-line data for this kernel.", "files": []}
    texts = {r["file"]: r["text"] for r in (sources_t.rows if sources_t is not None else []) if r.get("text")}
    by_base = {os.path.basename(f): t for f, t in texts.items()}
    cited: dict = {}
    for f in findings:
        if kernel and f.get("kernel") not in (None, kernel.get("kernel")):
            continue
        for c in _loads(f.get("lines"), []):
            cited.setdefault((c.get("file"), c.get("line")), []).append(f.get("class"))
    per_file: dict = {}
    for r in rows:
        if r.get("line") is None:
            continue
        per_file.setdefault(r["file"], {})[int(r["line"])] = r
    top = max((r.get("samples_pct") or 0.0) for r in rows) or 1.0
    with_sass = {id(r) for r in sorted(rows, key=lambda r: -(r.get("samples") or 0.0))[:SASS_LINES]}
    files = []
    for path, data in sorted(per_file.items(), key=lambda kv: -sum(r.get("samples_pct") or 0 for r in kv[1].values())):
        base = os.path.basename(path or "")
        text = texts.get(path) or by_base.get(base)
        share = sum(r.get("samples_pct") or 0.0 for r in data.values())
        if text is None:
            files.append({"name": base, "path": path, "share": share, "rows": [],
                          "missing": "the code of this file was not stored with the run"})
            continue
        code = _highlighted(text)
        n = len(code)
        if n <= MAX_FILE_LINES and not files:   # the kernel's own file whole; helpers around their hot lines
            shown = range(1, n + 1)
        else:
            keep = sorted({i for ln in data for i in range(ln - CONTEXT, ln + CONTEXT + 1) if 1 <= i <= n})
            shown = keep
        out_rows, prev = [], 0
        for ln in shown:
            r = data.get(ln)
            pct = (r.get("samples_pct") or 0.0) if r else 0.0
            out_rows.append({
                "n": ln, "gap": prev and ln != prev + 1, "code": Markup(code[ln - 1]), "pct": pct,
                "heat": round(100.0 * pct / top, 1) if r else 0.0,
                "classes": cited.get((base, ln), []),
                "stalls": list(_loads(r.get("stalls"), {}).items())[:3] if r else [],
                "sass": _loads(r.get("sass"), []) if r else [],
                "sass_html": _sass_table(_loads(r.get("instructions"), [])) if r and id(r) in with_sass else None,
                "inst_executed": r.get("inst_executed") if r else None,
                "flags": [(label, r.get(key)) for key, label in (("shared_wavefronts", "shared wavefronts"),
                                                                ("excess_global_sectors", "excess sectors"),
                                                                ("excess_shared_wavefronts", "excess wavefronts"),
                                                                ("local_inst_executed", "local instructions"),
                                                                ("divergent_branches", "divergent branches"))
                          if r and r.get(key)],
            })
            prev = ln
        files.append({"name": base, "path": path, "share": share, "rows": out_rows, "missing": None,
                      "html": _rows_html(base, out_rows)})
    sass_rows = [r for r in rows if r.get("line") is None][:40]   # built without -lineinfo: per PC
    return {"recorded": True, "status": status, "note": note, "files": files, "sass_rows": [
        {"pc": r.get("pc"), "pct": r.get("samples_pct") or 0.0, "sass": _loads(r.get("instructions"), []),
         "stalls": list(_loads(r.get("stalls"), {}).items())[:3]} for r in sass_rows],
        "style": style_defs()}


def _sass_table(instructions: list) -> Markup:
    """One line's instructions as table rows, escaped once here (a Jinja loop per instruction costs
    more than the rest of the page over many runs)."""
    return Markup("".join(f'<tr><td class="mono">{html.escape(str(pc))}</td><td class="mono">{html.escape(str(sass))}</td>'
                          f'<td class="num">{ex:,.0f}</td><td class="num">{smp:,.0f}</td></tr>'
                          for pc, sass, ex, smp in instructions))


def _rows_html(name: str, rows: list[dict]) -> Markup:
    """A file's table rows, built here in one pass: the code is Pygments' escaped HTML, every other
    text is escaped; a Jinja loop over hundreds of lines per page costs more than the page's rest."""
    e = html.escape
    out = []
    for r in rows:
        if r["gap"]:
            out.append('<tr class="gap"><td colspan="4">&hellip;</td></tr>')
        tags = "".join(f' <span class="tag">{e(str(c))}</span>' for c in r["classes"])
        heat = (f'<span class="bar" style="width: {r["heat"]}%"></span><span class="pct">{r["pct"]:.3g}%</span>'
                if r["pct"] else "")
        code = f"<code>{r['code']}</code>"
        if r["sass_html"] is not None:
            info = ""
            if r["stalls"] or r["flags"]:
                parts = [f"{e(str(k))} {v:,.0f}" for k, v in r["stalls"]] + [f"{e(k)} {v:,.0f}" for k, v in r["flags"]]
                info = (f'<p class="muted">stalls: {", ".join(parts)}; {(r["inst_executed"] or 0):,.0f} warp '
                        "instructions executed</p>")
            cell = (f"<details><summary>{code}{tags}</summary><div class=\"sass\">{info}<table><thead><tr><th>PC</th>"
                    '<th>SASS</th><th class="num">executed</th><th class="num">samples</th></tr></thead><tbody>'
                    f"{r['sass_html']}</tbody></table></div></details>")
        else:
            cell = code + tags
        cls = ' class="cited"' if r["classes"] else ""
        out.append(f'<tr{cls} id="L-{e(name)}-{r["n"]}"><td class="ln">{r["n"]}</td><td class="heat">{heat}</td>'
                   f'<td class="code">{cell}</td></tr>')
    return Markup("\n".join(out) + "\n")

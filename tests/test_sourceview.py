"""The run page's source view, from the tables `lab profile` stores (lines, sources, findings,
derived), built here from the shipped v1 run's real ncu report as the pipeline builds them."""

import json
import re
import shutil
from pathlib import Path

import pytest

from lab.analysis import findings as analysis
from lab.analysis import lines as source_lines
from lab.report import pages as report
from lab.store.runs import Run
from lab.ladder.registry import builtin
from conftest import EXAMPLES, REPO  # noqa: E402

BASELINE = builtin()[0]   # the ladder's first rung, whose shipped run this page is built from


def _report(run: Path) -> Path | None:
    """The run's ncu report as the store reads it (profile.ncu-rep.xz; an older run's plain one)."""
    rep = Run(run).artifact("ncu_report")
    return rep if rep is not None and rep.is_file() else None


def _v1_run(tmp_path: Path) -> Path:
    src = next((p for p in sorted(EXAMPLES.glob(f"*-{BASELINE.id}-*")) if _report(p) is not None), None)
    if src is None:
        pytest.skip("no shipped v1 run with its ncu report")
    run = tmp_path / "store" / src.name
    shutil.copytree(src, run)
    man = json.loads((run / "manifest.json").read_text())
    rep = _report(run)
    analyses = analysis.analyze_report(rep, problem=man["problem"])
    tables = {"derived": analysis.derived_frame(analyses), "findings": analysis.findings_frame(analyses),
              "lines": source_lines.lines_frame(source_lines.report_lines(rep)),
              # this report was recorded before --import-source yes: the rung's source, as lab profile keeps it
              "sources": source_lines.sources_frame(source_lines.source_texts(rep),
                                                    [REPO / "lab" / man["variant"]["source"]])}
    for name, df in tables.items():
        df.to_parquet(run / f"{name}.parquet", index=False)
        man["tables"][name] = f"{name}.parquet"
    (run / "manifest.json").write_text(json.dumps(man))
    return run


def test_source_view_shows_hot_lines_cited_lines_and_sass(tmp_path):
    run = _v1_run(tmp_path)
    html = next(iter(report.render(tmp_path / "out", root=run.parent).pages.values())).read_text()
    sec = html[html.index('<section id="source">'):html.index('<section id="timeline">')]
    rows = dict(re.findall(r'<tr(?: class="cited")? id="L-' + re.escape(BASELINE.source.name) + r'-(\d+)">(.*?)</tr>\n',
                           sec, re.S))
    heat = {int(n): float(m.group(1)) for n, r in rows.items() if (m := re.search(r'width: ([\d.]+)%', r))}
    top2 = sorted(heat, key=heat.get, reverse=True)[:2]
    text = {n: re.sub(r"<[^>]+>", "", rows[str(n)]) for n in top2}
    assert any("score +=" in t and "sK[" in t for t in text.values()), text   # S = Q K^T
    assert any("acc +=" in t and "sV[" in t for t in text.values()), text     # O += P V
    assert max(heat.values()) == 100.0
    for n in top2:
        assert 'class="cited"' in sec.split(f'id="L-{BASELINE.source.name}-{n}"')[0][-40:]
        assert "FFMA" in rows[str(n)] and "<details>" in rows[str(n)]
    assert '<span class="tag">bank-conflicts</span>' in sec and "class=\"k\"" in sec   # Pygments' keyword class


def test_run_without_lines_says_so(tmp_path):
    src = next(iter(sorted(EXAMPLES.glob("*-v2-*"))), None)
    if src is None:
        pytest.skip("no shipped v2 run")
    run = tmp_path / "store" / src.name
    shutil.copytree(src, run)
    # a run recorded before per-line evidence existed: no lines table in its manifest
    manifest = json.loads((run / "manifest.json").read_text())
    for name in ("lines", "sources"):
        if manifest.get("tables", {}).pop(name, None):
            (run / f"{name}.parquet").unlink()
    (run / "manifest.json").write_text(json.dumps(manifest))
    html = next(iter(report.render(tmp_path / "out", root=tmp_path / "store").pages.values())).read_text()
    sec = html[html.index('<section id="source">'):html.index('<section id="timeline">')]
    assert "No per-line data was stored with this run" in sec

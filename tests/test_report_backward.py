"""The run page of a backward run: a stored run built by the store's own code (lab.store.runs.create_run,
the tables of lab.pipeline.analysis_tables) from a real Nsight Compute report of SDPA's FlashAttention-2
backward (tests/fixtures/ncu/sdpa-flash-bwd.ncu-rep.xz, recorded by tests/planted/record_bwd.sh), and
the same report stored as a forward run, which must show no backward section."""

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from lab.analysis.metrics import duration_shares
from lab.measure.problem import Problem
from lab.measure.rates import MODE_FLOP_FACTOR
from lab.pipeline import analysis_tables
from lab.profilers import ncu
from lab.report import pages, rundata
from lab.store.manifest import Manifest
from lab.store.runs import create_run, list_runs

REPORT = Path(__file__).resolve().parent / "fixtures" / "ncu" / "sdpa-flash-bwd.ncu-rep.xz"
PROBLEM = Problem(2, 8, 1024, 1024, 128, False, "float16")   # tests/planted/record_bwd.sh's shape


class Section(HTMLParser):
    """The rows (cell texts) of one table of a page, and the visible text of one section."""

    def __init__(self, html: str, section_id: str):
        super().__init__()
        self.rows, self.text, self._depth, self._row, self._cell = [], [], 0, None, None
        self._id = section_id
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self._depth = self._depth + 1 if self._depth else (1 if dict(attrs).get("id") == self._id else 0)
        if not self._depth:
            return
        if tag == "tr":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if not self._depth:
            return
        if tag == "section":
            self._depth -= 1
        elif tag == "td" and self._cell is not None:
            self._row.append(re.sub(r"\s+", " ", "".join(self._cell)).strip())
            self._cell = None
        elif tag == "tr" and self._row:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._depth:
            self.text.append(data)
            if self._cell is not None:
                self._cell.append(data)

    @property
    def visible(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.text))


def _store(root: Path, mode: str | None) -> Path:
    """One run of the store holding the report, its analysis tables and a manifest of `mode`."""
    problem = PROBLEM.to_dict()
    analyses, tables = analysis_tables(REPORT, problem, None, mode or "fwd")
    durations_ms = sum(a.duration_ns for a in analyses) / 1e6   # the profiled kernels' own time
    run_id = f"20261125-000000-sdpa-flash-{mode or 'none'}-{PROBLEM.label()}"
    with create_run(run_id, root) as w:
        for name, df in tables.items():
            w.add_table(name, df)
        shutil.copy(REPORT, w.artifact_path("profile.ncu-rep.xz"))
        w.register_artifact("ncu_report", "profile.ncu-rep.xz")
        d = {"variant": {"id": "sdpa-flash", "title": "SDPA FlashAttention-2 backend (test-made manifest)"},
             "problem": problem, "run_id": run_id, "created_utc": "2026-11-25T00:00:00+00:00",
             "device": {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132,
                        "peaks": {"tensor_fp16_tflops": 989.4, "fp32_tflops": 66.9, "dram_tbps": 3.35}},
             "timing": {"unit": "ms", "median": durations_ms},
             "findings_summary": {"bottleneck": analyses[0].bottleneck, "count": sum(len(a.findings) for a in analyses)}}
        if mode:
            d["mode"] = mode
        return w.commit(Manifest.from_dict(d))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    runs = {mode: _store(root, mode) for mode in ("bwd", None)}
    out = tmp_path_factory.mktemp("out")
    rendered = pages.render(out, root=root)
    return root, runs, rendered


def _page(stored, mode):
    root, runs, rendered = stored
    return rendered.pages[runs[mode].name].read_text()


def test_backward_section_lists_each_kernel_with_its_share_verdict_and_lines(stored):
    html = _page(stored, "bwd")
    sec = Section(html, "backward")
    assert "Kernels of the backward" in sec.visible
    df = ncu.load_report(REPORT)
    rows = [r for r in sec.rows if len(r) == 7]
    assert len(rows) == len(df)                      # every kernel of the range, in launch order
    assert [int(r[0]) for r in rows] == sorted(df["kernel_index"].astype(int))
    shares = duration_shares(list(df.sort_values("kernel_index")["gpu__time_duration.sum"]))
    for r, share in zip(rows, shares):
        assert float(r[3].rstrip("%")) == pytest.approx(share, abs=0.06)
    main = next(r for r in rows if r[1].startswith("flash_bwd_dq_dk_dv_loop"))
    assert main[4] == "255" and max(float(r[3].rstrip("%")) for r in rows) == float(main[3].rstrip("%"))
    assert "register-pressure" in main[5] and "reduction-traffic" in main[5]   # verdict, then the others
    assert main[6].startswith("PC 0x")   # SDPA's module carries no line info: the verdict's SASS PCs
    convert = next(r for r in rows if r[1].startswith("flash_bwd_convert_dq_kernel"))
    assert "register-pressure" not in convert[5] and "reduction-traffic" not in convert[5]


def test_backward_flops_follow_flashattention_convention(stored):
    root, runs, _ = stored
    rd = rundata.load(next(r for r in list_runs(root) if r.id == runs["bwd"].name))
    assert rd.mode == "bwd" and rd.flops == pytest.approx(MODE_FLOP_FACTOR["bwd"] * PROBLEM.forward_flops)
    assert rd.tflops == pytest.approx(rd.flops / (rd.median_ms * 1e9))
    text = Section(_page(stored, "bwd"), "problem").visible
    assert f"{MODE_FLOP_FACTOR['bwd']}× the forward's" in text
    # tensor work executed against the forward's FLOPs: FA2's backward runs its five products on HMMA
    bwd = rundata.backward_kernels(rd)
    assert bwd["tensor_x_forward"] == pytest.approx(bwd["tensor_flops"] / PROBLEM.forward_flops)
    assert bwd["tensor_x_forward"] == pytest.approx(MODE_FLOP_FACTOR["bwd"], rel=0.01)   # no causal skip: all five


def test_forward_run_has_no_backward_section_and_the_index_shows_the_mode(stored):
    html = _page(stored, None)
    assert 'id="backward"' not in html and "Kernels of the backward" not in html
    root, runs, rendered = stored
    index = rendered.index.read_text()
    modes = {r[0]: r[3] for r in Section(index.replace("<section id=\"runs\">", "<section id=\"runs\">"), "runs").rows
             if len(r) > 3}
    assert modes == {runs["bwd"].name: "bwd", runs[None].name: "fwd"}

"""Numbers on the pages agree with each other, one test per class: the headline's baseline is of the
rung's own dtype, n-way is defined where it is given, DRAM bytes under the minimum are explained and
the roofline point stays honest, a prediction for another shape says so, units are consistent, and
the section set is named as the command named it. Runs are test-made (tests/test_report.py)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from lab.measure import rates
from lab.measure.problem import Problem
from lab.report import formatting, pages
from lab.report import rundata
from lab.store.runs import list_runs
from test_report import R1, R2, Parsed, make_run   # tests/ is on sys.path under pytest's default import mode


def _page(tmp_path, run) -> str:
    done = pages.render(tmp_path / "out", root=run.parent)
    return Parsed(done.pages[run.name].read_text()).visible


def _edit_manifest(run, fn):
    m = json.loads((run / "manifest.json").read_text())
    fn(m)
    (run / "manifest.json").write_text(json.dumps(m))


def _edit_metrics(run, **values):
    df = pd.read_parquet(run / "metrics.parquet")
    for k, v in values.items():
        df[k] = [v]
    df.to_parquet(run / "metrics.parquet", index=False)


def test_headline_leads_with_the_fastest_baseline_of_the_rungs_own_dtype(tmp_path):
    run = make_run(tmp_path / "s", R1, median=10.0)   # float32; a float16 flash at 0.01 ms is stored

    def add_fp32(m):
        m["baselines"].append({"name": "sdpa-efficient", "backend": "efficient", "dtype": "float32", "status": "ok",
                               "median_ms": 2.0, "ratio": 0.2})
    _edit_manifest(run, add_fp32)
    text = _page(tmp_path, run)
    lead = text[:text.index("Environment")]
    same = lead.index("fastest SDPA backend measured in float32, SDPA efficient (float32)")
    cross = lead.index("Across dtypes (not like for like: float16 against our float32)")
    assert same < cross and "5.00x slower than SDPA efficient (float32)" in lead
    index = Parsed((tmp_path / "out" / "index.html").read_text()).visible
    assert "0.200x SDPA efficient (float32)" in index and "cross-dtype: 0.00100x SDPA flash (float16)" in index


def test_no_same_dtype_baseline_is_said_not_replaced(tmp_path):
    run = make_run(tmp_path / "s", R1)   # only float16 ran; float32 flash is 'unavailable'
    lead = _page(tmp_path, run)
    assert "No SDPA backend ran in float32 here" in lead and "Across dtypes" in lead


def test_n_way_is_defined_wherever_it_is_given(tmp_path):
    run = make_run(tmp_path / "s", R1, findings=[{"class": "bank-conflicts", "title": "5.5-way shared-memory bank conflicts",
                                                    "evidence": {"lab__shared_bank_conflict_nway": 5.5}}])
    text = _page(tmp_path, run)
    assert formatting.NWAY_DEFINITION in text
    plain = make_run(tmp_path / "t", R1, findings=[{"class": "small-grid", "title": "grid"}])
    done = pages.render(tmp_path / "o2", root=plain.parent)
    assert formatting.NWAY_DEFINITION not in Parsed(done.pages[plain.name].read_text()).visible
    # the registry's prose uses the same n-way as the analysis (v2's recorded profile: 5.5-way)
    from lab.ladder import registry
    assert "13-way" not in " ".join(v.attacks + v.changed + v.predicted_gain for v in registry.variants())


def test_dram_bytes_under_the_minimum_are_explained_and_the_point_is_honest(tmp_path):
    run = make_run(tmp_path / "s", R1)
    prob = Problem(2, 4, 256, 256, 64, False, "float32")
    out_bytes = rates.min_bytes(prob) // 4
    # inputs read once, half of O written back: the rest was in L2 when the kernel ended
    _edit_metrics(run, **{"dram__bytes_read.sum": float(rates.min_bytes(prob) - out_bytes),
                          "dram__bytes_write.sum": float(out_bytes // 2)})
    text = _page(tmp_path, run)
    rd = rundata.load(list_runs(run.parent)[0])
    note = rundata.below_minimum_note(rd.primary_kernel, rd.problem)
    assert note and "still in L2 when the kernel ended" in note
    assert "Note: " + note in text                                   # in the memory section
    assert "placed at the minimum-bytes intensity" in text          # the roofline point, not beyond it
    ai = prob.forward_flops / rates.min_bytes(prob)
    assert f"at {formatting.charts.fmt_si(ai)} FLOP/byte" in text
    # at or above the minimum (make_run's own metrics: 3.25x the minimum): no note
    other = make_run(tmp_path / "t", R1)
    rd = rundata.load(list_runs(other.parent)[0])
    assert rundata.below_minimum_note(rd.primary_kernel, rd.problem) is None


@pytest.mark.parametrize("prediction, noted", [
    ("~300 TFLOP/s at B=8,H=32,N=4096,D=64", True), ("2x at B2 H4 N256 D64", False),
    ("2x at B2-H4-N256", False), ("1.5x, no shape named", False), ("3x at B=1, H=1, N=8192, D=64", True),
])
def test_a_prediction_for_another_shape_is_labelled(tmp_path, prediction, noted):
    prob = Problem(2, 4, 256, 256, 64, False, "float32")
    note = rundata.prediction_shape_note(prediction, prob)
    assert bool(note) == noted
    if noted:
        make_run(tmp_path / "s", R1, created="2026-01-01T00:00:00+00:00")
        b = make_run(tmp_path / "s", R2, created="2026-01-02T00:00:00+00:00")
        _edit_manifest(b, lambda m: m["variant"].update(predicted_gain=prediction))
        text = _page(tmp_path, b)
        assert f"(Note: {note}.)" in text and "measured on B2-H4-N256-D64-float32" in note
        index = Parsed((tmp_path / "out" / "index.html").read_text()).visible
        assert f"Note: {note}." in index


def test_units_are_consistent(tmp_path):
    run = make_run(tmp_path / "s", R1)
    _edit_manifest(run, lambda m: m["device"].update(memory_bytes=150_109_880_320, l2_bytes=62_914_560))
    done = pages.render(tmp_path / "out", root=run.parent)
    html = done.pages[run.name].read_text()
    text = Parsed(html).visible
    assert "Memory 140 GiB" in text and "L2 cache 60.0 MiB" in text          # capacities in binary units
    rd = rundata.load(list_runs(run.parent)[0])
    for row in rundata.memory_levels(rd.primary_kernel, rd.min_bytes):   # chart and table: one wording
        assert text.count(formatting.fmt_bytes(row["bytes"])) >= 2
    assert not re.search(r"\b\d{1,3},\d{3} MB\b", text)                        # never '2,219 MB' beside '2.22 GB'
    assert formatting.fmt_capacity(2 ** 30) == "1.00 GiB" and formatting.fmt_bytes(10 ** 9) == "1.00 GB"


def test_integer_stall_samples_print_as_integers(tmp_path):
    run = make_run(tmp_path / "s", R1, metrics=False)
    df = pd.DataFrame([{"kernel": "k", "gpu__time_duration.sum": 1e6, "smsp__pcsamp_warps_issue_stalled_imc_miss": 4.0,
                        "smsp__pcsamp_warps_issue_stalled_wait": 783648.0}])
    df.to_parquet(run / "metrics.parquet", index=False)
    _edit_manifest(run, lambda m: m.setdefault("tables", {}).update(metrics="metrics.parquet"))
    text = _page(tmp_path, run)
    assert "imc_miss: 4 " in text and "imc_miss: 4.00" not in text and "783,648" in text


def test_the_section_set_is_named_as_the_command_named_it():
    cmd = ["ncu", "--nvtx", "--set", "detailed", "-o", "profile.ncu-rep", "python"]
    assert rundata.section_set_label({"section_set": "default-lab", "command": cmd}) == "detailed (the lab's default)"
    assert rundata.section_set_label({"section_set": "full", "command": cmd[:2] + ["--set", "full"]}) == "full"
    assert rundata.section_set_label({"section_set": "lab-tables", "command": ["ncu", "--section", "X"]}) == "lab-tables"
    assert rundata.section_set_label(None) is None

"""A rung against the fastest SDPA baseline in a sweep's tables (lab.store.sweeps.versus): the ratio of medians and
whether the two rows' CI95s (which span the sweep's passes) separate them, read from sweeps shipped in
profiles/examples/ whose answer is known from paired timing (benchmarks/v9_notes.md, "Step 21": v9 and cuDNN are level
at 16,32,1024,64 causal bf16, 1.0001x interleaved, and v9 leads cuDNN by 10% at D=64 causal 16384)."""

from __future__ import annotations

import pytest

from lab.report.sweeppage import sweep_context
from lab.store.export import markdown_sweep
from lab.store.sweeps import add_ratios, find_sweep, group_rows, versus, versus_fastest, versus_rungs, versus_text
from conftest import REPO  # noqa: E402

V9_GRID = "20261128-164557-sweep-v9-fa-grid-h200"   # v9 against sdpa-cudnn, both timings, two passes
LADDER_GRID = "20261123-193827-sweep-fa-grid"        # v5 against every SDPA backend, one pass


def _group(sweep_id: str, **where):
    sweep = find_sweep(sweep_id, REPO / "profiles")
    groups = group_rows(add_ratios(sweep.rows(), sweep.plan_dict.get("baselines", [])))
    matching = [g for g in groups if all(next(iter(g["cells"].values()))[k] == v for k, v in where.items())]
    assert len(matching) == 1, [g["title"] for g in matching]
    return sweep, matching[0]


def test_a_level_cell_reads_level_and_a_clear_lead_reads_ahead():
    sweep, g = _group(V9_GRID, head_dim=64, causal=True, dtype="bfloat16", timing="graph", mode="fwd")
    (rung,) = sweep.plan_dict["rungs"]   # the sweep's one rung, named by its plan
    ours, bases = versus_rungs(g["impls"], sweep.plan_dict["rungs"])
    assert (ours, bases) == ([rung], ["sdpa-cudnn"])
    level = versus_fastest(g, rung, 1024, bases)
    assert level["verdict"] == "level" and level["baseline"] == "sdpa-cudnn" and level["ratio"] == pytest.approx(0.997, abs=0.002)
    lead = versus_fastest(g, rung, 16384, bases)
    assert lead["verdict"] == "ahead" and lead["ratio"] > 1.05


def test_the_fastest_baseline_is_the_one_compared_and_a_clear_loss_reads_behind():
    sweep, g = _group(LADDER_GRID, head_dim=64, causal=False, dtype="float16", timing="events", mode="fwd")
    (rung,) = sweep.plan_dict["rungs"]
    ours, bases = versus_rungs(g["impls"], sweep.plan_dict["rungs"])
    assert ours == [rung] and "sdpa-flash" in bases and "sdpa-math" in bases
    v = versus_fastest(g, rung, 1024, bases)
    fastest = min(bases, key=lambda b: g["cells"][(b, 1024)]["median_ms"])
    assert v["baseline"] == fastest and v["verdict"] == "behind" and v["ratio"] < 0.9
    assert versus_text(v, named=True).endswith(f"behind ({fastest})")


def test_no_verdict_without_both_intervals_and_no_cell_without_both_times():
    row = {"status": "ok", "median_ms": 1.0, "ci95_low_ms": 0.99, "ci95_high_ms": 1.01}
    base = {"status": "ok", "median_ms": 1.2, "ci95_low_ms": 1.19, "ci95_high_ms": 1.21}
    assert versus(row, base)["verdict"] == "ahead" and versus(base, row)["verdict"] == "behind"
    assert versus(row, {**base, "ci95_low_ms": 1.005})["verdict"] == "level"   # the intervals overlap
    assert versus(row, {**base, "ci95_low_ms": None}) == {"ratio": pytest.approx(1.2), "verdict": None}
    assert versus({**row, "status": "failed"}, base) is None and versus(row, None) is None
    assert versus_text(None) == "n/a" and versus_text({"ratio": 1.2, "verdict": None}) == "1.200x"


def test_the_tables_carry_the_column_where_a_sweep_has_rungs_and_baselines():
    sweep = find_sweep(V9_GRID, REPO / "profiles")
    (rung,) = sweep.plan_dict["rungs"]
    md = markdown_sweep(sweep)
    assert f"| {rung} vs fastest SDPA |" in md and "| 0.997x level |" in md
    page = sweep_context(sweep)
    group = next(g for g in page["groups"] if g["versus_rungs"])
    assert group["versus_rungs"] == [rung] and all(len(t["versus"]) == 1 for t in group["table"])


def test_lab_sweep_s_summary_gives_each_rung_its_verdict(capsys):
    from lab.cli import _print_sweep_summary

    sweep = find_sweep(V9_GRID, REPO / "profiles")
    (rung,) = sweep.plan_dict["rungs"]
    _print_sweep_summary(sweep)
    err = " ".join(capsys.readouterr().err.split())
    assert f"{rung} vs fastest SDPA" in err and "(events timing: call latency)" in err
    # by call latency the fa-grid's D=64 causal 1024 bf16 cell is ahead (SDPA's dispatch is in its time)
    assert "B16-H32-N1024-D64-causal-bfloat16 │ fwd │ 308 │ 294 │ 1.047x ahead" in err

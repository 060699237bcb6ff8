"""`lab sweep` times each cell in passes over its problem's cells (lab.sweeping.measure_unit) and pools
them into one row (lab.measure.sweep.combine_passes), on the CPU with the sweep tests' fake measurer
(tests/sweep_fakes.py): the passes' order, the pooled row, a refusal in a later pass, a kill mid-unit
and --resume, workers, old sweeps without passes, and `lab sweep compare` fed the pooled intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.measure import sweepplan
from lab.measure.bench import summarize
from lab.measure.problem import Problem
from lab.measure.sweep import combine_passes, timed_row
from lab.measure.sweepplan import Cell
from lab.store import sweeps as store
from conftest import REPO  # noqa: E402
from test_sweep import lab  # noqa: E402  `lab ARGS` with the fake measurer

SHAPES = ["--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash,standard"]
CELL = Cell("sdpa-flash", Problem(1, 2, 64, 64, 64, False, "float16"), "fwd")


def _order(path: Path) -> dict[str, list[str]]:
    """Per journal part, the cell keys in the order its measurer was called."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        part, key = line.split("|", 1)
        out.setdefault(part, []).append(key)
    return out


def _check_passes_separated(calls: list[str], plan: sweepplan.Plan, passes: int) -> None:
    """Each problem's cells measured `passes` times, every cell once before any twice, problem by problem."""
    units = [[c.key for c in plan.cells() if c.problem == p] for p in plan.problems]
    by_unit = {k: i for i, u in enumerate(units) for k in u}
    i = 0
    while i < len(calls):
        unit = units[by_unit[calls[i]]]
        run = calls[i:i + passes * len(unit)]
        assert run == unit * passes, f"the passes of {unit} ran as {run}"
        i += len(run)


def test_every_cell_of_a_problem_is_measured_once_before_any_twice(tmp_path):
    order = tmp_path / "order.txt"
    r = lab("sweep", *SHAPES, env={"LAB_TEST_ORDER": str(order)}, root=tmp_path)
    assert r.returncode == 0, r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    plan = sweepplan.Plan.from_dict(sw.plan_dict)
    assert plan.passes == sweepplan.DEFAULT_PASSES == 2
    calls = _order(order)["main"]
    assert len(calls) == 2 * len(plan.cells())
    _check_passes_separated(calls, plan, 2)
    assert "pass 2 of 2" in r.stderr   # the progress says which pass


def test_the_row_pools_its_passes(tmp_path):
    """8% drift from pass to pass (LAB_TEST_DRIFT): the row's median is the pooled repetitions', its
    CI95 spans both passes' medians, its reps the total; one pass alone would not have covered it."""
    r = lab("sweep", *SHAPES, "--passes", "3", "--reps", "30", env={"LAB_TEST_DRIFT": "8"}, root=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "passes: 8 of 8 timed rows had passes more than 3% apart (the widest 16.0%)" in r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    ok = [x for x in sw.rows() if x["status"] == "ok"]
    assert ok
    for x in ok:
        m = x["pass_medians_ms"]
        assert x["passes"] == 3 and len(m) == 3 and isinstance(m, list)   # a list again after Parquet
        assert m[1] == pytest.approx(m[0] * 1.08) and m[2] == pytest.approx(m[0] * 1.16)
        assert x["reps"] == 30   # 10 repetitions a pass
        assert x["ci95_low_ms"] <= min(m) and x["ci95_high_ms"] >= max(m)
        assert min(m) < x["median_ms"] < max(m)
        assert x["min_ms"] <= min(m) and x["max_ms"] >= max(m)
        assert x["tflops"] == pytest.approx(x["flops"] / (x["median_ms"] * 1e-3) / 1e12)
        assert x["time_per_token_us"] == pytest.approx(x["median_ms"] * 1e3 / (x["batch"] * x["seqlen_q"]))
        assert "samples_ms" not in x   # the repetitions are pooled, never stored


def test_each_row_says_when_its_cell_finished_and_how_long_each_pass_took_on_the_host(tmp_path):
    """measured_utc and pass_wall_s: a cell that takes 0.05 s more a pass on the host (LAB_TEST_SLOW) says
    so in each pass, and the problems' rows are stamped in the order they were measured."""
    from datetime import datetime

    r = lab("sweep", *SHAPES, env={"LAB_TEST_SLOW": "*:0.05"}, root=tmp_path)
    assert r.returncode == 0, r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    rows = sw.table().to_dict("records")   # read back from Parquet
    assert rows and all(len(x["pass_wall_s"]) == 2 and min(x["pass_wall_s"]) >= 0.05 for x in rows)
    first, last = sweepplan.Plan.from_dict(sw.plan_dict).problems[0].label(), rows[-1]["label"]
    when = {x["label"]: datetime.fromisoformat(x["measured_utc"].replace("Z", "+00:00")) for x in rows}
    assert first != last and when[first] < when[last]


def test_combine_pools_samples_and_falls_back_to_pass_statistics():
    rows = []
    for samples in ([1.0, 1.1, 0.9, 1.0, 1.05, 0.95], [1.2, 1.3, 1.1, 1.2, 1.25, 1.15]):
        rows.append([timed_row(CELL, summarize(samples, 2, True), 100, None)])
    (row,) = combine_passes(rows)
    pooled = summarize([*rows[0][0]["samples_ms"], *rows[1][0]["samples_ms"]], 2, True)
    assert row["median_ms"] == pooled.median == pytest.approx(1.1)
    assert row["reps"] == 12 and row["passes"] == 2 and row["pass_medians_ms"] == [1.0, 1.2]
    assert (row["ci95_low_ms"], row["ci95_high_ms"]) == (0.9, 1.3)   # the union of the passes' intervals
    assert "samples_ms" not in row
    for r in rows:   # a measurer that gives no samples: the median of the pass medians, pooled mean and std
        r[0].pop("samples_ms")
    (row,) = combine_passes(rows)
    assert row["median_ms"] == pytest.approx(1.1) and row["reps"] == 12
    assert row["mean_ms"] == pytest.approx(1.1)
    assert row["std_ms"] == pytest.approx(pooled.std)
    (one,) = combine_passes(rows[:1])   # one pass: its row as it was
    assert one["passes"] == 1 and one["median_ms"] == 1.0 and one["ci95_high_ms"] == rows[0][0]["ci95_high_ms"]


def test_a_refusal_in_the_second_pass_refuses_the_row(tmp_path):
    r = lab("sweep", *SHAPES, env={"LAB_TEST_REFUSE": "sdpa-flash:2"}, root=tmp_path)
    (sw,) = store.list_sweeps(tmp_path)
    flash = [x for x in sw.rows() if x["impl"] == "sdpa-flash"]
    assert flash and all(x["status"] == "failed" for x in flash)
    assert all(x["reason"].startswith("pass 2 of 2: refused (fake)") for x in flash)
    assert all(x.get("median_ms") is None for x in flash)   # no time from the pass that missed it
    assert all(x["status"] == "ok" and x["passes"] == 2 for x in sw.rows() if x["impl"] == "standard")
    r = lab("sweep", *SHAPES, env={"LAB_TEST_REFUSE": "sdpa-flash:1"}, root=tmp_path)
    first = store.list_sweeps(tmp_path)[-1]
    flash = [x for x in first.rows() if x["impl"] == "sdpa-flash"]
    assert flash and all(x["status"] == "failed" and x["reason"].startswith("refused (fake)") for x in flash)


def test_a_cell_nothing_timed_is_not_measured_again(tmp_path):
    order = tmp_path / "order.txt"
    r = lab("sweep", *SHAPES, env={"LAB_TEST_ORDER": str(order), "LAB_TEST_REFUSE": "sdpa-flash:1"}, root=tmp_path)
    assert r.returncode == 0, r.stderr
    calls = _order(order)["main"]
    flash = [k for k in calls if k.startswith("sdpa-flash")]
    assert len(flash) == 2 and len(set(flash)) == 2   # two problems, one pass each


def test_resume_after_a_kill_mid_unit_measures_the_unit_again_in_passes(tmp_path):
    # 2 cells a problem, 4 calls in 2 passes: killed at call 7, the second problem's second pass
    r = lab("sweep", *SHAPES, env={"LAB_TEST_DIE": "main:7"}, root=tmp_path, process=True)
    assert r.returncode < 0
    (sw,) = store.list_sweeps(tmp_path)
    assert len(sw.done_cells()) == 2 and {x["passes"] for x in sw.rows()} == {2}
    order = tmp_path / "order.txt"
    r = lab("sweep", "--resume", sw.id, env={"LAB_TEST_ORDER": str(order)}, root=tmp_path)
    assert r.returncode == 0, r.stderr
    sw = store.find_sweep(sw.id, tmp_path)
    assert sw.manifest["status"] == "complete"
    assert {x["passes"] for x in sw.rows() if x["status"] == "ok"} == {2}
    assert len(_order(order)["main"]) == 4   # the unit in flight, both passes again


def test_resume_refuses_passes(tmp_path):
    assert lab("sweep", *SHAPES, "--passes", "1", root=tmp_path).returncode == 0
    (sw,) = store.list_sweeps(tmp_path)
    assert {x["passes"] for x in sw.rows() if x["status"] == "ok"} == {1}
    r = lab("sweep", "--resume", sw.id, "--passes", "2", root=tmp_path)
    assert r.returncode == 2 and "--passes" in r.stderr


@pytest.mark.parametrize("passes", ["0", "16", "x"])
def test_bad_passes_are_refused(tmp_path, passes):
    r = lab("sweep", *SHAPES, "--passes", passes, "--reps", "30", root=tmp_path)
    assert r.returncode == 2 and "passes" in r.stderr.lower() and "Traceback" not in r.stderr
    assert not store.list_sweeps(tmp_path)   # nothing half-written


def test_workers_measure_their_units_in_passes(tmp_path):
    order = tmp_path / "order.txt"
    args = ["sweep", "--shape", "1,2,{64,128,256,512},64", "--baselines", "sdpa-flash,standard", "--gpus", "0,1"]
    r = lab(*args, env={"LAB_TEST_ORDER": str(order), "LAB_TEST_BARRIER": f"{tmp_path / 'barrier'}:2"},
            root=tmp_path)
    assert r.returncode == 0, r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    plan = sweepplan.Plan.from_dict(sw.plan_dict)
    parts = _order(order)
    assert len(parts) == 2
    for calls in parts.values():
        _check_passes_separated(calls, plan, 2)
    assert {x["passes"] for x in sw.rows() if x["status"] == "ok"} == {2}
    assert {x["worker"] for x in sw.rows()} == set(parts)


def test_a_pass_gets_its_share_of_reps_and_budget():
    p = sweepplan.build_plan(rungs={}, baselines=["sdpa-flash"], shapes=["1,2,64,64"], preset=None, batches=None,
                             heads_kv=None, causal=None, dtypes=[], modes=["fwd"], timing="auto", reps=30, warmup=5,
                             cell_budget_s=0.4, shard=None, yes=False, passes=3)
    one = p.pass_plan()
    assert (one.reps, one.cell_budget_s, one.passes) == (10, pytest.approx(0.4 / 3), 1)
    assert one.cells() == p.cells() and one.timing == p.timing and one.warmup == p.warmup
    single = sweepplan.Plan.from_dict({k: v for k, v in p.to_dict().items() if k != "passes"})
    assert single.passes == 1 and single.pass_plan() is single   # a plan stored before passes: one burst


def test_shipped_sweeps_without_passes_read_export_and_compare(tmp_path):
    """Rows of sweeps before passes have none: read as one pass; compare and export still work."""
    ex = REPO / "profiles" / "examples"
    one, four = ex / "20261126-191233-sweep-scale-1", ex / "20261126-221749-sweep-scale-4"
    a, b = store.Sweep(one), store.Sweep(four)
    assert sweepplan.Plan.from_dict(a.plan_dict).passes == 1
    assert a.table()["passes"].isna().all()
    result = store.compare_sweeps(a, b)
    assert result["rows_compared"] and result["pass_spread_a"] == {"rows_in_passes": 0, "passes_apart": 0,
                                                                  "max_pass_spread": None}
    r = lab("export", str(four), "--format", "markdown")
    assert r.returncode == 0 and "Median of up to" in r.stdout


def test_compare_with_drift_inside_the_pooled_interval(tmp_path):
    """B's second pass ran 8% slower than its first (and than all of A): one burst's CI95 would call
    every row changed; the pooled interval spans the drift, and compare counts the rows whose passes
    were that far apart."""
    assert lab("sweep", *SHAPES, root=tmp_path).returncode == 0
    assert lab("sweep", *SHAPES, env={"LAB_TEST_DRIFT": "8"}, root=tmp_path).returncode == 0
    a, b = store.list_sweeps(tmp_path)
    r = lab("sweep", "compare", a.id, b.id, "--json", root=tmp_path)
    result = json.loads(r.stdout)
    n = result["rows_compared"]
    assert n and not result["differing"] and result["overlapping"] == n
    assert result["pass_spread_b"]["passes_apart"] == n and result["pass_spread_a"]["passes_apart"] == 0
    assert result["pass_spread_b"]["max_pass_spread"] == pytest.approx(1.08)
    r = lab("sweep", "compare", a.id, b.id, root=tmp_path)
    assert f"B: {n} of {n} rows timed in passes had passes more than 3% apart (the widest 8.0%)" in r.stdout


def _loaded_row(samples, mhz, share):
    t = summarize(samples, 2, True)
    t.checks = {"under_load_ms": 50.0, "load_sm_clock_mhz": mhz, "load_power_capped_share": share}
    return [timed_row(CELL, t, 100, None)]


def test_rows_under_load_carry_what_nvml_read_and_pool_it_over_passes():
    """A row timed under load (lab.measure.timed, UNDER LOAD) says the stretch and NVML's reading; pooled, the
    clock is the passes' median and the capped share their mean. A row timed without has none of the columns."""
    plain = timed_row(CELL, summarize([1.0, 1.1, 0.9, 1.0, 1.05, 0.95], 2, True), 100, None)
    assert not {"under_load_ms", "load_sm_clock_mhz", "load_power_capped_share"} & set(plain)
    (row,) = combine_passes([_loaded_row([1.0, 1.1, 0.9, 1.0, 1.05, 0.95], 1740, 1.0),
                             _loaded_row([1.2, 1.3, 1.1, 1.2, 1.25, 1.15], 1760, 0.5)])
    assert row["under_load_ms"] == 50.0 and row["load_sm_clock_mhz"] == 1750 and row["load_power_capped_share"] == 0.75


def test_a_sweep_under_load_keeps_the_stretch_in_its_plan_and_says_so(tmp_path):
    """`lab sweep --under-load MS`: the plan stores it (so --resume and the shards measure alike), it keys the plan
    apart from one without (shards of the two never merge), a plan without it keys as before it existed, the
    Markdown export says it, and --resume refuses it as any option of the plan."""
    import hashlib

    r = lab("sweep", *SHAPES, "--under-load", "50", root=tmp_path)
    assert r.returncode == 0, r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    plan = sweepplan.Plan.from_dict(sw.plan_dict)
    assert plan.under_load_ms == 50
    plain = sweepplan.Plan.from_dict({**sw.plan_dict, "under_load_ms": 0.0})
    assert plan.key() != plain.key()
    old = plain.to_dict()   # the key as computed before the field existed
    for k in ("shard", "command", "extra", "under_load_ms"):
        old.pop(k)
    assert plain.key() == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    shipped = store.Sweep(REPO / "profiles" / "examples" / "20261126-191233-sweep-scale-1")
    assert sweepplan.Plan.from_dict(shipped.plan_dict).under_load_ms == 0.0
    md = lab("export", sw.id, "--format", "markdown", root=tmp_path).stdout
    assert "each behind 50 ms of its own calls back to back (under load" in md
    resumed = lab("sweep", "--resume", sw.id, "--under-load", "50", root=tmp_path)
    assert resumed.returncode == 2 and "drop --under-load" in resumed.stderr
    bad = lab("sweep", *SHAPES, "--under-load", "nan", root=tmp_path)
    assert bad.returncode == 2 and "not a number of milliseconds" in bad.stderr


def test_the_sweep_page_says_a_sweep_ran_under_load(tmp_path):
    from lab.report.pages import render

    assert lab("sweep", *SHAPES, "--under-load", "50", root=tmp_path).returncode == 0
    (sw,) = store.list_sweeps(tmp_path)
    render(tmp_path / "reports", root=tmp_path)
    page = next((tmp_path / "reports").rglob(f"*{sw.id}*.html")).read_text()
    assert "each repetition behind 50.0 ms of its own calls back to back" in page


def test_sweep_compare_warns_when_one_sweep_ran_under_load_and_the_other_did_not(tmp_path):
    assert lab("sweep", *SHAPES, root=tmp_path).returncode == 0
    assert lab("sweep", *SHAPES, "--under-load", "50", root=tmp_path).returncode == 0
    idle, loaded = store.list_sweeps(tmp_path)
    result = store.compare_sweeps(idle, loaded)
    assert (result["under_load_ms_a"], result["under_load_ms_b"]) == (0.0, 50.0)
    r = lab("sweep", "compare", idle.id, loaded.id, root=tmp_path)
    assert "A on an idle GPU, B under load (50 ms before each repetition)" in r.stderr
    same = lab("sweep", "compare", idle.id, idle.id, root=tmp_path)
    assert "under load" not in same.stderr


def test_the_printed_summary_of_a_graph_timed_sweep_under_load_tabulates_its_graph_rows(capsys):
    """`lab sweep --timing graph` has no events rows: the summary tabulates the graph rows and says so (it printed an
    empty table titled "events timing" on the GPU, 20261128-114627), and a sweep under load says it in the title."""
    from lab.cli import _print_sweep_summary

    _print_sweep_summary(store.Sweep(REPO / "profiles" / "examples" / "20261128-114627-sweep-v9-fa-grid-under-load-h200"))
    err = " ".join(capsys.readouterr().err.split())
    assert "graph timing: device time" in err and "behind 50 ms of its own calls" in err
    assert "events timing" not in err and "B16-H32-N1024-D64-causal-float16" in err
    _print_sweep_summary(store.Sweep(REPO / "profiles" / "examples" / "20261128-123359-sweep-v9-fa-grid-h200"))
    err = " ".join(capsys.readouterr().err.split())
    assert "events timing: call latency" in err and "behind" not in err

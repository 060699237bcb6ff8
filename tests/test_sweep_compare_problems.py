"""`lab sweep compare` tells a problem that moved as a whole (every implementation of one shape, measured
together by one worker, the same way: the machine while it ran) from a row that changed on its own, and
gives a rung's changed row its verdict against each baseline in A and in B. On the two real shipped
target sweeps (one GPU, two GPUs) and on sweeps made from their rows through the store's own writer."""

from __future__ import annotations

import pytest

from lab.store import sweeps as store
from conftest import REPO, lab_here  # noqa: E402

EXAMPLES = REPO / "profiles" / "examples"
ONE, TWO = "20261127-113210-sweep-scale-1", "20261127-113900-sweep-scale-2"
PROBLEM = "B32-H16-N512-D128-causal-bfloat16"   # 4 implementations, 14 timed rows, v6's 2 unsupported rows


def _rungs() -> tuple[str, str]:
    """The shipped sweeps' two rungs, named by their rows (the registry's data, not this file): the one
    without a backward (its bwd rows unsupported; v6) and the one with (v7)."""
    rows = [r for r in store.Sweep(EXAMPLES / ONE).rows() if r["label"] == PROBLEM and r["impl_kind"] == "rung"]
    fwd_only = {r["impl"] for r in rows if r["status"] == "unsupported"}
    (with_bwd,) = {r["impl"] for r in rows} - fwd_only
    (fwd_only,) = fwd_only
    return fwd_only, with_bwd


FWD_ONLY, WITH_BWD = _rungs()


@pytest.fixture(scope="module")
def shipped():
    a, b = store.Sweep(EXAMPLES / ONE), store.Sweep(EXAMPLES / TWO)
    return a, b, store.compare_sweeps(a, b)


def test_the_shipped_pair_names_the_problems_that_moved_as_a_whole(shipped):
    _, _, result = shipped
    # the counts that existed before are untouched: 61 rows changed (benchmarks/RESULTS.md, ninth session)
    assert len(result["differing"]) == 61 and result["rows_compared"] == 557
    moved = {p["problem"]: p for p in result["problems_moved_as_a_whole"]}
    # the four RESULTS.md names (every implementation of them moved the same way), and one more that leaned
    # 11 of 14 rows slower at a median of 1.051 without any row passing both CI95s and 3%
    assert set(moved) == {"B32-H16-N512-D128-causal-bfloat16", "B32-H16-N512-D128-bfloat16",
                          "B32-H32-N512-D64-causal-bfloat16", "B32-H32-N512-D64-causal-float16",
                          "B16-H32-N1024-D64-causal-float16"}
    assert moved[PROBLEM]["direction"] == "faster" and moved[PROBLEM]["rows_faster"] == 14
    assert moved[PROBLEM]["median_ratio_b_over_a"] == pytest.approx(0.900, abs=5e-4)
    assert moved["B32-H16-N512-D128-bfloat16"]["direction"] == "slower"
    assert moved["B16-H32-N1024-D64-causal-float16"]["changed_rows"] == 0
    in_moved = [d for d in result["differing"] if d["label"] in moved]
    assert len(in_moved) == 33
    # every changed row is one finding or the other, and the split follows the threshold from the median
    assert len(result["moved_with_problem"]) + len(result["on_their_own"]) == 61
    for d in result["differing"]:
        off = abs(d["ratio"] / d["problem_median_ratio"] - 1) * 100 > result["threshold_pct"]
        assert d["finding"] == ("own" if d["label"] not in moved else "against_problem" if off else "with_problem")
    assert len(result["moved_with_problem"]) == 14
    findings = {(d["impl"], d["label"], d["mode"], d["timing"]): d["finding"] for d in result["differing"]}
    assert findings[(WITH_BWD, PROBLEM, "fwd", "graph")] == "with_problem"          # 0.927x in a 0.900x problem
    assert findings[("sdpa-cudnn", PROBLEM, "fwd", "events")] == "against_problem"   # 0.695x: cuDNN's +58 us
    assert findings[(FWD_ONLY, "B4-H16-N4096-D128-float16", "fwd", "events")] == "own"
    # problems no row of which changed still list their median (the table a reader can sort by)
    assert len(result["problems"]) == 48


def test_the_shipped_pair_gives_each_rungs_changed_row_its_baseline_verdicts(shipped):
    _, _, result = shipped
    by = {(d["impl"], d["label"], d["mode"], d["timing"]): d for d in result["differing"]}
    graph = by[(WITH_BWD, PROBLEM, "fwd", "graph")]
    verdicts = {v["baseline"]: v for v in graph["baselines"]}
    assert set(verdicts) == {"sdpa-cudnn", "sdpa-flash"}
    # the problem moved; v7's standing against both baselines (graph replay) did not
    assert not any(v["changed"] for v in verdicts.values())
    assert verdicts["sdpa-cudnn"]["change"] == pytest.approx(verdicts["sdpa-cudnn"]["b"] / verdicts["sdpa-cudnn"]["a"])
    events = {v["baseline"]: v for v in by[(WITH_BWD, PROBLEM, "fwd", "events")]["baselines"]}
    assert events["sdpa-cudnn"]["changed"] and events["sdpa-cudnn"]["change"] < 0.8   # cuDNN's events moved more
    assert all(d["baselines"] == [] for d in result["differing"] if d["impl"].startswith("sdpa-"))


def test_the_shipped_pair_prints_the_problems_then_the_rows_on_their_own():
    r = lab_here("sweep", "compare", ONE, TWO, "--profiles", EXAMPLES)
    assert r.returncode == 1, r.stdout + r.stderr   # rows still differ: the exit code keeps its meaning
    out = r.stdout
    assert "61 differ (beyond CI95 and 3%)" in out
    assert "5 problems moved as a whole (>= 75% of its rows and implementations beyond 1.5% the same way" in out and "14 changed rows moved with their problem" in out
    assert (f"  {PROBLEM}: 14 of 14 rows faster in B, median ratio 0.900; changed rows: 4 moved with its problem, "
            "8 against it") in out
    assert "47 changed rows on their own (19 against their problem's move, more than 3% from its median):" in out
    assert ("sdpa-cudnn B32-H16-N512-D128-causal-bfloat16 fwd events: 0.1917 vs 0.1333 ms (0.695x), 0.773x its "
            "problem's median 0.900") in out
    assert "vs sdpa-cudnn 0.984x -> 0.769x (changed)" in out


# ------------------------------------------------------------------ sweeps made from the shipped rows

def _timed(r: dict, f: float) -> dict:
    """The row timed `f` times as long with a CI95 of +-0.1%: beyond another such row's CI95 at any f != 1."""
    m = r["median_ms"] * f
    return dict(r, median_ms=m, mean_ms=m, ci95_low_ms=m * 0.999, ci95_high_ms=m * 1.001,
                pass_medians_ms=[p * f for p in r["pass_medians_ms"] or []] or None)


def _stored(root, name: str, rows: list[dict]) -> store.Sweep:
    """`rows` stored as a sweep of the shipped one-GPU sweep's plan, by the store's writer."""
    like = store.Sweep(EXAMPLES / ONE).manifest
    sw = store.create_sweep(name, {k: like[k] for k in ("plan", "plan_key", "device", "software", "lab_version")},
                            root)
    sw.append_rows(rows)
    return sw.finalize()


def _pair(tmp_path, keep, change):
    """A and B from the one-GPU sweep's rows that `keep` keeps; B's ok rows timed change(row) times as long."""
    rows = [r for r in store.Sweep(EXAMPLES / ONE).rows() if keep(r)]
    a = _stored(tmp_path, "a", [_timed(r, 1.0) if r["status"] == "ok" else r for r in rows])
    b = _stored(tmp_path, "b", [_timed(r, change(r)) if r["status"] == "ok" else r for r in rows])
    return a, b


def test_a_kernel_change_is_its_own_finding_against_the_baselines(tmp_path):
    """v7 10% slower in one problem, its baselines and v6 not: v7's rows are its own change, and its verdict
    against each baseline moved by the same 10%."""
    a, b = _pair(tmp_path, lambda r: r["label"] == PROBLEM, lambda r: 1.10 if r["impl"] == WITH_BWD else 1.0)
    result = store.compare_sweeps(a, b)
    assert not result["problems_moved_as_a_whole"] and not result["moved_with_problem"]
    assert len(result["differing"]) == 4 == len(result["on_their_own"])   # v7: fwd, fwd graph, bwd, fwd+bwd
    for d in result["differing"]:
        assert d["impl"] == WITH_BWD and d["finding"] == "own"
        assert {v["baseline"] for v in d["baselines"]} == {"sdpa-cudnn", "sdpa-flash"}
        assert all(v["changed"] and v["change"] == pytest.approx(1 / 1.10) for v in d["baselines"])


def test_a_whole_problem_moved_with_one_row_against_it_and_a_refused_row(tmp_path):
    """Every row 10% faster, v7's graph row 20%; in B cuDNN's forward (events) refused; rows without
    measured_utc (sweeps before it): the problem moved as a whole, v7's graph row moved against it."""
    rows = [{k: v for k, v in r.items() if k != "measured_utc"}
            for r in store.Sweep(EXAMPLES / ONE).rows() if r["label"] == PROBLEM]
    graph = lambda r: r["impl"] == WITH_BWD and r["mode"] == "fwd" and r["timing"] == "graph"   # noqa: E731
    refused = lambda r: r["impl"] == "sdpa-cudnn" and r["mode"] == "fwd" and r["timing"] == "events"   # noqa: E731
    a = _stored(tmp_path, "a", [_timed(r, 1.0) if r["status"] == "ok" else r for r in rows])
    b = _stored(tmp_path, "b", [dict(r, status="refused", reason="constructed", median_ms=None) if refused(r) else
                                _timed(r, 0.80 if graph(r) else 0.90) if r["status"] == "ok" else r for r in rows])
    assert b.table()["measured_utc"].isna().all()
    result = store.compare_sweeps(a, b)
    assert result["only_in_a"] == 1 and result["rows_compared"] == 13 and len(result["differing"]) == 13
    (moved,) = result["problems_moved_as_a_whole"]
    assert (moved["problem"], moved["direction"], moved["rows_faster"]) == (PROBLEM, "faster", 13)
    assert moved["median_ratio_b_over_a"] == pytest.approx(0.90)
    assert (moved["changed_with_problem"], moved["changed_against_problem"]) == (12, 1)
    (own,) = result["on_their_own"]
    assert graph(own) and own["finding"] == "against_problem" and own["vs_problem"] == pytest.approx(0.80 / 0.90)
    for d in result["moved_with_problem"]:   # a rung that moved with its problem kept its verdicts
        assert not any(v["changed"] for v in d["baselines"])
        if d["impl"] == FWD_ONLY and d["mode"] == "fwd" and d["timing"] == "events":   # cuDNN's row was refused in B
            assert [v["baseline"] for v in d["baselines"]] == ["sdpa-flash"]
    r = lab_here("sweep", "compare", a.id, b.id, "--profiles", tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "1 problem moved as a whole" in r.stdout
    assert f"{PROBLEM}: 13 of 13 rows faster in B, median ratio 0.900; changed rows: 12 moved with its problem, 1 against it" in r.stdout
    assert "1 changed rows on their own (1 against their problem's move" in r.stdout
    assert f"{WITH_BWD} B32-H16-N512-D128-causal-bfloat16 fwd graph" in r.stdout and "0.889x its problem's median 0.900" in r.stdout


def test_a_single_implementation_never_moves_as_a_whole(tmp_path):
    """One implementation, one mode and timing: a row per problem; a problem's move is its row's own."""
    labels = {PROBLEM, "B32-H16-N512-D128-bfloat16", "B4-H16-N4096-D128-float16"}
    a, b = _pair(tmp_path, lambda r: r["impl"] == WITH_BWD and r["mode"] == "fwd" and r["timing"] == "events"
                 and r["label"] in labels, lambda r: 1.10 if r["label"] == PROBLEM else 1.0)
    result = store.compare_sweeps(a, b)
    assert all(p["rows"] == 1 and not p["moved_as_a_whole"] for p in result["problems"])
    assert len(result["problems"]) == 3 and not result["problems_moved_as_a_whole"]
    (d,) = result["on_their_own"]
    assert (d["label"], d["finding"], d["baselines"]) == (PROBLEM, "own", [])   # no baseline row in the sweep
    r = lab_here("sweep", "compare", a.id, b.id, "--profiles", tmp_path)
    assert "moved as a whole" not in r.stdout and "1 changed rows on their own (0 against" in r.stdout


def test_a_rung_timed_in_more_modes_than_its_baseline_does_not_carry_the_problem(tmp_path):
    """v7's 4 rows 10% slower beside sdpa-flash's one forward row: 4 of 5 rows lean, but 1 of 2
    implementations: v7's change, not the problem's."""
    a, b = _pair(tmp_path, lambda r: r["label"] == PROBLEM and (r["impl"] == WITH_BWD or (
        r["impl"] == "sdpa-flash" and r["mode"] == "fwd" and r["timing"] == "events")),
        lambda r: 1.10 if r["impl"] == WITH_BWD else 1.0)
    result = store.compare_sweeps(a, b)
    (p,) = result["problems"]
    assert (p["rows"], p["rows_slower"], p["implementations"]) == (5, 4, 2)
    assert p["median_ratio_b_over_a"] == pytest.approx(1.10) and not p["moved_as_a_whole"]
    assert {d["finding"] for d in result["differing"]} == {"own"} and len(result["differing"]) == 4


def test_shipped_sweeps_from_before_measured_utc_and_passes_compare_by_problem():
    """The first scaling pair (no measured_utc, no passes): the same judgement, from the rows alone."""
    a = store.Sweep(EXAMPLES / "20261126-191233-sweep-scale-1")
    b = store.Sweep(EXAMPLES / "20261126-221749-sweep-scale-4")
    assert a.table()["measured_utc"].isna().all() and b.table()["measured_utc"].isna().all()
    result = store.compare_sweeps(a, b)
    moved = {p["problem"] for p in result["problems_moved_as_a_whole"]}
    assert "B32-H16-N512-D128-causal-bfloat16" in moved and "B1-H16-N16384-D128-float16" not in moved
    assert "B1-H16-N16384-D128-float16" in {p["problem"] for p in result["problems"]}
    assert len(result["moved_with_problem"]) + len(result["on_their_own"]) == len(result["differing"]) > 0
    assert all(d["finding"] == "own" for d in result["differing"] if d["label"] not in moved)

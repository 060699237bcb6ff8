"""`lab sweep compare` and benchmarks/sweep_scaling.py count rows apart by what they measure (device time:
graph replay with its start held; graph replay before the hold; call latency: CUDA events), and give a
changed events row its cell's graph row and the host's share of the call (events minus graph) in A and B.
On the shipped target pairs: the tenth session's (graph rows held) and the ninth's (not), and on sweeps
made from the shipped rows through the store's own writer. The rule of a change is untouched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from lab.store import sweeps as store
from conftest import REPO, lab_here  # noqa: E402

EXAMPLES = REPO / "profiles" / "examples"
HELD = ("20261127-135332-sweep-scale-1", "20261127-135922-sweep-scale-2")     # tenth session: graph rows held
UNHELD = ("20261127-113210-sweep-scale-1", "20261127-113900-sweep-scale-2")   # ninth session: before the hold


def _compare(pair):
    return store.compare_sweeps(store.Sweep(EXAMPLES / pair[0]), store.Sweep(EXAMPLES / pair[1]))


@pytest.fixture(scope="module")
def held():
    return _compare(HELD)


def test_the_kinds_partition_the_rows_and_keep_the_totals(held):
    for result in (held, _compare(UNHELD)):
        kinds = result["by_measure"]
        assert sum(m["rows"] for m in kinds) == result["rows_compared"]
        assert sum(m["changed"] for m in kinds) == len(result["differing"])
        assert sum(m["beyond_ci95_within_threshold"] for m in kinds) == len(result["beyond_ci95_within_threshold"])
        for d in result["differing"]:   # the rule of a change is the same for every kind
            assert abs(d["ratio"] - 1) * 100 > result["threshold_pct"]


def test_the_held_pair_device_time_agrees_and_call_latency_does_not(held):
    kinds = {m["measure"]: m for m in held["by_measure"]}
    assert set(kinds) == {"device", "call"}   # every graph row of both tables was held
    assert (kinds["device"]["rows"], kinds["device"]["changed"]) == (78, 0)
    assert 0.99 < kinds["device"]["p5_ratio"] and kinds["device"]["p95_ratio"] < 1.01
    assert (kinds["call"]["rows"], kinds["call"]["changed"]) == (480, 7)
    assert len(held["differing"]) == 7 and {d["measure"] for d in held["differing"]} == {"call"}


def test_the_unheld_pair_says_its_graph_rows_carry_the_launch():
    kinds = {m["measure"]: m for m in _compare(UNHELD)["by_measure"]}
    assert set(kinds) == {"graph-unheld", "call"}
    assert (kinds["graph-unheld"]["rows"], kinds["graph-unheld"]["changed"]) == (77, 13)   # RESULTS.md, ninth session
    assert (kinds["call"]["rows"], kinds["call"]["changed"]) == (480, 48)


def test_a_changed_events_row_gets_its_cells_graph_row_and_the_hosts_share(held):
    a, b = (store.Sweep(EXAMPLES / s) for s in HELD)
    ra = {(r["impl"], r["label"], r["mode"], r["timing"]): r for r in a.rows() if r["status"] == "ok"}
    rb = {(r["impl"], r["label"], r["mode"], r["timing"]): r for r in b.rows() if r["status"] == "ok"}
    with_graph = [d for d in held["differing"] if d["host"]]
    assert len(with_graph) == 4 and sum(1 for d in held["differing"] if d["host"] is None) == 3
    for d in with_graph:
        g = (d["impl"], d["label"], d["mode"], "graph")
        h = d["host"]
        assert h["graph_held"] and h["a_graph_ms"] == ra[g]["median_ms"] and h["b_graph_ms"] == rb[g]["median_ms"]
        assert h["a_host_ms"] == pytest.approx(d["a_ms"] - ra[g]["median_ms"])
        assert h["b_host_ms"] == pytest.approx(d["b_ms"] - rb[g]["median_ms"])
        # the device's time did not move; the host's share made the whole move (more than it, where graph fell)
        assert abs(h["graph_ratio"] - 1) < 0.015 and 0.95 < h["host_of_move"] < 1.3
    cudnn = next(d for d in with_graph if d["label"] == "B16-H32-N1024-D64-causal-bfloat16")
    assert cudnn["host"]["a_host_ms"] * 1e3 == pytest.approx(22.8, abs=0.05)
    assert cudnn["host"]["b_host_ms"] * 1e3 == pytest.approx(43.0, abs=0.05)


def _stored(root, name: str, rows: list[dict]) -> store.Sweep:
    like = store.Sweep(EXAMPLES / HELD[0]).manifest
    sw = store.create_sweep(name, {k: like[k] for k in ("plan", "plan_key", "device", "software", "lab_version")}, root)
    sw.append_rows(rows)
    return sw.finalize()


def _timed(r: dict, f: float) -> dict:
    m = r["median_ms"] * f
    return dict(r, median_ms=m, mean_ms=m, ci95_low_ms=m * 0.999, ci95_high_ms=m * 1.001,
                pass_medians_ms=[p * f for p in r["pass_medians_ms"] or []] or None)


@pytest.mark.parametrize("graph_too", [False, True])
def test_the_hosts_share_tells_a_host_move_from_a_device_move(tmp_path, graph_too):
    """One cell's events row 10% slower in B, its graph row unchanged (the host) or 10% slower too (the
    device): the same changed row, the host's share of its move all or a small part of it."""
    cell = ("sdpa-cudnn", "B16-H32-N1024-D64-causal-bfloat16", "fwd")
    rows = [r for r in store.Sweep(EXAMPLES / HELD[0]).rows() if (r["impl"], r["label"], r["mode"]) == cell]
    assert {r["timing"] for r in rows} == {"events", "graph"}
    a = _stored(tmp_path / "a", "a", [_timed(r, 1.0) for r in rows])
    b = _stored(tmp_path / "b", "b", [_timed(r, 1.10 if r["timing"] == "events" or graph_too else 1.0) for r in rows])
    result = store.compare_sweeps(a, b)
    changed = {d["timing"]: d for d in result["differing"]}
    assert set(changed) == ({"events", "graph"} if graph_too else {"events"})
    h = changed["events"]["host"]
    events, graph = (next(r["median_ms"] for r in rows if r["timing"] == t) for t in ("events", "graph"))
    if graph_too:   # the device's time moved: the host's share moved by 10% of itself, a small part of the move
        assert h["host_of_move"] == pytest.approx((events - graph) / events)
        assert h["host_of_move"] < 0.2
    else:
        assert h["host_of_move"] == pytest.approx(1.0) and h["graph_ratio"] == pytest.approx(1.0)
    assert "host" not in changed.get("graph", {})   # a graph row is the device's time: no host share to give


def test_lab_sweep_compare_prints_each_kind_and_the_hosts_share():
    r = lab_here("sweep", "compare", *HELD, "--profiles", EXAMPLES)
    assert r.returncode == 1, r.stdout + r.stderr   # rows still differ: the exit code keeps its meaning
    out = r.stdout
    assert "7 differ (beyond CI95 and 3%)" in out
    assert ("  device time (graph replay, start held): 0 of 78 rows changed, 4 beyond CI95 within 3%; median B/A 0.998, "
            "middle 90% 0.992-1.004") in out
    assert "  call latency (CUDA events from an idle GPU, host dispatch included): 7 of 480 rows changed" in out
    assert ("sdpa-cudnn B16-H32-N1024-D64-causal-bfloat16 fwd events: 0.2326 vs 0.2534 ms (1.089x); graph 0.2099 vs "
            "0.2104 ms (1.003x), host's share (events - graph) 22.8 vs 43.0 us: 97% of the move") in out
    assert ("sdpa-cudnn B16-H16-N1024-D128-float16 bwd events: 0.869 vs 1.007 ms (1.159x); no graph row of this cell "
            "in both sweeps") in out


def test_sweep_scaling_prints_the_kinds_and_the_hosts_share(tmp_path):
    for count, sweep_id in zip(("1", "2"), HELD):
        shutil.copytree(EXAMPLES / sweep_id, tmp_path / f"gpus-{count}" / sweep_id)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "benchmarks/sweep_scaling.py", "--counts", "1,2", "--reuse", "--out", str(tmp_path),
                        "--lab", "/nonexistent/lab"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr   # no wall times copied (no speed-up), and 7 rows changed
    assert ("| 2 | - | - | 576 | 7 | 0 of 78 device time (held graph), 7 of 480 call latency (events) | 0 (0 problems "
            "moved) | 33 | 1.002 | 0.977-1.043 |") in r.stdout
    assert "- 2 GPUs, device time (held graph): 0 of 78 rows changed, 4 beyond CI95 within 3%; median B/A 0.998" in r.stdout
    assert ("- 2 GPUs, changed: sdpa-flash B16-H32-N1024-D64-causal-bfloat16 fwd events 1.037x; graph 1.000x, host's "
            "share (events - graph) 17.9 -> 30.6 us, 101% of the move") in r.stdout
    assert "- 2 GPUs, changed: sdpa-cudnn B8-H16-N2048-D128-float16 bwd events 1.050x; no graph row of the cell" in r.stdout

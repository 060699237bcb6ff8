"""The ledger (`lab ledger`, the report's Ledger page, the run page's ledger row): on the shipped runs and
sweeps, on stores that lack a common shape, and on a workspace with two rungs. Every number it prints is
checked against the stored timing it came from; no step pairs different work without saying so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lab.ladder import registry
from lab.store.ledger import parse_predicted
from lab.store.runs import list_runs
from conftest import EXAMPLES, REPO, lab_here

WORKSPACE = REPO / "examples" / "workspace"
LADDER = registry.builtin()
FIRST, SECOND, THIRD = LADDER[0], LADDER[1], LADDER[2]   # the shipped runs hold the first rungs on one problem


def lab(*args, cwd=REPO, env=None):
    """`lab ARGS` from `cwd`, in this process (conftest.lab_here), no workspace or store variable but `env`."""
    return lab_here(*args, cwd=cwd, env=env)


def ledger_json(*args, cwd=REPO, env=None) -> dict:
    res = lab("ledger", "--json", *args, cwd=cwd, env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def shipped() -> dict:
    return ledger_json()


# ------------------------------------------------------------------------------------ the prediction

@pytest.mark.parametrize("text, gain, ref, mode", [
    ("1.2-2x on the load phase; the whole kernel less", [1.2, 2.0], "r1", None),
    ("(written before the first timing): 30-60x over r2 at B=8 (65.2 ms -> 1.1-2.2 ms)", [30.0, 60.0], "r2", None),
    ("(written before measuring): against FA2's backward, 1.0-1.2x across the fa-grid", [1.0, 1.2], "sdpa-flash", "bwd"),
    ("about 1.3x over cuDNN's kernel", [1.3, 1.3], "sdpa-cudnn", None),
    ("3x slower than r2 (a test of the parser)", [1 / 3, 1 / 3], "r2", None),
    ("baseline. Expected thousands of times slower than SDPA", None, "r1", None),
    ("a 128 x 64 tile and 2 CTAs per SM", None, "r1", None),
])
def test_predicted_gain_is_parsed_as_numbers_a_range_stays_a_range(text, gain, ref, mode):
    p = parse_predicted(text, "r1", {"r1", "r2"})
    assert p.gain == (pytest.approx(gain) if gain else None)
    assert (p.reference, p.mode) == (ref, mode)


# ------------------------------------------------------------------------------ the shipped examples

def test_shipped_ledger_has_six_steps_with_predicted_and_measured_gains(shipped):
    ladder = [v.id for v in registry.builtin()]
    steps = [s for s in shipped["steps"] if s["origin"] == "built-in"]
    assert [(s["from"], s["to"]) for s in steps] == list(zip(ladder, ladder[1:]))
    both = [s for s in steps if s["predicted"]["gain"] and s["measured"]]
    assert len(both) >= 6, [(s["step"], s["predicted"]["gain"], s["not_measured"]) for s in steps]
    for s in both:
        lo, hi = s["predicted"]["gain"]
        assert 0 < lo <= hi
        m = s["measured"]
        assert m["range"][0] <= m["gain"] <= m["range"][1] and m["works"] == len(m["pairs"]) >= 1


def test_every_measured_gain_is_a_ratio_of_stored_timings_of_the_same_work(shipped):
    """Each pair: one device, mode and timing method, equal problems; its gain the reference's stored
    median over the rung's. A dtype change only where the rungs share no dtype, and then said."""
    by_id = {r.id: r for r in list_runs(EXAMPLES.parent)}
    for s in shipped["steps"]:
        m = s["measured"]
        if not m:
            assert s["not_measured"]["commands"], s["step"]
            continue
        ref = registry.get(m["reference"]) if m["reference_is"] == "rung" else None
        share = ref is None or bool(set(ref.dtypes) & set(registry.get(s["to"]).dtypes))
        for p in m["pairs"]:
            assert p["device"] == m["device"]
            assert p["gain"] == pytest.approx(p["reference_ms"] / p["ms"])
            if share:
                assert "->" not in p["dtype"], (s["step"], p)
            else:
                assert "->" in p["dtype"] and m["across_dtypes"] and p["dtype"] in m["across_dtypes"]
            for src in p["sources"]:   # a run's timing is the one its manifest holds
                if src in by_id and len(p["sources"]) == 2:
                    run = by_id[src]
                    assert run.manifest["timing"]["median"] in (p["reference_ms"], p["ms"])
        assert m["gain"] == pytest.approx(sorted(p["gain"] for p in m["pairs"])[(len(m["pairs"]) - 1) // 2]) \
            or len(m["pairs"]) % 2 == 0


def test_first_step_is_the_two_stored_runs_ratio(shipped):
    runs = {(r.manifest["variant"]["id"]): r for r in list_runs(EXAMPLES.parent)}
    a, b = runs[FIRST.id], runs[SECOND.id]
    s = shipped["steps"][0]
    assert (s["from"], s["to"]) == (FIRST.id, SECOND.id)
    assert s["measured"]["gain"] == pytest.approx(a.manifest["timing"]["median"] / b.manifest["timing"]["median"])
    assert s["named"]["run"] == a.id and s["named"]["class"] == a.manifest["findings_summary"]["bottleneck"]


def test_the_dtype_step_is_said_to_be_across_dtypes(shipped):
    for s in shipped["steps"]:
        a, b = registry.get(s["from"]), registry.get(s["to"])
        m = s["measured"]
        if m and m["reference"] == a.id:
            assert bool(m["across_dtypes"]) == (not set(a.dtypes) & set(b.dtypes)), s["step"]


def test_a_prediction_over_a_baseline_is_measured_against_that_baseline_in_its_mode(shipped):
    s = next(s for s in shipped["steps"] if s["predicted"]["reference"] == "sdpa-flash")
    assert s["measured"]["reference"] == "sdpa-flash" and s["measured"]["mode"] == "bwd"
    assert all(p["mode"] == "bwd" for p in s["measured"]["pairs"])
    assert not s["moved"]["judged"] and "sdpa-flash" in s["moved"]["reason"]


def test_calibration_lists_the_steps_behind_each_figure(shipped):
    c = shipped["calibration"]
    mv = c["bottleneck_moved"]
    assert mv["of"] == len(mv["steps"]) and mv["moved"] == sum(x["moved"] for x in mv["steps"])
    for x in mv["steps"]:
        assert x["moved"] == (x["after"] < x["before"] and x["time_fell"])
    pr = c["predictions"]
    assert pr["of"] == len(pr["steps"]) >= 6
    assert pr["in_range"] == sum(x["predicted"][0] <= x["measured"] <= x["predicted"][1] for x in pr["steps"])
    assert "lab" in c["estimates"]
    for src, e in c["estimates"].items():
        for x in e["steps"]:
            assert x["implied_gain"] == pytest.approx(1 / (1 - x["est_speedup_pct"] / 100))
            assert x["measured_over_estimated"] == pytest.approx(x["measured"] / x["implied_gain"])


def test_text_output_names_every_step_and_the_calibration():
    res = lab("ledger")
    assert res.returncode == 0, res.stderr
    ladder = [v.id for v in registry.builtin()]
    for a, b in zip(ladder, ladder[1:]):
        assert f"{a} -> {b} (built-in)" in res.stdout
    assert "ACROSS DTYPES" in res.stdout and "Calibration" in res.stdout


# ------------------------------------------------------------------------- no common shape: no number

def test_a_step_without_common_work_says_so_and_names_the_command(tmp_path):
    store = tmp_path / "profiles"
    store.mkdir()
    keep = [r for r in list_runs(EXAMPLES.parent) if r.manifest["variant"]["id"] in (FIRST.id, THIRD.id)]
    for r in keep:
        shutil.copytree(r.path, store / r.id)
    d = ledger_json("--profiles", str(store))
    s12 = next(s for s in d["steps"] if s["step"] == f"{FIRST.id} -> {SECOND.id}")
    assert s12["measured"] is None
    assert s12["not_measured"]["reason"].startswith("not measured on a common shape")
    assert s12["not_measured"]["commands"] == [f"lab profile --variant {SECOND.id} --shape 8,16,1024,64 --dtype float32"]
    assert s12["moved"]["judged"] is False and s12["moved"]["commands"] == s12["not_measured"]["commands"]
    s23 = next(s for s in d["steps"] if s["step"] == f"{SECOND.id} -> {THIRD.id}")
    assert s23["measured"] is None and s23["named_absent"]
    text = lab("ledger", "--profiles", str(store)).stdout
    assert "not measured on a common shape" in text


def test_a_missing_store_is_refused(tmp_path):
    res = lab("ledger", "--profiles", str(tmp_path / "nope"))
    assert res.returncode == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr


# --------------------------------------------------------------------------- a workspace with two rungs

def test_workspace_rung_follows_the_one_it_changed(tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(WORKSPACE, ws)
    d = ledger_json(cwd=ws)
    (s,) = [s for s in d["steps"] if s["origin"] == "workspace"]
    assert (s["from"], s["to"]) == ("my1", "my2")
    m = s["measured"]   # my1 runs float32 only, my2 float16/bfloat16: paired across dtypes, and said so
    assert m and "float32 -> float16" in m["across_dtypes"]
    runs = {r.manifest["variant"]["id"]: r for r in list_runs(ws / "profiles")}
    assert m["gain"] == pytest.approx(runs["my1"].manifest["timing"]["median"] / runs["my2"].manifest["timing"]["median"])
    assert s["named"]["run"] == runs["my1"].id


def test_lab_new_writes_the_predicted_gain_from_the_labs_estimate_and_the_ledger_reads_it(tmp_path):
    assert lab("init", "ws", cwd=tmp_path).returncode == 0
    ws = tmp_path / "ws"
    res = lab("new", "w2", "--from", SECOND.id, cwd=ws)
    assert res.returncode == 0, res.stderr
    rung = registry.parse_rung(next((ws / "kernels").glob("w2_*.cu")), "workspace")
    source_run = next(r for r in list_runs(EXAMPLES.parent) if r.manifest["variant"]["id"] == SECOND.id)
    assert rung.follows == SECOND.id and source_run.id in rung.predicted_gain
    d = ledger_json(cwd=ws)
    (s,) = [s for s in d["steps"] if s["origin"] == "workspace"]
    est = next(e for e in s["named"]["estimates"] if e["source"] == "lab")
    assert s["predicted"]["gain"][0] == pytest.approx(est["implied_gain"], rel=1e-2)
    assert s["predicted"]["reference"] == SECOND.id
    assert s["measured"] is None   # w2 was never timed: the command, not a number
    assert s["not_measured"]["commands"] == ["lab profile --variant w2 --shape 8,16,1024,64 --dtype float32"]


# --------------------------------------------------------------------------------------- the report

def test_report_renders_the_ledger_page_linked_from_the_index_and_a_row_on_run_pages(examples_rendered, shipped):
    out = examples_rendered.index.parent
    page = (out / "ledger.html").read_text()
    assert "<title>Ledger" in page and "<h1>Ledger</h1>" in page and "<svg" in page
    assert 'href="ledger.html"' in (out / "index.html").read_text()
    for s in shipped["steps"]:
        assert f'id="step-{s["to"]}"' in page
    run = next(r for r in list_runs(EXAMPLES.parent) if r.manifest["variant"]["id"] == SECOND.id)
    row = (out / f"{run.id}.html").read_text()
    assert 'id="ledger-row"' in row
    s = next(s for s in shipped["steps"] if s["to"] == SECOND.id)
    from lab.report.formatting import fmt_times
    assert f"measured {fmt_times(s['measured']['gain'])} over {s['measured']['reference']}" in row


def test_a_run_whose_findings_cannot_be_read_is_left_out_and_named(tmp_path):
    store = tmp_path / "profiles"
    for r in list_runs(EXAMPLES.parent):
        if r.manifest["variant"]["id"] in (FIRST.id, SECOND.id):
            shutil.copytree(r.path, store / r.id)
    bad = next(p for p in store.iterdir() if f"-{FIRST.id}-" in p.name)
    (bad / "findings.parquet").write_bytes(b"not parquet")
    res = lab("report", "--out", str(tmp_path / "out"), "--profiles", str(store))
    assert "Traceback" not in res.stderr
    page = (tmp_path / "out" / "ledger.html").read_text()
    assert bad.name in page and "findings table cannot be read" in page
    d = ledger_json("--profiles", str(store))
    assert bad.name in d["damaged"]
    s = d["steps"][0]   # its timing still counts: the manifest is whole; its verdict is not invented
    assert s["named"] is None and s["measured"]["works"] == 1


def test_a_workspace_rung_that_shadows_a_built_in_id_keeps_the_two_apart(tmp_path):
    """A workspace's own rung with the id of a built-in one: the built-in step is still measured from the
    built-in rung's runs, and the workspace's step (never timed) is not given them."""
    assert lab("init", "ws", cwd=tmp_path).returncode == 0
    ws = tmp_path / "ws"
    assert lab("new", SECOND.id, "--from", FIRST.id, cwd=ws).returncode == 0
    d = ledger_json(cwd=ws)
    key = f"{FIRST.id} -> {SECOND.id}"
    built, own = (next(s for s in d["steps"] if s["step"] == key and s["origin"] == o) for o in ("built-in", "workspace"))
    runs = {r.manifest["variant"]["id"]: r for r in list_runs(EXAMPLES.parent)}
    assert built["measured"]["gain"] == pytest.approx(runs[FIRST.id].manifest["timing"]["median"]
                                                      / runs[SECOND.id].manifest["timing"]["median"])
    assert own["measured"] is None
    assert own["not_measured"]["commands"] == [f"lab profile --variant {SECOND.id} --shape 8,16,1024,64 --dtype float32"]

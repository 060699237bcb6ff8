"""Derived numbers from one home, by mode (issue 26 item 4), on the shipped runs and real Nsight reports:
a run's FLOPs, TFLOP/s, ratios, % of peak and minimum bytes from lab.measure.rates with the run's mode,
stored with the timing; `lab compare` of two modes says so first; a backward page measures memory against
the backward's minimum and calls the previous rung with a backward its previous rung; advice speaks to a
kernel's role, decided from what it executed and moved; `lab new --from` takes the main kernel's verdict."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, lab_here
from lab.analysis import findings as analysis
from lab.ladder import registry
from lab.measure import rates
from lab.report import pages, rundata
from lab.store import evidence
from lab.store.runs import Run, find_run

V7_BWD = "20261125-211819-v7-B4-H16-N2048-D128-float16"
V6_FWD = "20261123-200956-v6-B8-H16-N1024-D64-float16"
FIXTURES = REPO / "tests" / "fixtures" / "ncu"


def _lab(*args, cwd=None):
    return lab_here(*args, cwd=cwd)


def _shipped(run_id: str) -> Path:
    path = EXAMPLES / run_id
    if not (path / "manifest.json").is_file():
        pytest.skip(f"{run_id} is not shipped")
    return path


def test_a_backward_run_stores_its_modes_numbers_and_readers_read_them():
    run = Run(_shipped(V7_BWD))
    t = run.manifest["timing"]
    p = run.record.problem
    assert run.manifest["mode"] == "bwd"
    assert t["flops"] == rates.flops(p, "bwd") == 2.5 * p.forward_flops
    assert t["tflops"] == pytest.approx(t["flops"] / (t["median"] * 1e9))
    assert t["min_bytes"] == rates.min_bytes(p, "bwd")
    assert t["pct_of_peak"] == pytest.approx(100 * t["tflops"] / run.manifest["device"]["peaks"]["tensor_fp16_tflops"])
    rd = rundata.load(run)
    assert rd.tflops == t["tflops"] and rd.min_bytes == t["min_bytes"]
    for b in (b for b in run.manifest["baselines"] if b.get("median_ms")):
        assert b["tflops"] == pytest.approx(rates.flops(p, "bwd") / (b["median_ms"] * 1e9))
        assert b["ratio"] == pytest.approx(b["median_ms"] / t["median"])


def test_compare_of_a_backward_and_a_forward_says_so_first_and_compares_no_speed():
    _shipped(V7_BWD), _shipped(V6_FWD)
    res = _lab("compare", "--profiles", str(EXAMPLES), V7_BWD, V6_FWD)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "different modes" in lines[0] and "bwd" in lines[0] and "fwd" in lines[0]
    v7 = next(ln for ln in lines if ln.startswith("A "))
    tflops = rundata.load(Run(EXAMPLES / V7_BWD)).tflops
    assert f"{tflops:.3g}" in v7 and "(bwd)" in v7                     # its own mode's 229, not 91.6
    assert not any(w in res.stdout for w in ("faster", "slower", "REGRESSION"))
    assert "Traceback" not in res.stderr
    js = _lab("compare", "--profiles", str(EXAMPLES), V7_BWD, V6_FWD, "--json")
    obj = json.loads(js.stdout)
    assert js.returncode == 2 and obj["comparable"] is False and obj["tflops_change_pct"] is None


def test_a_backward_page_holds_memory_to_the_backwards_minimum_and_its_previous_rung_has_a_backward(tmp_path):
    rd = rundata.load(Run(_shipped(V7_BWD)))
    runs = [rundata.load(Run(p)) for p in EXAMPLES.iterdir() if (p / "manifest.json").is_file()
            and json.loads((p / "manifest.json").read_text()).get("variant")]
    prev_id, prev = rundata.ladder_neighbour(rd, runs, -1)
    with_backward = [v.id for v in registry.variants() if v.backward]
    assert prev_id is None or prev_id in with_backward
    assert prev is None or (prev.mode == rd.mode and registry.get(prev.variant_id).backward)
    levels = rundata.memory_levels(rd.primary_kernel, rd.min_bytes, rd.min_bytes_rule)
    assert levels[0]["bytes"] == rates.min_bytes(rd.problem, "bwd")
    assert "dO" in levels[0]["level"] and "dQ" in levels[0]["level"]
    html = Path(pages.render_run_page(rd.run.path, out=tmp_path)).read_text()
    assert "Against the previous rung with a backward" in html
    assert "v6 on the same shape" not in html and "previous rung, v6" not in html


@pytest.mark.parametrize("report, elementwise, matrix", [
    ("sdpa-flash-bwd", ("flash_bwd_dot_do_o", "flash_bwd_convert_dq", "elementwise_kernel"), ("flash_bwd_dq_dk_dv",)),
    ("sdpa-cudnn-bwd", ("compute_dot_do_o", "convert_dq_to_16bits", "elementwise_kernel"), ("bprop",)),
])
def test_kernel_role_comes_from_what_a_kernel_executed_and_moved(report, elementwise, matrix):
    """FA2's and cuDNN's backward reports (kernels the lab never wrote): the preprocess and dQ convert
    kernels, and PyTorch's copies, are elementwise; the main loop is a matrix kernel."""
    for a in analysis.analyze_report(FIXTURES / f"{report}.ncu-rep.xz", with_lines=False, mode="bwd"):
        role = a.derived["role"]
        if any(n in a.kernel for n in matrix):
            assert role == "matrix", a.kernel
        elif any(n in a.kernel for n in elementwise):
            assert role == "elementwise", a.kernel


def test_v7s_elementwise_kernels_hear_no_tile_advice_and_its_main_kernel_keeps_its_own(tmp_path):
    src = _shipped(V7_BWD)
    report = Run(src).artifact("ncu_report")   # the store's reader: profile.ncu-rep.xz, as runs keep it
    m = json.loads((src / "manifest.json").read_text())
    analyses = analysis.analyze_report(report, problem=m["problem"], mode="bwd")
    by_role = {}
    for a in analyses:
        by_role.setdefault(a.derived["role"], []).append(a)
    assert len(by_role["elementwise"]) == 2 and len(by_role["matrix"]) == 1
    for a in by_role["elementwise"]:
        advice = " ".join(f.advice for f in a.findings)
        assert "K/V tile" not in advice and "rung demonstrates" not in advice, advice
    main = analysis.main_kernel(analyses)
    assert main is by_role["matrix"][0]
    assert analysis.findings_summary(analyses)["bottleneck"] == main.bottleneck


def test_lab_new_from_v7_takes_the_verdict_of_the_kernel_with_the_largest_share(tmp_path):
    run = find_run(V7_BWD, _shipped(V7_BWD).parent)
    ev = evidence.evidence_of(run)
    derived = run.table("derived")
    shares = {int(r.kernel_index): json.loads(r.derived)["duration_share_pct"] for r in derived.itertuples()}
    main = max(shares, key=shares.get)
    findings = run.table("findings")
    top = findings[findings.kernel_index == main].sort_values("rank").iloc[0]
    assert ev.title == top["title"] and ev.bottleneck == top["class"]
    assert ev.share_pct == pytest.approx(shares[main], abs=0.01) and ev.share_pct > 50
    text = ev.header_text(run.manifest["variant"]["id"])   # the run's own rung, through its manifest
    assert "bwd_kernel" in text and "preprocess" not in text


def test_reanalyze_into_a_temporary_store_brings_derived_numbers_up_to_date(tmp_path):
    """An older run's timing without the derived values: `lab reanalyze` stores them by its mode."""
    src = _shipped(V7_BWD)
    run = tmp_path / "store" / src.name
    shutil.copytree(src, run)
    man = json.loads((run / "manifest.json").read_text())
    for k in ("flops", "pct_of_peak", "min_bytes", "peak"):
        man["timing"].pop(k, None)
    man["timing"]["tflops"] = 91.6   # the forward's FLOPs over the backward's time, as a wrong reader had it
    (run / "manifest.json").write_text(json.dumps(man))
    res = _lab("reanalyze", str(run))
    assert res.returncode == 0, res.stderr
    t = json.loads((run / "manifest.json").read_text())["timing"]
    p = Run(run).record.problem
    assert t["tflops"] == pytest.approx(rates.flops(p, "bwd") / (t["median"] * 1e9))
    assert t["min_bytes"] == rates.min_bytes(p, "bwd")

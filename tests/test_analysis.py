"""lab.analysis.findings and `lab analyze` on real Nsight Compute reports.

  * ../shared/fixtures/ncu-public/: public reports written on a Turing GPU (sgemm naive and
    coalesced, dot product, vector add).
  * tests/fixtures/ncu/: reports recorded on the lab's H200 by tests/planted/record.sh: eight
    kernels with one planted bottleneck each (in two section sets) and the torch SDPA backends.
Expected answers come from how the kernels were built (tests/planted/planted.cu) or from ncu_report
itself, never from numbers copied out of the reports.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lab.analysis import findings as analysis

from lab.analysis import metrics as derived_metrics

from lab.analysis import rules as ncu_rules
from lab.cli import main
from lab.profilers import ncu
from lab.measure.problem import Problem
from lab.ladder.registry import builtin, demonstrating  # advice names rungs through the registry

REPO = Path(__file__).resolve().parent.parent
PUBLIC = REPO.parent / "shared" / "fixtures" / "ncu-public"
OURS = REPO / "tests" / "fixtures" / "ncu"
NAIVE = PUBLIC / "LakshyaSingh354__CudaCode__gemm_reps_naive.ncu-rep"
COALESCED = PUBLIC / "LakshyaSingh354__CudaCode__gemm_reps_global_mem_coalesce.ncu-rep"
DOT = PUBLIC / "LakshyaSingh354__CudaCode__stage1_reps_dot_product.ncu-rep"
PLANTED = {"detailed": OURS / "planted-detailed.ncu-rep.xz", "lab-all": OURS / "planted-lab-all.ncu-rep.xz"}
SDPA = OURS / "sdpa-detailed.ncu-rep.xz"

# The bottleneck each planted kernel was built to have (tests/planted/planted.cu's table).
PLANTED_CLASS = {
    "planted_uncoalesced": "uncoalesced-global",
    "planted_bank_conflicts": "bank-conflicts",
    "planted_small_grid": "small-grid",
    "planted_local_memory": "local-memory",
    "planted_fma_bound": "compute-bound",
    "planted_bandwidth_copy": "memory-bound",
    "planted_divergence": "divergence",
    "planted_occupancy_smem": "occupancy-limited",
}
SDPA_PROBLEM = Problem(4, 16, 2048, 2048, 128, False, "float16")   # tests/planted/sdpa.py's SHAPE

needs_public = pytest.mark.skipif(not NAIVE.exists(), reason=f"public ncu fixtures not found at {PUBLIC}")


def _need(path: Path):
    if not path.exists():
        pytest.skip(f"{path.name} not recorded yet: run tests/planted/record.sh on a GPU machine "
                    "and copy its output into tests/fixtures/ncu/")


def _by_function(analyses, path):
    df = ncu.load_report(path)
    names = dict(zip(df["kernel_index"], df["kernel_function"]))
    return {names[a.kernel_index]: a for a in analyses}


# ----------------------------------------------------------------------------- public reports

@needs_public
def test_naive_sgemm_is_uncoalesced_or_memory_bound():
    for a in analysis.analyze_report(NAIVE):
        assert a.bottleneck in ("uncoalesced-global", "memory-bound"), [f.to_dict() for f in a.findings]


@needs_public
def test_coalesced_sgemm_is_not_uncoalesced():
    for a in analysis.analyze_report(COALESCED):
        assert a.bottleneck != "uncoalesced-global"
        assert a.findings, "a kernel at 80%+ of a unit's peak must have a finding"


@needs_public
def test_dot_product_store_pattern_found():
    # dot_prod writes one float per 32-byte sector (Nsight: "only 4.0 of the 32 bytes"): the lab
    # names it, with Nsight's own estimate kept, among the two most important findings.
    res = {a.kernel.split("(")[0]: a for a in analysis.analyze_report(DOT)}
    top2 = [f.cls for f in res["dot_prod"].findings[:2]]
    assert "uncoalesced-global" in top2
    nsight = [r for r in ncu.rule_results(DOT) if r["kernel_index"] == res["dot_prod"].kernel_index
              and r["rule_id"] == "MemoryCacheAccessPattern"]
    f = next(f for f in res["dot_prod"].findings if f.cls == "uncoalesced-global")
    assert f.est_speedup_pct is not None
    assert nsight and math.isclose(f.est_speedup_pct, max(r["est_speedup_pct"] for r in nsight), rel_tol=0.2)


@needs_public
def test_json_contract_and_values_equal_ncu_report(tmp_path):
    import ncu_report

    res = CliRunner().invoke(main, ["analyze", str(DOT), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    ctx = ncu_report.load_report(str(DOT))
    actions = [r.action_by_idx(i) for r in ctx for i in range(r.num_actions())]
    assert len(out) == len(actions)
    for obj, a in zip(out, actions):
        assert set(obj) == {"kernel", "duration_ns", "device", "metrics", "bottleneck", "findings"}
        assert obj["kernel"] == a.name(a.NameBase_DEMANGLED)
        assert obj["duration_ns"] == a["gpu__time_duration.sum"].value()
        assert obj["device"] == a["device__attribute_display_name"].value()
        assert obj["metrics"], "curated metrics present"
        for name, value in obj["metrics"].items():
            assert value == a[name].value(), name
        assert obj["bottleneck"] == (obj["findings"][0]["class"] if obj["findings"] else None)
        classes = [f["class"] for f in obj["findings"]]
        assert len(classes) == len(set(classes))
        for f in obj["findings"]:
            assert set(f) == {"class", "title", "severity", "est_speedup_pct", "evidence", "advice", "source"}
            assert f["class"] in analysis.CLASSES
            assert f["severity"] in ("high", "medium", "low")
            assert f["source"] == "lab" or f["source"].startswith("ncu-rule:")
            assert f["advice"] and isinstance(f["evidence"], dict)


@needs_public
def test_noise_rules_are_dropped_and_mapped_rules_kept():
    rules = ncu.rule_results(DOT)
    assert any(r["rule_id"] == "MemoryL2Compression" for r in rules)      # Nsight emits it on every kernel
    assert all(ncu_rules.map_rule(r) is None for r in rules if r["rule_id"] == "MemoryL2Compression")
    for r in rules:
        cls = ncu_rules.map_rule(r)
        assert cls is None or cls in analysis.CLASSES
        if r["type"] == "INFO":
            assert cls is None


# ----------------------------------------------------------------------------- bad input through the CLI

@needs_public
@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.ncu-rep", "no such file"),
    (lambda d: (d / "notes.ncu-rep").write_text("these are my notes\n") and d / "notes.ncu-rep", "not an Nsight Compute report"),
    (lambda d: (d / "cut.ncu-rep").write_bytes(NAIVE.read_bytes()[: NAIVE.stat().st_size // 2]) and d / "cut.ncu-rep",
     "truncated or damaged"),
    (lambda d: d, "folder"),
])
def test_bad_reports_exit_2(tmp_path, make, message):
    res = CliRunner().invoke(main, ["analyze", str(make(tmp_path))])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


@needs_public
@pytest.mark.parametrize("args, message", [(["--kernel", "("], "bad --kernel regex"),
                                           (["--kernel", "no_such_kernel"], "no kernel in the report matches"),
                                           (["--shape", "4,16,x,64"], "bad shape")])
def test_bad_options_exit_2(args, message):
    res = CliRunner().invoke(main, ["analyze", str(DOT), *args])
    assert res.exit_code == 2 and message in res.output


@needs_public
def test_terminal_view_names_bottleneck_and_next_step():
    res = CliRunner().invoke(main, ["analyze", str(DOT), "--kernel", "^dot_prod$"])
    assert res.exit_code == 0, res.output
    (a,) = analysis.analyze_report(DOT, kernel_regex="^dot_prod$")
    assert a.kernel.split("(")[0] in res.output
    assert f"1. {a.bottleneck}" in res.output
    assert "next:" in res.output


# ----------------------------------------------------------------------------- planted bottlenecks

@pytest.mark.parametrize("section_set", sorted(PLANTED))
@pytest.mark.parametrize("kernel, planted", sorted(PLANTED_CLASS.items()))
def test_planted_bottleneck_found(section_set, kernel, planted):
    path = PLANTED[section_set]
    _need(path)
    a = _by_function(analysis.analyze_report(path), path)[kernel]
    top2 = [f.cls for f in a.findings[:2]]
    assert planted in top2, f"{kernel}: {[(f.cls, f.title, round(f.rank, 1)) for f in a.findings]}"


def test_planted_evidence_is_quantified():
    path = PLANTED["detailed"]
    _need(path)
    res = _by_function(analysis.analyze_report(path), path)
    # 32 lanes on one bank: ~32-way (the init stores are conflict-free, pulling the mean a little down)
    bank = next(f for f in res["planted_bank_conflicts"].findings if f.cls == "bank-conflicts")
    assert res["planted_bank_conflicts"].derived["stalls"], "stall reasons from PC sampling"
    nway = derived_metrics.bank_conflict_nway(derived_metrics.KernelMetrics(ncu.load_report(path).iloc[1].to_dict()))
    assert nway and 24 <= nway[0][1] <= 32
    assert bank.rank > 50
    # 4-byte loads with lanes 128 bytes apart: ~4 of 32 bytes used per sector
    row = ncu.load_report(path).iloc[0].to_dict()
    (_, used, _), = derived_metrics.global_bytes_per_sector(derived_metrics.KernelMetrics(row))
    assert 3.5 <= used <= 6
    # the smem kernel's limiter is shared memory, one 128-thread block per SM: 4 of 64 warps
    occ = res["planted_occupancy_smem"]
    assert occ.derived["occupancy_limiter"] == "shared memory"
    assert occ.metrics["sm__maximum_warps_per_active_cycle_pct"] == pytest.approx(100 * 4 / 64)
    # one lane of 32 runs the loop body
    assert res["planted_divergence"].derived["threads_per_instruction"] < 4
    # the FFMA loop on an H200 (tensor cores, none used) is sent to the mma.sync rung
    fma = res["planted_fma_bound"].findings[0]
    assert fma.cls == "compute-bound" and demonstrating("compute-bound").id in fma.advice
    # 4 CTAs: the advice is to launch more of them
    assert "CTAs" in res["planted_small_grid"].findings[0].advice


def test_missing_metrics_lower_confidence_never_crash():
    path = PLANTED["detailed"]
    _need(path)
    df = ncu.load_report(path)
    rules = ncu.rule_results(path)
    # drop the stall reasons and the SpeedOfLight breakdowns, as a basic-set report would lack them
    gone = [c for c in df.columns if "stalled" in c or c.startswith("breakdown:")]
    thin = analysis.analyze_frame(df.drop(columns=gone), rules)
    assert len(thin) == len(df)
    lat = [f for a in thin for f in a.findings if f.cls == "latency-bound" and f.source == "lab"]
    assert lat and all(f.evidence.get("stall reasons (WarpStateStats)", 0) is None for f in lat)
    assert all(f.severity in ("medium", "low") for f in lat)
    # a frame with almost nothing in it still analyzes
    bare = df[["kernel_index", "kernel", "kernel_function", "device", "gpu__time_duration.sum"]]
    for a in analysis.analyze_frame(bare, []):
        assert a.bottleneck in (None,) + analysis.CLASSES


# ----------------------------------------------------------------------------- SDPA backends

def _sdpa():
    _need(SDPA)
    df = ncu.load_report(SDPA)
    return df, ncu.rule_results(SDPA)


def _backend(df, backend):
    return df[df["nvtx"].str.contains(f"lab sdpa-{backend} ")]


@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
def test_tensor_flops_counted_from_sass_equal_the_attention_flops(backend):
    df, rules = _sdpa()
    one = _backend(df, backend)
    assert len(one) == 1, "fused backends launch one kernel"
    counted = derived_metrics.flops(derived_metrics.KernelMetrics(one.iloc[0].to_dict()))["tensor"]
    assert counted == pytest.approx(SDPA_PROBLEM.flops, rel=0.01)


def test_sdpa_verdicts():
    df, rules = _sdpa()
    res = {a.kernel_index: a for a in analysis.analyze_frame(df, rules)}
    cudnn = res[int(_backend(df, "cudnn")["kernel_index"].iloc[0])]
    assert cudnn.bottleneck == "compute-bound" and "wgmma" in cudnn.findings[0].advice
    # the math backend upcasts to FP32 and runs cuBLAS FFMA sgemms: on an H200 that is the v5 advice
    gemms = [res[int(i)] for i, n in zip(df["kernel_index"], df["kernel_function"]) if "sgemm" in n or "xmma_gemm" in n]
    assert gemms and all(g.bottleneck == "compute-bound" and demonstrating("compute-bound").id in g.findings[0].advice for g in gemms)
    assert all(a.findings for a in res.values())


def test_problem_adds_dram_minimum_and_tflops():
    df, rules = _sdpa()
    soft = df[df["kernel_function"].str.contains("softmax")]
    (a,) = analysis.analyze_frame(soft, rules, SDPA_PROBLEM.to_dict())
    mem = next(f for f in a.findings if f.cls == "memory-bound")
    moved = soft["dram__bytes_read.sum"].iloc[0] + soft["dram__bytes_write.sum"].iloc[0]
    assert "minimum" in mem.title
    assert mem.evidence["lab__dram_bytes_x_min"] == pytest.approx(moved / SDPA_PROBLEM.min_bytes, rel=1e-3)
    assert a.derived["lab__problem_tflops"] == pytest.approx(SDPA_PROBLEM.flops / soft["gpu__time_duration.sum"].iloc[0] / 1e3, rel=1e-2)
    # several different kernels: the problem's FLOPs cannot be split among them, so it is not applied
    many = analysis.analyze_frame(_backend(df, "math"), rules, SDPA_PROBLEM.to_dict())
    assert all("lab__problem_tflops" not in x.derived for x in many)


# ----------------------------------------------------------------------------- tables and speed

def test_store_tables_round_trip(tmp_path):
    import pandas as pd

    path = PLANTED["detailed"]
    _need(path)
    analyses = analysis.analyze_report(path)
    ff = analysis.findings_frame(analyses)
    assert len(ff) == sum(len(a.findings) for a in analyses)
    mf = analysis.metrics_frame(path)
    rf = analysis.rules_frame(path)
    for name, df in (("findings", ff), ("metrics", mf), ("rules", rf)):
        df.to_parquet(tmp_path / f"{name}.parquet", index=False)
        back = pd.read_parquet(tmp_path / f"{name}.parquet")
        assert len(back) == len(df)
    assert isinstance(json.loads(ff["evidence"].iloc[0]), dict)
    assert set(rf["lab_class"].dropna()) <= set(analysis.CLASSES)
    assert mf["gpu__time_duration.sum"].tolist() == [a.duration_ns for a in analyses]


def test_analyze_json_in_a_fresh_process():
    # The speed target (< 3 s on a 6-kernel full-set report) is a benchmark, not a timed test:
    # benchmarks/cpu_speed.py measures it and benchmarks/RESULTS.md records it.
    path = PLANTED["lab-all"]
    _need(path)
    res = subprocess.run([sys.executable, "-m", "lab.cli", "analyze", "--json", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)) == 8


# ----------------------------------------------------------------------------- the lab's own rungs

def _example_run(variant_id: str):
    runs = sorted((REPO / "profiles" / "examples").glob(f"*-{variant_id}-*/manifest.json"))
    for m in runs:
        man = json.loads(m.read_text())
        rep = m.parent / (man.get("artifacts") or {}).get("ncu_report", "profile.ncu-rep")
        if rep.exists():
            return man, rep
    pytest.skip(f"no stored {variant_id} example run with an ncu report under profiles/examples/")


def test_v1_grid_of_b_times_h_is_sent_to_the_query_split():
    # v1 launches one CTA per (batch, head): with the run's problem the lab must say so and name the
    # next step of the ladder, not an occupancy limit the grid never reaches.
    man, rep = _example_run(builtin()[0].id)   # the baseline rung: one CTA per (batch, head)
    (a,) = analysis.analyze_report(rep, problem=man["problem"])
    p = man["problem"]
    assert a.metrics["launch__grid_size"] == p["batch"] * p["heads"]
    # Nsight's own estimate for v1's 21-way shared-store bank conflicts (80%) may outrank the lab's
    # small-grid model (the unfilled wave times the distance to the roof); the grid must still be
    # named, near the top, with the ladder's next step -- the rule the planted kernels follow too.
    ranked = [f.cls for f in a.findings]
    assert "small-grid" in ranked[:2], [(f.cls, round(f.rank, 1)) for f in a.findings]
    grid = a.findings[ranked.index("small-grid")]
    assert "B*H" in grid.advice and demonstrating("small-grid").id in grid.advice


def test_six_kernel_full_set_report_is_analyzed_whole():
    """The 6-kernel `--set full` report of v5 (tests/fixtures/ncu/v5-full.ncu-rep.xz): every kernel
    is analyzed, each into the fixed vocabulary. (Its timing is a benchmark: benchmarks/RESULTS.md.)"""
    path = Path(__file__).resolve().parent / "fixtures" / "ncu" / "v5-full.ncu-rep.xz"
    if not path.exists():
        pytest.skip("v5-full.ncu-rep.xz not recorded")
    analyses = analysis.analyze_report(path)
    assert len(analyses) == 6
    assert len({a.duration_ns for a in analyses}) > 1  # six real launches, not one row repeated
    for a in analyses:
        assert a.bottleneck in analysis.CLASSES
        assert all(f.cls in analysis.CLASSES for f in a.findings)
        assert a.metrics["launch__grid_size"] == 8 * 128  # (N / 128 query rows) x (B * H)

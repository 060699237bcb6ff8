"""HTML reports: run pages, index, comparisons, `lab report` and `lab compare` on the CLI.

Runs are built here with lab.store.runs.create_run from manifests this file writes (every device and
tool name says "test-made"); the metrics tables hold plain numbers under ncu metric names. They are
not Nsight output and are not used as such: the real recorded runs in profiles/examples/ are
rendered by the tests at the bottom once they exist.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from conftest import EXAMPLES, PUBLIC_NCU, PUBLIC_NSYS, lab_here
from lab.measure import rates
from lab.report import formatting

from lab.report import pages as report

from lab.report import rundata
from lab.report.compare import compare_runs
from lab.measure.problem import Problem
from lab.store.runs import Run, create_run, list_runs
from lab.ladder.registry import builtin

R1, R2 = (v.id for v in builtin()[:2])   # two consecutive rungs of the ladder: the page names the previous one

EVIL = '<script>alert("x")</script>&'   # a kernel name no page may interpret as markup
DEVICE = "Test GPU (test-made manifest)"


def make_run(root: Path, variant: str | None = None, median: float = 10.0, spread: float = 0.1, *,
             shape=(2, 4, 256, 64), causal: bool = False, kernel: str = "lab_v1_kernel",
             metrics: bool = True, findings: list[dict] | None = None, baselines: bool = True,
             timeline: bool = False, created: str = "2026-01-01T00:00:00+00:00", run_id: str | None = None,
             peaks: bool = True, deterministic: bool = False) -> Path:
    """Store one test-made run; times in ms, `spread` is the half-width of its CI95."""
    variant = variant or R1
    b, h, n, d = shape
    prob = Problem(b, h, n, n, d, causal, "float32", deterministic=deterministic)
    run_id = run_id or f"{created[:10].replace('-', '')}-{variant}-{prob.label()}"
    with create_run(run_id, root) as w:
        if metrics:
            w.add_table("metrics", pd.DataFrame([{
                "kernel": kernel, "gpu__time_duration.sum": median * 1e6, "launch__grid_size": b * h,
                "launch__block_size": 64, "launch__sm_count": 132, "launch__waves_per_multiprocessor": b * h / 132 / 8,
                "launch__registers_per_thread": 40, "launch__occupancy_limit_registers": 24,
                "launch__occupancy_limit_shared_mem": 8, "launch__occupancy_limit_warps": 32,
                "launch__occupancy_limit_blocks": 32, "sm__maximum_warps_per_active_cycle_pct": 25.0,
                "sm__warps_active.avg.pct_of_peak_sustained_active": 6.1,
                "dram__bytes_read.sum": rates.min_bytes(prob) * 3.0, "dram__bytes_write.sum": rates.min_bytes(prob) / 4,
                "lts__t_sectors.sum": rates.min_bytes(prob) / 8.0,
                "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 7.5,
                "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": 2.25,
                "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": 0.5,
            }]))
            w.add_table("ncu_rules", pd.DataFrame([{"rule": "LaunchConfiguration", "section": "LaunchStats",
                                                    "type": "WARNING", "message": "The grid is too small: " + EVIL,
                                                    "est_speedup_pct": 90.0}]))
        if findings is not None:
            w.add_table("findings", pd.DataFrame([{"kernel": kernel, "severity": "high", "est_speedup_pct": None,
                                                   "source": "lab", "advice": f"do not {f['class']}",
                                                   **f, "evidence": json.dumps(f.get("evidence", {}))}
                                                  for f in findings]))
        if timeline:
            w.add_table("timeline_kernels", pd.DataFrame([{"name": kernel, "instances": 3, "total_ns": 30.0,
                                                           "avg_ns": 10.0, "med_ns": 10.0, "min_ns": 9.0, "max_ns": 11.0}]))
            w.add_table("timeline_kernel_events", pd.DataFrame([{"name": kernel, "start_ns": 100 * i + 5,
                                                                 "end_ns": 100 * i + 15} for i in range(3)]))
            w.add_table("timeline_nvtx_events", pd.DataFrame([{"name": "v1 range", "start_ns": 100 * i,
                                                               "end_ns": 100 * i + 20} for i in range(3)]))
        (w.dir / "profile.ncu-rep").write_bytes(b"test-made placeholder, not an ncu report")
        w.register_artifact("ncu_report", "profile.ncu-rep")
        w.manifest.update({
            "created_utc": created, "lab_version": "test", "git": {"commit": "0" * 40, "dirty": False},
            "variant": {"id": variant, "slug": "test", "title": f"{variant} test rung", "source": f"kernels/{variant}.cu",
                        "predicted_gain": "1.5x predicted by the test"},
            "problem": prob.to_dict(),
            "device": {"name": DEVICE, "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 50_000_000,
                       "memory_bytes": 80_000_000_000, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "driver": "test",
                       "peaks": {"tensor_fp16_tflops": 1000.0, "fp32_tflops": 60.0, "dram_tbps": 3.0} if peaks else None},
            "software": {"torch": "test", "cuda": "test", "ncu": "test", "python": "3"},
            "correctness": {"passed": True, "max_abs_err": 3e-6, "mean_abs_err": 4e-7, "tolerance": 1e-4,
                            "rule": "relative error <= 1e-4 against float64"},
            "timing": {"unit": "ms", "median": median, "mean": median, "std": spread / 2, "ci95_low": median - spread,
                       "ci95_high": median + spread, "min": median - spread, "max": median + spread, "reps": 30,
                       "warmup": 5, "l2_flush": True, "method": "cuda-events", "tflops": prob.forward_flops / (median * 1e9)},
            "baselines": [
                {"name": "sdpa-flash", "backend": "flash", "dtype": "float16", "status": "ok", "reason": "",
                 "median_ms": median / 1000, "std_ms": 0.0001, "ci95_low": median / 1000 * 0.99,
                 "ci95_high": median / 1000 * 1.01, "tflops": prob.forward_flops / (median / 1000 * 1e9), "ratio": 1 / 1000},
                {"name": "sdpa-flash", "backend": "flash", "dtype": "float32", "status": "unavailable",
                 "reason": "No available kernel: " + EVIL, "median_ms": None},
            ] if baselines else [],
            "profile": {"tool": "ncu", "command": ["ncu", "--nvtx", "--kernel-name", EVIL], "section_set": "test"},
            "timeline": ({"source": "test-made", "reason": "made by the test", "launch_overhead_ns": 4500.0}
                         if timeline else None),
            "findings_summary": {"bottleneck": findings[0]["class"], "count": len(findings)} if findings else None,
        })
        return w.commit()


class Parsed(HTMLParser):
    """Collects visible text, element ids and script bodies: the page as a reader (or browser) gets it."""

    def __init__(self, html: str):
        super().__init__()
        self.text, self.ids, self.scripts, self._in = [], set(), [], None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self._in = tag if tag in ("script", "style") else None
        for k, v in attrs:
            if k == "id":
                self.ids.add(v)

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts.append(data)
        elif self._in is None:
            self.text.append(data)

    @property
    def visible(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.text))


RUN_SECTIONS = ("environment", "protocol", "problem", "performance", "correctness", "roofline", "stalls",
                "occupancy", "memory", "bottleneck", "source", "timeline", "appendix")


def lab(*args, env_root: Path | None = None):
    """`lab ARGS` in this process (conftest.lab_here), reading the store `env_root` (LAB_PROFILES)."""
    return lab_here(*args, env={"LAB_PROFILES": str(env_root)} if env_root is not None else None)


# --------------------------------------------------------------------------------- run pages

def test_run_page_has_every_section_and_the_stored_numbers(tmp_path):
    root = tmp_path / "store"
    make_run(root, R1, median=12.5, kernel=EVIL,
             findings=[{"class": "small-grid", "title": "8 CTAs on 132 SMs: 0.06 waves",
                        "evidence": {"launch__grid_size": 8}, "est_speedup_pct": 93.9},
                       {"class": "latency-bound", "title": "long scoreboard stalls"}], timeline=True)
    done = report.render(tmp_path / "out", root=root)
    page = next(iter(done.pages.values()))
    html = page.read_text()
    doc = Parsed(html)
    assert set(RUN_SECTIONS) <= doc.ids
    text = doc.visible
    rd = rundata.load(list_runs(root)[0])
    # numbers on the page are the stored ones, formatted
    assert formatting.fmt_ms(12.5) in text and formatting.fmt_num(rd.tflops) in text
    assert f"{formatting.fmt_num(rd.problem.forward_flops)}" in text
    # % of the FP32 peak for a float32 rung: tflops / 60 (the test manifest's fp32 peak)
    assert formatting.fmt_pct(100 * rd.tflops / 60.0) in text
    # occupancy limiter is the smallest block limit (shared memory: 8 < 24, 32, 32)
    assert "limited by shared memory: 8 block(s) per SM" in text
    # stall reasons ranked, the largest named
    assert "long_scoreboard" in text and text.index("long_scoreboard") < text.index("math_pipe_throttle")
    # memory: DRAM 3.25x of the minimum
    assert "3.25x" in text
    # findings with evidence, secondary, and the next rung of the registry
    assert "8 CTAs on 132 SMs: 0.06 waves" in text and "launch__grid_size = 8" in text
    assert "Secondary bottlenecks" in text and "long scoreboard stalls" in text
    assert f"The ladder's next rung is {R2}" in text
    # timeline source, reason and launch overhead
    assert "test-made" in text and "made by the test" in text and f"{formatting.fmt_num(4500 / 1000)} µs" in text
    # the unavailable backend is a cell with its reason
    assert "unavailable: No available kernel:" in text
    # the appendix links the stored .ncu-rep relative to the page, and the link resolves
    href = re.search(r'<a href="([^"]+)">profile.ncu-rep</a>', html).group(1)
    assert not href.startswith("/") and (page.parent / href).resolve() == (list_runs(root)[0].path / "profile.ncu-rep").resolve()
    assert "unxz" not in html   # a plain report (as runs were stored before) opens as it is
    # the appendix's raw table holds Nsight's metrics, not the lab's derived values as one dict-valued row
    raw = html[html.index('<table class="raw">'):]
    raw = raw[:raw.index("</table>")]
    assert "<td class=metric>derived</td>" not in raw and "{&#39;" not in raw and "launch__grid_size" in raw
    # charts are inline SVG; no external resource
    assert html.count("<svg") >= 4
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_strings_from_data_are_escaped(tmp_path):
    root = tmp_path / "store"
    make_run(root, R1, kernel=EVIL, findings=[{"class": "small-grid", "title": EVIL}])
    done = report.render(tmp_path / "out", root=root)
    for path in [*done.pages.values(), done.index]:
        html = path.read_text()
        assert "<script>alert" not in html, path.name
        doc = Parsed(html)
        assert all("alert" not in s for s in doc.scripts), path.name
    html = next(iter(done.pages.values())).read_text()
    assert "&lt;script&gt;alert(" in html


def test_missing_tables_are_said_plainly(tmp_path):
    root = tmp_path / "store"
    make_run(root, R1, metrics=False, findings=None, baselines=False, peaks=False)
    text = Parsed(next(iter(report.render(tmp_path / "out", root=root).pages.values())).read_text()).visible
    assert "No Nsight Compute metrics were stored with this run" in text
    assert "No findings were stored with this run" in text
    assert "No timeline was recorded with this run" in text
    assert "this lab knows no datasheet peaks for" in text
    assert "No memory-traffic metrics were stored" in text


def test_previous_rung_gain_is_measured_from_the_stored_runs(tmp_path):
    root = tmp_path / "store"
    make_run(root, R1, median=30.0, created="2026-01-01T00:00:00+00:00")
    make_run(root, R2, median=12.0, created="2026-01-02T00:00:00+00:00")
    make_run(root, R2, median=12.0, shape=(1, 1, 64, 64), created="2026-01-03T00:00:00+00:00")
    done = report.render(tmp_path / "out", root=root)
    v2_same = next(p for rid, p in done.pages.items() if f"-{R2}-" in rid and "N256" in rid)
    v2_other = next(p for rid, p in done.pages.items() if f"-{R2}-" in rid and "N64" in rid)
    text = Parsed(v2_same.read_text()).visible
    assert f"measured gain {formatting.fmt_times(30.0 / 12.0)}" in text and "1.5x predicted by the test" in text
    assert "the CI95 intervals do not overlap" in text
    assert f"No stored run of the previous rung, {R1}" in Parsed(v2_other.read_text()).visible
    # the comparison page of the pair was rendered and is linked
    assert len(done.comparisons) == 1 and done.comparisons[0].name in v2_same.read_text()


def test_index_lists_runs_with_filters_ladder_and_history(tmp_path):
    root = tmp_path / "store"
    make_run(root, R1, median=30.0, created="2026-01-01T00:00:00+00:00")
    make_run(root, R2, median=12.0, created="2026-01-02T00:00:00+00:00",
             findings=[{"class": "small-grid", "title": "grid too small"}])
    index = report.render(tmp_path / "out", root=root).index.read_text()
    doc = Parsed(index)
    assert {"runs", "ladder", "runs-table", "ladder-select"} <= doc.ids
    assert index.count(f'data-rung="{R1}"') == 1 and index.count(f'data-rung="{R2}"') == 1
    assert f"{formatting.fmt_times(30.0 / 12.0)} over {R1}" in doc.visible   # R2's measured gain in the history
    assert "grid too small" not in doc.visible and "small-grid" in doc.visible
    assert "SDPA flash float16" in index     # a baseline bar beside the rungs


NCU_FIXTURE = PUBLIC_NCU / "LakshyaSingh354__CudaCode__gemm_reps_naive.ncu-rep"


@pytest.mark.skipif(not NCU_FIXTURE.exists(), reason="tests/fixtures/ncu-public/ lacks it")
def test_page_from_a_real_ncu_report(tmp_path):
    """Metrics and rule results of a real public report (a naive sgemm on a GTX 1660 SUPER), read with
    lab.profilers.ncu, stored under a test-made manifest: the page reads ncu's own column names."""
    from lab.profilers import ncu

    metrics = ncu.load_report(NCU_FIXTURE)
    rules = pd.DataFrame(ncu.rule_results(NCU_FIXTURE)).drop(columns=["focus_metrics"])
    root = tmp_path / "store"
    run = make_run(root, R1, metrics=False)
    m = json.loads((run / "manifest.json").read_text())
    metrics.to_parquet(run / "metrics.parquet", index=False)
    rules.to_parquet(run / "ncu_rules.parquet", index=False)
    m["tables"] = {"metrics": "metrics.parquet", "ncu_rules": "ncu_rules.parquet"}
    (run / "manifest.json").write_text(json.dumps(m))

    rd = rundata.load(list_runs(root)[0])
    k = rd.primary_kernel
    assert k["kernel"] == metrics["kernel"].iloc[int(metrics["gpu__time_duration.sum"].idxmax())]
    limits = {name: k[name] for name in ("launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
                                         "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks")}
    lowest = min(limits.values())
    text = Parsed(next(iter(report.render(tmp_path / "out", root=root).pages.values())).read_text()).visible
    assert f"{formatting.fmt_num(lowest)} block(s) per SM" in text
    if limits["launch__occupancy_limit_registers"] == lowest:
        assert "limited by registers" in text
    # the top stall reason is the largest smsp__average_warps_issue_stalled_*_per_issue_active.ratio
    stalls = {c: k[c] for c in k if c.startswith("smsp__average_warps_issue_stalled_") and c.endswith("_per_issue_active.ratio")}
    top = max(stalls, key=stalls.get).removeprefix("smsp__average_warps_issue_stalled_").removesuffix("_per_issue_active.ratio")
    assert f"The top reason, {top} ," in text or f"The top reason, {top}," in text
    dram = k["dram__bytes_read.sum"] + k["dram__bytes_write.sum"]
    assert formatting.fmt_bytes(dram) in text
    assert rules["rule_name"].iloc[0] in text and "ns" in rd.units.get("gpu__time_duration.sum", "")


NSYS_FIXTURE = PUBLIC_NSYS / "Sh1mwww__llama3-inference__real_inference_simulation.sqlite"


@pytest.mark.skipif(not NSYS_FIXTURE.exists(), reason="tests/fixtures/nsys-public/ lacks it")
def test_timeline_section_from_a_real_nsys_export(tmp_path):
    """The tables lab.profilers.timeline makes from a real public nsys export, stored as `lab profile --timeline`
    stores them, under a test-made manifest."""
    from lab.profilers.timeline import read_any

    tl = read_any(NSYS_FIXTURE)
    root = tmp_path / "store"
    run = make_run(root, R1)
    m = json.loads((run / "manifest.json").read_text())
    for name, df in tl.tables().items():
        df.to_parquet(run / f"timeline_{name}.parquet", index=False)
        m["tables"][f"timeline_{name}"] = f"timeline_{name}.parquet"
    m["timeline"] = {"source": tl.source, "reason": tl.reason, "launch_overhead_ns": tl.launch_overhead_ns}
    (run / "manifest.json").write_text(json.dumps(m))
    html = next(iter(report.render(tmp_path / "out", root=root).pages.values())).read_text()
    text = Parsed(html).visible
    section = text[text.index("Timeline Source:"):text.index("Appendix Nsight Compute command")]
    assert f"Source: {tl.source}" in section
    top = tl.kernels.sort_values("total_ns", ascending=False).iloc[0]
    assert "Kernel summary (as cuda_gpu_kern_sum)" in section and str(top["name"]) in section
    assert "NVTX ranges (as nvtx_sum)" in section and "CUDA API (as cuda_api_sum)" in section
    events = sum(len(tl.tables()[n]) for n in ("nvtx_events", "api_events", "kernel_events"))
    assert f"The first {report.TIMELINE_SPANS_MAX} of {formatting.fmt_num(events)} recorded events" in section
    svg = html[html.index('aria-label="Timeline of the recorded events"'):]
    assert svg[:svg.index("</svg>")].count('<rect class="span') == report.TIMELINE_SPANS_MAX


def test_pages_read_every_metric_they_cite():
    """A page reads only PAGE_METRICS from a stored metrics table and, for a run stored before the
    `derived` table, derives its facts from them with the analysis' own interpreter: those facts must
    equal the ones derived from every stored metric, or a page would silently show less."""
    from lab.analysis import metrics as interpret
    from lab.report.compare import KEY_METRICS
    from lab.store.runs import read_arrow

    assert [n for n, _ in KEY_METRICS if not rundata.PAGE_METRICS.match(n)] == []
    runs = sorted((Path(__file__).resolve().parent.parent / "profiles" / "examples").glob("*/metrics.parquet"))
    assert runs
    for path in runs:
        full = read_arrow(path)[0].to_pylist()[0]   # the store's reader: stored long
        page = {k: v for k, v in full.items() if rundata.PAGE_METRICS.match(k)}
        a = interpret.derived_values(interpret.kernel_facts(full))
        b = interpret.derived_values(interpret.kernel_facts(page))
        for key in ("stalls", "stall_metric_family", "occupancy_limiter", "occupancy_limit_blocks", "fp32_flops",
                    "memory_traffic", "warps"):
            assert a[key] == b[key], (path.parent.name, key)
        assert a["stalls"] and a["memory_traffic"] and a["occupancy_limiter"]


# ---------------------------------------------------------------------------------- charts

def test_roofline_places_points_by_their_numbers():
    from lab.report.charts import Roof, RooflinePoint, roofline_svg

    svg = roofline_svg([RooflinePoint("slow", 10.0, 0.1), RooflinePoint("fast", 10.0, 10.0, "base")],
                       [Roof("FP32", 60.0, "fp32")], dram_tbps=3.0)
    ys = [float(v) for v in re.findall(r'<rect class="pt c-rung" x="[\d.]+" y="([\d.]+)"', svg)]
    cy = [float(v) for v in re.findall(r'<circle class="pt c-base[^"]*" cx="[\d.]+" cy="([\d.]+)"', svg)]
    assert ys and cy and cy[0] < ys[0] - 5  # the faster point is drawn higher (smaller y)
    assert "DRAM 3.00 TB/s" in svg and "FP32" in svg


# ------------------------------------------------------------------------------- comparisons

def test_compare_flags_a_regression_only_beyond_noise_and_threshold(tmp_path):
    root = tmp_path / "store"
    fast = rundata.load(Run(make_run(root, R2, median=10.0, spread=0.1, run_id="fast",
                                     findings=[{"class": "small-grid", "title": "grid"}])))
    slow = rundata.load(Run(make_run(root, R2, median=12.0, spread=0.1, run_id="slow",
                                     findings=[{"class": "latency-bound", "title": "stalls"}])))
    noisy = rundata.load(Run(make_run(root, R2, median=12.0, spread=3.0, run_id="noisy")))
    c = compare_runs(fast, slow, threshold_pct=5.0)
    assert c.regression and c.overlap is False
    assert [f["class"] for f in c.findings["resolved"]] == ["small-grid"]
    assert [f["class"] for f in c.findings["new"]] == ["latency-bound"]
    assert not compare_runs(fast, slow, threshold_pct=25.0).regression      # within the threshold
    assert not compare_runs(fast, noisy, threshold_pct=5.0).regression      # within noise
    assert not compare_runs(slow, fast, threshold_pct=5.0).regression       # an improvement
    d = c.to_json()
    assert d["a"]["run"] == "fast" and d["regression"] is True
    assert d["tflops_change_pct"] == pytest.approx(100 * (10.0 / 12.0 - 1))


def test_compare_shows_the_work_and_the_rate_it_issued_at_from_real_profiles():
    """Two shipped H100 profiles of v9 (D=64 causal, D=128 non-causal, both at N = 512): the comparison's
    rows read the work (executed instructions, cycles) and its issue rate (executed IPC), and the pipes
    beside the tensor core's, from the stored ncu metrics as Nsight names them."""
    from lab.store.runs import find_run

    a = rundata.load(find_run("20261127-182742-v9-B32-H32-N512-D64-causal-float16", EXAMPLES.parent))
    b = rundata.load(find_run("20261127-182809-v9-B32-H16-N512-D128-float16", EXAMPLES.parent))
    rows = {r["label"]: r for r in compare_runs(a, b, threshold_pct=5.0).metrics}
    assert rows["Executed instructions"]["a"] == 53_365_788 and rows["Executed instructions"]["b"] < 53_365_788
    assert rows["Executed IPC active"]["a"] == pytest.approx(1.758, abs=1e-3)
    assert rows["Elapsed cycles"]["a"] > rows["SM active cycles"]["a"] > 0
    assert rows["XU pipe issue (%)"]["a"] == pytest.approx(36.9, abs=0.05)
    assert 0 < rows["ALU pipe issue (%)"]["b"] < rows["ALU pipe issue (%)"]["a"]


def test_compare_says_when_the_timings_and_the_kernels_disagree():
    """Shipped H100 runs at 16,32,1024,64 causal: v9 and cuDNN's own kernel (profiled as a python rung, its call
    timed with Python and torch's dispatch in it). The call latencies differ by half; the kernels' ncu durations
    by 0.3%: compare says the difference is around the kernels. Two v9 runs whose times and kernels move
    together (step 15's pair, H200) get no such warning."""
    from lab.report.compare import kernels_ms
    from lab.store.runs import find_run

    load = lambda run_id: rundata.load(find_run(run_id, EXAMPLES.parent))  # noqa: E731
    v9, cudnn = load("20261128-090753-v9-B16-H32-N1024-D64-causal-float16"), \
        load("20261128-090919-cudnn-B16-H32-N1024-D64-causal-float16")
    assert kernels_ms(v9) == pytest.approx(0.2068, abs=1e-4) and kernels_ms(cudnn) == pytest.approx(0.2074, abs=1e-4)
    c = compare_runs(v9, cudnn, threshold_pct=5.0)
    said = [w for w in c.warnings if w.startswith("the timings and the kernels disagree")]
    assert len(said) == 1 and "Nsight Compute duration +0.29%" in said[0] and "not in them" in said[0], c.warnings
    assert c.regression   # the verdict stays on the timed calls; the warning says how to read it
    pair = compare_runs(load("20261128-064529-v9-B16-H32-N1024-D64-float16"),
                        load("20261128-064553-v9-B16-H32-N1024-D64-float16-cand8"), threshold_pct=5.0)
    assert not any(w.startswith("the timings and the kernels disagree") for w in pair.warnings), pair.warnings


def test_a_deterministic_run_is_never_read_as_the_defaults(tmp_path):
    """Same rung, same shape, one run --deterministic: compare says which is which, and the index keeps
    them apart (the latest run of a rung per group must not be the other mode's)."""
    from lab.report.pages import ladder_groups

    root = tmp_path / "store"
    plain = rundata.load(Run(make_run(root, R2, median=10.0, run_id="plain")))
    det = rundata.load(Run(make_run(root, R2, median=11.0, run_id="det", deterministic=True,
                                    created="2026-01-02T00:00:00+00:00")))
    assert det.problem.deterministic and det.problem.label().endswith("-deterministic")
    c = compare_runs(plain, det, threshold_pct=50.0)
    assert c.comparable and any("B's backward ran its deterministic mode" in w for w in c.warnings), c.warnings
    assert det.shape_label() != plain.shape_label() and len(ladder_groups([plain, det])) == 2


def test_lab_compare_exit_codes_and_json(tmp_path):
    root = tmp_path / "store"
    make_run(root, R2, median=10.0, run_id="fast")
    make_run(root, R2, median=12.0, run_id="slow")
    out = tmp_path / "out"
    r = lab("compare", "fast", "slow", "--json", "--out", str(out), env_root=root)
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    assert d["regression"] is True and Path(d["html"]).is_file()
    assert "REGRESSION" in Parsed(Path(d["html"]).read_text()).visible
    r = lab("compare", "slow", "fast", "--out", str(out), env_root=root)
    assert r.returncode == 0 and "no regression" in r.stdout
    for bad in (("nope", "fast"), ("fast", "slow", "--threshold", "-1")):
        r = lab("compare", *bad, "--out", str(out), env_root=root)
        assert r.returncode == 2 and "error:" in r.stderr and "Traceback" not in r.stderr


def test_lab_compare_reads_a_bare_report_beside_a_run_as_kernels_not_speeds(tmp_path):
    """v9's shipped H100 profile against cuDNN's kernel at the same shape (32,32,512,64 causal fp16, an H200
    report in tests/fixtures/ncu): the same work in as many instructions (53.37 M against 53.49 M) at a
    higher issue rate on cuDNN's side, which is step 8's reading (benchmarks/v9_notes.md); no speed
    verdict, since a bare report holds no timing of the lab's; a missing report is refused."""
    from conftest import FIXTURES

    cudnn = str(FIXTURES / "ncu" / "sdpa-cudnn-fwd-d64-causal.ncu-rep.xz")
    r = lab("compare", "20261127-182742-v9-B32-H32-N512-D64-causal-float16", cudnn, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["timed"] is False and (d["a"]["source"], d["b"]["source"]) == ("run", "report")
    assert "64x128x64" in d["b"]["kernel"] and "fwd_kernel_o_tma" in d["a"]["kernel"]
    rows = {x["label"]: x for x in d["metrics"]}
    assert (rows["Executed instructions"]["a"], rows["Executed instructions"]["b"]) == (53_365_788, 53_487_756)
    assert rows["Executed IPC active"]["b"] > rows["Executed IPC active"]["a"]
    assert rows["Elapsed cycles"]["change_pct"] < -5
    r = lab("compare", "20261127-182742-v9-B32-H32-N512-D64-causal-float16", cudnn)
    assert r.returncode == 0 and "is a bare Nsight Compute report" in r.stdout and "different GPUs" in r.stdout
    r = lab("compare", cudnn, cudnn, "--threshold", "2")
    assert r.returncode == 0 and "--threshold not used" in r.stderr
    r = lab("compare", cudnn, str(tmp_path / "missing.ncu-rep"))
    assert r.returncode == 2 and "no such Nsight Compute report" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------- lab report on the CLI

def test_lab_report_prints_the_index_and_renders_every_run(tmp_path):
    root = tmp_path / "store"
    make_run(root, R1, created="2026-01-01T00:00:00+00:00")
    make_run(root, R2, created="2026-01-02T00:00:00+00:00")
    out = tmp_path / "out"
    r = lab("report", "--out", str(out), env_root=root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out / "index.html")
    assert len(list(out.glob("2026*.html"))) == 2
    r = lab("report", "--out", str(out), "--run", "20260102", env_root=root)
    assert r.returncode == 0 and r.stdout.strip().endswith("-v2-B2-H4-N256-D64-float32.html")


def test_lab_report_and_compare_need_no_torch(tmp_path):
    """Run with `import torch` made to fail: rendering reads only the store."""
    root = tmp_path / "store"
    make_run(root, R1, median=30.0, run_id="a", created="2026-01-01T00:00:00+00:00")
    make_run(root, R2, median=12.0, run_id="b", created="2026-01-02T00:00:00+00:00")
    # one child runs both commands (the interpreter's start and the lab's imports paid once), each as
    # `lab` would: its exit code is the one click's main gives
    code = ("import json, sys; sys.modules['torch'] = None\n"
            "from lab.cli import main\n"
            "for args in json.loads(sys.argv[1]):\n"
            "    try:\n"
            "        main(args)\n"
            "    except SystemExit as e:\n"
            "        if e.code:\n"
            "            sys.exit(f'lab {args[0]}: exit {e.code}')\n")
    env = {**os.environ, "LAB_PROFILES": str(root)}
    commands = [["report", "--out", str(tmp_path / "o")], ["compare", "a", "b", "--out", str(tmp_path / "o")]]
    r = subprocess.run([sys.executable, "-c", code, json.dumps(commands)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "index.html").is_file() and list((tmp_path / "o").glob("compare-*.html"))


def test_render_run_page_as_lab_profile_calls_it(tmp_path):
    root = tmp_path / "store"
    other = make_run(root, R1, created="2026-01-01T00:00:00+00:00")
    run_dir = make_run(root, R2, created="2026-01-02T00:00:00+00:00")
    page = report.render_run_page(run_dir, tmp_path / "out")
    assert page == tmp_path / "out" / f"{run_dir.name}.html" and page.is_file()
    assert (tmp_path / "out" / "index.html").is_file()
    assert not (tmp_path / "out" / f"{other.name}.html").exists()   # only the asked run's page


def test_lab_report_open_hands_the_index_to_the_browser(tmp_path):
    root = tmp_path / "store"
    make_run(root, R1)
    opened = tmp_path / "opened.txt"
    fake_browser = f"{sys.executable} -c 'import sys; open(sys.argv[2], \"w\").write(sys.argv[1])' %s {opened}"
    env = {**os.environ, "LAB_PROFILES": str(root), "BROWSER": fake_browser}
    r = subprocess.run([sys.executable, "-m", "lab.cli", "report", "--out", str(tmp_path / "o"), "--open"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert opened.read_text() == (tmp_path / "o" / "index.html").resolve().as_uri()


def test_lab_report_in_a_folder_with_no_store(tmp_path):
    """`lab report` where there is no profiles/ and no LAB_PROFILES (a new folder): the default store
    may not exist yet, so an empty index and a message, exit 0 (it was refused as a named store that
    does not exist: render opened the default store, then load_all opened the path it got back)."""
    env = {k: v for k, v in os.environ.items() if k != "LAB_PROFILES"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-m", "lab.cli", "report"], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "no stored runs in profiles" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "reports" / "index.html").is_file() and not (tmp_path / "profiles").exists()


def test_lab_report_empty_store_and_bad_input(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = lab("report", "--out", str(tmp_path / "o"), env_root=empty)   # nothing to render is not an error
    assert r.returncode == 0 and "no stored runs in" in r.stderr and "Traceback" not in r.stderr
    assert "No stored runs in" in Parsed((tmp_path / "o" / "index.html").read_text()).visible
    root = tmp_path / "store"
    make_run(root, R1)
    r = lab("report", "--out", str(tmp_path / "o"), "--run", "does-not-exist", env_root=root)
    assert r.returncode == 2 and "no stored run" in r.stderr
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    r = lab("report", "--out", str(tmp_path / "o"), env_root=not_a_dir)
    assert r.returncode == 2 and "not a run store directory" in r.stderr
    # a damaged run (tests/test_faults.py has the class) is listed, not fatal: the others render
    make_run(root, R2, created="2026-01-02T00:00:00+00:00")
    bad = next(root.glob(f"2026*-{R1}-*"))
    (bad / "manifest.json").write_text('{"schema_version": 1, "run_id": "x", "timing": {"median": "fast"}}')
    r = lab("report", "--out", str(tmp_path / "o"), env_root=root)
    assert r.returncode == 0 and "warning: damaged run left out" in r.stderr and "Traceback" not in r.stderr
    assert bad.name in Parsed((tmp_path / "o" / "index.html").read_text()).visible


def _link(src, dst):
    """A hard link where the filesystem allows one, else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def test_lab_report_renders_50_runs(tmp_path):
    """50 copies of a recorded example run (its metrics table has ~1,400 columns), or of a test-made
    run before examples exist. Its speed target (< 2 s) is measured by benchmarks/cpu_speed.py."""
    root = tmp_path / "store"
    if EXAMPLE_RUNS:
        first = root / EXAMPLE_RUNS[-1].id
        shutil.copytree(EXAMPLE_RUNS[-1].path, first)
    else:
        first = make_run(root, R1, findings=[{"class": "small-grid", "title": "grid"}], timeline=True)
    for i in range(49):
        dest = root / f"{first.name}-copy{i:02d}"
        shutil.copytree(first, dest, copy_function=_link)   # the run's 8 MB shared, not copied 49 times
        m = json.loads((dest / "manifest.json").read_text())
        m["run_id"] = dest.name
        (dest / "manifest.json").unlink()                    # a manifest of its own, not the first's
        (dest / "manifest.json").write_text(json.dumps(m))
    assert len(list_runs(root)) == 50
    out = tmp_path / "out"
    r = lab("report", "--out", str(out), env_root=root)
    assert r.returncode == 0, r.stderr
    assert len([p for p in out.glob("*.html") if not p.name.startswith(("index", "compare-", "ledger"))]) == 50


# ------------------------------------------------------------------- the shipped example runs

EXAMPLE_RUNS = list_runs(EXAMPLES.parent) if EXAMPLES.is_dir() else []
EXAMPLE_RUNS = [r for r in EXAMPLE_RUNS if r.path.parent == EXAMPLES]


def test_example_runs_render(examples_rendered):
    """The runs recorded on the GPU machine: every page renders, and its numbers are the stored ones."""
    done = examples_rendered
    assert len(done.pages) == len(EXAMPLE_RUNS)
    runs = [rundata.load(r) for r in EXAMPLE_RUNS]
    for rd in runs:
        html = done.pages[rd.id].read_text()
        doc = Parsed(html)
        assert set(RUN_SECTIONS) <= doc.ids
        text = doc.visible
        assert formatting.fmt_ms(rd.median_ms) in text and rd.device_name in text
        if rd.kernels:
            assert rd.primary_kernel["kernel"] in text
        found = rd.table("findings")
        if found is not None and found.rows:
            assert found.rows[0]["title"] in text
        report_file = (rd.manifest.get("artifacts") or {}).get("ncu_report")
        if report_file:   # kept xz-compressed (lab.store.runs): linked where it lies, and how to open it in the UI
            href = re.search(r'<a href="([^"]+)">' + re.escape(report_file) + '</a>', html).group(1)
            assert (done.pages[rd.id].parent / href).resolve().is_file() and report_file.endswith(".ncu-rep.xz")
            assert f"unxz -k {report_file}" in text
        executed = rundata.sass_fp32_flops(rd.primary_kernel)
        if executed:
            assert f"ncu counted {formatting.fmt_num(executed)} FP32 operations executed" in text
        prev_id, prev = rundata.ladder_neighbour(rd, runs, -1)
        if prev is not None:   # the gain over the previous rung is computed from the two stored medians
            assert f"measured gain {formatting.fmt_times(prev.median_ms / rd.median_ms)}" in text
            assert report.compare_filename(prev.id, rd.id) in [p.name for p in done.comparisons]
    index = Parsed(done.index.read_text()).visible
    assert all(rd.id in index for rd in runs)

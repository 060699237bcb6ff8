"""The torch.profiler timeline end to end on a GPU, on a tiny torch matmul: nothing here uses the
lab's kernels or build. Run on the GPU machine with `pytest -m gpu tests/test_timeline_gpu.py`;
skipped cleanly elsewhere.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

from lab.profilers import kineto, nsys  # noqa: E402
from lab.profilers.timeline import collect_timeline, from_events  # noqa: E402
from conftest import REPO  # noqa: E402

RANGE = "lab timeline gpu test"
LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def _matmul():
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    c = torch.empty_like(a)
    return lambda: torch.mm(a, b, out=c)


def _event_time_us(launch, reps: int = 20) -> float:
    """The same launch timed with CUDA events: what a kernel duration must be comparable with."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def test_profile_launches_puts_the_kernels_inside_the_range(tmp_path):
    launch = _matmul()
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    repeats = 5
    trace = tmp_path / "trace.json"
    kineto.profile_launches(launch, repeats, trace, RANGE)
    tl = from_events(kineto.read_trace(trace), range_name=RANGE, launches_per_range=repeats)

    assert tl.source == "torch.profiler"
    in_range = tl.nvtx_kernels[tl.nvtx_kernels["range"] == RANGE]
    assert not in_range.empty, tl.nvtx_kernels
    launched = int(in_range["instances"].sum())
    assert launched >= repeats and launched % repeats == 0   # each matmul launches the same kernels

    events = tl.kernel_events[tl.kernel_events["nvtx_range"] == RANGE]
    assert len(events) == launched
    for col in ("grid_x", "block_x", "registers_per_thread"):
        assert (events[col].astype("int64") > 0).all(), col
    span = tl.launch_overhead["span_ns_median"]
    assert (events["duration_ns"] > 0).all() and (events["duration_ns"] < span).all()
    per_launch_us = tl.launch_overhead["kernel_busy_ns_median"] / repeats / 1e3
    event_us = _event_time_us(launch)
    assert event_us / 20 < per_launch_us < event_us * 2, (per_launch_us, event_us)
    assert tl.launch_overhead_ns >= 0

    launches = tl.api[tl.api["name"].isin(LAUNCH_APIS)]
    assert int(launches["num_calls"].sum()) >= launched
    json.dumps(tl.to_json())   # JSON-ready


def test_collect_timeline_falls_back_end_to_end(tmp_path):
    """A child that is not the lab's target (a torch matmul) driven by collect_timeline. Where
    nsys cannot write reports (the GPU machine), the torch.profiler trace stands in and says why."""
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent(f"""
        import argparse, torch
        ap = argparse.ArgumentParser()
        ap.add_argument("--repeat", type=int, default=1)
        ap.add_argument("--torch-profile", default=None)
        args = ap.parse_args()
        a = torch.randn(512, 512, device="cuda")
        c = torch.empty_like(a)
        launch = lambda: torch.mm(a, a, out=c)
        for _ in range(3):
            launch()
        torch.cuda.synchronize()
        if args.torch_profile:
            from lab.profilers.kineto import profile_launches
            profile_launches(launch, args.repeat, args.torch_profile, {RANGE!r})
        else:
            torch.cuda.nvtx.range_push({RANGE!r})
            for _ in range(args.repeat):
                launch()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
    """))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    status = nsys.nsys_status()
    tl = collect_timeline([sys.executable, str(child)], tmp_path / "timeline", RANGE, 4, env=env)
    if status.can_write_reports:
        assert tl.source == "nsys" and tl.reason is None
        assert Path(tl.artifacts["sqlite"]).is_file()
    else:
        assert tl.source == "torch.profiler"
        assert tl.reason == status.reason and tl.reason
        trace = Path(tl.artifacts["trace"])
        assert trace.is_file() and "traceEvents" in json.loads(trace.read_text())
        assert not list((tmp_path / "timeline").glob("*.qdstrm"))   # no gigabyte leftovers
    assert tl.launch_overhead["instances"] == 1 and tl.launch_overhead["launches_per_instance"] == 4
    assert all(hasattr(df, "to_parquet") for df in tl.tables().values())

    forced = collect_timeline([sys.executable, str(child)], tmp_path / "forced", RANGE, 2, env=env, use_nsys=False)
    assert forced.source == "torch.profiler" and "caller" in forced.reason


def test_nsys_status_explains_itself_here():
    st = nsys.nsys_status()
    assert st.reason
    if st.found and not st.can_write_reports:
        assert "QdstrmImporter" in st.reason or "does not run" in st.reason
    if not st.found:
        assert "not on PATH" in st.reason

"""lab sweep's real measurer on a GPU: v5 and the baselines in every mode and both timing methods,
a GQA shape, an out-of-memory cell (each measured by the one pinned worker `lab sweep` starts
without --gpus), and a sweep spread over two worker processes on one GPU that equals the same sweep
measured in the lab's own process (--in-process) within noise. Run with `pytest -m gpu` on the GPU machine."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

from click.testing import CliRunner  # noqa: E402

from lab.cli import main  # noqa: E402
from lab.store import sweeps as store  # noqa: E402
from lab.ladder.registry import builtin  # rungs by what they declare, not by id

F16 = next(v.id for v in builtin() if "float16" in v.dtypes and v.min_cc <= (8, 0))   # mma.sync rung
F32 = next(v.id for v in builtin() if v.dtypes == ("float32",) and v.grid == "q-tiles,bh")


def sweep(root, *args):
    r = CliRunner().invoke(main, ["sweep", *args], env={"LAB_PROFILES": str(root)}, catch_exceptions=False)
    return r


def test_every_mode_and_timing_method_on_small_and_gqa_shapes(tmp_path):
    r = sweep(tmp_path, "--variant", F16, "--shape", "1,4,{128,512},64", "--shape", "2,8:2,256,128", "--causal", "both",
              "--mode", "fwd,bwd,fwd+bwd", "--timing", "both", "--reps", "10", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    df = sw.table()
    assert set(df.worker) == {"gpu0-1"}   # without --gpus, one worker pinned to GPU 0 measured (lab sweep's default)
    v5 = df[(df.impl == F16) & (df.heads_kv == df.heads)]
    assert set(v5[v5["mode"] == "fwd"].status) == {"ok"}   # graph capture of the rung included
    assert set(df[(df.impl == F16) & (df.heads_kv != df.heads)].status) == {"unsupported"}
    assert (v5[v5["mode"] != "fwd"].reason.str.contains("no backward")).all()
    for impl in ("sdpa-flash", "sdpa-math", "standard"):
        rows = df[(df.impl == impl) & (df.heads_kv == df.heads)]
        assert set(rows.status) == {"ok"}, rows[["label", "mode", "timing", "reason"]].to_string()
    gqa = df[(df.heads_kv != df.heads) & df.impl.isin(["sdpa-math", "standard"])]
    assert len(gqa) and set(gqa.status) == {"ok"}
    ok = df[df.status == "ok"]
    assert (ok.median_ms > 0).all() and (ok.peak_memory_bytes >= 0).all()
    # device time (graph) cannot exceed call latency (events) by more than noise
    ev = ok[ok.timing == "events"].set_index(["impl", "label", "mode"]).median_ms
    gr = ok[ok.timing == "graph"].set_index(["impl", "label", "mode"]).median_ms
    both = ev.index.intersection(gr.index)
    assert len(both) and (gr[both] <= ev[both] * 1.2).all()


def test_standard_attention_out_of_memory_is_a_row(tmp_path):
    r = sweep(tmp_path, "--shape", "1,16,262144,64", "--baselines", "standard", "--reps", "5")
    assert r.exit_code == 0, r.output + r.stderr
    (row,) = store.list_sweeps(tmp_path)[0].rows()
    assert row["status"] == "oom" and "GiB" in row["reason"]


def test_two_workers_on_one_gpu_equal_one_process_within_noise(tmp_path):
    # the lab's own process (--in-process: no worker) against two workers sharing GPU 0
    # graph timing: the device time that another worker's kernels would disturb. Event times of these
    # 0.04 ms calls are the host's dispatch, which differed by 33% between two runs of one process on an
    # H100 (2026-11-26); workers sharing a GPU take turns (GpuMeasurer.turn), so only noise is left
    args = ["--shape", "4,16,{512,1024,2048},64", "--baselines", "sdpa-flash,sdpa-cudnn", "--timing", "graph"]
    assert sweep(tmp_path / "one", *args, "--in-process").exit_code == 0
    r = sweep(tmp_path / "two", *args, "--gpus", "0,0")
    assert r.exit_code == 0, r.output + r.stderr
    one, two = store.list_sweeps(tmp_path / "one")[0].table(), store.list_sweeps(tmp_path / "two")[0].table()
    key = ["impl", "label", "mode", "timing"]
    m = one.merge(two, on=key, suffixes=("_1", "_2"))
    assert len(m) == len(one) == len(two)
    # medians within 25%: the two workers take turns on the one GPU
    m["ratio"] = m.median_ms_1 / m.median_ms_2
    assert ((m.ratio - 1).abs() < 0.25).all(), m[key + ["median_ms_1", "median_ms_2", "ratio"]].to_string()


def test_each_row_names_the_gpu_its_worker_was_pinned_to(tmp_path):
    """The worker for --gpus G measures on CUDA device G of this process (pinned by UUID, whatever
    CUDA's device order), and each row says so: that GPU's UUID and name, the pin, the host's
    (nvidia-smi's) index of it, and its clocks and power limit as nvidia-smi reads them."""
    import subprocess

    from lab.environment import gpu_uuids

    last = torch.cuda.device_count() - 1
    r = sweep(tmp_path, "--variant", F16, "--shape", "1,4,{256,512},64", "--baselines", "sdpa-flash",
              "--timing", "events", "--reps", "10", "--gpus", str(last))
    assert r.exit_code == 0, r.output + r.stderr
    df = store.list_sweeps(tmp_path)[0].table()
    uuid = gpu_uuids()[last]
    assert set(df.gpu_uuid) == {uuid} and set(df.cuda_visible_devices) == {uuid} and set(df.gpu) == {str(last)}
    assert set(df.gpu_name) == {torch.cuda.get_device_properties(last).name}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=uuid,index,power.limit", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    host = {u.strip(): (int(i), float(w)) for u, i, w in (line.split(",") for line in smi.strip().splitlines())}
    assert set(df.gpu_host_index) == {host[uuid][0]} and set(df.power_limit_w) == {host[uuid][1]}
    assert (df.sm_clock_mhz > 0).all() and (df.mem_clock_mhz > 0).all()
    assert set(df.gpu_probe_source) == {"nvml"}   # read in the worker's process, no nvidia-smi started


def test_a_sweep_under_load_times_every_cell_behind_its_stretch_and_keeps_nvml_s_reading(tmp_path):
    """`lab sweep --under-load` through the real worker: every timed row says the stretch and what NVML read
    (a clock at most the GPU's maximum, a share in [0, 1]); the plan keeps the stretch."""
    r = sweep(tmp_path, "--variant", F16, "--shape", "2,8,512,64", "--baselines", "sdpa-flash", "--timing", "both",
              "--reps", "6", "--under-load", "20", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    assert sw.plan_dict["under_load_ms"] == 20
    ok = sw.table()
    ok = ok[ok.status == "ok"]
    assert len(ok) >= 4 and (ok.under_load_ms == 20).all()
    assert ok.load_sm_clock_mhz.notna().all() and (ok.load_sm_clock_mhz > 0).all()
    assert ((ok.load_power_capped_share >= 0) & (ok.load_power_capped_share <= 1)).all()

"""`lab bench --kernels` on a GPU, through the command a user types: the split of a backward rung (the
Hopper backward on compute capability 9.0, else the mma.sync one) and of SDPA's cuDNN backend, in
bwd, fwd+bwd and fwd; a user's own (python) rung split; a rung that fails its check split never.

What it holds the split to: every name non-empty, times and launches positive, ordered by time, shares
summing to 100%; the sum above 0 and at most 1.1x the bench's own median for the same implementation
(the sum is device time only, the median a call's latency); the rung's largest kernel a __global__
function of the lab's kernel sources, and none of those in cuDNN's split.
The CPU side (aggregation, wiring, table, refusals): tests/test_kernel_split.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.ladder.registry import builtin  # noqa: E402
from lab.measure.kernelsplit import EXCLUDES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WS = ROOT / "tests" / "fixtures" / "pairing_ws"
HAS_GPU = torch.cuda.is_available()
CC = torch.cuda.get_device_capability(0) if HAS_GPU else (0, 0)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")]
# by what they declare: the newest built-in backward this GPU runs (v8 on sm_90, else v7)
RUNG = next((v for v in reversed(builtin()) if v.backward and v.min_cc <= CC), None)
SHAPE = "8,16,512,128"


@pytest.fixture
def lab(tmp_path):
    def run(*args, workspace="none"):
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, LAB_WORKSPACE=str(workspace), LAB_PROFILES=str(tmp_path / "store"),
                   COLUMNS="200")
        return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=300)
    return run


def _sane(split: dict, median_ms: float, calls: int, who: str) -> None:
    assert "error" not in split, f"{who}: {split.get('error')}"
    assert split["calls"] == calls
    kernels = split["kernels"]
    assert kernels, f"{who}: no kernels recorded"
    for k in kernels:
        assert k["name"].strip() and k["short_name"].strip(), (who, k)
        assert k["launches_per_call"] > 0 and k["us_per_call"] > 0 and k["median_us_per_launch"] > 0, (who, k)
    times = [k["us_per_call"] for k in kernels]
    assert times == sorted(times, reverse=True), who
    assert sum(k["share_pct"] for k in kernels) == pytest.approx(100.0, abs=0.01)
    assert sum(times) == pytest.approx(split["sum_us"], rel=1e-6)
    assert 0 < split["sum_us_min"] <= split["sum_us"] <= split["sum_us_max"]
    # device time only: never more than the bench's call latency for the same calls (10% for the spread)
    assert 0 < split["sum_us"] <= median_ms * 1e3 * 1.1, (who, split["sum_us"], median_ms)
    if split["streams"] == 1:   # one stream: the kernels cannot overlap, so the span holds the sum
        assert split["span_us"] >= split["sum_us"] * 0.999, who


def _function(name: str) -> str:
    """A kernel's function name, without namespace, template arguments or parameters (`bwd_kernel_tdq`)."""
    from lab.demangle import short_name

    return short_name(name).split("<", 1)[0].split("::")[-1].strip()


def _lab_kernels(variant) -> set[str]:
    """The __global__ functions of the lab's kernel sources (the rung's file and the headers beside it)."""
    import re

    names = set()
    for f in variant.source.parent.rglob("*.cu*"):
        text = re.sub(r"__launch_bounds__\s*\([^)]*\)", "", f.read_text())
        names.update(re.findall(r"__global__\s+(?:static\s+)?void\s+(\w+)\s*\(", text))
    return names


@pytest.mark.skipif(HAS_GPU and RUNG is None, reason="no built-in backward rung runs on this GPU")
def test_bench_kernels_splits_the_rung_and_cudnn_in_bwd(lab):
    res = lab("bench", "--variant", RUNG.id, "--mode", "bwd", "--shape", SHAPE, "--dtype", "float16",
              "--backends", "cudnn", "--reps", "10", "--warmup", "2", "--kernels", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["kernel_calls"] == 20
    [row] = out["rows"]
    assert row["correct"] and "timing" in row
    _sane(row["kernel_split"], row["timing"]["median"], 20, RUNG.id)
    ours = _lab_kernels(RUNG)
    assert {"bwd_preprocess_kernel", "bwd_convert_kernel"} <= ours, sorted(ours)   # the reader finds the kernels
    names = [_function(k["name"]) for k in row["kernel_split"]["kernels"]]
    assert names[0] in ours, (names, sorted(ours))   # the largest is one of the rung's own kernels
    cudnn = {(b["backend"], b["dtype"]): b for b in row["baselines"]}
    ok = cudnn[("cudnn", "float16")]
    assert ok["status"] == "ok", ok
    _sane(ok["kernel_split"], ok["median_ms"], 20, "sdpa-cudnn fp16")
    assert not ours & {_function(k["name"]) for k in ok["kernel_split"]["kernels"]}   # cuDNN's are its own
    for b in row["baselines"]:   # a baseline given no time (cuDNN has no fp32) has no split either
        assert ("kernel_split" in b) == (b["status"] == "ok"), b
    assert f"kernel split {RUNG.id}" in res.stderr


@pytest.mark.skipif(HAS_GPU and RUNG is None, reason="no built-in backward rung runs on this GPU")
def test_bench_kernels_prints_the_table_in_fwd_bwd_and_splits_the_forward(lab):
    res = lab("bench", "--variant", RUNG.id, "--mode", "fwd+bwd", "--shape", SHAPE, "--dtype", "float16",
              "--no-baselines", "--reps", "10", "--warmup", "2", "--kernels", "--kernel-calls", "5")
    assert res.returncode == 0, res.stderr[-3000:]
    text = " ".join(res.stdout.split())
    assert "kernel split, fwd+bwd, B8-H16-N512-D128: device time per call, mean of 5 traced calls" in text
    assert f"{RUNG.id} fp16" in text and "sum (per call" in text
    assert " ".join(EXCLUDES.split()) in text
    fwd = lab("bench", "--variant", RUNG.id, "--mode", "fwd", "--shape", SHAPE, "--dtype", "float16",
              "--backends", "cudnn", "--reps", "10", "--warmup", "2", "--kernels", "--kernel-calls", "3", "--json")
    assert fwd.returncode == 0, fwd.stderr[-3000:]
    [row] = json.loads(fwd.stdout)["rows"]
    _sane(row["kernel_split"], row["timing"]["median"], 3, f"{RUNG.id} fwd")
    ok = next(b for b in row["baselines"] if b["backend"] == "cudnn" and b["dtype"] == "float16")
    _sane(ok["kernel_split"], ok["median_ms"], 3, "sdpa-cudnn fwd")


def test_a_users_own_rung_is_split_and_a_rung_that_fails_its_check_is_not(lab):
    """The pairing workspace's python rungs: p1+p3 passes and is split (its kernels are PyTorch's);
    p2+p3 reads a wrong LSE, fails its check, is not timed, and so gets no split (exit 1)."""
    res = lab("bench", "--variant", "p1+p3,p2+p3", "--mode", "bwd", "--shape", "2,4,256,64", "--dtype", "float16",
              "--no-baselines", "--reps", "5", "--warmup", "1", "--kernels", "--kernel-calls", "4", "--json",
              workspace=WS)
    assert res.returncode == 1, res.stderr[-3000:]
    good, bad = json.loads(res.stdout)["rows"]
    assert good["variant"] == "p1+p3" and good["correct"]
    _sane(good["kernel_split"], good["timing"]["median"], 4, "p1+p3")
    assert bad["variant"] == "p2+p3" and not bad["correct"]
    assert "kernel_split" not in bad and "timing" not in bad
    assert "kernel split p2+p3" not in res.stderr and "wrong results from p2+p3" in res.stderr

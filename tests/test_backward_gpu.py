"""The backward on the GPU, through the commands a user types, on the fixture workspace's python
rungs (tests/fixtures/backward_ws: b1 right, b2 with dK x 1.05, b3 without a backward):

  lab check --mode bwd    b1 passes (fp16, bf16), b2 exits 1 naming dK, its shape and worst element
  lab bench --mode bwd    b1 timed beside SDPA's backends at 2.5x the forward's FLOPs, GQA shape; b2 gated out
  lab sweep --mode bwd    b1 timed, b3 an "unsupported" row with its reason
  lab profile --mode bwd  ncu over every kernel of b1's backward inside the NVTX range; manifest mode bwd

CPU side (refusals, the reference, the per-tensor judgement): tests/test_backward.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

ROOT = Path(__file__).resolve().parent.parent
WS = ROOT / "tests" / "fixtures" / "backward_ws"
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")]


@pytest.fixture
def lab(tmp_path):
    def run(*args):
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)   # keep what the caller added
        env = dict(os.environ, PYTHONPATH=path, LAB_WORKSPACE=str(WS), LAB_PROFILES=str(tmp_path / "store"))
        return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                              env=env)
    return run


@pytest.mark.parametrize("dtype, shapes", [("float16", 14), ("bfloat16", 5)])
def test_a_right_backward_passes_its_check(lab, dtype, shapes):
    res = lab("check", "--variant", "b1", "--mode", "bwd", "--dtype", dtype, "--shapes", str(shapes), "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    [result] = json.loads(res.stdout)
    assert result["passed"] and result["mode"] == "bwd" and len(result["shapes"]) == shapes
    assert all([t["tensor"] for t in s["tensors"]] == ["O", "LSE", "dQ", "dK", "dV"] for s in result["shapes"])
    labels = " ".join(result["shapes_checked"])
    assert "N1-" in labels and "N113x203" in labels   # one row, ragged Nq != Nk
    if shapes >= 14:   # the corners through large logits and GQA
        assert "large logits" in labels and "kv2" in labels and "N1x239" in labels


def test_a_wrong_dk_exits_1_naming_the_tensor_shape_and_element(lab):
    res = lab("check", "--variant", "b2", "--mode", "bwd", "--dtype", "float16", "--shapes", "3")
    assert res.returncode == 1, res.stderr[-3000:]
    assert "b2 is wrong: dK on B" in res.stderr and "worst element [" in res.stderr, res.stderr[-2000:]
    assert "float64 says" in res.stderr


def test_bench_times_the_rungs_backward_beside_sdpas(lab):
    res = lab("bench", "--variant", "b1", "--mode", "bwd", "--shape", "2,8:2,512,64", "--dtype", "float16",
              "--backends", "flash,math", "--reps", "10", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    [row] = out["rows"]
    assert out["mode"] == row["mode"] == "bwd" and row["correct"]
    assert row["correctness"]["mode"] == "bwd"
    fwd_flops = 4 * 2 * 8 * 512 * 512 * 64
    assert row["tflops"] == pytest.approx(2.5 * fwd_flops / (row["timing"]["median"] * 1e-3) / 1e12)
    assert row["peak_memory_bytes"] > 0
    assert any(b["status"] == "ok" and b["ratio"] for b in row["baselines"]), row["baselines"]
    gated = lab("bench", "--variant", "b2", "--mode", "fwd+bwd", "--shape", "1,2,128,64", "--dtype", "float16",
                "--no-baselines", "--reps", "5")
    assert gated.returncode == 1 and "wrong results from b2" in gated.stderr, gated.stderr[-2000:]


def test_sweep_rows_for_a_backward_and_for_a_rung_without_one(lab):
    res = lab("sweep", "--variant", "b1,b3", "--mode", "bwd,fwd+bwd", "--shape", "1,4,256,64", "--dtype", "float16",
              "--baselines", "sdpa-flash", "--timing", "events", "--reps", "5", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout)
    by = {(r["impl"], r["mode"]): r for r in rows}
    for mode in ("bwd", "fwd+bwd"):
        assert by[("b1", mode)]["status"] == "ok" and by[("sdpa-flash", mode)]["status"] == "ok"
        assert by[("b3", mode)]["status"] == "unsupported" and "b3 has no backward" in by[("b3", mode)]["reason"]


def test_profile_runs_ncu_over_every_kernel_of_the_backward(lab, tmp_path):
    res = lab("profile", "--variant", "b1", "--mode", "bwd", "--shape", "1,2,128,64", "--dtype", "float16",
              "--set", "lab-minimal", "--no-baselines", "--no-report", "--reps", "5")
    assert res.returncode == 0, res.stderr[-3000:]
    run = next((tmp_path / "store").glob("*-b1-*"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["mode"] == "bwd" and manifest["correctness"]["mode"] == "bwd"
    assert manifest["profile"]["nvtx_range"].endswith(" bwd")
    assert manifest["timing"]["tflops"] > 0
    report = run / manifest["profile"]["report"]
    kernels = json.loads(lab("analyze", str(report), "--json").stdout)
    # b1's backward in torch ops: the recomputed P, dV, dP, dS, dQ, dK, each one or more kernels; none of
    # its forward (computed before the range opens) and none of the warm-up
    assert len(kernels) >= 5, [k.get("kernel") for k in kernels]

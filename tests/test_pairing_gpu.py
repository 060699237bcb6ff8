"""Forward+backward pairings on the GPU, through the commands a user types (lab.ladder.pairing):

  python rungs (any CUDA GPU; tests/fixtures/pairing_ws: p1 writes the LSE, p2's LSE is 0.05 off,
  p3 has a backward):
    lab check --mode bwd     p1+p3 passes; p2+p3 exits 1 (its backward read a wrong LSE)
    lab bench --mode fwd+bwd p1+p3 timed and checked, its row named p1+p3; p2+p3 gated out
    lab sweep                p1+p3's rows in bwd and fwd+bwd
    lab profile              the run named after the pair, both source files in its manifest
  the Hopper pair (compute capability 9.0): the built-in forward-only rung that writes the LSE (v9) and
  the Hopper backward (v8), found by what they declare:
    lab check --mode fwd     the forward's LSE judged against float64 on every seeded shape
    lab check --mode bwd     F+B on the backward's shapes, fp16 and bf16
    lab bench                F+B beside B alone in bwd and fwd+bwd, every timed gradient checked
    lab sweep / profile      rows and a run named F+B

The CPU side (the registry, refusals, the call path, the checks, the timer): tests/test_pairing.py.
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

ROOT = Path(__file__).resolve().parent.parent
WS = ROOT / "tests" / "fixtures" / "pairing_ws"
HAS_GPU = torch.cuda.is_available()
IS_HOPPER = HAS_GPU and torch.cuda.get_device_capability(0) == (9, 0)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")]
needs_hopper = pytest.mark.skipif(not IS_HOPPER, reason="the Hopper pair needs compute capability 9.0 (sm_90a)")

# By what they declare, not by id (tests name rungs through the registry): the Hopper forward written
# for another rung's backward, and the Hopper backward.
FORWARD = next((v for v in builtin() if v.writes_lse and not v.backward and v.min_cc >= (9, 0)), None)
BACKWARD = next((v for v in reversed(builtin()) if v.backward and v.min_cc >= (9, 0)), None)
HOPPER_PAIR = f"{FORWARD.id}+{BACKWARD.id}" if FORWARD and BACKWARD else None


@pytest.fixture
def lab(tmp_path):
    def run(*args):
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)   # keep what the caller added
        env = dict(os.environ, PYTHONPATH=path, LAB_WORKSPACE=str(WS), LAB_PROFILES=str(tmp_path / "store"))
        return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                              env=env)
    return run


# ---------------------------------------------------------------------------------------------
# Python rungs: the pair's plumbing on any GPU
# ---------------------------------------------------------------------------------------------

def test_a_pairs_backward_check_runs_its_forward_then_its_backward(lab):
    res = lab("check", "--variant", "p1+p3", "--mode", "bwd", "--dtype", "float16", "--shapes", "8", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    [result] = json.loads(res.stdout)
    assert result["variant"] == "p1+p3" and result["passed"] and len(result["shapes"]) == 8
    wrong = lab("check", "--variant", "p2+p3", "--mode", "bwd", "--dtype", "float16", "--shapes", "2")
    assert wrong.returncode == 1 and "p2+p3 is wrong: LSE on" in wrong.stderr, wrong.stderr[-2000:]
    fwd = lab("check", "--variant", "p2", "--dtype", "float16", "--shapes", "2", "--json")
    assert fwd.returncode == 1
    [result] = json.loads(fwd.stdout)
    assert result["lse_checked"] and result["failure"].startswith("LSE on ")


def test_a_pair_is_benched_checked_and_named(lab):
    res = lab("bench", "--variant", "p1+p3,p3", "--mode", "fwd+bwd", "--shape", "2,4,256,64", "--dtype", "float16",
              "--backends", "flash", "--reps", "10", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {r["variant"]: r for r in json.loads(res.stdout)["rows"]}
    assert set(rows) == {"p1+p3", "p3"}
    for row in rows.values():
        assert row["correct"] and row["mode"] == "fwd+bwd" and row["timing"]["median"] > 0
        assert row["timing"]["checks"]["outputs_verified"] >= row["timing"]["reps"]
    gated = lab("bench", "--variant", "p2+p3", "--mode", "bwd", "--shape", "1,2,128,64", "--dtype", "float16",
                "--no-baselines", "--reps", "5")
    assert gated.returncode == 1 and "wrong results from p2+p3" in gated.stderr, gated.stderr[-2000:]


def test_a_pairs_sweep_rows_and_stored_run_name_it(lab, tmp_path):
    res = lab("sweep", "--variant", "p1+p3", "--mode", "bwd,fwd+bwd", "--shape", "1,4,256,64", "--dtype", "float16",
              "--baselines", "sdpa-flash", "--timing", "events", "--reps", "5", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    by = {(r["impl"], r["mode"]): r for r in json.loads(res.stdout)}
    for mode in ("bwd", "fwd+bwd"):
        assert by[("p1+p3", mode)]["status"] == "ok", by[("p1+p3", mode)]
    res = lab("profile", "--variant", "p1+p3", "--mode", "fwd+bwd", "--shape", "1,2,128,64", "--dtype", "float16",
              "--set", "lab-minimal", "--no-baselines", "--no-report", "--reps", "5")
    assert res.returncode == 0, res.stderr[-3000:]
    run = next((tmp_path / "store").glob("*-p1+p3-*"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["variant"]["id"] == "p1+p3" and manifest["variant"]["kind"] == "pair"
    assert "p1_lse.py" in manifest["variant"]["source"] and "p3_backward.py" in manifest["variant"]["source"]
    assert manifest["mode"] == "fwd+bwd" and manifest["timing"]["tflops"] > 0


# ---------------------------------------------------------------------------------------------
# The Hopper pair: the best forward writing the LSE for the Hopper backward
# ---------------------------------------------------------------------------------------------

@needs_hopper
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_hopper_forward_writes_a_right_lse_on_every_seeded_shape(lab, dtype):
    assert FORWARD is not None, "no built-in forward-only rung declares writes_lse"
    res = lab("check", "--variant", FORWARD.id, "--dtype", dtype, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    [result] = json.loads(res.stdout)
    assert result["passed"] and result["lse_checked"] and len(result["shapes"]) == 24
    assert all(s["lse"]["passed"] for s in result["shapes"])


@needs_hopper
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_hopper_pair_passes_the_backwards_check(lab, dtype):
    assert HOPPER_PAIR is not None
    res = lab("check", "--variant", HOPPER_PAIR, "--mode", "bwd", "--dtype", dtype, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    [result] = json.loads(res.stdout)
    assert result["variant"] == HOPPER_PAIR and result["passed"] and len(result["shapes"]) == 24
    assert all([t["tensor"] for t in s["tensors"]] == ["O", "LSE", "dQ", "dK", "dV"] for s in result["shapes"])


@needs_hopper
@pytest.mark.parametrize("mode", ["bwd", "fwd+bwd"])
def test_the_hopper_pair_is_timed_beside_its_backward_rung(lab, mode):
    res = lab("bench", "--variant", f"{HOPPER_PAIR},{BACKWARD.id}", "--mode", mode, "--shape", "4,16,4096,128",
              "--dtype", "float16", "--backends", "cudnn", "--reps", "20", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {r["variant"]: r for r in json.loads(res.stdout)["rows"]}
    assert set(rows) == {HOPPER_PAIR, BACKWARD.id}
    for row in rows.values():
        assert row["correct"] and row["mode"] == mode and row["tflops"] > 0
        assert row["timing"]["checks"]["outputs_verified"] >= row["timing"]["reps"]
        assert any(b["status"] == "ok" and b["ratio"] for b in row["baselines"]), row["baselines"]


@needs_hopper
def test_the_hopper_pairs_sweep_rows_and_profile(lab, tmp_path):
    res = lab("sweep", "--variant", HOPPER_PAIR, "--mode", "bwd,fwd+bwd", "--shape", "2,16,1024,128", "--dtype",
              "float16,bfloat16", "--baselines", "sdpa-cudnn", "--timing", "events", "--reps", "5", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [r for r in json.loads(res.stdout) if r["impl"] == HOPPER_PAIR]
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), rows
    res = lab("profile", "--variant", HOPPER_PAIR, "--mode", "fwd+bwd", "--shape", "2,16,1024,128", "--dtype",
              "float16", "--set", "lab-minimal", "--no-baselines", "--no-report", "--reps", "5")
    assert res.returncode == 0, res.stderr[-3000:]
    run = next((tmp_path / "store").glob(f"*-{HOPPER_PAIR}-*"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["variant"]["id"] == HOPPER_PAIR
    assert FORWARD.source.name in manifest["variant"]["source"] and BACKWARD.source.name in manifest["variant"]["source"]
    kernels = json.loads(lab("analyze", str(run / manifest["profile"]["report"]), "--json").stdout)
    assert len(kernels) >= 2, [k.get("kernel") for k in kernels]   # the forward's and the backward's

"""v8's deterministic dQ candidates (kernels/v8_wgmma_bwd.cu, Deterministic<>): dQ, dK and dV the same
bits on every run, where dQ by reductions in whatever order the CTAs reach them need not be.

The key blocks of each query block add into dQ's accumulator in turn (a counter per 64 query rows);
correctness against float64 is `lab tune`'s gate (tests/test_tune.py checks every candidate), this
file the bits: two runs of each deterministic candidate on shapes with many key blocks per query
block (both head dims, both masks, ragged N, GQA groups split over CTAs: non-causal to fill the SMs,
causal by the causal balance of kernels/bwd_gqa_split.cuh, the default's split since 2026-11-27), NaN-free,
and dQ equal bit for bit. Needs a Hopper GPU (sm_90a).

The user's way in (`deterministic = true`, `--deterministic`: the launcher's args->deterministic picks
the same kernels): `lab check --mode bwd --deterministic` in fp16 and bf16 through the CLI (float64
check and the bits of dQ, dK, dV over two runs on every shape), and `lab bench --deterministic`,
whose row says it timed the deterministic backward.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.ladder.registry import builtin  # noqa: E402
from lab.measure.problem import Problem, make_inputs, softmax_scale  # noqa: E402

HAS_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HAS_HOPPER, reason="v8 needs a Hopper GPU (compute capability 9.0, sm_90a)")]
V8 = next(v for v in builtin() if v.kind == "cuda" and v.backward and "Deterministic<" in v.source.read_text())
ROOT = Path(__file__).resolve().parent.parent

# (B, H, Hkv, N, D, causal): 8-64 key blocks of 128 per query block
SHAPES = [(2, 4, 4, 1000, 128, False), (2, 4, 4, 2049, 128, True), (2, 4, 4, 4093, 64, False),
          (1, 8, 8, 1537, 64, True), (1, 16, 2, 1000, 128, False), (1, 32, 8, 2049, 64, True)]


@functools.cache
def _module():
    from lab.ladder.build import build

    return build(V8, tuning=True).module


def _deterministic(d: int) -> list[tuple[str, int]]:
    labels = _module().backward_configs(d, "float16")
    found = [(label, i) for i, label in enumerate(labels) if "deterministic" in label]
    assert found, labels
    return found


def _run(config: int, shape, seed: int = 5):
    b, h, hkv, n, d, causal = shape
    problem = Problem(b, h, n, n, d, causal, "float16", hkv)
    q, k, v = make_inputs(problem, seed)
    dout = torch.randn_like(q)
    scale = softmax_scale(problem)
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda")
    mod = _module()
    mod.forward(q, k, v, o, causal, scale, lse)
    outs = []
    for _ in range(2):
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        mod.backward_config(q, k, v, o, dout, lse, dq, dk, dv, causal, scale, config)
        outs.append((dq, dk, dv))
    torch.cuda.synchronize()
    return outs


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}kv{}-N{}-D{}{}".format(*s[:5], "-causal" if s[5] else ""))
def test_the_deterministic_candidates_give_the_same_bits_twice(shape):
    for label, config in _deterministic(shape[4]):
        (dq1, dk1, dv1), (dq2, dk2, dv2) = _run(config, shape)
        assert all(torch.isfinite(t).all() for t in (dq1, dk1, dv1)), label
        assert torch.equal(dq1, dq2), f"{label}: dQ differs between two runs on the same inputs"
        assert torch.equal(dk1, dk2) and torch.equal(dv1, dv2), label


# ------------------------------------------------------------------------------ through the commands

@pytest.fixture
def lab(tmp_path):
    def run(*args):
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)   # this checkout's lab
        env = dict(os.environ, PYTHONPATH=path, LAB_WORKSPACE="none", LAB_PROFILES=str(tmp_path / "store"))
        return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                              env=env)
    return run


def test_the_rung_declares_the_deterministic_mode():
    assert V8.deterministic and "a->deterministic" in V8.source.read_text()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_lab_check_deterministic_checks_the_values_and_the_bits(lab, dtype):
    res = lab("check", "--variant", V8.id, "--mode", "bwd", "--deterministic", "--dtype", dtype, "--shapes", "14", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    [result] = json.loads(res.stdout)
    assert result["passed"] and result["deterministic"] and result["bitwise_repeat_failed"] is None
    assert "bits" in result["rule"] and len(result["shapes"]) == 14
    for s in result["shapes"]:
        assert "-deterministic" in s["shape"], s["shape"]
        assert [r["tensor"] for r in s["bitwise_repeat"]] == ["dQ", "dK", "dV"] and all(r["equal"] for r in s["bitwise_repeat"])
    labels = " ".join(result["shapes_checked"])
    assert "kv2" in labels and "large logits" in labels and "causal" in labels   # GQA, the corners, both masks


def test_lab_bench_deterministic_times_it_and_says_so(lab):
    res = lab("bench", "--variant", V8.id, "--mode", "bwd", "--deterministic", "--shape", "2,16,2048,128", "--dtype",
              "float16", "--backends", "cudnn", "--reps", "10", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    [row] = json.loads(res.stdout)["rows"]
    assert row["correct"] and row["mode"] == "bwd" and row["problem"]["deterministic"] is True
    assert row["problem"]["label"] == "B2-H16-N2048-D128-float16-deterministic"
    assert row["timing"]["median"] > 0 and row["tflops"] > 0
    assert [b["backend"] for b in row["baselines"] if b["dtype"] == "float16"] == ["cudnn"]

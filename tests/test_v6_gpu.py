"""The ladder's Hopper rung (wgmma + TMA, warp-specialised; RUNG below, found by its declared cc) against a float64 reference on >= 200 seeded shapes.

Rule (issue 13, v5's rule), enforced through lab.measure.check: max |v6 - ref| <= 2 x max |SDPA(same
dtype) - ref|, ref in float64 (causal aligned top-left, as PyTorch), floored at one rounding step of
the dtype at max |ref|. Ragged lengths (1, 2, 63, 129, 1000, 4097 and the edges of v6's 128-row query
and 128-key tiles), seqlen_q != seqlen_k, causal and not, D 64/128, fp16 and bf16; every third shape
has inputs with standard deviation 6 (logits up to ~36 x the unit-variance case: the online max and
the rescale have to be right). compute-sanitizer memcheck, racecheck and synccheck on 3 shapes.

GPU tests need a Hopper GPU (compute capability 9.0; `pytest -m gpu` on the GPU machine) and skip
cleanly elsewhere, where the rung's refusal is tested instead; the case-list test runs on the CPU.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.measure import check  # noqa: E402
from lab.measure.problem import Problem, make_inputs, softmax_scale  # noqa: E402
from lab.ladder import registry  # noqa: E402
from lab.ladder.registry import builtin  # noqa: E402
from conftest import slow_beyond, REPO  # noqa: E402

# The ladder's Hopper rung, found by what it declares (compute capability 9.0, sm_90a), not by id.
RUNG = next(v for v in builtin() if v.min_cc >= (9, 0))

HAS_GPU = torch.cuda.is_available()
IS_HOPPER = HAS_GPU and torch.cuda.get_device_capability(0) == (9, 0)
needs_hopper = pytest.mark.skipif(not IS_HOPPER, reason="v6 needs compute capability 9.0 (sm_90a: wgmma, TMA)")

# v6's tiles: 64, 128 or 192 query rows (one to three consumer warpgroups of 64), 128 keys.
EDGE_LENGTHS = (1, 2, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257, 1000, 4097)
LARGE_STD = 6.0


def _cases(count: int = 216, seed: int = 1313) -> list[tuple]:
    """Seeded (B, H, Nq, Nk, D, causal, dtype, std, seed); every combination of D, causal and dtype
    appears many times, every third case with std-6 inputs, every 8th with 70 heads (several causal
    head groups of 32)."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        pick = lambda: rng.choice(EDGE_LENGTHS) if rng.random() < 0.6 else rng.randint(1, 1500)
        nq = pick()
        nk = nq if rng.random() < 0.35 else pick()
        if max(nq, nk) > 2000:
            b, h = 1, rng.randint(1, 2)
        elif i % 8 == 7:
            b, h = 5, 14
        else:
            b, h = rng.randint(1, 3), rng.randint(1, 4)
        cases.append((b, h, nq, nk, (64, 128)[i % 2], bool((i // 2) % 2), ("float16", "bfloat16")[(i // 4) % 2],
                      LARGE_STD if i % 3 == 2 else 1.0, seed + i))
    # D=64 non-causal with seqlen_k >= 8192 runs v6's three-consumer configuration (BM = 192).
    cases += [(1, 2, 300, 8200, 64, False, "float16", 1.0, seed + count),
              (1, 1, 1000, 9000, 64, False, "bfloat16", LARGE_STD, seed + count + 1),
              (1, 1, 8193, 8193, 64, False, "float16", LARGE_STD, seed + count + 2),
              (2, 1, 193, 8192, 64, False, "bfloat16", 1.0, seed + count + 3)]
    return cases


@pytest.fixture(scope="module")
def v6():
    from lab.ladder.build import build

    return build(RUNG).module


def _check_scaled(module, problem: Problem, std: float, seed: int) -> check.ShapeCheck:
    """lab.measure.check's gate on inputs scaled to `std` (make_inputs draws N(0.5, 1))."""
    if std == 1.0:
        return check.check_problem(RUNG, problem, module, seed)
    scale = softmax_scale(problem)
    q, k, v = (t * std for t in make_inputs(problem, check.shape_seed(seed, problem), device="cuda"))
    o = torch.full_like(q, float("nan"))
    module.forward(q, k, v, o, problem.causal, scale)
    torch.cuda.synchronize()
    ref = check.reference_attention(q, k, v, problem.causal, scale, device=check._reference_device(problem, q.device))
    tolerance = check._tolerance(problem, q, k, v, ref, scale)
    errors = check.compare(o, ref)
    return check.ShapeCheck(problem, check.judge(errors, tolerance, "max_abs_err"), errors["rel_err"],
                            errors["max_abs_err"], errors["mean_abs_err"], tolerance, errors["nonfinite"],
                            errors["numel"], metric="max_abs_err")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("b,h,nq,nk,d,causal,dtype_name,std,seed",
                         # every 8th seeded case and the three-consumer ones in one sitting; all in the slow tier
                         slow_beyond(_cases(), lambda i, c: i % 8 == 0 or c[3] >= 8192), ids=lambda x: str(x))
def test_v6_matches_float64(v6, b, h, nq, nk, d, causal, dtype_name, std, seed):
    shape = _check_scaled(v6, Problem(b, h, nq, nk, d, causal, dtype_name), std, seed)
    assert shape.passed, shape.to_dict()


def test_v6_case_list_covers_the_issue():
    cases = _cases()
    assert len(cases) >= 200
    lengths = {c[2] for c in cases} | {c[3] for c in cases}
    assert {1, 2, 63, 129, 1000, 4097} <= lengths
    assert any(c[2] != c[3] for c in cases) and any(c[5] and c[2] != c[3] for c in cases)
    assert {c[4] for c in cases} == {64, 128} and {c[6] for c in cases} == {"float16", "bfloat16"}
    assert any(c[7] == LARGE_STD and c[5] for c in cases) and any(c[7] == LARGE_STD and not c[5] for c in cases)
    assert any(c[0] * c[1] > 64 and c[5] for c in cases)
    assert any(c[3] >= 8192 and c[4] == 64 and not c[5] for c in cases)


@pytest.mark.gpu
@needs_hopper
def test_v6_refuses_unsupported_input(v6):
    q = torch.randn(1, 1, 8, 32, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="head_dim"):
        v6.forward(q, q, q, torch.empty_like(q), False, 32 ** -0.5)
    q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(RuntimeError, match="float16 and bfloat16"):
        v6.forward(q, q, q, torch.empty_like(q), False, 0.125)


@pytest.mark.gpu
@pytest.mark.skipif(IS_HOPPER or not HAS_GPU, reason="the refusal is for GPUs other than compute capability 9.0")
def test_v6_is_refused_off_hopper():
    from lab.environment import require_compute_capability
    from lab.errors import LabError

    with pytest.raises(LabError, match="compute capability 9.0"):
        require_compute_capability(RUNG)


SANITIZER_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from lab.ladder import build
    from lab.ladder import registry as variants
    from lab.measure.problem import Problem, make_inputs, softmax_scale

    # Ragged everywhere: one query row over 3 key tiles (the K/V ring wraps), two query blocks over
    # a ragged causal diagonal (seqlen_q > seqlen_k), bf16 D=64 with seqlen_q < seqlen_k.
    shapes = [Problem(1, 1, 1, 300, 128, False, "float16"), Problem(1, 2, 200, 170, 128, True, "float16"),
              Problem(2, 1, 65, 390, 64, True, "bfloat16")]
    module = build.load_cached(variants.get(sys.argv[1]))
    for i, p in enumerate(shapes):
        q, k, v = make_inputs(p, seed=i)
        o = torch.full_like(q, float("nan"))
        module.forward(q, k, v, o, p.causal, softmax_scale(p))
        torch.cuda.synchronize()
        assert torch.isfinite(o).all(), p.label()
    print(f"sanitized launches: {len(shapes)}")
""")


@pytest.mark.gpu
@needs_hopper
# racecheck and synccheck replay every shared-memory access (minutes on an H100): the slow tier
@pytest.mark.parametrize("tool", ["memcheck", pytest.param("racecheck", marks=pytest.mark.slow), pytest.param("synccheck", marks=pytest.mark.slow)])
def test_v6_compute_sanitizer_is_clean(tool, v6, tmp_path):
    sanitizer = shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path(shutil.which("nvcc") or "/nonexistent").resolve().parent / "compute-sanitizer",
                          Path("/usr/local/cuda/bin/compute-sanitizer")) if p.is_file()), None)
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (it ships with the CUDA toolkit)")
    script = tmp_path / "sanitize_v6.py"
    script.write_text(SANITIZER_SCRIPT)
    import os

    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    res = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script), registry.ref(RUNG)],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=420)
    out = res.stdout + res.stderr
    assert "sanitized launches: 3" in out, out[-4000:]
    assert res.returncode == 0, out[-4000:]
    assert re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors", out), out[-4000:]
    assert not re.search(r"ERROR SUMMARY: [1-9]", out), out[-4000:]

"""GQA on the Hopper rungs (issues 27 and 28: "GQA shapes checked"), through the lab's own check:
v8's forward (O and the LSE) and backward (dQ, dK, dV, dK and dV summed over each group of query
heads) on H:Hkv = 16:2, 32:8 and 8:1 with ragged N, causal and not, fp16 and bf16, each tensor
judged against float64 autograd by lab.measure.check (max error <= 2x torch SDPA's); v6's forward
on the same shapes; dK and dV the same bits on every run (v8 sums a group in registers, or its
shares in a fixed order: no atomics); a rung built without gqa refuses K/V heads != Q heads in its
binding; compute-sanitizer memcheck on GQA shapes (racecheck in the slow tier).

v8's backward splits a group over several CTAs where one CTA per (key block, K/V head) would not
fill the SMs once, and under the causal mask also where one CTA would hold more than half an SM's
fair share of the work (kernels/bwd_gqa_split.cuh, gqa_splits; tests/test_v8_gqa_split.py pins it):
the cases below take every path on a 132-SM H100/H200, the causal balance's further split among
them (test_the_cases_take_every_path_of_the_group_split says which).
The CPU side: tests/test_gqa.py. Needs a Hopper GPU (sm_90a); skips elsewhere.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.ladder.registry import builtin  # noqa: E402
from lab.measure import check  # noqa: E402
from lab.measure.gradcheck import GradShape  # noqa: E402
from lab.measure.problem import Problem  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = builtin()
# The Hopper backward that declares gqa (v8), every forward-only rung that does (v6, v9: one CTA per tile
# and the persistent walk), a backward that does not (v7).
GQA_BACKWARD = next(v for v in VARIANTS if v.kind == "cuda" and v.backward and v.gqa)
GQA_FORWARDS = [v for v in VARIANTS if v.kind == "cuda" and not v.backward and v.gqa]
NO_GQA_BACKWARD = next(v for v in VARIANTS if v.kind == "cuda" and v.backward and not v.gqa)
HAS_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HAS_HOPPER, reason="the Hopper rungs need a Hopper GPU (compute capability 9.0, sm_90a)")]

# (B, H, Hkv, Nq, Nk, D, causal, dtype): the three ratios of the issue, ragged N (one short of and one
# past a 64/128 tile, Nq != Nk both ways), both masks, head dims and dtypes.
CASES = [
    (2, 16, 2, 1000, 1000, 64, False, "float16"),
    (2, 16, 2, 1000, 1000, 128, True, "bfloat16"),
    (1, 16, 2, 4093, 4093, 128, False, "float16"),
    (1, 32, 8, 3001, 3001, 64, True, "bfloat16"),
    (1, 32, 8, 777, 1500, 128, False, "bfloat16"),
    (8, 32, 8, 1025, 1025, 128, True, "float16"),
    (2, 8, 1, 1023, 1023, 64, True, "float16"),
    (4, 8, 1, 2049, 2049, 128, False, "bfloat16"),
    (3, 8, 1, 511, 300, 64, True, "bfloat16"),
    (2, 8, 1, 1, 239, 128, True, "float16"),
    # v9's three consumers (D=64, non-causal, Nq, Nk >= 2048: BM = 192), its ragged last block's third
    # warpgroup past nq (2049 = 10 x 192 + 129), Nq != Nk
    (2, 16, 2, 2049, 2300, 64, False, "float16"),
]
# Forwards only (the float64 backward of it would dominate the file): v9's D=128 non-causal from Nq, Nk >= 8192
# (176-key tiles, O staged over the tile's last V stage; 8300 = 47 x 176 + 28 keys), Hkv = 1.
LONG_FORWARD_CASES = [(1, 4, 1, 8200, 8300, 128, False, "float16")]


def _problem(case) -> Problem:
    b, h, hkv, nq, nk, d, causal, dtype = case
    return Problem(b, h, nq, nk, d, causal, dtype, hkv)


def _ids(case) -> str:
    return _problem(case).label()


@pytest.fixture(scope="module")
def bwd_rung():
    from lab.ladder.build import build

    return build(GQA_BACKWARD).module


@functools.cache
def _module(variant):
    from lab.ladder.build import build

    return build(variant).module


def _why(shape_check) -> str:
    if shape_check.error:
        return shape_check.error
    return "; ".join(f"{t.name}: max_abs_err {t.max_abs_err:.3g} > {t.tolerance:.3g} at {t.worst_text()}"
                     for t in shape_check.tensors or () if not t.passed) or shape_check.label


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_the_hopper_backward_on_gqa_shapes_matches_float64(bwd_rung, case):
    """O, LSE, dQ, dK, dV of v8's forward then backward, NaN-poisoned, by the lab's backward check."""
    result = check.check_backward_problem(GQA_BACKWARD, GradShape(_problem(case)), bwd_rung)
    assert [t.name for t in result.tensors] == ["O", "LSE", "dQ", "dK", "dV"], result.error
    assert result.passed, _why(result)


@pytest.mark.parametrize("variant", [GQA_BACKWARD, *GQA_FORWARDS], ids=lambda v: v.id)
@pytest.mark.parametrize("case", CASES[::2] + CASES[1::4] + LONG_FORWARD_CASES, ids=_ids)
def test_the_hopper_forwards_on_gqa_shapes_match_float64(variant, case):
    """The backward rung's own forward and every forward-only rung that declares gqa."""
    result = check.check_problem(variant, _problem(case), _module(variant))
    assert result.passed, (result.error or f"max_abs_err {result.max_abs_err:.3g} > {result.tolerance:.3g}")


def _backward(module, problem, seed=3):
    from lab.measure.call import upstream_grad
    from lab.measure.problem import make_inputs, softmax_scale

    q, k, v = make_inputs(problem, seed)
    dout = upstream_grad(q, seed + 1)
    scale = softmax_scale(problem)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device="cuda")
    module.forward(q, k, v, o, problem.causal, scale, lse)
    runs = []
    for _ in range(2):
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        module.backward(q, k, v, o, dout, lse, dq, dk, dv, problem.causal, scale)
        runs.append((dk, dv))
    torch.cuda.synchronize()
    return runs


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3], CASES[7]], ids=_ids)
def test_gqa_dk_and_dv_are_the_same_bits_on_every_run(bwd_rung, case):
    (dk1, dv1), (dk2, dv2) = _backward(bwd_rung, _problem(case))
    assert dk1.shape[1] == case[2] and torch.isfinite(dk1).all() and torch.isfinite(dv1).all()
    assert torch.equal(dk1, dk2) and torch.equal(dv1, dv2), "dK/dV differ between two runs on the same inputs"


def test_the_cases_take_every_path_of_the_group_split(tmp_path_factory):
    """The split each case gets on this GPU, asked of the header's gqa_splits (compiled on the host)."""
    from test_v8_gqa_split import BM, split_decisions

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    asked = [(b, h, hkv, nq, nk, causal, sms, BM[d]) for b, h, hkv, nq, nk, d, causal, _ in CASES]
    decided = split_decisions(tmp_path_factory, asked)
    kinds = {("whole group" if s == 1 else "one head per CTA" if s == c[1] // c[2] else "shares")
             for c, (s, _, _) in zip(CASES, decided)}
    assert kinds == {"whole group", "one head per CTA", "shares"}, (sms, kinds)
    assert any(s > fill for s, fill, _ in decided), "no case splits further for the causal balance"


def test_a_rung_without_gqa_refuses_kv_heads_in_its_binding():
    """v7 declares no gqa: its binding (no -DLAB_GQA) refuses K/V heads != Q heads, forward and backward."""
    from lab.ladder.build import build

    v7 = build(NO_GQA_BACKWARD).module
    q = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="does not declare gqa = true"):
        v7.forward(q, k, k, torch.empty_like(q), False, 0.125)
    lse = torch.zeros(1, 4, 64, device="cuda")
    with pytest.raises(RuntimeError, match="does not declare gqa = true"):
        v7.backward(q, k, k, q, q, lse, torch.empty_like(q), torch.empty_like(k), torch.empty_like(k), False, 0.125)


SANITIZER_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from lab.ladder import build
    from lab.ladder import registry

    module = build.load_cached(registry.get(sys.argv[1]))
    # GQA, small and ragged, each path of the group split on 132 SMs: one query head per CTA (fp32
    # shares summed after), a whole group in one CTA (2 key blocks x 2 x 33 = 132 CTAs), two heads per
    # CTA (198 CTAs x 2 shares: the causal balance's split, bwd_gqa_split.cuh); causal with Nq < Nk,
    # Nq > Nk, one query row (MQA), both D and dtypes.
    shapes = [(1, 8, 2, 113, 203, 64, True, torch.float16), (2, 66, 33, 130, 129, 128, False, torch.bfloat16),
              (3, 132, 33, 130, 180, 64, True, torch.float16), (2, 8, 1, 1, 70, 128, False, torch.bfloat16)]
    for (b, h, hkv, nq, nk, d, causal, dtype) in shapes:
        mk = lambda heads, n: (torch.randn(b, heads, n, d, device="cuda") + 0.5).to(dtype)
        q, k, v, dout = mk(h, nq), mk(hkv, nk), mk(hkv, nk), mk(h, nq)
        o, lse = torch.empty_like(q), torch.empty(b, h, nq, device="cuda")
        module.forward(q, k, v, o, causal, d ** -0.5, lse)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        module.backward(q, k, v, o, dout, lse, dq, dk, dv, causal, d ** -0.5)
        torch.cuda.synchronize()
        assert all(torch.isfinite(t).all() for t in (o, dq, dk, dv)), (b, h, hkv, nq, nk, d, causal)
    print(f"sanitized GQA calls: {len(shapes)}")
""")


@pytest.mark.parametrize("tool", ["memcheck", pytest.param("racecheck", marks=pytest.mark.slow)])
def test_gqa_compute_sanitizer_is_clean(tool, bwd_rung, tmp_path):
    sanitizer = shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path(shutil.which("nvcc") or "/nonexistent").resolve().parent / "compute-sanitizer",
                          Path("/usr/local/cuda/bin/compute-sanitizer")) if p.is_file()), None)
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (it ships with the CUDA toolkit)")
    script = tmp_path / "sanitize_gqa.py"
    script.write_text(SANITIZER_SCRIPT)
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    from lab.ladder import registry

    res = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script),
                          registry.ref(GQA_BACKWARD)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=420)
    out = res.stdout + res.stderr
    assert "sanitized GQA calls: 4" in out, out[-4000:]
    assert res.returncode == 0, out[-4000:]
    assert re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors", out), out[-4000:]
    assert not re.search(r"ERROR SUMMARY: [1-9]", out), out[-4000:]

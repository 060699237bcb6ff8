"""The correctness gate (lab.measure.check) on the CPU: the seeded shape list, the float64
reference against torch's own SDPA in float64, the NaN rule of the comparison, the manifest
fields, the no-GPU refusal and bad input. Every registered rung on the GPU, through this gate:
tests/test_rungs_gpu.py.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.measure import check  # noqa: E402
from lab.measure.problem import Problem  # noqa: E402
from lab.ladder.registry import builtin  # noqa: E402
from conftest import REPO, lab_here  # noqa: E402

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
GPU_SHAPES = 104  # >= 100: the 24 corners (N in {1, 17, 1000, 1023} x D x causal) and 80 random ragged
# A rung of the ladder with three head dims (the shape list's corners cover each) and one with a
# dtype that another rung lacks, for the refusal tests; taken from the registry, not named.
FP32 = next(v for v in builtin() if v.dtypes == ("float32",) and len(v.head_dims) == 3)
UNSUPPORTED_D = next(d for d in range(8, 256, 8) if d not in FP32.head_dims)


# ----------------------------------------------------------------------------------------------
# CPU: shapes, reference, comparison
# ----------------------------------------------------------------------------------------------

def test_check_shapes_are_seeded_and_cover_the_corners():
    v1 = FP32
    shapes = check.check_shapes(v1, GPU_SHAPES, seed=7)
    assert shapes == check.check_shapes(v1, GPU_SHAPES, seed=7)
    assert shapes != check.check_shapes(v1, GPU_SHAPES, seed=8)
    assert len(shapes) == GPU_SHAPES
    corners = {(p.seqlen_q, p.head_dim, p.causal) for p in shapes if p.seqlen_q == p.seqlen_k}
    for n in check.CORNER_SEQLENS:
        for d in v1.head_dims:
            for causal in (False, True):
                assert (n, d, causal) in corners, (n, d, causal)
    assert any(p.seqlen_q != p.seqlen_k for p in shapes)
    assert any(p.causal and p.seqlen_q != p.seqlen_k for p in shapes)
    assert any(p.seqlen_q % 32 and p.seqlen_q > 32 for p in shapes)  # ragged last tiles beyond the corners
    assert all(p.dtype == "float32" and p.head_dim in v1.head_dims for p in shapes)


def test_a_short_shape_list_still_spreads_over_n_d_and_mask():
    first = check.check_shapes(FP32, 4, seed=0)
    assert {p.seqlen_q for p in first} == set(check.CORNER_SEQLENS)
    assert len({p.head_dim for p in first}) == 3 and len({p.causal for p in first}) == 2


@pytest.mark.parametrize("nq, nk, causal", [(1, 1, False), (17, 17, True), (40, 90, True), (90, 40, True),
                                            (33, 5, False)])
def test_reference_matches_torch_sdpa_in_float64(nq, nk, causal):
    gen = torch.Generator().manual_seed(nq * 1000 + nk)
    q = torch.randn(2, 3, nq, 32, generator=gen, dtype=torch.float64) + 0.5
    k = torch.randn(2, 3, nk, 32, generator=gen, dtype=torch.float64) + 0.5
    v = torch.randn(2, 3, nk, 32, generator=gen, dtype=torch.float64) + 0.5
    scale = 32 ** -0.5
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    ours = check.reference_attention(q.float(), k.float(), v.float(), causal, scale)
    ours64 = check.reference_attention(q, k, v, causal, scale)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours64, expected, rtol=1e-12, atol=1e-12)
    # From fp32 inputs the reference differs only by the inputs' own rounding.
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    # Chunking (down to one query row of one head at a time) changes nothing.
    tiny = check.reference_attention(q, k, v, causal, scale, chunk_bytes=1)
    torch.testing.assert_close(tiny, ours64, rtol=0, atol=1e-13)


def test_compare_fails_any_unwritten_element():
    ref = torch.randn(1, 2, 9, 32, dtype=torch.float64) + 0.5
    exact = check.compare(ref.float(), ref)
    assert exact["nonfinite"] == 0 and exact["rel_err"] < check.FP32_REL_TOL
    assert check.judge(exact, check.FP32_REL_TOL)

    poisoned = ref.float().clone()
    poisoned[0, 1, 8, 31] = float("nan")  # one element the kernel "forgot"
    errors = check.compare(poisoned, ref)
    assert errors["nonfinite"] == 1 and math.isnan(errors["rel_err"])
    assert not check.judge(errors, check.FP32_REL_TOL)

    off = ref.float().clone()
    off[0, 0, 3] += 0.01  # one row slightly wrong: far above 1e-4 relative
    assert not check.judge(check.compare(off, ref), check.FP32_REL_TOL)


def test_result_to_dict_has_the_manifest_fields():
    p = Problem(1, 1, 17, 17, 64)
    good = check.ShapeCheck(p, True, 1e-7, 2e-6, 3e-7, check.FP32_REL_TOL, numel=17 * 64)
    bad = check.ShapeCheck(Problem(1, 1, 1, 1, 32), False, math.nan, math.nan, math.nan, check.FP32_REL_TOL,
                           nonfinite=32, numel=32)
    result = check.CheckResult(FP32.id, check.FP32_RULE, [good, bad])
    d = result.to_dict()
    assert {"passed", "max_abs_err", "mean_abs_err", "rel_err", "tolerance", "rule", "shapes_checked"} <= set(d)
    assert d["passed"] is False and result.failed_shape == bad.problem.label()
    assert d["rel_err"] is None  # NaN is not JSON: the worst shape is the poisoned one
    assert d["tolerance"] == check.FP32_REL_TOL and "1e-04" in d["rule"]
    assert d["shapes_checked"] == [good.problem.label(), bad.problem.label()]
    assert "32 non-finite" in result.summary()


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU refusal; this machine has a GPU")
def test_check_without_gpu_exits_2():
    res = lab_here("check", "--variant", FP32.id)
    assert res.returncode == 2, res.stderr
    assert "needs an NVIDIA GPU" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("args, message", [
    (["check", "--variant", "no_such_rung"], "unknown variant"),
    (["check", "--variant", FP32.id, "--shape", f"1,1,16,{UNSUPPORTED_D}"], "head_dim"),
    (["check", "--variant", FP32.id, "--shape", "1,1,16,64", "--dtype", "float16"], "dtype"),
    (["check", "--variant", FP32.id, "--shapes", "-1"], "--shapes"),
])
def test_check_bad_input_exits_2(args, message):
    res = lab_here(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr

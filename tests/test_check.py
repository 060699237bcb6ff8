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
    (["check", "--variant", FP32.id, "--dtype", "float16"], f"{FP32.id} supports dtype float32; got float16"),
    (["check", "--variant", FP32.id, "--dtype", "int8"], "unknown dtype"),
    (["check", "--variant", FP32.id, "--shapes", "-1"], "--shapes"),
])
def test_check_bad_input_exits_2(args, message):
    res = lab_here(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


# ----------------------------------------------------------------------------------------------
# The seeded shapes honour an explicit --dtype and --causal/--no-causal (with or without --shape)
# ----------------------------------------------------------------------------------------------

# a rung with two dtypes and a backward, so every mode can be asked for in its second dtype
TWO_DTYPES = next(v for v in builtin() if len(v.dtypes) > 1 and v.backward_launcher)
SECOND = TWO_DTYPES.dtypes[1]


@pytest.mark.parametrize("causal", [None, True, False])
@pytest.mark.parametrize("dtype", [None, SECOND])
def test_seeded_shapes_take_the_dtype_and_mask_asked_for(dtype, causal):
    from lab.measure import gradcheck

    fwd = check.check_shapes(TWO_DTYPES, 40, seed=3, dtype=dtype, causal=causal)
    bwd = [g.problem for g in gradcheck.backward_shapes(TWO_DTYPES, 40, seed=3, dtype=dtype, causal=causal)]
    for shapes in (fwd, bwd):
        assert len(shapes) == 40
        assert {p.dtype for p in shapes} == {dtype or TWO_DTYPES.default_dtype}
        assert {p.causal for p in shapes} == ({False, True} if causal is None else {causal})
    # a fixed mask keeps the sizes of the mixed list's random shapes (the rng is drawn the same way)
    gqa = len(gradcheck.GQA_CORNERS) if TWO_DTYPES.gqa else 0
    corners = len(check.CORNER_SEQLENS) * len(TWO_DTYPES.head_dims) * (2 if causal is None else 1) + gqa
    mixed = check.check_shapes(TWO_DTYPES, 80, seed=3)[len(check.CORNER_SEQLENS) * len(TWO_DTYPES.head_dims) * 2 + gqa:]
    assert [p.label().split("-D")[0] for p in fwd[corners:]] == [p.label().split("-D")[0] for p in mixed[:40 - corners]]
    if causal is not None:   # every corner N and head_dim, in the one mask
        assert {(p.seqlen_q, p.head_dim) for p in fwd if p.batch == check.CORNER_BATCH and p.seqlen_q == p.seqlen_k} >= {
            (n, d) for n in check.CORNER_SEQLENS for d in TWO_DTYPES.head_dims}


def test_a_seeded_list_in_a_dtype_the_rung_does_not_declare_is_refused():
    from lab.errors import LabError

    with pytest.raises(LabError, match="supports dtype float32") as e:
        check.check_shapes(FP32, 4, dtype="float16")
    assert e.value.exit_code == 2


def test_the_gate_checks_the_timed_problems_dtype():
    """The gate before a timing (bench, profile, sweep, tune) checks its seeded shapes in the timed
    problem's dtype: a rung timed in bf16 is gated in bf16, not in its first dtype."""
    problem = Problem(1, 2, 130, 130, TWO_DTYPES.head_dims[0], True, SECOND)
    shapes = check.gate_shapes(TWO_DTYPES, problem, 6)
    assert shapes[0] == problem and {p.dtype for p in shapes} == {SECOND}
    assert {p.causal for p in shapes[1:]} == {False, True}   # the gate's own shapes: causal and not


@pytest.fixture
def checked(monkeypatch):
    """`lab check` run through the CLI with the launch replaced by a recorder: the problems each rung
    would have been checked on, in order (no GPU, no build)."""
    seen = []

    def forward(variant, problem, module, seed=0):
        seen.append(problem)
        return check.ShapeCheck(problem, True, 0.0, 0.0, 0.0, 1.0, numel=1)

    def backward(variant, shape, module, seed=0, device="cuda"):
        seen.append(shape.problem)
        return check.ShapeCheck(shape.problem, True, 0.0, 0.0, 0.0, 1.0, numel=1, tensors=[])

    monkeypatch.setattr(check, "_ready", lambda variant, module: object())
    monkeypatch.setattr(check, "check_problem", forward)
    monkeypatch.setattr(check, "check_backward_problem", backward)
    return seen


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("flags, dtype, masks", [
    ([], None, {False, True}),                                   # neither given: the rung's first dtype, both masks
    (["--dtype", SECOND], SECOND, {False, True}),
    (["--causal"], None, {True}),
    (["--no-causal"], None, {False}),
    (["--dtype", SECOND, "--causal"], SECOND, {True}),
    (["--dtype", SECOND, "--no-causal"], SECOND, {False}),
])
def test_lab_check_without_a_shape_checks_the_dtype_and_mask_asked_for(checked, flags, dtype, masks, mode):
    res = lab_here("check", "--variant", TWO_DTYPES.id, "--mode", mode, "--json", *flags)
    assert res.returncode == 0, res.stderr
    assert len(checked) == check.DEFAULT_SHAPE_COUNT
    assert {p.dtype for p in checked} == {dtype or TWO_DTYPES.default_dtype}
    assert {p.causal for p in checked} == masks
    import json
    assert len(json.loads(res.stdout)[0]["shapes"]) == check.DEFAULT_SHAPE_COUNT


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_lab_check_with_a_shape_checks_its_seeded_shapes_alike(checked, mode):
    d = TWO_DTYPES.head_dims[0]
    res = lab_here("check", "--variant", TWO_DTYPES.id, "--shape", f"1,2,130,{d}", "--shapes", "6",
                   "--dtype", SECOND, "--causal", "--mode", mode, "--json")
    assert res.returncode == 0, res.stderr
    assert len(checked) == 7 and checked[0] == Problem(1, 2, 130, 130, d, True, SECOND)
    assert {p.dtype for p in checked} == {SECOND} and {p.causal for p in checked} == {True}


def test_lab_check_refuses_an_undeclared_dtype_before_checking_anything(checked):
    res = lab_here("check", "--variant", f"{TWO_DTYPES.id},{FP32.id}", "--dtype", SECOND, "--causal")
    assert res.returncode == 2 and f"{FP32.id} supports dtype float32; got {SECOND}" in res.stderr
    assert checked == [] and "Traceback" not in res.stderr

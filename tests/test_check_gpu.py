"""The correctness gate (lab.measure.check) and every fp32 rung of the registry on it.

CPU tests (no marker): the seeded shape list, the float64 reference against torch's own SDPA in
float64, the NaN rule of the comparison, the manifest fields, and the no-GPU refusal.
GPU tests (`-m gpu`, skipped with a reason where torch.cuda.is_available() is False): each fp32 rung
correct on >= 100 seeded shapes, the NaN poison catching a truncated launch, the launchers'
refusals, the build cache, and compute-sanitizer memcheck and racecheck clean on ragged shapes.
(v3/v4's tile-edge shapes and tuning list: tests/test_ladder_fp32_gpu.py; v5: tests/test_v5_gpu.py.)
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.measure import check  # noqa: E402
from lab.measure.problem import Problem  # noqa: E402
from lab.ladder.registry import VARIANTS, get  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
RUNGS = [v.id for v in VARIANTS if v.dtypes == ("float32",)]  # every fp32 rung, from the one registry
GPU_SHAPES = 104  # >= 100: the 24 corners (N in {1, 17, 1000, 1023} x D x causal) and 80 random ragged
FLOAT4_RUNGS = {"v2", "v3", "v4"}   # 16-byte loads: misaligned pointers are refused
GRID_Y_RUNGS = {"v3", "v4"}         # batch * heads on grid.y: more than 65535 is refused


# ----------------------------------------------------------------------------------------------
# CPU: shapes, reference, comparison
# ----------------------------------------------------------------------------------------------

def test_check_shapes_are_seeded_and_cover_the_corners():
    v1 = get("v1")
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
    first = check.check_shapes(get("v1"), 4, seed=0)
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
    result = check.CheckResult("v1", check.FP32_RULE, [good, bad])
    d = result.to_dict()
    assert {"passed", "max_abs_err", "mean_abs_err", "rel_err", "tolerance", "rule", "shapes_checked"} <= set(d)
    assert d["passed"] is False and result.failed_shape == bad.problem.label()
    assert d["rel_err"] is None  # NaN is not JSON: the worst shape is the poisoned one
    assert d["tolerance"] == check.FP32_REL_TOL and "1e-04" in d["rule"]
    assert d["shapes_checked"] == [good.problem.label(), bad.problem.label()]
    assert "32 non-finite" in result.summary()


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU refusal; this machine has a GPU")
def test_check_without_gpu_exits_2():
    res = subprocess.run([sys.executable, "-m", "lab.cli", "check", "--variant", "v1"], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert "needs an NVIDIA GPU" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("args, message", [
    (["check", "--variant", "v99"], "unknown variant"),
    (["check", "--variant", "v1", "--shape", "1,1,16,48"], "head_dim"),
    (["check", "--variant", "v2", "--shape", "1,1,16,64", "--dtype", "float16"], "dtype"),
    (["check", "--variant", "v1", "--shapes", "-1"], "--shapes"),
])
def test_check_bad_input_exits_2(args, message):
    res = subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


# ----------------------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built():
    from lab.ladder.build import build

    return {vid: build(get(vid)) for vid in RUNGS}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("vid", RUNGS)
def test_rung_is_correct_on_seeded_shapes(vid, built):
    result = check.check_variant(get(vid), extra_shapes=GPU_SHAPES, seed=1234, module=built[vid].module)
    assert len(result.shapes) >= 100
    failures = [s.to_dict() for s in result.shapes if not s.passed]
    assert not failures, f"{vid} failed {len(failures)} shapes, first: {failures[:3]}"
    assert result.passed and result.to_dict()["rel_err"] <= check.FP32_REL_TOL
    checked = {(s.problem.seqlen_q, s.problem.head_dim, s.problem.causal) for s in result.shapes}
    for n in (1, 17, 1000, 1023):
        for d in (32, 64, 128):
            for causal in (False, True):
                assert (n, d, causal) in checked


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("vid", RUNGS)
def test_nan_poison_catches_a_truncated_launch(vid, built):
    """Launch the real kernel on all but the last query row (a contiguous prefix view of q and o),
    so that row is never written; the gate's comparison must fail it, and only because of it."""
    module = built[vid].module
    problem = Problem(1, 1, 40, 40, 64)
    from lab.measure.problem import make_inputs, softmax_scale

    q, k, v = make_inputs(problem, seed=3)
    scale = softmax_scale(problem)
    ref = check.reference_attention(q, k, v, False, scale)

    full = torch.full_like(q, float("nan"))
    module.forward(q, k, v, full, False, scale)
    torch.cuda.synchronize()
    assert check.judge(check.compare(full, ref), check.FP32_REL_TOL), "control: the full launch must pass"

    truncated = torch.full_like(q, float("nan"))
    q_head, o_head = q[:, :, :-1], truncated[:, :, :-1]
    assert q_head.is_contiguous() and o_head.is_contiguous() and o_head.data_ptr() == truncated.data_ptr()
    module.forward(q_head, k, v, o_head, False, scale)
    torch.cuda.synchronize()
    errors = check.compare(truncated, ref)
    assert errors["nonfinite"] == problem.head_dim  # exactly the unwritten row
    assert not check.judge(errors, check.FP32_REL_TOL)
    # The rows that were written are right: the failure comes from the poison alone.
    assert check.judge(check.compare(truncated[:, :, :-1], ref[:, :, :-1]), check.FP32_REL_TOL)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("vid", RUNGS)
def test_launcher_refuses_what_it_cannot_run(vid, built):
    module = built[vid].module
    x = torch.randn(1, 1, 16, 48, device="cuda")
    with pytest.raises(RuntimeError, match="head_dim 32, 64 or 128"):
        module.forward(x, x, x, torch.empty_like(x), False, 1.0)
    h = torch.randn(1, 1, 16, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="float32 only"):
        module.forward(h, h, h, torch.empty_like(h), False, 1.0)
    if vid in FLOAT4_RUNGS:  # float4 loads need 16-byte alignment; a view 4 bytes into a buffer is refused
        buf = torch.randn(16 * 64 + 1, device="cuda")
        odd = buf[1:].view(1, 1, 16, 64)
        with pytest.raises(RuntimeError, match="16-byte aligned"):
            module.forward(odd, odd, odd, torch.empty_like(odd), False, 1.0)
    if vid in GRID_Y_RUNGS:
        wide = torch.randn(1, 65536, 1, 32, device="cuda")
        with pytest.raises(RuntimeError, match="65535"):
            module.forward(wide, wide, wide, torch.empty_like(wide), False, 1.0)


@pytest.mark.gpu
@needs_gpu
def test_second_build_compiles_nothing(built):
    """In this process the module is reused; a fresh process imports the finished .so."""
    from lab.ladder.build import build

    again = build(get("v1"))
    assert not again.built_now and again.cache_key == built["v1"].cache_key and again.module is built["v1"].module
    so_files = sorted(built["v1"].build_dir.glob("*.so"))
    mtimes = [p.stat().st_mtime_ns for p in so_files]
    code = ("from lab.ladder import build, registry as variants\n"
            "r = build.build(variants.get('v1'))\n"
            "print('built_now', r.built_now, r.cache_key)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_child_env())
    assert res.returncode == 0, res.stderr
    assert f"built_now False {built['v1'].cache_key}" in res.stdout
    assert [p.stat().st_mtime_ns for p in so_files] == mtimes, "the cached .so was rebuilt"
    assert built["v1"].ptxas and all(r["spill_stores_bytes"] == 0 for r in built["v1"].ptxas)


SANITIZER_SCRIPT = textwrap.dedent("""
    import torch
    from lab.ladder import build
    from lab.ladder import registry as variants
    from lab.measure.problem import Problem, make_inputs, softmax_scale

    # Ragged tiles in every direction: one row, one partial tile, seqlen_q < and > seqlen_k, causal;
    # and shapes with several key tiles, so that v4's K/V buffers are refilled under each of its
    # schedules: 4 ragged 64-key tiles at D=32 (two stages), two 128-row query tiles over two
    # 64-key tiles, causal, at D=64 (interleaved), 5 key tiles at D=128 (mbarrier phases).
    shapes = [Problem(1, 1, 1, 1, 32), Problem(1, 2, 17, 17, 64, True), Problem(2, 1, 33, 70, 128, True),
              Problem(1, 1, 70, 33, 32, True), Problem(1, 1, 40, 5, 64), Problem(1, 1, 64, 64, 128),
              Problem(1, 1, 1, 200, 32), Problem(1, 2, 150, 100, 64, True), Problem(2, 1, 70, 130, 128)]
    launches = 0
    for vid in {rungs!r}:
        module = build.load_cached(variants.get(vid))
        for p in shapes:
            q, k, v = make_inputs(p, seed=launches)
            o = torch.full_like(q, float("nan"))
            module.forward(q, k, v, o, p.causal, softmax_scale(p))
            torch.cuda.synchronize()
            assert torch.isfinite(o).all(), (vid, p.label())
            launches += 1
    print(f"sanitized launches: {{launches}}")
""")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer_is_clean(tool, built, tmp_path):
    """memcheck: no out-of-bounds or misaligned global access on ragged tiles (torch's caching
    allocator is off, so every tensor is its own allocation and an overrun is visible);
    racecheck: the shared-memory tiles are fenced by the barriers."""
    sanitizer = shutil.which("compute-sanitizer") or _beside_nvcc("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (it ships with the CUDA toolkit)")
    script = tmp_path / "sanitize_rungs.py"
    script.write_text(SANITIZER_SCRIPT.format(rungs=RUNGS))
    env = _child_env(PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    res = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=420)
    out = res.stdout + res.stderr
    assert f"sanitized launches: {len(RUNGS) * 9}" in out, out[-4000:]
    assert res.returncode == 0, out[-4000:]
    assert re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors", out), out[-4000:]
    assert not re.search(r"ERROR SUMMARY: [1-9]", out), out[-4000:]


def _beside_nvcc(name: str) -> str | None:
    nvcc = shutil.which("nvcc")
    candidates = [Path(nvcc).resolve().parent / name] if nvcc else []
    candidates.append(Path("/usr/local/cuda/bin") / name)
    return next((str(c) for c in candidates if c.is_file()), None)


def _child_env(**extra) -> dict:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env

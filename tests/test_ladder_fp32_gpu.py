"""The fp32 rungs v3_unrolled and v4_double_buffer on the correctness gate (lab.check).

GPU tests (`-m gpu`, skipped with a reason where torch.cuda.is_available() is False): each rung
correct (rel_err <= 1e-4 against float64) on >= 100 seeded shapes plus shapes that sit on its tile
edges, the NaN poison catching a truncated launch, the launchers' refusals, and compute-sanitizer
memcheck and racecheck clean on 3 shapes per rung (ragged query and key tiles, causal, several
K/V tiles so v4's K/V buffers are refilled under each of its schedules).
CPU tests (no marker): the tuning list of benchmarks/fp32_dev.py names as many configs as each
rung's launch_tuning() has cases.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab import check  # noqa: E402
from lab.problem import Problem  # noqa: E402
from lab.variants import get  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
RUNGS = ["v3", "v4"]
GPU_SHAPES = 104  # >= 100 seeded shapes: the 24 corners and 80 random ragged ones (lab.check.check_shapes)

# Tile edges of the default configs (BM = 128 query rows at D=32/64, 64 at D=128; BN = 32 or 64
# keys): one row short of, on, and one past a tile, in both dimensions, causal and not, and a long
# causal sequence whose CTAs see very different numbers of key tiles.
TILE_EDGE_SHAPES = [Problem(1, 2, n, n, d, causal)
                    for n in (31, 32, 33, 63, 64, 65, 127, 128, 129)
                    for d in (32, 64, 128) for causal in (False, True)] + [
    Problem(1, 2, 2048, 2048, 64, True), Problem(1, 1, 257, 2000, 128, True), Problem(1, 1, 2000, 257, 32, True),
    Problem(3, 5, 200, 64, 64, False), Problem(1, 1, 1, 1000, 64, True), Problem(1, 1, 1000, 1, 128, True)]


# ----------------------------------------------------------------------------------------------
# CPU
# ----------------------------------------------------------------------------------------------

def _load_dev_script():
    spec = importlib.util.spec_from_file_location("fp32_dev", ROOT / "benchmarks" / "fp32_dev.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("vid", RUNGS)
def test_tuning_list_matches_the_kernel_cases(vid):
    """fp32_dev.py times candidates by index; a case added to the .cu but not to the list (or the
    reverse, or a changed tile) would be mislabelled in every table the script prints."""
    dev = _load_dev_script()
    source = get(vid).source.read_text()
    tuning = source[source.index("const char* launch_tuning("):]
    tuning = tuning[:tuning.index("#endif")]
    in_kernel: dict[int, list[str]] = {}
    for index, d, tm, tn, threads, min_ctas, unroll_d, unroll_n, p_chunk, schedule in re.findall(
            r"case (\d+): return launch<V\dConfig<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)(?:, (\d+))?"
            r"(?:, (\d+))?>>", tuning):
        labels = in_kernel.setdefault(int(d), [])
        assert int(index) == len(labels), f"{vid} D={d}: case {index} out of order"
        labels.append(f"TM{tm} TN{tn} T{threads} min{min_ctas} u{unroll_d},{unroll_n}"
                      + (f" p{int(p_chunk)}" if p_chunk and int(p_chunk) else "")
                      + {"": "", "1": "", "2": " s2", "3": " mb"}[schedule])  # v4's K/V schedule
    assert in_kernel == dev.TUNE_CONFIGS[vid]
    assert set(in_kernel) == set(get(vid).head_dims)


# ----------------------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built():
    from lab.build import build

    return {vid: build(get(vid)) for vid in RUNGS}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("vid", RUNGS)
def test_rung_is_correct_on_seeded_shapes(vid, built):
    result = check.check_variant(get(vid), extra_shapes=GPU_SHAPES, seed=4321, module=built[vid].module)
    assert len(result.shapes) >= 100
    failures = [s.to_dict() for s in result.shapes if not s.passed]
    assert not failures, f"{vid} failed {len(failures)} shapes, first: {failures[:3]}"
    assert result.passed and result.to_dict()["rel_err"] <= check.FP32_REL_TOL
    checked = {(s.problem.seqlen_q, s.problem.head_dim, s.problem.causal) for s in result.shapes}
    for n in check.CORNER_SEQLENS:
        for d in (32, 64, 128):
            for causal in (False, True):
                assert (n, d, causal) in checked
    assert any(s.problem.seqlen_q != s.problem.seqlen_k and s.problem.causal for s in result.shapes)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("vid", RUNGS)
def test_rung_is_correct_on_its_tile_edges(vid, built):
    module = built[vid].module
    failures = []
    for p in TILE_EDGE_SHAPES:
        shape = check.check_problem(get(vid), p, module, seed=99)
        if not shape.passed:
            failures.append(shape.to_dict())
    assert not failures, f"{vid} failed {len(failures)} of {len(TILE_EDGE_SHAPES)} tile-edge shapes: {failures[:3]}"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("vid", RUNGS)
def test_nan_poison_catches_a_truncated_launch(vid, built):
    """Launch the real kernel on all but the last query row (a contiguous prefix view of q and o),
    so that row is never written; the gate's comparison must fail it, and only because of it."""
    from lab.problem import make_inputs, softmax_scale

    module = built[vid].module
    problem = Problem(1, 1, 130, 130, 64)  # 130 rows: the truncated launch still spans two query tiles
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
    buf = torch.randn(16 * 64 + 1, device="cuda")  # a view 4 bytes into a buffer: no float4 loads
    odd = buf[1:].view(1, 1, 16, 64)
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        module.forward(odd, odd, odd, torch.empty_like(odd), False, 1.0)
    wide = torch.randn(1, 65536, 1, 32, device="cuda")  # batch * heads goes on grid.y (<= 65535)
    with pytest.raises(RuntimeError, match="65535"):
        module.forward(wide, wide, wide, torch.empty_like(wide), False, 1.0)


SANITIZER_SCRIPT = textwrap.dedent("""
    import torch
    from lab import build, variants
    from lab.problem import Problem, make_inputs, softmax_scale

    # One query row over 4 ragged 64-key tiles at D=32 (v4's two stages refilled); two ragged 128-row
    # query tiles over two ragged 64-key tiles, causal (v4's D=64 interleaved schedule refills sK and
    # sV); D=128 (64 x 32 tiles) with seqlen_q < seqlen_k and 5 key tiles, so v4's D=128 split-phase
    # schedule refills them 4 times, its mbarriers through 5 phases.
    shapes = [Problem(1, 1, 1, 200, 32), Problem(1, 2, 150, 100, 64, True), Problem(2, 1, 70, 130, 128)]
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
    """memcheck: no out-of-bounds or misaligned global access (cp.async included) on ragged tiles
    (torch's caching allocator is off, so every tensor is its own allocation and an overrun is
    visible); racecheck: the shared-memory tiles, v4's K/V buffers and each warp's P rows are fenced
    by the barriers."""
    sanitizer = shutil.which("compute-sanitizer") or _beside_nvcc("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (it ships with the CUDA toolkit)")
    script = tmp_path / "sanitize_fp32_rungs.py"
    script.write_text(SANITIZER_SCRIPT.format(rungs=RUNGS))
    env = _child_env(PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    res = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=420)
    out = res.stdout + res.stderr
    assert f"sanitized launches: {len(RUNGS) * 3}" in out, out[-4000:]
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

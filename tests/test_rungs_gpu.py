"""Every registered rung on the GPU, driven by the registry: the built-in ladder, the example
workspace (examples/workspace) and the active workspace (LAB_WORKSPACE or the current folder's).

Each rung, in each of its dtypes, goes through the lab's own correctness gate (lab.measure.check:
NaN-poisoned output, float64 reference, the rung's rule: rel_err <= 1e-4 in fp32, max error <= 2x
SDPA's in fp16/bf16) on >= 100 seeded shapes plus the tile edges of every common tile size.
What a rung declares in its lab:rung block is tested as a fact: its head dims and dtypes (others
refused by a .cu launcher), aligned16 (misaligned tensors refused), grid "x,bh" (B*H > 65535
refused). compute-sanitizer memcheck and racecheck run every .cu rung on ragged shapes.

GPU tests (`-m gpu`) skip with a reason where torch.cuda.is_available() is False; a python rung
whose module needs a package that is missing here (Triton) is skipped with the import error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.errors import LabError  # noqa: E402
from lab.ladder import registry, workspace  # noqa: E402
from lab.measure import check  # noqa: E402
from lab.measure.problem import Problem, make_inputs, softmax_scale  # noqa: E402
from conftest import REPO  # noqa: E402

EXAMPLE_WORKSPACE = REPO / "examples" / "workspace"
HAS_GPU = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")]

GPU_SHAPES = 104  # >= 100: the corners (N in {1, 17, 1000, 1023} x D x causal) and random ragged ones
EDGE_LENGTHS = (15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)  # around every common tile size


def rungs_under_test() -> list[registry.Variant]:
    rungs = list(registry.variants())
    if (EXAMPLE_WORKSPACE / workspace.LAB_TOML).is_file():
        seen = {(v.origin, v.id) for v in rungs}
        rungs += [v for v in workspace.load(EXAMPLE_WORKSPACE).rungs() if ("workspace", v.id) not in seen]
    return rungs


RUNGS = rungs_under_test()
CASES = [(v, dtype) for v in RUNGS for dtype in v.dtypes]
CUDA_RUNGS = [v for v in RUNGS if v.kind == "cuda"]


def _name(v) -> str:
    return f"{v.id}@{v.origin}"


@pytest.fixture(scope="module")
def built():
    from lab.ladder.build import build

    modules = {}

    def get(v):
        key = (v.origin, v.id, str(v.source))
        if key not in modules:
            from lab.environment import require_compute_capability

            try:
                require_compute_capability(v)
                modules[key] = build(v).module
            except LabError as e:
                if "No module named" in str(e) or "compute capability" in str(e):
                    pytest.skip(f"{_name(v)}: {e}")
                raise
        return modules[key]
    return get


def edge_shapes(v, dtype: str) -> list[Problem]:
    """Tile edges in both dimensions, causal and not; a long causal sequence whose CTAs see very
    different numbers of key tiles; 70 heads (several head groups of a longest-first causal grid)."""
    shapes = [Problem(1, 2, n, n, d, causal, dtype) for n in EDGE_LENGTHS for d in v.head_dims
              for causal in (False, True)][::3]
    d = v.head_dims[-1]
    shapes += [Problem(1, 2, 2048, 2048, v.head_dims[0], True, dtype), Problem(1, 1, 257, 2000, d, True, dtype),
               Problem(1, 1, 2000, 257, d, True, dtype), Problem(3, 5, 200, 64, d, False, dtype),
               Problem(5, 14, 129, 1000, v.head_dims[0], True, dtype), Problem(1, 1, 1, 1000, d, True, dtype)]
    return shapes


@pytest.mark.parametrize("variant, dtype", CASES, ids=lambda x: _name(x) if isinstance(x, registry.Variant) else x)
def test_rung_is_correct_on_seeded_shapes_and_tile_edges(variant, dtype, built):
    module = built(variant)
    shapes = [p.with_dtype(dtype) for p in check.check_shapes(variant, GPU_SHAPES, seed=1234)]
    shapes += edge_shapes(variant, dtype)
    results = [check.check_problem(variant, p, module, seed=1234) for p in shapes]
    failures = [s.to_dict() for s in results if not s.passed]
    assert not failures, f"{_name(variant)} {dtype} failed {len(failures)} of {len(results)} shapes: {failures[:3]}"
    assert len(results) >= 100
    checked = {(s.problem.seqlen_q, s.problem.head_dim, s.problem.causal) for s in results}
    for n in check.CORNER_SEQLENS:
        for d in variant.head_dims:
            for causal in (False, True):
                assert (n, d, causal) in checked


@pytest.mark.parametrize("variant", RUNGS, ids=_name)
def test_nan_poison_catches_a_truncated_launch(variant, built):
    """Run the rung on all but the last query row (a contiguous prefix view of q and o), so that
    row is never written: the gate must fail it, and only because of it."""
    module = built(variant)
    d = variant.head_dims[0]
    problem = Problem(1, 1, 40, 40, d, False, variant.default_dtype)
    assert check.check_problem(variant, problem, module, seed=3).passed, "control: the full launch must pass"
    q, k, v = make_inputs(problem, seed=3)
    truncated = torch.full_like(q, float("nan"))
    q_head, o_head = q[:, :, :-1], truncated[:, :, :-1]
    assert q_head.is_contiguous() and o_head.is_contiguous() and o_head.data_ptr() == truncated.data_ptr()
    module.forward(q_head, k, v, o_head, False, softmax_scale(problem))
    torch.cuda.synchronize()
    ref = check.reference_attention(q, k, v, False, softmax_scale(problem))
    errors = check.compare(truncated, ref)
    assert errors["nonfinite"] == d  # exactly the unwritten row
    assert not check.judge(errors, check.FP32_REL_TOL)
    assert check.compare(truncated[:, :, :-1], ref[:, :, :-1])["nonfinite"] == 0


@pytest.mark.parametrize("variant", CUDA_RUNGS, ids=_name)
def test_launcher_refuses_what_it_does_not_declare(variant, built):
    module = built(variant)
    dt = getattr(torch, variant.default_dtype)
    d = variant.head_dims[0]
    bad_d = next(x for x in range(8, 256, 8) if x not in variant.head_dims)
    x = torch.randn(1, 1, 16, bad_d, device="cuda", dtype=dt)
    with pytest.raises(RuntimeError, match="head_dim"):
        module.forward(x, x, x, torch.empty_like(x), False, 1.0)
    other = [t for t in registry.DTYPES if t not in variant.dtypes]
    if other:
        h = torch.randn(1, 1, 16, d, device="cuda", dtype=getattr(torch, other[0]))
        with pytest.raises(RuntimeError):
            module.forward(h, h, h, torch.empty_like(h), False, 1.0)
    if variant.aligned16:  # a view 4 bytes into a buffer is refused
        buf = torch.randn(16 * d + 4, device="cuda", dtype=dt)
        odd = buf[2:2 + 16 * d].view(1, 1, 16, d) if dt != torch.float32 else buf[1:1 + 16 * d].view(1, 1, 16, d)
        with pytest.raises(RuntimeError, match="16-byte aligned"):
            module.forward(odd, odd, odd, torch.empty_like(odd), False, 1.0)
    if variant.batch_heads_on_grid_y:
        wide = torch.randn(1, 65536, 1, d, device="cuda", dtype=dt)
        with pytest.raises(RuntimeError, match="65535"):
            module.forward(wide, wide, wide, torch.empty_like(wide), False, 1.0)


@pytest.mark.parametrize("variant", [v for v in RUNGS if v.kind == "python"], ids=_name)
def test_python_rung_with_a_wrong_output_fails_its_shape(variant, built):
    """A callable returning the wrong shape or dtype fails the check (exit 1), it is not a crash."""
    from lab.ladder.python_rung import PythonRung

    good = built(variant)
    problem = Problem(1, 2, 17, 17, variant.head_dims[0], False, variant.default_dtype)
    for wrong in (lambda q, k, v, c, s: good.call_forward(q, k, v, c, s)[0][..., :-1],
                  lambda q, k, v, c, s: good.call_forward(q, k, v, c, s)[0].double()):
        shape = check.check_problem(variant, problem, PythonRung(variant, wrong), seed=0)
        assert not shape.passed and re.search(r"returned (shape|float64)", shape.error or ""), shape.to_dict()


def test_second_build_compiles_nothing(built):
    """In this process the module is reused; a fresh process imports the finished .so."""
    from lab.ladder.build import build

    first = CUDA_RUNGS[0]
    made = build(first)
    again = build(first)
    assert not again.built_now and again.cache_key == made.cache_key and again.module is made.module
    so_files = sorted(made.build_dir.glob("*.so"))
    mtimes = [p.stat().st_mtime_ns for p in so_files]
    code = ("import sys\nfrom lab.ladder import build, registry\n"
            "r = build.build(registry.get(sys.argv[1]))\n"
            "print('built_now', r.built_now, r.cache_key)\n")
    res = subprocess.run([sys.executable, "-c", code, registry.ref(first)], capture_output=True, text=True, cwd=REPO,
                         env=_child_env())
    assert res.returncode == 0, res.stderr
    assert f"built_now False {made.cache_key}" in res.stdout
    assert [p.stat().st_mtime_ns for p in so_files] == mtimes, "the cached .so was rebuilt"


SANITIZER_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from lab.ladder import build, registry, workspace
    from lab.measure.problem import Problem, make_inputs, softmax_scale

    # Ragged tiles in every direction: one row, one partial tile, seqlen_q < and > seqlen_k, causal;
    # and shapes with several key tiles, so that double-buffered K/V tiles are refilled.
    shapes = [(1, 1, 1, 1), (1, 2, 17, 17, True), (2, 1, 33, 70, True), (1, 1, 70, 33, True), (1, 1, 40, 5),
              (1, 1, 64, 64), (1, 1, 1, 200), (1, 2, 150, 100, True), (2, 1, 70, 130)]
    launches = 0
    for origin, root, vid in [a.split("|") for a in sys.argv[1:]]:
        pool = workspace.load(root).rungs() if origin == "workspace" else registry.builtin()
        variant = next(v for v in pool if v.id == vid)
        module = build.load_cached(variant)
        for i, s in enumerate(shapes):
            d = variant.head_dims[i % len(variant.head_dims)]
            p = Problem(s[0], s[1], s[2], s[3], d, len(s) > 4, variant.default_dtype)
            q, k, v = make_inputs(p, seed=launches)
            o = torch.full_like(q, float("nan"))
            module.forward(q, k, v, o, p.causal, softmax_scale(p))
            torch.cuda.synchronize()
            assert torch.isfinite(o).all(), (vid, p.label())
            launches += 1
    print(f"sanitized launches: {launches}")
""")


# racecheck and synccheck replay every shared-memory access (minutes on an H100): the slow tier
@pytest.mark.parametrize("tool", ["memcheck", pytest.param("racecheck", marks=pytest.mark.slow)])
def test_compute_sanitizer_is_clean(tool, built, tmp_path):
    """memcheck: no out-of-bounds or misaligned global access on ragged tiles (torch's caching
    allocator is off, so every tensor is its own allocation and an overrun is visible);
    racecheck: the shared-memory tiles are fenced by the barriers."""
    sanitizer = shutil.which("compute-sanitizer") or _beside_nvcc("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (it ships with the CUDA toolkit)")
    rungs = []
    for v in CUDA_RUNGS:
        built(v)  # built (or skipped) in this process first: the child only loads
        root = workspace.find(v.source.parent) if v.origin == "workspace" else ""
        rungs.append(f"{v.origin}|{root}|{v.id}")
    script = tmp_path / "sanitize_rungs.py"
    script.write_text(SANITIZER_SCRIPT)
    env = _child_env(PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    res = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script), *rungs],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=420)
    out = res.stdout + res.stderr
    assert f"sanitized launches: {len(rungs) * 9}" in out, out[-4000:]
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
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env

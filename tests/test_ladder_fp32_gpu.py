"""What is specific to the tiled fp32 rungs v3_unrolled and v4_double_buffer.

GPU tests (`-m gpu`, skipped with a reason where torch.cuda.is_available() is False): each rung
correct (rel_err <= 1e-4 against float64) on shapes that sit on its tile edges. The >= 100 seeded
shapes, NaN poison, refusals and compute-sanitizer runs every fp32 rung shares are in
tests/test_check_gpu.py.
The rungs' tuning candidates are tested through `lab tune` in tests/test_tune.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.measure import check  # noqa: E402
from lab.measure.problem import Problem  # noqa: E402
from lab.ladder.registry import get  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
RUNGS = ["v3", "v4"]
GPU_SHAPES = 104  # >= 100 seeded shapes: the 24 corners and 80 random ragged ones (lab.measure.check.check_shapes)

# Tile edges of the default configs (BM = 128 query rows at D=32/64, 64 at D=128; BN = 32 or 64
# keys): one row short of, on, and one past a tile, in both dimensions, causal and not, and a long
# causal sequence whose CTAs see very different numbers of key tiles.
TILE_EDGE_SHAPES = [Problem(1, 2, n, n, d, causal)
                    for n in (31, 32, 33, 63, 64, 65, 127, 128, 129)
                    for d in (32, 64, 128) for causal in (False, True)] + [
    Problem(1, 2, 2048, 2048, 64, True), Problem(1, 1, 257, 2000, 128, True), Problem(1, 1, 2000, 257, 32, True),
    Problem(3, 5, 200, 64, 64, False), Problem(1, 1, 1, 1000, 64, True), Problem(1, 1, 1000, 1, 128, True)]


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
def test_rung_is_correct_on_its_tile_edges(vid, built):
    module = built[vid].module
    failures = []
    for p in TILE_EDGE_SHAPES:
        shape = check.check_problem(get(vid), p, module, seed=99)
        if not shape.passed:
            failures.append(shape.to_dict())
    assert not failures, f"{vid} failed {len(failures)} of {len(TILE_EDGE_SHAPES)} tile-edge shapes: {failures[:3]}"

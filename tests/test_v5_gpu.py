"""v5_mma (tensor-core FlashAttention-2) against a float64 reference on >= 100 seeded shapes.

Rule (issue 4), enforced by lab.measure.check: max |v5 - ref| <= 2 x max |SDPA(same dtype) - ref|, ref in
float64 (causal aligned top-left, as PyTorch), floored at one rounding step of the dtype at max
|ref|. Ragged lengths around the 16/64/128 tiles, seqlen_q != seqlen_k, causal and not, D 64/128,
fp16 and bf16, and shapes with 70 heads (several causal head groups).

Needs a CUDA GPU (run with `pytest -m gpu` on the GPU machine); skipped cleanly elsewhere.
"""

from __future__ import annotations

import random
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
EDGE_LENGTHS = (1, 2, 15, 16, 17, 63, 64, 65, 100, 127, 128, 129, 1000, 1023)


def _cases(count: int = 120, seed: int = 2024) -> list[tuple]:
    """Seeded (B, H, Nq, Nk, D, causal, dtype, seed): edge lengths around the 16/64/128 tile sizes
    plus random lengths up to 1100; every combination of D, causal and dtype appears many times."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        pick = lambda: rng.choice(EDGE_LENGTHS) if rng.random() < 0.5 else rng.randint(1, 1100)
        nq = pick()
        nk = nq if rng.random() < 0.3 else pick()
        # Every 8th case has 5 x 14 = 70 heads: causal launches walk heads in groups of 32, so this
        # covers several groups and a partial last one.
        b, h = (5, 14) if i % 8 == 7 else (rng.randint(1, 3), rng.randint(1, 4))
        cases.append((b, h, nq, nk, (64, 128)[i % 2], bool((i // 2) % 2),
                      ("float16", "bfloat16")[(i // 4) % 2], seed + i))
    return cases


@pytest.fixture(scope="module")
def v5():
    from lab.ladder.build import build
    from lab.ladder.registry import get

    return build(get("v5")).module


@pytest.mark.parametrize("b,h,nq,nk,d,causal,dtype_name,seed", _cases(),
                         ids=lambda x: str(x))
def test_v5_matches_float64(v5, b, h, nq, nk, d, causal, dtype_name, seed):
    """Through the lab's own gate (lab.measure.check): NaN-poisoned output, float64 reference, and the
    fp16/bf16 rule max|v5 - ref| <= 2 x max|SDPA - ref| (floored at one rounding step)."""
    from lab.measure import check
    from lab.measure.problem import Problem
    from lab.ladder.registry import get

    shape = check.check_problem(get("v5"), Problem(b, h, nq, nk, d, causal, dtype_name), v5, seed)
    assert shape.metric == "max_abs_err"
    assert shape.passed, shape.to_dict()


def test_v5_case_list_covers_the_issue():
    cases = _cases()
    assert len(cases) >= 100
    assert any(c[2] != c[3] for c in cases) and any(c[5] for c in cases) and any(not c[5] for c in cases)
    assert {c[4] for c in cases} == {64, 128} and {c[6] for c in cases} == set(DTYPES)
    assert any(c[2] % 16 for c in cases) and any(c[3] == 1 for c in cases)
    assert any(c[0] * c[1] > 64 and c[5] for c in cases)  # causal across several head groups


def test_v5_rejects_unsupported_head_dim(v5):
    q = torch.randn(1, 1, 8, 32, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="head_dim"):
        v5.forward(q, q, q, torch.empty_like(q), False, 32 ** -0.5)


def test_v5_rejects_float32(v5):
    q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(RuntimeError, match="float16 and bfloat16"):
        v5.forward(q, q, q, torch.empty_like(q), False, 64 ** -0.5)

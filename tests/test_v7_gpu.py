"""The ladder's backward rung (RUNG below, the built-in CUDA rung that declares `backward = true`):
forward O and LSE and backward dQ, dK, dV against float64 autograd.

Rule (issue 19, the lab's rule for fp16/bf16): for each output tensor, max |rung - ref| <= 2 x
max |SDPA(same dtype) - ref|, ref in float64 autograd (causal aligned top-left, as torch SDPA),
floored at one rounding step of the dtype at max |ref|; the LSE (fp32) within 4e-5 relative to its
largest magnitude. Outputs are poisoned with NaN before each call, so an element the rung never
writes fails. Shapes: N = 1, odd N, FlashAttention's ragged pairs (113/203, 1023/1024, 1/239),
causal and not, D 64/128, fp16 and bf16, B*H in the hundreds, and large logits (std-4 inputs).
compute-sanitizer memcheck and racecheck on small ragged shapes.

GPU tests need compute capability 8.0+ (`pytest -m gpu` on the GPU machine) and skip elsewhere;
the case-list test runs on the CPU.
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
from conftest import slow_beyond

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.ladder import registry  # noqa: E402
from lab.ladder.registry import builtin  # noqa: E402

RUNG = next(v for v in builtin() if v.backward and v.kind == "cuda")
ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
needs_sm80 = pytest.mark.skipif(not HAS_GPU or torch.cuda.get_device_capability(0) < (8, 0),
                                reason="the backward rung needs compute capability 8.0+ (mma.sync bf16)")
LARGE_STD = 4.0

PAIRS = [(1, 1, 1, 1), (2, 3, 17, 17), (1, 2, 113, 203), (1, 2, 203, 113), (2, 3, 1023, 1024),
         (1, 2, 1, 239), (1, 2, 239, 1), (2, 2, 128, 128), (1, 3, 1000, 1000), (4, 64, 129, 97),
         (1, 2, 300, 700), (1, 1, 2049, 2049)]


def _cases() -> list[tuple]:
    """(B, H, Nq, Nk, D, causal, dtype, std): every pair with both head dims and masks (dtype
    alternating), plus std-4 inputs in every combination of D, mask and dtype."""
    cases = []
    for i, (b, h, nq, nk) in enumerate(PAIRS):
        for d in (64, 128):
            for causal in (False, True):
                cases.append((b, h, nq, nk, d, causal, ("float16", "bfloat16")[(i + d // 64 + causal) % 2], 1.0))
    for d in (64, 128):
        for causal in (False, True):
            for dtype in ("float16", "bfloat16"):
                cases.append((2, 4, 257, 257, d, causal, dtype, LARGE_STD))
    return cases


@pytest.fixture(scope="module")
def module():
    from lab.ladder.build import build

    return build(RUNG).module


def _reference(q, k, v, dout, causal, scale):
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ v
    return (o.detach(), lse.detach(), *torch.autograd.grad(o, (q, k, v), dout.double()))


def _sdpa(q, k, v, dout, causal, scale):
    """SDPA in the inputs' dtype; an explicit top-left mask where Nq != Nk."""
    import torch.nn.functional as F

    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    if causal and q.shape[-2] != k.shape[-2]:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), dout))


@pytest.mark.gpu
@needs_sm80
@pytest.mark.parametrize("b,h,nq,nk,d,causal,dtype_name,std",
                         # one case of each pair and every large-value case in one sitting; all in the slow tier
                         slow_beyond(_cases(), lambda i, c: i % 4 == 0 or c[7] != 1.0), ids=lambda x: str(x))
def test_backward_matches_float64(module, b, h, nq, nk, d, causal, dtype_name, std):
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device="cuda").manual_seed(nq * 7 + nk * 13 + d + causal)
    mk = lambda n: (torch.randn(b, h, n, d, generator=gen, device="cuda") * std + 0.5).to(dtype)
    q, k, v = mk(nq), mk(nk), mk(nk)
    dout = torch.randn(b, h, nq, d, generator=gen, device="cuda").to(dtype)
    scale = d ** -0.5
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, nq), float("nan"), device="cuda")
    module.forward(q, k, v, o, causal, scale, lse)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    module.backward(q, k, v, o, dout, lse, dq, dk, dv, causal, scale)
    torch.cuda.synchronize()
    ref = _reference(q, k, v, dout, causal, scale)
    sdpa = _sdpa(q, k, v, dout, causal, scale)
    eps = torch.finfo(dtype).eps
    bad = []
    for name, got, want, theirs in zip(("O", "dQ", "dK", "dV"), (o, dq, dk, dv), (ref[0], *ref[2:]), sdpa):
        err = (got.double() - want).abs()
        worst = err.max().item() if torch.isfinite(err).all() else float("inf")
        tol = max(2.0 * (theirs.double() - want).abs().max().item(), eps * want.abs().max().item())
        if not worst <= tol:
            bad.append(f"{name}: max error {worst:.3e} > tolerance {tol:.3e}")
    lse_err = (lse.double() - ref[1]).abs().max().item()
    if not lse_err <= 4e-5 * max(1.0, ref[1].abs().max().item()):
        bad.append(f"LSE: max error {lse_err:.3e}")
    assert not bad, "; ".join(bad)


def test_case_list_covers_the_issue():
    cases = _cases()
    lengths = {c[2] for c in cases} | {c[3] for c in cases}
    assert {1, 17, 113, 203, 1023, 1024, 239} <= lengths
    assert any(c[5] and c[2] != c[3] for c in cases) and any(not c[5] and c[2] != c[3] for c in cases)
    assert {c[4] for c in cases} == {64, 128} and {c[6] for c in cases} == {"float16", "bfloat16"}
    assert any(c[0] * c[1] >= 256 for c in cases)
    assert {(c[4], c[5], c[6]) for c in cases if c[7] == LARGE_STD} == {
        (d, m, t) for d in (64, 128) for m in (False, True) for t in ("float16", "bfloat16")}


@pytest.mark.gpu
@needs_sm80
def test_backward_refuses_unsupported_input(module):
    q = torch.randn(1, 1, 8, 32, device="cuda", dtype=torch.float16)
    lse = torch.zeros(1, 1, 8, device="cuda")
    with pytest.raises(RuntimeError, match="head_dim"):
        module.backward(q, q, q, q, q, lse, torch.empty_like(q), torch.empty_like(q), torch.empty_like(q), False, 0.2)
    q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(RuntimeError, match="float16 and bfloat16"):
        module.backward(q, q, q, q, q, lse, torch.empty_like(q), torch.empty_like(q), torch.empty_like(q), False, 0.125)


SANITIZER_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from lab.ladder import build
    from lab.ladder import registry

    module = build.load_cached(registry.get(sys.argv[1]))
    # Ragged everywhere: a key block past every query (causal, Nq < Nk), Nq > Nk, one query row,
    # both head dims and dtypes.
    shapes = [(1, 2, 113, 203, 64, True, torch.float16), (1, 1, 203, 113, 128, False, torch.bfloat16),
              (1, 1, 130, 130, 128, True, torch.float16), (2, 1, 1, 70, 64, False, torch.bfloat16)]
    for (b, h, nq, nk, d, causal, dtype) in shapes:
        mk = lambda n: (torch.randn(b, h, n, d, device="cuda") + 0.5).to(dtype)
        q, k, v, dout = mk(nq), mk(nk), mk(nk), mk(nq)
        o, lse = torch.empty_like(q), torch.empty(b, h, nq, device="cuda")
        module.forward(q, k, v, o, causal, d ** -0.5, lse)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        module.backward(q, k, v, o, dout, lse, dq, dk, dv, causal, d ** -0.5)
        torch.cuda.synchronize()
        assert all(torch.isfinite(t).all() for t in (dq, dk, dv)), (b, h, nq, nk, d, causal)
    print(f"sanitized backward calls: {len(shapes)}")
""")


@pytest.mark.gpu
@needs_sm80
# racecheck and synccheck replay every shared-memory access (minutes on an H100): the slow tier
@pytest.mark.parametrize("tool", ["memcheck", pytest.param("racecheck", marks=pytest.mark.slow)])
def test_compute_sanitizer_is_clean(tool, module, tmp_path):
    sanitizer = shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path(shutil.which("nvcc") or "/nonexistent").resolve().parent / "compute-sanitizer",
                          Path("/usr/local/cuda/bin/compute-sanitizer")) if p.is_file()), None)
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (it ships with the CUDA toolkit)")
    script = tmp_path / "sanitize_backward.py"
    script.write_text(SANITIZER_SCRIPT)
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    res = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script), registry.ref(RUNG)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=420)
    out = res.stdout + res.stderr
    assert "sanitized backward calls: 4" in out, out[-4000:]
    assert res.returncode == 0, out[-4000:]
    assert re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors", out), out[-4000:]
    assert not re.search(r"ERROR SUMMARY: [1-9]", out), out[-4000:]

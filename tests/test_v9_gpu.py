"""v9 (the persistent Hopper forward, issue 28) against a float64 reference, on the shapes where a
persistent CTA's tile walk can go wrong: many tiles per CTA (B*H*query blocks far above the 132-264
CTAs of the grid, so the K/V ring's stage and phase and the Q buffer's reuse run on across tiles),
tile lists that do not divide the grid, ragged lengths at v9's 64/128/192-row query and 128-key tile
edges, N = 1, Nq != Nk both ways, causal and not, D 64 and 128, fp16 and bf16, inputs of standard
deviation 6 (large logits), the three-consumer path (D = 64, non-causal, Nq, Nk >= 2048: ragged last
blocks with warpgroups partly or wholly past nq), the one-warpgroup
path (D = 64 otherwise, O stored by TMA; non-causal with two Q buffers) and the ping-pong path (D = 128:
two consumer warpgroups taking turns across a CTA's tiles, O stored by TMA, two Q buffers). Where asked, the row log-sum-exp too (the statistic v8's backward reads), against float64.

Rule for O (v5's, lab.measure.check): max |v9 - ref| <= 2 x max |SDPA(same dtype) - ref|, floored at
one rounding step of the dtype at max |ref|. LSE (fp32): within 4e-5 x max(1, max |ref|) (v7_dev's).
compute-sanitizer memcheck (racecheck and synccheck in the slow tier) on shapes with several tiles
per CTA. GPU tests need a Hopper GPU (compute capability 9.0) and skip cleanly elsewhere.
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

from lab.measure import check  # noqa: E402
from lab.measure.problem import Problem, make_inputs, softmax_scale  # noqa: E402
from lab.ladder import registry  # noqa: E402
from lab.ladder.registry import builtin  # noqa: E402
from conftest import REPO  # noqa: E402

# The persistent Hopper forward, found by what it declares (sm_90a, a flat persistent grid), not by
# id (tests name rungs through the registry).
def _find_rung():
    return next((v for v in builtin() if v.min_cc >= (9, 0) and v.grid == "flat"), None)


RUNG = _find_rung()
HAS_GPU = torch.cuda.is_available()
IS_HOPPER = HAS_GPU and torch.cuda.get_device_capability(0) == (9, 0)
needs_hopper = pytest.mark.skipif(not IS_HOPPER, reason="v9 needs compute capability 9.0 (sm_90a: wgmma, TMA)")
LARGE_STD = 6.0

# (B, H, Nq, Nk, D, causal, dtype, std): tiles = B*H*ceil(Nq/BM) with BM 64 (D=64), 128 (D=128),
# 192 (D=64 non-causal, Nq, Nk >= 2048); the grid holds 264 CTAs at D=64 and 132 at D=128 on an H100.
CASES = [
    (8, 40, 300, 300, 64, True, "float16", 1.0),        # 1,600 tiles, causal, ragged diagonal
    (8, 40, 300, 300, 64, False, "bfloat16", LARGE_STD),
    (4, 33, 257, 129, 128, True, "bfloat16", 1.0),      # Nq > Nk causal: rows past the keys
    (4, 33, 129, 1000, 128, False, "float16", LARGE_STD),
    (6, 70, 1, 1, 64, False, "float16", 1.0),           # N = 1: 420 one-key tiles
    (6, 70, 1, 239, 128, True, "bfloat16", LARGE_STD),  # N = 1 query over a ragged key tile
    (3, 47, 1023, 1024, 64, True, "bfloat16", LARGE_STD),
    (2, 17, 1000, 777, 128, True, "float16", 1.0),
    (1, 1, 63, 65, 64, True, "float16", 1.0),           # fewer tiles than CTAs
    (2, 70, 400, 8200, 64, False, "float16", 1.0),      # long keys, short queries: one warpgroup
    (1, 150, 193, 8192, 64, False, "bfloat16", LARGE_STD),
    # three consumers: 2048 = 10 x 192 + 128 (the last block's third warpgroup past nq), 2200 = 11 x
    # 192 + 88 (its second partly, its third wholly); 264-288 tiles of 11-19 key tiles
    (12, 2, 2048, 2300, 64, False, "float16", 1.0),
    (2, 12, 2200, 2048, 64, False, "bfloat16", LARGE_STD),
    (4, 33, 700, 300, 64, True, "float16", 1.0),        # Nq > Nk causal at D=64: rows past the keys
    (1, 20, 2100, 2050, 64, True, "bfloat16", LARGE_STD),  # causal 2048 <= N < 8192: one warpgroup (step 18), walk (21)
    (16, 16, 512, 512, 128, True, "float16", 1.0),      # the fa-grid's weakest cells, smaller
    (16, 32, 512, 512, 64, True, "bfloat16", 1.0),
    # D=128 runs ping-pong on the persistent grid (steps 2-3), O stored by TMA (step 4): the two
    # consumer warpgroups' turns and O buffers carried across 4-5 ragged tiles per CTA, and across
    # 9-10 tiles of a single key tile each
    (8, 24, 300, 300, 128, False, "bfloat16", LARGE_STD),
    (3, 50, 1000, 1, 128, False, "float16", 1.0),
    # causal from Nq, Nk >= 8192 runs three consumers (step 10): 8200 = 42 x 192 + 136 rows, 8 past the keys
    (1, 2, 8200, 8192, 64, True, "float16", 1.0),
    # D=128 non-causal from Nq, Nk >= 8192 runs 176-key tiles with O over V (step 14): 8300 = 47 x 176 + 28 keys
    # (a ragged last key tile), 8200 = 64 x 128 + 8 rows
    (1, 2, 8200, 8300, 128, False, "bfloat16", LARGE_STD),
    # causal 1024 <= N < 2048 runs the ping-pong on the dynamic, longest-first walk (step 19 (c)): Nq != Nk, ragged
    (2, 9, 1100, 1030, 64, True, "float16", 1.0),
]
LSE_CASES = [CASES[0], CASES[3], CASES[5], CASES[9], CASES[16], CASES[12], CASES[19], CASES[-2], CASES[14], CASES[-1]]
# The `lab tune` candidates that are not a default's (kernels/v9_wgmma_fa3.cu; step 13 retired those that lost),
# by label, so the cases above do not reach them; checked here with the LSE on the cases of their head dim and
# mask. D=128, non-causal only: step 13's 176-key tiles and step 14's with O staged in the tile's last V stage
# (ragged last key tiles of 120 and 124 keys at Nk = 1000 and 300, and a one-key tile at Nk = 1).
D128_CASES = [c for c in CASES if c[4] == 128]
D128_NON_CAUSAL_CANDIDATES = ["C2 BN176 S2 persistent pp (non-causal)",
                              # step 14: the same with O by TMA through the tile's last V stage
                              "C2 BN176 S2 persistent pp o-in-v (non-causal)",
                              # step 23: the default with the tile handed to the consumers (static walk; both masks)
                              "C2 BN128 S2 persistent pp tma-o q2 tile-handed"]
# D=64, both masks: two Q buffers on one warpgroup with O by TMA (the non-causal default below 2048 since step 6
# (c), a candidate for causal problems) and step 7's 64-key tiles (BN = 64 beside BM = 64: ragged key tiles at
# 300, 1023, 2300, 8200).
D64_CANDIDATES = ["C1 BN128 S2 persistent tma-o q2", "C1 BN64 S2 persistent tma-o",
                  # step 23: the first with the tile handed to the consumers, on the static walk
                  "C1 BN128 S2 persistent tma-o q2 tile-handed"]
D64_CASES = [c for c in CASES if c[4] == 64]
# D=64, non-causal only: step 7 (c), two Q buffers on three consumers (Long64).
D64_NON_CAUSAL_CANDIDATES = ["C3 BN128 S2 persistent q2 (non-causal)",
                             # step 17: P's row sums by the tensor cores (the ones tile beside V)
                             "C3 BN128 S2 persistent sum-mma (non-causal)"]
# D=64, causal only: step 10, three consumers causal (the default from Nq, Nk >= 8192), and step 13 (c), the causal
# default's changes with two Q buffers, one warpgroup and in ping-pong (BM = 128; ragged Nk = 300, 2300, 8200,
# Nq != Nk).
D64_CAUSAL_CANDIDATES = ["C3 BN128 S2 persistent (causal)",
                         "C1 BN128 S2 persistent tma-o q2 half-softmax tree-max row-limit (causal)",
                         "C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit (causal)",
                         # step 19: the causal defaults' kernels on the dynamic, longest-first walk (a tile counter in
                         # the forward workspace; the consumers learn each tile from the producer)
                         "C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit (causal)",
                         "C1 BN128 S2 longest-first tma-o half-softmax tree-max row-limit (causal)",
                         "C3 BN128 S2 longest-first (causal)",
                         # step 22: the tile handed to the consumers (the defaults from 1024 below 8192)
                         "C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)",
                         "C1 BN128 S2 longest-first tma-o half-softmax tree-max row-limit tile-handed (causal)",
                         # step 23: the static walk's ping-pong with the tile handed (the default below 1024)
                         "C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)"]
D128_CAUSAL_CANDIDATES = ["C2 BN128 S2 longest-first pp tma-o q2 (causal)",
                          "C2 BN128 S2 persistent pp tma-o q2 tile-handed"]
CANDIDATE_CASES = [(label, c) for label in D64_CANDIDATES for c in D64_CASES] + \
                  [(label, c) for label in D64_NON_CAUSAL_CANDIDATES for c in D64_CASES if not c[5]] + \
                  [(label, c) for label in D64_CAUSAL_CANDIDATES for c in D64_CASES if c[5]] + \
                  [(label, c) for label in D128_NON_CAUSAL_CANDIDATES for c in D128_CASES if not c[5]] + \
                  [(label, c) for label in D128_CAUSAL_CANDIDATES for c in D128_CASES if c[5]]


def _ids(c) -> str:
    return "B{}-H{}-Nq{}-Nk{}-D{}-{}-{}-std{:g}".format(*c[:5], "causal" if c[5] else "full", c[6], c[7])


@pytest.fixture(scope="module")
def v9():
    from lab.ladder.build import build

    return build(RUNG).module


@pytest.fixture(scope="module")
def v9_tuning():
    from lab.ladder.build import build

    return build(RUNG, tuning=True).module


def _candidate_index(module, label: str, head_dim: int) -> int:
    labels = [entry.split("|")[0] for entry in module.configs(head_dim, "float16")]
    assert label in labels, (label, labels)
    return labels.index(label)


def _inputs(problem: Problem, std: float, seed: int):
    q, k, v = (t * std for t in make_inputs(problem, check.shape_seed(seed, problem), device="cuda"))
    return q, k, v


def _assert_o_matches_float64(problem, q, k, v, o, scale):
    """O against the float64 reference, under the tolerance `lab check` uses."""
    ref = check.reference_attention(q, k, v, problem.causal, scale, device=check._reference_device(problem, q.device))
    tolerance = check._tolerance(problem, q, k, v, ref, scale)
    errors = check.compare(o, ref)
    assert errors["nonfinite"] == 0 and check.judge(errors, tolerance, "max_abs_err"), (errors, tolerance)


def _assert_lse_matches_float64(q, k, lse, causal, scale):
    """The row log-sum-exp against float64 (v8's backward reads it: a tight bound)."""
    nq, nk = q.shape[-2], k.shape[-2]
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(nq, nk, dtype=torch.bool, device=s.device).tril(), float("-inf"))
    ref = torch.logsumexp(s, dim=-1)
    err = (lse.double() - ref).abs().max().item()
    assert torch.isfinite(lse).all() and err <= 4e-5 * max(1.0, ref.abs().max().item()), err


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_v9_matches_float64(v9, case):
    b, h, nq, nk, d, causal, dtype, std = case
    problem = Problem(b, h, nq, nk, d, causal, dtype)
    scale = softmax_scale(problem)
    q, k, v = _inputs(problem, std, 28)
    o = torch.full_like(q, float("nan"))
    v9.forward(q, k, v, o, causal, scale)
    torch.cuda.synchronize()
    _assert_o_matches_float64(problem, q, k, v, o, scale)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", LSE_CASES, ids=_ids)
def test_v9_writes_the_row_log_sum_exp(v9, case):
    b, h, nq, nk, d, causal, dtype, std = case
    problem = Problem(b, h, nq, nk, d, causal, dtype)
    scale = softmax_scale(problem)
    q, k, v = _inputs(problem, std, 29)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, nq), float("nan"), device="cuda", dtype=torch.float32)
    v9.forward(q, k, v, o, causal, scale, lse)
    torch.cuda.synchronize()
    _assert_lse_matches_float64(q, k, lse, causal, scale)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("label,case", CANDIDATE_CASES, ids=[f"{lb}-{_ids(c)}" for lb, c in CANDIDATE_CASES])
def test_v9_step4_candidate_matches_float64(v9_tuning, label, case):
    """Both instantiations: without the LSE (the one timed) and with it (the one v8's backward reads; step 17's
    row sums by the tensor cores are only in the first)."""
    b, h, nq, nk, d, causal, dtype, std = case
    problem = Problem(b, h, nq, nk, d, causal, dtype)
    scale = softmax_scale(problem)
    q, k, v = _inputs(problem, std, 28)
    index = _candidate_index(v9_tuning, label, d)
    for lse in (None, torch.full((b, h, nq), float("nan"), device="cuda", dtype=torch.float32)):
        o = torch.full_like(q, float("nan"))
        v9_tuning.forward_config(q, k, v, o, causal, scale, index, lse)
        torch.cuda.synchronize()
        _assert_o_matches_float64(problem, q, k, v, o, scale)
        if lse is not None:
            _assert_lse_matches_float64(q, k, lse, causal, scale)


# The dynamic walk's runs: two candidates on shapes of each head dim, and the plain default where it walks dynamically
# (step 19 (c)-(d): the D=64 causal ping-pong with Nq, Nk in [1024, 2048)): (label or None for the default, shapes).
_WALKS = [(D64_CAUSAL_CANDIDATES[3], [(3, 40, 700, 700, 64, True, "float16"), (2, 17, 1000, 777, 64, True, "bfloat16"),
                                      (1, 33, 300, 300, 64, True, "float16")]),
          (D128_CAUSAL_CANDIDATES[0], [(3, 40, 700, 700, 128, True, "float16"), (2, 17, 1000, 777, 128, True, "bfloat16"),
                                       (1, 33, 300, 300, 128, True, "float16")]),
          # the default's two walking kernels share a stream's counters: the ping-pong below 2048, one warpgroup above
          (None, [(3, 40, 1100, 1100, 64, True, "float16"), (1, 9, 2100, 2050, 64, True, "bfloat16"),
                  (2, 17, 1500, 1030, 64, True, "bfloat16"), (1, 33, 1024, 1024, 64, True, "float16")])]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("label,shapes", _WALKS, ids=[label or "default" for label, _ in _WALKS])
def test_v9_longest_first_walk_leaves_its_counters_zero(v9, request, label, shapes, tmp_path):
    """Step 19 (b): the dynamic walk takes its tile counter from the lab's zeroed counters (common.cuh; one set a
    stream) and its last CTA returns them to zero, with no memset a call. Calls of different shapes back to back on one
    stream (each would skip tiles, its output left NaN, if the one before left the counter above zero), one on another
    stream, and two captured graphs (each call its own counters from the lab's capture slab, step 19 (d)) replayed in
    turn, three times each: every output matches float64, and the graphs hold no memset node."""
    if label is None:
        def call(q, k, v, o, scale):
            v9.forward(q, k, v, o, True, scale, None)
    else:
        module = request.getfixturevalue("v9_tuning")
        index = _candidate_index(module, label, shapes[0][4])
        def call(q, k, v, o, scale):
            module.forward_config(q, k, v, o, True, scale, index, None)
    side = torch.cuda.Stream()
    for i, shape in enumerate(shapes * 2):
        problem = Problem(*shape)
        scale = softmax_scale(problem)
        q, k, v = _inputs(problem, 1.0, 40 + i)
        o = torch.full_like(q, float("nan"))
        stream = side if i == len(shapes) else torch.cuda.current_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call(q, k, v, o, scale)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        _assert_o_matches_float64(problem, q, k, v, o, scale)
    captured = []
    for i, shape in enumerate(shapes[:2]):
        problem = Problem(*shape)
        scale = softmax_scale(problem)
        q, k, v = _inputs(problem, 1.0, 50 + i)
        o = torch.full_like(q, float("nan"))
        try:  # keep_graph (torch >= 2.8): the captured graph is kept for its dot file below
            graph, kept = torch.cuda.CUDAGraph(keep_graph=True), True
        except TypeError:
            graph, kept = torch.cuda.CUDAGraph(), False
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call(q, k, v, o, scale)   # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            call(q, k, v, o, scale)
        dot = tmp_path / f"graph{i}.dot"
        if kept:
            # The call took counters of its own: the graph has its kernel and no memset node (the workspace's fallback).
            graph.debug_dump(str(dot))
            text = dot.read_text()
            assert "fwd_kernel_dynamic" in text and "MEMSET" not in text.upper(), text[:2000]
            graph.instantiate()
        captured.append((graph, problem, q, k, v, o, scale))
    for _ in range(3):
        for graph, problem, q, k, v, o, scale in captured:
            o.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            _assert_o_matches_float64(problem, q, k, v, o, scale)


@pytest.mark.gpu
@needs_hopper
def test_v9_refuses_unsupported_input(v9):
    q = torch.randn(1, 1, 8, 32, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="head_dim"):
        v9.forward(q, q, q, torch.empty_like(q), False, 32 ** -0.5)
    q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(RuntimeError, match="float16 and bfloat16"):
        v9.forward(q, q, q, torch.empty_like(q), False, 0.125)


SANITIZER_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from lab.ladder import build
    from lab.ladder import registry as variants
    from lab.measure.problem import Problem, make_inputs, softmax_scale

    # Several tiles per CTA in every launch (the ring and Q reused across tiles), ragged edges,
    # Nq > Nk causal (D=128 and D=64: a D=64 causal launch for step 5's three-consumer candidates,
    # whose warpgroups skip key tiles), long keys beside short queries (one consumer warpgroup), the
    # three-consumer default (non-causal Nq, Nk >= 2048: a ragged last block with warpgroups past nq),
    # O by TMA at D=64 and under D=128's ping-pong, the LSE store, and D=128 non-causal from 8192 (176-key tiles, O
    # staged over the tile's last V stage, step 14: 47 full key tiles and a ragged one on 65 tiles), and the
    # three-consumer default without the LSE (step 17 (b): P V reads the ones tile after the V stages), and the causal
    # ping-pong on the dynamic walk with the lab's zeroed counters (step 19 (c)), and the one-warpgroup one (step 21).
    # (The grid: 264 CTAs at D=64, 132 at D=128 and for the three consumers, on an H100 or H200.)
    # (problem, with the LSE)
    shapes = [(Problem(1, 70, 200, 300, 128, True, "float16"), False),
              (Problem(1, 140, 130, 300, 64, False, "bfloat16"), True),
              (Problem(1, 133, 65, 8192, 64, False, "float16"), False),
              (Problem(2, 70, 400, 250, 64, True, "float16"), True),
              (Problem(2, 80, 130, 90, 128, True, "float16"), True),
              (Problem(1, 140, 200, 300, 128, False, "bfloat16"), True),
              (Problem(1, 24, 2200, 2100, 64, False, "bfloat16"), True),
              (Problem(1, 1, 8200, 8300, 128, False, "float16"), True),
              (Problem(1, 24, 2100, 2200, 64, False, "float16"), False),
              (Problem(1, 6, 1100, 1040, 64, True, "bfloat16"), True),
              (Problem(1, 4, 2100, 2050, 64, True, "float16"), True)]
    # argv: the rung, then optionally a tuning candidate's label and head dim (its shapes only) and
    # "non-causal" (a candidate that refuses causal problems: the non-causal shapes only).
    variant = variants.get(sys.argv[1])
    if len(sys.argv) > 2:
        module = build.build(variant, allow_compile=False, tuning=True).module
        head_dim = int(sys.argv[3])
        index = [e.split("|")[0] for e in module.configs(head_dim, "float16")].index(sys.argv[2])
        run = lambda q, k, v, o, causal, scale, lse: module.forward_config(q, k, v, o, causal, scale, index, lse)
        shapes = [s for s in shapes if s[0].head_dim == head_dim and not (sys.argv[4:] == ["non-causal"] and s[0].causal)
                  and not (sys.argv[4:] == ["causal"] and not s[0].causal)]
    else:
        module = build.load_cached(variant)
        run = module.forward
    for i, (p, with_lse) in enumerate(shapes):
        q, k, v = make_inputs(p, seed=i)
        o = torch.full_like(q, float("nan"))
        lse = torch.empty(p.batch, p.heads, p.seqlen_q, device=q.device, dtype=torch.float32) if with_lse else None
        run(q, k, v, o, p.causal, softmax_scale(p), lse)
        torch.cuda.synchronize()
        assert torch.isfinite(o).all(), p.label()
    print(f"sanitized launches: {len(shapes)}")
""")


def _sanitize(tool: str, tmp_path: Path, *extra: str) -> str:
    sanitizer = shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path(shutil.which("nvcc") or "/nonexistent").resolve().parent / "compute-sanitizer",
                          Path("/usr/local/cuda/bin/compute-sanitizer")) if p.is_file()), None)
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (it ships with the CUDA toolkit)")
    script = tmp_path / "sanitize_v9.py"
    script.write_text(SANITIZER_SCRIPT)
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    res = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script), registry.ref(RUNG),
                          *extra], capture_output=True, text=True, cwd=REPO, env=env, timeout=420)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors", out), out[-4000:]
    assert not re.search(r"ERROR SUMMARY: [1-9]", out), out[-4000:]
    return out


SANITIZERS = ["memcheck", pytest.param("racecheck", marks=pytest.mark.slow), pytest.param("synccheck", marks=pytest.mark.slow)]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("tool", SANITIZERS)
def test_v9_compute_sanitizer_is_clean(tool, v9, tmp_path):
    assert "sanitized launches: 11" in _sanitize(tool, tmp_path)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("label,head_dim,launches,masks", [(lb, 64, 7, "both") for lb in D64_CANDIDATES] +
                         [(lb, 64, 4, "non-causal") for lb in D64_NON_CAUSAL_CANDIDATES] +
                         [(lb, 64, 3, "causal") for lb in D64_CAUSAL_CANDIDATES] +
                         [(lb, 128, 2, "non-causal") for lb in D128_NON_CAUSAL_CANDIDATES] +
                         [(lb, 128, 2, "causal") for lb in D128_CAUSAL_CANDIDATES])
@pytest.mark.parametrize("tool", SANITIZERS)
def test_v9_step4_candidate_is_sanitizer_clean(tool, label, head_dim, launches, masks, v9_tuning, tmp_path):
    """The launches of the sanitizer script at the candidate's head dim (several tiles per CTA, ragged,
    causal Nq > Nk, the LSE) through the candidate; racecheck sees the O buffer's shared-memory
    hand-off where it has one, and the two Q buffers' reuse (step 6 (b))."""
    extra = [masks] if masks != "both" else []
    assert f"sanitized launches: {launches}" in _sanitize(tool, tmp_path, label, str(head_dim), *extra)


def test_v9_is_found():
    """The rung these tests check is in the built-in ladder: without it every GPU test above would
    skip as if there were no Hopper GPU."""
    assert RUNG is not None and RUNG.kind == "cuda" and RUNG.origin == "built-in" and RUNG.head_dims == (64, 128)

"""v9's default is its tuning candidates' machine code: every kernel of the plain build (what `lab
bench`, `lab sweep`, `lab check` and the GPU tests run) is in the tuning build (what `lab tune` gates
and times), instruction for instruction, so a default taken from `lab tune`'s table runs the kernel
that was timed, not a look-alike (kernels/v9_wgmma_fa3.cu: the default launches the candidates'
own Config types). Both builds without spills. Needs nvcc (cuobjdump and nvdisasm beside it for the
SASS half), no GPU. Its GPU side: `lab tune --variant v9` shows the default level with its candidate.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import platformdirs
import pytest

from lab.ladder import build
from lab.ladder.registry import builtin

# The persistent Hopper forward, found by what it declares (as tests/test_v9_gpu.py finds it).
V9 = next((v for v in builtin() if v.kind == "cuda" and v.min_cc >= (9, 0) and v.grid == "flat"), None)
# Step 4's and step 5's kernels (kernels/v9_wgmma_fa3.cu), by the demangled head of their names, each in its 16
# instantiations (fp16/bf16 x causal or not x LSE or not x GQA or not): how many the tuning build has,
# how many the plain build. (b) was the default from step 4: on PingPong128 at D = 128 and on
# Default64 at D = 64 (but Nq, Nk >= 2048 non-causal), so the plain build no longer launches
# the register epilogues they replace ("(step-3 default)" at each head dim, in the tuning build only);
# (a) and (b) on (a) stay candidates. Step 5's (three consumers at D = 64 with O by TMA, both masks,
# and the same computing each warpgroup's own key tiles) are candidates only; step 5 (b), three
# consumers computing their own key tiles with O from the accumulators (8 kernels: non-causal only), is
# a candidate; Long64 itself is the non-causal default from Nq, Nk >= 2048 (step 5 (c)). Step 6's are
# candidates: (a) the same own-tiles with a warp-uniform key-tile count (8 kernels: non-causal only), (b)
# two Q buffers on the D = 128 and the D = 64 defaults (16 each); step 6 (c) makes (b) the D = 128 default
# and D = 64's non-causal one below 2048 (8 of its 16), so O by TMA without it stays D = 64's causal default
# (8 of 16) and D = 128's only as a candidate. Step 7's are candidates: 64-key tiles at D = 64 (two stages and
# four, 16 each), two Q buffers on three consumers (8: non-causal only). Step 8's: ping-pong at D = 64 with O by
# TMA, and with two Q buffers (16 each). Step 9's: the next tile's S_0 under the epilogue on the two D = 64
# defaults (16 each). Step 11's: the last key tile's softmax and P V at half width on the two D = 64 defaults
# and the D = 128 default (16 each); step 11 (b) makes the first D = 64's causal default below 8192 (8 of its 16),
# so O by TMA on Default64 without it is a candidate only. Step 12's: the row max as a tree, the mask against a
# per-row limit and both, on D = 64's causal default (8 each: causal only), the tree on D = 64's non-causal
# default below 2048 (8: non-causal only), the tree and both on the D = 128 default (16 each); both on D = 64's
# causal default are that default below 8192 since step 12 (its 8 kernels in the plain build). Step 13's: 176-key
# tiles at D = 128 with ping-pong (8: non-causal only); (c), D = 64's causal default with two Q buffers, one
# warpgroup and in ping-pong (8 each: causal only).
CANDIDATE_KERNELS = {
    "(a) BM = 64 at D = 128": ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::Config<128, 64, 2, false, 1>,", 16, 0),
    "(b) O by TMA on (a)": ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 64,", 16, 0),
    "(b) O by TMA on PingPong128, the default of steps 4-5":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 16, 0),
    "(b) O by TMA on Default64, the D = 64 causal default of steps 4-11":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 0),
    "the step-3 default, O from the accumulators": ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::Config<128, 128, 2, true, 2>,", 32, 0),
    "the D = 64 step-3 default, O from the accumulators":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::Config<64, 128, 2, false, 1>,", 32, 0),
    "three consumers at D = 64, the non-causal default from Nq, Nk >= 2048, the causal one from 8192 (step 10)":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::Config<64, 128, 2, false, 3>,", 24, 16),
    "step 5 (b): three consumers at D = 64 computing their own key tiles, O from the accumulators":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::OwnKeyTiles<lab_hopper_fwd::Config<64, 128, 2, false, 3>", 8, 0),
    "step 5: O by TMA on three consumers at D = 64":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 3>", 16, 0),
    "step 5: the same, each warpgroup its own key tiles":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::OwnKeyTiles<lab_hopper_fwd::Config<64, 128, 2, false, 3>", 16, 0),
    "step 6 (a): own key tiles, the count warp-uniform, O from the accumulators":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::OwnKeyTilesUniform<lab_hopper_fwd::Config<64, 128, 2, false, 3>", 8, 0),
    "step 6 (b): two Q buffers on PingPong128 by TMA, the D = 128 default since step 6 (c)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 16, 16),
    "step 6 (b): two Q buffers on Default64 by TMA, the D = 64 non-causal default below 2048 since step 6 (c)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 8),
    "step 7: 64-key tiles at D = 64 by TMA, two and four stages":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 64,", 32, 0),
    "step 7 (c): two Q buffers on three consumers at D = 64 (non-causal only)":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::Config<64, 128, 2, false, 3>", 8, 0),
    "step 8: ping-pong at D = 64 by TMA":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, true, 2>", 16, 0),
    "step 8: the same with two Q buffers":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, true, 2>", 16, 0),
    "step 9: the next tile's S_0 under the epilogue, on the D = 64 causal default":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::NextS0UnderEpilogue<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 0),
    "step 9: the same on the D = 64 non-causal default below 2048 (two Q buffers)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::NextS0UnderEpilogue<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 0),
    "step 11: the last key tile's softmax and P V at half width on Default64 by TMA, the D = 64 causal default below 8192 in step 11 (b)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 0),
    "step 11: the same on the D = 64 non-causal default below 2048":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 0),
    "step 11: the same on the D = 128 default":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 16, 0),
    "step 12: the row max as a tree on the D = 64 causal default (causal only)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 0),
    "step 12: the mask against a per-row limit on the same (causal only)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 0),
    "step 12: both on the same (causal only), the D = 64 causal default below 8192 since step 12":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 8),
    "step 12: the row max as a tree on the D = 64 non-causal default below 2048 (non-causal only)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 0),
    "step 12: the row max as a tree on the D = 128 default":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 16, 0),
    "step 13: 176-key tiles at D = 128 with ping-pong, O from the accumulators (non-causal only)":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::Config<128, 176, 2, true, 2>,", 8, 0),
    "step 13 (c): the D = 64 causal default's changes with two Q buffers (causal only)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 0),
    "step 13 (c): the same in ping-pong (BM = 128, causal only)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, true, 2>", 8, 0),
    "step 12: both on the D = 128 default":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 16, 0),
}


def _functions(sass: str) -> dict[str, str]:
    """cuobjdump -sass text -> {mangled function name: its instructions, up to the function's end}, each line's
    runs of blanks made one: cuobjdump pads the encoding column to the file's longest instruction, so a longer
    instruction in one build (m64n176's HGMMA, step 13) shifts every line of the other's functions."""
    parts = re.split(r"\n\s+Function : (\S+)", sass)
    return {name: re.sub(r"[ \t]+", " ", body.split("\n\t\t....")[0]) for name, body in zip(parts[1::2], parts[2::2])}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: compiling v9's two builds needs it")
def test_v9s_default_kernels_are_tuning_candidates_kernels(monkeypatch):
    assert V9 is not None, "no built-in rung declares a flat (persistent) grid on sm_90"
    root = Path(platformdirs.user_cache_dir("flash-lab", appauthor=False)) / "tests"
    root.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("LAB_CACHE", str(root))
    plain = build.ptxas_report(V9, "sm_90a")
    tuning = build.ptxas_report(V9, "sm_90a", tuning=True)
    for report in (plain, tuning):
        spilled = [(r.kernel[:100], r.spill_stores_bytes, r.spill_loads_bytes) for r in report.records
                   if r.spill_stores_bytes or r.spill_loads_bytes]
        assert not spilled, spilled
    defaults = {r.kernel for r in plain.records}
    candidates = {r.kernel for r in tuning.records}
    assert defaults and len(candidates) > len(defaults)
    assert defaults <= candidates, sorted(k[:120] for k in defaults - candidates)
    if not any(k.startswith("_Z") for k in candidates):  # demangled (lab.demangle found a demangler)
        for what, (head, in_tuning, in_plain) in CANDIDATE_KERNELS.items():
            assert (sum(head in k for k in candidates), sum(head in k for k in defaults)) == (in_tuning, in_plain), what
    if plain.sass_path is None or tuning.sass_path is None:
        pytest.skip("cuobjdump (or its nvdisasm) not found beside nvcc: the SASS half of this check needs it")
    a, b = _functions(plain.sass_path.read_text()), _functions(tuning.sass_path.read_text())
    assert len(a) == len(defaults), sorted(a)
    differ = [name for name in a if a[name] != b.get(name)]
    assert not differ, differ

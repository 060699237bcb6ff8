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
# The tuning build's kernels (kernels/v9_wgmma_fa3.cu's table since step 13 retired the candidates that lost),
# by the demangled head of their names, each in its 16 instantiations (fp16/bf16 x causal or not x LSE or not x
# GQA or not; 8 for a candidate of one mask): how many the tuning build has, how many the plain build. Together
# they are the whole tuning build, so a candidate added to the table without its line here fails.
CANDIDATE_KERNELS = {
    "three consumers at D = 64, the non-causal default from Nq, Nk >= 2048 (step 5 (c)) until step 17 (b), the causal one from 8192 (step 10) until step 19":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::Config<64, 128, 2, false, 3>,", 16, 0),
    "step 6 (b): two Q buffers on PingPong128 by TMA, the D = 128 default from step 6 (c) to step 23":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 16, 0),
    "step 6 (b): two Q buffers on Default64 by TMA, the D = 64 non-causal default below 2048 from step 6 (c) to step 23":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 0),
    "step 7: 64-key tiles at D = 64 by TMA, two stages":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 64,", 16, 0),
    "step 7 (c): two Q buffers on three consumers at D = 64 (non-causal only)":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::Config<64, 128, 2, false, 3>", 8, 0),
    "steps 11 (b) and 12 on Default64 by TMA (causal only), the D = 64 causal default in [2048, 8192) since step 18 (on the static walk where Nq or Nk < 1024 since step 21)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 8),
    "step 13: 176-key tiles at D = 128 with ping-pong, O from the accumulators (non-causal only)":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::Config<128, 176, 2, true, 2>,", 8, 0),
    "step 14: the same with O by TMA through the tile's last V stage (non-causal only), the D = 128 non-causal default from 8192":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::OInLastV<lab_hopper_fwd::Config<128, 176, 2, true, 2>", 8, 8),
    "step 13 (c): the D = 64 causal default's changes with two Q buffers (causal only)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 0),
    "step 13 (c): the same in ping-pong (BM = 128, causal only), the D = 64 causal default below 2048 from step 18 (static walk below 1024 from step 19 (c)) to step 23":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, true, 2>", 8, 0),
    "step 17: P's row sums by the tensor cores on three consumers (non-causal only; its LSE instantiation sums in fp32), the D = 64 non-causal default from 2048 since step 17 (b)":
        ("lab_hopper_fwd::fwd_kernel<lab_hopper_fwd::RowSumByMma<lab_hopper_fwd::Config<64, 128, 2, false, 3>", 8, 8),
    "step 19: the D = 64 causal ping-pong on the dynamic, longest-first walk (causal only), the D = 64 causal default in [1024, 2048) from step 19 (c) to step 22":
        ("lab_hopper_fwd::fwd_kernel_dynamic<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, true, 2>", 8, 0),
    "step 19: the D = 64 causal one-warpgroup kernel on the dynamic walk (causal only), the D = 64 causal default in [2048, 8192) for step 19 (c) and from step 21 to step 22":
        ("lab_hopper_fwd::fwd_kernel_dynamic<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 0),
    "step 22: the walking ping-pong with the tile handed to the consumers, the D = 64 causal default in [1024, 2048) until step 23, in [1024, 2560) since":
        ("lab_hopper_fwd::fwd_kernel_dynamic<lab_hopper_fwd::HandsTile<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, true, 2>", 8, 8),
    "step 22: the walking one-warpgroup kernel with the tile handed to the consumers, the D = 64 causal default in [2048, 8192) until step 23, in [2560, 8192) since":
        ("lab_hopper_fwd::fwd_kernel_dynamic<lab_hopper_fwd::HandsTile<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 8, 8),
    "step 19: three consumers at D = 64 on the dynamic walk (causal only), the D = 64 causal default from 8192 since step 19":
        ("lab_hopper_fwd::fwd_kernel_dynamic<lab_hopper_fwd::Config<64, 128, 2, false, 3>,", 8, 8),
    "step 23: two Q buffers on Default64 by TMA with the tile handed to the consumers, on the static walk, the D = 64 non-causal default below 2048":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::HandsTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, false, 1>", 16, 8),
    "step 23: the D = 64 causal ping-pong with the tile handed to the consumers, on the static walk (causal only), the D = 64 causal default below 1024":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::HandsTile<lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<64, 128, 2, true, 2>", 8, 8),
    "step 23: PingPong128 by TMA with two Q buffers and the tile handed to the consumers, on the static walk, the D = 128 default (non-causal below 8192)":
        ("lab_hopper_fwd::fwd_kernel_o_tma<lab_hopper_fwd::HandsTile<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 16, 16),
    "step 19: the D = 128 default's kernel on the dynamic walk (causal only)":
        ("lab_hopper_fwd::fwd_kernel_dynamic<lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<lab_hopper_fwd::Config<128, 128, 2, true, 2>", 8, 0),
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
        assert sum(in_tuning for _, in_tuning, _ in CANDIDATE_KERNELS.values()) == len(candidates)
    if plain.sass_path is None or tuning.sass_path is None:
        pytest.skip("cuobjdump (or its nvdisasm) not found beside nvcc: the SASS half of this check needs it")
    a, b = _functions(plain.sass_path.read_text()), _functions(tuning.sass_path.read_text())
    assert len(a) == len(defaults), sorted(a)
    differ = [name for name in a if a[name] != b.get(name)]
    assert not differ, differ

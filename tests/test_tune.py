"""`lab tune`: the tuning contract of kernels/common.cuh, and the command on a GPU.

CPU (needs nvcc, skipped without it): every rung whose file has a tuning block compiles with
-DLAB_TUNING and exports the two symbols the tuning binding links against.
GPU (`-m gpu`): `lab tune` checks and times every candidate of each tunable rung on a ragged shape.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from lab.ladder import build, registry

TUNABLE = [v for v in registry.variants()
           if getattr(v, "kind", "cuda") == "cuda" and "LAB_TUNING" in v.source.read_text()]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) on PATH")


def test_a_candidate_is_checked_on_its_own_head_dim_and_dtype():
    """A candidate is one configuration compiled for one head_dim: checking it on the seeded shapes
    of another head_dim would launch another list's index (measured: v5's D=64 candidate 4 'failed'
    on a D=128 shape, where only four candidates exist)."""
    from lab.measure.check import gate_shapes
    from lab.measure.problem import Problem

    variant = next(v for v in TUNABLE if len(v.head_dims) > 1)
    problem = Problem(1, 2, 130, 130, variant.head_dims[-1], True, variant.dtypes[-1])
    pinned = gate_shapes(variant, problem, 12, pin_to_problem=True)
    assert pinned[0] == problem and len(pinned) == 13
    assert {(p.head_dim, p.dtype) for p in pinned} == {(problem.head_dim, problem.dtype)}
    assert len({p.seqlen_q for p in pinned}) > 3       # still ragged
    unpinned = gate_shapes(variant, problem, 12)
    assert len({p.head_dim for p in unpinned}) > 1     # the rung's own check spans its head dims


def test_some_rung_is_tunable():
    assert TUNABLE, "no rung declares tuning candidates: `lab tune` would have nothing to do"


@needs_nvcc
@pytest.mark.parametrize("variant", TUNABLE, ids=lambda v: v.id)
def test_the_tuning_build_exports_the_contract(variant, tmp_path, monkeypatch):
    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils) to list the object's symbols")
    report = build.ptxas_report(variant, "sm_90a", tuning=True)
    assert build.TUNING_DEFINE in report.flags
    obj = next(report.build_dir.glob("*.o"))
    symbols = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    for name in (f"{variant.launcher}_configs", f"{variant.launcher}_config", variant.launcher):
        assert f" T {name}\n" in symbols, f"{variant.source.name} does not export {name} under -DLAB_TUNING"
    plain_flags, plain_key = build._key_for(variant, "sm_90a")
    assert build.TUNING_DEFINE not in plain_flags and plain_key != report.cache_key  # its own cached build


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("variant", TUNABLE, ids=lambda v: v.id)
def test_lab_tune_checks_and_times_every_candidate(variant):
    d = 64 if 64 in variant.head_dims else variant.head_dims[0]
    res = subprocess.run([sys.executable, "-m", "lab.cli", "tune", "--variant", variant.id, "--shape", f"1,2,130,{d}",
                          "--causal", "--reps", "3", "--check-shapes", "1", "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["rows"][0]["label"] == "default" and len(out["rows"]) >= 2
    assert all(r["passed"] and r["timing"]["reps"] == 3 for r in out["rows"]), out["rows"]
    assert out["fastest"] in {r["label"] for r in out["rows"]}


def test_a_rung_without_candidates_is_refused_before_any_work():
    """No tuning block: exit 2 with the contract to follow, not a tuning build that cannot link."""
    plain = next((v for v in registry.variants() if v not in TUNABLE), None)
    if plain is None:
        pytest.skip("every rung declares tuning candidates")
    res = subprocess.run([sys.executable, "-m", "lab.cli", "tune", "--variant", plain.id], capture_output=True, text=True)
    assert res.returncode == 2 and "declares no tuning candidates" in res.stderr and "Traceback" not in res.stderr

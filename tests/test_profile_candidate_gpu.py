"""`lab profile --candidate LABEL` on a Hopper GPU, through the commands a user types: one small v9
candidate whose kernel is another instantiation than the default's (64-key tiles, "C1 BN64 S2 persistent
tma-o", where the D=64 causal default runs 128-key tiles), profiled with --no-baselines beside the
default's run of the same problem. The stored manifest names the candidate, the run ids differ, the
build is the tuning build, ncu's report holds the candidate's kernel (its demangled name is not the
default's), and `lab compare` and the run's page say which run is the candidate.

The CPU side (label resolution, the check cache, the child's argv, the manifest, pages, readers):
tests/test_profile_candidate.py. Run: `python3 -m pytest -q -m gpu tests/test_profile_candidate_gpu.py`
(the first run compiles v9's tuning build: minutes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lab.ladder.registry import builtin  # noqa: E402
from lab.ladder.tuning import source_declared  # noqa: E402
from lab.store.runs import Run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IS_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not IS_HOPPER, reason="v9 needs compute capability 9.0 (sm_90a: wgmma, TMA)")]

# the persistent Hopper forward, found by what it declares (tests name rungs through the registry)
V9 = next((v for v in builtin() if v.min_cc >= (9, 0) and v.grid == "flat"), None)
LABEL = "C1 BN64 S2 persistent tma-o"     # Config<64, 64, ...>: the default here is Config<64, 128, ...>
PROBLEM = ["--shape", "1,2,256,64", "--causal", "--dtype", "float16"]


@pytest.fixture
def lab(tmp_path):
    def run(*args):
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, LAB_WORKSPACE="none", LAB_PROFILES=str(tmp_path / "store"))
        return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                              env=env)
    return run


def _main_kernel(run: Run) -> str:
    index, _ = run.main_kernel()
    cols = run.columns("metrics", ["kernel_index", "kernel"])
    return next(k for i, k in zip(cols["kernel_index"], cols["kernel"]) if i == index)


def test_a_v9_candidate_is_profiled_as_a_run_of_its_own(lab, tmp_path):
    labels = [d.label for d in source_declared(V9, 64, "float16")]
    index = labels.index(LABEL)
    common = ["--variant", V9.id, *PROBLEM, "--set", "lab-minimal", "--no-baselines", "--reps", "10"]
    res = lab("profile", *common, "--candidate", LABEL)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"candidate {index} of {V9.id}'s tuning build: {LABEL!r}" in res.stderr
    res = lab("profile", *common)
    assert res.returncode == 0, res.stderr[-3000:]

    runs = {r.name: Run(r) for r in (tmp_path / "store").iterdir() if not r.name.startswith(".")}
    cand = next(r for name, r in runs.items() if name.endswith(f"-cand{index}"))
    default = next(r for name, r in runs.items() if not re.search(r"-cand\d+$", name))
    assert cand.id != default.id and cand.id.removesuffix(f"-cand{index}").split("-", 2)[2] == default.id.split("-", 2)[2]
    assert cand.manifest["candidate"]["label"] == LABEL and cand.manifest["candidate"]["index"] == index
    assert "candidate" not in default.manifest
    assert cand.manifest["variant"]["id"] == default.manifest["variant"]["id"] == V9.id
    assert "-DLAB_TUNING" in cand.manifest["build"]["flags"] and "-DLAB_TUNING" not in default.manifest["build"]["flags"]
    assert cand.manifest["build"]["cache_key"] != default.manifest["build"]["cache_key"]
    assert cand.manifest["correctness"]["passed"] is True and cand.manifest["timing"]["median"] > 0
    command = cand.manifest["profile"]["command"]
    assert command[command.index("--tune-config") + 1] == str(index)
    assert cand.manifest["profile"]["nvtx_range"] == default.manifest["profile"]["nvtx_range"]

    # ncu profiled the candidate's kernel: another instantiation than the default's
    ours, theirs = _main_kernel(cand), _main_kernel(default)
    assert ours != theirs, ours
    assert re.search(r"Config<(\(int\))?64, (\(int\))?64,", ours), ours
    assert re.search(r"Config<(\(int\))?64, (\(int\))?128,", theirs), theirs

    # `lab compare` and the page say which run is the candidate
    res = lab("compare", default.id, cand.id, "--json")
    assert res.returncode in (0, 1), res.stderr[-2000:]
    compared = json.loads(res.stdout)
    assert compared["b"]["candidate"]["label"] == LABEL and compared["a"]["candidate"] is None
    res = lab("report", "--run", cand.id, "--out", str(tmp_path / "reports"))
    assert res.returncode == 0, res.stderr[-2000:]
    page = (tmp_path / "reports" / f"{cand.id}.html").read_text()
    assert f"candidate &ldquo;{LABEL}&rdquo;" in page and f"compare-{default.id}-{cand.id}.html" in page

"""tools/slurm_sweep.sbatch (one shard per task of a job array) and tools/slurm_merge.sbatch (the
follow-up job), run as Slurm runs them (its variables set here by hand) with the sweep tests' CPU
measurer: the shards join into the table the unsharded sweep makes, and a merge of shards that are
missing, doubled or of another plan is refused (exit 2) with nothing written."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, lab_here
from sweep_fakes import FAKE, PROGRAM
from lab.store import sweeps as store

TOOLS = REPO / "tools"
OPTIONS = ["--shape", "1,2,{64,128,256},64", "--mode", "fwd,bwd"]
LAB = " ".join(PROGRAM)   # `lab` with the sweep tests' CPU measurer injected (tests/sweep_fakes.py)


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), LAB=LAB)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def task(i: int, n: int, job: str, root, *options, **env):
    """Task i of the array job `job` (--array=1-n), with `options` for lab sweep (default OPTIONS)."""
    slurm = dict(SLURM_ARRAY_TASK_ID=i, SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_COUNT=n,
                 SLURM_ARRAY_TASK_MIN=1, SLURM_ARRAY_TASK_MAX=n, LAB_PROFILES=root)
    slurm.update(env)
    return subprocess.run(["bash", str(TOOLS / "slurm_sweep.sbatch"), *(options or OPTIONS)], env=_env(**slurm),
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def merge(job: str, root):
    return subprocess.run(["bash", str(TOOLS / "slurm_merge.sbatch"), job], env=_env(LAB_PROFILES=root),
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_scripts_parse():
    for script in ("slurm_sweep.sbatch", "slurm_merge.sbatch"):
        res = subprocess.run(["bash", "-n", str(TOOLS / script)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def array(tmp_path_factory) -> dict[int, Path]:
    """Array job 4242 (--array=1-3, OPTIONS) run once for the module: {task: its stored shard's folder}.
    Each test merges copies of the shards it needs in a store of its own (a task that never ran is a
    shard left out), beside any shard it measures itself."""
    root = tmp_path_factory.mktemp("array") / "store"
    for i in (1, 2, 3):
        r = task(i, 3, "4242", root)
        assert r.returncode == 0, r.stderr
    return {s.plan_dict["shard"][0]: s.path for s in store.list_sweeps(root)}


def shards(array, tasks, root: Path) -> Path:
    """A store at `root` holding copies of the array's shards of `tasks`."""
    for i in tasks:
        shutil.copytree(array[i], root / array[i].name)
    return root


def test_an_array_and_its_merge_make_the_unsharded_table(array, tmp_path):
    root = shards(array, (1, 2, 3), tmp_path / "store")
    r = merge("4242", root)
    assert r.returncode == 0, r.stderr
    merged = [s for s in store.list_sweeps(root) if s.manifest.get("merged_from")]
    assert len(merged) == 1 and merged[0].manifest["status"] == "complete"
    assert sorted(merged[0].manifest["merged_from"]) == sorted(
        s.id for s in store.list_sweeps(root) if s.plan_dict.get("shard"))
    # the same options unsharded, in this process with the same measurer
    whole = lab_here("sweep", *OPTIONS, "--name", "lab-4242", env={"LAB_PROFILES": str(tmp_path / "whole")}, obj=FAKE)
    assert whole.returncode == 0, whole.stderr
    (one,) = store.list_sweeps(tmp_path / "whole")
    assert one.manifest["plan_key"] == merged[0].manifest["plan_key"]
    key = ["impl", "label", "mode", "timing"]
    a = merged[0].table().sort_values(key)[key + ["status", "median_ms"]].reset_index(drop=True)
    b = one.table().sort_values(key)[key + ["status", "median_ms"]].reset_index(drop=True)
    assert len(a) > 0 and a.equals(b)


def _refused(root, job, needle):
    before = sorted(p.name for p in root.iterdir())
    r = merge(job, root)
    assert r.returncode == 2 and needle in r.stderr, r.stdout + r.stderr
    assert sorted(p.name for p in root.iterdir()) == before   # nothing written


def test_a_missing_shard_is_refused(array, tmp_path):
    _refused(shards(array, (1, 3), tmp_path), "4242", "shard 2/3 missing")


def test_a_shard_measured_twice_is_refused(array, tmp_path):
    root = shards(array, (1, 2, 3), tmp_path)
    assert task(1, 3, "4242", root).returncode == 0
    _refused(root, "4242", "shard 1/3 is given twice")


def test_shards_of_different_plans_are_refused(array, tmp_path):
    root = shards(array, (1, 3), tmp_path)
    other = ["--shape", "1,2,{64,128,512},64"]
    assert task(2, 3, "4242", root, *other).returncode == 0
    _refused(root, "4242", "different sweeps")


def test_no_shard_of_that_job_is_refused(tmp_path):
    r = merge("10", tmp_path)
    assert r.returncode == 2 and "no stored shard of a sweep named 'lab-10'" in r.stderr


@pytest.mark.parametrize("env, options, needle", [
    ({"SLURM_ARRAY_TASK_MIN": 0}, None, "--array=1-N"),            # --shard counts from 1
    ({"SLURM_ARRAY_TASK_ID": ""}, None, "not a task of a job array"),
    ({}, OPTIONS + ["--shard", "1/2"], "set by this script"),       # the script owns --shard and --name
])
def test_the_array_script_refuses_what_would_break_the_merge(tmp_path, env, options, needle):
    r = task(1, 2, "11", tmp_path, *(options or []), **env)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_sweep_that_is_not_a_shard_is_refused(array, tmp_path):
    env = {"LAB_PROFILES": str(shards(array, (1,), tmp_path))}
    assert lab_here("sweep", *OPTIONS, "--name", "lab-4242", env=env, obj=FAKE).returncode == 0
    ids = [s.id for s in store.list_sweeps(tmp_path)]
    r = lab_here("sweep", "merge", *ids, env=env, obj=FAKE)
    assert r.returncode == 2 and "is not a shard" in r.stderr, r.stderr

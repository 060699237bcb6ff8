"""The multi-GPU sweep's parts on the CPU: the shared float64 gates (one check per rung, dtype and
mode across processes, taken over from a dead claimer) and benchmarks/sweep_scaling.py run on the
sweep tests' fake measurer (tests/sweep_fakes.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

from conftest import REPO
from lab.measure.problem import Problem
from lab.sweeping import Gates

P = Problem(1, 2, 64, 64, 64, False, "float16")
RUNG = SimpleNamespace(id="r1")


def test_shared_gates_check_once_and_take_over_from_a_dead_claimer(tmp_path):
    calls = []

    def check(variant, problem, mode):
        calls.append((variant.id, problem.label(), mode))
        return {"passed": True, "by": len(calls)}

    key = Gates.key("r1", "float16", "fwd")
    first, second = Gates(check, {key: P}, tmp_path), Gates(check, {key: P}, tmp_path)
    other = Problem(1, 2, 128, 128, 64, False, "float16")
    assert first.verdict(RUNG, other, "fwd") == {"passed": True, "by": 1}   # checked on the plan's problem
    assert second.verdict(RUNG, other, "fwd") == {"passed": True, "by": 1}  # read, not checked again
    assert calls == [("r1", P.label(), "fwd")] and first.checked == [key] and second.checked == []
    # a claim whose process is gone (a worker killed mid-check) is taken over
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    key2 = Gates.key("r1", "float16", "bwd")
    third = Gates(check, {key2: P}, tmp_path)
    claim = third._files(key2)[1]
    claim.write_text(str(dead.pid))
    assert third.verdict(RUNG, P, "bwd")["passed"] and third.checked == [key2]
    # prefetch checks the gates nobody claimed, once
    key3 = Gates.key("r1", "bfloat16", "fwd")
    fourth = Gates(check, {key3: Problem(1, 2, 64, 64, 64, False, "bfloat16")}, tmp_path)
    import lab.sweeping as sweeping

    real_get = sweeping.registry.get
    sweeping.registry.get = lambda rid: SimpleNamespace(id=rid)
    try:
        fourth.prefetch()
        Gates(check, dict(fourth.problems), tmp_path).prefetch()
    finally:
        sweeping.registry.get = real_get
    assert [c for c in calls if "bfloat16" in c[1]] == [("r1", "B1-H2-N64-D64-bfloat16", "fwd")]
    assert fourth.checked == [key3]


def test_the_scaling_benchmark_holds_n_gpus_against_one(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "benchmarks/sweep_scaling.py", "--lab", f"{sys.executable} -m tests.sweep_fakes",
                        "--counts", "1,2", "--again", "--out", str(tmp_path), "--", "--shape", "1,2,{64,128},64", "--baselines",
                        "sdpa-flash", "--timing", "events"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert "| 2 |" in r.stdout and "| 1 |" in r.stdout, r.stdout + r.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    two = result["counts"]["2"]
    assert two["compare"]["changed"] == 0 and two["compare"]["rows_compared"] == 2 and two["cells"] == 2
    assert two["wall_s"] > 0 and len(two["workers"]) == 2
    # each table's rows were timed in 2 passes (lab sweep's default): the drift between them is counted
    assert two["compare"]["pass_spread_b"]["rows_in_passes"] == 2 and two["compare"]["pass_spread_b"]["passes_apart"] == 0
    assert "- 2 GPUs: 0 of 2 rows had passes more than 3% apart" in r.stdout
    # --again: the one-GPU sweep run twice, its own disagreement printed as a reference row, judging nothing
    again = result["counts"]["1-again"]
    assert "| 1 again |" in r.stdout and again["compare"]["rows_compared"] == 2 and again["speedup"] is None
    # the fake's two "GPUs" share this machine's cores: the 1.8x target is missed, and said so (exit 1)
    assert (r.returncode == 1) == (two["speedup"] < 1.8)


def test_a_gate_check_that_raises_is_a_failed_verdict_every_worker_reads(tmp_path):
    def check(variant, problem, mode):
        raise RuntimeError("the checking child could not start")

    key = Gates.key("r1", "float16", "fwd")
    first, second = Gates(check, {key: P}, tmp_path), Gates(check, {key: P}, tmp_path)
    found = first.verdict(RUNG, P, "fwd")
    assert found == {"passed": False, "error": "RuntimeError: the checking child could not start"}
    assert second.verdict(RUNG, P, "fwd") == found and second.checked == []   # read, no wait, no second check



def test_the_one_gpu_sweep_of_an_earlier_call_is_the_reference_and_reuse_runs_nothing(tmp_path):
    """`--counts 1` (as one worker), then `--counts 2 --reuse-one` in a second call (as on a GPU machine whose call
    cannot take both): the one-GPU sweep and wall time are read back although --counts does not name
    1 (at e3bf36b they were not: no speed-up, no comparison, exit 1). `--reuse` then prints the same
    table from the stores alone, running nothing (a --lab that cannot run proves it)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    sweep = ["--", "--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash", "--timing", "events"]

    def scaling(*args, lab=f"{sys.executable} -m tests.sweep_fakes"):
        return subprocess.run([sys.executable, "benchmarks/sweep_scaling.py", "--lab", lab, "--out", str(tmp_path), *args,
                               *sweep], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    first = scaling("--counts", "1")
    assert first.returncode == 0 and "| 1 |" in first.stdout, first.stdout + first.stderr
    # the one-GPU sweep is measured by one pinned worker (--gpus 0), as every multi-GPU one is
    assert [w["part"] for w in json.loads((tmp_path / "result.json").read_text())["counts"]["1"]["workers"]] == ["gpu0-1"]
    second = scaling("--counts", "2", "--reuse-one")
    one_wall = json.loads((tmp_path / "wall-1.json").read_text())["wall_s"]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["counts"]["1"]["wall_s"] == one_wall, second.stdout + second.stderr
    two = result["counts"]["2"]
    assert two["speedup"] == round(one_wall / two["wall_s"], 2) and two["compare"]["rows_compared"] == 2
    assert f"| 1 | {one_wall} | 1.00x |" in second.stdout and f"| {two['speedup']:.2f}x |" in second.stdout
    sweeps_before = sorted(p.name for p in tmp_path.glob("gpus-*/*"))
    third = scaling("--counts", "2", "--reuse", lab="/nonexistent/lab")
    assert third.returncode == second.returncode, third.stdout + third.stderr
    assert sorted(p.name for p in tmp_path.glob("gpus-*/*")) == sweeps_before
    table = [line for line in second.stdout.splitlines() if line.startswith("| ")]
    assert [line for line in third.stdout.splitlines() if line.startswith("| ")] == table


def test_in_process_is_measured_between_the_workers_two_one_gpu_runs_and_held_against_the_first(tmp_path):
    """--in-process --again: the one-GPU sweep by a pinned worker, then in the lab's own process, then by
    the worker again (a difference of the path told from a drift in time), each held against the first
    and printed as a reference row that judges nothing. --reuse reads back each sweep's own options
    (its plan's command) for the header, and refuses other options given after --."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               LAB_TEST_ORDER=str(tmp_path / "order.txt"))
    sweep = ["--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash", "--timing", "events"]

    def scaling(*args, lab=f"{sys.executable} -m tests.sweep_fakes"):
        return subprocess.run([sys.executable, "benchmarks/sweep_scaling.py", "--lab", lab, "--out", str(tmp_path / "out"),
                               *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    r = scaling("--counts", "1", "--in-process", "--again", "--", *sweep)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert list(result["counts"]) == ["1", "1-in-process", "1-again"]   # run in this order
    here, again = result["counts"]["1-in-process"], result["counts"]["1-again"]
    assert here["workers"] == [] and [w["part"] for w in again["workers"]] == ["gpu0-1"]
    assert here["compare"]["rows_compared"] == 2 and here["compare"]["changed"] == 0 and here["speedup"] is None
    # the measurer's calls by part, in the order they ran: the worker's, the lab's own process's, the worker's
    parts = [line.split("|")[0] for line in (tmp_path / "order.txt").read_text().splitlines()]
    assert [p for i, p in enumerate(parts) if i == 0 or parts[i - 1] != p] == ["gpu0-1", "main", "gpu0-1"]
    table = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0] for line in table[2:]] == ["| 1", "| 1 in-process", "| 1 again"]
    assert "- 1 in-process: 0 of 2 rows had passes" in r.stdout and "- 1 GPU, worker gpu0-1" in r.stdout
    reused = scaling("--counts", "1", "--in-process", "--again", "--reuse", lab="/nonexistent/lab")
    assert reused.returncode == 0 and f"lab sweep {' '.join(sweep)} on Fake GPU" in reused.stdout, reused.stderr
    assert [line for line in reused.stdout.splitlines() if line.startswith("| ")] == table
    other = scaling("--counts", "1", "--reuse", "--", "--shape", "1,2,64,64", lab="/nonexistent/lab")
    assert other.returncode == 2 and "--reuse reads what was measured" in other.stderr and not other.stdout


def test_reuse_reads_the_shipped_diagnostic_as_measured(tmp_path):
    """The eighth session's stores (four H200s, shipped): --reuse prints the comparisons RESULTS.md quotes,
    with the sweep's own options read from the command its plan recorded (no wall times: they are not in a
    store, so no speed-up either)."""
    import shutil

    shipped = REPO / "profiles" / "examples"
    for count, sweep_id in (("1", "20261127-092141-sweep-scale-1"), ("4", "20261127-092338-sweep-scale-4"),
                            ("1-again", "20261127-092418-sweep-scale-1-again")):
        shutil.copytree(shipped / sweep_id, tmp_path / f"gpus-{count}" / sweep_id)
    r = subprocess.run([sys.executable, "benchmarks/sweep_scaling.py", "--counts", "1,4", "--again", "--reuse",
                        "--out", str(tmp_path), "--lab", "/nonexistent/lab"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr   # no wall time: the 4-GPU speed-up is not there to meet its target
    assert r.stdout.startswith("lab sweep --variant v6,v7 --preset fa-grid --mode fwd --dtype float16,bfloat16 "
                               "--baselines sdpa-cudnn,sdpa-flash on NVIDIA H200, 2026-11-27, commit fc683a489235")
    assert ("| 4 | - | - | 192 | 4 | 0 of 78 unheld graph (launch included), 4 of 192 call latency (events) "
            "| 2 (1 problem moved) | 25 | 1.000 | 0.983-1.010, 0.984-1.012, 0.977-1.014 |") in r.stdout
    # the repeat's changed rows: 36 of 87 moved with their problem (lab sweep compare's problem_moves), 12 problems;
    # 38 of its 78 graph rows, timed before the held start (the replay's launch in them), changed
    assert ("| 1 again | - | - | 192 | 87 | 38 of 78 unheld graph (launch included), 49 of 192 call latency (events) "
            "| 36 (12 problems moved) | 48 | 1.019 | - |") in r.stdout
    assert "- 1 again: 38 of 270 rows had passes more than 3% apart (the widest 25.1%)" in r.stdout

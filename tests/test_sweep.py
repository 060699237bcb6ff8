"""lab sweep without a GPU: plans, bad input, the store (journal, Ctrl-C, resume), shards and merge,
one worker per "GPU" (a worker killed mid-sweep), export and the page. Cells are measured by
tests/sweep_fakes.py (deterministic rows); the real measurer's GPU test is tests/test_sweep_gpu.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from lab.errors import LabError
from lab.measure import sweepplan
from lab.store import sweeps as store
from lab.ladder.registry import builtin  # rungs by what they declare, not by id
from conftest import REPO  # noqa: E402

F16 = next(v.id for v in builtin() if "float16" in v.dtypes and v.min_cc <= (8, 0))   # mma.sync rung
F32 = next(v.id for v in builtin() if v.dtypes == ("float32",) and v.grid == "q-tiles,bh")

from sweep_fakes import FAKE, PROGRAM  # noqa: E402  the measurer every `lab` below is handed


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def lab(*args, env=None, root=None, process=False):
    """`lab ARGS` with the fake measurer injected (lab.sweeping.Measuring): in this process as the
    click context object (fast), or in a child process (tests/sweep_fakes.py run as `lab`) where the
    test kills it."""
    e = {"LAB_PROFILES": str(root)} if root is not None else {}
    e.update(env or {})
    if process:
        full = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **e)
        r = subprocess.run([*PROGRAM, *args], capture_output=True, text=True, env=full, cwd=REPO,
                           timeout=300)
        return Result(r.returncode, r.stdout, r.stderr)
    from click.testing import CliRunner

    from lab.cli import main

    r = CliRunner().invoke(main, list(args), env=e, obj=FAKE, catch_exceptions=False)
    return Result(r.exit_code, r.stdout, r.stderr)


def plan(**kw):
    args = dict(rungs={}, baselines=["sdpa-flash", "standard"], shapes=[], preset=None, batches=None, heads_kv=None,
                causal=None, dtypes=[], modes=["fwd"], timing="auto", reps=30, warmup=5, cell_budget_s=0.4,
                shard=None, yes=False)
    args.update(kw)
    return sweepplan.build_plan(**args)


# ------------------------------------------------------------------------------ plans

def test_shape_lists_ranges_gqa_and_batch_expand():
    assert sweepplan.expand_shape("8,16,{512,1024,2048},64") == [(8, 16, 16, n, n, 64) for n in (512, 1024, 2048)]
    assert [s[3] for s in sweepplan.expand_shape("1,1,512..4096,64")] == [512, 1024, 2048, 4096]
    assert sweepplan.expand_shape("2,32:8,128,256,128") == [(2, 32, 8, 128, 256, 128)]
    assert [s[0] for s in sweepplan.expand_shape("_,16,1024,64", batches=[1, 2, 4])] == [1, 2, 4]
    p = plan(shapes=["2,{8,4}:2,{64,96},64"], causal="both")
    assert len(p.problems) == 8 and all(x.heads_kv == 2 for x in p.problems)
    assert {x.causal for x in p.problems} == {False, True}


def test_fa_grid_preset_is_16k_tokens_hidden_2048():
    p = plan(preset="fa-grid", rungs={F16: ["float16", "bfloat16"]}, modes=["fwd", "fwd+bwd"])
    assert len(p.problems) == 24 and len(p.problems) * len(p.modes) == 48
    for x in p.problems:
        assert x.batch * x.seqlen_q == 16384 and x.heads * x.head_dim == 2048 and x.dtype == "float16"
    assert sorted({x.seqlen_q for x in p.problems}) == [512, 1024, 2048, 4096, 8192, 16384]
    assert {x.head_dim for x in p.problems} == {64, 128} and {x.causal for x in p.problems} == {False, True}


@pytest.mark.parametrize("kw, words", [
    (dict(shapes=["8,16,{},64"]), "empty"),
    (dict(shapes=["8,16,4096..512,64"]), "empty"),
    (dict(shapes=["8,16,1024,64"], batches=[1, 2]), "fixes it"),
    (dict(shapes=["_,16,1024,64"]), "--batch"),
    (dict(shapes=["1..128,{1,2,4,8},1..65536,{32,64,128}"]), "--yes"),
    (dict(shapes=["8,16,1024,64"], modes=["sideways"]), "unknown mode"),
    (dict(shapes=["8,6:4,1024,64"]), "divide"),
    (dict(shapes=["8,16,1024,64"], rungs={F32: ["float32"]}, dtypes=["float16"]), f"{F32} runs float32"),
    (dict(shapes=["8,16,1024,64"], rungs={}, baselines=[]), "nothing to sweep"),
])
def test_bad_plans_are_refused(kw, words):
    with pytest.raises(LabError, match=words):
        plan(**kw)


def test_shard_parsing_and_interleaving():
    assert sweepplan.parse_shard("2/4") == (2, 4)
    for bad in ("3/2", "0/2", "x", "1/0"):
        with pytest.raises(LabError):
            sweepplan.parse_shard(bad)
    p = plan(shapes=["1,1,{64,128,256,512,1024},64"])
    parts = [p.problems_for_shard((i, 2)) for i in (1, 2)]
    assert [x.seqlen_q for x in parts[0]] == [64, 256, 1024] and [x.seqlen_q for x in parts[1]] == [128, 512]
    assert p.key() == plan(shapes=["1,1,{64,128,256,512,1024},64"], shard=(2, 2)).key()


def test_mode_flops_follow_flashattention_convention():
    from lab.measure import rates

    p = plan(shapes=["1,2,128,64"], causal="yes").problems[0]
    assert p.forward_flops == 4 * 1 * 2 * 128 * 128 * 64 / 2   # causal: half
    assert rates.flops(p, "fwd") == p.forward_flops
    assert rates.flops(p, "bwd") == 2.5 * p.forward_flops and rates.flops(p, "fwd+bwd") == 3.5 * p.forward_flops


# ------------------------------------------------------------------------------ the command

def test_cli_bad_input_exits_2_and_stores_nothing(tmp_path):
    for args in (["--shape", "8,16,{},64"], ["--batch", "1,2", "--shape", "8,16,1024,64"], ["--shard", "3/2", "--preset", "fa-grid"],
                 ["--preset", "nope"], ["--shape", "8,16,1024,64", "--mode", "back"], ["--variant", "no_such_rung", "--preset", "fa-grid"]):
        r = lab("sweep", *args, root=tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.strip().startswith("error:")
    assert not any(tmp_path.iterdir())


def test_sweep_stores_one_tidy_table_with_reasons_and_ratios(tmp_path):
    r = lab("sweep", "--variant", F16, "--preset", "fa-grid", "--mode", "fwd,fwd+bwd", root=tmp_path)
    assert r.returncode == 0, r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    assert sw.manifest["status"] == "complete" and sw.manifest["cells_planned"] == 24 * 6 * 2
    df = sw.table()
    for col in ("median_ms", "mean_ms", "std_ms", "ci95_low_ms", "ci95_high_ms", "min_ms", "max_ms", "reps", "tflops",
                "pct_of_peak", "tokens_per_s", "peak_memory_bytes", "status", "reason", "vs_sdpa_flash", "vs_standard"):
        assert col in df.columns
    no_bwd = df[(df.impl == F16) & (df["mode"] == "fwd+bwd")]
    assert len(no_bwd) == 24 and set(no_bwd.status) == {"unsupported"} and no_bwd.reason.str.contains("backward").all()
    assert (df[df.impl == "standard"].status == "oom").any()
    ok = df[(df.impl == "sdpa-flash") & (df.status == "ok")]
    assert (ok.vs_sdpa_flash.round(9) == 1.0).all()
    small = df[(df.impl == F16) & (df.seqlen_q == 512) & (df["mode"] == "fwd")]
    assert set(small.timing) == {"events", "graph"}   # timing auto: both methods at small shapes
    assert not (sw.path / "journal-main.jsonl").exists()


def test_ctrl_c_keeps_finished_rows_and_resume_finishes(tmp_path):
    # a problem's 10 cells (5 baselines, 2 modes) take 20 calls in 2 passes: Ctrl-C at the 25th is in the
    # second problem's first pass; the first problem's rows stay, the second's partial passes do not
    args = ["sweep", "--shape", "2,4,{64,128,256},64", "--mode", "fwd,bwd"]
    r = lab(*args, env={"LAB_TEST_INTERRUPT": "25"}, root=tmp_path)
    assert r.returncode == 130 and "--resume" in r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    assert sw.manifest["status"] == "interrupted" and sw.manifest["cells_done"] == 10
    assert len(sw.missing_cells()) == sw.manifest["cells_planned"] - 10
    assert {r["passes"] for r in sw.rows()} == {2}
    r = lab("sweep", "--resume", sw.id, root=tmp_path)
    assert r.returncode == 0, r.stderr
    sw = store.find_sweep(sw.id, tmp_path)
    assert sw.manifest["status"] == "complete" and not sw.missing_cells()
    assert len(sw.table()) == len({(x["impl"], x["label"], x["mode"], x["timing"]) for x in sw.rows()})


def test_a_killed_process_leaves_its_journal_and_resume_reads_it(tmp_path):
    # killed in the second problem's second pass (5 cells a problem, 10 calls in 2 passes): the first
    # problem's rows are in the journal, none of the second's (its unit's rows are written after its last pass)
    r = lab("sweep", "--shape", "1,2,{64,128},64", env={"LAB_TEST_DIE": "main:17"},
            root=tmp_path, process=True)
    assert r.returncode < 0   # SIGKILL: no chance to fold the journal
    (sw,) = store.list_sweeps(tmp_path)
    assert sw.manifest["status"] == "running" and len(sw.done_cells()) == 5
    assert {r["label"] for r in sw.rows()} == {sweepplan.Plan.from_dict(sw.plan_dict).problems[0].label()}
    assert lab("sweep", "--resume", sw.id, root=tmp_path).returncode == 0
    assert store.find_sweep(sw.id, tmp_path).manifest["status"] == "complete"


def test_a_killed_worker_leaves_its_rows_the_others_take_its_share_and_resume_finishes_on_the_gpus_left(tmp_path):
    # worker 1 is slow, so worker 2 surely takes units; it is killed at its sixth call: its second unit's
    # (2 cells, 2 passes: 4 calls a unit) second cell of the first pass
    args = ["sweep", "--shape", "1,2,{64,128,256,512},64", "--baselines", "sdpa-flash,standard", "--gpus", "0,1"]
    r = lab(*args, env={"LAB_TEST_DIE": "gpu1-2:6", "LAB_TEST_SLOW": "gpu0-1:0.3",
                        "LAB_TEST_BARRIER": f"{tmp_path / 'barrier'}:2"}, root=tmp_path)
    assert r.returncode == 1
    assert "worker 2/2 on GPU 1 (1) died (killed by SIGKILL) after 2 cells; 2 cells of its unit in flight" in r.stderr
    assert "left for --resume" in r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    # the dead worker's finished unit stays; the units it had not taken were measured by worker 1
    assert sw.manifest["status"] == "incomplete" and sw.manifest["cells_done"] == 8 - 2
    by_worker = {}
    for row in sw.rows():
        by_worker.setdefault(row["worker"], set()).add((row["impl"], row["label"], row["mode"]))
    assert len(by_worker["gpu1-2"]) == 2 and len(by_worker["gpu0-1"]) == 4
    assert (sw.path / ".worker-2.log").is_file()   # the dead worker's log stays beside its rows
    r = lab("sweep", "--resume", sw.id, "--gpus", "0", root=tmp_path)   # the GPU left
    assert r.returncode == 0, r.stderr
    sw = store.find_sweep(sw.id, tmp_path)
    assert sw.manifest["status"] == "complete" and sw.manifest["cells_done"] == 8
    assert not [p for p in sw.path.iterdir() if p.name.startswith((".deal", ".gates", ".worker-"))]


def test_units_are_problems_dealt_largest_first():
    from lab.sweeping import deal

    p = plan(shapes=["1,2,{64,128,256,512},64"], causal="both", modes=["fwd", "bwd"])
    units = deal(p.cells(), p.cell_budget_s)
    assert len(units) == len(p.problems)
    for u in units:   # every implementation and mode of one problem together: its ratios side by side
        assert len({c.problem for c in u}) == 1 and len(u) == len(p.implementations) * len(p.modes)
    work = [u[0].problem.forward_flops for u in units]
    assert work == sorted(work, reverse=True) and units[0][0].problem.seqlen_q == 512
    assert not units[0][0].problem.causal   # the same N causal does half the work: dealt after


def test_workers_take_units_dynamically(tmp_path):
    # a slow "GPU" takes fewer problems than a fast one: no fixed share per worker
    args = ["sweep", "--shape", "1,2,{64,128,256,512,1024,2048},64", "--baselines", "sdpa-flash", "--gpus", "0,1"]
    r = lab(*args, env={"LAB_TEST_SLOW": "gpu0-1:0.5", "LAB_TEST_BARRIER": f"{tmp_path / 'barrier'}:2"}, root=tmp_path)
    assert r.returncode == 0, r.stderr
    (sw,) = store.list_sweeps(tmp_path)
    units = {w["part"]: w["units"] for w in sw.manifest["workers"]}
    assert sorted(units["gpu0-1"] + units["gpu1-2"]) == list(range(6))
    assert len(units["gpu1-2"]) > len(units["gpu0-1"]) >= 1, units
    for w in sw.manifest["workers"]:   # each worker's account of its time
        assert {"start", "init", "wait_for_builds", "gates", "measure", "total"} <= set(w["times_s"]), w
        assert w["exit"] == 0 and w["cells"] == len(w["units"])


def test_n_workers_give_the_table_of_one_and_each_row_names_its_gpu(tmp_path):
    base = ["sweep", "--variant", F16, "--shape", "1,2,{64,128,256},64", "--causal", "both",
            "--baselines", "sdpa-flash,standard", "--mode", "fwd,bwd"]
    gates_one, gates_three = tmp_path / "gates-one.txt", tmp_path / "gates-three.txt"
    assert lab(*base, env={"LAB_TEST_GATES": str(gates_one)}, root=tmp_path / "one").returncode == 0
    r = lab(*base, "--gpus", "0,1,2", env={"LAB_TEST_GATES": str(gates_three), "LAB_TEST_GPU_CLOCKS": "0:1980,1:1755,2:1410",
                                             "LAB_TEST_SLOW": "*:0.05", "LAB_TEST_BARRIER": f"{tmp_path / 'barrier'}:3"},
            root=tmp_path / "three")
    assert r.returncode == 0, r.stderr
    one, three = store.list_sweeps(tmp_path / "one")[0], store.list_sweeps(tmp_path / "three")[0]
    key = ["impl", "label", "mode", "timing"]
    a = one.table().sort_values(key)[key + ["status", "median_ms"]].reset_index(drop=True)
    b = three.table().sort_values(key)[key + ["status", "median_ms"]].reset_index(drop=True)
    assert len(a) and a.equals(b)
    # the rung's float64 gate: once per dtype and mode for the whole sweep, on the plan's first problem,
    # the same with three workers as with one (not once per worker)
    once, thrice = gates_one.read_text().splitlines(), gates_three.read_text().splitlines()
    strip = lambda lines: sorted(x.rsplit("|", 1)[0] for x in lines)   # noqa: E731 - without the pid
    assert strip(once) == strip(thrice) and len(thrice) == len(set(strip(thrice)))
    assert strip(thrice) == [f"{F16}|float16|fwd|{sweepplan.Plan.from_dict(one.plan_dict).problems[0].label()}"]
    # every row: which GPU, pinned how, its clocks then; the rows of one problem on one GPU
    df = three.table()
    clocks = {"0": 1980, "1": 1755, "2": 1410}
    for row in df.to_dict("records"):
        assert row["gpu_uuid"] == f"GPU-fake-{row['gpu']}" and row["cuda_visible_devices"] == row["gpu"]
        assert row["worker"].startswith(f"gpu{row['gpu']}-") and row["sm_clock_mhz"] == clocks[row["gpu"]]
        assert row["power_limit_w"] == 700.0 and row["gpu_name"] == "Fake GPU (tests)"
        assert row["gpu_probe_source"] == "nvml"   # the probe's every field reaches the table
    assert (df.groupby("label").gpu_uuid.nunique() == 1).all()
    assert df.gpu_uuid.nunique() >= 2
    assert set(one.table().gpu_uuid) == {"GPU-fake-0"} and one.table().gpu.isna().all()


def test_one_gpu_is_one_pinned_worker_unless_in_process_is_asked():
    """Where a sweep is measured (lab.sweeping.measured_by): --gpus as given; without it, on a GPU, one
    worker on device 0, the code path of every multi-GPU table; --in-process, or a measurer on no GPU
    (the simulated device), in the lab's own process; both --gpus and --in-process: bad input."""
    from dataclasses import replace

    from lab.sweeping import measured_by

    on_gpu = replace(FAKE, on_gpu=True)
    assert measured_by(None, False, on_gpu) == ["0"]
    assert measured_by(["2", "3"], False, on_gpu) == ["2", "3"] and measured_by(["1"], False, FAKE) == ["1"]
    assert measured_by(None, True, on_gpu) is None and measured_by(None, True, FAKE) is None
    assert measured_by(None, False, FAKE) is None   # the simulated device has no GPU to pin a worker to
    with pytest.raises(LabError, match="--in-process"):
        measured_by(["0"], True, on_gpu)


def test_lab_sweep_on_a_gpu_measures_by_one_worker_and_in_process_when_asked(tmp_path, monkeypatch):
    """`lab sweep` without --gpus on a GPU: one worker pinned to GPU 0 measures (the rows and the
    manifest's workers say so), the same table --in-process gives; --in-process with --gpus exits 2,
    nothing stored. The GPU's own acts (is there a GPU, which UUID pins device 0) are stood in for."""
    from dataclasses import replace

    from click.testing import CliRunner

    import lab.cli
    import lab.sweeping
    from lab.cli import main

    monkeypatch.setattr(lab.cli, "require_gpus", lambda command, gpus=None: None)
    monkeypatch.setattr(lab.sweeping, "_pins", lambda gpus, measuring: list(gpus))
    on_gpu = replace(FAKE, on_gpu=True)
    base = ["sweep", "--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash,standard"]   # no rung: nothing to build

    def run(root, *more):
        r = CliRunner().invoke(main, [*base, *more], env={"LAB_PROFILES": str(root)}, obj=on_gpu, catch_exceptions=False)
        return r.exit_code, r.stderr

    code, err = run(tmp_path / "worker")
    assert code == 0, err
    (worker,) = store.list_sweeps(tmp_path / "worker")
    assert [w["part"] for w in worker.manifest["workers"]] == ["gpu0-1"] and "worker gpu0-1" in err
    assert {r["worker"] for r in worker.rows()} == {"gpu0-1"} and {r["gpu"] for r in worker.rows()} == {"0"}
    code, err = run(tmp_path / "here", "--in-process")
    assert code == 0, err
    (here,) = store.list_sweeps(tmp_path / "here")
    assert not here.manifest.get("workers") and {r["worker"] for r in here.rows()} == {None}
    key = ["impl", "label", "mode", "timing"]
    a = worker.table().sort_values(key)[key + ["status", "median_ms"]].reset_index(drop=True)
    b = here.table().sort_values(key)[key + ["status", "median_ms"]].reset_index(drop=True)
    assert len(a) == 8 and a.equals(b)   # 2 problems x 2 implementations x events and graph
    code, err = run(tmp_path / "both", "--in-process", "--gpus", "0")
    assert code == 2 and err.startswith("error:") and "--in-process" in err and not (tmp_path / "both").exists()


def test_a_worker_refuses_to_resume_a_sweep_of_another_kind_of_gpu(tmp_path):
    """As the lab's own process does: ratios across devices are not ratios (--allow-mismatch to go on)."""
    args = ["sweep", "--shape", "1,2,{64,128,256},64", "--baselines", "sdpa-flash"]   # a cell a problem, 2 passes
    assert lab(*args, env={"LAB_TEST_INTERRUPT": "3"}, root=tmp_path).returncode == 130   # in the second problem
    (sw,) = store.list_sweeps(tmp_path)
    sw.update_manifest(device=dict(sw.manifest["device"], name="Other GPU"))
    r = lab("sweep", "--resume", sw.id, "--gpus", "0", root=tmp_path)
    assert r.returncode == 1 and "was measured on Other GPU; this is Fake GPU (tests)" in r.stderr, r.stderr
    assert len(store.find_sweep(sw.id, tmp_path).done_cells()) == 1   # nothing measured on the other kind
    r = lab("sweep", "--resume", sw.id, "--gpus", "0", "--allow-mismatch", root=tmp_path)
    assert r.returncode == 0, r.stderr


def test_shards_merge_into_the_unsharded_table(tmp_path):
    base = ["sweep", "--shape", "1,2,{64,128,256},64", "--mode", "fwd,bwd"]
    for i in (1, 2):
        assert lab(*base, "--shard", f"{i}/2", root=tmp_path).returncode == 0
    assert lab(*base, root=tmp_path / "whole").returncode == 0
    parts = store.list_sweeps(tmp_path)
    assert len(parts) == 2 and all(p.manifest["plan"]["shard"] for p in parts)
    r = lab("sweep", "merge", parts[0].id, parts[1].id, root=tmp_path)
    assert r.returncode == 0, r.stderr
    merged = [s for s in store.list_sweeps(tmp_path) if s.manifest.get("merged_from")][0]
    whole = store.list_sweeps(tmp_path / "whole")[0]
    key = ["impl", "label", "mode", "timing"]
    a = merged.table().sort_values(key)[key + ["median_ms"]].reset_index(drop=True)
    b = whole.table().sort_values(key)[key + ["median_ms"]].reset_index(drop=True)
    assert merged.manifest["status"] == "complete" and a.equals(b)


@pytest.fixture(scope="module")
def one_and_two_gpus(tmp_path_factory) -> tuple:
    """One plan swept on one "GPU" and on two (both take units: each cell slowed, each worker held at its
    first cell until both are there), in one store, run once for the module: (store, id on one, id on two).
    The compare tests read copies."""
    root = tmp_path_factory.mktemp("one-and-two-gpus")
    base = ["sweep", "--shape", "1,2,{64,128,256,512},64", "--baselines", "sdpa-flash", "--timing", "events"]
    assert lab(*base, root=root).returncode == 0                       # on GPU-fake-0
    r = lab(*base, "--gpus", "0,1", env={"LAB_TEST_SLOW": "*:0.2", "LAB_TEST_BARRIER": f"{root / '.barrier'}:2"},
            root=root)
    assert r.returncode == 0, r.stderr
    a, b = store.list_sweeps(root)
    return root, a.id, b.id


def _copies(one_and_two_gpus, tmp_path):
    root, a, b = one_and_two_gpus
    for sweep_id in (a, b):
        shutil.copytree(root / sweep_id, tmp_path / sweep_id)
    return store.find_sweep(a, tmp_path), store.find_sweep(b, tmp_path)


def test_compare_sweeps_by_ci95_overlap(one_and_two_gpus, tmp_path):
    a, b = _copies(one_and_two_gpus, tmp_path)
    r = lab("sweep", "compare", a.id, b.id, root=tmp_path)
    assert r.returncode == 0 and "0 differ" in r.stdout, r.stdout + r.stderr
    rows = b.rows()
    rows[0] = dict(rows[0], median_ms=rows[0]["median_ms"] * 2, ci95_low_ms=rows[0]["ci95_high_ms"] * 1.5,
                   ci95_high_ms=rows[0]["ci95_high_ms"] * 2)
    b.append_rows([rows[0]], "edit")
    r = lab("sweep", "compare", a.id, b.id, root=tmp_path)
    assert r.returncode == 1 and "1 differ" in r.stdout


def _narrow(sweep, scale):
    """The sweep's ok rows timed `scale` times slower with a CI95 of +-0.1%: beyond each other's CI95."""
    rows = [dict(r, median_ms=r["median_ms"] * scale, ci95_low_ms=r["median_ms"] * scale * 0.999,
                 ci95_high_ms=r["median_ms"] * scale * 1.001) for r in sweep.rows() if r["status"] == "ok"]
    sweep.append_rows(rows, "edit")


def test_compare_counts_a_change_only_beyond_ci95_and_the_practical_threshold(tmp_path):
    base = ["sweep", "--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash,standard"]
    assert lab(*base, root=tmp_path).returncode == 0
    assert lab(*base, root=tmp_path).returncode == 0
    a, b = store.list_sweeps(tmp_path)
    _narrow(a, 1.0)
    _narrow(b, 1.02)   # 2% slower everywhere, far outside the (narrow) CI95s: within the 3% default
    n = len([r for r in a.rows() if r["status"] == "ok"])
    r = lab("sweep", "compare", a.id, b.id, root=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"0 differ (beyond CI95 and 3%), {n} beyond CI95 within 3%" in r.stdout
    r = lab("sweep", "compare", a.id, b.id, "--threshold", "1.5", root=tmp_path)
    assert r.returncode == 1 and f"{n} differ (beyond CI95 and 1.5%)" in r.stdout
    r = lab("sweep", "compare", a.id, b.id, "--threshold", "-1", root=tmp_path)
    assert r.returncode == 2 and "--threshold must be >= 0" in r.stderr and "Traceback" not in r.stderr


def test_compare_reports_the_gpu_to_gpu_spread(one_and_two_gpus, tmp_path):
    a, b = _copies(one_and_two_gpus, tmp_path)
    on = {r["label"]: r["gpu_uuid"] for r in b.rows()}
    assert set(on.values()) == {"GPU-fake-0", "GPU-fake-1"}
    import json

    r = lab("sweep", "compare", a.id, b.id, "--json", root=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (spread,) = json.loads(r.stdout)["gpu_spread"]   # only the rows B measured on the other GPU
    assert (spread["gpu_a"], spread["gpu_b"]) == ("GPU-fake-0", "GPU-fake-1")
    assert spread["rows"] == sum(1 for g in on.values() if g == "GPU-fake-1")
    assert spread["median_ratio_b_over_a"] == pytest.approx(1.0)
    r = lab("sweep", "compare", a.id, b.id, root=tmp_path)
    assert "GPU to GPU, A on GPU-fake-0 vs B on GPU-fake-1" in r.stdout and "median B/A 1.000" in r.stdout


def test_merge_refuses_partials_of_different_sweeps(tmp_path):
    assert lab("sweep", "--shape", "1,2,64,64", "--shard", "1/1", root=tmp_path).returncode == 0
    assert lab("sweep", "--shape", "1,2,128,64", "--shard", "1/1", root=tmp_path).returncode == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    a, b = store.list_sweeps(tmp_path)
    r = lab("sweep", "merge", a.id, b.id, root=tmp_path)
    assert r.returncode == 2 and "different sweeps" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_merge_refuses_different_devices_unless_asked(tmp_path):
    base = ["sweep", "--shape", "1,2,{64,128},64"]
    for i in (1, 2):
        assert lab(*base, "--shard", f"{i}/2", root=tmp_path).returncode == 0
    a, b = store.list_sweeps(tmp_path)
    b.update_manifest(device=dict(b.manifest["device"], name="Other GPU"))
    r = lab("sweep", "merge", a.id, b.id, root=tmp_path)
    assert r.returncode == 2 and "different device" in r.stderr
    assert lab("sweep", "merge", a.id, b.id, "--allow-mismatch", root=tmp_path).returncode == 0


# ------------------------------------------------------------------------------ export and page

def test_export_csv_parquet_markdown_and_results_section(tmp_path):
    assert lab("sweep", "--batch", "1,2,4,8,16", "--shape", "_,16,1024,64", root=tmp_path).returncode == 0
    (sw,) = store.list_sweeps(tmp_path)
    out = tmp_path / "out"
    for fmt in ("csv", "parquet"):
        r = lab("export", sw.id, "--format", fmt, "--out", str(out), root=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (out / sw.id / f"rows.{fmt}").is_file()
    import pandas as pd

    assert len(pd.read_csv(out / sw.id / "rows.csv")) == len(sw.table())
    md = lab("export", sw.id, "--format", "markdown", root=tmp_path)
    assert md.returncode == 0 and "scaling eff." in md.stdout and "| 16 |" in md.stdout
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nhand-written text\n")
    assert lab("export", sw.id, "--format", "markdown", "--update", str(results), root=tmp_path).returncode == 0
    text = results.read_text()
    assert "hand-written text" in text and md.stdout.strip() in text
    r = lab("export", sw.id, "--format", "markdown", "--update", str(results), root=tmp_path)
    assert "already up to date" in r.stdout and results.read_text() == text


def test_sweep_pages_and_index(tmp_path):
    assert lab("sweep", "--variant", F16, "--preset", "fa-grid", "--mode", "fwd,fwd+bwd",
               root=tmp_path).returncode == 0
    assert lab("sweep", "--batch", "1,2,4", "--shape", "_,16,1024,64", root=tmp_path).returncode == 0
    out = tmp_path / "html"
    r = lab("report", "--out", str(out), root=tmp_path)
    assert r.returncode == 0, r.stderr
    index = (out / "index.html").read_text()
    for sw in store.list_sweeps(tmp_path):
        assert f'href="{sw.id}.html"' in index
        page = (out / f"{sw.id}.html").read_text()
        assert page.count("<svg") >= 4 and "2.5x forward" in page
    grid = next(s for s in store.list_sweeps(tmp_path) if "fa-grid" in s.id)
    page = (out / f"{grid.id}.html").read_text()
    assert "provides no backward launcher" in page and "first ran out of memory at N=" in page
    assert "Call latency vs device time" in page
    batch = next(s for s in store.list_sweeps(tmp_path) if "batch" in s.id)
    assert "batch-scaling efficiency" in (out / f"{batch.id}.html").read_text()


def test_resume_refuses_a_new_plan(tmp_path):
    r = lab("sweep", "--resume", "x", "--preset", "fa-grid", root=tmp_path)
    assert r.returncode == 2 and "drop --preset" in r.stderr


def test_runs_listing_ignores_sweeps(tmp_path):
    assert lab("sweep", "--shape", "1,2,64,64", root=tmp_path).returncode == 0
    from lab.store.runs import list_runs

    assert list_runs(tmp_path) == [] and len(store.list_sweeps(tmp_path)) == 1


def test_cell_budget_cuts_repetitions_of_slow_calls_only():
    from lab.measure.bench import budget_reps

    assert budget_reps(0.1, 30, 0.4) == 30          # 30 fast calls fit
    assert budget_reps(40.0, 30, 0.4) == 10
    assert budget_reps(90.0, 30, 0.4) == 5          # floor
    assert budget_reps(400.0, 30, 0.4) == 3         # a 0.4 s call: the slow floor
    assert budget_reps(400.0, 30, None) == 30       # no budget: as asked


def test_line_chart_breaks_at_missing_points_and_escapes_labels():
    from lab.report.charts import Series, line_svg

    svg = str(line_svg([Series("<std>", ((512, 1.0), (1024, 4.0), (2048, None), (4096, 64.0))),
                        Series("flash", ((512, 1.0), (1024, 2.0), (2048, 4.0), (4096, 8.0)), dashed=True)],
                       "N", "MiB", "memory"))
    assert svg.count("<polyline") == 2          # <std>: one run of two points, then a lone point; flash: one run
    assert "&lt;std&gt;" in svg and "<std>" not in svg
    assert 'stroke-dasharray' in svg and ">4,096<" in svg
    assert str(line_svg([Series("x", ((1, None),))], "N", "y", "t")) == ""


def test_memory_growth_exponents_on_the_page(tmp_path):
    from lab.report.sweeppage import memory_growth

    assert lab("sweep", "--shape", "1,16,{1024,2048,4096,8192},64", "--baselines", "sdpa-flash,standard", root=tmp_path).returncode == 0
    growth = {g["impl"]: g["exponent"] for g in memory_growth(store.list_sweeps(tmp_path)[0].rows())}
    assert abs(growth["standard"] - 2) < 0.01 and abs(growth["sdpa-flash"] - 1) < 0.01


def test_compare_of_sweeps_with_no_row_in_common_is_bad_input(tmp_path):
    """A backward sweep held against a forward+backward one shares no row: exit 2 naming what differs
    (the mode), not the regression code with a ratio of nan."""
    base = ["sweep", "--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash"]
    assert lab(*base, "--mode", "bwd", root=tmp_path).returncode == 0
    assert lab(*base, "--mode", "fwd+bwd", root=tmp_path).returncode == 0
    a, b = store.list_sweeps(tmp_path)
    for extra in ([], ["--json"]):
        r = lab("sweep", "compare", a.id, b.id, *extra, root=tmp_path)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "no measured row in common" in r.stderr and "mode bwd" in r.stderr and "fwd+bwd" in r.stderr
        assert "nan" not in r.stdout + r.stderr and "Traceback" not in r.stderr


def test_merge_by_name_twice_makes_one_merged_sweep(tmp_path):
    base = ["sweep", "--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash", "--name", "m"]
    for shard in ("1/2", "2/2"):
        assert lab(*base, "--shard", shard, root=tmp_path).returncode == 0
    assert lab("sweep", "merge", "--name", "m", root=tmp_path).returncode == 0
    (merged,) = [s for s in store.list_sweeps(tmp_path) if s.manifest.get("merged_from")]
    before = sorted(p.name for p in tmp_path.iterdir())
    r = lab("sweep", "merge", "--name", "m", root=tmp_path)
    assert r.returncode == 2 and f"already merged, into {merged.id}" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_copied_shard_folder_is_named_in_the_given_twice_error(tmp_path):
    import shutil

    base = ["sweep", "--shape", "1,2,{64,128},64", "--baselines", "sdpa-flash", "--name", "c"]
    for shard in ("1/2", "2/2"):
        assert lab(*base, "--shard", shard, root=tmp_path).returncode == 0
    first = next(s for s in store.list_sweeps(tmp_path) if s.plan_dict["shard"] == [1, 2])
    copy = tmp_path / "copy-of-shard-1"
    shutil.copytree(first.path, copy)
    r = lab("sweep", "merge", "--name", "c", root=tmp_path)
    assert r.returncode == 2 and "shard 1/2 is given twice" in r.stderr, r.stderr
    assert str(first.path) in r.stderr and str(copy) in r.stderr and "copy" in r.stderr


def test_the_sweep_page_contents_name_each_group_once_with_its_dtype(tmp_path):
    import re

    assert lab("sweep", "--shape", "1,2,{64,128},64", "--dtype", "float16,bfloat16", "--baselines", "sdpa-flash",
               "--mode", "bwd", "--timing", "events", root=tmp_path).returncode == 0
    out = tmp_path / "html"
    assert lab("report", "--out", str(out), root=tmp_path).returncode == 0
    (sw,) = store.list_sweeps(tmp_path)
    toc = re.search(r'<nav class="toc">(.*?)</nav>', (out / f"{sw.id}.html").read_text(), re.S).group(1)
    entries = re.findall(r'<a href="#g-[^"]*">([^<]*)</a>', toc)
    assert len(entries) == 2 and len(set(entries)) == 2, entries
    assert any("float16" in e for e in entries) and any("bfloat16" in e for e in entries)


def test_recorded_command_leaves_out_the_store_it_was_written_to():
    # the path is the measuring machine's (a GPU machine's scratch folder): meaningless where the record is shipped
    from lab.cli import _command_line

    typed = ["/venv/bin/lab", "sweep", "--variant", "mine", "--profiles", "/root/out/s", "--name", "a b",
             "--profiles=/x", "--preset", "fa-grid"]
    assert _command_line("sweep", typed) == "lab sweep --variant mine --name 'a b' --preset fa-grid"
    assert _command_line("sweep", ["python", "-c", "sweep"]) == ""

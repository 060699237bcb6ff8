"""The stored sweep, driven: a plan's missing cells measured (lab.measure.sweep) into a stored sweep
(lab.store.sweeps), here or by one worker process per GPU, then folded into its table.

It sits above both: the measuring knows no store, the store knows no measuring. A worker is
`python -m lab.sweeping --worker SWEEP_DIR --slice i/N --part NAME`.

How a cell is measured is a dependency, `Measuring`: the GPU measurer by default; a caller (a test
on a machine without a GPU) hands in its own, in-process through `execute` or `lab sweep`'s click
context object (`main(obj=Measuring(...))`), and to worker processes by the command that starts
one (`Measuring.worker`), so no option or variable of the lab exists for it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lab import __version__
from lab.console import say
from lab.environment import git_info
from lab.errors import LabError
from lab.ladder import build, registry
from lab.measure.isolated import child_env
from lab.measure.sweep import GpuMeasurer, Progress, environment_facts, status_row
from lab.measure import sweepplan
from lab.measure.baselines import SWEEP_BASELINES
from lab.measure.sweepplan import Cell, Plan, parse_shard
from lab.store.sweeps import Sweep, create_sweep, new_sweep_id


def _gpu_measurer(plan: Plan, log: Callable[[str], None], part: str):
    return GpuMeasurer(plan, log)


WORKER = (sys.executable, "-m", "lab.sweeping")


@dataclass(frozen=True)
class Measuring:
    """How a sweep's cells are measured. `make(plan, log, part)` returns the measurer (a callable
    cell -> rows, with `device` and `software` where it knows them; `part` names the journal it
    writes: "main", or a worker's); `worker` is the command that runs one worker process (it gets
    `--worker DIR --slice i/N --part NAME`); `on_gpu`: the cells run on a GPU, so the sweep needs one
    and builds each rung once before starting workers."""
    make: Callable = _gpu_measurer
    worker: tuple[str, ...] = WORKER
    on_gpu: bool = True


ON_GPU = Measuring()


def plan_from_specs(*, variant_spec, shapes, preset, batch_spec, heads_kv_spec, causal, dtype_spec, mode_spec,
                    timing, baseline_spec, no_baselines, reps, warmup, cell_budget_s, shard_spec, yes, command,
                    name) -> Plan:
    """`lab sweep`'s options, as typed, into its plan: the rungs from the registry (with the dtypes
    each accepts), the baselines, the shapes; bad input is refused (LabError) before anything runs."""
    chosen = registry.select(variant_spec) if variant_spec and variant_spec != "none" else []
    baselines = [] if no_baselines else (sweepplan.parse_list(baseline_spec, "baseline", SWEEP_BASELINES)
                                         if baseline_spec else list(SWEEP_BASELINES))
    return sweepplan.build_plan(
        rungs={v.id: list(v.dtypes) for v in chosen}, baselines=baselines, shapes=list(shapes), preset=preset,
        batches=sweepplan.parse_ints(batch_spec, "--batch") if batch_spec is not None else None,
        heads_kv=sweepplan.parse_ints(heads_kv_spec, "--heads-kv") if heads_kv_spec is not None else None,
        causal=causal, dtypes=sweepplan.parse_list(dtype_spec, "--dtype") if dtype_spec else [],
        modes=sweepplan.parse_list(mode_spec, "--mode"), timing=timing, reps=reps, warmup=warmup,
        cell_budget_s=cell_budget_s, shard=sweepplan.parse_shard(shard_spec), yes=yes, command=command, name=name)


def create(plan: Plan, root: Path | None = None) -> Sweep:
    """A new stored sweep for `plan` (status running), its id naming the shard where it is one."""
    shard = f"-shard{plan.shard[0]}of{plan.shard[1]}" if plan.shard else ""
    return create_sweep(new_sweep_id(plan.name + shard), sweep_manifest(plan), root)


def run_cells(sweep, cells: list[Cell], measure: Callable[[Cell], list[dict]], part: str = "main",
              progress: Progress | None = None, worker: str | None = None) -> int:
    """Measure `cells` in order, each cell's rows made durable before the next starts. Ctrl-C
    (KeyboardInterrupt) propagates after the finished cells are on disk. Returns cells done."""
    done = 0
    for cell in cells:
        try:
            rows = measure(cell)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - a cell that breaks the measurer is a row, not the end of the sweep
            rows = [status_row(cell, "failed", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}")]
        for r in rows:
            r["worker"] = worker
        sweep.append_rows(rows, part)
        done += 1
        if progress:
            progress.advance(cell, rows)
    return done



def run_in_process(sweep, cells: list[Cell], measuring: Measuring = ON_GPU, show_progress: bool = True) -> int:
    """The single-process sweep: measure the cells here, journal them; returns cells done."""
    plan = Plan.from_dict(sweep.plan_dict)
    progress = Progress(cells, f"sweep {sweep.id}", show_progress)
    try:
        measurer = measuring.make(plan, progress.log, "main")
        facts = environment_facts(measurer)
        _check_device(sweep, facts["device"])
        sweep.update_manifest(device=sweep.manifest.get("device") or facts["device"],
                              software=sweep.manifest.get("software") or facts["software"],
                              devices=_add_device(sweep.manifest.get("devices"), facts["device"], "main"))
        return run_cells(sweep, cells, measurer, "main", progress)
    finally:
        progress.close()


def _add_device(devices, device, worker):
    devices = list(devices or [])
    entry = dict(device, worker=worker)
    if entry not in devices:
        devices.append(entry)
    return devices


def _check_device(sweep, device) -> None:
    """A resumed sweep continues on the device it started on (ratios across devices are not ratios)."""
    stored = (sweep.manifest.get("device") or {}).get("name")
    if stored and device.get("name") != stored and not sweep.manifest.get("mismatch_allowed"):
        raise LabError(f"sweep {sweep.id} was measured on {stored}; this is {device.get('name')}",
                       hint="resume it on the same kind of GPU, or pass --allow-mismatch")


# ------------------------------------------------------------------------------ one worker per GPU

def run_on_gpus(sweep, gpus: list[str], measuring: Measuring = ON_GPU, show_progress: bool = True,
                poll_s: float = 0.5) -> tuple[int, list[str]]:
    """Start one worker process per GPU (CUDA_VISIBLE_DEVICES=<gpu>), worker i measuring the i-th of
    N interleaved shards of the cells still missing; wait for all. Returns (cells done, messages
    about workers that died). A dead worker's finished cells are in its journal and stay."""
    missing = sweep.missing_cells()
    n = len(gpus)
    if measuring.on_gpu:   # build each rung once here: workers building into one cache at once would race
        for rid in dict.fromkeys(c.impl for c in missing):
            if rid in sweep.plan_dict.get("rungs", {}):
                build.build(registry.get(rid))
    procs = []
    for i, gpu in enumerate(gpus, start=1):
        # the assignment is fixed here: a worker reading "what is missing" later would see the others' progress
        (sweep.path / f".worker-{i}.cells.json").write_text(json.dumps([c.key for c in _slice(missing, i, n)]))
        env = child_env()
        env["CUDA_VISIBLE_DEVICES"] = gpu
        argv = [*measuring.worker, "--worker", str(sweep.path), "--slice", f"{i}/{n}", "--part", f"gpu{gpu}-{i}"]
        log = open(sweep.path / f".worker-{i}.log", "w")
        procs.append((i, gpu, subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    progress = Progress(missing, f"sweep {sweep.id} on GPUs {','.join(gpus)}", show_progress)
    before = len(sweep.done_cells())
    try:
        while any(p.poll() is None for _, _, p, _ in procs):
            time.sleep(poll_s)
            _follow(progress, sweep, before, missing)
    except KeyboardInterrupt:
        for _, _, p, _ in procs:   # our own children only, by pid
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for _, _, p, _ in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    finally:
        progress.close()
        for *_, log in procs:
            log.close()
    messages = []
    done_keys = sweep.done_cells()
    for i, gpu, p, _ in procs:
        if p.returncode != 0:
            mine = _slice(missing, i, n)
            finished = sum(1 for c in mine if c.key in done_keys)
            how = (f"killed by {signal.Signals(-p.returncode).name}" if p.returncode < 0
                   else f"exit code {p.returncode}")
            tail = _tail(sweep.path / f".worker-{i}.log")
            messages.append(f"worker {i}/{n} on GPU {gpu} died ({how}) after {finished} of its {len(mine)} cells"
                            + (f": {tail}" if tail else ""))
    for i, _, p, _ in procs:
        (sweep.path / f".worker-{i}.cells.json").unlink(missing_ok=True)
        if p.returncode == 0:
            (sweep.path / f".worker-{i}.log").unlink(missing_ok=True)   # a dead worker's log stays beside its rows
    _collect_worker_devices(sweep)
    return len(done_keys) - before, messages


def _slice(cells: list[Cell], i: int, n: int) -> list[Cell]:
    """Worker i's share: interleaved by problem, so one shape's implementations stay together."""
    problems = list(dict.fromkeys(c.problem for c in cells))
    mine = set(problems[i - 1::n])
    return [c for c in cells if c.problem in mine]


def _follow(progress: Progress, sweep, before: int, missing: list[Cell]) -> None:
    """Advance the parent's bar as the workers' journals grow (cells in plan order: an estimate)."""
    count = len(sweep.done_cells()) - before
    while progress.done < count and progress.done < len(missing):
        progress.advance(missing[progress.done], [])


def _tail(path: Path) -> str:
    try:
        lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-2:])[:300]


def _collect_worker_devices(sweep) -> None:
    devices = list(sweep.manifest.get("devices") or [])
    for f in sorted(sweep.path.glob(".worker-*.json")):
        try:
            d = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        devices = _add_device(devices, d["device"], d["worker"])
        if not sweep.manifest.get("device"):
            sweep.manifest["device"] = d["device"]
        if not sweep.manifest.get("software"):
            sweep.manifest["software"] = d["software"]
        f.unlink()
    sweep.update_manifest(devices=devices)


def sweep_manifest(plan: Plan) -> dict:
    return {"lab_version": __version__, "git": git_info(), "plan": plan.to_dict(), "plan_key": plan.key(),
            "device": None, "devices": [], "software": None}


def execute(sweep, gpus: list[str] | None = None, measuring: Measuring = ON_GPU,
            show_progress: bool = True) -> tuple[str, list[str]]:
    """Measure the sweep's missing cells (here, or one worker per GPU), then fold the rows into its
    table. Returns (status, messages). Ctrl-C: the finished rows are folded in, status interrupted,
    and KeyboardInterrupt is raised again for the caller to exit on."""
    messages: list[str] = []
    try:
        if gpus:
            _, messages = run_on_gpus(sweep, gpus, measuring, show_progress)
        else:
            run_in_process(sweep, sweep.missing_cells(), measuring, show_progress)
    except KeyboardInterrupt:
        if not sweep.rows() and sweep.manifest.get("status") == "running" and not sweep.manifest.get("cells_planned"):
            shutil.rmtree(sweep.path, ignore_errors=True)   # nothing finished: nothing to keep or resume
            sweep.manifest.update(cells_done=0, removed=True)
            raise
        sweep.finalize("interrupted", ["interrupted (Ctrl-C): the finished cells are kept"])
        raise
    except BaseException:
        sweep.finalize("incomplete", ["the sweep stopped on an error; the finished cells are kept"])
        raise
    sweep.finalize("incomplete", messages)
    return sweep.manifest["status"], messages


def worker_main(argv=None, measuring: Measuring = ON_GPU) -> int:
    """`python -m lab.sweeping --worker SWEEP_DIR --slice i/N --part NAME`: measure the i-th
    slice of the sweep's missing cells on the visible GPU, appending to journal-NAME.jsonl."""
    ap = argparse.ArgumentParser(prog="python -m lab.sweeping")
    ap.add_argument("--worker", required=True)
    ap.add_argument("--slice", required=True)
    ap.add_argument("--part", required=True)
    a = ap.parse_args(argv)
    sweep = Sweep(Path(a.worker))
    i, n = parse_shard(a.slice)
    assigned = sweep.path / f".worker-{i}.cells.json"
    keys = set(json.loads(assigned.read_text())) if assigned.is_file() else None
    cells = [c for c in sweep.missing_cells() if c.key in keys] if keys is not None else _slice(sweep.missing_cells(), i, n)
    plan = Plan.from_dict(sweep.plan_dict)
    try:
        measurer = measuring.make(plan, say, a.part)
        facts = environment_facts(measurer)
        (sweep.path / f".worker-{a.part}.json").write_text(json.dumps({**facts, "worker": a.part}, default=str))
        progress = Progress(cells, f"worker {a.part}", enabled=True)
        run_cells(sweep, cells, measurer, a.part, progress, worker=a.part)
    except KeyboardInterrupt:
        return 130
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())

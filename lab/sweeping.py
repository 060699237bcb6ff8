"""The stored sweep, driven: a plan's missing cells measured (lab.measure.sweep) into a stored sweep
(lab.store.sweeps), by one worker process per GPU (on a GPU without --gpus: one, on GPU 0; see
`measured_by`) or here (--in-process, or a measurer on no GPU), then folded into its table.

It sits above both: the measuring knows no store, the store knows no measuring. A worker is
`python -m lab.sweeping --worker SWEEP_DIR --part NAME --gpu G`.

How a cell is measured is a dependency, `Measuring`: the GPU measurer by default; a caller (a test
on a machine without a GPU) hands in its own, in-process through `execute` or `lab sweep`'s click
context object (`main(obj=Measuring(...))`), and to worker processes by the command that starts
one (`Measuring.worker`), so no option or variable of the lab exists for it.

Several GPUs (`--gpus 0,1,2,3`): the parent starts one worker per GPU at once, pinned to its GPU by
UUID (CUDA_VISIBLE_DEVICES=GPU-...), builds the rungs while the workers start, then lets them go.
The missing cells are dealt as units, one per problem (every implementation and mode of one shape on
one GPU: the ratios between them are measured side by side, and the inputs and float64 references
are made once), largest first by estimated cost; each worker takes the next unit nobody has taken
(an exclusive claim file) whenever it finishes one, so a GPU that is faster, or a worker that dies,
never leaves a fixed share behind. Each rung's float64 gate (per dtype and mode) is checked once
for the whole sweep by whichever worker gets to it first (`Gates`), not once per GPU.

Each unit is measured in passes (the plan's, `--passes`, default 2; `measure_unit`): every cell of
the unit once with 1/passes of its repetitions and budget, then again, and each row pools its passes,
so its CI95 covers the drift of the timing over the seconds between them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lab import __version__, children
from lab.console import say
from lab.environment import git_info, gpu_record, gpu_uuids
from lab.errors import LabError
from lab.files import write_json_atomic
from lab.ladder import build, registry
from lab.measure.call import require_mode
from lab.measure.gate import verdict as gate_verdict
from lab.measure.isolated import child_env
from lab.measure.problem import Problem, check_supported, deterministic_refusal
from lab.measure.sweep import GpuMeasurer, Progress, cell_cost, combine_passes, environment_facts, status_row
from lab.measure import sweepplan
from lab.measure.baselines import SWEEP_BASELINES
from lab.measure.sweepplan import Cell, Plan
from lab.store.sweeps import Sweep, create_sweep, new_sweep_id


def _gpu_measurer(plan: Plan, log: Callable[[str], None], part: str, gates=None):
    return GpuMeasurer(plan, log, gates)


def _gpu_probe() -> dict:
    return gpu_record(0)   # a pinned worker sees its one GPU as device 0


WORKER = (sys.executable, "-m", "lab.sweeping")


@dataclass(frozen=True)
class Measuring:
    """How a sweep's cells are measured. `make(plan, log, part, gates)` returns the measurer (a
    callable cell -> rows, one pass of the cell: `plan` is the sweep's Plan.pass_plan(), with `device` and `software` where it knows them; `part` names the journal
    it writes: "main", or a worker's; `gates`: the sweep's shared float64 verdicts, a `Gates`);
    `worker` is the command that runs one worker process (it gets `--worker DIR --part NAME --gpu G`);
    `on_gpu`: the cells run on a GPU, so the sweep needs one, pins workers by UUID and builds each rung
    once before the workers measure; `check(variant, problem, mode)` gives a rung's float64 verdict
    (lab.measure.gate.verdict: a child on the GPU); `probe()` says which GPU measures and its clocks
    and power limit now (lab.environment.gpu_record), read at each problem a worker starts."""
    make: Callable = _gpu_measurer
    worker: tuple[str, ...] = WORKER
    on_gpu: bool = True
    check: Callable = gate_verdict
    probe: Callable = _gpu_probe


ON_GPU = Measuring()


class Gates:
    """A rung's float64 verdict, one per (rung, dtype, mode) for the whole sweep: checked on the
    sweep's first problem of that dtype the rung runs (`problems`, chosen by the parent, so one GPU
    and four gate alike) the first time a cell needs it, by whoever needs it first. With a `folder`
    (the sweep's `.gates/`), workers share them: the first to need one claims it (an exclusive
    file), checks it and writes the verdict; the others wait for that file, and take the check over
    if its claimer died."""

    def __init__(self, check: Callable, problems: dict[str, Problem] | None = None, folder: Path | None = None):
        self.check, self.problems, self.folder = check, dict(problems or {}), folder
        self._known: dict[str, dict] = {}
        self.turn = None                   # the measurer's GPU turn (GpuMeasurer.turn), held while checking, never
                                           # while waiting: a worker sharing the GPU may be the one checking
        self.checked: list[str] = []       # the keys this process checked itself (the rest it read)
        self.waited_s = 0.0                # time spent waiting for another worker's check

    @staticmethod
    def key(rung: str, dtype: str, mode: str) -> str:
        return f"{rung}|{dtype}|{mode}"

    def verdict(self, variant, problem: Problem, mode: str) -> dict:
        key = self.key(variant.id, problem.dtype, mode)
        if key not in self._known:
            gate_problem = self.problems.get(key, problem)
            compute = lambda: self.check(variant, gate_problem, mode)   # noqa: E731
            self._known[key] = self._shared(key, compute) if self.folder is not None else self._checked(key, compute)
        return self._known[key]

    def prefetch(self) -> None:
        """Check every gate of the sweep nobody has claimed yet (a worker's first act: the gates are
        spread over the GPUs instead of each worker meeting them one by one in its cells)."""
        for key, problem in self.problems.items():
            if key in self._known or self.folder is None or (self._files(key)[0]).is_file():
                continue
            rung, _, mode = key.split("|")
            if _claim(self._files(key)[1]):
                self._known[key] = self._computed(key, lambda: self.check(registry.get(rung), problem, mode))

    def _checked(self, key, compute) -> dict:
        """The verdict, checked here. A check that raises is a failed verdict naming why (stored like any
        other: the workers waiting for it must not wait forever, and the rung's cells become rows)."""
        self.checked.append(key)
        with (self.turn() if self.turn else _nothing()):   # the check's child runs on the GPU
            try:
                return compute()
            except Exception as e:  # noqa: BLE001 - a verdict, never the end of the sweep
                return {"passed": False, "error": f"{type(e).__name__}: {str(e).strip()[:300]}"}

    def _files(self, key: str) -> tuple[Path, Path]:
        # '+' (a pair's id, fwd+bwd) becomes '-', which no rung id holds: pair v9+v8 and a rung v9_v8 keep two files
        name = "".join(c if c.isalnum() or c in "-_." else "-" if c == "+" else "_" for c in key)
        return self.folder / f"{name}.json", self.folder / f"{name}.claim"

    def _computed(self, key, compute) -> dict:
        done, _ = self._files(key)
        found = self._checked(key, compute)
        write_json_atomic(done, {"key": key, "problem": self.problems[key].label() if key in self.problems else None,
                                 "verdict": found, "checked_by": os.getpid()})
        return found

    def _shared(self, key, compute) -> dict:
        done, claim = self._files(key)
        t0 = time.perf_counter()
        while True:
            if done.is_file():
                self.waited_s += time.perf_counter() - t0
                return json.loads(done.read_text())["verdict"]
            if _claim(claim):
                return self._computed(key, compute)
            if not _claimer_alive(claim):
                claim.unlink(missing_ok=True)   # its checker died mid-check: check it here
                continue
            time.sleep(0.1)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _claim(path: Path, holder: str | None = None) -> bool:
    """Take `path` for this process (the file holds `holder`, default its pid), or learn that another
    process has (atomic: O_CREAT|O_EXCL)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(holder or str(os.getpid()))
    return True


def _claimer_alive(path: Path) -> bool:
    try:
        pid = int(path.read_text().strip() or "0")
    except (OSError, ValueError):
        return True
    if not pid:
        return True   # created, its pid not written yet
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gate_problems(plan: Plan, cells: list[Cell]) -> dict[str, Problem]:
    """Per (rung, dtype, mode) among `cells`, the plan's first problem the rung runs: where its gate
    is checked, whatever GPU or worker gets there first."""
    out: dict[str, Problem] = {}
    for c in cells:
        if c.impl not in plan.rungs:
            continue
        key = Gates.key(c.impl, c.problem.dtype, c.mode)
        if key in out:
            continue
        try:
            variant = registry.get(c.impl)
            check_supported(variant, c.problem)
            require_mode(variant, c.mode)
        except LabError:
            continue   # that cell becomes an "unsupported" row; a later problem may gate the rung
        out[key] = c.problem
    return out


def plan_from_specs(*, variant_spec, shapes, preset, batch_spec, heads_kv_spec, causal, dtype_spec, mode_spec,
                    timing, baseline_spec, no_baselines, reps, warmup, cell_budget_s, shard_spec, yes, command,
                    name, passes: int = sweepplan.DEFAULT_PASSES, deterministic: bool = False,
                    under_load_ms: float = 0.0) -> Plan:
    """`lab sweep`'s options, as typed, into its plan: the rungs from the registry (with the dtypes
    each accepts), the baselines, the shapes; bad input is refused (LabError) before anything runs."""
    chosen = registry.select(variant_spec) if variant_spec and variant_spec != "none" else []
    baselines = [] if no_baselines else (sweepplan.parse_list(baseline_spec, "baseline", SWEEP_BASELINES)
                                         if baseline_spec else list(SWEEP_BASELINES))
    if deterministic:   # every rung runs the deterministic backward, or the sweep is refused (exit 2) now
        lacking = next((v for v in chosen if not v.deterministic), None)
        if lacking is not None:
            raise LabError(deterministic_refusal(lacking))
        if not chosen:
            raise LabError("--deterministic asks the rungs' backward for its deterministic mode: name a rung (--variant)")
    return sweepplan.build_plan(
        rungs={v.id: list(v.dtypes) for v in chosen}, baselines=baselines, deterministic=deterministic, shapes=list(shapes), preset=preset,
        batches=sweepplan.parse_ints(batch_spec, "--batch") if batch_spec is not None else None,
        heads_kv=sweepplan.parse_ints(heads_kv_spec, "--heads-kv") if heads_kv_spec is not None else None,
        causal=causal, dtypes=sweepplan.parse_list(dtype_spec, "--dtype") if dtype_spec else [],
        modes=sweepplan.parse_list(mode_spec, "--mode"), timing=timing, reps=reps, warmup=warmup,
        cell_budget_s=cell_budget_s, shard=sweepplan.parse_shard(shard_spec), yes=yes, command=command, name=name,
        passes=passes, under_load_ms=under_load_ms)


def create(plan: Plan, root: Path | None = None) -> Sweep:
    """A new stored sweep for `plan` (status running), its id naming the shard where it is one."""
    shard = f"-shard{plan.shard[0]}of{plan.shard[1]}" if plan.shard else ""
    return create_sweep(new_sweep_id(plan.name + shard), sweep_manifest(plan), root)


def run_cells(sweep, cells: list[Cell], measure: Callable[[Cell], list[dict]], part: str = "main",
              progress: Progress | None = None, worker: str | None = None, gpu: Callable[[], dict] | None = None,
              passes: int = 1) -> int:
    """Measure `cells` one problem at a time (`by_problem`: a unit), each cell in `passes` (see
    `measure_unit`), each unit's rows made durable once its last pass is done, before the next unit
    starts. Ctrl-C (KeyboardInterrupt) propagates after the finished units are on disk (the unit in
    flight is measured again by --resume). Returns cells done. Every row carries `worker` and
    `gpu()`'s fields (which GPU measured it, its clocks and power limit at its last pass)."""
    done = 0
    for unit in by_problem(cells):
        rows = measure_unit(unit, measure, passes, progress, gpu)
        for r in rows:
            r["worker"] = worker
        sweep.append_rows(rows, part)
        done += len(unit)
    return done


def measure_unit(unit: list[Cell], measure: Callable[[Cell], list[dict]], passes: int = 1,
                 progress: Progress | None = None, gpu: Callable[[], dict] | None = None) -> list[dict]:
    """The rows of one problem's cells, measured in `passes`: every cell of the unit once (with
    1/passes of its repetitions and budget: the measurer was made for Plan.pass_plan()), then every
    cell again, so a cell's passes are the unit's length apart (seconds), and its row pools them
    (lab.measure.sweep.combine_passes): the row's CI95 covers the drift between passes that one
    burst's CI95 cannot see. A cell no pass before timed (unsupported, out of memory, refused) is not
    measured again: its row is that pass's, whatever the next would give.

    Each row also says when and how long: `measured_utc`, when its cell's last pass ended, and
    `pass_wall_s`, the seconds each pass of the cell took on the host (its warm-up, checked and timed
    calls, both timing methods): a run whose host slows shows here, and when, though its timed calls
    grow by microseconds (four H200s, 2026-11-27: one GPU's second run measured 24% longer while its
    calls took 4-14 us more each for part of it, and the rows could not say which part)."""
    taken: dict[str, list[list[dict]]] = {c.key: [] for c in unit}
    fields: dict[str, dict] = {}
    walls: dict[str, list[float]] = {c.key: [] for c in unit}
    ended: dict[str, float] = {}
    for k in range(passes):
        for cell in unit:
            if k and not any(r.get("status") == "ok" for r in taken[cell.key][-1]):
                continue
            t0 = time.time()
            try:
                rows = measure(cell)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - a cell that breaks the measurer is a row, not the end of the sweep
                first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
                rows = [status_row(cell, "failed", f"{type(e).__name__}: {first}")]
            ended[cell.key] = time.time()
            walls[cell.key].append(round(ended[cell.key] - t0, 4))
            taken[cell.key].append(rows)
            fields[cell.key] = gpu() if gpu is not None else {}
            if progress:
                progress.advance(cell, rows, share=1 / passes, step=f"pass {k + 1} of {passes}" if passes > 1 else "")
    out = []
    for cell in unit:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ended[cell.key])) + f".{int(ended[cell.key] % 1 * 1000):03d}Z"
        for r in combine_passes(taken[cell.key]):
            r.update(fields[cell.key], measured_utc=when, pass_wall_s=list(walls[cell.key]))
            out.append(r)
    return out


def by_problem(cells: list[Cell]) -> list[list[Cell]]:
    """The cells of each problem together, problems in their first cell's order."""
    units: dict = {}
    for c in cells:
        units.setdefault(c.problem, []).append(c)
    return list(units.values())


def _probed(measuring: Measuring, gpu: str | None) -> dict:
    """The GPU fields of a row: the --gpus entry, then what the probe reads now (nothing where it fails:
    an unknown clock is left out, never guessed)."""
    try:
        found = measuring.probe()
    except Exception as e:  # noqa: BLE001 - the rows are still true without the clocks
        found = {"gpu_probe_error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"gpu": gpu, **found}


class GpuSampler:
    """The GPU fields of a row (`_probed`), read once at the start and then again every `every_s`
    seconds on a thread: a row gets the clocks and power limit read at most that long before its cell
    finished, and no cell waits for the probe (NVML in this process, lab.nvml: microseconds; where it
    cannot be read, an nvidia-smi of tens to hundreds of milliseconds)."""

    def __init__(self, measuring: Measuring, gpu: str | None, every_s: float = 2.0):
        self.measuring, self.gpu, self.every_s = measuring, gpu, every_s
        self._latest = _probed(measuring, gpu)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lab-gpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._latest = _probed(self.measuring, self.gpu)

    def __call__(self) -> dict:
        return dict(self._latest)

    def close(self) -> None:
        self._stop.set()


def run_in_process(sweep, cells: list[Cell], measuring: Measuring = ON_GPU, show_progress: bool = True) -> int:
    """The single-process sweep: measure the cells here, journal them; returns cells done."""
    plan = Plan.from_dict(sweep.plan_dict)
    progress = Progress(cells, f"sweep {sweep.id}", show_progress)
    try:
        gates = Gates(measuring.check, gate_problems(plan, cells))
        measurer = measuring.make(plan.pass_plan(), progress.log, "main", gates)
        gates.turn = getattr(measurer, "turn", None)
        facts = environment_facts(measurer)
        _check_device(sweep, facts["device"])
        sweep.update_manifest(device=sweep.manifest.get("device") or facts["device"],
                              software=sweep.manifest.get("software") or facts["software"],
                              devices=_add_device(sweep.manifest.get("devices"), facts["device"], "main"))
        sampler = GpuSampler(measuring, None)
        try:
            return run_cells(sweep, cells, measurer, "main", progress, gpu=sampler, passes=plan.passes)
        finally:
            sampler.close()
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

DEAL = ".deal.json"      # the units of this run, largest first, and where each gate is checked
CLAIMS = ".deal"         # a file per unit taken (its index), holding the worker's part; `ready` when built
GATES = ".gates"         # the float64 verdicts of this run, one file per rung, dtype and mode


def deal(cells: list[Cell], budget_s: float) -> list[list[Cell]]:
    """The units a run deals out: one per problem (plan order within), the costliest first (the
    cell-cost estimate of the progress bar), so the long ones start early and the short ones fill
    the end of every GPU's queue (greedy longest-first). Equal costs keep the plan's order."""
    return sorted(by_problem(cells), key=lambda unit: -sum(cell_cost(c, budget_s) for c in unit))


def _reset_run_files(sweep) -> None:
    """A run's dealing state starts empty: what a killed earlier run left is stale (the cells it
    finished are in the journals; the rest are missing again)."""
    for name in (CLAIMS, GATES):
        shutil.rmtree(sweep.path / name, ignore_errors=True)
    for f in [sweep.path / DEAL, *sweep.path.glob(".worker-*.json"), *sweep.path.glob(".worker-*.log")]:
        f.unlink(missing_ok=True)


def _pins(gpus: list[str], measuring: Measuring) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each worker: the GPU's UUID, so the worker measures on the GPU the
    user named however CUDA orders devices (an index means the parent's order only where the
    visible set and order are the parent's); the index as given where the cells run on no GPU."""
    if not measuring.on_gpu:
        return list(gpus)
    uuids = gpu_uuids()
    return [uuids[int(g)] if uuids[int(g)] else g for g in gpus]


def run_on_gpus(sweep, gpus: list[str], measuring: Measuring = ON_GPU, show_progress: bool = True,
                poll_s: float = 0.5) -> tuple[int, list[str]]:
    """One worker process per GPU, fed units dynamically (see the module's docstring); wait for all.
    Returns (cells done, messages about workers that died). A dead worker's finished cells are in its
    journal and stay; the units it had not taken are measured by the others; the rest of the unit it
    was measuring is left for `--resume`."""
    plan = Plan.from_dict(sweep.plan_dict)
    missing = sweep.missing_cells()
    units = deal(missing, plan.cell_budget_s)
    _reset_run_files(sweep)
    (sweep.path / CLAIMS).mkdir()
    (sweep.path / GATES).mkdir()
    write_json_atomic(sweep.path / DEAL, {
        "units": [[c.key for c in u] for u in units],
        "gates": {k: p.to_dict() for k, p in gate_problems(plan, missing).items()}})
    n = len(gpus)
    procs = []
    started = time.time()
    try:
        for i, (gpu, pin) in enumerate(zip(gpus, _pins(gpus, measuring)), start=1):
            env = child_env()
            env["CUDA_VISIBLE_DEVICES"] = pin   # pinned: the worker sees its one GPU as device 0
            argv = [*measuring.worker, "--worker", str(sweep.path), "--part", f"gpu{gpu}-{i}", "--gpu", gpu,
                    "--started", repr(started)]
            log = open(sweep.path / f".worker-{i}.log", "w")
            procs.append((i, gpu, pin, subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log))
        if measuring.on_gpu:   # built once here, while the workers start: workers building into one cache would race
            for rid in dict.fromkeys(c.impl for c in missing):
                if rid in plan.rungs:
                    build.build(registry.get(rid))
        (sweep.path / CLAIMS / "ready").write_text(repr(time.time() - started))
        progress = Progress([c for u in units for c in u], f"sweep {sweep.id} on GPUs {','.join(gpus)}", show_progress)
        before = len(sweep.done_cells())
        try:
            while any(p.poll() is None for *_, p, _ in procs):
                time.sleep(poll_s)
                _follow(progress, sweep, before, [c for u in units for c in u])
        finally:
            progress.close()
    except BaseException:   # Ctrl-C, a build that failed: our own children only, by pid
        for *_, p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for *_, p, _ in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        raise
    finally:
        for *_, log in procs:
            log.close()
    done_keys = sweep.done_cells()
    taken = _claims(sweep)
    workers = []
    messages = []
    for i, gpu, pin, p, _ in procs:
        part = f"gpu{gpu}-{i}"
        mine = [units[u] for u in taken.get(part, [])]
        record = _worker_record(sweep, part)
        workers.append({"part": part, "gpu": gpu, "cuda_visible_devices": pin, "exit": p.returncode,
                        "units": taken.get(part, []), "cells": sum(len(u) for u in mine), **record})
        if p.returncode != 0:
            finished = sum(1 for u in mine for c in u if c.key in done_keys)
            left = [c for u in mine for c in u if c.key not in done_keys]
            how = children.how_it_ended(p.returncode)
            tail = _tail(sweep.path / f".worker-{i}.log")
            messages.append(f"worker {i}/{n} on GPU {gpu} ({pin}) died ({how}) after {finished} cells"
                            + (f"; {len(left)} cells of its unit in flight ({left[0].problem.label()}) are left for "
                               "--resume" if left else "")
                            + (f": {tail}" if tail else ""))
    untaken = [c for j, u in enumerate(units) if j not in {x for xs in taken.values() for x in xs} for c in u]
    if untaken and messages:
        messages.append(f"{len(untaken)} cells no worker was left to take: `--resume` measures them")
    for i, _, _, p, _ in procs:
        if p.returncode == 0:
            (sweep.path / f".worker-{i}.log").unlink(missing_ok=True)   # a dead worker's log stays beside its rows
    _collect_worker_devices(sweep)
    sweep.update_manifest(workers=list(sweep.manifest.get("workers") or []) + [
        dict(w, run_started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
             run_wall_s=round(time.time() - started, 3)) for w in workers])
    (sweep.path / DEAL).unlink(missing_ok=True)
    for name in (CLAIMS, GATES):
        shutil.rmtree(sweep.path / name, ignore_errors=True)
    return len(done_keys) - before, messages


def _claims(sweep) -> dict[str, list[int]]:
    """Which units each worker took, in the order it took them."""
    out: dict[str, list[int]] = {}
    for f in (sweep.path / CLAIMS).glob("[0-9]*"):
        try:
            out.setdefault(f.read_text().strip(), []).append(int(f.name))
        except (OSError, ValueError):
            continue
    return {k: sorted(v) for k, v in out.items()}


def _worker_record(sweep, part: str) -> dict:
    """Where the worker's time went (its own account, written as it goes; partial for a dead one)."""
    try:
        d = json.loads((sweep.path / f".worker-{part}.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return {k: d.get(k) for k in ("gpu_uuid", "gpu_name", "times_s", "gates_checked", "gates_waited_s")}


def _follow(progress: Progress, sweep, before: int, cells: list[Cell]) -> None:
    """Advance the parent's bar as the workers' journals grow (cells in dealing order: an estimate)."""
    count = len(sweep.done_cells()) - before
    while progress.done < count and progress.done < len(cells):
        progress.advance(cells[int(progress.done)], [])


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
        if d.get("device"):
            devices = _add_device(devices, d["device"], d["worker"])
            if not sweep.manifest.get("device"):
                sweep.manifest["device"] = d["device"]
            if not sweep.manifest.get("software"):
                sweep.manifest["software"] = d["software"]
        f.unlink()
    sweep.update_manifest(devices=devices)


def worker_times(sweep) -> list[str]:
    """One line per worker of the last run: where its time went."""
    out = []
    workers = sweep.manifest.get("workers") or []
    last = [w for w in workers if w.get("run_started_utc") == (workers[-1].get("run_started_utc") if workers else None)]
    for w in last:
        t = w.get("times_s") or {}
        parts = ", ".join(f"{k} {v:.1f}" for k, v in t.items() if isinstance(v, (int, float)))
        out.append(f"worker {w['part']} ({w.get('gpu_uuid') or w.get('cuda_visible_devices')}): {w['cells']} cells in "
                   f"{len(w['units'])} problems; seconds: {parts or 'not recorded'}"
                   + (f"; gates checked {len(w.get('gates_checked') or [])}" if w.get("gates_checked") is not None else ""))
    return out

def sweep_manifest(plan: Plan) -> dict:
    return {"lab_version": __version__, "git": git_info(), "plan": plan.to_dict(), "plan_key": plan.key(),
            "device": None, "devices": [], "software": None}


def measured_by(gpus: list[str] | None, in_process: bool, measuring: Measuring) -> list[str] | None:
    """The GPUs whose pinned workers measure the sweep, or None: this process measures it. `--gpus` as
    given; without it, on a GPU, one worker on device 0 (this process's CUDA order, so a
    CUDA_VISIBLE_DEVICES the user set is kept), so that a one-GPU table is timed by the code path that
    times each table of several GPUs: on four H200s, one-GPU tables measured in the lab's own process
    were the slower in 24 of 24 (row length, timing) groups against the workers' 2- and 4-GPU tables
    (two sessions, median ratios 0.973-0.998), and a worker's one-GPU table agreed with the 4-GPU
    one (4 of 270 rows; benchmarks/RESULTS.md, issue 31). `--in-process` measures here, the way every
    one-GPU sweep was measured before; so does a measurer that runs on no GPU (the tests' simulated
    device), which has no GPU to pin."""
    if in_process:
        if gpus:
            raise LabError(f"--in-process measures in the lab's own process; --gpus {','.join(gpus)} starts a worker "
                           "per GPU: give one or the other")
        return None
    if gpus:
        return gpus
    return ["0"] if measuring.on_gpu else None


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
    """`python -m lab.sweeping --worker SWEEP_DIR --part NAME --gpu G --started T`: wait for the parent's
    builds, check the gates nobody has claimed, then take units from the deal until none is left,
    appending rows to journal-NAME.jsonl. Its own account of where the time went (times_s) is kept in
    .worker-NAME.json, rewritten after every unit."""
    ap = argparse.ArgumentParser(prog="python -m lab.sweeping")
    ap.add_argument("--worker", required=True)
    ap.add_argument("--part", required=True)
    ap.add_argument("--gpu", default=None)
    ap.add_argument("--started", type=float, default=None)
    a = ap.parse_args(argv)
    t_main = time.time()
    sweep = Sweep(Path(a.worker))
    dealt = json.loads((sweep.path / DEAL).read_text())
    cells = {c.key: c for c in sweep.missing_cells()}
    units = [[cells[k] for k in u if k in cells] for u in dealt["units"]]
    plan = Plan.from_dict(sweep.plan_dict)
    gates = Gates(measuring.check, {k: Problem.from_dict(p) for k, p in dealt["gates"].items()}, sweep.path / GATES)
    times = {"start": round(t_main - a.started, 3) if a.started else None}
    account = sweep.path / f".worker-{a.part}.json"
    record: dict = {"worker": a.part}

    def write(**more):
        record.update(more, times_s=dict(times), gates_checked=list(gates.checked),
                      gates_waited_s=round(gates.waited_s, 3))
        write_json_atomic(account, record)

    try:
        t = time.time()
        measurer = measuring.make(plan.pass_plan(), say, a.part, gates)
        gates.turn = getattr(measurer, "turn", None)
        record.update(environment_facts(measurer))
        _check_device(sweep, record["device"])   # a resumed sweep continues on its own kind of GPU, as in process
        sampler = GpuSampler(measuring, a.gpu)
        gpu = sampler()
        times["init"] = round(time.time() - t, 3)
        write(gpu_uuid=gpu.get("gpu_uuid"), gpu_name=gpu.get("gpu_name"))
        t = time.time()
        ready = sweep.path / CLAIMS / "ready"
        parent = os.getppid()
        while not ready.is_file():   # the parent is building the rungs
            if os.getppid() != parent:
                return 2   # the parent is gone: nobody will fold these rows
            time.sleep(0.05)
        times["wait_for_builds"] = round(time.time() - t, 3)
        t = time.time()
        gates.prefetch()
        times["gates"] = round(time.time() - t, 3)
        times["measure"] = 0.0
        progress = Progress([c for u in units for c in u], f"worker {a.part}", enabled=True)
        for index, unit in enumerate(units):
            if not unit or not _claim(sweep.path / CLAIMS / str(index), a.part):
                continue
            t = time.time()
            run_cells(sweep, unit, measurer, a.part, progress, worker=a.part, gpu=sampler, passes=plan.passes)
            times["measure"] = round(times["measure"] + time.time() - t, 3)
            write()
        sampler.close()
        times["total"] = round(time.time() - (a.started or t_main), 3)
        write()
    except KeyboardInterrupt:
        return 130
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0

if __name__ == "__main__":
    sys.exit(worker_main())

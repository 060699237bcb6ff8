"""`lab sweep`: a plan's cells measured one after another into a stored sweep, on one GPU or one
worker process per GPU.

The loop (`run_cells`) is independent of how a cell is measured: `GpuMeasurer` times real
implementations; tests hand in another measurer (`--measure-with module:function` for workers), so
sharding, Ctrl-C, resume and a dying worker are tested on a machine without a GPU.

Every cell becomes rows, never an exception: out of memory, a backend that refuses the shape, a rung
without backward, a rung that failed its float64 check are rows with a status and a reason.
Correctness gates timing: a rung is checked in a child process (lab.measure.isolated) on its first
problem of the sweep plus seeded ragged shapes, causal and not, before any of its cells is timed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

from lab.errors import CheckFailed, LabError
from lab.measure.sweepplan import GRAPH_AUTO_BELOW_MS, MODE_FLOP_FACTOR, Cell, Plan, mode_flops

SLOW_IMPLS = {"sdpa-math": 12.0, "standard": 12.0}   # cost weights for the ETA (per FLOP, vs flash)


# ------------------------------------------------------------------------------ rows

def base_row(cell: Cell) -> dict:
    p = cell.problem
    kind = "rung" if not (cell.impl.startswith("sdpa-") or cell.impl == "standard") else (
        "sdpa" if cell.impl.startswith("sdpa-") else "eager")
    return {"impl": cell.impl, "impl_kind": kind, "label": p.label(), "batch": p.batch, "heads": p.heads,
            "heads_kv": p.heads_kv, "seqlen_q": p.seqlen_q, "seqlen_k": p.seqlen_k, "head_dim": p.head_dim,
            "causal": p.causal, "dtype": p.dtype, "mode": cell.mode, "flops": mode_flops(p, cell.mode)}


def status_row(cell: Cell, status: str, reason: str, timing: str = "events") -> dict:
    return {**base_row(cell), "timing": timing, "status": status, "reason": reason}


def timed_row(cell: Cell, timing, peak_bytes: int | None, peaks: dict | None) -> dict:
    p = cell.problem
    row = {**base_row(cell), "timing": timing.method, "status": "ok", "reason": "",
           "median_ms": timing.median, "mean_ms": timing.mean, "std_ms": timing.std,
           "ci95_low_ms": timing.ci95_low, "ci95_high_ms": timing.ci95_high, "min_ms": timing.min,
           "max_ms": timing.max, "reps": timing.reps, "warmup": timing.warmup}
    tokens = p.batch * p.seqlen_q
    row["tflops"] = row["flops"] / (timing.median * 1e-3) / 1e12
    peak_key = "fp32_tflops" if p.dtype == "float32" else "tensor_fp16_tflops"
    row["pct_of_peak"] = 100 * row["tflops"] / peaks[peak_key] if peaks and peaks.get(peak_key) else None
    row["tokens_per_s"] = tokens / (timing.median * 1e-3)
    row["time_per_token_us"] = timing.median * 1e3 / tokens
    row["peak_memory_bytes"] = peak_bytes
    row["memory_per_token_bytes"] = peak_bytes / tokens if peak_bytes is not None else None
    return row


def cell_cost(cell: Cell, budget_s: float = 0.4) -> float:
    """Estimated seconds of a cell for the ETA: ~37 calls at ~300 TFLOP/s (slow implementations
    weighted), capped by the cell budget plus two warm-up calls, plus a fixed overhead."""
    call_s = cell.problem.flops * MODE_FLOP_FACTOR[cell.mode] * SLOW_IMPLS.get(cell.impl, 1.0) / 300e12
    return min(37 * call_s, budget_s + 3 * call_s) + 0.05


# ------------------------------------------------------------------------------ measuring on a GPU

class GpuMeasurer:
    """Measures cells on the current CUDA device; keeps built rungs, their check results and the
    current problem's inputs between cells."""

    def __init__(self, plan: Plan, log: Callable[[str], None] | None = None):
        from lab.environment import device_info, require_gpu

        require_gpu("sweep")
        self.plan = plan
        self.log = log or (lambda s: None)
        self.device = device_info()
        self.peaks = self.device.get("peaks")
        self._modules: dict[str, object] = {}
        self._gates: dict[tuple, str | None] = {}
        self._inputs: tuple | None = None

    # rungs: build once, check once per dtype (in a child), then time
    def _rung(self, cell: Cell):
        from lab.environment import require_compute_capability
        from lab.ladder import build, registry
        from lab.measure.isolated import check_in_child
        from lab.measure.problem import check_supported

        variant = registry.get(cell.impl)
        try:
            check_supported(variant, cell.problem)
            require_compute_capability(variant)
        except LabError as e:
            return None, str(e)
        if variant.id not in self._modules:
            self._modules[variant.id] = build.build(variant).module
        gate_key = (variant.id, cell.problem.dtype)
        if gate_key not in self._gates:
            self.log(f"checking {variant.id} against float64 on {cell.problem.label()} and 8 ragged shapes")
            try:
                result = check_in_child(variant, cell.problem, extra_shapes=8)
                self._gates[gate_key] = None if result.get("passed") else (
                    f"failed its float64 check ({result.get('failed_shape') or result.get('error') or 'see lab check'}): not timed")
            except CheckFailed as e:
                self._gates[gate_key] = f"failed its float64 check: {e}"
        if self._gates[gate_key]:
            return None, self._gates[gate_key]
        return self._modules[variant.id], None

    def inputs(self, problem):
        from lab.measure.problem import make_inputs

        if self._inputs is None or self._inputs[0] != problem:
            self._inputs = None
            self._inputs = (problem, *make_inputs(problem, seed=0))
        return self._inputs[1:]

    def release(self):
        import torch

        self._inputs = None
        torch.cuda.empty_cache()

    def __call__(self, cell: Cell) -> list[dict]:
        import contextlib

        import torch

        from lab.measure.baselines import baseline_forward, unavailable_reason
        from lab.measure.bench import EVENTS, GRAPH, time_call
        from lab.measure.modes import has_backward, make_call, rung_forward

        p = cell.problem
        if cell.impl in self.plan.rungs:
            module, why = self._rung(cell)
            if module is None:
                return [status_row(cell, "failed" if "check" in why else "unsupported", why)]
            if cell.mode != "fwd" and not has_backward(module):
                return [status_row(cell, "unsupported", f"{cell.impl} provides no backward launcher "
                                   "(the launcher contract of kernels/common.cuh has a forward only)")]
            forward, context = rung_forward(module, p), contextlib.nullcontext
        else:
            forward, context = baseline_forward(cell.impl, p)
        methods = {"auto": [EVENTS], "events": [EVENTS], "graph": [GRAPH], "both": [EVENTS, GRAPH]}[self.plan.timing]
        rows: list[dict] = []
        i = 0
        while i < len(methods):
            method = methods[i]
            i += 1
            try:
                caught = []
                with warnings.catch_warnings(record=True) as caught, context():
                    warnings.simplefilter("always")
                    q, k, v = self.inputs(p)
                    stream = torch.cuda.Stream() if method == GRAPH else None
                    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                        call = make_call(forward, q, k, v, cell.mode)
                        timing, peak = time_call(call, method, self.plan.reps, self.plan.warmup, self.plan.l2_flush,
                                                 self.plan.cell_budget_s, stream=stream)
                    del call
                rows.append(timed_row(cell, timing, peak, self.peaks))
                if (self.plan.timing == "auto" and method == EVENTS and timing.median < GRAPH_AUTO_BELOW_MS):
                    methods.append(GRAPH)   # small shape: the call latency is partly host; add device time
            except torch.OutOfMemoryError as e:
                rows.append(status_row(cell, "oom", _oom_reason(cell, e), method))
                self.release()
            except (RuntimeError, ValueError) as e:
                reason = unavailable_reason([str(w.message) for w in caught], e)
                status = "failed" if method == GRAPH else "unavailable"
                rows.append(status_row(cell, status, (f"CUDA graph capture failed: {reason}" if method == GRAPH
                                                      else reason), method))
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - one method's failure must not lose the other's row
                rows.append(status_row(cell, "failed", f"{type(e).__name__}: {str(e).strip()[:300]}", method))
        return rows


def _oom_reason(cell: Cell, error: BaseException) -> str:
    first = ". ".join(str(error).strip().split(". ")[:2])[:200]
    p = cell.problem
    if cell.impl in ("standard", "sdpa-math"):
        scores = p.batch * p.heads * p.seqlen_q * p.seqlen_k * {"float32": 4}.get(p.dtype, 2)
        return f"out of memory ({first}); the N x N scores alone take {scores / 2**30:.1f} GiB"
    return f"out of memory ({first})"


# ------------------------------------------------------------------------------ the loop

class Progress:
    """A rich progress bar with ETA on a terminal; one line per cell otherwise (logs of a batch job).
    Advances by cell cost (FLOPs, slow backends weighted), so the ETA does not assume equal cells."""

    def __init__(self, cells: list[Cell], title: str, enabled: bool = True):
        self.total = sum(cell_cost(c) for c in cells) or 1.0
        self.count, self.done_cost, self.done = len(cells), 0.0, 0
        self.t0 = time.perf_counter()
        self.enabled = enabled
        self._rich = None
        if enabled and sys.stderr.isatty():
            from rich.progress import (BarColumn, Progress as RichProgress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            from rich.console import Console

            self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[cells]}"),
                                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                      console=Console(stderr=True), transient=False)
            self._task = self._rich.add_task(title, total=self.total, cells=f"0/{self.count} cells")
            self._rich.start()

    def eta_s(self) -> float | None:
        """From the rate since the first cell (which also builds and checks a rung: not typical)."""
        if self.done < 2:
            return None
        elapsed = time.perf_counter() - self.t1
        return elapsed / (self.done_cost - self.first_cost) * (self.total - self.done_cost)

    def advance(self, cell: Cell, rows: list[dict]) -> None:
        self.done += 1
        self.done_cost += cell_cost(cell)
        if self.done == 1:
            self.t1, self.first_cost = time.perf_counter(), self.done_cost
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done_cost, cells=f"{self.done}/{self.count} cells",
                              description=f"{cell.impl} {cell.problem.label()} {cell.mode}")
            return
        eta = self.eta_s()
        summary = "; ".join(f"{r['timing']} {r['median_ms']:.4g} ms" if r.get("status") == "ok"
                            else f"{r['timing']} {r['status']}" for r in rows)
        print(f"[lab] {self.done}/{self.count} {cell.impl} {cell.problem.label()} {cell.mode}: {summary or 'done'}"
              + (f" (ETA {eta:.0f} s)" if eta is not None else ""), file=sys.stderr, flush=True)

    def log(self, text: str) -> None:
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.console.print(f"[lab] {text}")
        else:
            print(f"[lab] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


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


def load_measurer(spec: str | None, plan: Plan, log=None):
    """The default GPU measurer, or `module:function` called as function(plan) -> measure(cell)."""
    if not spec:
        return GpuMeasurer(plan, log)
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)(plan)


def environment_facts(measurer) -> dict:
    from lab.environment import software_info

    device = getattr(measurer, "device", None) or {"name": "unknown (the measurer gave no device)"}
    software = getattr(measurer, "software", None) or software_info()
    return {"device": device, "software": software}


def run_in_process(sweep, cells: list[Cell], measure_with: str | None = None, show_progress: bool = True) -> int:
    """The single-process sweep: measure the cells here, journal them; returns cells done."""
    from lab.measure.sweepplan import Plan

    plan = Plan.from_dict(sweep.plan_dict)
    progress = Progress(cells, f"sweep {sweep.id}", show_progress)
    try:
        measurer = load_measurer(measure_with, plan, progress.log)
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

def run_on_gpus(sweep, gpus: list[str], measure_with: str | None = None, show_progress: bool = True,
                poll_s: float = 0.5) -> tuple[int, list[str]]:
    """Start one worker process per GPU (CUDA_VISIBLE_DEVICES=<gpu>), worker i measuring the i-th of
    N interleaved shards of the cells still missing; wait for all. Returns (cells done, messages
    about workers that died). A dead worker's finished cells are in its journal and stay."""
    from lab.measure.isolated import child_env

    missing = sweep.missing_cells()
    n = len(gpus)
    if not measure_with:   # build each rung once here: workers building into one cache at once would race
        from lab.ladder import build, registry

        for rid in dict.fromkeys(c.impl for c in missing):
            if rid in sweep.plan_dict.get("rungs", {}):
                build.build(registry.get(rid))
    procs = []
    for i, gpu in enumerate(gpus, start=1):
        # the assignment is fixed here: a worker reading "what is missing" later would see the others' progress
        (sweep.path / f".worker-{i}.cells.json").write_text(json.dumps([c.key for c in _slice(missing, i, n)]))
        env = child_env()
        env["CUDA_VISIBLE_DEVICES"] = gpu
        argv = [sys.executable, "-m", "lab.measure.sweep", "--worker", str(sweep.path), "--slice", f"{i}/{n}",
                "--part", f"gpu{gpu}-{i}"]
        if measure_with:
            argv += ["--measure-with", measure_with]
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
    from lab import __version__
    from lab.environment import git_info

    return {"lab_version": __version__, "git": git_info(), "plan": plan.to_dict(), "plan_key": plan.key(),
            "device": None, "devices": [], "software": None}


def execute(sweep, gpus: list[str] | None = None, measure_with: str | None = None,
            show_progress: bool = True) -> tuple[str, list[str]]:
    """Measure the sweep's missing cells (here, or one worker per GPU), then fold the rows into its
    table. Returns (status, messages). Ctrl-C: the finished rows are folded in, status interrupted,
    and KeyboardInterrupt is raised again for the caller to exit on."""
    messages: list[str] = []
    try:
        if gpus:
            _, messages = run_on_gpus(sweep, gpus, measure_with, show_progress)
        else:
            run_in_process(sweep, sweep.missing_cells(), measure_with, show_progress)
    except KeyboardInterrupt:
        if not sweep.rows() and sweep.manifest.get("status") == "running" and not sweep.manifest.get("cells_planned"):
            import shutil

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


def _worker_main(argv=None) -> int:
    """`python -m lab.measure.sweep --worker SWEEP_DIR --slice i/N --part NAME`: measure the i-th
    slice of the sweep's missing cells on the visible GPU, appending to journal-NAME.jsonl."""
    from lab.measure.sweepplan import Plan, parse_shard
    from lab.store.sweeps import Sweep

    ap = argparse.ArgumentParser(prog="python -m lab.measure.sweep")
    ap.add_argument("--worker", required=True)
    ap.add_argument("--slice", required=True)
    ap.add_argument("--part", required=True)
    ap.add_argument("--measure-with", default=None)
    a = ap.parse_args(argv)
    sweep = Sweep(Path(a.worker))
    os.environ["LAB_TEST_PART"] = a.part   # lets a test's measurer know which worker it is
    i, n = parse_shard(a.slice)
    assigned = sweep.path / f".worker-{i}.cells.json"
    keys = set(json.loads(assigned.read_text())) if assigned.is_file() else None
    cells = [c for c in sweep.missing_cells() if c.key in keys] if keys is not None else _slice(sweep.missing_cells(), i, n)
    plan = Plan.from_dict(sweep.plan_dict)
    try:
        measurer = load_measurer(a.measure_with, plan, lambda s: print(f"[lab] {s}", file=sys.stderr, flush=True))
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
    sys.exit(_worker_main())

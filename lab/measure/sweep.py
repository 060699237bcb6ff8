"""`lab sweep`'s measuring: a plan's cells become rows. lab.sweeping drives it into a stored sweep
(lab.store.sweeps), on one GPU or one worker process per GPU; this module knows no store.

The loop (lab.sweeping.run_cells) is independent of how a cell is measured: `GpuMeasurer` times real
implementations; tests hand in another one (lab.sweeping.Measuring), so sharding, Ctrl-C, resume and
a dying worker are tested on a machine without a GPU.

Every cell becomes rows, never an exception: out of memory, a backend that refuses the shape, a rung
without backward, a rung that failed its float64 check are rows with a status and a reason.
Correctness gates timing: a rung is checked in a child process (lab.measure.isolated) on its first
problem of the sweep plus seeded ragged shapes, causal and not, before any of its cells is timed.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lab.console import line, rich_console, say
from lab.environment import device_info, require_gpu, software_info
from lab.errors import LabError
from lab.ladder import registry
from lab.measure import rates
from lab.measure.baselines import attention, unavailable_reason
from lab.measure.bench import summarize
from lab.measure.call import rung
from lab.measure.checked import Measurement, Workload, describe
from lab.measure.floor import attention_floor
from lab.measure.gate import GATE_SHAPES, gated
from lab.measure.problem import check_supported
from lab.measure.timed import TimingRefused
from lab.measure.sweepplan import Cell, Plan, timing_methods

SLOW_IMPLS = {"sdpa-math": 12.0, "standard": 12.0}   # cost weights for the ETA (per FLOP, vs flash)


# ------------------------------------------------------------------------------ rows

def base_row(cell: Cell) -> dict:
    p = cell.problem
    kind = "rung" if not (cell.impl.startswith("sdpa-") or cell.impl == "standard") else (
        "sdpa" if cell.impl.startswith("sdpa-") else "eager")
    return {"impl": cell.impl, "impl_kind": kind, "label": p.label(), "batch": p.batch, "heads": p.heads,
            "heads_kv": p.heads_kv, "seqlen_q": p.seqlen_q, "seqlen_k": p.seqlen_k, "head_dim": p.head_dim,
            "causal": p.causal, "dtype": p.dtype, "mode": cell.mode,
            # what ran: a rung's deterministic backward where the problem asks for it; a baseline's backward is
            # torch's default whatever the problem asks (SDPA takes no such flag), so its row says False
            "deterministic": p.deterministic and kind == "rung", "flops": rates.flops(p, cell.mode)}


def status_row(cell: Cell, status: str, reason: str, timing: str = "events") -> dict:
    return {**base_row(cell), "timing": timing, "status": status, "reason": reason}


def timed_row(cell: Cell, timing, peak_bytes: int | None, peaks: dict | None) -> dict:
    p = cell.problem
    row = {**base_row(cell), "timing": timing.method, "status": "ok", "reason": "",
           "median_ms": timing.median, "mean_ms": timing.mean, "std_ms": timing.std,
           "ci95_low_ms": timing.ci95_low, "ci95_high_ms": timing.ci95_high, "min_ms": timing.min,
           "max_ms": timing.max, "reps": timing.reps, "warmup": timing.warmup,
           "passes": 1, "pass_medians_ms": [timing.median],
           # how its start was taken (lab.measure.timed's hold); None from a measurer whose timings have no checks
           "held_start": (timing.checks or {}).get("held_start"), "hold_retries": (timing.checks or {}).get("hold_retries")}
    if (timing.checks or {}).get("under_load_ms"):   # under load only: other sweeps' rows keep their columns
        row.update({k: timing.checks.get(k) for k in LOAD_COLUMNS})
    row["tflops"] = rates.tflops(row["flops"], timing.median)
    row["pct_of_peak"] = rates.pct_of_peak(row["tflops"], peaks, p.dtype)
    _rates(row, timing.median, peak_bytes)
    if timing.samples:
        row[SAMPLES] = list(timing.samples)   # for combine_passes, which takes them out of the row
    return row


SAMPLES = "samples_ms"   # a pass's repetitions, carried from the measurer to combine_passes, never stored
LOAD_COLUMNS = ("under_load_ms", "load_sm_clock_mhz", "load_power_capped_share")
"""A row timed under load (lab.measure.timed, UNDER LOAD): the stretch, NVML's SM clock at the stretches' ends
(median) and the share of them the power limit held down; pooled over passes as the median and the mean."""


def _rates(row: dict, median_ms: float, peak_bytes: int | None) -> None:
    """The row's per-token figures from its median and peak memory (timed_row's, and a pooled row's)."""
    tokens = row["batch"] * row["seqlen_q"]
    row["tokens_per_s"] = tokens / (median_ms * 1e-3)
    row["time_per_token_us"] = median_ms * 1e3 / tokens
    row["peak_memory_bytes"] = peak_bytes
    row["memory_per_token_bytes"] = peak_bytes / tokens if peak_bytes is not None else None


# ------------------------------------------------------------------------------ passes

def combine_passes(per_pass: list[list[dict]]) -> list[dict]:
    """A cell's rows from its passes (each pass: the rows one call of the measurer gave, one per timing
    method), one row per timing method. Where every pass timed it: the median of all the passes'
    repetitions pooled (of the pass medians where a measurer gave no samples), CI95 the union of the
    passes' CI95s and the pooled one (an interval that holds every pass's median: the drift between
    passes, seconds apart, is what one burst's CI95 leaves out), reps the total, and `passes` and
    `pass_medians_ms` to show the drift. A pass that did not time it (refused, failed, out of memory)
    makes the row that pass's row: a call caught by one pass is never timed by the others. A method
    only some passes timed (a measurer of its own choosing; lab's decides the methods before timing,
    timing_methods) pools the passes that did."""
    n = len(per_pass)
    by_timing: dict[str, list[tuple[int, dict]]] = {}
    for k, rows in enumerate(per_pass):
        for r in rows:
            by_timing.setdefault(r.get("timing"), []).append((k, r))
    out = []
    for found in by_timing.values():
        bad = next(((k, r) for k, r in found if r.get("status") != "ok"), None)
        if bad is not None:
            k, r = bad
            r = {key: v for key, v in r.items() if key != SAMPLES}
            if k and r.get("reason") is not None:   # the earlier passes timed it: say which pass did not
                r["reason"] = f"pass {k + 1} of {n}: {r['reason']}"
            out.append(r)
        else:
            out.append(_pooled([r for _, r in found]))
    return out


def _pooled(rows: list[dict]) -> dict:
    first = rows[0]
    row = {k: v for k, v in first.items() if k != SAMPLES}
    medians = [r["median_ms"] for r in rows]
    samples = [r.get(SAMPLES) for r in rows]
    if len(rows) == 1:
        pass
    elif all(samples):
        t = summarize([x for s in samples for x in s], first.get("warmup") or 0, True)
        row.update(median_ms=t.median, mean_ms=t.mean, std_ms=t.std, min_ms=t.min, max_ms=t.max, reps=t.reps,
                   ci95_low_ms=t.ci95_low, ci95_high_ms=t.ci95_high)
    else:   # statistics only: the median of the pass medians, the pooled mean and standard deviation
        reps = [r["reps"] for r in rows]
        total = sum(reps)
        mean = sum(r["mean_ms"] * n for r, n in zip(rows, reps)) / total
        var = sum((n - 1) * r["std_ms"] ** 2 + n * (r["mean_ms"] - mean) ** 2 for r, n in zip(rows, reps)) / max(1, total - 1)
        row.update(median_ms=statistics.median(medians), mean_ms=mean, std_ms=math.sqrt(var), reps=total,
                   min_ms=min(r["min_ms"] for r in rows), max_ms=max(r["max_ms"] for r in rows))
    row["ci95_low_ms"] = min([row["ci95_low_ms"], *(r["ci95_low_ms"] for r in rows)])
    row["ci95_high_ms"] = max([row["ci95_high_ms"], *(r["ci95_high_ms"] for r in rows)])
    row["passes"], row["pass_medians_ms"] = len(rows), medians
    retries = [r.get("hold_retries") for r in rows]
    row["hold_retries"] = sum(retries) if all(x is not None for x in retries) else None
    clocks = [r["load_sm_clock_mhz"] for r in rows if r.get("load_sm_clock_mhz") is not None]
    if clocks:
        row["load_sm_clock_mhz"] = statistics.median(clocks)
    capped = [r["load_power_capped_share"] for r in rows if r.get("load_power_capped_share") is not None]
    if capped:
        row["load_power_capped_share"] = sum(capped) / len(capped)
    tflops = rates.tflops(row["flops"], row["median_ms"])
    if row.get("pct_of_peak") is not None and first.get("tflops"):
        row["pct_of_peak"] = row["pct_of_peak"] * tflops / first["tflops"]
    row["tflops"] = tflops
    peaks = [r["peak_memory_bytes"] for r in rows if r.get("peak_memory_bytes") is not None]
    _rates(row, row["median_ms"], max(peaks) if peaks else None)
    return row


def cell_cost(cell: Cell, budget_s: float = 0.4) -> float:
    """Estimated seconds of a cell for the ETA: ~37 calls at ~300 TFLOP/s (slow implementations
    weighted), capped by the cell budget plus two warm-up calls, plus a fixed overhead."""
    call_s = rates.flops(cell.problem, cell.mode) * SLOW_IMPLS.get(cell.impl, 1.0) / 300e12
    return min(37 * call_s, budget_s + 3 * call_s) + 0.05


# ------------------------------------------------------------------------------ measuring on a GPU

class GpuMeasurer:
    """Measures cells on the current CUDA device; keeps built rungs, their check results and the
    current problem's inputs between cells."""

    gates = None   # where the rungs' float64 verdicts come from when shared (lab.sweeping.Gates); None: gated here

    def __init__(self, plan: Plan, log: Callable[[str], None] | None = None, gates=None):
        require_gpu("sweep")
        self.gates = gates   # the verdicts' source shared by a sweep's workers (lab.sweeping.Gates), or None
        self.plan = plan
        self.log = log or (lambda s: None)
        self.device = device_info()
        self.peaks = self.device.get("peaks")
        self._gates: dict[tuple, object] = {}
        self._workload: Workload | None = None

    # rungs: built once, gated once per (dtype, mode) in a child (lab.measure.gate), then timed
    def _rung(self, cell: Cell):
        """(the rung as lab.measure.call calls it, None) or (None, why it is not timed)."""
        variant = registry.get(cell.impl)
        gate_key = (variant.id, cell.problem.dtype, cell.mode)
        if gate_key not in self._gates:
            self.log(f"checking {variant.id} {cell.mode} against float64 on {cell.problem.label()} "
                     f"and {GATE_SHAPES} ragged shapes")
            try:
                self._gates[gate_key] = gated(variant, cell.problem, cell.mode,
                                              verdict_of=self.gates.verdict if self.gates is not None else None)
            except LabError as e:   # what the rung cannot run (no backward, a head_dim it lacks): a row saying why
                return None, str(e)
        done = self._gates[gate_key]
        if not done.passed:
            return None, done.reason()
        try:   # a later cell of another head_dim or GQA shape than the gated one
            check_supported(variant, cell.problem)
        except LabError as e:
            return None, str(e)
        return rung(variant, done.module, cell.problem), None

    def workload(self, problem, layout: str = "BHND") -> Workload:
        """The problem's input sets and references (lab.measure.checked.Workload) in `layout`, shared by
        its cells: the float64 references are made once per shape, not once per implementation."""
        if self._workload is None or (self._workload.problem, self._workload.layout) != (problem, layout):
            self._workload = None
            self._workload = Workload(problem, layout)
        return self._workload

    @contextlib.contextmanager
    def turn(self):
        """This GPU to this process alone while a cell is gated and measured: workers that share one GPU
        (`--gpus 0,0`) take turns, so one's kernels never run inside the other's timed region (the
        float64 references included, which would slow its calls). An OS lock on a file named after
        the GPU's UUID, released when the process ends however it ends."""
        import torch

        if not torch.cuda.is_available():   # nothing to share (a test's measurer refusing a cell before any GPU work)
            yield
            return
        uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", "gpu"))
        path = Path(tempfile.gettempdir()) / f"lab-gpu-{uuid}.lock"
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def release(self):
        import torch   # lazy, here and below: the sweep's plan, rows and tests import without torch

        self._workload = None
        torch.cuda.empty_cache()

    def __call__(self, cell: Cell) -> list[dict]:
        if cell.impl in self.plan.rungs:
            # the gate first: waiting for a verdict another worker is checking must not hold this GPU,
            # or a worker sharing it would wait for the GPU while holding the verdict (a deadlock);
            # a gate checked here (no shared verdicts) runs its child on the GPU, so it takes its turn
            with self.turn() if self.gates is None else contextlib.nullcontext():
                self._rung(cell)
        with self.turn():   # the references and the timing run on the GPU
            return self._measure(cell)

    def _measure(self, cell: Cell) -> list[dict]:
        import torch

        p = cell.problem
        is_rung = cell.impl in self.plan.rungs
        if is_rung:
            impl, why = self._rung(cell)
            if impl is None:
                return [status_row(cell, "failed" if "float64 check" in why else "unsupported", why)]
        else:
            impl = attention(cell.impl, p)
        floor = attention_floor(p, cell.mode, self.peaks, self.device.get("name"))
        rows: list[dict] = []
        # decided before timing, from the cell's floor (lab.measure.sweepplan.timing_methods): the same rows
        # in every pass and every run, whatever a call measured
        for method in timing_methods(self.plan.timing, floor, self.plan.l2_flush):
            try:
                caught = []
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    # a rung's every output is checked (the baselines are the reference); the one
                    # measurement (lab.measure.checked) rotates the inputs and times by `method`
                    measurement = Measurement(impl, self.workload(p, impl.layout), cell.mode, verify=is_rung,
                                              floor=floor, what=describe(cell.impl, p, cell.mode))
                    timing = measurement.time(method, reps=self.plan.reps, warmup=self.plan.warmup,
                                              l2_flush=self.plan.l2_flush, budget_s=self.plan.cell_budget_s,
                                              under_load_ms=self.plan.under_load_ms)
                    del measurement
                rows.append(timed_row(cell, timing, timing.peak_memory_bytes, self.peaks))
            except TimingRefused as refused:   # measured, but not a time the lab prints: a failed row, its reason
                rows.append(status_row(cell, "failed", refused.row_reason(), method))
            except torch.OutOfMemoryError as e:
                rows.append(status_row(cell, "oom", _oom_reason(cell, e), method))
                self.release()
            except (RuntimeError, ValueError) as e:
                rows.append(raised_row(cell, method, e, [str(w.message) for w in caught], is_rung))
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - one method's failure must not lose the other's row
                rows.append(status_row(cell, "failed", f"{type(e).__name__}: {str(e).strip()[:300]}", method))
        return rows


def raised_row(cell: Cell, method: str, error: BaseException, messages: list[str], is_rung: bool) -> dict:
    """The row of a cell whose call raised `error` (a RuntimeError or ValueError) while `method` timed
    it, `messages` the warnings it raised with. A baseline's: PyTorch's backend refusing the problem
    ("No available kernel", its warnings saying why), `unavailable` by either method; a rung's: the
    rung failed, with the error's type and first line. The method does not make either a capture
    failure: the timer refuses a call that cannot be captured itself (TimingRefused, graph-capture-failed),
    so what reaches here was raised by an eager warm-up call or a replay, as it would be by events."""
    if not is_rung:
        return status_row(cell, "unavailable", unavailable_reason(messages, error), method)
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return status_row(cell, "failed", f"{type(error).__name__}: {first}" if first else type(error).__name__, method)


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
        self.count, self.done_cost, self.done = len(cells), 0.0, 0.0   # done: cells, fractions while in passes
        self.t0, self.t1, self.first_cost = time.perf_counter(), None, 0.0
        self.enabled = enabled
        self._rich = None
        if enabled and sys.stderr.isatty():
            self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[cells]}"),
                                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                      console=rich_console(stderr=True), transient=False)
            self._task = self._rich.add_task(title, total=self.total, cells=f"0/{self.count} cells")
            self._rich.start()

    def eta_s(self) -> float | None:
        """From the rate since the first cell (which also builds and checks a rung: not typical)."""
        if self.done < 2 or self.done_cost <= self.first_cost:
            return None
        elapsed = time.perf_counter() - self.t1
        return elapsed / (self.done_cost - self.first_cost) * (self.total - self.done_cost)

    def advance(self, cell: Cell, rows: list[dict], share: float = 1.0, step: str = "") -> None:
        """`cell` measured, or `share` of it (one of its passes; `step` says which)."""
        self.done += share
        self.done_cost += cell_cost(cell) * share
        if self.t1 is None:
            self.t1, self.first_cost = time.perf_counter(), self.done_cost
        if not self.enabled:
            return
        what = f"{cell.impl} {cell.problem.label()} {cell.mode}" + (f" ({step})" if step else "")
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done_cost, cells=f"{int(self.done + 1e-9)}/{self.count} cells",
                              description=what)
            return
        eta = self.eta_s()
        summary = "; ".join(f"{r['timing']} {r['median_ms']:.4g} ms" if r.get("status") == "ok"
                            else f"{r['timing']} {r['status']}" for r in rows)
        say(f"{int(self.done + 1e-9)}/{self.count} {what}: {summary or 'done'}"
            + (f" (ETA {eta:.0f} s)" if eta is not None else ""))

    def log(self, text: str) -> None:
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.console.print(line(text), markup=False)
        else:
            say(text)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


def environment_facts(measurer) -> dict:
    device = getattr(measurer, "device", None) or {"name": "unknown (the measurer gave no device)"}
    software = getattr(measurer, "software", None) or software_info()
    return {"device": device, "software": software}

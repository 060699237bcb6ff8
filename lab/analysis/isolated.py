"""An Nsight Compute report read in a child process, so that NVIDIA's ncu_report module crashing on it
ends the child, not the lab.

Why: a copy of the module built for another Python (Nsight Compute 2025.3.1's extras/python under
Python 3.12, on the GPU machine) can load a report and then die of a segfault reading it. On
2026-11-27 `lab profile` died so in its analysis, after minutes of building, checking and profiling,
with no word but the shell's. lab.profilers.ncu probes the module's import and the report's load in a
child; the analysis reads far more of the report (every metric, the per-PC source counters), so the
whole reading runs in the child here and a crash is named, with the fix (ncu.MODULE_FIX).

What it costs: a Python start that imports the lab's analysis and pandas, about 1.5 s on the lab's
2-core CPU machine, beside the measuring child's timing in `lab profile`.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

from lab.errors import LabError
from lab.profilers import ncu


class ChildDied(LabError):
    """The child reading a report died (a signal, not an exception): the module crashed on the report."""


def in_child(fn: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in a fresh child process (spawned: it shares no threads or CUDA state with
    this one), its result or its exception returned here; a child that dies (a signal, not an
    exception) raises LabError naming `what` and the ncu_report module it used."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(fn, *args, **kwargs).result()
        except BrokenProcessPool:
            try:
                module = f"ncu_report ({ncu.module_file(ncu.find_ncu_report_module())})"
            except LabError:
                module = "ncu_report"
            raise ChildDied(f"{what}: its child process died reading the report with {module}",
                            hint=ncu.MODULE_FIX) from None

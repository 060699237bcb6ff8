"""An Nsight Compute report read in a child process, so that NVIDIA's ncu_report module crashing on it
ends the child, not the lab.

Why: a copy of the module built for another Python (Nsight Compute 2025.3.1's extras/python under
Python 3.12, on the GPU machine) can load a report and then die of a segfault reading it. On
2026-11-27 `lab profile` died so in its analysis, after minutes of building, checking and profiling,
with no word but the shell's. lab.profilers.ncu probes the module's import and the report's load in a
child; the analysis reads far more of the report (every metric, the per-PC source counters), so the
whole reading runs in the child here (which then needs no probe of its own: ncu.read_reports_here) and
a crash is named, with how the child ended and the fix (ncu.MODULE_FIX).

What it costs: a Python start that imports the lab's analysis and pandas, about 1.5 s on the lab's
2-core CPU machine, beside the measuring child's timing in `lab profile`.
"""

from __future__ import annotations

import multiprocessing
from typing import Any, Callable

from lab.children import how_it_ended
from lab.errors import LabError
from lab.profilers import ncu


class ChildDied(LabError):
    """The child reading a report died (a signal, not an exception): the module crashed on the report."""


def in_child(fn: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in a fresh child process (spawned: it shares no threads or CUDA state with
    this one), its result or its exception returned here; a child that dies (a signal, not an
    exception) raises ChildDied naming `what`, how it died and the ncu_report module it used."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_serve, args=(send, fn, args, kwargs), daemon=True)
    proc.start()
    send.close()   # the child's end: the parent's recv sees EOF once the child is gone
    try:
        ok, value = receive.recv()   # before join: a large result fills the pipe until it is read
    except EOFError:
        proc.join()
        raise ChildDied(f"{what}: its child process died ({how_it_ended(proc.exitcode)}) reading the report with "
                        f"{_module()}", hint=ncu.MODULE_FIX) from None
    finally:
        receive.close()
        proc.join(timeout=10)
        if proc.is_alive():   # the caller stopped waiting (Ctrl-C): the child goes with it
            proc.kill()
    if ok:
        return value
    raise value


def _serve(send, fn, args, kwargs) -> None:
    """The child: this process reads the report itself (no probe of its own: a crash here is named by the
    parent, ncu.read_reports_here), and sends (True, result) or (False, the exception) back."""
    ncu.read_reports_here()
    try:
        out = (True, fn(*args, **kwargs))
    except Exception as e:   # noqa: BLE001 (any exception is the caller's, raised there as it was here)
        out = (False, e)
    send.send(out)
    send.close()


def _module() -> str:
    try:
        return f"ncu_report ({ncu.module_file(ncu.find_ncu_report_module())})"
    except LabError:
        return "ncu_report"

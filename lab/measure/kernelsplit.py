"""Where a call's device time goes, kernel by kernel: `lab bench --kernels`.

The calls are the bench's own: lab.measure.checked.Measurement.kernel_split traces the measurement's
call (the same implementation on the same rotating input slots, on the current stream, inside the
same context: SDPA's backend pin) right after its timing, under CUPTI through torch.profiler
(lab.measure.timed.CudaDevice.trace_calls), so no Nsight is needed and it works where nsys cannot
write a report. Each traced call starts as a timed repetition does (its inputs loaded, L2 flushed,
the GPU idle) between two marker copies on its stream; every output is checked as the timer checks
it. A call's work is every kernel and memory operation that starts after its opening marker and
before its closing one: the next call's input loading, the L2 flush and the output check run after
the closing marker, so they are not in it.

`split` turns those records into one row per kernel name (the full demangled name; shown by its short
name, lab.demangle.short_name), ordered by time: launches per call, microseconds per call (device
time, the mean over the traced calls), share of the sum, and the sum. Nothing is matched by role: a
kernel engineer reads the names. The sum is device time only (EXCLUDES), never the bench's median.
"""

from __future__ import annotations

import pandas as pd

from lab.demangle import short_name
from lab.profilers.timeline import summarize

KERNEL_CALLS = 20
"""Calls traced per implementation unless `--kernel-calls` says otherwise: the count of the script that
measured the short-N split of v8 against cuDNN (benchmarks/v8_notes.md); sum_us_min and sum_us_max
show how much the calls varied."""
MAX_KERNEL_CALLS = 1_000

EXCLUDES = ("device time of the call's kernels and memory operations (CUPTI records), summed; it excludes host "
            "time (Python, PyTorch dispatch, launch calls) and the gaps between kernels, so it is not the "
            "bench's median (call latency between CUDA events)")


def call_work(traced: list[dict]) -> list[list[tuple]]:
    """Each traced call's own work, from lab.measure.timed.traced_calls: (name, stream, start_ns, end_ns)
    of what started before the call's closing marker did (what starts after it, up to the next call's
    opening marker, is the output check and the next call's loading and L2 flush)."""
    return [[tuple(a[:4]) for a in call["work"] if a[2] < call["done_ns"]] for call in traced]


def split(calls: list[list[tuple]]) -> dict:
    """The kernel split of `calls` (one list per call of (name, stream, start_ns, end_ns): a kernel's
    demangled name, or a memory operation's nsys name such as `[CUDA memset]`). Returns a JSON-ready
    dict: calls, sum_us (the mean over calls of a call's summed device time), sum_us_min and
    sum_us_max, span_us (the mean of a call's first start to last end: the sum plus the gaps, less any
    overlap), streams, excludes, and kernels: [{name, short_name, launches_per_call, us_per_call,
    median_us_per_launch, share_pct}] ordered by time per call, most first."""
    if not calls:
        raise ValueError("a kernel split needs at least one call")
    records = [(name, stream, int(start), int(end)) for work in calls for name, stream, start, end in work]
    events = pd.DataFrame(records, columns=["name", "stream_id", "start_ns", "end_ns"])
    per_call = [sum(int(end) - int(start) for _, _, start, end in work) / 1e3 for work in calls]
    spans = [(max(int(a[3]) for a in work) - min(int(a[2]) for a in work)) / 1e3 if work else 0.0 for work in calls]
    n = len(calls)
    kernels = []
    for row in summarize(events, ["name"]).itertuples(index=False):
        kernels.append({"name": str(row.name), "short_name": short_name(str(row.name)),
                        "launches_per_call": row.instances / n, "us_per_call": float(row.total_ns) / n / 1e3,
                        "median_us_per_launch": float(row.med_ns) / 1e3, "share_pct": float(row.time_pct)})
    return {"calls": n, "sum_us": sum(per_call) / n, "sum_us_min": min(per_call), "sum_us_max": max(per_call),
            "span_us": sum(spans) / n, "streams": int(events["stream_id"].nunique()) if records else 0,
            "excludes": EXCLUDES, "kernels": kernels}


class KernelSplitFailed(Exception):
    """The trace gave no split (its markers were lost, the profiler could not start): the reason."""

"""torch.profiler (Kineto) as the timeline where nsys cannot write reports: run the launches under
it, and read its Chrome trace into the same EventTables an nsys SQLite export gives, so one piece
of code (lab.profilers.timeline) summarises both.

Kineto records, from CUPTI, what nsys records: kernels (grid, block, registers per thread, shared
memory, device, stream, correlation id), memcpy/memset, and the CUDA runtime calls that launched
them, on the calling thread. A `record_function` range plays the NVTX range's part: a kernel is in
the range when the runtime call that launched it lies inside the range on the same thread.

Reading a trace needs no torch; only `profile_launches` (run in the child, on a GPU) imports it.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Callable

import pandas as pd

from lab.demangle import demangle
from lab.errors import LabError
from lab.profilers.nsys import (KERNEL_COLUMNS, MEMORY_COLUMNS, NVTX_COLUMNS, RUNTIME_COLUMNS, EventTables,
                             empty_frame)


def profile_launches(launch: Callable[[], None], repeats: int, trace_path: Path, range_name: str) -> None:
    """Run `launch` `repeats` times under torch.profiler (CPU + CUDA activity) inside a
    record_function named `range_name`, synchronize inside the range so it spans the kernels'
    execution, and export the Chrome trace (open it in Perfetto) to `trace_path`."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    if not torch.cuda.is_available():
        raise LabError("the torch.profiler timeline needs a CUDA GPU and a CUDA build of torch")
    torch.cuda.synchronize()   # nothing from the warm-up may run into the profiled window
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function(range_name):
            for _ in range(repeats):
                launch()
            torch.cuda.synchronize()
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))


# Event categories across PyTorch versions: 1.8-1.9 wrote "Kernel", "Runtime", "Memcpy"; since
# 1.10 "kernel", "cuda_runtime", "cuda_driver", "gpu_memcpy", "gpu_memset", "user_annotation".
_KERNEL = {"kernel"}
_RUNTIME = {"cuda_runtime", "runtime", "cuda_driver"}
_MEMCPY = {"gpu_memcpy", "memcpy"}
_MEMSET = {"gpu_memset", "memset"}
_RANGE = {"user_annotation"}
# Kineto's memcpy names ("Memcpy HtoD (Pageable -> Device)") in nsys's vocabulary.
_COPY_KIND = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device",
              "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer", "HtoA": "Host-to-Array", "AtoH": "Array-to-Host",
              "AtoA": "Array-to-Array", "AtoD": "Array-to-Device", "DtoA": "Device-to-Array"}
# One trace is one process; kernels carry the device as pid, so the pid cannot join them.
_PROCESS = 0


def load_trace(path: Path) -> dict:
    """The trace JSON (gzipped too). Floats are read as Decimal so microsecond timestamps with
    three decimals become exact nanoseconds."""
    path = Path(path)
    if not path.is_file():
        raise LabError(f"{path}: no such file")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        doc = json.loads(raw, parse_float=Decimal)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LabError(f"{path} is not JSON: {e}")
    if isinstance(doc, list):   # the Chrome trace format allows a bare event array
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise LabError(f"{path} is JSON but not a Chrome trace (no traceEvents list), so not a torch.profiler trace")
    return doc


def _ns(us) -> int:
    return int((Decimal(us) * 1000).to_integral_value())


def _int(v, default=None):
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _thread(tid, names: dict) -> int:
    """Kineto writes tids as ints, some versions as strings ("stream 7", thread names)."""
    as_int = _int(tid)
    if as_int is not None:
        return as_int
    return names.setdefault(str(tid), -1 - len(names))


def read_trace(trace_path: Path) -> EventTables:
    """torch.profiler's Chrome trace as EventTables (see lab.profilers.nsys)."""
    doc = load_trace(trace_path)
    kernels, runtime, ranges, memory = [], [], [], []
    tids: dict[str, int] = {}
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e or "dur" not in e:
            continue
        cat = str(e.get("cat", "")).lower()
        args = e.get("args") or {}
        start = _ns(e["ts"])
        end = start + _ns(e["dur"])
        name = str(e.get("name", ""))
        if cat in _KERNEL:
            grid = list(args.get("grid") or [None] * 3) + [None] * 3
            block = list(args.get("block") or [None] * 3) + [None] * 3
            kernels.append([name, start, end, _int(args.get("device", e.get("pid"))), _int(args.get("stream", e.get("tid"))),
                            _PROCESS, _int(args.get("correlation")), *map(_int, grid[:3]), *map(_int, block[:3]),
                            _int(args.get("registers per thread")), None, None, _int(args.get("shared memory"))])
        elif cat in _RUNTIME:
            runtime.append([name, start, end, _PROCESS, _thread(e.get("tid"), tids), _int(args.get("correlation"))])
        elif cat in _RANGE:
            ranges.append([name, "PushPop", "", start, end, _PROCESS, _thread(e.get("tid"), tids)])
        elif cat in _MEMCPY or cat in _MEMSET:
            memory.append([_operation(name, cat), start, end, _int(args.get("bytes")),
                           _int(args.get("device", e.get("pid"))), _int(args.get("stream", e.get("tid"))),
                           _PROCESS, _int(args.get("correlation"))])
    kernel_df = _frame(kernels, KERNEL_COLUMNS)
    kernel_df["name"] = demangle(list(kernel_df["name"]))
    props = doc.get("deviceProperties") or []
    return EventTables(
        source="torch.profiler",
        kernels=kernel_df.sort_values("start_ns", kind="stable").reset_index(drop=True),
        runtime=_frame(runtime, RUNTIME_COLUMNS),
        nvtx=_frame(ranges, NVTX_COLUMNS),
        memory=_frame(memory, MEMORY_COLUMNS),
        meta={"input": str(trace_path), "gpus": [p.get("name") for p in props if isinstance(p, dict) and p.get("name")],
              "trace_schema": str(doc.get("schemaVersion")) if doc.get("schemaVersion") is not None else None},
    )


def _operation(name: str, cat: str) -> str:
    if cat in _MEMSET:
        return "[CUDA memset]"
    m = re.search(r"\b([HDAP]to[HDAP])\b", name)
    return f"[CUDA memcpy {_COPY_KIND.get(m.group(1), m.group(1)) if m else 'Unknown'}]"


def _frame(rows: list[list], columns: list[str]) -> pd.DataFrame:
    if not rows:
        return empty_frame(columns)
    df = pd.DataFrame(rows, columns=columns)
    for c in columns:
        if c not in ("name", "style", "domain", "operation"):
            df[c] = df[c].astype("Int64")   # nullable: Kineto leaves some fields out
    return df

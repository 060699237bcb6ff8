"""The timeline of a run: which kernels ran, for how long, launched from which NVTX range, what the
CUDA API and memory operations cost, and the launch overhead that decides `launch-bound`.

Sources: Nsight Systems where it can write reports, torch.profiler where it cannot (the Timeline
says which, and why). Both give raw events (lab.profilers.nsys.EventTables) that are summarised here
the way `nsys stats` summarises an export:

  kernels       cuda_gpu_kern_sum: per kernel name, instances and total/avg/med/min/max/stddev ns
  nvtx          nvtx_sum: per range name and style, instances and duration statistics
  nvtx_kernels  nvtx_kern_sum: per (range, kernel) the kernels whose launching runtime call lies
                inside the range on the same thread, counted once per enclosing range instance
  memory        cuda_gpu_mem_time_sum with the bytes of cuda_gpu_mem_size_sum
  api           cuda_api_sum
and, for the timeline chart, per-event tables: kernel_events, api_events, nvtx_events.

An `nsys stats --format csv` file holds summaries only; its Timeline has no event tables.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.table import Table
from rich.text import Text

from lab import children
from lab.demangle import demangle
from lab.errors import LabError
from lab.jsonvalues import plain
from lab.profilers import kineto, nsys
from lab.profilers.nsys import EventTables

STAT_COLUMNS = ["total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]


@dataclass
class Timeline:
    source: str                          # "nsys" or "torch.profiler"
    reason: str | None                   # why not nsys, when the source is torch.profiler
    kernels: pd.DataFrame
    nvtx: pd.DataFrame
    nvtx_kernels: pd.DataFrame
    memory: pd.DataFrame
    api: pd.DataFrame
    kernel_events: pd.DataFrame
    api_events: pd.DataFrame
    nvtx_events: pd.DataFrame
    input_format: str = ""               # "sqlite", "nsys-rep", "nsys stats csv", "torch.profiler trace"
    meta: dict = field(default_factory=dict)
    range_name: str | None = None
    launch_overhead: dict | None = None  # see launch_overhead()
    artifacts: dict[str, Path] = field(default_factory=dict)

    @property
    def launch_overhead_ns(self) -> float | None:
        return None if self.launch_overhead is None else self.launch_overhead["launch_overhead_ns"]

    def tables(self) -> dict[str, pd.DataFrame]:
        """Typed tables for the run store (lab.store.runs writes each as Parquet)."""
        return {"kernels": self.kernels, "nvtx": self.nvtx, "nvtx_kernels": self.nvtx_kernels,
                "memory": self.memory, "api": self.api, "kernel_events": self.kernel_events,
                "api_events": self.api_events, "nvtx_events": self.nvtx_events}

    def to_json(self) -> dict:
        """The `lab timeline --json` document (a JSON-ready dict)."""
        kernels_by_range: dict[tuple, list[dict]] = {}
        for rec in _records(self.nvtx_kernels, ["range", "style", "name", "instances", "nvtx_instances", *STAT_COLUMNS]):
            key = (rec.pop("range"), rec.pop("style"))
            kernels_by_range.setdefault(key, []).append(rec)
        nvtx = []
        for row in _records(self.nvtx, ["range", "style", "domain", "instances", *STAT_COLUMNS, "time_pct"]):
            row["kernels"] = kernels_by_range.pop((row["range"], row.get("style")), [])
            nvtx.append(row)
        for (rng, style), kernels in kernels_by_range.items():   # a stats CSV may hold nvtx_kern_sum alone
            nvtx.append({"range": rng, "style": style, "kernels": kernels})
        return {
            "source": self.source,
            "reason": self.reason,
            "format": self.input_format,
            "input": self.meta.get("input"),
            "nsys_version": self.meta.get("nsys_version"),
            "gpus": self.meta.get("gpus") or [],
            "kernels": _records(self.kernels, ["name", "instances", *STAT_COLUMNS, "time_pct"]),
            "nvtx": nvtx,
            "memory": _records(self.memory, ["operation", "count", *STAT_COLUMNS, "total_bytes", "time_pct"]),
            "api": _records(self.api, ["name", "num_calls", *STAT_COLUMNS, "time_pct"]),
            "launch_overhead": self.launch_overhead,
            "launch_overhead_ns": self.launch_overhead_ns,
            "artifacts": {k: str(v) for k, v in self.artifacts.items()},
        }


def _records(df: pd.DataFrame, columns: list[str]) -> list[dict]:
    """Rows as dicts with every schema column; one the source lacks (Med in a 2021 CSV) is null."""
    cols = [c for c in columns if c in df.columns]
    missing = {c: None for c in columns if c not in df.columns}
    return [{**{c: plain(v) for c, v in zip(cols, row)}, **missing} for row in df[cols].itertuples(index=False, name=None)]


# --------------------------------------------------------------------------------- summaries

def summarize(events: pd.DataFrame, keys: list[str], count: str = "instances") -> pd.DataFrame:
    """Duration statistics per group, as nsys stats computes them: total, count, mean, median,
    min, max, sample standard deviation (0 for a single instance), percent of the summed total;
    ordered by total time descending, then count, then name."""
    columns = [*keys, count, *STAT_COLUMNS, "time_pct"]
    if events.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in keys else "float64") for c in columns})
    d = events[keys].copy()
    d["duration_ns"] = (events["end_ns"].astype("int64") - events["start_ns"].astype("int64")).to_numpy()
    out = (d.groupby(keys, sort=False, dropna=False)["duration_ns"]
           .agg(total_ns="sum", n="count", avg_ns="mean", med_ns="median", min_ns="min", max_ns="max", stddev_ns="std")
           .reset_index().rename(columns={"n": count}))
    out["stddev_ns"] = out["stddev_ns"].fillna(0.0)
    grand = out["total_ns"].sum()
    out["time_pct"] = 100.0 * out["total_ns"] / grand if grand > 0 else 0.0
    out = out.sort_values(["total_ns", count, *keys], ascending=[False, True, *[True] * len(keys)], kind="stable")
    return out[columns].reset_index(drop=True)


def _memory_summary(memory: pd.DataFrame) -> pd.DataFrame:
    out = summarize(memory, ["operation"], count="count")
    if memory.empty:
        out["total_bytes"] = pd.Series(dtype="float64")
        return out
    size = memory.groupby("operation")["bytes"].sum(min_count=1).rename("total_bytes")
    return out.merge(size, left_on="operation", right_index=True, how="left")


def kernels_in_ranges(ev: EventTables) -> pd.DataFrame:
    """(The event tables are positionally indexed, 0..n-1: row labels are positions.) Pairs (NVTX range instance, kernel) where the runtime call that launched the kernel starts
    and ends inside the range on the same thread, as nvtx_kern_sum matches them. A kernel inside
    nested ranges pairs with each of them. Columns: range_row, kernel_row (indexes into ev.nvtx
    and ev.kernels)."""
    empty = pd.DataFrame({"range_row": pd.Series(dtype="int64"), "kernel_row": pd.Series(dtype="int64")})
    if ev.nvtx.empty or ev.kernels.empty or ev.runtime.empty:
        return empty
    kern = ev.kernels[["process_id", "correlation_id"]].dropna().astype("int64")
    kern = kern.assign(kernel_row=kern.index.to_numpy())
    rt = ev.runtime[["process_id", "thread_id", "correlation_id", "start_ns", "end_ns"]].dropna().astype("int64")
    launches = rt.merge(kern, on=["process_id", "correlation_id"])   # only calls that launched a captured kernel
    if launches.empty:
        return empty
    pairs = []
    ranges = ev.nvtx[["thread_id", "start_ns", "end_ns"]].astype("int64")
    for tid, rgrp in ranges.groupby("thread_id"):
        lgrp = launches[launches["thread_id"] == tid].sort_values("start_ns")
        if lgrp.empty:
            continue
        starts, ends = lgrp["start_ns"].to_numpy(), lgrp["end_ns"].to_numpy()
        lo = np.searchsorted(starts, rgrp["start_ns"].to_numpy(), side="left")
        hi = np.searchsorted(starts, rgrp["end_ns"].to_numpy(), side="right")
        counts = hi - lo
        if counts.sum() == 0:
            continue
        # for each range, the positions lo..hi-1 of the launches that start inside it
        pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
        range_rows = np.repeat(rgrp.index.to_numpy(), counts)
        range_ends = np.repeat(rgrp["end_ns"].to_numpy(), counts)
        inside = ends[pos] <= range_ends
        pairs.append(pd.DataFrame({"range_row": range_rows[inside],
                                   "kernel_row": lgrp["kernel_row"].to_numpy()[pos[inside]]}))
    return pd.concat(pairs, ignore_index=True) if pairs else empty


def _nvtx_kernel_summary(ev: EventTables, pairs: pd.DataFrame) -> pd.DataFrame:
    keys = ["range", "style", "name"]
    if pairs.empty:
        out = summarize(pd.DataFrame(columns=[*keys, "start_ns", "end_ns"]), keys)
        out.insert(3, "nvtx_instances", pd.Series(dtype="int64"))
        return out
    joined = pd.DataFrame({
        "range": ev.nvtx["name"].to_numpy()[pairs["range_row"]],
        "style": ev.nvtx["style"].to_numpy()[pairs["range_row"]],
        "range_row": pairs["range_row"].to_numpy(),
        "name": ev.kernels["name"].to_numpy()[pairs["kernel_row"]],
        "start_ns": ev.kernels["start_ns"].to_numpy()[pairs["kernel_row"]],
        "end_ns": ev.kernels["end_ns"].to_numpy()[pairs["kernel_row"]],
    })
    out = summarize(joined, keys)
    inst = joined.groupby(keys)["range_row"].nunique().rename("nvtx_instances")
    out = out.merge(inst, left_on=keys, right_index=True, how="left")
    return out[[*keys, "nvtx_instances", "instances", *STAT_COLUMNS, "time_pct"]]


def _nvtx_events(ev: EventTables, pairs: pd.DataFrame) -> pd.DataFrame:
    """Each range instance with its kernels: count, GPU busy time (the union of the kernels'
    intervals: kernels on several streams may overlap), and the span from the range's start to the
    later of its end and its last kernel's end (a range that does not synchronize closes before
    its kernels finish)."""
    out = ev.nvtx.copy()
    out["end_ns"] = out["end_ns"].astype("int64")
    out["kernels"] = 0
    out["kernel_busy_ns"] = 0
    out["span_end_ns"] = out["end_ns"]
    if not pairs.empty:
        rows = pairs["kernel_row"].to_numpy()
        p = pd.DataFrame({"range_row": pairs["range_row"].to_numpy(),
                          "s": ev.kernels["start_ns"].to_numpy()[rows].astype("int64"),
                          "e": ev.kernels["end_ns"].to_numpy()[rows].astype("int64")})
        p = p.sort_values(["range_row", "s"], kind="stable").reset_index(drop=True)
        # a kernel opens a new busy segment when it starts after every earlier kernel of its range ended
        prev_end = p.groupby("range_row")["e"].cummax().groupby(p["range_row"]).shift()
        segment = (prev_end.isna() | (p["s"] > prev_end)).cumsum()
        seg = p.groupby(segment).agg(range_row=("range_row", "first"), s=("s", "min"), e=("e", "max"))
        busy = (seg["e"] - seg["s"]).groupby(seg["range_row"]).sum()
        per_range = p.groupby("range_row").agg(kernels=("s", "size"), last_end=("e", "max"))
        idx = per_range.index
        out.loc[idx, "kernels"] = per_range["kernels"].to_numpy()
        out.loc[idx, "kernel_busy_ns"] = busy.reindex(idx).to_numpy()
        out.loc[idx, "span_end_ns"] = np.maximum(out.loc[idx, "end_ns"].to_numpy(), per_range["last_end"].to_numpy())
    out["span_ns"] = out["span_end_ns"] - out["start_ns"].astype("int64")
    return out


def launch_overhead(nvtx_events: pd.DataFrame, range_name: str, launches_per_range: int | None = None,
                    kernel_events: pd.DataFrame | None = None) -> dict | None:
    """Per launch, the range's time not covered by its kernels: (span - GPU busy) / launches, median
    over the range's instances. Launches per instance: `launches_per_range` (the child's --repeat),
    else the kernels counted in it. Near the kernels' own time, the rung is launch-bound.

    With the kernel events, the total is split in two, because they mean different things: the
    delay from the range's start to its first kernel (one-off: the first launch, and under
    torch.profiler the profiler's own start-up) and the median idle gap between consecutive kernels
    (the steady-state cost of a launch, which is what a launch-bound kernel pays every time)."""
    inst = nvtx_events[(nvtx_events["name"] == range_name) & (nvtx_events["kernels"] > 0)]
    if inst.empty:
        return None
    launches = inst["kernels"] if not launches_per_range else pd.Series(launches_per_range, index=inst.index)
    per_launch = (inst["span_ns"] - inst["kernel_busy_ns"]) / launches
    split = _overhead_split(inst, kernel_events[kernel_events["nvtx_range"] == range_name]
                            if kernel_events is not None and "nvtx_range" in kernel_events else None)
    return {"range": range_name, "instances": int(len(inst)), **split,
            "launches_per_instance": int(launches_per_range) if launches_per_range else None,
            "kernels_per_instance_median": float(inst["kernels"].median()),
            "span_ns_median": float(inst["span_ns"].median()),
            "kernel_busy_ns_median": float(inst["kernel_busy_ns"].median()),
            "launch_overhead_ns": float(per_launch.median()),
            "launch_overhead_ns_min": float(per_launch.min()),
            "launch_overhead_ns_max": float(per_launch.max())}


def _overhead_split(instances: pd.DataFrame, kernels: pd.DataFrame | None) -> dict:
    if kernels is None or kernels.empty:
        return {}
    starts = kernels["start_ns"].to_numpy()
    delays = [int(starts[(starts >= r.start_ns) & (starts <= r.end_ns)].min()) - int(r.start_ns)
              for r in instances.itertuples() if ((starts >= r.start_ns) & (starts <= r.end_ns)).any()]
    ordered = kernels.sort_values("start_ns")
    gaps = (ordered["start_ns"].to_numpy()[1:] - ordered["end_ns"].to_numpy()[:-1]).clip(min=0)
    return {"first_kernel_delay_ns_median": float(pd.Series(delays).median()) if delays else None,
            "kernel_gap_ns_median": float(pd.Series(gaps).median()) if len(gaps) else None}


def from_events(ev: EventTables, reason: str | None = None, input_format: str = "",
                range_name: str | None = None, launches_per_range: int | None = None,
                artifacts: dict[str, Path] | None = None) -> Timeline:
    if ev.kernels.empty and ev.memory.empty and ev.runtime.empty:
        what = {"nsys": "was it captured with --trace=cuda, on a machine with an NVIDIA GPU?",
                "torch.profiler": "was it recorded with ProfilerActivity.CUDA, on a GPU?"}[ev.source]
        raise LabError(f"{ev.meta.get('input', 'the capture')} holds no CUDA activity "
                       f"(no kernels, memory operations or CUDA API calls): {what}")
    pairs = kernels_in_ranges(ev)
    nvtx_events = _nvtx_events(ev, pairs)
    innermost = _innermost_range(ev, pairs)
    kernel_events = ev.kernels.assign(duration_ns=ev.kernels["end_ns"] - ev.kernels["start_ns"], nvtx_range=innermost)
    overhead = launch_overhead(nvtx_events, range_name, launches_per_range, kernel_events) if range_name else None
    return Timeline(
        source=ev.source, reason=reason,
        kernels=summarize(ev.kernels, ["name"]),
        nvtx=summarize(ev.nvtx.rename(columns={"name": "range"}), ["range", "style", "domain"]),
        nvtx_kernels=_nvtx_kernel_summary(ev, pairs),
        memory=_memory_summary(ev.memory),
        api=summarize(ev.runtime, ["name"], count="num_calls"),
        kernel_events=kernel_events, api_events=ev.runtime.copy(), nvtx_events=nvtx_events,
        input_format=input_format, meta=ev.meta, range_name=range_name, launch_overhead=overhead,
        artifacts=dict(artifacts or {}),
    )


def _innermost_range(ev: EventTables, pairs: pd.DataFrame) -> pd.Series:
    """For the chart: the innermost (latest-starting) range each kernel was launched from."""
    names = pd.Series([None] * len(ev.kernels), index=ev.kernels.index, dtype="object")
    if pairs.empty:
        return names
    p = pairs.assign(range_start=ev.nvtx["start_ns"].to_numpy()[pairs["range_row"]])
    last = p.sort_values("range_start", kind="stable").groupby("kernel_row").tail(1)
    names.loc[last["kernel_row"].to_numpy()] = ev.nvtx["name"].to_numpy()[last["range_row"]]
    return names


# ------------------------------------------------------------------------------- from a CSV

def from_stats_csv(path: Path) -> Timeline:
    tables, parsed = nsys.read_stats_csv(path)
    used = {k: v for k, v in tables.items() if k in ("kernels", "api", "memory", "nvtx", "nvtx_kernels")}
    if not used:
        reports = sorted({b.report or "an unrecognised table" for b in parsed.blocks})
        skipped = "; ".join(f"{r or '?'}: {msg}" for r, msg in parsed.skipped[:4])
        if not parsed.blocks:
            raise LabError(f"{path} holds no nsys stats CSV table (expected a header like "
                           "'Time (%),Total Time (ns),Instances,Avg (ns),...')")
        raise LabError(f"{path} holds nsys stats output for {', '.join(reports)}, none of which is a CUDA kernel, "
                       "CUDA API, GPU memory or NVTX summary" + (f"; nsys skipped those: {skipped}" if skipped else ""),
                       hint="run `nsys stats --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum "
                            "--format csv REPORT`, or pass the .sqlite / .nsys-rep itself")
    kernels = used.get("kernels", pd.DataFrame(columns=["name", "instances", *STAT_COLUMNS]))
    kernels = kernels.assign(name=demangle(list(kernels["name"])))
    memory = used.get("memory", pd.DataFrame(columns=["operation", "count", *STAT_COLUMNS]))
    if "memory_size" in tables and "total_bytes" in tables["memory_size"]:
        memory = memory.merge(tables["memory_size"][["operation", "total_bytes"]], on="operation", how="outer")
    nvtx_kernels = used.get("nvtx_kernels", pd.DataFrame(columns=["range", "style", "name"]))
    if "kernel_name" in nvtx_kernels:
        nvtx_kernels = nvtx_kernels.rename(columns={"kernel_name": "name"})
    empty_events = pd.DataFrame()
    return Timeline(source="nsys", reason=None,
                    kernels=kernels, nvtx=used.get("nvtx", pd.DataFrame(columns=["range", "style", "instances"])),
                    nvtx_kernels=nvtx_kernels, memory=memory,
                    api=used.get("api", pd.DataFrame(columns=["name", "num_calls", *STAT_COLUMNS])),
                    kernel_events=empty_events, api_events=empty_events, nvtx_events=empty_events,
                    input_format="nsys stats csv",
                    meta={"input": str(path), "reports": [b.report for b in parsed.blocks],
                          "skipped": [{"report": r, "message": m} for r, m in parsed.skipped]})


# ------------------------------------------------------------------------------- read_any

def sniff(path: Path) -> str:
    """What a file is, by its bytes where they say it and by its name where they do not."""
    path = Path(path)
    if not path.exists():
        raise LabError(f"{path}: no such file")
    if path.is_dir():
        raise LabError(f"{path} is a directory; pass an nsys export, report, stats CSV or torch.profiler trace")
    name = path.name.lower()
    if name.endswith((".ncu-rep", ".ncu-rep.xz", ".ncu-rep.gz")):
        raise LabError(f"{path} is an Nsight Compute report, not a timeline", hint=f"lab analyze {path}")
    if name.endswith(".qdstrm"):
        raise LabError(f"{path} is nsys's raw capture stream, not a report: QdstrmImporter turns it into a "
                       ".nsys-rep, and that nsys installation lacks it")
    if name.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    with open(path, "rb") as f:
        head = f.read(64)
    if not head:
        raise LabError(f"{path} is empty")
    if head.startswith(nsys.SQLITE_MAGIC):
        return "sqlite"
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        return "torch.profiler trace"
    return "nsys stats csv"


def read_any(path: Path, range_name: str | None = None, launches_per_range: int | None = None) -> Timeline:
    """`lab timeline FILE`: an nsys SQLite export, a .nsys-rep (exported with nsys), an
    `nsys stats --format csv` file, or a torch.profiler trace JSON."""
    path = Path(path)
    kind = sniff(path)
    if kind == "nsys-rep":
        db = nsys.export_sqlite(path)
        return from_events(nsys.read_sqlite(db), input_format=kind, range_name=range_name,
                           launches_per_range=launches_per_range, artifacts={"sqlite": db})
    if kind == "sqlite":
        return from_events(nsys.read_sqlite(path), input_format=kind, range_name=range_name,
                           launches_per_range=launches_per_range)
    if kind == "torch.profiler trace":
        return from_events(kineto.read_trace(path), input_format=kind, range_name=range_name,
                           launches_per_range=launches_per_range)
    if range_name:
        raise LabError("an nsys stats CSV holds summaries only: launch overhead needs the events "
                       "(pass the .sqlite or .nsys-rep)")
    return from_stats_csv(path)


# ------------------------------------------------------------------------------ collection

def collect_timeline(target_argv: list[str], out_dir: Path, range_name: str, repeats: int,
                     env: dict | None = None, use_nsys: bool | None = None, timeout_s: float = 900) -> Timeline:
    """Record the child's timeline: under nsys where `nsys_status()` says it can write reports,
    else (or when nsys wrote no report) under torch.profiler via the child's --torch-profile.

    target_argv is the child's whole command line ([python, -m, lab.measure.target, ...]); `--repeat
    <repeats>` is appended when absent. Artifacts (.nsys-rep + .sqlite, or the trace JSON, and the
    log) are written to out_dir. use_nsys=False skips nsys (tests of the fallback)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = list(target_argv)
    if "--repeat" not in argv:
        argv += ["--repeat", str(repeats)]
    if use_nsys is False:
        reason = "nsys not used: the caller asked for torch.profiler"
    else:
        status = nsys.nsys_status()
        reason = status.reason
        if status.can_write_reports:
            log = out_dir / "nsys.log"
            try:
                rep = nsys.profile(argv, out_dir / "timeline", range_name, env=env, timeout_s=timeout_s, log_path=log)
                db = nsys.export_sqlite(rep)
                events = nsys.read_sqlite(db)
                tl = from_events(events, input_format="nsys-rep", range_name=range_name,
                                 launches_per_range=repeats, artifacts={"nsys_rep": rep, "sqlite": db, "log": log})
                if tl.launch_overhead is None:
                    tl.launch_overhead = capture_window_overhead(events, repeats)
                return require_range(tl, range_name)
            except nsys.NoReport as e:
                reason = str(e)
    trace = out_dir / "torch_trace.json"
    log = out_dir / "torch_profiler.log"
    cmd = argv + ["--torch-profile", str(trace)]
    try:
        res = children.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LabError(f"the torch.profiler child ran past {timeout_s:.0f} s: {' '.join(cmd)}")
    log.write_text(" ".join(cmd) + "\n\n" + res.stdout + res.stderr)
    if res.returncode != 0 or not trace.is_file():
        tail = (res.stderr or res.stdout).strip()[-800:] or "(no output)"
        raise LabError(f"the torch.profiler child failed (exit {res.returncode}, no trace written): {tail}")
    tl = from_events(kineto.read_trace(trace), reason=reason, input_format="torch.profiler trace",
                     range_name=range_name, launches_per_range=repeats, artifacts={"trace": trace, "log": log})
    return require_range(tl, range_name)


def capture_window_overhead(ev: EventTables, launches: int) -> dict | None:
    """Launch overhead over the whole capture, for an nsys capture limited to the range
    (--capture-range=nvtx) whose export lacks the range itself: from the first launch call to the
    last kernel end, minus the time covered by kernels. Labelled as such, never as the range."""
    if ev.kernels.empty or ev.runtime.empty:
        return None
    k = ev.kernels[["process_id", "correlation_id", "start_ns", "end_ns"]].dropna().astype("int64")
    calls = ev.runtime[["process_id", "correlation_id", "start_ns"]].dropna().astype("int64")
    launched = calls.merge(k[["process_id", "correlation_id"]], on=["process_id", "correlation_id"])
    if launched.empty:
        return None
    one = pd.DataFrame({"range_row": 0, "kernel_row": range(len(k))})
    window = EventTables(ev.source, k.reset_index(drop=True), ev.runtime,
                         pd.DataFrame({"name": ["(capture window)"], "style": [""], "domain": [""],
                                       "start_ns": [int(launched["start_ns"].min())],
                                       "end_ns": [int(k["end_ns"].max())], "process_id": [0], "thread_id": [0]}),
                         ev.memory)
    over = launch_overhead(_nvtx_events(window, one), "(capture window)", launches)
    if over is not None:
        over["range"] = "(nsys capture window: the range itself is not in the export)"
    return over


def require_range(tl: Timeline, range_name: str) -> Timeline:
    if tl.launch_overhead is None:
        seen = sorted(set(tl.nvtx["range"])) if "range" in tl.nvtx else []
        raise LabError(f"the {tl.source} timeline has no kernel launched inside range {range_name!r} "
                       f"(ranges seen: {', '.join(map(repr, seen[:5])) or 'none'})")
    return tl


# ------------------------------------------------------------------------------------ text

def _fmt_ns(v) -> str:
    v = plain(v)
    if v is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.2f} {unit}"
    return f"{v:,.0f} ns"


def renderables(tl: Timeline, top: int = 15) -> list:
    """Rich tables for `lab timeline` without --json: the top rows of each summary."""
    head = f"source: {tl.source} ({tl.input_format})"
    if tl.meta.get("nsys_version"):
        head += f", nsys {tl.meta['nsys_version']}"
    if tl.meta.get("gpus"):
        head += f", {', '.join(tl.meta['gpus'])}"
    out: list = [Text(head)]
    if tl.reason:
        out.append(Text(f"why not nsys: {tl.reason}"))
    if tl.launch_overhead:
        lo = tl.launch_overhead
        out.append(Text(f"launch overhead in '{lo['range']}': {_fmt_ns(lo['launch_overhead_ns'])} per launch "
                        f"(median of {lo['instances']} range instances; range {_fmt_ns(lo['span_ns_median'])}, "
                        f"kernels busy {_fmt_ns(lo['kernel_busy_ns_median'])})"))
    specs = [("CUDA GPU kernel summary (cuda_gpu_kern_sum)", tl.kernels, "name", "instances"),
             ("CUDA GPU memory operations (cuda_gpu_mem_time_sum)", tl.memory, "operation", "count"),
             ("CUDA API summary (cuda_api_sum)", tl.api, "name", "num_calls"),
             ("NVTX ranges (nvtx_sum)", tl.nvtx, "range", "instances")]
    for title, df, label, count in specs:
        if df is None or df.empty or label not in df:
            continue
        table = Table(title=title + (f", top {top} of {len(df)}" if len(df) > top else ""), title_justify="left")
        # the text view keeps the columns a terminal can hold; --json has min, max and stddev too
        cols = [c for c in ("time_pct", "total_ns", count, "med_ns") if c in df]
        heads = {"time_pct": "Time (%)", "total_ns": "Total", count: count.replace("_", " ").title(), "med_ns": "Med"}
        for c in cols:
            table.add_column(heads[c], justify="right", no_wrap=True)
        table.add_column(label.title(), overflow="fold")
        for row in _records(df.head(top), [*cols, label]):
            cells = [f"{row[c]:.1f}" if c == "time_pct" and row[c] is not None
                     else (str(row[c]) if c == count else _fmt_ns(row[c])) for c in cols]
            name = str(row[label])
            table.add_row(*cells, name if len(name) <= 160 else name[:157] + "...")
        out.append(table)
    return out

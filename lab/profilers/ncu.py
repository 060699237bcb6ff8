"""Nsight Compute: the `ncu` command line the lab profiles with, running it, and reading its
`.ncu-rep` reports with NVIDIA's own `ncu_report` module into pandas.

Reading needs no GPU and no ncu install: the PyPI package `ncu-report` carries the module and its
library. Where only an ncu install is present, its `extras/python` folder is put on `sys.path`.
Reports may be given xz- or gzip-compressed (`x.ncu-rep.xz`): they are unpacked to a temporary file.

One DataFrame row per profiled kernel (an "action" in ncu_report's words); every metric of the
report is a column under its ncu name, with units in `df.attrs["units"]`. Instanced metrics whose
instances are named (the per-opcode SASS counts of InstructionStats) also get one column per
instance, `metric[INSTANCE]`, e.g. `sass__thread_inst_executed_true_per_opcode[FFMA]`.
"""

from __future__ import annotations

import functools
import glob
import gzip
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from lab import children
from lab.errors import LabError

# ----------------------------------------------------------------------------- section sets

DEFAULT_SECTION_SET = "default-lab"

# The replay passes of a kernel are the cost of a profile; the lab's budget is 20. Measured with ncu
# 2025.3.1 on an H200 (2026-11-21): `--set detailed` 20 passes and lab-all (below) 34 in
# tests/planted/record.sh, lab-tables 33 in the v1/v2 runs under profiles/examples/; DEVICE.md saw
# `basic` 10 and `full` 38. So the lab's default is ncu's own `detailed` set, which in 2025.3
# holds SpeedOfLight (with its breakdowns), LaunchStats, Occupancy, ComputeWorkloadAnalysis,
# MemoryWorkloadAnalysis (+ chart), SourceCounters (sampled stall reasons and the SASS-level
# coalescing, bank-conflict and thread counts lab/analysis/findings.py falls back on),
# the roofline chart and WorkloadDistribution. The lab-* sets below trade passes for WarpStateStats,
# the memory tables and per-opcode statistics; lab-lean and lab-minimal are not measured yet
# (`python -m lab.profilers.ncu passes --set NAME -- TARGET` counts them).
DEFAULT_IS = "detailed"

_CORE = (
    "SpeedOfLight",                   # compute vs memory throughput, with their breakdowns
    "LaunchStats",                    # grid, block, registers, shared memory, waves
    "Occupancy",                      # theoretical/achieved occupancy and each limiter
    "ComputeWorkloadAnalysis",        # pipe utilization (FMA, tensor, ...)
    "MemoryWorkloadAnalysis",         # memory throughput per unit
    "WarpStateStats",                 # stall reasons per issued instruction; thread-divergence rule
)
_TABLES = ("MemoryWorkloadAnalysis_Tables",)  # bank conflicts, bytes per sector, access-pattern rules
_INSTRUCTIONS = ("InstructionStats",          # per-opcode SASS counts: FP32, FP16 and tensor FLOPs
                 "SchedulerStats")            # eligible/issued warps per scheduler
# SourceCounters (per-PC sampling and SASS-patched counters) repeats what the tables' rules say about
# coalescing and bank conflicts, costs passes, and stores whole SASS modules (a torch SDPA report
# grows to ~4 MB per kernel).
_SOURCE = ("SourceCounters",)

# Counters named explicitly so that DRAM bytes vs the minimum, FP32 FLOP/s, bank conflicts and
# coalescing never depend on which section collects them in a given ncu version.
LAB_METRICS: tuple[str, ...] = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
)
_TABLE_METRICS: tuple[str, ...] = (
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
)

# name -> (sections, explicit metrics), richest first; opt in with `lab profile --set NAME`.
SECTION_SETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "lab-all": (_CORE + _TABLES + _SOURCE + _INSTRUCTIONS, LAB_METRICS),
    "lab-tables": (_CORE + _TABLES + _INSTRUCTIONS, LAB_METRICS),
    "lab-lean": (_CORE + _INSTRUCTIONS, LAB_METRICS + _TABLE_METRICS),
    "lab-minimal": (_CORE, LAB_METRICS + _TABLE_METRICS),
}


def section_args(section_set: str | None = None) -> list[str]:
    """ncu arguments selecting what to collect: the lab's default set, a lab set by name
    (SECTION_SETS), one of ncu's own sets (`full`, `detailed`, `basic`, ...), or a comma-separated
    list of section identifiers."""
    name = section_set or DEFAULT_SECTION_SET
    if name == DEFAULT_SECTION_SET:
        name = DEFAULT_IS
    if name in SECTION_SETS:
        sections, metrics = SECTION_SETS[name]
        args = []
        for s in sections:
            args += ["--section", s]
        return args + ["--metrics", ",".join(metrics)]
    if "," in name:
        args = []
        for s in (x.strip() for x in name.split(",")):
            if s:
                args += ["--section", s]
        return args
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise LabError(f"bad section set {name!r}", hint=f"use {DEFAULT_SECTION_SET}, an ncu set such as full, "
                       "or section identifiers separated by commas (`ncu --list-sections` lists them)")
    return ["--set", name]


# ----------------------------------------------------------------------------- finding the tools

_NCU_GLOBS = ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute*/ncu",
              "/usr/local/cuda*/bin/ncu")
_INSTALL_HINT = ("install Nsight Compute (it ships with the CUDA toolkit, or from "
                 "https://developer.nvidia.com/nsight-compute) and put `ncu` on PATH")


def _version_key(path: str) -> list:
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", path)]


def find_ncu() -> str:
    """Path of the ncu executable: PATH first, then the usual install folders (newest first)."""
    exe = shutil.which("ncu")
    if exe:
        return exe
    found = [p for g in _NCU_GLOBS for p in glob.glob(g) if os.access(p, os.X_OK)]
    if found:
        return sorted(found, key=_version_key)[-1]
    raise LabError("ncu (Nsight Compute command line) was not found", hint=_INSTALL_HINT)


@functools.lru_cache(maxsize=4)
def _ncu_version_of(exe: str) -> str | None:
    try:
        res = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Version\s+([0-9][\w.]*)", res.stdout + res.stderr)
    return m.group(1) if m else None


def ncu_version() -> str | None:
    """`ncu --version` as a string such as "2025.3.1.0", or None when ncu is not installed."""
    try:
        return _ncu_version_of(find_ncu())
    except LabError:
        return None


def _ncu_python_dirs() -> list[Path]:
    dirs = []
    exe = shutil.which("ncu")
    if exe:
        dirs.append(Path(os.path.realpath(exe)).parent / "extras" / "python")
    for pattern in ("/opt/nvidia/nsight-compute/*/extras/python", "/usr/local/cuda/nsight-compute*/extras/python"):
        dirs += [Path(p) for p in sorted(glob.glob(pattern), key=_version_key, reverse=True)]
    return [d for d in dirs if (d / "ncu_report.py").is_file()]


@functools.lru_cache(maxsize=1)
def find_ncu_report_module():
    """NVIDIA's ncu_report module: the installed package, else the copy inside an ncu install."""
    try:
        import ncu_report

        return ncu_report
    except ImportError:
        pass
    crashed = []
    for d in _ncu_python_dirs():
        # The copy inside an ncu install is built for that install's Python; loaded into another one
        # it has crashed the whole process (a segfault on the GPU machine, Python 3.12 + ncu 2025.3.1),
        # so it is first tried in a child process.
        if not _loads_safely(d):
            crashed.append(str(d))
            continue
        sys.path.insert(0, str(d))
        try:
            import ncu_report

            return ncu_report
        except ImportError:
            sys.path.remove(str(d))
    found = f" ({', '.join(crashed)} crashed this Python when loaded)" if crashed else ""
    raise LabError("NVIDIA's ncu_report Python module was not found" + found,
                   hint="pip install ncu-report (reads reports without a GPU), or install Nsight Compute, "
                        "whose extras/python folder holds the module")


# A child process that imports ncu_report from `argv[1]` (the sys.path entry it was found in) and loads
# the report `argv[2]`, printing its range count, or "error: ..." where load_report raises (an unreadable
# report: no fault of the module). A child killed by a signal is the module crashing in this Python.
_PROBE = ("import sys\nsys.path.insert(0, sys.argv[1])\nimport ncu_report\n"
          "try:\n    print(ncu_report.load_report(sys.argv[2]).num_ranges())\n"
          "except Exception as e:\n    print('error:', e)\n")
PROBE_TIMEOUT_S = 300   # loading the largest stored report (64 MB unpacked) takes seconds, not minutes


def _probe(folder: str | Path, report: str | Path) -> subprocess.CompletedProcess:
    return children.run([sys.executable, "-c", _PROBE, str(folder), str(report)], capture_output=True,
                        text=True, errors="replace", timeout=PROBE_TIMEOUT_S)


def _loads_safely(d: Path) -> bool:
    try:
        return _probe(d, "/nonexistent/probe.ncu-rep").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def module_file(module) -> Path:
    return Path(module.__file__).resolve()


def _module_folder(module) -> Path:
    """The sys.path entry `module` was imported from: a package's parent, a single file's folder."""
    f = module_file(module)
    return f.parent.parent if f.name == "__init__.py" else f.parent


MODULE_FIX = ("pip install ncu-report (NVIDIA's wheel, the version of the ncu that wrote the report) and take "
              "Nsight Compute's extras/python off PYTHONPATH, or run the lab with the Python that ncu "
              "version's own module is built for")

_loaded_in_child: set[Path] = set()   # the ncu_report files that loaded a real report in a child
_isolated = False   # this process is itself the child a report is read in (lab.analysis.isolated): no probe


def read_reports_here() -> None:
    """Mark this process as the child a report is read in (lab.analysis.isolated's): a crash ends it and is
    named by its parent, so loads_in_child has no probe of its own to start (it would load the report twice)."""
    global _isolated
    _isolated = True


def loads_in_child(module, report: Path, shown: Path | None = None) -> bool:
    """Whether `module` (an ncu_report) loads `report` in a child process: True, or False where its
    load_report raises (an unreadable report, which the caller's own load words). A child killed by a
    signal raises LabError (exit 2) naming the module and the fix, before this process loads anything.

    Why: a module built for another Python (Nsight Compute 2025.3.1's extras/python ncu_report under
    Python 3.12, on the GPU machine) imports fine and segfaults loading a real report, killing `lab
    profile` and `lab analyze` without a word; a crash must end a child only. What it costs: once per
    process and module file, a Python start that imports ncu_report and loads the first report: 0.09 s
    for planted-basic (10 kernels, 0.7 MB) and 0.08 s for the shipped v7 report (6.3 MB) on the lab's
    2-core CPU machine, where the lab's own load and frame of planted-basic takes 0.2 s. Once a report
    loaded in a child, the module's later reports load in-process at once."""
    where = module_file(module)
    if where in _loaded_in_child or _isolated:
        return True
    shown = shown or report
    try:
        res = _probe(_module_folder(module), report)
    except subprocess.TimeoutExpired:
        raise LabError(f"ncu_report ({where}) did not load {shown} within {PROBE_TIMEOUT_S} s in a child process",
                       hint=MODULE_FIX) from None
    if res.returncode < 0:
        try:
            name = signal.Signals(-res.returncode).name
        except ValueError:
            name = f"signal {-res.returncode}"
        killed = " (SIGKILL: the system ends processes so when out of memory)" if name == "SIGKILL" else ""
        raise LabError(f"ncu_report ({where}) crashed loading {shown}: a child process died of {name}{killed}; "
                       f"this Python {sys.version_info.major}.{sys.version_info.minor} cannot read reports "
                       "with it", hint=MODULE_FIX)
    loaded = res.returncode == 0 and not res.stdout.startswith("error:")
    if loaded:
        _loaded_in_child.add(where)
    return loaded


def check_loadable(path: str | os.PathLike) -> tuple[Path, bool]:
    """`lab doctor`'s question: the ncu_report this process finds, and whether it loads the report at
    `path` (.xz/.gz too) in a child; a crash raises LabError as loads_in_child does."""
    module = find_ncu_report_module()
    p = Path(path)
    return module_file(module), loads_in_child(module, _materialize(p), p)


def require_ncu() -> str:
    """Fail early (before minutes of building and timing) when profiling cannot work here."""
    exe = find_ncu()
    find_ncu_report_module()
    return exe


# ----------------------------------------------------------------------------- profiling

def ncu_command(target_argv: Iterable[str], report_path: str | os.PathLike,
                nvtx_range: str | Sequence[str] | None = None, section_set: str | None = None,
                extra_args: Iterable[str] = (), exe: str | None = None) -> list[str]:
    """The ncu command line that profiles `target_argv` into `report_path`.

    `nvtx_range` names a push/pop range of the default NVTX domain (or several: a kernel inside any
    of them is profiled); kernels launched outside are not. ncu's filter syntax separates nested
    push/pop ranges with '/' and a domain with '@', and marks a push/pop range (rather than a
    start/end one) by a trailing '/', so a name must contain neither character.
    """
    ranges = [nvtx_range] if isinstance(nvtx_range, str) else list(nvtx_range or [])
    for r in ranges:
        if "/" in r or "@" in r or not r.strip():
            raise LabError(f"NVTX range name {r!r} cannot be filtered on",
                           hint="ncu's --nvtx-include uses '/' for nested ranges and '@' for domains; name the "
                                "range without them (lab.measure.target.range_name does)")
    cmd = [exe or "ncu", "--target-processes", "all"]
    if ranges:
        cmd.append("--nvtx")
        for r in ranges:
            cmd += ["--nvtx-include", f"{r}/"]
    cmd += ["--clock-control", "none"]  # the GPU's own boost behaviour, as the timings saw it
    cmd += section_args(section_set)
    # The kernel's CUDA sources go into the report, so its per-line view (lab.analysis.lines) shows the
    # code as profiled, even after the file changed or moved; they cost kilobytes.
    cmd += ["--import-source", "yes", *extra_args, "-f", "-o", str(report_path)]
    return cmd + [str(a) for a in target_argv]


def _nvtx_filters(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "--nvtx-include"]


def _report_written(report_path: Path) -> Path | None:
    # ncu appends ".ncu-rep" to an -o name that lacks it
    for p in (report_path, Path(str(report_path) + ".ncu-rep")):
        if p.is_file():
            return p
    return None


def run_ncu(cmd: list[str], log_path: str | os.PathLike, env: dict | None = None,
            timeout_s: float | None = None) -> Path:
    """Run an `ncu_command` line, writing ncu's and the target's output to `log_path`; return the
    report's path. Every way it can fail becomes a LabError carrying ncu's own ==ERROR== lines."""
    log_path = Path(log_path)
    report_path = Path(cmd[cmd.index("-o") + 1])
    try:
        res = children.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             timeout=timeout_s, errors="replace")
        text = res.stdout or ""
        returncode = res.returncode
    except FileNotFoundError:
        raise LabError(f"cannot run {cmd[0]!r}: not found", hint=_INSTALL_HINT) from None
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        log_path.write_text(out)
        raise LabError(f"ncu did not finish within {timeout_s:.0f} s (log: {log_path})",
                       hint="profile fewer kernels or a smaller shape, or use a cheaper section set") from None
    log_path.write_text(text)
    errors = [ln.strip() for ln in text.splitlines() if "==ERROR==" in ln]
    detail = ("\n" + "\n".join(errors[:8])) if errors else ""
    if "ERR_NVGPUCTRPERM" in text:
        raise LabError("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM)" + detail,
                       hint="run as root, or allow all users: `sudo modprobe nvidia "
                            "NVreg_RestrictProfilingToAdminUsers=0` (then reload the driver); see "
                            "https://developer.nvidia.com/ERR_NVGPUCTRPERM")
    if "No kernels were profiled" in text:
        flt = _nvtx_filters(cmd)
        where = (" inside the NVTX filter " + " ".join(f"--nvtx-include {f!r}" for f in flt)) if flt else ""
        raise LabError(f"ncu profiled no kernels{where}" + detail + f" (log: {log_path})",
                       hint="check that the target pushes exactly that range in the default NVTX domain and "
                            "launches its kernel inside it" if flt else "check that the target launches a kernel")
    written = _report_written(report_path)
    if returncode != 0 or written is None:
        tail = "" if errors else "\n" + "\n".join(text.strip().splitlines()[-5:])
        raise LabError(f"ncu failed (exit code {returncode}{', no report written' if written is None else ''})"
                       + detail + tail + f" (log: {log_path})",
                       hint="read the log; `ncu --list-sections` shows the section identifiers this ncu knows")
    return written


# ----------------------------------------------------------------------------- reading reports

_MAGIC = b"NVR\x00"   # the first bytes of every .ncu-rep seen (2019-2025); used only to word errors


def _materialize(path: Path) -> Path:
    """A plain .ncu-rep path for `path`; .xz/.gz copies are unpacked once into a temporary folder."""
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix)
    if opener is None:
        return path
    st = path.stat()
    out = Path(tempfile.gettempdir()) / f"lab-ncu-{os.getuid()}" / f"{st.st_size}-{int(st.st_mtime_ns)}-{path.stem}"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".partial")
        try:
            with opener(path) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except (OSError, EOFError, lzma.LZMAError) as e:
            tmp.unlink(missing_ok=True)
            raise LabError(f"{path}: cannot decompress ({e})", hint="is the compressed file complete?") from None
        tmp.replace(out)
    return out


class Report:
    """An opened report: the ncu_report context (kept alive: actions point into it) and its actions
    in order, each with the index of the range it came from."""

    def __init__(self, path: Path):
        self.path = path
        self.ctx, self.actions = _open(path)

    def __len__(self):
        return len(self.actions)


def _no_such_file(path: Path) -> LabError:
    """A report that is not there; the lab stores a run's report compressed (profile.ncu-rep.xz), so a
    plain name whose .xz is beside it says so."""
    packed = path.with_name(path.name + ".xz")
    return LabError(f"no such file: {path}", hint=f"it is stored compressed: {packed}" if packed.is_file() else None)


def _open(path: Path):
    if not path.exists():
        raise _no_such_file(path)
    if path.is_dir():
        raise LabError(f"{path} is a folder, not an Nsight Compute report")
    plain = _materialize(path)
    ncu_report = find_ncu_report_module()
    loads_in_child(ncu_report, plain, path)   # a module that crashes on it ends a child, not this process
    try:
        ctx = ncu_report.load_report(str(plain))
    except Exception as e:  # the SWIG layer raises a variety of types on unreadable input
        raise LabError(f"{path}: ncu_report cannot read it ({e})") from None
    with open(plain, "rb") as f:
        magic_ok = f.read(len(_MAGIC)) == _MAGIC
    actions = []
    for r_idx in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r_idx)
        for a_idx in range(rng.num_actions()):
            actions.append((r_idx, rng.action_by_idx(a_idx)))
    if not magic_ok and not actions:
        raise LabError(f"{path} is not an Nsight Compute report",
                       hint="`lab analyze` reads the .ncu-rep files that `ncu -o` writes")
    damaged = [i for i, (_, a) in enumerate(actions) if not a.name() or not len(a.metric_names())]
    if ctx.num_ranges() == 0 or damaged:
        raise LabError(f"{path} is truncated or damaged: ncu_report finds "
                       + (f"{len(damaged)} unreadable kernel result(s)" if damaged else "no readable content"),
                       hint="copy the report again in full (a report is written completely when ncu exits)")
    if not actions:
        raise LabError(f"{path} holds no profiled kernels",
                       hint="ncu wrote the report but its filters matched no launch")
    return ctx, actions


@functools.lru_cache(maxsize=8)
def _open_cached(path_str: str, size: int, mtime_ns: int) -> Report:
    return Report(Path(path_str))


def open_report(path: str | os.PathLike) -> Report:
    """Open (once per file version: the pipeline reads the same report several times)."""
    p = Path(path)
    if not p.exists():
        raise _no_such_file(p)
    st = p.stat()
    return _open_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


def _nvtx_text(action) -> str | None:
    """The NVTX ranges open at the launch, "domain: outer > inner", one domain per `;`."""
    try:
        state = action.nvtx_state()
    except Exception:
        return None
    if state is None:
        return None
    parts = []
    for dom_id in state.domains():
        dom = state.domain_by_id(dom_id)
        ranges = list(dom.push_pop_ranges()) + list(dom.start_end_ranges())
        if ranges:
            parts.append(f"{dom.name() or '<default>'}: {' > '.join(ranges)}")
    return "; ".join(parts) or None


def _named_instances(metric) -> dict[str, Any] | None:
    """{instance name: value} for an instanced metric whose instances carry names (opcodes)."""
    n = metric.num_instances()
    if n == 0 or n > 256 or not metric.has_correlation_ids():
        return None
    ids = metric.correlation_ids()
    first = ids.value(0)
    if not isinstance(first, str):
        return None
    return {str(ids.value(i)): metric.value(i) for i in range(n)}


def _action_row(ncu_report, action, units: dict[str, str]) -> dict[str, Any]:
    IA = ncu_report.IAction
    row: dict[str, Any] = {
        "kernel": action.name(IA.NameBase_DEMANGLED),
        "kernel_function": action.name(IA.NameBase_FUNCTION),
        "kernel_mangled": action.name(IA.NameBase_MANGLED),
        "nvtx": _nvtx_text(action),
    }
    for name in action.metric_names():
        m = action.metric_by_name(name)
        if m is None:
            continue
        row[name] = m.value()
        unit = m.unit()
        if unit and name not in units:
            units[name] = unit
        if m.num_instances() and name.startswith("sass__"):
            inst = _named_instances(m)
            if inst:
                for k, v in inst.items():
                    row[f"{name}[{k}]"] = v
    dev = row.get("device__attribute_display_name")
    row["device"] = dev if isinstance(dev, str) else None
    return row


def report_frame(report: Report) -> pd.DataFrame:
    ncu_report = find_ncu_report_module()
    units: dict[str, str] = {}
    rows = []
    for i, (r_idx, action) in enumerate(report.actions):
        row = _action_row(ncu_report, action, units)
        row["range_index"] = r_idx
        row["kernel_index"] = i
        rows.append(row)
    df = pd.DataFrame.from_records(rows)
    lead = ["kernel_index", "kernel", "device", "nvtx", "range_index", "kernel_function", "kernel_mangled"]
    df = df[lead + [c for c in df.columns if c not in lead]]
    df.attrs["units"] = units
    df.attrs["path"] = str(report.path)
    return df


@functools.lru_cache(maxsize=8)
def _frame_cached(path_str: str, size: int, mtime_ns: int) -> pd.DataFrame:
    return report_frame(_open_cached(path_str, size, mtime_ns))


def load_report(path: str | os.PathLike) -> pd.DataFrame:
    """One row per profiled kernel: kernel (demangled), kernel_function, kernel_mangled, nvtx, device,
    and every metric as a column. Units in df.attrs["units"]. A copy: callers may modify it."""
    p = Path(path)
    if not p.exists():
        raise _no_such_file(p)
    st = p.stat()
    df = _frame_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)
    out = df.copy()
    out.attrs = {"units": dict(df.attrs["units"]), "path": df.attrs["path"]}
    return out


# ----------------------------------------------------------------------------- rule results

_MSG_TYPES = {0: "NONE", 1: "INFO", 2: "OPT", 3: "WARNING", 4: "ERROR"}   # ncu_report.MsgType: OK is INFO
_SPEEDUP_TYPES = {0: None, 1: "local", 2: "global"}                    # ncu_report.SpeedupType
_FOCUS_SEVERITY = {0: "default", 1: "low", 2: "high"}                  # ncu_report.FocusSeverity
_LINK = re.compile(r"@(section|url|sass|source):([^@]*)@")


def plain_message(text: str) -> str:
    """A rule message with ncu's link markup resolved to readable text:
    @section:Id:Text@ -> Text; @url:Text:https://...@ -> Text (https://...); @sass/@source -> text."""
    def sub(m: re.Match) -> str:
        kind, body = m.group(1), m.group(2)
        if kind == "url":
            label, _, url = body.partition(":")
            return f"{label} ({url})" if url else label
        return body.rsplit(":", 1)[-1]
    return _LINK.sub(sub, text or "")


def _rule_dicts(action) -> list[dict]:
    if hasattr(action, "rule_results_as_dicts"):
        return action.rule_results_as_dicts()
    out = []  # older ncu_report: the same fields from the IRuleResult objects
    for r in action.rule_results():
        d = {"rule_identifier": r.rule_identifier(), "name": r.name(), "section_identifier": r.section_identifier(),
             "rule_message": r.rule_message()}
        if r.has_speedup_estimation():
            d["speedup_estimation"] = r.speedup_estimation()
        fm = r.focus_metrics()
        if len(fm):
            d["focus_metrics"] = fm
        out.append(d)
    return out


def _action_rules(action, kernel_index: int, kernel: str) -> list[dict]:
    out = []
    for d in _rule_dicts(action):
        msg = d.get("rule_message") or {}
        sp = d.get("speedup_estimation") or {}
        out.append({
            "kernel_index": kernel_index,
            "kernel": kernel,
            "rule_id": d.get("rule_identifier"),
            "rule_name": d.get("name"),
            "section": d.get("section_identifier"),
            "type": _MSG_TYPES.get(int(msg.get("type", 0)), str(msg.get("type"))),
            "title": msg.get("title") or "",
            "message": plain_message(msg.get("message", "")),
            "est_speedup_pct": float(sp["speedup"]) if "speedup" in sp else None,
            "speedup_type": _SPEEDUP_TYPES.get(int(sp.get("type", 0))) if sp else None,
            "focus_metrics": [{"name": f.get("name"), "value": f.get("value"),
                               "severity": _FOCUS_SEVERITY.get(int(f.get("severity", 0)), "default"),
                               "info": f.get("info")} for f in d.get("focus_metrics", [])],
        })
    return out


@functools.lru_cache(maxsize=8)
def _rules_cached(path_str: str, size: int, mtime_ns: int) -> tuple:
    rep = _open_cached(path_str, size, mtime_ns)
    ncu_report = find_ncu_report_module()
    out = []
    for i, (_, action) in enumerate(rep.actions):
        out += _action_rules(action, i, action.name(ncu_report.IAction.NameBase_DEMANGLED))
    return tuple(out)


def rule_results(path_or_action) -> list[dict]:
    """Nsight Compute's own rule results: rule_id, rule_name, section, type (OPT, WARNING, INFO,
    ERROR), title, message (link markup resolved), est_speedup_pct and speedup_type (global: less
    kernel runtime; local: better efficiency of one unit), focus_metrics; with kernel_index and kernel.
    Given a path: every kernel's; given an ncu_report action: that kernel's."""
    if isinstance(path_or_action, (str, os.PathLike)):
        p = Path(path_or_action)
        if not p.exists():
            raise LabError(f"no such file: {p}")
        st = p.stat()
        return [dict(r, focus_metrics=list(r["focus_metrics"]))
                for r in _rules_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)]
    ncu_report = find_ncu_report_module()
    return _action_rules(path_or_action, 0, path_or_action.name(ncu_report.IAction.NameBase_DEMANGLED))


# ----------------------------------------------------------------------------- command line

def _main(argv: list[str] | None = None) -> int:
    """`python -m lab.profilers.ncu profile --report R --log L [--nvtx-range N] [--set S] -- TARGET...`:
    the lab's ncu command line and run, for scripts (tests/planted/record.sh uses it)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m lab.profilers.ncu")
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("profile")
    pr.add_argument("--report", required=True)
    pr.add_argument("--log", required=True)
    pr.add_argument("--nvtx-range", action="append", default=None, help="repeat for several ranges")
    pr.add_argument("--set", dest="section_set", default=None)
    pr.add_argument("target", nargs=argparse.REMAINDER)
    sub.add_parser("command").add_argument("target", nargs=argparse.REMAINDER)
    pa = sub.add_parser("passes", help="profile the first matching kernel once and print the replay passes")
    pa.add_argument("--set", dest="section_set", default=None)
    pa.add_argument("--kernel", default=None, help="regex on the kernel name")
    pa.add_argument("target", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if args.cmd == "command":
        import shlex

        print(shlex.join(ncu_command(target, "REPORT.ncu-rep")))
        return 0
    if args.cmd == "passes":
        with tempfile.TemporaryDirectory() as tmp:
            extra = ["-c", "1"] + (["-k", f"regex:{args.kernel}"] if args.kernel else [])
            try:
                cmd = ncu_command(target, Path(tmp) / "p.ncu-rep", None, args.section_set, extra, exe=find_ncu())
                rep = run_ncu(cmd, Path(tmp) / "p.log")
                passes = load_report(rep)["profiler__replayer_passes"].iloc[0]
            except (LabError, KeyError) as e:
                print(f"{args.section_set or DEFAULT_SECTION_SET}\t?\t{e}")
                return 2
        print(f"{args.section_set or DEFAULT_SECTION_SET}\t{int(passes)}")
        return 0
    try:
        cmd = ncu_command(target, args.report, args.nvtx_range, args.section_set, exe=find_ncu())
        print(" ".join(cmd), flush=True)
        path = run_ncu(cmd, args.log)
    except LabError as e:
        print(f"error: {e}" + (f"\nhint: {e.hint}" if e.hint else ""), file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())

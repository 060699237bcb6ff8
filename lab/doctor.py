"""`lab doctor`: which tools are present and working, and for each problem, the fix."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lab.analysis import findings as analysis
from lab.analysis.isolated import ChildDied, in_child
from lab.environment import nvcc_version
from lab.errors import LabError
from lab.profilers import ncu
from lab.profilers.nsys import nsys_status
from lab.store.runs import list_runs, shipped_root, store_root


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required_for: str = ""

    def to_dict(self) -> dict:
        return dict(name=self.name, ok=self.ok, detail=self.detail, fix=self.fix, required_for=self.required_for)


def _torch_checks() -> list[Check]:
    try:
        import torch
    except ImportError:
        return [Check("torch", False, "not installed", "pip install torch (a CUDA build)", "build, check, bench, profile")]
    out = [Check("torch", True, f"{torch.__version__} (CUDA {torch.version.cuda or 'none: CPU-only build'})")]
    if not torch.cuda.is_available():
        out.append(Check("gpu", False, "no CUDA GPU visible to torch",
                         "run on a machine with an NVIDIA GPU and a CUDA build of torch; report/analyze/timeline work without one",
                         "build, check, bench, profile"))
        return out
    p = torch.cuda.get_device_properties(0)
    out.append(Check("gpu", True, f"{p.name}, compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
                                  f"{p.total_memory / 2**30:.0f} GiB"))
    return out


def _nvcc_check() -> Check:
    v = nvcc_version()
    if not v:
        return Check("nvcc", False, "not on PATH", "install the CUDA toolkit and put its bin/ on PATH (or set CUDA_HOME)",
                     "build")
    return Check("nvcc", True, f"CUDA {v} at {shutil.which('nvcc')}")


def _compiler_checks() -> list[Check]:
    out = []
    for exe, fix in (("ninja", "pip install ninja"), ("c++", "install a C++ compiler (g++)")):
        path = shutil.which(exe)
        out.append(Check(exe, bool(path), path or "not on PATH", "" if path else fix, "" if path else "build"))
    return out


_COUNTER_PROBE = "import torch; x = torch.ones(1024, device='cuda'); (x + 1).sum().item()"


def _stored_report() -> Path | None:
    """The newest Nsight Compute report among the store's runs, else among the runs shipped with the lab."""
    for root in (store_root(), shipped_root()):
        if root is None:
            continue
        for run in reversed(list_runs(root)):
            report = run.artifact("ncu_report")
            if report is not None and report.is_file():
                return report
    return None


def _ncu_report_check(report: Path | None) -> Check:
    """The ncu_report module, and whether it loads a real report (the counter probe's, else a stored
    one) in a child process: a module that imports but crashes on a report is a failed check here."""
    try:
        if report is None:
            module = ncu.find_ncu_report_module()
            return Check("ncu_report", True, f"{ncu.module_file(module)} importable; not tried on a report "
                                             "(none stored here): lab analyze tries it on its first")
        where, loaded = ncu.check_loadable(report)
    except LabError as e:
        return Check("ncu_report", False, str(e), e.hint or "pip install ncu-report", "profile, analyze")
    if not loaded:
        return Check("ncu_report", True, f"{where} importable; could not read {report} (no crash)")
    # loading is not all: the analysis reads every metric and the per-PC counters, where a module built for
    # another Python has crashed after a clean load (`lab profile` on the GPU machine, 2026-11-27)
    try:
        in_child(analysis.analyze_report, report, what=f"{where} analysing {report}")
    except ChildDied as e:
        return Check("ncu_report", False, str(e), e.hint or "pip install ncu-report", "profile, analyze")
    except LabError as e:
        return Check("ncu_report", True, f"{where} loads {report}; the analysis refused it ({e}), no crash")
    return Check("ncu_report", True, f"{where} loads and analyses {report} (tried in a child process)")


_NCU_FIX = "install Nsight Compute and put ncu on PATH"


def _ncu_checks(probe: bool) -> list[Check]:
    try:
        version = ncu.ncu_version()
        exe = ncu.find_ncu()
    except LabError as e:
        version, exe, absent = None, None, Check("ncu", False, str(e), e.hint or _NCU_FIX, "profile")
    else:
        absent = Check("ncu", False, "not found", _NCU_FIX, "profile")
    if not version:   # reading reports needs no ncu: ncu_report is checked all the same
        return [absent, _ncu_report_check(_stored_report())]
    out = [Check("ncu", True, f"{version} at {exe}")]
    with tempfile.TemporaryDirectory() as tmp:
        rep = Path(tmp) / "probe.ncu-rep"
        if probe:
            out.append(_counter_check(exe, rep))
        # the probe's report is this machine's ncu's own: the one to try the module on
        out.append(_ncu_report_check(rep if rep.is_file() else _stored_report()))
    return out


def _counter_check(exe: str, rep: Path) -> Check:
    cmd = [exe, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "-c", "1", "-f",
           "-o", str(rep), sys.executable, "-c", _COUNTER_PROBE]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        text = res.stdout + res.stderr
    except subprocess.TimeoutExpired:
        text = "timed out"
    if "ERR_NVGPUCTRPERM" in text:
        return Check("ncu counters", False, "ERR_NVGPUCTRPERM: no permission to read GPU performance counters",
                     "run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
                     "(see https://developer.nvidia.com/ERR_NVGPUCTRPERM)", "profile")
    if rep.exists():
        return Check("ncu counters", True, "read a hardware counter of a probe kernel")
    errs = [ln for ln in text.splitlines() if "==ERROR==" in ln or "==WARNING==" in ln][:3]
    return Check("ncu counters", False, "; ".join(errs) or text.strip()[-200:],
                 "run `ncu --list-sets` by hand and read its error", "profile")


def _nsys_check() -> Check:
    st = nsys_status()
    if st.can_write_reports:
        return Check("nsys", True, f"{st.version}: writes reports")
    detail = st.reason or "not found"
    return Check("nsys", False, detail,
                 "install Nsight Systems (with its QdstrmImporter) for timelines; until then "
                 "`lab profile --timeline` falls back to torch.profiler and says so", "timeline (optional)")


def _sanitizer_check() -> Check:
    path = shutil.which("compute-sanitizer")
    return Check("compute-sanitizer", bool(path), path or "not on PATH",
                 "" if path else "comes with the CUDA toolkit; needed only for the memcheck tests", "" if path else "tests")


# Without these the lab cannot build, check, time and profile a rung: `lab doctor` exits 1.
ESSENTIAL = ("torch", "gpu", "nvcc", "ncu", "ncu counters", "ninja", "c++")


def essentials_failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok and c.name in ESSENTIAL]


def run_checks(probe_counters: bool = True) -> list[Check]:
    checks = [Check("python", True, sys.version.split()[0])]
    checks += _torch_checks()
    checks.append(_nvcc_check())
    checks += _compiler_checks()
    gpu_ok = any(c.name == "gpu" and c.ok for c in checks)
    checks += _ncu_checks(probe=probe_counters and gpu_ok)
    checks.append(_nsys_check())
    checks.append(_sanitizer_check())
    return checks

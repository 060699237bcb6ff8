"""`lab doctor`: which tools are present and working, and for each problem, the fix."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lab.environment import nvcc_version
from lab.errors import LabError
from lab.profilers import ncu
from lab.profilers.nsys import nsys_status


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


def _ncu_checks(probe: bool) -> list[Check]:
    try:
        version = ncu.ncu_version()
        exe = ncu.find_ncu()
    except LabError as e:
        return [Check("ncu", False, str(e), e.hint or "install Nsight Compute and put ncu on PATH", "profile")]
    if not version:
        return [Check("ncu", False, "not found", "install Nsight Compute and put ncu on PATH", "profile")]
    out = [Check("ncu", True, f"{version} at {exe}")]
    try:
        ncu.find_ncu_report_module()
        out.append(Check("ncu_report", True, "Python module importable"))
    except LabError as e:
        out.append(Check("ncu_report", False, str(e), e.hint or "pip install ncu-report", "profile, analyze"))
    if probe:
        with tempfile.TemporaryDirectory() as tmp:
            rep = Path(tmp) / "probe.ncu-rep"
            cmd = [exe, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "-c", "1", "-f",
                   "-o", str(rep), sys.executable, "-c", _COUNTER_PROBE]
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                text = res.stdout + res.stderr
            except subprocess.TimeoutExpired:
                text = "timed out"
            if "ERR_NVGPUCTRPERM" in text:
                out.append(Check("ncu counters", False, "ERR_NVGPUCTRPERM: no permission to read GPU performance counters",
                                 "run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
                                 "(see https://developer.nvidia.com/ERR_NVGPUCTRPERM)", "profile"))
            elif rep.exists():
                out.append(Check("ncu counters", True, "read a hardware counter of a probe kernel"))
            else:
                errs = [ln for ln in text.splitlines() if "==ERROR==" in ln or "==WARNING==" in ln][:3]
                out.append(Check("ncu counters", False, "; ".join(errs) or text.strip()[-200:],
                                 "run `ncu --list-sets` by hand and read its error", "profile"))
    return out


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

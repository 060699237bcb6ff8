"""Itanium C++ names (`_Z...`) back to what the source says: the kernels ptxas reports, and those
a timeline (nsys, torch.profiler) records still mangled. One c++filt process for a whole list (or
NVIDIA's cu++filt beside nvcc); the cxxfilt module where neither is installed; else the names stay
as they are. Results are remembered for the process."""

from __future__ import annotations

import shutil
import subprocess

_known: dict[str, str] = {}


def demangle(names: list[str | None]) -> list[str | None]:
    """The demangled names, in order; anything not a mangled name (None, `vec_add`) is returned as is."""
    todo = sorted({n for n in names if isinstance(n, str) and n.startswith("_Z") and n not in _known})
    if todo:
        _known.update(_demangle_batch(todo))
    return [_known.get(n, n) if isinstance(n, str) else n for n in names]


def _demangle_batch(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if tool:
        try:
            out = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60)
            lines = out.stdout.splitlines()
            if out.returncode == 0 and len(lines) == len(names):
                return dict(zip(names, lines))
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import cxxfilt  # optional, and imported only where no c++filt runs
    except ImportError:
        return {n: n for n in names}
    result = {}
    for n in names:
        try:
            result[n] = cxxfilt.demangle(n)
        except Exception:  # a name cxxfilt cannot parse stays mangled rather than failing the read
            result[n] = n
    return result


def short_name(name: str) -> str:
    """A demangled kernel name without its parameter list and return type, as Nsight's short names
    read: `void ns::kernel<128, true>(float const*, int)` -> `ns::kernel<128, true>`. The parameter
    list is the last balanced `(...)` (so `(anonymous namespace)::k(int)` keeps its namespace); a
    name without one (`cudnn_generated_...`, `[CUDA memset]`) is returned as it is."""
    text = name.strip()
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i].rstrip() if text[:i].strip() else text
                break
    return text[len("void "):] if text.startswith("void ") else text

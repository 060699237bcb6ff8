"""What a run was measured on: device and software facts for the manifest and `lab doctor`."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from lab import nvml
from lab.errors import LabError
from lab.gpu_specs import peaks_for
from lab.profilers.ncu import ncu_version
from lab.profilers.nsys import nsys_status

REPO_ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], timeout: float = 20) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return None


_NO_GPU_HINT = "`lab report` and `lab analyze` work without a GPU; `lab doctor` says what is missing"


def require_gpu(command: str, hint: str = _NO_GPU_HINT) -> None:
    """Refuse a GPU command on a machine without a CUDA GPU (exit 2, with the reason)."""
    try:
        import torch
    except ImportError:
        raise LabError(f"`lab {command}` needs PyTorch with CUDA; torch is not installed", hint=hint) from None
    if not torch.cuda.is_available():
        why = "this torch is a CPU-only build" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise LabError(f"`lab {command}` needs an NVIDIA GPU: {why} (torch {torch.__version__})", hint=hint)


def require_gpus(command: str, gpus: list[str] | None = None) -> None:
    """A GPU, and each of `gpus` (CUDA device indices as given to --gpus) visible here."""
    require_gpu(command)
    if gpus:
        import torch

        count = torch.cuda.device_count()
        bad = [g for g in gpus if not g.isdigit() or int(g) >= count]
        if bad:
            raise LabError(f"--gpus {','.join(gpus)}: no GPU {', '.join(bad)} here ({count} visible: 0..{count - 1})")


def require_compute_capability(variant, index: int = 0) -> None:
    """Refuse a rung the GPU cannot run (e.g. a Hopper-only rung on an Ampere card), exit 2."""
    import torch

    cc = torch.cuda.get_device_capability(index)
    if tuple(cc) < tuple(variant.min_cc):
        raise LabError(f"{variant.id} needs compute capability {'.'.join(map(str, variant.min_cc))}; "
                       f"{torch.cuda.get_device_name(index)} is {cc[0]}.{cc[1]}")


def device_info(index: int = 0) -> dict:
    import torch

    p = torch.cuda.get_device_properties(index)
    info = {
        "name": p.name,
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "memory_bytes": p.total_memory,
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "sm_clock_mhz": None,
        "mem_clock_mhz": None,
        "max_sm_clock_mhz": None,
        "driver": None,
        "probe_source": None,
    }
    info.update(_read_gpu(gpu_uuid(p), _SMI_DEVICE))
    peaks = peaks_for(p.name)
    info["peaks"] = peaks.to_dict() if peaks else None
    return info


def gpu_uuid(props) -> str:
    """The GPU's UUID as nvidia-smi, NVML and CUDA_VISIBLE_DEVICES spell it (GPU-..., MIG-...), from
    torch's device properties (torch prints it without the prefix)."""
    text = str(getattr(props, "uuid", "") or "")
    return text if text.startswith(("GPU-", "MIG-")) or not text else "GPU-" + text


def gpu_uuids() -> list[str]:
    """Each visible CUDA device's UUID, in CUDA's order (the indices --gpus takes)."""
    import torch

    return [gpu_uuid(torch.cuda.get_device_properties(i)) for i in range(torch.cuda.device_count())]


# The fields device_info and gpu_state read (the lab's names: nvidia-smi's --query-gpu names, asked
# where NVML cannot be read, lab.nvml)
_SMI_DEVICE = {"driver": "driver_version", "sm_clock_mhz": "clocks.sm", "mem_clock_mhz": "clocks.mem",
               "max_sm_clock_mhz": "clocks.max.sm"}
_SMI_STATE = {"gpu_host_index": "index", "sm_clock_mhz": "clocks.sm", "mem_clock_mhz": "clocks.mem",
              "power_limit_w": "power.limit"}
_PARSE = {"driver": str, "power_limit_w": float}   # the rest are integers (MHz, an index)


def _smi_query(uuid: str, fields: dict[str, str]) -> dict | None:
    """`fields` (the lab's name: nvidia-smi's) of the GPU with this UUID, read by nvidia-smi: each
    None where it prints none ("[N/A]", "[Not Supported]"); None where nvidia-smi answers nothing.
    By UUID: nvidia-smi's --id=<index> counts in its own (PCI) order over every GPU of the host, not
    in CUDA's order over the ones CUDA_VISIBLE_DEVICES leaves (a pinned sweep worker's device 0 is
    any GPU)."""
    smi = _run(["nvidia-smi", f"--id={uuid}", f"--query-gpu={','.join(fields.values())}",
                "--format=csv,noheader,nounits"], timeout=10)
    parts = [s.strip() for s in (smi or "").strip().splitlines()[0].split(",")] if (smi or "").strip() else []
    if len(parts) != len(fields):
        return None
    out: dict = {}
    for key, val in zip(fields, parts):
        try:
            out[key] = _PARSE.get(key, lambda v: int(float(v)))(val)
        except ValueError:
            out[key] = None   # "[N/A]", "[Not Supported]"
    return out


def _read_gpu(uuid: str, fields: dict[str, str]) -> dict:
    """`fields` of the GPU with this UUID and `probe_source`, the one that gave them: NVML in this
    process ("nvml"), or nvidia-smi ("nvidia-smi") where NVML cannot be loaded or a call of it fails;
    None, and every field None, where neither answers. A field not given is None, never a guess."""
    try:
        found = nvml.read(uuid)
    except nvml.NvmlError:
        smi = _smi_query(uuid, fields)
        return {**dict.fromkeys(fields), **(smi or {}), "probe_source": "nvidia-smi" if smi else None}
    return {**{k: found[k] for k in fields}, "probe_source": "nvml"}


def gpu_state(uuid: str) -> dict:
    """What can change under a sweep, read now for one GPU by UUID: its SM and memory clocks and its
    power limit, and the host's index of it (NVML's and nvidia-smi's, over every GPU of the host), with
    `gpu_probe_source`: "nvml" (read in this process, lab.nvml) or "nvidia-smi" (where NVML cannot
    be). A field not given is None, never a guess."""
    found = _read_gpu(uuid, _SMI_STATE)
    found["gpu_probe_source"] = found.pop("probe_source")
    return found


def gpu_record(index: int = 0) -> dict:
    """Which GPU this process measures on (CUDA device `index` of the visible ones), for each row it
    measures: name, UUID, the CUDA_VISIBLE_DEVICES that pinned it, and gpu_state() read now."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = gpu_uuid(props)
    return {"gpu_name": props.name, "gpu_uuid": uuid, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            **gpu_state(uuid)}


def torch_versions() -> dict:
    """torch's version and the CUDA it was built with, as torch.__version__ and torch.version.cuda
    give them, without importing torch (seconds): read from the installed torch's version.py, a module
    of constants. `lab profile`'s parent needs them for the build and check keys and never imports torch;
    where torch is loaded already, its own answer. None for both where torch is not installed."""
    import sys

    loaded = sys.modules.get("torch")
    if loaded is not None and getattr(loaded, "version", None) is not None:
        return {"torch": str(loaded.__version__), "cuda": loaded.version.cuda}
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return {"torch": None, "cuda": None}
    found: dict = {}
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "version.py"
        if path.is_file():
            try:
                exec(compile(path.read_text(), str(path), "exec"), found)
            except Exception:   # not the plain module of constants it has always been: ask torch itself
                found = {}
            break
    if "__version__" not in found:
        import torch

        return {"torch": str(torch.__version__), "cuda": torch.version.cuda}
    return {"torch": str(found["__version__"]), "cuda": found.get("cuda")}


_IDENTITY_FIELDS = ("uuid", "name", "compute_cap", "driver_version")


def gpu_identity() -> dict | None:
    """The GPU CUDA will call device 0, as nvidia-smi names it (name, compute capability, driver), for
    a parent that does not start CUDA (`lab profile`'s: its measuring child does). None where it cannot
    be told without CUDA: no nvidia-smi or no GPU, a driver too old for compute_cap, or visible GPUs that
    differ in name or compute capability (CUDA's order of them is its own, FASTEST_FIRST by default)."""
    smi = _run(["nvidia-smi", f"--query-gpu={','.join(_IDENTITY_FIELDS)}", "--format=csv,noheader"], timeout=10)
    gpus = []
    for line in (smi or "").strip().splitlines():
        parts = [s.strip() for s in line.split(",")]
        if len(parts) != len(_IDENTITY_FIELDS) or not re.fullmatch(r"\d+\.\d+", parts[2]):
            return None
        gpus.append(dict(zip(_IDENTITY_FIELDS, parts)))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:   # by UUID where the entries name them; indices or a MIG: all must agree anyway
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        if not wanted:
            return None
        if all(w.startswith("GPU-") for w in wanted):
            gpus = [g for g in gpus if any(g["uuid"].startswith(w) for w in wanted)]
    kinds = {(g["name"], g["compute_cap"]) for g in gpus}
    if len(kinds) != 1:
        return None
    g = gpus[0]
    return {"name": g["name"], "compute_capability": g["compute_cap"], "driver": g["driver_version"]}


def require_compute_capability_of(variant, identity: dict) -> None:
    """require_compute_capability on a gpu_identity(), without CUDA."""
    major, minor = (int(x) for x in identity["compute_capability"].split("."))
    if (major, minor) < tuple(variant.min_cc):
        raise LabError(f"{variant.id} needs compute capability {'.'.join(map(str, variant.min_cc))}; "
                       f"{identity['name']} is {major}.{minor}")


def nvcc_version() -> str | None:
    out = _run(["nvcc", "--version"]) if shutil.which("nvcc") else None
    m = re.search(r"release (\d+\.\d+)", out or "")
    return m.group(1) if m else None


def tool_versions() -> dict:
    """nvcc's, ncu's and nsys's versions (None where absent): subprocesses only, no torch, so `lab
    profile` asks for them on a thread while torch loads."""
    info = {"nvcc": nvcc_version(), "ncu": None, "nsys": None}
    try:
        info["ncu"] = ncu_version()
    except (ImportError, LabError):
        pass
    try:
        info["nsys"] = nsys_status().version
    except (ImportError, LabError):
        pass
    return info


def software_info(tools: dict | None = None) -> dict:
    """The software a run was measured with; `tools`: tool_versions() asked for already."""
    info = {"python": platform.python_version(), "torch": None, "cuda": None, "cudnn": None,
            **(tools if tools is not None else tool_versions())}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    except ImportError:
        pass
    return info


_SHA = re.compile(r"^[0-9a-f]{40}$")
_SHA_ABBREV = re.compile(r"^[0-9a-f]{7,40}$")


def git_info() -> dict:
    """The checkout's commit. Where the tree is a copy without .git (a remote GPU machine), the
    commit comes from LAB_GIT_COMMIT if the caller set it, and `dirty` is unknown (None). A set
    LAB_GIT_COMMIT wins over a .git found above the tree: code carried inside another checkout (the
    GPU machine's .carry/<name>/) would otherwise be recorded as that checkout's commit, and a copied
    tree can carry a stale .git of its own (a GPU machine's copy of the session's first checkout,
    whose HEAD is not the code that ran). An abbreviated LAB_GIT_COMMIT (7+ hex digits, as `git log
    --oneline` prints it) counts too: recorded in full where this checkout's git knows it, as given
    where it does not (before 2026-11-27 it was ignored, and the stale .git's commit recorded)."""
    env_commit = os.environ.get("LAB_GIT_COMMIT", "").strip().lower()
    if _SHA.match(env_commit):
        return {"commit": env_commit, "dirty": None}
    if _SHA_ABBREV.match(env_commit):
        full = ""
        if (REPO_ROOT / ".git").exists():
            full = (_run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "--quiet", f"{env_commit}^{{commit}}"]) or "").strip()
        return {"commit": full if _SHA.match(full) else env_commit, "dirty": None}
    if not (REPO_ROOT / ".git").exists():   # an installed wheel: no checkout of ours (and a venv inside
        return {"commit": None, "dirty": None}   # the user's repo must not record the user's commit)
    commit = (_run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"]) or "").strip()
    if _SHA.match(commit):
        dirty = _run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
        return {"commit": commit, "dirty": bool(dirty and dirty.strip())}
    return {"commit": None, "dirty": None}

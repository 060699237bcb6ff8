"""Build one PyTorch extension per rung, cached by a hash of what goes into it, and keep ptxas's
resource usage and the SASS beside it.

A rung's extension is `kernels/<id>_<slug>.cu` plus `kernels/binding.cpp` (compiled with
`-DLAB_LAUNCHER=lab_forward_<id>`), built by `torch.utils.cpp_extension.load` with ninja into
`.lab-cache/build/<label>-<key>/`. The key hashes the rung's source, `common.cuh`, `binding.cpp`,
the flags, and the torch, torch-CUDA and nvcc versions, so an unchanged rung is never rebuilt:
a second build (in this process or another) imports the finished `.so` directly.

The ptxas step compiles the rung's `.cu` on its own with `nvcc -c -Xptxas -v` for the same arch and
parses the resource usage (registers, static shared memory, stack, spills) per kernel, and ptxas's notice
where it serialized a kernel's wgmma pipeline (a wait after every product); it keeps the raw log and,
where `cuobjdump` exists, the SASS. It needs nvcc but no GPU and no CUDA torch, so
`lab build --ptxas-only` and the CPU tests use it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import platformdirs

from lab.environment import git_info, require_gpu, torch_versions
from lab.demangle import demangle as demangle_names, short_name
from lab.errors import LabError
from lab.files import write_json_atomic
from lab.ladder import pairing, python_rung
from lab.ladder.rungfile import KERNELS_DIR, Variant

BINDING = KERNELS_DIR / "binding.cpp"
COMMON_HEADER = KERNELS_DIR / "common.cuh"

# -lineinfo maps SASS back to source lines in Nsight Compute at no runtime cost.
# -fno-gnu-unique: g++ emits a function-local static of an inline or template function (e.g. a
# launcher's `static const cudaError_t attr = lab_set_smem(...)`, set once per instantiation) as a
# STB_GNU_UNIQUE symbol, which the dynamic loader unifies across EVERY library of the process,
# RTLD_LOCAL or not. Two rungs that instantiate one shared header's launcher (v6 and v8 through
# kernels/hopper/fwd_wgmma.cuh, or a workspace copy of a built-in rung) then share one flag: the
# second rung loaded skips its own cudaFuncSetAttribute and its launch fails "invalid argument"
# (seen on an H100, 2026-11-26: v8's forward in a sweep after v6). Weak symbols instead stay
# per-extension under Python's RTLD_LOCAL import.
BASE_NVCC_FLAGS: tuple[str, ...] = ("-O3", "-lineinfo", "-Xcompiler=-fno-gnu-unique")
BASE_CXX_FLAGS: tuple[str, ...] = ("-O3",)
DEFAULT_PTXAS_ARCH = "sm_90a"  # the lab's GPU (H100/H200) when there is no device to ask

_ARCH_RE = re.compile(r"^sm_(\d{2,3})([af]?)$")
_BUILD_MARKER = "build.json"    # written last by a complete extension build
_PTXAS_MARKER = "ptxas.json"    # written last by a complete ptxas step

_loaded: dict[str, Any] = {}    # cache key -> imported module, once per process


@dataclass(frozen=True)
class PtxasRecord:
    """ptxas's resource usage for one kernel (entry function) on one arch."""

    kernel: str                  # demangled where c++filt is available
    registers: int
    smem_bytes: int              # static shared memory; dynamic shared memory is a launch argument
    stack_bytes: int
    spill_stores_bytes: int
    spill_loads_bytes: int
    arch: str
    # ptxas's notice that it serialized the kernel's wgmma pipeline, "C7511: insufficient register resources
    # for the wgmma pipeline" (codes and reasons joined by "; "), "" when none: a wait after every wgmma
    wgmma_serialized: str = ""
    mangled: str = ""            # the name as ptxas and Nsight Compute's kernel_mangled spell it

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PtxasReport:
    variant_id: str
    arch: str
    flags: list[str]
    cache_key: str
    build_dir: Path
    records: list[PtxasRecord]
    sass_path: Path | None       # None where cuobjdump is missing
    log_path: Path
    compiled_now: bool
    seconds: float


@dataclass
class BuildResult:
    module: Any                  # the extension: module.forward(q, k, v, o, causal, softmax_scale)
    variant_id: str
    arch: str
    cache_key: str
    flags: list[str]
    ptxas: list[dict]            # PtxasRecord.to_dict() per kernel, ready for the manifest
    sass_path: Path | None
    build_dir: Path
    built_now: bool
    seconds: float
    library: Path | None = None  # the extension's .so (None for a python rung): the binary a verdict is kept for

# ---------------------------------------------------------------------------------------------
# Tools, arch and flags
# ---------------------------------------------------------------------------------------------

def cache_root() -> Path:
    """LAB_CACHE, else the user's cache folder (platformdirs: ~/.cache/flash-lab on Linux): never
    the package's own folder, which may be a read-only site-packages."""
    base = os.environ.get("LAB_CACHE") or platformdirs.user_cache_dir("flash-lab", appauthor=False)
    return Path(base) / "build"


def find_nvcc() -> str:
    found = shutil.which("nvcc")
    if not found:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        candidate = Path(home) / "bin" / "nvcc" if home else None
        found = str(candidate) if candidate and candidate.is_file() else None
    if not found:
        raise LabError("nvcc not found: building a rung needs the CUDA toolkit's compiler",
                       hint="install the CUDA toolkit and put its bin/ on PATH (or set CUDA_HOME)")
    return found


def _find_cuda_tool(name: str, nvcc: str) -> str | None:
    """cuobjdump and c++filt live beside nvcc or on PATH; nvcc itself may be a wrapper script."""
    found = shutil.which(name)
    if found:
        return found
    dirs = [Path(nvcc).resolve().parent]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(Path(os.environ[env]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    for d in dirs:
        if (d / name).is_file():
            return str(d / name)
    return None


@lru_cache(maxsize=None)
def nvcc_release(nvcc: str) -> str:
    """`13.0.88` from `nvcc --version` ("... release 13.0, V13.0.88")."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"{nvcc} --version failed: {e}", hint="check the CUDA toolkit install") from None
    m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    if not m:
        raise LabError(f"cannot read the version from `{nvcc} --version`: {out.strip()[:200]!r}")
    return m.group(1)


def validate_arch(arch: str) -> str:
    if not _ARCH_RE.match(arch):
        raise LabError(f"bad arch {arch!r}: expected sm_XY such as sm_80, sm_90a")
    return arch


def gencode(arch: str) -> str:
    """sm_90a -> -gencode=arch=compute_90a,code=sm_90a (SASS for exactly that arch, no PTX)."""
    m = _ARCH_RE.match(validate_arch(arch))
    return f"-gencode=arch=compute_{m.group(1)}{m.group(2)},code={arch}"


def device_arch(index: int = 0) -> str:
    """The arch of the current GPU: sm_90a on compute capability 9.0 (wgmma and TMA need the
    arch-specific target), sm_XY otherwise."""
    import torch

    return arch_of(*torch.cuda.get_device_capability(index))


def arch_of(major: int, minor: int) -> str:
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


# A tuning build (`lab tune`) compiles the rung's candidate configurations too (common.cuh's
# tuning contract); it is its own cached extension beside the plain one.
TUNING_DEFINE = "-DLAB_TUNING"
GQA_DEFINE = "-DLAB_GQA"   # the binding of a rung that declares gqa = true accepts heads_kv < heads
LSE_DEFINE = "-DLAB_WRITES_LSE"   # the binding of a rung whose forward writes the LSE accepts an lse tensor
DETERMINISTIC_DEFINE = "-DLAB_DETERMINISTIC"   # the binding of a deterministic = true rung takes deterministic=True


def nvcc_flags(variant: Variant, arch: str, tuning: bool = False) -> list[str]:
    """Flags for the rung's .cu, in the order given; the rung's extra -gencode flags follow ours."""
    flags = [*BASE_NVCC_FLAGS, gencode(arch), *([TUNING_DEFINE] if tuning else [])]
    for f in variant.arch_flags:
        if f not in flags:
            flags.append(f)
    return flags


def _torch_nvcc_defines() -> list[str]:
    """The defines torch's extension build passes to nvcc, so the standalone ptxas compile sees
    the same code (e.g. -D__CUDA_NO_HALF_OPERATORS__ hides half operators from later rungs)."""
    try:
        from torch.utils.cpp_extension import COMMON_NVCC_FLAGS
    except ImportError:
        return []
    return list(COMMON_NVCC_FLAGS)


def versions() -> dict:
    """What besides sources and flags changes the binary: torch (its headers and ABI), the CUDA
    torch was built with, and the nvcc that compiles."""
    torch_ = torch_versions()   # read without importing torch: the same answer as torch's own
    return {"torch": torch_["torch"], "torch_cuda": torch_["cuda"], "nvcc": nvcc_release(find_nvcc())}


def common_header_for(variant: Variant) -> Path:
    """The common.cuh the rung's `#include "common.cuh"` finds: one beside the rung wins (the
    compiler looks in the including file's folder first), else the lab's."""
    local = variant.source.parent / "common.cuh"
    return local if local.is_file() else COMMON_HEADER


def include_dirs(variant: Variant) -> list[str]:
    """The rung's own folder, then the lab's kernels/ (common.cuh's contract and helpers), so a
    workspace rung includes "common.cuh" without a copy of it."""
    dirs = [str(variant.source.parent), str(KERNELS_DIR)]
    return list(dict.fromkeys(dirs))


_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def local_headers(source: Path, dirs: Sequence[str]) -> list[Path]:
    """The quoted headers `source` includes, transitively, found as the compiler finds them (the
    including file's folder first, then `dirs`): a Hopper rung's kernels/hopper/*.cuh change its
    binary as much as its own file does. System headers (<...>) are the versions' business."""
    found: list[Path] = []
    todo = [Path(source)]
    while todo:
        current = todo.pop()
        for name in _INCLUDE_RE.findall(current.read_text(errors="replace")):
            for base in [current.parent, *map(Path, dirs)]:
                cand = (base / name).resolve()
                if cand.is_file():
                    if cand not in found and cand != Path(source).resolve():
                        found.append(cand)
                        todo.append(cand)
                    break
    return found


def sources_for(variant: Variant) -> list[Path]:
    common = common_header_for(variant)
    headers = [h for h in local_headers(variant.source, include_dirs(variant)) if h != common.resolve()]
    return [variant.source, common, *headers, BINDING]


def cache_key(sources: Sequence[Path], flags: Sequence[str], versions_: dict) -> str:
    """sha256 over each source's name and bytes, the flags in order, and the versions."""
    h = hashlib.sha256()
    for src in sources:
        h.update(Path(src).name.encode() + b"\0")
        h.update(Path(src).read_bytes() + b"\0")
    h.update(json.dumps(list(flags)).encode() + b"\0")
    h.update(json.dumps(versions_, sort_keys=True).encode())
    return h.hexdigest()


def _cxx_flags(variant: Variant, tuning: bool) -> list[str]:
    # The forward workspace function is optional (common.cuh): the binding's reference to it is weak.
    flags = [*BASE_CXX_FLAGS, f"-DLAB_LAUNCHER={variant.launcher}", f"-DLAB_FORWARD_WORKSPACE={variant.launcher}_workspace"]
    if variant.gqa:   # common.cuh's GQA contract: the binding lets K and V have fewer heads than Q
        flags.append(GQA_DEFINE)
    if variant.writes_lse:   # writes_lse = true, or backward = true (whose contract includes it)
        flags.append(LSE_DEFINE)
    if variant.deterministic:   # common.cuh's deterministic contract: the backward takes the flag
        flags.append(DETERMINISTIC_DEFINE)
    if variant.backward_launcher:   # common.cuh's backward contract
        flags += [f"-DLAB_BACKWARD_LAUNCHER={variant.backward_launcher}",
                  f"-DLAB_BACKWARD_WORKSPACE={variant.backward_launcher}_workspace"]
        if tuning:
            flags += [f"-DLAB_BACKWARD_TUNE_CONFIGS={variant.backward_launcher}_configs",
                      f"-DLAB_BACKWARD_TUNE_LAUNCHER={variant.backward_launcher}_config"]
    if tuning:
        flags += [TUNING_DEFINE, f"-DLAB_TUNE_CONFIGS={variant.launcher}_configs",
                  f"-DLAB_TUNE_LAUNCHER={variant.launcher}_config"]
    return flags


def _key_for(variant: Variant, arch: str, tuning: bool = False) -> tuple[list[str], str]:
    if not variant.source.is_file():
        raise LabError(f"{variant.id}: source {variant.source} is missing")
    if variant.kind != "cuda":
        raise LabError(f"{variant.id} is a {variant.kind} rung: there is nothing to compile")
    flags = nvcc_flags(variant, arch, tuning)
    # The C++ flags of the binding and the launcher symbol are part of what is built.
    key_flags = flags + [f"cxx:{f}" for f in _cxx_flags(variant, tuning)] + [f"launcher:{variant.launcher}"]
    return flags, cache_key(sources_for(variant), key_flags, versions())


def build_dir_for(variant: Variant, key: str, tuning: bool = False) -> Path:
    return cache_root() / f"{variant.label()}{'-tuning' if tuning else ''}-{key[:16]}"


# ---------------------------------------------------------------------------------------------
# ptxas resource usage
# ---------------------------------------------------------------------------------------------

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
# "ptxas info : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to
# insufficient register resources for the wgmma pipeline in the function '_ZN...'" (nvcc 13.0); the
# family's other codes (C7510, C7512-C7516, C7519) name other reasons in the same words. ptxas prints them
# before the "Compiling entry function" lines of the same arch.
_SERIALIZED_RE = re.compile(r"\((C\d{4})\)[^\n]*?wgmma\.mma_async instructions are serialized due to (.+?) "
                            r"in (?:the )?function '([^']+)'")


def wgmma_serializations(log: str) -> list[tuple[str, str, str, str | None]]:
    """ptxas's notices that it serialized a function's wgmma pipeline: (mangled function, code, reason,
    arch) each, the arch that of the "Compiling entry function" lines that follow (None where none does)."""
    found: list[list] = []
    for line in log.splitlines():
        if m := _SERIALIZED_RE.search(line):
            found.append([m.group(3), m.group(1), m.group(2).strip(), None])
        elif (m := _ENTRY_RE.search(line)) and found and found[-1][3] is None:
            for notice in found:
                notice[3] = notice[3] or m.group(2)
    return [tuple(n) for n in found]


def parse_ptxas(log: str, demangle: bool = True) -> list[PtxasRecord]:
    """Parse `nvcc -Xptxas -v` output into one record per (entry function, arch).

    ptxas prints, per entry function: "Compiling entry function 'NAME' for 'sm_XY'", then
    "Function properties for NAME" followed by the stack/spill line, then "Used N registers, ...
    [M bytes smem, ...]". Non-entry device functions also get "Function properties" blocks; they
    are not kernels and are skipped.
    """
    entries: list[dict] = []
    current: dict | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            current = {"mangled": m.group(1), "arch": m.group(2), "registers": None, "smem_bytes": 0,
                       "stack_bytes": 0, "spill_stores_bytes": 0, "spill_loads_bytes": 0}
            entries.append(current)
            props_for = None
        elif m := _PROPS_RE.search(line):
            props_for = m.group(1)
        elif (m := _FRAME_RE.search(line)) and current is not None and props_for == current["mangled"]:
            current["stack_bytes"], current["spill_stores_bytes"], current["spill_loads_bytes"] = map(int, m.groups())
            props_for = None
        elif (m := _USED_RE.search(line)) and current is not None and current["registers"] is None:
            current["registers"] = int(m.group(1))
            if s := _SMEM_RE.search(line):
                current["smem_bytes"] = int(s.group(1))
    serialized: dict[tuple[str, str | None], list[str]] = {}
    for name, code, reason, arch in wgmma_serializations(log):
        said = serialized.setdefault((name, arch), [])
        if f"{code}: {reason}" not in said:
            said.append(f"{code}: {reason}")
    names = [e["mangled"] for e in entries]
    pretty = dict(zip(names, demangle_names(names))) if demangle else {}
    return [PtxasRecord(kernel=pretty.get(e["mangled"], e["mangled"]), registers=e["registers"] or 0,
                        smem_bytes=e["smem_bytes"], stack_bytes=e["stack_bytes"],
                        spill_stores_bytes=e["spill_stores_bytes"], spill_loads_bytes=e["spill_loads_bytes"],
                        arch=e["arch"],
                        wgmma_serialized="; ".join(serialized.get((e["mangled"], e["arch"]))
                                                   or serialized.get((e["mangled"], None)) or []),
                        mangled=e["mangled"])
            for e in entries]


def ptxas_report(variant: Variant, arch: str | None = None, tuning: bool = False) -> PtxasReport:
    """Compile the rung's .cu alone for `arch` with ptxas -v; cached like the extension build.

    No GPU is needed: without one, `arch` defaults to the lab's sm_90a.
    """
    started = time.perf_counter()
    arch = validate_arch(arch or _default_arch())
    nvcc = find_nvcc()
    flags, key = _key_for(variant, arch, tuning)
    bdir = build_dir_for(variant, key, tuning)
    marker = bdir / _PTXAS_MARKER
    if marker.is_file():
        saved = json.loads(marker.read_text())
        return PtxasReport(variant.id, arch, flags, key, bdir, _saved_records(saved, bdir / "ptxas.log"),
                           Path(saved["sass"]) if saved.get("sass") else None, bdir / "ptxas.log",
                           compiled_now=False, seconds=time.perf_counter() - started)

    bdir.mkdir(parents=True, exist_ok=True)
    obj = bdir / f"{variant.label()}.o"
    tmp_obj = bdir / f".{variant.label()}.{os.getpid()}.o"
    includes = [a for d in include_dirs(variant) for a in ("-I", d)]
    cmd = [nvcc, "-c", "-Xptxas", "-v", *_torch_nvcc_defines(), *flags, *includes,
           "-o", str(tmp_obj), str(variant.source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (bdir / "ptxas.log").write_text(" ".join(cmd) + "\n" + log)
    if proc.returncode != 0:
        tmp_obj.unlink(missing_ok=True)
        raise LabError(f"nvcc failed to compile {variant.source} for {arch}:\n{_tail(log)}",
                       hint=f"full log: {bdir / 'ptxas.log'}")
    missing = _launcher_missing(nvcc, tmp_obj, variant, bdir)
    if missing:
        tmp_obj.unlink(missing_ok=True)
        raise LabError(f"{variant.source} does not export its launcher {variant.launcher}:\n{missing}",
                       hint=f'define LAB_EXPORT const char* {variant.launcher}(const LabAttentionArgs* args, '
                            'cudaStream_t stream) (kernels/common.cuh has the contract)')
    absent = _backward_missing(tmp_obj, variant)
    if absent:
        tmp_obj.unlink(missing_ok=True)
        raise LabError(f"{variant.source} declares backward = true but does not export {', '.join(absent)}",
                       hint="kernels/common.cuh's backward contract lists the two functions, or drop "
                            "`backward = true` from its lab:rung block")
    os.replace(tmp_obj, obj)
    records = parse_ptxas(log)
    if not records:
        raise LabError(f"ptxas reported no kernels for {variant.source.name}; log: {bdir / 'ptxas.log'}")
    sass = _dump_sass(nvcc, obj, bdir / f"{variant.label()}.sass")
    write_json_atomic(marker, {"cache_key": key, "arch": arch, "flags": flags,
                               "records": [r.to_dict() for r in records], "sass": str(sass) if sass else None})
    return PtxasReport(variant.id, arch, flags, key, bdir, records, sass, bdir / "ptxas.log",
                       compiled_now=True, seconds=time.perf_counter() - started)


def _saved_records(saved: dict, log: Path) -> list[PtxasRecord]:
    """The records of a ptxas.json; one written before the records carried the wgmma notice and the mangled
    name has them read again from the log kept beside it (the same compile: the key is the same)."""
    records = [PtxasRecord(**r) for r in saved["records"]]
    if all("wgmma_serialized" in r for r in saved["records"]) or not log.is_file():
        return records
    parsed = parse_ptxas(log.read_text(errors="replace"))
    return parsed if len(parsed) == len(records) else records


def _backward_missing(obj: Path, variant: Variant) -> list[str]:
    """The backward contract's symbols the object lacks (none when it declares no backward, or where
    nm is not there to tell: the extension's link then names what is missing)."""
    if not variant.backward_launcher:
        return []
    nm = shutil.which("nm")
    if not nm:
        return []
    out = subprocess.run([nm, "-g", "--defined-only", str(obj)], capture_output=True, text=True)
    if out.returncode != 0:
        return []
    wanted = [variant.backward_launcher, f"{variant.backward_launcher}_workspace"]
    return [w for w in wanted if not re.search(rf"\s[TtWw]\s+{re.escape(w)}$", out.stdout, re.M)]


def _launcher_missing(nvcc: str, obj: Path, variant: Variant, bdir: Path) -> str | None:
    """None when the object defines the rung's launcher as an extern "C" symbol; otherwise the
    linker's own lines from linking the object against a caller of the launcher."""
    nm = shutil.which("nm")
    if nm:
        out = subprocess.run([nm, "-g", "--defined-only", str(obj)], capture_output=True, text=True)
        if out.returncode == 0:
            if re.search(rf"\s[TtWw]\s+{re.escape(variant.launcher)}$", out.stdout, re.M):
                return None
    caller = bdir / "launcher_probe.cu"
    caller.write_text(f'#include "common.cuh"\nLAB_EXPORT const char* {variant.launcher}(const LabAttentionArgs*, '
                      f'cudaStream_t);\nint main() {{ return {variant.launcher}(nullptr, 0) != nullptr; }}\n')
    includes = [a for d in include_dirs(variant) for a in ("-I", d)]
    proc = subprocess.run([nvcc, *includes, "-o", str(bdir / "launcher_probe"), str(caller), str(obj)],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    return _tail(proc.stdout + proc.stderr, 8)


def _dump_sass(nvcc: str, obj: Path, dest: Path) -> Path | None:
    tool = _find_cuda_tool("cuobjdump", nvcc)
    if not tool:
        return None  # the report shows "no SASS (cuobjdump missing)" rather than failing the build
    proc = subprocess.run([tool, "--dump-sass", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    dest.write_text(proc.stdout)
    return dest


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _default_arch() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return device_arch()
    except ImportError:
        pass
    return DEFAULT_PTXAS_ARCH


# ---------------------------------------------------------------------------------------------
# The extension
# ---------------------------------------------------------------------------------------------

def require_cuda_torch(command: str = "build") -> None:
    """Building and loading the extension needs CUDA torch and a GPU; the ptxas report does not."""
    require_gpu(command, hint="`lab build --ptxas-only` reports registers, shared memory and spills without a GPU")


def build(variant: Variant, arch: str | None = None, verbose: bool = False,
          allow_compile: bool = True, tuning: bool = False) -> BuildResult:
    """Build (or load the cached build of) one rung; `allow_compile=False` refuses to compile;
    `tuning=True` builds the rung's tuning candidates in (module.configs, module.forward_config).
    A python rung builds nothing: its module is the callable behind the extension's interface; a pair
    (lab.ladder.pairing) builds its two parts."""
    started = time.perf_counter()
    require_cuda_torch()
    if variant.parts:
        parts = [build(p, arch, verbose, allow_compile, tuning) for p in variant.parts]
        return _pair_result(variant, parts, pairing.PairedModule(variant, parts[0].module, parts[1].module), started)
    if variant.kind == "python":
        return _python_result(variant, started)
    arch = validate_arch(arch or device_arch())
    flags, key = _key_for(variant, arch, tuning)
    bdir = build_dir_for(variant, key, tuning)

    if key in _loaded:
        return _result(variant, arch, flags, key, bdir, _loaded[key], built_now=False, started=started, tuning=tuning)

    marker = bdir / _BUILD_MARKER
    if marker.is_file():
        saved = json.loads(marker.read_text())
        so_path = bdir / saved["library"]
        if so_path.is_file():
            module = _import_extension(saved["module_name"], so_path)
            _loaded[key] = module
            return _result(variant, arch, flags, key, bdir, module, built_now=False, started=started, tuning=tuning)

    if not allow_compile:
        raise LabError(f"{variant.id} is not built for {arch} with the current sources and flags",
                       hint=f"run `lab build --variant {variant.id}` first")

    # The ptxas step (resource usage and SASS: nvcc on the .cu alone) and the extension's own compile
    # (ninja: nvcc on the .cu, the C++ compiler on binding.cpp) are independent processes: run side by
    # side, a cold build takes the longest of them instead of the ptxas step plus the rest (a tuning
    # build's .cu alone is most of a minute). The ptxas step's error is still the one raised: a compile
    # error reads better from nvcc alone than through ninja.
    bdir.mkdir(parents=True, exist_ok=True)   # before either writes into it
    ptxas = _Background(ptxas_report, variant, arch, tuning)
    module_name = f"lab_{variant.label()}{'_tuning' if tuning else ''}_{key[:12]}"
    from torch.utils.cpp_extension import load

    try:
        module = load(name=module_name, sources=[str(variant.source), str(BINDING)],
                      extra_cflags=_cxx_flags(variant, tuning),
                      extra_cuda_cflags=flags, extra_include_paths=include_dirs(variant),
                      build_directory=str(bdir), verbose=verbose)
    except Exception as e:
        ptxas.result()   # nvcc's own refusal first (a compile error, a launcher the .cu does not export)
        if isinstance(e, (RuntimeError, OSError, subprocess.CalledProcessError)):
            raise LabError(f"building the {variant.id} extension failed: {_tail(str(e))}",
                           hint="rerun with `lab build --verbose` to see the compiler output") from None
        raise
    ptxas.result()
    write_json_atomic(marker, {"cache_key": key, "arch": arch, "flags": flags, "versions": versions(),
                               "module_name": module.__name__, "library": Path(module.__file__).name,
                               "seconds": time.perf_counter() - started})
    _loaded[key] = module
    return _result(variant, arch, flags, key, bdir, module, built_now=True, started=started, tuning=tuning)


class _Background:
    """`fn(*args)` on a thread of its own (its work is a child process: nvcc); `result()` waits and
    returns or raises what it did. A daemon thread: Ctrl-C in the caller does not wait for it (the
    CLI ends the compiler with the rest of its process group)."""

    def __init__(self, fn, *args):
        self._value, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self._thread.start()

    def _run(self, fn, args):
        try:
            self._value = fn(*args)
        except BaseException as e:   # noqa: BLE001 - handed to the caller of result()
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def is_built(variant: Variant, arch: str | None = None, tuning: bool = False) -> bool:
    """Whether a complete cached build of the rung (its tuning build with `tuning`) exists for this
    GPU (compiles and loads nothing): lets `lab profile`'s measuring child say there is none, and
    `lab tune` compile its two builds side by side when neither is."""
    require_cuda_torch()
    if variant.parts:   # a python part compiles nothing
        return all(p.kind == "python" or is_built(p, arch, tuning) for p in variant.parts)
    arch = validate_arch(arch or device_arch())
    _, key = _key_for(variant, arch, tuning)
    marker = build_dir_for(variant, key, tuning) / _BUILD_MARKER
    try:
        saved = json.loads(marker.read_text())
        return (marker.parent / saved["library"]).is_file()
    except (OSError, ValueError, KeyError, TypeError):
        return False


def cached_build(variant: Variant, compute_capability: str, tuning: bool = False) -> BuildResult | None:
    """The complete cached build of the rung for a GPU of that compute capability ("9.0"), as a
    BuildResult without its module (None where there is none): found without torch or CUDA, for
    `lab profile`'s parent, whose measuring child loads the module. A python rung's facts (nothing to
    compile) come without importing its callable. `tuning`: its tuning build (`lab profile --candidate`)."""
    started = time.perf_counter()
    if variant.parts:
        parts = [cached_build(p, compute_capability, tuning) for p in variant.parts]
        return None if None in parts else _pair_result(variant, parts, None, started)
    if variant.kind == "python":
        if not variant.source.is_file():
            raise LabError(f"{variant.id}: source {variant.source} is missing")
        return BuildResult(module=None, variant_id=variant.id, arch="", cache_key=python_rung.source_key(variant),
                           flags=[], ptxas=[], sass_path=None, build_dir=variant.source.parent, built_now=False,
                           seconds=time.perf_counter() - started)
    major, minor = (int(x) for x in compute_capability.split("."))
    arch = arch_of(major, minor)
    flags, key = _key_for(variant, arch, tuning)
    bdir = build_dir_for(variant, key, tuning)
    try:
        saved = json.loads((bdir / _BUILD_MARKER).read_text())
        library = bdir / saved["library"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not library.is_file() or not (bdir / _PTXAS_MARKER).is_file():
        return None
    return _result(variant, arch, flags, key, bdir, None, built_now=False, started=started, tuning=tuning,
                   library=library)


def _python_result(variant: Variant, started: float) -> BuildResult:
    if not variant.source.is_file():
        raise LabError(f"{variant.id}: source {variant.source} is missing")
    module = python_rung.load(variant)
    return BuildResult(module=module, variant_id=variant.id, arch="", cache_key=python_rung.source_key(variant),
                       flags=[], ptxas=[], sass_path=None, build_dir=variant.source.parent, built_now=False,
                       seconds=time.perf_counter() - started)


def _pair_result(variant: Variant, parts: list[BuildResult], module, started: float) -> BuildResult:
    """A pair's build: its parts' facts side by side (both parts' kernels in ptxas; the cache key of
    both, so that a verdict kept for the pair is dropped when either part changes)."""
    first, second = parts
    return BuildResult(module=module, variant_id=variant.id, arch=first.arch or second.arch,
                       cache_key=f"{first.cache_key}{pairing.SEPARATOR}{second.cache_key}",
                       flags=list(dict.fromkeys(first.flags + second.flags)), ptxas=first.ptxas + second.ptxas,
                       sass_path=first.sass_path, build_dir=first.build_dir,
                       built_now=first.built_now or second.built_now, seconds=time.perf_counter() - started)


def load_cached(variant: Variant, arch: str | None = None):
    """The rung's extension module, built earlier by the parent; compiles nothing."""
    return build(variant, arch, allow_compile=False).module


def _import_extension(module_name: str, so_path: Path):
    """Import a finished extension .so, as torch.utils.cpp_extension does after a build."""
    import torch  # noqa: F401  (loads libtorch, which the extension links against)

    spec = importlib.util.spec_from_file_location(module_name, so_path)
    if spec is None or spec.loader is None:
        raise LabError(f"cannot import the cached extension {so_path}", hint=f"delete {so_path.parent} and rebuild")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(variant, arch, flags, key, bdir, module, built_now: bool, started: float,
            tuning: bool = False, library: Path | None = None) -> BuildResult:
    report = ptxas_report(variant, arch, tuning)  # cached: reads ptxas.json (the tuning build's own kernels)
    if library is None and getattr(module, "__file__", None):
        library = Path(module.__file__)
    return BuildResult(module=module, variant_id=variant.id, arch=arch, cache_key=key, flags=flags,
                       ptxas=[r.to_dict() for r in report.records], sass_path=report.sass_path,
                       build_dir=bdir, built_now=built_now, seconds=time.perf_counter() - started, library=library)


def short_kernel_name(kernel: str) -> str:
    """`void attention_fwd_v1_kernel<128>(float const*, ...)` -> `attention_fwd_v1_kernel<128>`."""
    return short_name(kernel)


# ---------------------------------------------------------------------------------------------
# Many rungs at once
# ---------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    variant: Variant
    result: Any = None           # PtxasReport (ptxas_only) or BuildResult; None when it failed
    error: str | None = None     # the LabError's message (a compile error carries nvcc's lines)
    hint: str | None = None
    tuning: bool = False         # the rung's tuning build (`lab tune`'s candidates), not its plain one

    @property
    def label(self) -> str:
        return f"{self.variant.id} tuning" if self.tuning else self.variant.id


def build_one_by_one(variants: Sequence[Variant], arch: str | None, verbose: bool = False,
                     tuning: bool = False) -> list[Outcome]:
    """Build rungs in turn (with verbose, one compiler output at a time reads); one rung's error
    does not stop the others. `tuning`: a rung's tuning build after its plain one (build_many's)."""
    outcomes = []
    for v in variants:
        for tuned in (False, True) if tuning and declares_tuning(v) else (False,):
            try:
                outcomes.append(Outcome(v, build(v, arch, verbose=verbose, tuning=tuned), tuning=tuned))
            except LabError as e:
                outcomes.append(Outcome(v, None, str(e), e.hint, tuning=tuned))
    return outcomes


def outcome_records(outcomes: list[Outcome], ptxas_only: bool) -> list[dict]:
    """The built rungs as `lab build --json` prints them (and markdown_builds reads them)."""
    records = []
    for o in outcomes:
        v, r = o.variant, o.result
        if o.error or r is None:
            continue
        if v.kind == "python" and not isinstance(r, BuildResult):
            continue
        if ptxas_only:
            records.append({"variant": v.id, "tuning": o.tuning, "arch": r.arch, "cache_key": r.cache_key, "flags": r.flags,
                            "build_dir": str(r.build_dir), "sass": str(r.sass_path) if r.sass_path else None,
                            "built_now": r.compiled_now, "seconds": r.seconds,
                            "ptxas": [rec.to_dict() for rec in r.records]})
        else:
            records.append({"variant": v.id, "tuning": o.tuning, "kind": v.kind, "arch": r.arch, "cache_key": r.cache_key,
                            "flags": r.flags, "build_dir": str(r.build_dir),
                            "sass": str(r.sass_path) if r.sass_path else None,
                            "built_now": r.built_now, "seconds": r.seconds, "ptxas": r.ptxas})
    return records


def _compile_in_worker(variant: Variant, arch: str, tuning: bool = False) -> tuple[float, bool]:
    """Runs in a worker process: compile (or find cached) one rung's extension; the parent then
    imports the finished .so from the cache. Returns (seconds, compiled now)."""
    r = build(variant, arch, tuning=tuning)
    return r.seconds, r.built_now


def declares_tuning(variant: Variant) -> bool:
    """A CUDA rung whose file follows the tuning contract (candidates under #ifdef LAB_TUNING)."""
    return getattr(variant, "kind", "cuda") == "cuda" and "LAB_TUNING" in variant.source.read_text()


def default_jobs(count: int) -> int:
    return max(1, min(count, os.cpu_count() or 1))


def build_many(variants: Sequence[Variant], arch: str | None, ptxas_only: bool, jobs: int | None = None,
               on_start=None, on_done=None, tuning: bool = False) -> list[Outcome]:
    """Build rungs concurrently: the ptxas step in threads (each is an nvcc process), extension
    builds in worker processes (each runs its own ninja), `jobs` at a time. One rung's compile
    error does not stop the others; outcomes come back in the order given. `tuning`: each rung that
    declares tuning candidates also gets its tuning build (`lab tune`'s), as one more job beside the
    others, its outcome after the rung's plain one. `on_start(outcome)` as a build starts,
    `on_done(outcome)` as it ends."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
    import multiprocessing

    cuda = [v for v in variants if v.kind == "cuda"]
    outcomes = {}
    for v in variants:
        outcomes[(id(v), False)] = Outcome(v)
        if tuning and v.kind == "cuda" and declares_tuning(v):
            outcomes[(id(v), True)] = Outcome(v, tuning=True)
    for v in variants:
        if v.kind == "python":   # nothing to compile; importing its callable is its build step
            try:
                python_rung.load_functions(v)
            except LabError as e:
                outcomes[(id(v), False)].error, outcomes[(id(v), False)].hint = str(e), e.hint
    todo = [o for o in outcomes.values() if o.variant.kind == "cuda"]
    jobs = jobs or default_jobs(len(todo))
    if ptxas_only:
        pool = ThreadPoolExecutor(max_workers=jobs)
        submit = lambda o: pool.submit(ptxas_report, o.variant, arch, o.tuning)  # noqa: E731
    else:
        arch = validate_arch(arch or device_arch())
        for v in cuda:
            _key_for(v, arch)   # a missing source is refused here, before any worker starts
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
        submit = lambda o: pool.submit(_compile_in_worker, o.variant, arch, o.tuning)  # noqa: E731
    with pool:
        futures = {}
        for o in sorted(todo, key=lambda o: not o.tuning):   # the longest compiles (the tuning builds) first
            if on_start:
                on_start(o)
            futures[submit(o)] = o
        for fut in as_completed(futures):
            out = futures[fut]
            v = out.variant
            try:
                value = fut.result()
                if ptxas_only:
                    out.result = value
                else:  # cached now: this imports the worker's .so and reports the worker's time
                    out.result = build(v, arch, tuning=out.tuning)
                    out.result.seconds, out.result.built_now = value
            except LabError as e:
                out.error, out.hint = str(e), e.hint
            except Exception as e:  # a worker that died (e.g. killed for memory) fails its rung only
                out.error = f"{out.label}: the build worker failed: {type(e).__name__}: {e}"
            if on_done:
                on_done(out)
    return list(outcomes.values())


def markdown_builds(results: list[dict], wall_s: float | None, command: str, jobs: int) -> str:
    """The build times as Markdown for benchmarks/RESULTS.md, headed by the machine, date and commit."""
    from datetime import datetime, timezone

    git = git_info()
    commit = (git["commit"] or "?")[:10] + {True: " (with uncommitted changes)", None: "", False: ""}[git["dirty"]]
    try:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU (ptxas only)"
        torch_v = torch.__version__
    except ImportError:
        device, torch_v = "no GPU (ptxas only)", None
    compiled = sum(1 for r in results if r["built_now"])
    lines = [f"### `{command}`", "",
             f"{device}, {os.cpu_count()} CPU cores, {jobs} rungs at a time, nvcc {nvcc_release(find_nvcc())}, torch "
             f"{torch_v}, {datetime.now(timezone.utc):%Y-%m-%d}, commit {commit}. "
             f"{compiled} of {len(results)} compiled now (the rest came from the cache).", "",
             "| rung | seconds | compiled now |", "| --- | --- | --- |"]
    for r in results:
        rung = f"{r['variant']} tuning" if r.get("tuning") else r["variant"]
        lines.append(f"| {rung} | {r['seconds']:.1f} | {'yes' if r['built_now'] else 'cached'} |")
    if wall_s is not None:
        lines.append(f"| **all, wall clock** | **{wall_s:.1f}** | |")
    return "\n".join(lines) + "\n"

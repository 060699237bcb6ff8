"""lab.ladder.build on the CPU: the cache key, arch flags, and ptxas resource records parsed from real nvcc
output of our own kernels (skipped with a reason where nvcc is missing). The extension build
itself needs a GPU: tests/test_check_gpu.py covers it."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import platformdirs
import pytest

from lab.ladder import build
from lab.errors import LabError
from lab.ladder.registry import builtin
from conftest import lab_here  # noqa: E402

VARIANTS = builtin()

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH: the ptxas tests compile real kernels")
try:
    import torch

    HAS_GPU = torch.cuda.is_available()
except ImportError:
    HAS_GPU = False

VERSIONS = {"torch": "2.13.0", "torch_cuda": "13.0", "nvcc": "13.0.88"}
FIRST = VARIANTS[0]                 # the ladder's first rung: its sources stand in for any rung's
FP32_RUNGS = [v for v in VARIANTS if v.dtypes == ("float32",)]   # held to zero spills


# ----------------------------------------------------------------------------------------------
# cache key
# ----------------------------------------------------------------------------------------------

@pytest.fixture
def source_copies(tmp_path):
    """Copies of the first rung's sources, so a test can change a byte without touching kernels/."""
    paths = []
    for src in build.sources_for(FIRST):
        dst = tmp_path / src.name
        dst.write_bytes(src.read_bytes())
        paths.append(dst)
    return paths


def test_cache_key_is_stable(source_copies):
    flags = build.nvcc_flags(FIRST, "sm_90a")
    first = build.cache_key(source_copies, flags, VERSIONS)
    assert build.cache_key(source_copies, list(flags), dict(VERSIONS)) == first
    assert build.cache_key(build.sources_for(FIRST), flags, VERSIONS) == first  # same bytes, other dir


@pytest.mark.parametrize("which", [FIRST.source.name, "common.cuh", "binding.cpp"])
def test_cache_key_changes_with_any_source(source_copies, which):
    flags = build.nvcc_flags(FIRST, "sm_90a")
    before = build.cache_key(source_copies, flags, VERSIONS)
    path = next(p for p in source_copies if p.name == which)
    path.write_text(path.read_text() + "\n// one more line\n")
    assert build.cache_key(source_copies, flags, VERSIONS) != before


def test_cache_key_changes_with_flags_and_versions(source_copies):
    flags = build.nvcc_flags(FIRST, "sm_90a")
    key = build.cache_key(source_copies, flags, VERSIONS)
    assert build.cache_key(source_copies, build.nvcc_flags(FIRST, "sm_80"), VERSIONS) != key
    assert build.cache_key(source_copies, flags + ["-G"], VERSIONS) != key
    assert build.cache_key(source_copies, list(reversed(flags)), VERSIONS) != key
    for field in VERSIONS:
        assert build.cache_key(source_copies, flags, {**VERSIONS, field: "other"}) != key, field


def test_rungs_get_different_keys_and_dirs():
    flags = build.nvcc_flags(FIRST, "sm_90a")
    keys = {v.id: build.cache_key(build.sources_for(v), flags, VERSIONS) for v in VARIANTS}
    assert len(set(keys.values())) == len(VARIANTS)
    dirs = {build.build_dir_for(v, keys[v.id]) for v in VARIANTS}
    assert len(dirs) == len(VARIANTS)


# ----------------------------------------------------------------------------------------------
# arch and flags
# ----------------------------------------------------------------------------------------------

def test_gencode_and_flags():
    assert build.gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"
    assert build.gencode("sm_80") == "-gencode=arch=compute_80,code=sm_80"
    flags = build.nvcc_flags(FIRST, "sm_90a")
    assert "-O3" in flags and "-lineinfo" in flags and "-gencode=arch=compute_90a,code=sm_90a" in flags


@pytest.mark.parametrize("arch", ["sm9", "90a", "sm_9", "compute_90", "sm_90b", ""])
def test_bad_arch_is_a_lab_error(arch):
    with pytest.raises(LabError, match="bad arch"):
        build.validate_arch(arch)


def test_missing_nvcc_is_a_lab_error_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(LabError, match="nvcc not found") as err:
        build.find_nvcc()
    assert "CUDA toolkit" in err.value.hint


# ----------------------------------------------------------------------------------------------
# ptxas on real nvcc output
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_cache():
    """The tests' own build cache, apart from the user's (~/.cache/flash-lab/tests): the first run on a
    machine compiles every rung (minutes on two cores); a later one reuses a compile only where the
    build's key, the sha256 of every source and header with the flags and the tool versions, is the
    same, so any change to a rung, a header, a flag or nvcc compiles it again. CI's fresh machine
    compiles all of them (and .ci/run's tools/compile_kernels.sh each rung for sm_90a and sm_80)."""
    root = Path(platformdirs.user_cache_dir("flash-lab", appauthor=False)) / "tests"
    root.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("LAB_CACHE")
    os.environ["LAB_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("LAB_CACHE", None)
    else:
        os.environ["LAB_CACHE"] = old


@pytest.fixture(scope="module")
def ladder_ptxas(lab_cache):
    """Every rung's ptxas step for sm_90a, and the fp32 rungs' for sm_80, compiled once for this module
    and all at once (lab build's own build_many: one nvcc per CPU), as `lab build --ptxas-only` does."""
    cuda = [v for v in VARIANTS if v.kind == "cuda"]
    outcomes = {"sm_90a": build.build_many(cuda, "sm_90a", ptxas_only=True),
                "sm_80": build.build_many(FP32_RUNGS, "sm_80", ptxas_only=True)}
    for arch, done in outcomes.items():
        failed = [(o.variant.id, o.error) for o in done if o.error]
        assert not failed, (arch, failed)
    return {(o.variant.id, arch): o.result for arch, done in outcomes.items() for o in done}


@needs_nvcc
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_every_rung_compiles_and_ptxas_reports_its_kernels(variant, lab_cache, ladder_ptxas):
    report = ladder_ptxas[(variant.id, "sm_90a")]
    # compiled now, or by an earlier session from the very same sources, flags and tools (the key)
    assert report.compiled_now or (report.build_dir / "ptxas.json").is_file()
    assert report.build_dir.is_relative_to(lab_cache)
    assert report.records, f"no kernels in {report.log_path}"
    for rec in report.records:
        assert rec.arch == "sm_90a"
        assert 0 < rec.registers <= 255
        assert rec.smem_bytes >= 0 and rec.stack_bytes >= 0

    again = build.ptxas_report(variant, "sm_90a")
    assert not again.compiled_now, "a second ptxas step with nothing changed must come from the cache"
    assert again.records == report.records and again.cache_key == report.cache_key


@needs_nvcc
@pytest.mark.parametrize("variant", FP32_RUNGS, ids=lambda v: v.id)
def test_fp32_rungs_have_one_spill_free_kernel_per_head_dim(variant, lab_cache, ladder_ptxas):
    if shutil.which("c++filt") is None:
        pytest.skip("c++filt not found: kernel names stay mangled")
    for arch in ("sm_90a", "sm_80"):
        report = ladder_ptxas[(variant.id, arch)]
        names = [build.short_kernel_name(r.kernel) for r in report.records]
        for d in variant.head_dims:  # a template instantiated per head dim: Kernel<D> or Config<D, ...>
            assert any(f"<{d}>" in n or f"<{d}," in n for n in names), f"no kernel for D={d} among {names}"
        spilled = [(r.kernel, r.spill_stores_bytes, r.spill_loads_bytes, r.stack_bytes) for r in report.records
                   if r.spill_stores_bytes or r.spill_loads_bytes or r.stack_bytes]
        assert not spilled, f"{variant.id} spills on {arch}: {spilled}"


def _nvcc_log(*args) -> str:
    proc = subprocess.run([NVCC, "-c", "-Xptxas", "-v", *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


REGISTER_PRESSURE_CU = """
__global__ void register_pressure(const float* in, float* out, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[threadIdx.x + i * n];
#pragma unroll
  for (int j = 1; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + j) % 64] + 1.f;
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  out[threadIdx.x] = s;
}
"""


@needs_nvcc
def test_parser_reads_spills_when_ptxas_reports_them(tmp_path):
    """The zero-spill test above is only worth something if spills are parsed: 64 live floats
    under a 24-register cap make ptxas spill, and the parser must say so. (Our rungs carry
    __launch_bounds__, which overrides -maxrregcount, so a small kernel of its own is used.)"""
    src = tmp_path / "register_pressure.cu"
    src.write_text(REGISTER_PRESSURE_CU)
    log = _nvcc_log("-O3", "-maxrregcount=24", build.gencode("sm_90a"), "-o", str(tmp_path / "p.o"), str(src))
    (rec,) = build.parse_ptxas(log)
    assert rec.registers <= 24
    assert rec.spill_stores_bytes > 0 and rec.spill_loads_bytes > 0 and rec.stack_bytes > 0, log


@needs_nvcc
def test_parser_reads_static_smem_and_every_arch(tmp_path):
    src = tmp_path / "static_smem.cu"
    src.write_text("__global__ void tile_copy(float* out) {\n"
                   "  __shared__ float tile[256];\n"
                   "  tile[threadIdx.x] = out[threadIdx.x];\n"
                   "  __syncthreads();\n"
                   "  out[threadIdx.x] = tile[255 - threadIdx.x];\n"
                   "}\n")
    log = _nvcc_log(build.gencode("sm_90a"), build.gencode("sm_80"), "-o", str(tmp_path / "s.o"), str(src))
    records = build.parse_ptxas(log)
    assert sorted(r.arch for r in records) == ["sm_80", "sm_90a"]
    for r in records:
        assert r.smem_bytes == 256 * 4
        assert r.kernel.startswith("tile_copy") or r.kernel == "_Z9tile_copyPf"


@needs_nvcc
def test_lab_build_ptxas_only_json(lab_cache, ladder_ptxas):
    pair = [v.id for v in FP32_RUNGS[:2]]
    res = lab_here("build", "--variant", ",".join(pair), "--ptxas-only", "--arch", "sm_80", "--json",
                   env={"LAB_CACHE": str(lab_cache)})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert [r["variant"] for r in out] == pair
    for r in out:
        assert r["arch"] == "sm_80" and "-gencode=arch=compute_80,code=sm_80" in r["flags"]
        assert {"kernel", "registers", "smem_bytes", "stack_bytes", "spill_stores_bytes",
                "spill_loads_bytes"} <= set(r["ptxas"][0])
        assert Path(r["build_dir"]).is_relative_to(lab_cache)


def _lab(*args):
    return lab_here(*args)


@pytest.mark.parametrize("args, message", [
    (["build", "--variant", "no_such_rung", "--ptxas-only"], "unknown variant"),
    (["build", "--arch", "sm9", "--ptxas-only"], "bad arch"),
])
def test_build_bad_input_exits_2(args, message):
    res = _lab(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU refusal; this machine has a GPU")
def test_build_without_gpu_exits_2_and_names_ptxas_only():
    res = _lab("build", "--variant", FIRST.id)
    assert res.returncode == 2, res.stderr
    assert "needs an NVIDIA GPU" in res.stderr and "--ptxas-only" in res.stderr and "Traceback" not in res.stderr


def test_cache_key_follows_the_headers_a_rung_includes(tmp_path):
    """A rung's quoted includes (kernels/hopper/*.cuh for the Hopper rungs) are part of what it is
    built from: found transitively, as the compiler finds them, and hashed into its key."""
    (tmp_path / "hopper").mkdir()
    (tmp_path / "hopper" / "pipe.cuh").write_text('#pragma once\n#include "../common.cuh"\n#include "mma.cuh"\n')
    (tmp_path / "hopper" / "mma.cuh").write_text("#pragma once\n// mma\n")
    (tmp_path / "common.cuh").write_text("#pragma once\n")
    rung = tmp_path / "v9_x.cu"
    rung.write_text('#include "common.cuh"\n#include "hopper/pipe.cuh"\n#include <cuda.h>\n')
    found = build.local_headers(rung, [str(tmp_path)])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["common.cuh", "hopper/pipe.cuh", "hopper/mma.cuh"]
    flags = build.nvcc_flags(FIRST, "sm_90a")
    key = build.cache_key([rung, *found], flags, VERSIONS)
    (tmp_path / "hopper" / "mma.cuh").write_text("#pragma once\n// mma, changed\n")
    assert build.cache_key([rung, *found], flags, VERSIONS) != key
    hopper_rungs = [v for v in VARIANTS if '#include "hopper/' in v.source.read_text()]
    for v in hopper_rungs:
        assert any(p.parent.name == "hopper" for p in build.sources_for(v)), v.id


@needs_nvcc
def test_lab_build_ptxas_only_prints_a_line_per_rung_and_one_rungs_kernels_whole(lab_cache, ladder_ptxas):
    """Several rungs: one line each within 80 columns; one rung: each of its kernels, its name whole."""
    env = {"LAB_CACHE": str(lab_cache), "COLUMNS": "80"}
    pair = [v.id for v in FP32_RUNGS[:2]]
    argv = ["build", "--ptxas-only", "--arch", "sm_80", "--variant"]
    res = lab_here(*argv, ",".join(pair), env=env)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(map(len, lines)) <= 80, res.stdout
    assert [line.split()[0] for line in lines if line.split()[:1] and line.split()[0] in pair] == pair
    one = lab_here(*argv, pair[0], "--json", env=env)
    (rec,) = json.loads(one.stdout)
    text = lab_here(*argv, pair[0], env=env).stdout
    assert max(len(line) for line in text.splitlines() if line != rec["build_dir"]) <= 80, text
    assert rec["build_dir"] in text.splitlines()
    flat = " ".join(text.split())
    for k in rec["ptxas"]:
        assert " ".join(build.short_kernel_name(k["kernel"]).split()) in flat.replace("- ", "-")


def _unique_symbols(obj: Path) -> list[str]:
    """The STB_GNU_UNIQUE symbols of an object (nm's 'u'): unified across every library of a process."""
    out = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if " u " in line]


@needs_nvcc
@pytest.mark.skipif(shutil.which("nm") is None, reason="nm not on PATH: reads the compiled objects' symbols")
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.kind == "cuda"], ids=lambda v: v.id)
def test_no_rung_shares_a_static_with_another_extension(variant, lab_cache, ladder_ptxas):
    """A launcher's once-per-instantiation static (cudaFuncSetAttribute's result) must belong to its
    own extension: as a GNU-unique symbol it is shared with every other rung that instantiates the
    same header's template, and the second one loaded launches without its shared-memory limit
    raised ('invalid argument'). Compiled with the extension build's own flags."""
    report = ladder_ptxas[(variant.id, "sm_90a")]
    obj = report.build_dir / f"{variant.label()}.o"
    assert obj.is_file(), f"no object beside {report.log_path}"
    assert _unique_symbols(obj) == [], f"{variant.id} has GNU-unique symbols"


@needs_nvcc
@pytest.mark.skipif(shutil.which("nm") is None, reason="nm not on PATH: reads the compiled objects' symbols")
def test_the_unique_symbol_check_sees_a_shared_static(tmp_path):
    """The check above can fail: the same launcher pattern compiled without the lab's flag has one."""
    src = tmp_path / "s.cu"
    src.write_text("int measure(int);\n"   # a run-time initializer, as cudaFuncSetAttribute's result is
                   "template <int N> int once() { static const int v = measure(N); return v; }\n"
                   "int use() { return once<7>(); }\n")
    obj = tmp_path / "s.o"
    subprocess.run([NVCC, "-c", "-O3", "-o", str(obj), str(src)], check=True, capture_output=True)
    assert _unique_symbols(obj), "g++ no longer emits GNU-unique statics: the guard above tests nothing"


# ----------------------------------------------------------------------------------------------
# wgmma serialized by ptxas: its C75xx notices, on real logs (tests/fixtures/ptxas/README.md)
# ----------------------------------------------------------------------------------------------

PTXAS_LOGS = Path(__file__).parent / "fixtures" / "ptxas"
REGISTERS_REASON = "C7511: insufficient register resources for the wgmma pipeline"


def _real_log(name: str) -> str:
    import lzma

    return lzma.decompress((PTXAS_LOGS / f"{name}.log.xz").read_bytes()).decode()


def test_parser_matches_each_serialization_notice_to_its_kernel_on_a_real_log():
    """v9's tuning build with the HalfLastKeyTile candidates: ptxas (13.0) serialized those 32 kernels'
    wgmma for want of registers, one C7511 each (beside a C7517 that is no serialization notice), printed
    before the entries; each record carries it, matched by the mangled name, the other 272 carry ""."""
    log = _real_log("v9_tuning_serialized")
    notices = build.wgmma_serializations(log)
    assert len(notices) == 32 and {(code, arch) for _, code, _, arch in notices} == {("C7511", "sm_90a")}
    records = build.parse_ptxas(log)
    assert len(records) == 304 and all(r.mangled.startswith("_Z") for r in records)
    serialized = [r for r in records if r.wgmma_serialized]
    assert {r.wgmma_serialized for r in serialized} == {REGISTERS_REASON}
    assert sorted(r.mangled for r in serialized) == sorted(name for name, *_ in notices)
    assert all("HalfLastKeyTile" in r.kernel for r in serialized)                        # demangled
    assert not any("HalfLastKeyTile" in r.kernel for r in records if not r.wgmma_serialized)
    assert all(r.to_dict()["wgmma_serialized"] == "" for r in records if not r.wgmma_serialized)


def test_parser_finds_no_serialization_on_a_clean_real_log():
    log = _real_log("v9_tuning_clean")
    assert build.wgmma_serializations(log) == []
    records = build.parse_ptxas(log)
    assert len(records) == 272 and not any(r.wgmma_serialized for r in records)


def test_parser_reads_the_familys_other_reasons_and_keeps_each_once():
    """The family's notices share their words: another code and reason (C7515, as ptxas 12 printed it for
    a kernel `selp_b16`, NVIDIA/TensorRT-LLM#2116) reads the same way; two reasons for one kernel are both
    kept, a repeated one once."""
    c7515 = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
             "to non wgmma instructions defining accumulator registers of a wgmma between start and end of the "
             "pipeline stage in the function 'selp_b16'")
    c7511 = ("ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
             "insufficient register resources for the wgmma pipeline in the function 'selp_b16'")
    entry = ("ptxas info    : Compiling entry function 'selp_b16' for 'sm_90a'\n"
             "ptxas info    : Used 90 registers, used 0 barriers")
    (rec,) = build.parse_ptxas("\n".join([c7515, c7511, c7515, entry]))
    assert rec.wgmma_serialized == ("C7515: non wgmma instructions defining accumulator registers of a wgmma between "
                                    "start and end of the pipeline stage; " + REGISTERS_REASON)


def test_records_stored_before_the_notice_load_and_read_it_from_their_log(tmp_path):
    """A ptxas.json written before records carried the notice still loads (PtxasRecord's defaults), and
    the cached step reads the notice and the mangled name again from the log kept beside it."""
    log = _real_log("v9_tuning_serialized")
    (tmp_path / "ptxas.log").write_text(log)
    old = {"records": [{k: v for k, v in r.to_dict().items() if k not in ("wgmma_serialized", "mangled")}
                       for r in build.parse_ptxas(log)]}
    again = build._saved_records(old, tmp_path / "ptxas.log")
    assert sum(1 for r in again if r.wgmma_serialized == REGISTERS_REASON) == 32
    without_log = build._saved_records(old, tmp_path / "absent.log")
    assert len(without_log) == 304 and not any(r.wgmma_serialized or r.mangled for r in without_log)


def _seed_ptxas_cache(cache: Path, variant, log: str, stored_before_the_field: bool) -> None:
    """A finished ptxas step of `variant` for sm_90a in the cache `cache` (its key, as lab build computes
    it), whose log is `log`: lab build --ptxas-only then reads it as its own."""
    old = os.environ.get("LAB_CACHE")
    os.environ["LAB_CACHE"] = str(cache)
    try:
        flags, key = build._key_for(variant, "sm_90a")
        bdir = build.build_dir_for(variant, key)
    finally:
        os.environ.pop("LAB_CACHE") if old is None else os.environ.update(LAB_CACHE=old)
    bdir.mkdir(parents=True)
    (bdir / "ptxas.log").write_text(log)
    records = [r.to_dict() for r in build.parse_ptxas(log)]
    if stored_before_the_field:
        records = [{k: v for k, v in r.items() if k not in ("wgmma_serialized", "mangled")} for r in records]
    (bdir / "ptxas.json").write_text(json.dumps({"cache_key": key, "arch": "sm_90a", "flags": flags,
                                                 "records": records, "sass": None}))


@needs_nvcc
def test_lab_build_ptxas_only_counts_and_lists_the_serialized_kernels(tmp_path):
    """The real serialized log as a rung's cached ptxas step (one stored before records carried the
    notice): the table is followed by the count and each kernel, shortened as the table shows it, under
    ptxas's reason; --json carries the field; a clean log prints no such line."""
    _seed_ptxas_cache(tmp_path / "dirty", FIRST, _real_log("v9_tuning_serialized"), stored_before_the_field=True)
    _seed_ptxas_cache(tmp_path / "clean", FIRST, _real_log("v9_tuning_clean"), stored_before_the_field=False)
    argv = ["build", "--ptxas-only", "--arch", "sm_90a", "--variant", FIRST.id]
    res = lab_here(*argv, env={"LAB_CACHE": str(tmp_path / "dirty"), "COLUMNS": "400"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert any(line.startswith("wgmma serialized: 32 kernels") for line in lines), res.stdout
    assert f"  {FIRST.id}, {REGISTERS_REASON} (32):" in lines
    (rec,) = json.loads(lab_here(*argv, "--json", env={"LAB_CACHE": str(tmp_path / "dirty")}).stdout)
    serialized = [k for k in rec["ptxas"] if k["wgmma_serialized"]]
    assert len(serialized) == 32 and {k["wgmma_serialized"] for k in serialized} == {REGISTERS_REASON}
    listed = lines[lines.index(f"  {FIRST.id}, {REGISTERS_REASON} (32):") + 1:]
    assert [line.strip() for line in listed[:32]] == [build.short_kernel_name(k["kernel"]) for k in serialized]
    clean = lab_here(*argv, env={"LAB_CACHE": str(tmp_path / "clean")})
    assert clean.returncode == 0 and "wgmma serialized" not in clean.stdout, clean.stdout


@pytest.mark.parametrize("log, flag, code, line", [
    ("v9_tuning_serialized", "--fail-on-serialized-wgmma", 1, "32 with wgmma serialized"),
    ("v9_tuning_serialized", None, 0, "32 with wgmma serialized"),
    ("v9_tuning_clean", "--fail-on-serialized-wgmma", 0, "0 with wgmma serialized"),
])
def test_compile_kernels_fails_on_serialized_wgmma_when_asked(tmp_path, log, flag, code, line):
    """tools/compile_kernels.sh counts the functions ptxas serialized (each once) in its summary line and,
    with --fail-on-serialized-wgmma, fails on any; an nvcc stand-in prints the real logs."""
    (tmp_path / "ptxas.log").write_text(_real_log(log))
    fake = tmp_path / "nvcc"
    fake.write_text(f'#!/usr/bin/env bash\nif [ "$1" = --version ]; then echo "release 13.0, V13.0.88"; '
                    f'echo fake; exit 0; fi\ncat {tmp_path / "ptxas.log"}\n')
    fake.chmod(0o755)
    script = Path(__file__).resolve().parents[1] / "tools" / "compile_kernels.sh"
    res = subprocess.run(["bash", str(script), *([flag] if flag else []), str(FIRST.source)],
                         capture_output=True, text=True, env={**os.environ, "NVCC": str(fake)})
    assert res.returncode == code, res.stdout[-2000:] + res.stderr
    assert f"-- {FIRST.source.stem}: ok, " in res.stdout and line in res.stdout
    assert ("--fail-on-serialized-wgmma and ptxas serialized" in res.stderr) == (code == 1)


def test_lab_tune_warns_of_a_serialized_build_before_timing_it():
    """`lab tune` says, before it times anything, how many kernels of the build it times ptxas serialized and
    why (on the real log of v9's HalfLastKeyTile build: 32 of 304, C7511); nothing for the clean build."""
    from lab.measure.tune import serialized_note

    records = [r.to_dict() for r in build.parse_ptxas(_real_log("v9_tuning_serialized"))]
    note = serialized_note(records, "v9's tuning build", "lab build --ptxas-only --variant v9 --tuning")
    assert note.startswith("warning: ptxas serialized the wgmma pipeline of 32 of 304 kernels in v9's tuning build")
    assert f"({REGISTERS_REASON} (32))" in note and "`lab build --ptxas-only --variant v9 --tuning`" in note
    clean = [r.to_dict() for r in build.parse_ptxas(_real_log("v9_tuning_clean"))]
    assert serialized_note(clean, "v9's tuning build", "lab build") is None

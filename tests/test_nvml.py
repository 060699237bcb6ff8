"""The GPU's clocks, power limit and host index read in process through NVML (lab.nvml), and the
nvidia-smi path lab.environment falls back to where NVML cannot be read.

Without a driver (this suite's CPU machine): lab.nvml imports and calls NVML unavailable, once per
process; lab.environment then asks nvidia-smi (one on PATH that prints what a test gives it) and says
so in `gpu_probe_source`. The ctypes plumbing (an opaque handle, out pointers, string buffers, return
codes) runs against tests/nvml_standin.c, a library with nvml.h's signatures over two made-up GPUs,
built here with the C compiler. On the GPU machine (`pytest -m gpu`): NVML's fields equal
nvidia-smi's for every visible GPU, and a pinned process reads its GPU's host index through NVML."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import environment, nvml

STANDIN = Path(__file__).with_name("nvml_standin.c")
GPU0 = "GPU-5tand1n0-0000-0000-0000-000000000000"   # the stand-in's two GPUs
GPU1 = "GPU-5tand1n1-1111-1111-1111-111111111111"


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in library built, one without nvmlDeviceGetMaxClockInfo and one without load()'s functions."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc) to build tests/nvml_standin.c")
    folder = tmp_path_factory.mktemp("nvml")
    built = {}
    for name, flags in (("full", []), ("no-max-clock", ["-DSTANDIN_NO_MAX_CLOCK"]), ("no-load", ["-DSTANDIN_NO_LOAD"])):
        built[name] = folder / f"libnvml-standin-{name}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags, "-o", str(built[name]),
                        str(STANDIN)], check=True, capture_output=True, text=True)
    return built


def knob(path: Path, name: str) -> ctypes.c_int:
    """A standin_* global of the loaded stand-in (the same mapping lab.nvml's CDLL gets: dlopen keeps
    one per file)."""
    return ctypes.c_int.in_dll(ctypes.CDLL(str(path)), name)


@pytest.fixture
def fresh(standin):
    """The stand-in's knobs at their defaults around each test."""
    for name, value in (("standin_init_result", 0), ("standin_device_result", 0)):
        knob(standin["full"], name).value = value
    yield standin
    for name, value in (("standin_init_result", 0), ("standin_device_result", 0)):
        knob(standin["full"], name).value = value


def no_nvml(monkeypatch, why="NVML made unavailable by the test"):
    """This process's NVML (lab.nvml.shared) unavailable, whatever the machine has."""
    monkeypatch.setattr(nvml, "_shared", None)
    monkeypatch.setattr(nvml, "_unavailable", why)


def nvml_of(monkeypatch, library: nvml.Nvml):
    monkeypatch.setattr(nvml, "_shared", library)
    monkeypatch.setattr(nvml, "_unavailable", None)


def smi_on_path(tmp_path, monkeypatch, line: str | None) -> Path:
    """An nvidia-smi on PATH that prints `line` as its --query-gpu CSV (None: no nvidia-smi at all, the
    PATH holding only an empty folder) and writes its arguments to the returned file, a line a call."""
    calls = tmp_path / "smi-calls"
    calls.write_text("")
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if line is not None:
        exe = folder / "nvidia-smi"
        exe.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\ncat <<'EOF'\n{line}\nEOF\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder) if line is None else f"{folder}:{os.environ['PATH']}")
    return calls


# ------------------------------------------------------------------------------ without the library

def test_a_library_that_cannot_be_loaded_is_unavailable_with_the_reason(tmp_path):
    with pytest.raises(nvml.NvmlUnavailable, match="cannot be loaded"):
        nvml.Nvml(str(tmp_path / "libnvidia-ml.so.1"))


def test_without_a_driver_nvml_is_tried_once_per_process_and_stays_unavailable(monkeypatch):
    try:
        ctypes.CDLL(nvml.LIBRARY)
        pytest.skip(f"{nvml.LIBRARY} loads here (a GPU machine): the path without it is not this machine's")
    except OSError:
        pass
    monkeypatch.setattr(nvml, "_shared", None)
    monkeypatch.setattr(nvml, "_unavailable", None)
    tries = []
    real = nvml.Nvml
    monkeypatch.setattr(nvml, "Nvml", lambda: tries.append(1) or real())
    for _ in range(3):
        with pytest.raises(nvml.NvmlUnavailable, match=f"{nvml.LIBRARY} cannot be loaded"):
            nvml.read("GPU-anything")
    assert tries == [1]


def test_without_nvml_the_state_comes_from_nvidia_smi_and_says_so(tmp_path, monkeypatch):
    no_nvml(monkeypatch)
    calls = smi_on_path(tmp_path, monkeypatch, "3, 1755, 2619, 700.00")
    assert environment.gpu_state("GPU-abcd") == {"gpu_host_index": 3, "sm_clock_mhz": 1755, "mem_clock_mhz": 2619,
                                                 "power_limit_w": 700.0, "gpu_probe_source": "nvidia-smi"}
    (asked,) = calls.read_text().splitlines()
    assert "--id=GPU-abcd" in asked and "--query-gpu=index,clocks.sm,clocks.mem,power.limit" in asked


def test_a_field_nvidia_smi_does_not_give_is_none(tmp_path, monkeypatch):
    no_nvml(monkeypatch)
    smi_on_path(tmp_path, monkeypatch, "0, [N/A], 2619, [Not Supported]")
    state = environment.gpu_state("GPU-abcd")
    assert (state["sm_clock_mhz"], state["power_limit_w"], state["gpu_host_index"]) == (None, None, 0)
    assert state["gpu_probe_source"] == "nvidia-smi"


def test_neither_nvml_nor_nvidia_smi_gives_every_field_none_and_no_source(tmp_path, monkeypatch):
    no_nvml(monkeypatch)
    smi_on_path(tmp_path, monkeypatch, None)
    assert environment.gpu_state("GPU-abcd") == {"gpu_host_index": None, "sm_clock_mhz": None, "mem_clock_mhz": None,
                                                 "power_limit_w": None, "gpu_probe_source": None}
    smi_on_path(tmp_path, monkeypatch, "No devices were found")   # an answer, but not the query's
    assert environment.gpu_state("GPU-abcd")["gpu_probe_source"] is None


# ------------------------------------------------------------------------------ the ctypes plumbing, on the stand-in

def test_read_gives_each_field_through_handles_out_pointers_and_buffers(fresh):
    lib = nvml.Nvml(str(fresh["full"]))
    assert lib.read(GPU0) == {"gpu_uuid": GPU0, "gpu_name": "Stand-in GPU (tests)", "gpu_host_index": 0,
                              "sm_clock_mhz": 1755, "mem_clock_mhz": 2619, "max_sm_clock_mhz": 1980,
                              "power_limit_w": 699.999, "driver": "999.12.34"}   # NVML's mW, in W
    assert lib.read(GPU1)["gpu_host_index"] == 1 and lib.read(GPU1)["sm_clock_mhz"] == 1410
    assert set(lib.read(GPU0)) == set(nvml.FIELDS)


def test_load_gives_power_temperature_64_bit_energy_and_the_clock_event_reasons_by_name(fresh):
    lib = nvml.Nvml(str(fresh["full"]))
    assert lib.load(GPU0) == {"sm_clock_mhz": 1755, "power_draw_w": 512.345, "temperature_c": 61,
                              "energy_mj": 12345678901,   # above 2^32: read as 64 bits, not cut
                              "clock_event_reasons": ("sw_power_cap", "0x200", "0x10000000000")}
    assert set(lib.load(GPU0)) == set(nvml.LOAD_FIELDS)
    idle = lib.load(GPU1)   # neither the draw nor the energy supported there
    assert idle["power_draw_w"] is None and idle["energy_mj"] is None
    assert idle["clock_event_reasons"] == ("gpu_idle",) and idle["temperature_c"] == 30


def test_a_library_without_load_s_functions_still_reads_the_state_and_loads_none(fresh):
    lib = nvml.Nvml(str(fresh["no-load"]))
    assert lib.read(GPU0)["sm_clock_mhz"] == 1755 and lib.read(GPU0)["power_limit_w"] == 699.999
    assert lib.load(GPU0) == {"sm_clock_mhz": 1755, "power_draw_w": None, "temperature_c": None, "energy_mj": None,
                              "clock_event_reasons": None}


def test_a_field_nvml_does_not_support_is_none_not_a_guess(fresh):
    state = nvml.Nvml(str(fresh["full"])).read(GPU1)   # no power limit or max clock query on this one
    assert state["power_limit_w"] is None and state["max_sm_clock_mhz"] is None
    assert state["sm_clock_mhz"] == 1410


def test_an_error_other_than_not_supported_raises_with_nvml_s_words(fresh):
    lib = nvml.Nvml(str(fresh["full"]))
    with pytest.raises(nvml.NvmlError, match=r"nvmlDeviceGetHandleByUUID\(GPU-nope\) failed: Not Found \(6\)"):
        lib.read("GPU-nope")
    knob(fresh["full"], "standin_device_result").value = 15   # NVML_ERROR_GPU_IS_LOST
    with pytest.raises(nvml.NvmlError, match=r"failed: GPU is lost \(15\)") as caught:
        lib.read(GPU0)
    assert not isinstance(caught.value, nvml.NvmlUnavailable)


def test_a_library_that_does_not_initialise_or_lacks_a_function_is_unavailable(fresh):
    knob(fresh["full"], "standin_init_result").value = 9   # NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(nvml.NvmlUnavailable, match=r"nvmlInit_v2 failed: Driver Not Loaded \(9\)"):
        nvml.Nvml(str(fresh["full"]))
    with pytest.raises(nvml.NvmlUnavailable, match="has no nvmlDeviceGetMaxClockInfo"):
        nvml.Nvml(str(fresh["no-max-clock"]))


def test_the_process_s_nvml_is_initialised_once_and_kept(fresh, monkeypatch):
    monkeypatch.setattr(nvml, "_shared", None)
    monkeypatch.setattr(nvml, "_unavailable", None)
    monkeypatch.setattr(nvml, "Nvml", lambda real=nvml.Nvml: real(str(fresh["full"])))
    inits = knob(fresh["full"], "standin_inits")
    before = inits.value
    for _ in range(5):
        assert nvml.read(GPU0)["sm_clock_mhz"] == 1755
    assert inits.value == before + 1


def test_with_nvml_the_state_is_read_in_process_and_no_nvidia_smi_starts(fresh, tmp_path, monkeypatch):
    nvml_of(monkeypatch, nvml.Nvml(str(fresh["full"])))
    calls = smi_on_path(tmp_path, monkeypatch, "7, 1, 1, 1.00")
    assert environment.gpu_state(GPU0) == {"gpu_host_index": 0, "sm_clock_mhz": 1755, "mem_clock_mhz": 2619,
                                           "power_limit_w": 699.999, "gpu_probe_source": "nvml"}
    assert calls.read_text() == ""


def test_an_nvml_call_that_fails_falls_back_to_nvidia_smi_for_that_read(fresh, tmp_path, monkeypatch):
    nvml_of(monkeypatch, nvml.Nvml(str(fresh["full"])))
    calls = smi_on_path(tmp_path, monkeypatch, "7, 1200, 2619, 500.00")
    knob(fresh["full"], "standin_device_result").value = 15   # the GPU lost, to NVML
    assert environment.gpu_state(GPU0) == {"gpu_host_index": 7, "sm_clock_mhz": 1200, "mem_clock_mhz": 2619,
                                           "power_limit_w": 500.0, "gpu_probe_source": "nvidia-smi"}
    knob(fresh["full"], "standin_device_result").value = 0    # back: the next read is NVML's again
    assert environment.gpu_state(GPU0)["gpu_probe_source"] == "nvml"
    assert len(calls.read_text().splitlines()) == 1


# ------------------------------------------------------------------------------ on the GPU machine

def _smi_rows(fields: list[str]) -> dict[str, dict]:
    """nvidia-smi's --query-gpu `fields` (uuid first) for every GPU of the host, by UUID."""
    out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    rows = [dict(zip(fields, (s.strip() for s in line.split(",")))) for line in out.strip().splitlines()]
    return {r["uuid"]: r for r in rows}


def _needs_cuda():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    return torch


@pytest.mark.gpu
def test_nvml_reads_what_nvidia_smi_reads_for_every_visible_gpu():
    """Static fields exactly (the power limit to the 0.01 W nvidia-smi prints); the clocks may move a
    step between the two reads, so they are only held to be read, and the SM clock to its maximum."""
    _needs_cuda()
    smi = _smi_rows(["uuid", "index", "name", "power.limit", "clocks.max.sm", "driver_version"])
    uuids = environment.gpu_uuids()
    assert uuids
    for uuid in uuids:
        got = nvml.read(uuid)
        want = smi[uuid]
        assert got["gpu_uuid"] == uuid and got["gpu_host_index"] == int(want["index"])
        assert got["gpu_name"] == want["name"] and got["driver"] == want["driver_version"]
        assert got["max_sm_clock_mhz"] == int(want["clocks.max.sm"])
        assert f"{got['power_limit_w']:.2f}" == f"{float(want['power.limit']):.2f}", (got, want)
        assert 0 < got["sm_clock_mhz"] <= got["max_sm_clock_mhz"] and got["mem_clock_mhz"] > 0
        state = environment.gpu_state(uuid)
        assert state["gpu_probe_source"] == "nvml" and state["gpu_host_index"] == int(want["index"])


@pytest.mark.gpu
def test_the_fallback_agrees_with_nvml_on_the_gpu_and_nvml_is_the_cheaper_read(monkeypatch):
    _needs_cuda()
    uuid = environment.gpu_uuids()[-1]
    t = time.perf_counter()
    ours = [environment.gpu_state(uuid) for _ in range(20)]
    nvml_ms = (time.perf_counter() - t) * 1e3 / 20
    no_nvml(monkeypatch)
    t = time.perf_counter()
    theirs = [environment.gpu_state(uuid) for _ in range(3)]
    smi_ms = (time.perf_counter() - t) * 1e3 / 3
    print(f"\ngpu_state of {uuid}: NVML {nvml_ms:.3f} ms a read, nvidia-smi {smi_ms:.1f} ms a read")
    assert {s["gpu_probe_source"] for s in ours} == {"nvml"}
    assert {s["gpu_probe_source"] for s in theirs} == {"nvidia-smi"}
    assert {s["gpu_host_index"] for s in ours} == {s["gpu_host_index"] for s in theirs}
    assert {round(s["power_limit_w"], 2) for s in ours} == {s["power_limit_w"] for s in theirs}   # smi prints 0.01 W
    assert nvml_ms < smi_ms


@pytest.mark.gpu
def test_a_pinned_process_reads_its_gpu_s_host_index_through_nvml(tmp_path):
    """A sweep worker's view (CUDA_VISIBLE_DEVICES=<UUID>: its GPU is CUDA's device 0): the record says
    the host's index of that GPU, as nvidia-smi numbers it, read through NVML."""
    _needs_cuda()
    uuid = environment.gpu_uuids()[-1]
    code = ("import json, sys; from lab.environment import gpu_record, device_info; "
            "json.dump({'record': gpu_record(0), 'device': device_info(0)}, sys.stdout)")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=uuid, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    want = _smi_rows(["uuid", "index", "clocks.max.sm", "driver_version"])[uuid]
    assert got["record"]["gpu_uuid"] == uuid and got["record"]["gpu_probe_source"] == "nvml"
    assert got["record"]["gpu_host_index"] == int(want["index"])
    assert got["device"]["probe_source"] == "nvml" and got["device"]["driver"] == want["driver_version"]
    assert got["device"]["max_sm_clock_mhz"] == int(want["clocks.max.sm"])
    assert got["record"]["sm_clock_mhz"] > 0 and got["device"]["sm_clock_mhz"] > 0


@pytest.mark.gpu
def test_under_load_on_the_gpu_reads_the_clock_after_every_repetition_and_is_never_faster():
    """The timer under load (lab.measure.timed, UNDER LOAD) on a real GPU: an 8192^3 fp16 GEMM behind 100 ms of
    itself, NVML read at the end of each stretch (the SM clock at most the GPU's maximum, the reasons by
    name), and its median not under the same call's timed alone (the stretch can only lower the clock)."""
    torch = _needs_cuda()
    from lab.measure.timed import time_checked

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    alone = time_checked(lambda: a @ a, reps=10, warmup=3)
    loaded = time_checked(lambda: a @ a, reps=10, warmup=3, under_load_ms=100)
    c = loaded.checks
    assert c["under_load_ms"] == 100 and c["under_load_calls"] >= 10 and c["load_states_read"] == 10
    top = nvml.read(environment.gpu_uuid(torch.cuda.get_device_properties(0)))["max_sm_clock_mhz"]
    assert 0 < c["load_sm_clock_mhz"] <= (top or 10**6)
    assert 0.0 <= c["load_power_capped_share"] <= 1.0
    assert all(isinstance(r, str) for r in c["load_clock_event_reasons"])
    assert loaded.median >= 0.98 * alone.median, (loaded.median, alone.median, c)

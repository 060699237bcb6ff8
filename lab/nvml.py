"""NVML (libnvidia-ml.so.1, the library nvidia-smi is built on) read in this process through ctypes:
one GPU's clocks, power limit, host index, name and UUID by its UUID, and the driver's version
(`read`); and the GPU under work: its SM clock, power draw, temperature, energy used and why its clock
is below the maximum (`load`).

Why in process: every nvidia-smi is a new process that initialises NVML over every GPU of the host,
taking the driver's locks as it does (tens to hundreds of milliseconds); a sweep worker started one
every 2 s beside neighbours timing calls under 0.3 ms (issue 31). Here the library is loaded and
initialised once per process (`shared()`) and kept (never shut down: the process's exit ends it);
a read is a few calls into it.

Nothing is guessed: a field NVML says it does not support on this GPU (NVML_ERROR_NOT_SUPPORTED, as
nvidia-smi prints "[Not Supported]") is None; any other error raises NvmlError, and the caller
(lab.environment) falls back to nvidia-smi. Where the library cannot be loaded or initialised
(no driver: a CPU machine), `shared()` raises NvmlUnavailable with the reason, each time, without
trying again. The names, values and signatures below are nvml.h's.
"""

from __future__ import annotations

import ctypes
import threading

LIBRARY = "libnvidia-ml.so.1"

# nvmlReturn_t
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3

# nvmlClockType_t
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

# nvmlTemperatureSensors_t
NVML_TEMPERATURE_GPU = 0

# nvmlClocksEventReasons (nvmlClocksThrottleReasons before r535): why the SM clock is below its maximum, a bit each
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

# buffer sizes nvml.h names for the strings it writes (with their terminating NUL)
NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96
NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80

_handle = ctypes.c_void_p          # nvmlDevice_t: an opaque struct nvmlDevice_st *
_uint_p = ctypes.POINTER(ctypes.c_uint)
_ulonglong_p = ctypes.POINTER(ctypes.c_ulonglong)

# every function this module calls, with nvml.h's argument types (the return type is nvmlReturn_t,
# an enum: int), so that ctypes passes each argument as the library reads it
SIGNATURES: dict[str, tuple] = {
    "nvmlInit_v2": (),
    "nvmlSystemGetDriverVersion": (ctypes.c_char_p, ctypes.c_uint),
    "nvmlDeviceGetHandleByUUID": (ctypes.c_char_p, ctypes.POINTER(_handle)),
    "nvmlDeviceGetIndex": (_handle, _uint_p),
    "nvmlDeviceGetName": (_handle, ctypes.c_char_p, ctypes.c_uint),
    "nvmlDeviceGetUUID": (_handle, ctypes.c_char_p, ctypes.c_uint),
    "nvmlDeviceGetClockInfo": (_handle, ctypes.c_int, _uint_p),
    "nvmlDeviceGetMaxClockInfo": (_handle, ctypes.c_int, _uint_p),
    "nvmlDeviceGetPowerManagementLimit": (_handle, _uint_p),
}
# the functions only load() calls: a library without one still reads the state (read()), and load() gives None
# for that field (nvmlDeviceGetCurrentClocksThrottleReasons is deprecated for ...ClocksEventReasons since r535)
LOAD_SIGNATURES: dict[str, tuple] = {
    "nvmlDeviceGetPowerUsage": (_handle, _uint_p),
    "nvmlDeviceGetTemperature": (_handle, ctypes.c_int, _uint_p),
    "nvmlDeviceGetTotalEnergyConsumption": (_handle, _ulonglong_p),
    "nvmlDeviceGetCurrentClocksThrottleReasons": (_handle, _ulonglong_p),
}

# what read() gives, in the lab's names (lab.environment's gpu_state and device_info)
FIELDS = ("gpu_uuid", "gpu_name", "gpu_host_index", "sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz",
          "power_limit_w", "driver")
# what load() gives: the GPU under work, cheap enough to sample every few milliseconds
LOAD_FIELDS = ("sm_clock_mhz", "power_draw_w", "temperature_c", "energy_mj", "clock_event_reasons")


class NvmlError(Exception):
    """An NVML call returned an error other than 'not supported' (or NVML is unavailable)."""


class NvmlUnavailable(NvmlError):
    """The library cannot be loaded, lacks a function this module calls, or does not initialise."""


class Nvml:
    """One loaded and initialised NVML. `library`: the file to load (libnvidia-ml.so.1, found the way
    the dynamic loader finds the driver's libraries)."""

    def __init__(self, library: str = LIBRARY):
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as e:
            raise NvmlUnavailable(f"{library} cannot be loaded ({e})") from None
        for name, argtypes in SIGNATURES.items():
            try:
                function = getattr(self._lib, name)
            except AttributeError:   # a driver older than the function
                raise NvmlUnavailable(f"{library} has no {name}") from None
            function.argtypes, function.restype = argtypes, ctypes.c_int
        self._missing: set[str] = set()   # LOAD_SIGNATURES' functions this library does not have
        for name, argtypes in LOAD_SIGNATURES.items():
            function = getattr(self._lib, name, None)
            if function is None:
                self._missing.add(name)
            else:
                function.argtypes, function.restype = argtypes, ctypes.c_int
        try:
            self._error_string = self._lib.nvmlErrorString
            self._error_string.argtypes, self._error_string.restype = (ctypes.c_int,), ctypes.c_char_p
        except AttributeError:
            self._error_string = None
        code = self._lib.nvmlInit_v2()
        if code != NVML_SUCCESS:
            raise NvmlUnavailable(f"nvmlInit_v2 failed: {self.error_string(code)}")
        self._devices: dict[str, _handle] = {}   # handles stay valid while NVML is initialised: for good

    def error_string(self, code: int) -> str:
        """NVML's own words for a return code (nvmlErrorString), with the code."""
        text = self._error_string(code) if self._error_string is not None else None
        return f"{text.decode(errors='replace')} ({code})" if text else f"NVML error {code}"

    def _checked(self, name: str, code: int) -> bool:
        """True on success, False on NVML_ERROR_NOT_SUPPORTED (the field is not given); raises otherwise."""
        if code == NVML_SUCCESS:
            return True
        if code == NVML_ERROR_NOT_SUPPORTED:
            return False
        raise NvmlError(f"{name} failed: {self.error_string(code)}")

    def _uint(self, name: str, *args, kind=ctypes.c_uint) -> int | None:
        if name in self._missing:   # a load() field this library cannot give: not given, as not supported
            return None
        out = kind()
        return out.value if self._checked(name, getattr(self._lib, name)(*args, ctypes.byref(out))) else None

    def _text(self, name: str, size: int, *args) -> str | None:
        buf = ctypes.create_string_buffer(size)
        if not self._checked(name, getattr(self._lib, name)(*args, buf, size)):
            return None
        return buf.value.decode(errors="replace")

    def device(self, uuid: str) -> _handle:
        """The handle of the GPU (or MIG device) with this UUID (GPU-..., MIG-...), over every GPU of
        the host: NVML does not read CUDA_VISIBLE_DEVICES."""
        if uuid not in self._devices:
            handle = _handle()
            code = self._lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle))
            if code != NVML_SUCCESS or not handle.value:
                raise NvmlError(f"nvmlDeviceGetHandleByUUID({uuid}) failed: {self.error_string(code)}")
            self._devices[uuid] = handle
        return self._devices[uuid]

    def driver_version(self) -> str | None:
        return self._text("nvmlSystemGetDriverVersion", NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    def read(self, uuid: str) -> dict:
        """FIELDS of the GPU with this UUID, read now: the clocks nvidia-smi calls clocks.sm, clocks.mem
        and clocks.max.sm (MHz), its power.limit (the power management limit, W; NVML gives mW), the
        host's index of it (index: NVML's and nvidia-smi's order over every GPU of the host), its name,
        UUID and the driver's version. A field NVML does not support here is None."""
        h = self.device(uuid)
        milliwatts = self._uint("nvmlDeviceGetPowerManagementLimit", h)
        return {
            "gpu_uuid": self._text("nvmlDeviceGetUUID", NVML_DEVICE_UUID_V2_BUFFER_SIZE, h),
            "gpu_name": self._text("nvmlDeviceGetName", NVML_DEVICE_NAME_V2_BUFFER_SIZE, h),
            "gpu_host_index": self._uint("nvmlDeviceGetIndex", h),
            "sm_clock_mhz": self._uint("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM),
            "mem_clock_mhz": self._uint("nvmlDeviceGetClockInfo", h, NVML_CLOCK_MEM),
            "max_sm_clock_mhz": self._uint("nvmlDeviceGetMaxClockInfo", h, NVML_CLOCK_SM),
            "power_limit_w": milliwatts / 1000 if milliwatts is not None else None,
            "driver": self.driver_version(),
        }

    def load(self, uuid: str) -> dict:
        """LOAD_FIELDS of the GPU with this UUID, read now: its SM clock (MHz), power draw (nvidia-smi's
        power.draw: W, NVML gives mW), temperature (C), the energy it has used since the driver loaded (mJ:
        the difference of two reads over a stretch of work is that work's energy), and the set bits of why
        its clock is below the maximum (names from CLOCK_EVENT_REASONS; an unnamed bit as its hex value).
        A field NVML does not support here, or whose function this library lacks, is None."""
        h = self.device(uuid)
        milliwatts = self._uint("nvmlDeviceGetPowerUsage", h)
        reasons = self._uint("nvmlDeviceGetCurrentClocksThrottleReasons", h, kind=ctypes.c_ulonglong)
        return {
            "sm_clock_mhz": self._uint("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM),
            "power_draw_w": milliwatts / 1000 if milliwatts is not None else None,
            "temperature_c": self._uint("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU),
            "energy_mj": self._uint("nvmlDeviceGetTotalEnergyConsumption", h, kind=ctypes.c_ulonglong),
            "clock_event_reasons": None if reasons is None else reason_names(reasons),
        }


def reason_names(bits: int) -> tuple[str, ...]:
    """The names of the set bits of an nvmlClocksEventReasons mask, lowest first; an unnamed bit as hex."""
    return tuple(CLOCK_EVENT_REASONS.get(1 << i, hex(1 << i)) for i in range(bits.bit_length()) if bits >> i & 1)


_lock = threading.Lock()        # the sampler's thread and the measuring thread may both ask first
_shared: Nvml | None = None
_unavailable: str | None = None


def shared() -> Nvml:
    """This process's NVML, loaded and initialised on the first call and kept; NvmlUnavailable (the
    first attempt's reason) on every call where it could not be."""
    global _shared, _unavailable
    with _lock:
        if _shared is None and _unavailable is None:
            try:
                _shared = Nvml()
            except NvmlUnavailable as e:
                _unavailable = str(e)
    if _shared is None:
        raise NvmlUnavailable(_unavailable)
    return _shared


def read(uuid: str) -> dict:
    """shared().read(uuid): raises NvmlError (NvmlUnavailable included) where NVML cannot say."""
    return shared().read(uuid)


def load(uuid: str) -> dict:
    """shared().load(uuid): raises NvmlError (NvmlUnavailable included) where NVML cannot say."""
    return shared().load(uuid)

"""A run's manifest as ONE typed record: what `lab profile` writes and every reader reads.

`profiles/<run-id>/manifest.json` is `Manifest.to_dict()` as JSON; reading it back is
`Manifest.from_dict()`, which checks every field against the type declared here and raises a
LabError naming the field (`'timing.median' should be a number, got 'fast'`), never a KeyError deep
inside a page. The sections below ARE the schema: there is no second description of it.

Adding a field: declare it in its section with a default (`source_lines: str | None = None`, or
`sweeps: list[str] = field(default_factory=list)`), nothing else. Older manifests, which lack it,
read with the default; a field must be optional to stay readable in stored runs. Keys a section
does not declare (written by a newer lab, or by an older one: `device.max_sm_clock_mhz` before it
was declared) are kept in `other_keys` and written back unchanged, so nothing stored is lost.
A None field is not written (absent and null read the same).
Bump SCHEMA_VERSION only for a change old readers would misread (a renamed or retyped field).

Supported field types: str, int, float (an int is accepted), bool, `X | None`, `A | B`, list[X],
dict[str, X], dict (any JSON object), another Section, and Problem (lab.measure.problem).
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from functools import lru_cache
from typing import Any, ClassVar

from lab import gpu_specs
from lab.errors import LabError
from lab.measure.problem import Problem

SCHEMA_VERSION = 1


class ManifestError(LabError):
    """A manifest field that is missing or of the wrong type; the message names the field."""

    def __init__(self, where: str, what: str):
        super().__init__(f"'{where}' {what}" if where else what,
                         hint="a run is written by `lab profile`; move a damaged run out of the store")
        self.where = where


_NONE = type(None)


def _type_name(tp) -> str:
    if tp is float:
        return "a number"
    if tp is int:
        return "an integer"
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    origin = typing.get_origin(tp)
    if origin is list:
        return "a list"
    if tp is dict or origin is dict or (isinstance(tp, type) and issubclass(tp, (Section, Problem))):
        return "an object"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not _NONE)
    return getattr(tp, "__name__", str(tp))


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _convert(value, tp, where: str):
    """The stored JSON value as the declared type, or a ManifestError naming `where`."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if _NONE in args:
                return None
            raise ManifestError(where, f"should be {_type_name(tp)}, got null")
        for a in args:
            if a is _NONE:
                continue
            try:
                return _convert(value, a, where)
            except ManifestError as e:
                if e.where != where:   # the value has this type but a field inside it is wrong
                    raise
        raise ManifestError(where, f"should be {_type_name(tp)}, got {_short(value)}")
    if value is None:
        raise ManifestError(where, f"should be {_type_name(tp)}, got null")
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is dict or origin is dict:
        if isinstance(value, dict):
            args = typing.get_args(tp)
            if not args:
                return dict(value)
            return {str(k): _convert(v, args[1], f"{where}.{k}") for k, v in value.items()}
    elif origin is list:
        if isinstance(value, list):
            (item,) = typing.get_args(tp) or (Any,)
            return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    elif isinstance(tp, type) and issubclass(tp, Section):
        if isinstance(value, dict):
            return tp.from_dict(value, where)
    elif tp is Problem:
        if isinstance(value, dict):
            return _problem(value, where)
    else:  # pragma: no cover - a type this module does not know is a programming error here
        raise TypeError(f"manifest field {where}: unsupported type {tp!r}")
    raise ManifestError(where, f"should be {_type_name(tp)}, got {_short(value)}")


def _problem(d: dict, where: str) -> Problem:
    spec = {"batch": int, "heads": int, "seqlen_q": int, "seqlen_k": int, "head_dim": int,
            "causal": bool, "dtype": str, "heads_kv": int, "deterministic": bool}
    vals = {}
    for key, tp in spec.items():
        if key in d:
            vals[key] = _convert(d[key], tp, f"{where}.{key}")
        elif key not in ("causal", "dtype", "heads_kv", "deterministic"):
            raise ManifestError(f"{where}.{key}", "is missing")
    try:
        return Problem(**vals)
    except LabError as e:
        raise ManifestError(where, f"is not a valid problem: {e}") from None


def _dump(value):
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, Problem):
        return value.to_dict()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None   # JSON has no NaN: a non-finite number is stored as unknown
    if hasattr(value, "item"):   # a numpy scalar
        return _dump(value.item())
    return value


@dataclass
class Section:
    """One object of the manifest: declared fields, typed; undeclared keys kept in `other_keys`."""

    other_keys: dict = field(default_factory=dict, repr=False, compare=False, kw_only=True)

    _hints: ClassVar[dict]

    @classmethod
    @lru_cache(maxsize=None)
    def _declared(cls) -> tuple[tuple[str, Any, bool], ...]:
        """(name, type, required) of each declared field."""
        hints = typing.get_type_hints(cls)
        return tuple((f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING)
                     for f in fields(cls) if f.name != "other_keys")

    @classmethod
    def from_dict(cls, d: dict, where: str = ""):
        if not isinstance(d, dict):
            raise ManifestError(where, f"should be an object, got {_short(d)}")
        kwargs = {}
        for name, tp, required in cls._declared():
            path = f"{where}.{name}" if where else name
            if name not in d:
                if required:
                    raise ManifestError(path, "is missing")
                continue
            kwargs[name] = _convert(d[name], tp, path)
        declared = {n for n, _, _ in cls._declared()}
        obj = cls(**kwargs, other_keys={k: v for k, v in d.items() if k not in declared})
        obj.validate(where)
        return obj

    def validate(self, where: str) -> None:
        """Checks across fields, beyond each field's type (overridden where a section has some)."""

    def to_dict(self) -> dict:
        """The JSON object; a field that is None (not known) is left out, as readers `.get()` it."""
        out = {name: _dump(v) for name, _, _ in self._declared() if (v := getattr(self, name)) is not None}
        out.update({k: v for k, v in self.other_keys.items() if k not in out})
        return out

    def get(self, key: str, default=None):
        """Dict-style read, for code and templates written against the JSON shape."""
        return self.to_dict().get(key, default)


# ------------------------------------------------------------------------------ sections

@dataclass
class Git(Section):
    commit: str | None = None
    dirty: bool | None = None          # None: not known (a copy of the tree without .git)


@dataclass
class VariantInfo(Section):
    id: str
    slug: str | None = None
    title: str | None = None
    source: str | None = None          # as the user names it: kernels/v3_unrolled.cu
    source_sha256: str | None = None
    changed: str | None = None
    attacks: str | None = None
    predicted_gain: str | None = None
    kind: str | None = None            # cuda or python (lab.ladder.registry)
    origin: str | None = None          # built-in or workspace
    layout: str | None = None          # BHND or BNHD: the layout the rung's inputs came in
    attacks_classes: list[str] | None = None   # the analysis classes the rung declares it attacks


@dataclass
class CandidateInfo(Section):
    """The tuning candidate a run ran instead of its rung's launcher (`lab profile --candidate`): built by the
    rung's tuning build (the run's build section is that build's), named as the rung's table names it."""
    label: str
    index: int                         # its place in the rung's list for the problem's head_dim and dtype (the mode's direction)
    causal: bool | None = None         # the one mask it is declared for (None: both)


def candidate_label(manifest) -> str | None:
    """The label of the tuning candidate a run ran instead of its rung's launcher, None for a run of the rung
    itself: a reader that picks "the rung's latest run" (the ledger, `lab compare v9`, the index's ladder, a
    page's previous rung, `lab new`'s evidence) passes over a run that names one."""
    c = manifest.get("candidate") if isinstance(manifest, dict) else getattr(manifest, "candidate", None)
    if isinstance(c, CandidateInfo):
        return c.label
    return c.get("label") if isinstance(c, dict) else None


# The device's peaks: lab.gpu_specs.Peaks's fields, each optional here (a stored run may lack one); the
# one model of a GPU's peaks is that dataclass, this section only reads and writes it.
Peaks = make_dataclass("Peaks", [(f.name, typing.get_type_hints(gpu_specs.Peaks)[f.name] | None, field(default=None))
                                 for f in fields(gpu_specs.Peaks)], bases=(Section,))
Peaks.__module__ = __name__


@dataclass
class Device(Section):
    name: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    driver: str | None = None
    probe_source: str | None = None    # which gave the clocks and driver: "nvml" (in process) or "nvidia-smi"
    peaks: Peaks | None = None


@dataclass
class Software(Section):
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | str | None = None
    nvcc: str | None = None
    ncu: str | None = None
    nsys: str | None = None


@dataclass
class PtxasEntry(Section):
    kernel: str
    registers: int | None = None
    smem_bytes: int | None = None      # static shared memory; dynamic is a launch argument
    stack_bytes: int | None = None
    spill_stores_bytes: int | None = None
    spill_loads_bytes: int | None = None
    arch: str | None = None
    wgmma_serialized: str | None = None   # ptxas's "C7511: <reason>" where it serialized the wgmma pipeline, "" none
    mangled: str | None = None            # as Nsight Compute's kernel_mangled: how the analysis finds its kernel


@dataclass
class Build(Section):
    flags: list[str] = field(default_factory=list)
    cache_key: str | None = None
    ptxas: list[PtxasEntry] = field(default_factory=list)


@dataclass
class Correctness(Section):
    passed: bool | None = None
    max_abs_err: float | None = None
    mean_abs_err: float | None = None
    rel_err: float | None = None
    tolerance: float | None = None
    judged: str | None = None          # the error the tolerance is set against
    rule: str | None = None
    shapes_checked: list[str] = field(default_factory=list)
    failed_shape: str | None = None
    mode: str | None = None            # what was checked: fwd (O), bwd or fwd+bwd (O, LSE, dQ, dK, dV)
    tensors: list[str] | None = None   # the tensors judged, each against its own tolerance
    failed_tensor: str | None = None   # the first tensor that failed, on failed_shape
    worst_element: str | None = None   # where it was furthest off: index, value, reference
    reused: str | None = None          # a kept verdict on the same binary, shapes and seed (lab.store.check_cache)
    lse_checked: bool | None = None    # fwd of a rung whose forward writes the LSE: that LSE judged too
    lse_max_abs_err: float | None = None   # its largest error against float64, over the shapes checked


@dataclass
class Timing(Section):
    unit: str = "ms"
    median: float | None = None
    mean: float | None = None
    std: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    min: float | None = None
    max: float | None = None
    reps: int | None = None
    warmup: int | None = None
    l2_flush: bool | None = None
    method: str | None = None
    sync: str | None = None
    # derived from the median by lab.measure.rates with the run's mode, stored so readers never recompute
    flops: float | None = None
    tflops: float | None = None
    pct_of_peak: float | None = None
    peak: str | None = None            # the ceiling pct_of_peak is stated against ("FP16/BF16 tensor")
    min_bytes: int | None = None       # the mode's minimum DRAM bytes (lab.measure.rates.io_tensors)
    peak_memory_bytes: int | None = None
    checks: dict | None = None      # what the timer checked (lab.measure.timed): outside work, outputs, floor

    def validate(self, where: str) -> None:
        if self.unit != "ms":
            raise ManifestError(f"{where}.unit", f"should be 'ms', got {_short(self.unit)}")


@dataclass
class Baseline(Section):
    name: str
    backend: str | None = None
    dtype: str | None = None
    status: str | None = None          # "ok" or "unavailable" (then `reason` says why)
    reason: str | None = None
    median_ms: float | None = None
    std_ms: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    reps: int | None = None
    tflops: float | None = None        # in the run's mode (lab.measure.rates), like the rung's
    pct_of_peak: float | None = None
    peak_memory_bytes: int | None = None
    ratio: float | None = None         # baseline time / ours: < 1 means ours is slower


@dataclass
class ProfileInfo(Section):
    tool: str | None = None
    command: list[str] = field(default_factory=list)
    section_set: str | None = None
    report: str | None = None
    nvtx_range: str | None = None
    error: str | None = None


@dataclass
class TimelineInfo(Section):
    source: str | None = None          # nsys, torch.profiler, ...
    reason: str | None = None          # why this source (e.g. nsys cannot write reports here)
    input_format: str | None = None
    launch_overhead_ns: float | None = None
    launch_overhead: dict | None = None
    repeats: int | None = None


@dataclass
class FindingsSummary(Section):
    bottleneck: str | None = None
    count: int | None = None


@dataclass
class Manifest(Section):
    """The whole record. `run_id`, `tables` and `artifacts` are filled by the store's RunWriter."""

    variant: VariantInfo
    problem: Problem
    mode: str | None = None                    # what was checked, timed and profiled: fwd, bwd or fwd+bwd (None: a run from before modes, fwd)
    candidate: CandidateInfo | None = None     # a tuning candidate's run (lab profile --candidate); None: the rung's launcher
    schema_version: int = SCHEMA_VERSION
    run_id: str = ""
    created_utc: str | None = None
    lab_version: str | None = None
    git: Git | None = None
    device: Device | None = None
    software: Software | None = None
    build: Build | None = None
    correctness: Correctness | None = None
    timing: Timing | None = None
    baselines: list[Baseline] = field(default_factory=list)
    profile: ProfileInfo | None = None
    timeline: TimelineInfo | None = None
    findings_summary: FindingsSummary | None = None
    baselines_timed_utc: str | None = None     # when the SDPA baselines were timed
    baselines_cached: bool | None = None       # True: read from the store's cache, not timed by this run
    stage_seconds: dict[str, float] = field(default_factory=dict)   # wall time of each `lab profile` stage
    tables: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict, where: str = "") -> "Manifest":
        if isinstance(d, dict) and "schema_version" in d and d["schema_version"] != SCHEMA_VERSION:
            raise ManifestError("schema_version", f"is {_short(d['schema_version'])}; this lab reads {SCHEMA_VERSION}")
        return super().from_dict(d, where)

    def validate(self, where: str) -> None:
        if not self.run_id:
            raise ManifestError("run_id", "is missing")

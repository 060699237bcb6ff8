"""What a sweep will measure, decided before anything touches a GPU: shapes, implementations,
modes, timing methods, and its split into shards. Pure Python (no torch), so a plan is validated,
stored, sharded and merged on any machine, and bad input is refused before a sweep exists.

A plan is an ordered list of problems (shapes with their dtype) and, for each problem, one cell per
(implementation, mode). A cell yields one row per timing method. Shards are interleaved slices of
the problem list: every implementation of one shape runs in the same shard, on the same GPU, so the
ratios between them are always measured side by side.

Shape specs (`--shape`, repeatable): `B,H,N,D` or `B,H,Nq,Nk,D`; any field may be a list `{a,b,c}`
or a doubling range `a..b` (powers of two times a: 512..16384 is 512, 1024, ..., 16384); the heads
field may carry K/V heads for GQA/MQA (`32:8`); the batch field is `_` in a batch-scaling sweep
(`--batch 1,2,4 --shape _,16,1024,64`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace

from lab.errors import LabError
from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP, EVENTS, GRAPH
from lab.measure.problem import Problem, normalize_dtype, require_deterministic_modes
from lab.measure.rates import MODE_FLOP_FACTOR, MODES  # noqa: F401  (re-exported: plans name modes; rates defines them)
from lab.measure.rates import flops as mode_flops  # noqa: F401  (the one FLOP count per mode, lab.measure.rates)

TIMINGS = ("auto", "events", "graph", "both")
MAX_SHAPES = 256
"""More problems than this need --yes: a typo in a range (1..65536 of batch) should not start hours."""
DEFAULT_PASSES = 2
"""A cell is timed in this many passes over its problem's cells, a unit's length apart, and its row
pools them: one burst of ~30 repetitions within 0.4 s has a CI95 ~1% wide, while the same call timed
again seconds later moved 2-5% (graph) and up to 10-24% (events, cuDNN) on calls under 0.3 ms
(four H200s, benchmarks/timing_spread.py). A row's interval must cover that, not one burst."""
GRAPH_AUTO_BELOW_MS = 0.5
"""timing auto's line: a call shorter than this also wants a CUDA-graph row (device time), since below it
the host's dispatch (~0.01-0.04 ms a forward call, up to ~0.1 ms a backward through autograd) is a
visible share of what CUDA events measure. Held against the cell's floor, not its measured time:
see timing_methods."""
MATRIX_SHARE, HBM_SHARE = 0.8, 0.9
"""The shares of the datasheet's rates a call sustains at best: dense bf16 matrix products about 790 of
989 TFLOP/s, HBM about 4.3 of 4.8 TB/s, measured on the H200 (DEVICE.md). The sweeps shipped in
profiles/examples/ (H100 and H200, every mode, pass by pass) came no closer to them than 1.1x;
tests/test_sweep_auto_timing.py holds every shipped row to it."""


def fastest_call_ms(floor, l2_flushed: bool = True) -> float:
    """The shortest call a problem's floor (lab.measure.floor.Floor) allows at the rates a GPU sustains:
    its FLOPs at MATRIX_SHARE of the datasheet's rate, its inputs (read from DRAM only when the L2 is
    flushed) at HBM_SHARE of its bandwidth, whichever takes longer."""
    return max(floor.compute_ms / MATRIX_SHARE, floor.memory_ms / HBM_SHARE if l2_flushed else 0.0)


def timing_methods(timing: str, floor, l2_flushed: bool = True) -> tuple[str, ...]:
    """The timing methods of a cell under the plan's `timing`, in order, decided before it is timed.

    auto: events, and graph where the shortest call the cell's floor allows on this device
    (fastest_call_ms; `floor` a lab.measure.floor.Floor) is under GRAPH_AUTO_BELOW_MS; where the device's
    peaks are unknown (floor None), graph everywhere. Why the floor and not the call's own time: the floor
    is the problem's and mode's, fixed by the device's datasheet, so every run of a sweep, every pass of a
    cell and every implementation of a problem get the same rows. A measured median decided it before, and
    a call that sat near the line (0.50 ms events, 0.48-0.53 pass to pass) got a graph row in one run and
    not the other, in one pass and not the other, for one implementation and not its baseline: two tables
    of one sweep did not have the same rows (benchmarks/RESULTS.md, issue 31, tenth session). No call
    under the line goes without its graph row (none runs faster than its fastest_call_ms); calls above it
    get one where their problem is short (backwards of up to ~2 ms on an H200, whose autograd dispatch
    is in every events row)."""
    if timing == "auto":
        return (EVENTS, GRAPH) if floor is None or fastest_call_ms(floor, l2_flushed) < GRAPH_AUTO_BELOW_MS else (EVENTS,)
    return {"events": (EVENTS,), "graph": (GRAPH,), "both": (EVENTS, GRAPH)}[timing]


PRESETS = {
    "fa-grid": "FlashAttention's benchmark grid: 16k tokens, hidden 2048 (B = 16384/N, H = 2048/D), "
               "N 512..16384, D 64 and 128, causal and not, float16",
    "memory": "standard attention's O(N^2) memory beside flash's O(N): B=1, H=16, D=64, N 1024..65536, "
              "forward, float16, until standard attention runs out of memory",
}


# ------------------------------------------------------------------------------ parsing

def _split_top(spec: str) -> list[str]:
    """Split on commas outside braces: `8,{1,2},64` -> ['8', '{1,2}', '64']."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise LabError(f"bad shape {spec!r}: unbalanced braces")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if depth:
        raise LabError(f"bad shape {spec!r}: unbalanced braces")
    out.append(cur.strip())
    return out


_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


def expand_field(text: str, what: str, spec: str) -> list[int]:
    """`64` -> [64]; `{1,2,4}` -> [1, 2, 4]; `512..4096` -> [512, 1024, 2048, 4096]."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        values: list[int] = []
        for part in _split_top(text[1:-1]):
            if part:
                values += expand_field(part, what, spec)
        if not values:
            raise LabError(f"bad shape {spec!r}: the {what} list {text} is empty")
        return values
    m = _RANGE.match(text)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1 or hi < lo:
            raise LabError(f"bad shape {spec!r}: the {what} range {text} is empty "
                           "(a..b doubles from a up to b; a must be >= 1 and <= b)")
        values = []
        while lo <= hi:
            values.append(lo)
            lo *= 2
        return values
    try:
        value = int(text)
    except ValueError:
        raise LabError(f"bad shape {spec!r}: {what} {text!r} is not an integer, a list {{a,b}} or a range a..b") from None
    if value < 1:
        raise LabError(f"bad shape {spec!r}: {what} must be >= 1, got {value}")
    return [value]


def _top_colon(text: str) -> int | None:
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "{") - (ch == "}")
        if ch == ":" and depth == 0:
            return i
    return None


def expand_shape(spec: str, batches: list[int] | None = None, heads_kv: list[int] | None = None) -> list[tuple]:
    """Every (B, H, Hkv, Nq, Nk, D) a spec names, in the order its fields vary (last fastest)."""
    fields = _split_top(spec)
    if len(fields) not in (4, 5):
        raise LabError(f"bad shape {spec!r}: expected B,H,N,D (or B,H,Nq,Nk,D), e.g. 8,16,{{512,1024}},64")
    b_text = fields[0]
    if b_text == "_":
        if not batches:
            raise LabError(f"shape {spec!r} leaves the batch open (_): give the batches with --batch 1,2,4")
        bs = list(batches)
    else:
        if batches:
            raise LabError(f"--batch sweeps the batch, but shape {spec!r} fixes it to {b_text}; write _ there, "
                           f"e.g. _,{','.join(fields[1:])}")
        bs = expand_field(b_text, "batch", spec)
    h_text = fields[1]
    colon = _top_colon(h_text)
    if colon is not None:
        h_part, kv_part = h_text[:colon], h_text[colon + 1:]
        hs, kvs = expand_field(h_part, "heads", spec), expand_field(kv_part, "K/V heads", spec)
    else:
        hs, kvs = expand_field(h_text, "heads", spec), None
    if kvs is None:
        kvs = heads_kv or [None]
    ns = [expand_field(f, "sequence length", spec) for f in fields[2:-1]]
    ds = expand_field(fields[-1], "head_dim", spec)
    out = []
    if len(ns) == 1:
        seq_pairs = [(n, n) for n in ns[0]]
    else:
        seq_pairs = list(itertools.product(ns[0], ns[1]))
    for b, h, kv, (nq, nk), d in itertools.product(bs, hs, kvs, seq_pairs, ds):
        kv = h if kv is None else kv
        if kv > h or h % kv:
            raise LabError(f"bad shape {spec!r}: K/V heads {kv} must divide the {h} query heads (GQA/MQA: heads_kv <= heads)")
        out.append((b, h, kv, nq, nk, d))
    return out


def parse_list(text: str | None, what: str, choices=None) -> list[str]:
    if text is None:
        return []
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise LabError(f"{what} is empty")
    if choices is not None:
        bad = [i for i in items if i not in choices]
        if bad:
            raise LabError(f"unknown {what} {', '.join(bad)}; choose from {', '.join(choices)}")
    return list(dict.fromkeys(items))


def parse_ints(text: str | None, what: str) -> list[int]:
    out = []
    for item in parse_list(text, what):
        try:
            value = int(item)
        except ValueError:
            raise LabError(f"{what}: {item!r} is not an integer") from None
        if value < 1:
            raise LabError(f"{what}: {value} must be >= 1")
        out.append(value)
    return out


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`i/N`, 1 <= i <= N: the i-th of N interleaved slices (Slurm: --shard $SLURM_ARRAY_TASK_ID/$N
    with --array=1-N)."""
    if text is None:
        return None
    m = re.match(r"^\s*(\d+)\s*/\s*(\d+)\s*$", text)
    if not m:
        raise LabError(f"bad --shard {text!r}: expected i/N, e.g. 1/4")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= i <= n:
        raise LabError(f"bad --shard {text}: the index counts from 1 to N ({n})")
    return i, n


def preset_shapes(name: str) -> tuple[list[tuple], list[bool], str]:
    """(B, H, Hkv, N, N, D) list, causal values and dtype of a preset."""
    if name == "fa-grid":
        tokens, hidden = 16384, 2048
        shapes = [(tokens // n, hidden // d, hidden // d, n, n, d) for d in (64, 128) for n in expand_field("512..16384", "N", name)]
        return shapes, [False, True], "float16"
    if name == "memory":
        return [(1, 16, 16, n, n, 64) for n in expand_field("1024..65536", "N", name)], [False], "float16"
    raise LabError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")


# ------------------------------------------------------------------------------ the plan

@dataclass(frozen=True)
class Cell:
    impl: str
    problem: Problem
    mode: str

    @property
    def key(self) -> str:
        return cell_key(self.impl, self.problem.label(), self.mode)


def cell_key(impl: str, label: str, mode: str) -> str:
    return f"{impl}|{label}|{mode}"


@dataclass
class Plan:
    name: str
    rungs: dict[str, list[str]]        # rung id -> the dtypes it accepts (from the registry, at plan time)
    baselines: list[str]
    problems: list[Problem]
    modes: list[str]
    timing: str = "auto"
    reps: int = DEFAULT_REPS
    warmup: int = DEFAULT_WARMUP
    cell_budget_s: float = 0.4
    passes: int = 1                    # DEFAULT_PASSES for a new plan; 1 is a plan stored before passes existed
    l2_flush: bool = True
    axis: str = "seqlen"               # the x axis of the page's charts: "seqlen" or "batch"
    command: str = ""
    preset: str | None = None
    shard: tuple[int, int] | None = None
    extra: dict = field(default_factory=dict)
    under_load_ms: float = 0.0         # each repetition behind this many ms of its own calls (lab.measure.timed, UNDER LOAD)

    @property
    def implementations(self) -> list[str]:
        return list(self.rungs) + list(self.baselines)

    def problems_for_shard(self, shard: tuple[int, int] | None = None) -> list[Problem]:
        shard = shard or self.shard
        if not shard:
            return list(self.problems)
        i, n = shard
        return self.problems[i - 1::n]

    def cells(self, shard: tuple[int, int] | None = None) -> list[Cell]:
        """Problem-major: every implementation and mode of one shape runs back to back (inputs made once)."""
        out = []
        for p in self.problems_for_shard(shard):
            for impl in self.implementations:
                if impl in self.rungs and p.dtype not in self.rungs[impl]:
                    continue   # a rung is timed in the dtypes it has; the page lists them
                out.extend(Cell(impl, p, m) for m in self.modes)
        return out

    def pass_plan(self) -> "Plan":
        """What one pass of a cell measures: 1/passes of the cell's repetitions and time budget (at
        least 2 repetitions), so a sweep in passes takes the time of one in a single burst."""
        if self.passes <= 1:
            return self
        return replace(self, reps=max(2, -(-self.reps // self.passes)), cell_budget_s=self.cell_budget_s / self.passes,
                       passes=1)

    def key(self) -> str:
        """Identity of the sweep's content (not of a shard): partials merge only when this matches."""
        d = self.to_dict()
        for k in ("shard", "command", "extra"):
            d.pop(k, None)
        if not d.get("under_load_ms"):   # a plan without it keys as plans stored before it existed did
            d.pop("under_load_ms", None)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["problems"] = [p.to_dict() for p in self.problems]
        d["shard"] = list(self.shard) if self.shard else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        d = dict(d)
        d["problems"] = [Problem.from_dict(p) for p in d["problems"]]
        d["shard"] = tuple(d["shard"]) if d.get("shard") else None
        d.setdefault("passes", 1)   # a plan stored before passes: each cell was one burst
        return cls(**d)


def build_plan(*, rungs: dict[str, list[str]], baselines: list[str], shapes: list[str], preset: str | None,
               batches: list[int] | None, heads_kv: list[int] | None, causal: str | None, dtypes: list[str],
               modes: list[str], timing: str, reps: int, warmup: int, cell_budget_s: float,
               shard: tuple[int, int] | None, yes: bool, command: str = "", name: str | None = None,
               passes: int = DEFAULT_PASSES, deterministic: bool = False, under_load_ms: float = 0.0) -> Plan:
    """Validate everything a sweep was asked for and expand it; LabError (exit 2) on bad input."""
    if not rungs and not baselines:
        raise LabError("nothing to sweep: no rung (--variant) and no baseline (--no-baselines was given)")
    for m in modes:
        if m not in MODES:
            raise LabError(f"unknown mode {m!r}; choose from {', '.join(MODES)}")
    if not modes:
        raise LabError("no mode given; use fwd, bwd, fwd+bwd or a list of them")
    require_deterministic_modes(deterministic, modes)
    if timing not in TIMINGS:
        raise LabError(f"unknown timing {timing!r}; choose from {', '.join(TIMINGS)}")
    if reps < 2:
        raise LabError("--reps must be at least 2")
    if warmup < 0:
        raise LabError("--warmup must be >= 0")
    if cell_budget_s <= 0:
        raise LabError("--cell-budget must be > 0 seconds")
    if not (math.isfinite(under_load_ms) and under_load_ms >= 0):
        raise LabError(f"--under-load must be a number of milliseconds >= 0; got {under_load_ms}")
    if not 1 <= passes <= reps // 2:
        raise LabError(f"--passes must be between 1 and {max(1, reps // 2)} (--reps {reps} split over the passes, "
                       f"at least 2 repetitions each); got {passes}")
    if preset and shapes:
        raise LabError("give either --preset or --shape, not both")
    if preset and batches:
        raise LabError(f"--batch sweeps the batch of --shape _,...; preset {preset} fixes its batches")
    if not preset and not shapes:
        raise LabError("no shapes: give --shape B,H,N,D (lists and ranges allowed) or --preset "
                       f"({', '.join(PRESETS)})")
    dims: list[tuple] = []
    if preset:
        dims, causals, preset_dtype = preset_shapes(preset)
        if heads_kv:
            dims = [(b, h, kv, nq, nk, d) for b, h, _, nq, nk, d in dims for kv in heads_kv if not h % kv and kv <= h]
        dtypes = dtypes or [preset_dtype]
    else:
        for spec in shapes:
            dims += expand_shape(spec, batches, heads_kv)
        causals = []
    if causal is not None and causal not in ("no", "yes", "both"):
        raise LabError(f"bad --causal {causal!r}; use yes, no or both")
    causals = {"yes": [True], "no": [False], "both": [False, True], None: causals or [False]}[causal]
    if not dtypes:
        rung_dtypes = list(dict.fromkeys(ds[0] for ds in rungs.values()))
        dtypes = rung_dtypes or ["float16"]
    dtypes = [normalize_dtype(d) for d in dtypes]
    for rid, ds in rungs.items():
        if not set(ds) & set(dtypes):
            raise LabError(f"{rid} runs {', '.join(ds)}; the sweep's dtypes are {', '.join(dtypes)}",
                           hint=f"pass --dtype {ds[0]} (or add it: --dtype {','.join(dtypes + [ds[0]])})")
    # deterministic: every problem asks for it (its label ends in -deterministic); the rungs run their
    # deterministic backward, the baselines torch's default one (each row's deterministic column)
    problems = list(dict.fromkeys(Problem(b, h, nq, nk, d, c, dt, kv, deterministic)
                                  for (b, h, kv, nq, nk, d) in dims for c in causals for dt in dtypes))
    if not problems:
        raise LabError("the shapes expand to nothing")
    if len(problems) > MAX_SHAPES and not yes:
        raise LabError(f"the sweep expands to {len(problems)} problems (more than {MAX_SHAPES}); "
                       "pass --yes if that is meant")
    if shard and shard[1] > len(problems):
        raise LabError(f"--shard {shard[0]}/{shard[1]}: only {len(problems)} problems to split; use N <= {len(problems)}")
    plan = Plan(name=name or preset or ("batch" if batches else "custom"), rungs=dict(rungs), baselines=list(baselines),
                problems=problems, modes=list(modes), timing=timing, reps=reps, warmup=warmup,
                cell_budget_s=cell_budget_s, passes=passes, axis="batch" if batches else "seqlen", command=command,
                preset=preset, shard=shard, under_load_ms=float(under_load_ms))
    if not plan.cells():
        raise LabError("no cell to measure: no rung runs the sweep's dtypes and there are no baselines")
    return plan

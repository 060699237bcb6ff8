"""The sweep store: profiles/<sweep-id>/ holds sweep.json (the manifest) and rows.parquet (THE tidy
table, a row per implementation x problem x mode x timing method).

A sweep keeps what it finished. Rows are appended to a journal (`journal-<part>.jsonl`, one JSON
object a line, flushed and fsynced per cell) while the sweep runs, so Ctrl-C, a crash or a killed
worker loses at most the cell in flight; `finalize` folds the journals into rows.parquet and rewrites
the manifest (each file replaced atomically, as lab.store.runs writes). Readers take the table plus
any journal left behind. The manifest is named sweep.json, not manifest.json, so the run store's
listing never mistakes a sweep for a run.

Manifest (schema_version 1): schema_version, kind "sweep", sweep_id, created_utc, updated_utc,
lab_version, git, status (running | complete | incomplete | interrupted), plan (lab.measure.sweepplan
.Plan.to_dict(), with plan_key), device, devices (per worker), software, cells_planned, cells_done,
rows, messages, merged_from, table, workers (per worker of each --gpus run: its GPU and pin, the units
it took, its exit code and where its time went).
"""

from __future__ import annotations

import json
import os
import statistics
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from lab.errors import LabError
from lab.files import replacing, write_json_atomic
from lab.jsonvalues import json_default, plain
from lab.measure.sweepplan import Plan, cell_key
from lab.store.runs import _SAFE, scan_store, store_root

SWEEP_SCHEMA = 1
SWEEP_MANIFEST = "sweep.json"
TABLE_FILE = "rows.parquet"
ROW_KEY = ("impl", "label", "mode", "timing")

# The tidy table's columns, in order (ratio columns vs_<baseline> follow, one per baseline).
COLUMNS = ["impl", "impl_kind", "label", "batch", "heads", "heads_kv", "seqlen_q", "seqlen_k", "head_dim",
           "causal", "dtype", "mode",
           # the row's backward ran in its deterministic mode (`--deterministic`: a rung's; never a baseline's);
           # None on rows of sweeps before the mode existed (read as False)
           "deterministic", "timing", "status", "reason", "median_ms", "mean_ms", "std_ms",
           "ci95_low_ms", "ci95_high_ms", "min_ms", "max_ms", "reps", "warmup",
           # the passes a row pools (lab.sweeping.measure_unit) and each one's median; None on rows of sweeps
           # before passes (one burst: read as 1 pass)
           "passes", "pass_medians_ms", "flops", "tflops",
           "pct_of_peak", "tokens_per_s", "time_per_token_us", "peak_memory_bytes",
           "memory_per_token_bytes", "worker",
           # which GPU measured the row (lab.sweeping: the --gpus entry, the worker's pin, the clocks and
           # power limit read at most 2 s before its cell finished, and what read them: "nvml" in the
           # worker's process, or "nvidia-smi"); None on rows of sweeps before they were recorded
           "gpu", "gpu_name", "gpu_uuid", "gpu_host_index", "cuda_visible_devices", "sm_clock_mhz",
           "mem_clock_mhz", "power_limit_w", "gpu_probe_source",
           # when the row's cell finished (its last pass, UTC) and the host seconds each of its passes took
           # (lab.sweeping.measure_unit); None on rows of sweeps before they were recorded
           "measured_utc", "pass_wall_s",
           # how the row's start event was taken (lab.measure.timed): True where each graph replay was queued
           # behind a hold before its start (device time, no launch latency), False for events (call latency,
           # started on an idle GPU); hold_retries: repetitions redone behind a longer hold, over all passes.
           # None on rows of sweeps before the hold (their graph rows held the replay's launch latency)
           "held_start", "hold_retries"]


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_sweep_id(name: str, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "custom"
    return f"{now:%Y%m%d-%H%M%S}-sweep-{safe}"


def ratio_column(baseline: str) -> str:
    return "vs_" + baseline.replace("-", "_")


class Sweep:
    """A sweep directory, complete or not (the read and the append side)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.manifest = json.loads((self.path / SWEEP_MANIFEST).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise LabError(f"{self.path} is not a lab sweep: cannot read {SWEEP_MANIFEST} ({e})") from None
        if self.manifest.get("schema_version") != SWEEP_SCHEMA or self.manifest.get("kind") != "sweep":
            raise LabError(f"{self.path}: not a sweep manifest of schema {SWEEP_SCHEMA}")

    @property
    def id(self) -> str:
        return self.manifest["sweep_id"]

    @property
    def plan_dict(self) -> dict:
        return self.manifest["plan"]

    def journals(self) -> list[Path]:
        return sorted(self.path.glob("journal*.jsonl"))

    def append_rows(self, rows: list[dict], part: str = "main") -> None:
        """One cell's rows, durable before the next cell starts."""
        with open(self.path / f"journal-{part}.jsonl", "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, default=json_default) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def rows(self) -> list[dict]:
        """The table's rows, then every journal's (a later row of the same key wins: a resumed cell)."""
        rows: list[dict] = []
        table = self.path / TABLE_FILE
        if table.is_file():
            rows = [{k: plain(v) for k, v in r.items()} for r in pd.read_parquet(table).to_dict("records")]
        for j in self.journals():
            for line in j.read_text(encoding="utf-8").splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass   # a line cut by a kill mid-write: that cell is not done
        by_key = {}
        for r in rows:
            by_key[tuple(r.get(k) for k in ROW_KEY)] = r
        return list(by_key.values())

    def done_cells(self) -> set[str]:
        return {cell_key(r["impl"], r["label"], r["mode"]) for r in self.rows()}

    def table(self) -> "pd.DataFrame":
        rows = self.rows()
        baselines = self.plan_dict.get("baselines", [])
        cols = COLUMNS + [ratio_column(b) for b in baselines]
        df = pd.DataFrame(rows)
        for c in cols:
            if c not in df.columns:
                df[c] = None
        return df[cols + [c for c in df.columns if c not in cols]]

    def update_manifest(self, **fields) -> None:
        self.manifest.update(fields)
        self.manifest["updated_utc"] = now_utc()
        write_json_atomic(self.path / SWEEP_MANIFEST, self.manifest)

    def finalize(self, status: str | None = None, messages: list[str] | None = None) -> "Sweep":
        """Fold the journals into rows.parquet with the ratio columns, then the manifest; status is
        complete when every planned cell has rows, else `status` (incomplete or interrupted)."""
        plan = Plan.from_dict(self.plan_dict)
        order = {c.key: i for i, c in enumerate(plan.cells())}
        # in the plan's order, whatever order the workers measured in (dealt largest first, dynamically)
        rows = sorted(add_ratios(self.rows(), plan.baselines),
                      key=lambda r: (order.get(cell_key(r["impl"], r["label"], r["mode"]), len(order)),
                                     str(r.get("timing"))))
        df = _frame(rows, plan.baselines)
        with replacing(self.path / TABLE_FILE) as tmp:
            df.to_parquet(tmp, index=False)
        planned = {c.key for c in plan.cells()}
        done = {k for k in self.done_cells() if k in planned}
        final = "complete" if done >= planned else (status or "incomplete")
        self.update_manifest(status=final, cells_planned=len(planned), cells_done=len(done), rows=len(rows),
                             messages=list(messages or []), table=TABLE_FILE)
        for j in self.journals():   # folded into the table, which was replaced first
            j.unlink()
        return self

    def missing_cells(self):
        plan = Plan.from_dict(self.plan_dict)
        done = self.done_cells()
        return [c for c in plan.cells() if c.key not in done]

    def __repr__(self) -> str:
        return f"Sweep({self.id})"


def _frame(rows: list[dict], baselines: list[str]) -> "pd.DataFrame":
    cols = COLUMNS + [ratio_column(b) for b in baselines]
    df = pd.DataFrame(rows, columns=cols + sorted({k for r in rows for k in r} - set(cols)))
    for c in ("median_ms", "mean_ms", "std_ms", "ci95_low_ms", "ci95_high_ms", "min_ms", "max_ms", "flops", "tflops",
              "pct_of_peak", "tokens_per_s", "time_per_token_us", "memory_per_token_bytes",
              *[ratio_column(b) for b in baselines]):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    for c in ("reps", "warmup", "passes", "peak_memory_bytes", "gpu_host_index", "sm_clock_mhz", "mem_clock_mhz"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    for c in ("batch", "heads", "heads_kv", "seqlen_q", "seqlen_k", "head_dim"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    df["causal"] = df["causal"].astype("boolean")
    df["deterministic"] = df["deterministic"].astype("boolean")
    df["held_start"] = df["held_start"].astype("boolean")
    df["hold_retries"] = pd.to_numeric(df["hold_retries"], errors="coerce").astype("Int64")
    df["power_limit_w"] = pd.to_numeric(df["power_limit_w"], errors="coerce").astype("float64")
    for c in ("impl", "impl_kind", "label", "dtype", "mode", "timing", "status", "reason", "worker", "gpu", "gpu_name",
              "gpu_uuid", "cuda_visible_devices", "gpu_probe_source", "measured_utc"):
        df[c] = df[c].astype("string")
    return df


def add_ratios(rows: list[dict], baselines: list[str]) -> list[dict]:
    """vs_<baseline> = the baseline's median / this row's (> 1: this row is faster), for the same
    problem, mode and timing method; None where either is missing or not ok."""
    med = {(r["impl"], r["label"], r["mode"], r["timing"]): r.get("median_ms")
           for r in rows if r.get("status") == "ok" and r.get("median_ms")}
    out = []
    for r in rows:
        r = dict(r)
        for b in baselines:
            theirs = med.get((b, r["label"], r["mode"], r["timing"]))
            ours = r.get("median_ms") if r.get("status") == "ok" else None
            r[ratio_column(b)] = theirs / ours if (theirs and ours) else None
        out.append(r)
    return out


def versus(row: dict | None, base: dict | None) -> dict | None:
    """A rung's row against a baseline's (same problem, mode and timing): the ratio of medians (the baseline's over
    the row's: > 1, the row is faster) and a verdict from the two rows' CI95s, which span their passes (so drift
    between passes seconds apart is in them): "ahead" where the row's interval lies wholly below the baseline's,
    "behind" where wholly above, "level" where they overlap: a difference the sweep does not resolve (a paired
    comparison, `lab tune --against`, resolves finer). No verdict where either row lacks its CI95; None where either
    has no time."""
    if not row or not base or row.get("status") != "ok" or base.get("status") != "ok":
        return None
    ours, theirs = row.get("median_ms"), base.get("median_ms")
    if not ours or not theirs:
        return None
    order = ci95_order(row, base)
    verdict = None if order is None else ("ahead", "level", "behind")[order + 1]
    return {"ratio": theirs / ours, "verdict": verdict}


def ci95_order(x: dict, y: dict) -> int | None:
    """Where row x's CI95 lies against row y's: -1 wholly below (x is faster), 1 wholly above, 0 where they overlap;
    None where either lacks its interval. The rule `lab sweep compare` and the rung-against-baseline verdict share."""
    bounds = (x.get("ci95_low_ms"), x.get("ci95_high_ms"), y.get("ci95_low_ms"), y.get("ci95_high_ms"))
    if any(b is None or b != b for b in bounds):
        return None
    lo, hi, y_lo, y_hi = bounds
    return -1 if hi < y_lo else 1 if lo > y_hi else 0


def versus_rungs(impls: list[str], rungs) -> tuple[list[str], list[str]]:
    """(the sweep's rungs among `impls`, the SDPA baselines among them), in their order: a rung is compared where
    at least one baseline was timed beside it (a group of group_rows, a problem of the summary)."""
    ours = set(rungs or ())
    bases = [i for i in impls if i.startswith("sdpa-")]
    return ([i for i in impls if i in ours] if bases else []), bases


def versus_fastest(group: dict, rung: str, x, bases: list[str]) -> dict | None:
    """versus_best() of the rung's row at x in a group (group_rows) against the group's baselines there."""
    return versus_best(group["cells"].get((rung, x)), {b: group["cells"].get((b, x)) for b in bases})


def versus_best(row: dict | None, bases: dict[str, dict | None]) -> dict | None:
    """versus() of a rung's row against the fastest of the baselines' rows of its problem (the smallest median among
    those with a time), with that baseline's name: the question a kernel engineer asks of a grid is whether the rung
    beats the best PyTorch has on that shape."""
    timed = [(r["median_ms"], name, r) for name, r in bases.items()
             if r is not None and r.get("status") == "ok" and r.get("median_ms")]
    if not timed:
        return None
    _, name, best = min(timed, key=lambda t: t[0])
    v = versus(row, best)
    return {**v, "baseline": name} if v else None


def versus_text(v: dict | None, named: bool = False) -> str:
    """A versus cell as the tables print it: `1.021x ahead`, `0.997x level`, with the baseline's name where the group
    has several (`1.021x ahead (sdpa-cudnn)`), or `n/a`."""
    if v is None:
        return "n/a"
    return (f"{v['ratio']:.3f}x" + (f" {v['verdict']}" if v["verdict"] else "")
            + (f" ({v['baseline']})" if named and v.get("baseline") else ""))


def create_sweep(sweep_id: str, manifest: dict, root: Path | None = None) -> Sweep:
    """The sweep directory with its manifest (status running). Call after validating everything."""
    root = Path(root or store_root())
    if not _SAFE.match(sweep_id):
        raise LabError(f"bad sweep id {sweep_id!r}")
    root.mkdir(parents=True, exist_ok=True)
    path, n = root / sweep_id, 1
    while True:   # two sweeps started in the same second get -2, -3, ...
        try:
            path.mkdir()
            break
        except FileExistsError:
            n += 1
            path = root / f"{sweep_id}-{n}"
    sweep_id = path.name
    m = {"schema_version": SWEEP_SCHEMA, "kind": "sweep", "sweep_id": sweep_id, "created_utc": now_utc(),
         "updated_utc": now_utc(), "status": "running", **manifest}
    write_json_atomic(path / SWEEP_MANIFEST, m)
    return Sweep(path)


def scan_sweeps(root: Path | None = None) -> tuple[list[Sweep], list]:
    """Sweeps under the store root and its examples/, oldest first, and the damaged ones with their
    reason (lab.store.runs.DamagedRun)."""
    return scan_store(root, SWEEP_MANIFEST, Sweep, "sweep")


def list_sweeps(root: Path | None = None) -> list[Sweep]:
    """The readable sweeps, oldest first."""
    return scan_sweeps(root)[0]


def find_sweep(sweep_id: str, root: Path | None = None) -> Sweep:
    p = Path(sweep_id)
    if (p / SWEEP_MANIFEST).is_file():
        return Sweep(p)
    matches = [s for s in list_sweeps(root) if s.id == sweep_id or s.id.startswith(sweep_id)]
    if not matches:
        raise LabError(f"no stored sweep {sweep_id!r}", hint="`lab report` lists the stored sweeps")
    exact = [s for s in matches if s.id == sweep_id]
    if len(matches) > 1 and not exact:
        raise LabError(f"sweep id {sweep_id!r} is ambiguous: {', '.join(s.id for s in matches[:5])}")
    return (exact or matches)[0]


def is_sweep(ref: str, root: Path | None = None) -> bool:
    try:
        find_sweep(ref, root)
        return True
    except LabError:
        return False


def shards_named(name: str, root: Path | None = None) -> list[Sweep]:
    """The stored shards of the plan named `name` (`lab sweep --name NAME --shard i/N`), in shard order."""
    found = [s for s in list_sweeps(root) if s.plan_dict.get("name") == name and s.plan_dict.get("shard")]
    if not found:
        raise LabError(f"no stored shard of a sweep named {name!r} in {Path(root or store_root())}",
                       hint="the shards' store must be this one: run the merge where they were written, or set --profiles")
    return sorted(found, key=lambda s: (tuple(s.plan_dict["shard"]), s.id))


def check_shards(parts: list[Sweep]) -> int:
    """That `parts` are every shard of one plan, each once; returns N. LabError (exit 2) otherwise."""
    if not parts:
        raise LabError("nothing to merge: name the shards (sweep ids or folders), or --name")
    keys = {p.manifest.get("plan_key") for p in parts}
    if len(keys) != 1:
        raise LabError("these partials belong to different sweeps (their plans differ: "
                       + ", ".join(f"{p.id}: {p.manifest.get('plan_key')}" for p in parts) + ")")
    whole = [p.id for p in parts if not p.plan_dict.get("shard")]
    if whole:
        raise LabError(f"{', '.join(whole)} is not a shard (measured without --shard i/N): there is nothing to join it with")
    shards = [tuple(p.plan_dict["shard"]) for p in parts]
    counts = sorted({n for _, n in shards})
    if len(counts) > 1:
        raise LabError(f"the shards split the plan differently (N = {', '.join(map(str, counts))}): "
                       "a merge joins the i/N of one N")
    n = counts[0]
    dup = sorted({s for s in shards if shards.count(s) > 1})
    if dup:
        twice = [p for p in parts if tuple(p.plan_dict["shard"]) == dup[0]]
        # a copied folder keeps its manifest's id: then only the folders tell them apart
        names = [str(p.path) for p in twice] if len({p.id for p in twice}) < len(twice) else [p.id for p in twice]
        copied = " (one folder is a copy of the other: the same sweep id)" if names[0] != twice[0].id else ""
        raise LabError(f"shard {'/'.join(map(str, dup[0]))} is given twice: {', '.join(names)}{copied}",
                       hint="keep one of them (a shard measured again is a second sweep; remove the other's folder)")
    missing = [i for i in range(1, n + 1) if (i, n) not in shards]
    if missing:
        raise LabError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{i}/{n}' for i in missing)} "
                       f"missing: a merge joins all {n} shards of the plan",
                       hint="measure the missing ones with the same options and --shard i/N, then merge all of them")
    return n


def merged_already(parts: list[Sweep], root: Path | None = None) -> Sweep | None:
    """The stored sweep merged from exactly these shards, if one is: a second merge would make a twin."""
    ids = sorted(p.id for p in parts)
    return next((s for s in list_sweeps(root) if sorted(s.manifest.get("merged_from") or []) == ids), None)


def merge_sweeps(parts: list[Sweep], root: Path | None = None, allow_mismatch: bool = False,
                 sweep_id: str | None = None) -> Sweep:
    """Join the shards (--shard i/N) of ONE plan into a new sweep. Refuses (exit 2, nothing stored)
    partials of different plans (their plan hashes differ), a sweep that is not a shard, shards that
    split the plan differently, a shard given twice or missing, and partials of different devices or
    software unless `allow_mismatch`."""
    check_shards(parts)
    done = merged_already(parts, root)
    if done is not None:
        raise LabError(f"these shards are already merged, into {done.id} ({done.path})",
                       hint=f"`lab sweep --resume {done.id}` measures its missing cells; to merge again, remove {done.path} first")
    for what, get in (("device", lambda p: (p.manifest.get("device") or {}).get("name")),
                      ("software", lambda p: (p.manifest.get("software") or {}).get("torch"))):
        seen = {get(p) for p in parts}
        if len(seen) > 1 and not allow_mismatch:
            raise LabError(f"the partials were measured on different {what} ({', '.join(map(str, sorted(seen, key=str)))})",
                           hint="pass --allow-mismatch to merge them anyway (the page will say so)")
    first = parts[0].manifest
    plan = dict(first["plan"], shard=None)
    devices = [d for p in parts for d in (p.manifest.get("devices") or [p.manifest.get("device")]) if d]
    manifest = {k: first.get(k) for k in ("lab_version", "git", "device", "software", "plan_key")}
    manifest.update(plan=plan, devices=devices, merged_from=[p.id for p in parts],
                    mismatch_allowed=bool(allow_mismatch))
    merged = create_sweep(sweep_id or new_sweep_id(plan.get("name", "merged") + "-merged"), manifest, root)
    rows = [dict(r, worker=r.get("worker") or p.id) for p in parts for r in p.rows()]
    merged.append_rows(rows, "merge")
    return merged.finalize()


# ------------------------------------------------------------------------------ views of the table

GROUP_FIELDS = ("mode", "timing", "dtype", "head_dim", "causal")


def group_rows(rows: list[dict], axis: str = "seqlen") -> list[dict]:
    """The table cut into chart-sized groups: rows that differ only in the swept axis (N, or the
    batch) and the implementation. Returns [{key, title, axis, xs, impls, cells {(impl, x): row}}],
    in the table's order. Where one implementation has several rows at one x (B and N both swept),
    the group splits by batch, heads and K/V heads."""
    xname = "batch" if axis == "batch" else "seqlen_q"

    def base_key(r):
        return tuple(r.get(f) for f in GROUP_FIELDS) + ((r.get("seqlen_q"), r.get("heads"), r.get("heads_kv"))
                                                         if axis == "batch" else ())

    buckets: dict[tuple, list[dict]] = {}
    for r in rows:
        buckets.setdefault(base_key(r), []).append(r)
    out = []
    for key, members in buckets.items():
        seen = [(r["impl"], r[xname]) for r in members]
        if len(seen) != len(set(seen)):
            sub: dict[tuple, list[dict]] = {}
            for r in members:
                sub.setdefault(key + (r["batch"], r["heads"], r["heads_kv"]), []).append(r)
            parts = list(sub.items())
        else:
            parts = [(key, members)]
        for k, rs in parts:
            out.append(_group(k, rs, xname))
    return out


def _group(key: tuple, rows: list[dict], xname: str) -> dict:
    r0 = rows[0]
    xs = sorted({r[xname] for r in rows})
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fixed = []
    shapes = {(r["batch"], r["heads"], r["heads_kv"]) for r in rows}
    if xname == "batch":
        fixed.append(f"H={r0['heads']}" + (f" (K/V {r0['heads_kv']})" if r0["heads_kv"] != r0["heads"] else "")
                     + f", N={r0['seqlen_q']}")
    elif len(shapes) == 1:
        b, h, kv = next(iter(shapes))
        fixed.append(f"B={b}, H={h}" + (f" (K/V {kv})" if kv != h else ""))
    else:
        tokens = {r["batch"] * r["seqlen_q"] for r in rows}
        hidden = {r["heads"] * r["head_dim"] for r in rows}
        if len(tokens) == 1 and len(hidden) == 1:
            fixed.append(f"{next(iter(tokens))} tokens, hidden {next(iter(hidden))}")
    title = ", ".join([f"D={r0['head_dim']}", "causal" if r0["causal"] else "non-causal", r0["dtype"], *fixed,
                       r0["mode"], f"{r0['timing']} timing"])
    return {"key": "|".join(map(str, key)), "title": title, "axis": xname, "xs": xs, "impls": impls,
            "mode": r0["mode"], "timing": r0["timing"], "dtype": r0["dtype"],
            "cells": {(r["impl"], r[xname]): r for r in rows}}


def oom_points(rows: list[dict]) -> list[dict]:
    """Per implementation and problem family, the smallest N (or batch) that ran out of memory."""
    out: dict[tuple, dict] = {}
    for r in rows:
        if r.get("status") != "oom":
            continue
        k = (r["impl"], r["mode"], r["head_dim"], r["causal"], r["dtype"])
        if k not in out or r["seqlen_q"] < out[k]["seqlen_q"]:
            out[k] = r
    return list(out.values())


def _what_differs(ra: dict, rb: dict) -> str:
    """The first of the row key's fields whose values the two sweeps do not share, as `A has x, B has y`."""
    if not ra or not rb:
        return f"{'A' if not ra else 'B'} has no measured row"
    for i, name in enumerate(ROW_KEY):
        va, vb = {k[i] for k in ra}, {k[i] for k in rb}
        if not va & vb:
            return f"A has {name} {', '.join(sorted(map(str, va)))}; B has {', '.join(sorted(map(str, vb)))}"
    return "no combination of their implementations, problems, modes and timings is in both"


PRACTICAL_THRESHOLD_PCT = 3.0
"""A row changed only when its median moved more than this much AND beyond both CI95s: one run's
CI95 says nothing about run-to-run and GPU-to-GPU spread (two H100s of one host, the same sweep:
52 of 68 rows outside each other's CI95 at a median ratio of 1.014)."""


def _gpu_of(r: dict, sweep: Sweep) -> str:
    """The GPU that measured a row: its UUID, else (rows of sweeps before rows named one) the sweep's device name."""
    return r.get("gpu_uuid") or (sweep.manifest.get("device") or {}).get("name") or "unknown"


def gpu_spread(pairs: list[tuple[str, str, float]]) -> list[dict]:
    """Per (A's GPU, B's GPU) of rows measured on different GPUs: how far apart the same work timed
    (B/A median ratios: their median, the middle 90% and the extremes)."""
    by: dict[tuple[str, str], list[float]] = {}
    for ga, gb, ratio in pairs:
        if ga != gb:
            by.setdefault((ga, gb), []).append(ratio)
    out = []
    for (ga, gb), ratios in sorted(by.items()):
        rs = sorted(ratios)
        q = lambda f: rs[min(len(rs) - 1, max(0, round(f * (len(rs) - 1))))]   # noqa: E731
        out.append({"gpu_a": ga, "gpu_b": gb, "rows": len(rs), "median_ratio_b_over_a": q(0.5),
                    "p5_ratio": q(0.05), "p95_ratio": q(0.95), "min_ratio": rs[0], "max_ratio": rs[-1]})
    return out


def pass_spread(rows: list[dict], threshold_pct: float) -> dict:
    """How many timed rows' passes (`pass_medians_ms`) are more than `threshold_pct` apart (slowest over
    fastest): the drift a single burst's CI95 would not have covered. Rows of one pass count as none."""
    spread = [max(m) / min(m) for r in rows if len(m := list(r.get("pass_medians_ms") or [])) > 1 and min(m) > 0]
    return {"rows_in_passes": len(spread), "passes_apart": sum(1 for x in spread if (x - 1) * 100 > threshold_pct),
            "max_pass_spread": max(spread) if spread else None}


LEAN_SHARE = 0.75
"""A problem moved as a whole when at least this share of its rows, and of its implementations, moved the
same way (see problem_moves)."""


def problem_moves(ratios: dict[tuple, float], threshold_pct: float) -> dict[str, dict]:
    """Per problem (a row key's label: one shape, dtype, causal; every implementation, mode and timing of
    it measured together, back to back, by one worker: lab.sweeping's unit), the median B/A ratio of its
    rows both sweeps timed, and whether the problem moved as a whole.

    The rule: at least LEAN_SHARE of its rows moved beyond half the threshold the same way, so did at least
    LEAN_SHARE of its implementations (each with a row that leaned that way), at least two implementations
    are there, and the median ratio is beyond the threshold itself. Why: a kernel change moves one
    implementation's rows, not its baselines' measured in the same seconds; a window of the machine (the
    host, the clocks, a neighbour) moves every implementation of the problem that ran in it. Half the
    threshold counts a row that leans without having to pass the threshold on its own (a window's few
    microseconds move long calls less); three in four leaves room for a row or an implementation that did
    not lean while not letting one implementation's several modes and timings pass as a whole problem; the
    implementations' share keeps a rung measured in more modes than its baselines from carrying the count
    alone; with one implementation the problem's move cannot be told from the implementation's own, so it
    never moves as a whole."""
    half = threshold_pct / 200
    by: dict[str, list[tuple[str, float]]] = {}
    for k, ratio in ratios.items():
        by.setdefault(k[1], []).append((k[0], ratio))
    out = {}
    for label, rs in by.items():
        n, median = len(rs), statistics.median(r for _, r in rs)
        impls = {i for i, _ in rs}
        slower = [(i, r) for i, r in rs if r > 1 + half]
        faster = [(i, r) for i, r in rs if r < 1 - half]
        way, lean = ("slower", slower) if len(slower) >= len(faster) else ("faster", faster)
        moved = (len(impls) >= 2 and len(lean) >= LEAN_SHARE * n
                 and len({i for i, _ in lean}) >= LEAN_SHARE * len(impls)
                 and abs(median - 1) * 100 > threshold_pct)
        out[label] = {"problem": label, "rows": n, "implementations": len(impls), "median_ratio_b_over_a": median,
                      "rows_slower": len(slower), "rows_faster": len(faster), "moved_as_a_whole": moved,
                      "direction": way if moved else None}
    return out


MEASURES = {"device": "device time (graph replay, start held)",
            "graph-unheld": "graph replay, start not held (the host's launch latency included)",
            "call": "call latency (CUDA events from an idle GPU, host dispatch included)"}
"""What a row's time measures, by its timing method and how its start was taken (lab.measure.timed):
held graph rows are the device's time alone, graph rows of sweeps before the held start carry the
replay's launch, events rows are the whole call as a user's code sees it. The same move means different
things in each: a 5% move of a short events row can be the host's dispatch alone (compare_sweeps gives
a changed events row its host share where its cell has a graph row)."""


def measure_of(ra: dict, rb: dict) -> str:
    """What a pair of rows (one key in two sweeps) measures, a MEASURES key: a graph row is device time only
    where both sides' starts were held."""
    if ra.get("timing") != "graph":
        return "call"
    return "device" if ra.get("held_start") and rb.get("held_start") else "graph-unheld"


def _ratio_spread(ratios: list[float]) -> dict:
    rs = sorted(ratios)
    q = lambda f: rs[min(len(rs) - 1, max(0, round(f * (len(rs) - 1))))]   # noqa: E731
    return {"median_ratio_b_over_a": q(0.5), "p5_ratio": q(0.05), "p95_ratio": q(0.95), "min_ratio": rs[0],
            "max_ratio": rs[-1]}


def _host_share(ra: dict, rb: dict, key: tuple) -> dict | None:
    """For a changed events row: its cell's graph row in A and in B (both timed), and the host's share of
    the call in each, events minus graph (what a call adds to the device's time: dispatch, autograd, the
    launch), and how much of the events row's move that share made; None where either sweep has no graph
    row of the cell."""
    impl, label, mode, _ = key
    ga, gb = ra.get((impl, label, mode, "graph")), rb.get((impl, label, mode, "graph"))
    if not ga or not gb:
        return None
    ea, eb = ra[key]["median_ms"], rb[key]["median_ms"]
    host_a, host_b = ea - ga["median_ms"], eb - gb["median_ms"]
    return {"a_graph_ms": ga["median_ms"], "b_graph_ms": gb["median_ms"], "graph_ratio": gb["median_ms"] / ga["median_ms"],
            "graph_held": bool(ga.get("held_start") and gb.get("held_start")), "a_host_ms": host_a, "b_host_ms": host_b,
            # how much of the events row's move the host's share made (1: all of it, the device's time unmoved)
            "host_of_move": (host_b - host_a) / (eb - ea) if eb != ea else None}


def _baseline_verdicts(x: dict, y: dict, baselines: list[str], threshold_pct: float) -> list[dict]:
    """For a rung's row: its ratio against each baseline of the same sweep (vs_<baseline>, > 1 faster) in A
    and in B, and whether that verdict changed beyond the threshold. None where a side has no ratio."""
    out = []
    for bl in baselines:
        va, vb = x.get(ratio_column(bl)), y.get(ratio_column(bl))
        if not va or not vb:
            continue
        change = vb / va
        out.append({"baseline": bl, "a": va, "b": vb, "change": change,
                    "changed": abs(change - 1) * 100 > threshold_pct})
    return out


def measure_agreement(m: dict, threshold_pct: float) -> str:
    """One measure's entry of compare_sweeps' `by_measure` in words, as `lab sweep compare` and
    benchmarks/sweep_scaling.py print it: "0 of 78 rows changed, 4 beyond CI95 within 3%; median B/A
    0.998, middle 90% 0.992-1.004, extremes 0.989-1.017"."""
    return (f"{m['changed']} of {m['rows']} rows changed, {m['beyond_ci95_within_threshold']} beyond CI95 within "
            f"{threshold_pct:g}%; median B/A {m['median_ratio_b_over_a']:.3f}, middle 90% {m['p5_ratio']:.3f}-"
            f"{m['p95_ratio']:.3f}, extremes {m['min_ratio']:.3f}-{m['max_ratio']:.3f}")


def compare_sweeps(a: Sweep, b: Sweep, threshold_pct: float = PRACTICAL_THRESHOLD_PCT) -> dict:
    """Row by row (implementation, problem, mode, timing), did anything change between two sweeps?
    A row differs only when the CI95 intervals of its medians do not overlap AND the medians are
    more than `threshold_pct` apart (statistically and practically significant); a row beyond CI95
    but within the threshold is counted apart. Where rows of the two were measured on different
    GPUs (their UUIDs), the GPU-to-GPU spread of the B/A ratios is reported per pair of GPUs. Used
    to check that a sweep spread over GPUs (--gpus, shards merged) equals the same sweep on one GPU.
    A row's CI95 is its passes' (lab.sweeping.measure_unit); `pass_spread_a`/`_b` count the rows whose
    passes alone were more than the threshold apart.

    Whole problems (problem_moves): `problems` lists each problem's median B/A ratio and whether it moved
    as a whole; each changed row is then `with_problem` (its problem moved as a whole and the row's ratio is
    within the threshold of the problem's median: the machine's state while that problem ran, not the
    implementation), `against_problem` (its problem moved, the row more than the threshold away from its
    median: a change of that implementation relative to the others) or `own` (its problem did not move).
    `on_their_own` lists the own and against_problem rows, the findings to read. A rung's changed row
    carries `baselines`: its ratio against each baseline both sweeps measured, in A and in B, and whether
    that verdict changed beyond the threshold.

    By what a row measures (MEASURES: device time, unheld graph replay, call latency): `by_measure` counts
    each kind's rows, changed rows and rows beyond CI95 within the threshold, with the spread of its B/A
    ratios; every compared row is of one kind, so the kinds' counts add up to the totals. Each changed row
    says its `measure`, and a changed events row `host`: its cell's graph row in A and B and the host's
    share of the call in each (events minus graph), None where a sweep has no graph row of the cell. The
    rule of a change is the same for every kind: this says what moved, it judges nothing anew."""
    if threshold_pct < 0:
        raise LabError(f"--threshold must be >= 0 (percent), got {threshold_pct:g}")
    # the ratio columns from the rows themselves (a sweep still in its journals has none stored yet)
    bl_a, bl_b = list(a.plan_dict.get("baselines") or []), list(b.plan_dict.get("baselines") or [])
    ra = {tuple(r.get(k) for k in ROW_KEY): r for r in add_ratios(a.rows(), bl_a) if r.get("status") == "ok"}
    rb = {tuple(r.get(k) for k in ROW_KEY): r for r in add_ratios(b.rows(), bl_b) if r.get("status") == "ok"}
    baselines = [bl for bl in bl_a if bl in bl_b]
    common = sorted(set(ra) & set(rb), key=str)
    if not common:   # nothing to hold against each other: a usage error, not a regression
        raise LabError(f"sweeps {a.id} and {b.id} have no measured row in common (implementation, problem, mode, "
                       f"timing): {_what_differs(ra, rb)}",
                       hint="compare sweeps of one plan (the same sweep on other GPUs, shards merged, a re-run)")
    differ, within_threshold, pairs = [], [], []
    for k in common:
        x, y = ra[k], rb[k]
        ratio = y["median_ms"] / x["median_ms"]
        pairs.append((_gpu_of(x, a), _gpu_of(y, b), ratio))
        if not ci95_order(x, y):   # the intervals overlap (0), or a row lacks its interval (None)
            continue
        entry = {"impl": k[0], "label": k[1], "mode": k[2], "timing": k[3], "a_ms": x["median_ms"],
                 "b_ms": y["median_ms"], "ratio": ratio, "a_gpu": _gpu_of(x, a), "b_gpu": _gpu_of(y, b),
                 "measure": measure_of(x, y)}
        (differ if abs(ratio - 1) * 100 > threshold_pct else within_threshold).append(entry)
    row_ratios = {k: rb[k]["median_ms"] / ra[k]["median_ms"] for k in common}
    moves = problem_moves(row_ratios, threshold_pct)
    for d in differ:
        p = moves[d["label"]]
        d["problem_median_ratio"] = p["median_ratio_b_over_a"]
        # against the problem's median, all its modes and timings: the one number the problem moved by (a
        # window's microseconds move a short call's ratio more, so a short events row can read as against)
        d["vs_problem"] = d["ratio"] / p["median_ratio_b_over_a"]
        d["finding"] = ("own" if not p["moved_as_a_whole"] else
                        "against_problem" if abs(d["vs_problem"] - 1) * 100 > threshold_pct else "with_problem")
        k = (d["impl"], d["label"], d["mode"], d["timing"])
        d["baselines"] = ([] if d["impl"] in baselines else
                          _baseline_verdicts(ra[k], rb[k], baselines, threshold_pct))
    for d in differ:
        if d["timing"] != "graph":
            d["host"] = _host_share(ra, rb, (d["impl"], d["label"], d["mode"], d["timing"]))
    by_measure = []
    for m in MEASURES:   # how each kind of row agreed; the same rule, counted apart
        keys = [k for k in common if measure_of(ra[k], rb[k]) == m]
        if keys:
            by_measure.append({"measure": m, "what": MEASURES[m], "rows": len(keys),
                               "changed": sum(1 for d in differ if d["measure"] == m),
                               "beyond_ci95_within_threshold": sum(1 for d in within_threshold if d["measure"] == m),
                               **_ratio_spread([row_ratios[k] for k in keys])})
    problems = sorted(moves.values(), key=lambda p: p["median_ratio_b_over_a"])
    for p in problems:
        mine = [d for d in differ if d["label"] == p["problem"]]
        p["changed_rows"] = len(mine)
        p["changed_with_problem"] = sum(1 for d in mine if d["finding"] == "with_problem")
        p["changed_against_problem"] = sum(1 for d in mine if d["finding"] == "against_problem")
    ratios = sorted(p[2] for p in pairs)
    loads = [float(s.plan_dict.get("under_load_ms") or 0.0) for s in (a, b)]
    return {"a": a.id, "b": b.id, "threshold_pct": threshold_pct, "rows_compared": len(common),
            # each sweep's stretch before a repetition (lab.measure.timed, UNDER LOAD); where they differ, the
            # two measured the GPU in different states and a change includes the clock at the power limit
            "under_load_ms_a": loads[0], "under_load_ms_b": loads[1],
            "only_in_a": len(set(ra) - set(rb)), "only_in_b": len(set(rb) - set(ra)),
            "overlapping": len(common) - len(differ) - len(within_threshold), "differing": differ,
            "beyond_ci95_within_threshold": within_threshold,
            "median_ratio_b_over_a": ratios[len(ratios) // 2] if ratios else None,
            "gpu_spread": gpu_spread(pairs),
            "pass_spread_a": pass_spread(list(ra.values()), threshold_pct),
            "pass_spread_b": pass_spread(list(rb.values()), threshold_pct),
            "by_measure": by_measure,
            "problems": problems,
            "problems_moved_as_a_whole": [p for p in problems if p["moved_as_a_whole"]],
            "moved_with_problem": [d for d in differ if d["finding"] == "with_problem"],
            "on_their_own": [d for d in differ if d["finding"] != "with_problem"]}

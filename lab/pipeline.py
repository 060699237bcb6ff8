"""What `lab profile` does, in order: setup -> build -> check -> bench -> baselines -> ncu -> timeline
-> analysis -> store -> report, one function per stage. Correctness gates timing; timing gates
profiling. Nothing is stored unless every step that ran finished: the run directory is staged and
renamed into place last (lab.store.runs).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

from lab import __version__, environment
from lab.console import say as _say
from lab.analysis import findings as analysis
from lab.analysis import lines as source_lines
from lab.errors import CheckFailed, LabError
from lab.files import write_json_atomic
from lab.ladder import build, registry
from lab.ladder.registry import Variant, source_label
from lab.measure import baselines, bench, checked, rates
from lab.measure.call import require_mode
from lab.measure.gate import GATE_SHAPES
from lab.measure.isolated import NotBuilt, child_env, start_check
from lab.measure.problem import Problem, check_supported
from lab.measure.target import range_name
from lab.profilers import ncu
from lab.profilers.timeline import collect_timeline
from lab.report.pages import render_run_page
from lab.store import baseline_cache, check_cache, runs
from lab.store import manifest as mf



@dataclass(frozen=True)
class Machine:
    """What `lab profile` asks of the GPU machine, each act a function: the real ones by default; a
    caller without a GPU (tests/test_profile_loop.py) hands its own to `profile`. `start_check` returns
    a pending verdict (lab.measure.isolated.PendingCheck: result(), cancel())."""
    require_gpu: Callable = environment.require_gpu
    require_compute_capability: Callable = environment.require_compute_capability
    device_info: Callable = environment.device_info
    software_info: Callable = environment.software_info
    tool_versions: Callable = environment.tool_versions
    git_info: Callable = environment.git_info
    build: Callable = build.build
    start_check: Callable = start_check
    time_rung: Callable = checked.time_rung
    run_baselines: Callable = baselines.run_baselines


THIS_MACHINE = Machine()


@dataclass
class ProfileOptions:
    reps: int = bench.DEFAULT_REPS
    warmup: int = bench.DEFAULT_WARMUP
    mode: str = "fwd"                # fwd, bwd or fwd+bwd: what is checked, timed and profiled
    baselines: bool = True
    ncu: bool = True
    section_set: str | None = None   # None: the lab's default (<= 20 replay passes); "full" on request
    timeline: bool = False
    timeline_repeats: int = 20
    report: bool = True
    check_shapes: int = GATE_SHAPES
    fresh_baselines: bool = False   # re-time the SDPA baselines instead of reading the store's cache
    fresh_check: bool = False       # check again instead of reusing the verdict on the same binary, shapes and seed


def target_argv(variant: Variant, problem: Problem, repeat: int = 1, mode: str = "fwd") -> list[str]:
    return [sys.executable, "-m", "lab.measure.target", "--variant", registry.ref(variant), "--problem", problem.label(),
            "--mode", mode, "--repeat", str(repeat)]


class Stages:
    """Wall time per stage of `lab profile`: a line on stderr as each ends, and the table stored in
    the manifest (stage_seconds), so where a run's time goes is visible, not guessed."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()

    @contextmanager
    def __call__(self, name: str, note: str = ""):
        t0 = time.perf_counter()
        yield
        dt = time.perf_counter() - t0
        self.seconds[name] = self.seconds.get(name, 0.0) + dt
        _say(f"  {name}: {dt:.2f} s{f' ({note})' if note else ''}")

    def summary(self) -> str:
        total = time.perf_counter() - self.started
        return " · ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items()) + f" · total {total:.2f} s"


@dataclass
class Profiled:
    run_dir: Path
    page: Path | None


def analysis_tables(report_path: Path, problem: dict | None, timeline_info: dict | None,
                    mode: str = "fwd") -> tuple[list, dict]:
    """The analysis of one ncu report and the tables a run stores from it (metrics, derived values,
    findings, Nsight's rules, per-line counters). The timeline runs first: the launch-bound judgement
    uses the launch cost it measured, the steady-state gap between consecutive kernels (the per-range
    overhead also spreads the first launch's delay, profiler start-up included, over the launches)."""
    tl_info = timeline_info or {}
    overhead = ((tl_info.get("launch_overhead") or {}).get("kernel_gap_ns_median") or tl_info.get("launch_overhead_ns"))
    # the mode sets the FLOPs a kernel is held against (a backward does 2.5x the forward's work)
    analyses = analysis.analyze_report(report_path, problem=problem, launch_overhead_ns=overhead, mode=mode)
    tables = {"metrics": analysis.metrics_frame(report_path),
              "derived": analysis.derived_frame(analyses),
              "findings": analysis.findings_frame(analyses),
              "ncu_rules": analysis.rules_frame(report_path),
              "lines": source_lines.lines_frame(source_lines.report_lines(report_path))}
    return analyses, tables


def reanalyze(run, into: Path | None = None) -> tuple[Path, list]:
    """Run this lab's analysis again on a stored run's own ncu report (no GPU): its metrics, derived,
    findings, rules and lines tables and its findings summary are replaced, and the numbers derived from
    its times (TFLOP/s, % of peak, minimum bytes, ratios: lab.measure.rates by the run's mode) brought up to
    this lab's rules; everything measured (times, correctness, the recorded source) stays. The run is rebuilt in a staging copy and swapped
    into place, so a reader never sees half of it. `into`: the store to write the reanalyzed run to,
    under its id, where that is not the run's own folder (a shipped example stays as recorded); a copy
    there from an earlier reanalysis is replaced."""
    report = run.artifact("ncu_report")
    if report is None or not report.is_file():
        raise LabError(f"run {run.id} has no ncu report to analyze again",
                       hint="it was stored with --no-ncu; profile the rung again")
    git = environment.git_info()   # before the staging copy exists: it would count as a change to the tree
    dest = run.path if into is None else Path(into) / run.id
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{run.id}.", suffix=".partial", dir=dest.parent))
    try:
        shutil.rmtree(staging)
        shutil.copytree(run.path, staging)
        analyses, tables = analysis_tables(staging / report.name, run.manifest.get("problem"), run.manifest.get("timeline"),
                                           run.manifest.get("mode") or "fwd")
        d = run.record.to_dict()
        for name, df in tables.items():
            runs.write_table(df, staging / f"{name}.parquet")
            d.setdefault("tables", {})[name] = f"{name}.parquet"
        if d.get("timing"):   # the derived numbers by this lab's rules (lab.measure.rates); the times kept
            d["timing"], d["baselines"] = rates.run_rates(run.record.problem, run.manifest.get("mode") or "fwd",
                                                          d["timing"], d.get("baselines") or [],
                                                          (d.get("device") or {}).get("peaks"))
        d["findings_summary"] = analysis.findings_summary(analyses)
        # provenance: the judgement is newer than the measurements, and by which lab
        d["reanalyzed"] = {"utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "lab_version": __version__,
                           "git": git}
        write_json_atomic(staging / runs.MANIFEST, mf.Manifest.from_dict(d).to_dict())
        old = dest.with_name(f".{run.id}.old")
        if dest.exists():
            os.replace(dest, old)
        os.replace(staging, dest)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest, analyses


def profile(variant: Variant, problem: Problem, opts: ProfileOptions, machine: Machine = THIS_MACHINE) -> Profiled:
    """Setup -> build -> check -> bench -> baselines -> ncu -> timeline -> analysis -> store -> report,
    each a named stage below; the wall time of each is printed and stored (Stages)."""
    stage = Stages()
    check_supported(variant, problem)
    # The correctness child starts first, on the cached build only: its interpreter and CUDA start-up
    # overlap the parent's (torch's import alone takes seconds). Where the rung is not built yet it
    # says so at once and is started again after the build. (A python rung has nothing to compile.)
    require_mode(variant, opts.mode)
    early = machine.start_check(variant, problem, opts.check_shapes, compile=variant.kind != "cuda", mode=opts.mode)
    # the tools' versions and the commit are subprocesses (ncu's and nsys's take most of a second): asked
    # for on a thread while torch loads, not after it
    facts_pool = ThreadPoolExecutor(max_workers=1)
    tools = facts_pool.submit(lambda: (machine.tool_versions(), machine.git_info()))
    facts_pool.shutdown(wait=False)
    try:
        with stage("setup"):   # torch's import and CUDA's start-up, ncu found
            setup(variant, opts, machine)
        with stage("build"):
            built = build_rung(variant, machine)
        source_sha = hashlib.sha256(variant.source.read_bytes()).hexdigest()   # the source as built
    except BaseException:
        early.cancel()
        raise
    with stage("check"):
        facts, correctness = gate(variant, problem, opts, early, built, tools, machine)
    with stage("bench"):
        timing, peak_mem = time_rung(variant, problem, built, opts, machine)
    base = baselines_beside(problem, timing, facts, opts, stage, machine)

    rng = range_name(variant.id, problem.label(), opts.mode)
    with runs.create_run(runs.new_run_id(variant.id, problem.label())) as run:
        ncu_info = timeline_info = None
        analyses: list = []
        tables: dict = {}
        if opts.ncu:
            with stage("ncu"):
                ncu_info = profile_ncu(run, variant, problem, opts, rng)
        if opts.timeline:
            with stage("timeline"):
                timeline_info = record_timeline(run, variant, problem, opts, rng)
        if ncu_info is not None:
            with stage("analysis"):
                analyses, tables = analyze(run, variant, problem, timeline_info, opts.mode)
        with stage("store"):
            for name, df in tables.items():
                run.add_table(name, df)
            final = run.commit(run_record(variant, source_sha, problem, facts, built, correctness, timing, peak_mem, base,
                                          ncu_info, timeline_info, analyses, stage, opts.mode))

    page = None
    if opts.report:
        with stage("report"):
            page = render_run_page(final)
        runs.amend_manifest(final, stage_seconds=dict(stage.seconds))   # the report's own time, once known
    _say(f"stages: {stage.summary()}")
    return Profiled(final, page)


# ----------------------------------------------------------------------------- the stages, in order

def setup(variant: Variant, opts: ProfileOptions, machine: Machine = THIS_MACHINE) -> None:
    """Refuse, before minutes of work: no GPU, a GPU too old for the rung, no ncu."""
    machine.require_gpu("profile")
    machine.require_compute_capability(variant)
    if opts.ncu:
        ncu.require_ncu()


def build_rung(variant: Variant, machine: Machine = THIS_MACHINE):
    _say(f"build {variant.label()}")
    built = machine.build(variant)
    _say(f"  {'compiled' if built.built_now else 'cached'} in {built.seconds:.1f} s")
    return built


@dataclass
class Facts:
    """The machine the run was measured on, as the manifest records it."""
    device: dict
    software: dict
    git: dict


def gate(variant: Variant, problem: Problem, opts: ProfileOptions, early, built, tools,
         machine: Machine = THIS_MACHINE) -> tuple[Facts, dict]:
    """Correctness gates timing: the child's verdict on the problem and the ragged shapes (CheckFailed
    when wrong), or the verdict kept for the same binary, shapes and seed (lab.store.check_cache; the
    child is then ended unread). While the child checks, what needs no GPU: the machine's facts for the
    manifest (`tools`: the tool versions and commit, asked for on a thread)."""
    tool_versions, git = tools.result()
    facts = Facts(machine.device_info(), machine.software_info(tool_versions), git)
    key = check_cache.cache_key(variant, built, problem, opts.check_shapes, opts.mode, facts.device, facts.software)
    kept = None if opts.fresh_check else check_cache.get(key)
    if kept is not None:
        early.cancel()
        _say(f"check {variant.id}: passed, reused from {kept['reused']}")
        return facts, kept
    _say(f"check {variant.id}{'' if opts.mode == 'fwd' else ' ' + opts.mode} against float64 on {problem.label()} "
         f"and {opts.check_shapes} ragged shapes")
    try:
        correctness = early.result()
    except NotBuilt:   # compiled just now: check the fresh build
        correctness = machine.start_check(variant, problem, opts.check_shapes, mode=opts.mode).result()
    check_cache.put(key, correctness)   # a passed verdict only
    if not correctness["passed"]:
        if correctness.get("failure"):   # the backward's: the tensor, the shape and the worst element
            raise CheckFailed(f"{variant.id} is wrong: {correctness['failure']} ({correctness['rule']})")
        raise CheckFailed(f"{variant.id} is wrong on {correctness['failed_shape']}: rel_err "
                          f"{correctness['rel_err']}, tolerance {correctness['tolerance']} ({correctness['rule']})")
    return facts, correctness


def time_rung(variant: Variant, problem: Problem, built, opts: ProfileOptions, machine: Machine = THIS_MACHINE):
    """(Timing, peak memory) through the checked timer (lab.measure.timed): a time that cannot be
    true raises TimingRefused, a CheckFailed (exit 1), before ncu spends minutes on the rung."""
    _say(f"bench {variant.id} {opts.mode}: {opts.reps} reps after {opts.warmup} warm-up, L2 flushed"
         + (", inputs rotating" if opts.mode != "bwd" else ""))
    timing = machine.time_rung(variant, built.module, problem, opts.reps, opts.warmup, mode=opts.mode)
    return timing, timing.peak_memory_bytes


@dataclass
class BaselinesTimed:
    rows: list
    timed_utc: str | None = None
    cached: bool | None = None


def baselines_beside(problem: Problem, timing, facts: Facts, opts: ProfileOptions, stage: Stages,
                     machine: Machine = THIS_MACHINE) -> BaselinesTimed:
    """The SDPA baselines on this problem, from the store's cache where this device and software timed
    them with this protocol; their ratios to ours are derived with the run's other numbers (lab.measure.rates.run_rates)."""
    if not opts.baselines:
        return BaselinesTimed([])
    key = baseline_cache.cache_key(facts.device, facts.software, problem, reps=opts.reps, warmup=opts.warmup, mode=opts.mode,
                                   backends=baselines.BACKENDS, dtypes=baselines.BASELINE_DTYPES)
    hit = None if opts.fresh_baselines else baseline_cache.get(key)
    with stage("baselines", "cached in the store; --fresh-baselines re-times them" if hit else "timed"):
        if hit:
            out = BaselinesTimed(hit[0], hit[1], True)
        else:
            rows = [b.to_dict() for b in machine.run_baselines(problem, opts.reps, opts.warmup, progress=_say,
                                                                 mode=opts.mode)]
            out = BaselinesTimed(rows, baseline_cache.put(key, rows), False)
    return out


def profile_ncu(run, variant: Variant, problem: Problem, opts: ProfileOptions, rng: str) -> dict:
    """Nsight Compute on the child's launch inside NVTX range `rng`; the manifest's profile section."""
    _say(f"ncu: profiling every kernel of the {opts.mode} inside NVTX range '{rng}'")
    report_path = run.artifact_path("profile.ncu-rep")
    cmd = ncu.ncu_command(target_argv(variant, problem, mode=opts.mode), report_path, rng, section_set=opts.section_set)
    ncu.run_ncu(cmd, run.artifact_path("ncu.log"), env=child_env())
    run.register_artifact("ncu_report", report_path.name)
    run.register_artifact("ncu_log", "ncu.log")
    # as the user would rerun it: the report path as stored, not the staging directory's
    stored_cmd = [report_path.name if a == str(report_path) else a for a in cmd]
    return {"tool": "ncu", "command": stored_cmd, "section_set": opts.section_set or ncu.DEFAULT_IS,
            "report": report_path.name, "nvtx_range": rng}


def record_timeline(run, variant: Variant, problem: Problem, opts: ProfileOptions, rng: str) -> dict:
    """nsys (or torch.profiler where nsys cannot write reports) on `timeline_repeats` launches."""
    _say(f"timeline: {opts.timeline_repeats} launches in range '{rng}'")
    tl = collect_timeline(target_argv(variant, problem, opts.timeline_repeats, opts.mode), run.dir / "timeline",
                          rng, opts.timeline_repeats, env=child_env())
    for name, df in tl.tables().items():
        run.add_table(f"timeline_{name}", df)
    for name, path in tl.artifacts.items():
        run.register_artifact(f"timeline_{name}", str(Path(path).relative_to(run.dir)))
    return {"source": tl.source, "reason": tl.reason, "input_format": tl.input_format,
            "launch_overhead_ns": tl.launch_overhead_ns, "launch_overhead": tl.launch_overhead,
            "repeats": opts.timeline_repeats}


def analyze(run, variant: Variant, problem: Problem, timeline_info: dict | None,
            mode: str = "fwd") -> tuple[list, dict]:
    """The analysis of the run's ncu report and its tables, with the code the lines point at as it
    was when profiled (pages never reopen the report)."""
    report_path = run.artifact_path("profile.ncu-rep")
    analyses, tables = analysis_tables(report_path, problem.to_dict(), timeline_info, mode)
    tables["sources"] = source_lines.sources_frame(source_lines.source_texts(report_path), [variant.source])
    return analyses, tables


def run_record(variant: Variant, source_sha: str, problem: Problem, facts: Facts, built, correctness: dict, timing, peak_mem,
               base: BaselinesTimed, ncu_info: dict | None, timeline_info: dict | None, analyses: list,
               stage: Stages, mode: str = "fwd") -> mf.Manifest:
    """The run's manifest: every stage's result, checked against the schema (lab.store.manifest); the
    derived numbers (FLOPs, TFLOP/s, % of peak, minimum bytes, ratios) from lab.measure.rates in the mode."""
    timing_d, base_rows = rates.run_rates(problem, mode, {**timing.to_dict(), "peak_memory_bytes": peak_mem}, base.rows,
                                          facts.device.get("peaks"))
    return mf.Manifest(
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        lab_version=__version__,
        git=mf.Git.from_dict(facts.git, "git"),
        variant=mf.VariantInfo(id=variant.id, slug=variant.slug, title=variant.title,
                               source=source_label(variant),
                               source_sha256=source_sha,
                               changed=variant.changed, attacks=variant.attacks,
                               predicted_gain=variant.predicted_gain, kind=variant.kind,
                               origin=variant.origin, layout=variant.layout,
                               attacks_classes=list(variant.classes)),
        problem=problem,
        mode=mode,
        device=mf.Device.from_dict(facts.device, "device"),
        software=mf.Software.from_dict(facts.software, "software"),
        build=mf.Build(flags=list(built.flags), cache_key=built.cache_key,
                       ptxas=[mf.PtxasEntry.from_dict(p, "build.ptxas[]") for p in built.ptxas]),
        correctness=mf.Correctness.from_dict(correctness, "correctness"),
        timing=mf.Timing.from_dict(timing_d, "timing"),
        baselines=[mf.Baseline.from_dict(b, "baselines[]") for b in base_rows],
        baselines_timed_utc=base.timed_utc, baselines_cached=base.cached,
        profile=mf.ProfileInfo.from_dict(ncu_info, "profile") if ncu_info else None,
        timeline=mf.TimelineInfo.from_dict(timeline_info, "timeline") if timeline_info else None,
        findings_summary=(mf.FindingsSummary.from_dict(analysis.findings_summary(analyses), "findings_summary")
                          if analyses else None),
        stage_seconds=dict(stage.seconds),
    )

"""What `lab profile` does, in order: setup -> build -> check -> ncu -> timeline -> bench -> baselines
-> analysis -> store -> report, one function per stage. Correctness gates profiling and timing; a run
is stored only when its time was given (the checked timer) and every step that ran finished: the run
directory is staged and renamed into place last (lab.store.runs).

The parent never imports torch where the rung is built (the warm loop): the measuring child
(lab.measure.isolated.MeasuringChild) starts first and imports it while the parent works and ncu
profiles; it checks the rung when no verdict is kept for the same binary, shapes and seed, before ncu,
and times the rung (and the SDPA baselines not in the store's cache) once ncu and the timeline are
done, so that no GPU work of the lab's runs beside the profiled launch, while the parent analyzes
the report. The GPU is named by nvidia-smi (lab.environment.gpu_identity), the build found by its key
(lab.ladder.build.cached_build), both without CUDA.

`--candidate LABEL` (ProfileOptions.candidate) runs the whole pipeline on one of the rung's tuning
candidates instead of its launcher: the label resolved as `lab tune --predict` resolves one
(lab.ladder.tuning), against the rung's source before anything starts and against the tuning build's own
table (the measuring child reads it) once built; the tuning build's record, a check kept under its own
key, the profiler's child and the timer all on the candidate; a run id ending in -cand<index>, and the
manifest's `candidate` saying which.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

from lab import __version__, environment
from lab.console import say as _say
from lab.analysis import findings as analysis
from lab.analysis import lines as source_lines
from lab.analysis.isolated import ChildDied, in_child
from lab.errors import CheckFailed, LabError
from lab.files import write_json_atomic
from lab.ladder import build, registry, tuning
from lab.ladder.registry import Variant, source_label
from lab.ladder.tuning import Chosen
from lab.measure import baselines, bench, rates
from lab.measure.call import require_mode
from lab.measure.gate import GATE_SHAPES
from lab.measure.bench import Timing
from lab.measure.isolated import MeasuringChild, child_env
from lab.measure.problem import Problem, check_supported
from lab.measure.target import range_name
from lab.profilers import ncu
from lab.profilers.timeline import collect_timeline
from lab.report.pages import render_run_page, warm as warm_report
from lab.store import baseline_cache, check_cache, runs
from lab.store import manifest as mf



@dataclass(frozen=True)
class Machine:
    """What `lab profile` asks of the GPU machine, each act a function: the real ones by default; a
    caller without a GPU (tests/test_profile_loop.py) hands its own to `profile`. `cached_tuning_build` and
    `tuning_build` are `cached_build` and `build` for the rung's tuning build (`--candidate`). `start_measuring`
    returns the measuring child (lab.measure.isolated.MeasuringChild: check(), bench(), baselines(),
    close()); `gpu_identity`, `torch_versions` and `cached_build` need no torch and no CUDA; `build`
    compiles (in this process: torch's extension build) where nothing is cached."""
    gpu_identity: Callable = environment.gpu_identity
    require_gpu: Callable = environment.require_gpu                                # where no GPU is named: torch's
    require_compute_capability: Callable = environment.require_compute_capability  # answer, as before
    torch_versions: Callable = environment.torch_versions
    tool_versions: Callable = environment.tool_versions
    git_info: Callable = environment.git_info
    cached_build: Callable = build.cached_build
    cached_tuning_build: Callable = partial(build.cached_build, tuning=True)   # --candidate: the rung's
    tuning_build: Callable = tuning.tuning_build                                # tuning build instead
    build: Callable = build.build   # last: it names the function from here on in this class's body
    start_measuring: Callable = MeasuringChild


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
    candidate: str | None = None    # a tuning candidate's label (or a unique part of it) to run instead of the launcher


def target_argv(variant: Variant, problem: Problem, repeat: int = 1, mode: str = "fwd",
                candidate: Chosen | None = None) -> list[str]:
    """The profiler's child (lab.measure.target); `candidate`: that tuning candidate instead of the launcher."""
    return [sys.executable, "-m", "lab.measure.target", "--variant", registry.ref(variant), "--problem", problem.label(),
            "--mode", mode, "--repeat", str(repeat), *(["--tune-config", str(candidate.index)] if candidate else [])]


def subject(variant: Variant, candidate: Chosen | None) -> str:
    """What the run checks and times, as its lines name it: `v9`, or `v9 candidate 'C1 BN64 ...'`."""
    return variant.id if candidate is None else candidate.of(variant.id)


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
        self.record(name, time.perf_counter() - t0, note)

    def record(self, name: str, seconds: float, note: str = "") -> None:
        """A stage timed where it ran (the measuring child's, beside the parent's analysis): its own
        time, so stages that overlap add up to more than the total, which is the wall time."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        _say(f"  {name}: {seconds:.2f} s{f' ({note})' if note else ''}")

    def summary(self) -> str:
        total = time.perf_counter() - self.started
        return " · ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items()) + f" · total {total:.2f} s"


@dataclass
class Profiled:
    run_dir: Path
    page: Path | None


def analysis_tables(report_path: Path, problem: dict | None, timeline_info: dict | None,
                    mode: str = "fwd", ptxas: list[dict] | None = None) -> tuple[list, dict]:
    """The analysis of one ncu report and the tables a run stores from it (metrics, derived values,
    findings, Nsight's rules, per-line counters); `ptxas`: the build's records (the manifest's
    build.ptxas), whose wgmma serialization notices the verdicts cite. The timeline runs first: the
    launch-bound judgement uses the launch cost it measured, the steady-state gap between consecutive
    kernels (the per-range overhead also spreads the first launch's delay, profiler start-up included,
    over the launches)."""
    tl_info = timeline_info or {}
    overhead = ((tl_info.get("launch_overhead") or {}).get("kernel_gap_ns_median") or tl_info.get("launch_overhead_ns"))
    # the mode sets the FLOPs a kernel is held against (a backward does 2.5x the forward's work)
    analyses = analysis.analyze_report(report_path, problem=problem, launch_overhead_ns=overhead, mode=mode,
                                       ptxas=ptxas)
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
        runs.compress_stored_artifact(staging, "ncu_report")   # a run stored before keeps its report as lab profile now does
        staged = runs.Run(staging)
        analyses, tables = in_child(analysis_tables, staged.artifact("ncu_report"), run.manifest.get("problem"),
                                    run.manifest.get("timeline"), run.manifest.get("mode") or "fwd",
                                    (run.manifest.get("build") or {}).get("ptxas"),
                                    what=f"the analysis of run {run.id}'s ncu report")
        d = staged.record.to_dict()
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
    """Setup -> build -> check -> ncu -> timeline -> bench -> baselines -> analysis -> store -> report,
    each a named stage below; the wall time of each is printed and stored (Stages). The measuring
    child starts first (torch's import takes seconds) and is ended however the run ends."""
    stage = Stages()
    check_supported(variant, problem)
    require_mode(variant, opts.mode)
    read = candidate_before_build(variant, problem, opts)   # bad input refused before the child starts
    child = machine.start_measuring(variant, problem, opts.mode)
    try:
        return _profile(variant, problem, opts, machine, stage, child, read)
    finally:
        child.close()


def _profile(variant: Variant, problem: Problem, opts: ProfileOptions, machine: Machine, stage: Stages,
             child, read) -> Profiled:
    # the tools' versions and the commit are subprocesses (ncu's and nsys's take most of a second): asked
    # for on a thread while the parent finds the GPU and the build
    pool = ThreadPoolExecutor(max_workers=1)
    pool_report = ThreadPoolExecutor(max_workers=1)
    tools = pool.submit(lambda: (machine.tool_versions(), machine.git_info()))
    try:
        with stage("setup"):   # the GPU named without CUDA, ncu found
            identity = setup(variant, opts, machine)
        with stage("build"):
            built = build_rung(variant, identity, machine, tuning=opts.candidate is not None)
        chosen = None
        if opts.candidate is not None:
            with stage("candidate", "the tuning build's own table, read by the measuring child"):
                chosen = candidate_after_build(variant, problem, opts, read, child)
        # the source as built (a pair's two, F's+B's)
        source_sha = variant.source_sha256()
        with stage("check"):
            correctness, key = gate(variant, problem, opts, child, built, identity, machine, chosen)

        rng = range_name(variant.id, problem.label(), opts.mode)
        # what the page reads of the store's other runs, read while ncu runs (a thread: ncu is a subprocess)
        warming = (pool_report.submit(warm_report, runs.store_root(), variant.id, variant.sources)
                   if opts.report else None)
        run_id = runs.new_run_id(variant.id, problem.label(), candidate=chosen.index if chosen else None)
        with runs.create_run(run_id) as run:
            ncu_info = timeline_info = None
            analyses: list = []
            tables: dict = {}
            if opts.ncu:
                with stage("ncu"):
                    ncu_info = profile_ncu(run, variant, problem, opts, rng, chosen)
            if opts.timeline:
                with stage("timeline"):
                    timeline_info = record_timeline(run, variant, problem, opts, rng, chosen)
            # the GPU is the child's now: it times the rung (and the baselines) while this process analyzes
            measuring = pool.submit(measure, child, variant, problem, opts, tools, correctness, key, chosen)
            if ncu_info is not None:
                with stage("analysis", "beside the measuring child's timing"):
                    try:
                        analyses, tables = analyze(run, variant, problem, timeline_info, opts.mode, built.ptxas)
                    except ChildDied as e:
                        raise kept_report(run, e) from None
                with stage("compress", "the ncu report, xz, beside the measuring child's timing"):
                    ncu_info["report"] = run.compress_artifact("ncu_report")   # stored as profile.ncu-rep.xz
            measured = measuring.result()
            stage.record("bench", measured.bench_seconds, "in the measuring child, beside the analysis"
                         if ncu_info is not None else "in the measuring child")
            if opts.baselines:
                stage.record("baselines", measured.base.seconds, "cached in the store; --fresh-baselines re-times them"
                             if measured.base.cached else "timed in the measuring child")
            with stage("store"):
                for name, df in tables.items():
                    run.add_table(name, df)
                final = run.commit(run_record(variant, source_sha, problem, measured.facts, built, measured.correctness,
                                              measured.timing, measured.timing.peak_memory_bytes, measured.base,
                                              ncu_info, timeline_info, analyses, stage, opts.mode, chosen))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        pool_report.shutdown(wait=False, cancel_futures=True)

    page = None
    if opts.report:
        with stage("report"):
            warming.result()
            page = render_run_page(final)
        runs.amend_manifest(final, stage_seconds=dict(stage.seconds))   # the report's own time, once known
    _say(f"stages: {stage.summary()}")
    return Profiled(final, page)


# ----------------------------------------------------------------------------- the stages, in order

def setup(variant: Variant, opts: ProfileOptions, machine: Machine = THIS_MACHINE) -> dict | None:
    """Refuse, before minutes of work: no GPU, a GPU too old for the rung, no ncu. The GPU as nvidia-smi
    names it; where it cannot be told without CUDA (None: no nvidia-smi, no GPU, GPUs of several kinds),
    torch is asked here, as it will be for the build."""
    identity = machine.gpu_identity()
    if identity is not None:
        environment.require_compute_capability_of(variant, identity)
    else:
        machine.require_gpu("profile")
        machine.require_compute_capability(variant)
    if opts.ncu:
        ncu.require_ncu()
    return identity


def build_rung(variant: Variant, identity: dict | None, machine: Machine = THIS_MACHINE, tuning: bool = False):
    """The cached build, found by its key without torch; else compiled here (torch's extension build),
    where a GPU that nvidia-smi could not name also sets the arch. `tuning`: the rung's tuning build (its
    candidates, `lab profile --candidate`) instead of its plain one."""
    _say(f"build {variant.label()}{' (its tuning build: the candidates)' if tuning else ''}")
    cached, compile_ = ((machine.cached_tuning_build, machine.tuning_build) if tuning
                        else (machine.cached_build, machine.build))
    built = cached(variant, identity["compute_capability"]) if identity is not None else None
    if built is None and identity is not None and variant.kind != "python":   # a cuda rung, or a pair (its parts)
        built = compile_(variant, build.arch_of(*(int(x) for x in identity["compute_capability"].split("."))))
    elif built is None:
        built = compile_(variant)
    _say(f"  {'compiled' if built.built_now else 'cached'} in {built.seconds:.1f} s")
    return built


def candidate_before_build(variant: Variant, problem: Problem, opts: ProfileOptions):
    """--candidate's refusals before any build or GPU work (exit 2): lab.ladder.tuning.candidate_before_build
    (the label against the rung's source, as `lab tune --predict` resolves one), and a deterministic
    backward, which a candidate is never asked for (`lab tune` calls it without). Returns the list read
    from the source (None: not read, or no --candidate)."""
    if opts.candidate is None:
        return None
    if problem.deterministic:
        raise LabError(f"--candidate with --deterministic: {variant.id}'s tuning candidates are called as `lab tune` "
                       "calls them, without the backward's deterministic mode",
                       hint="a candidate built deterministic says so in its label; profile it without --deterministic")
    return tuning.candidate_before_build(variant, opts.candidate, problem, opts.mode)


def candidate_after_build(variant: Variant, problem: Problem, opts: ProfileOptions, read, child) -> Chosen:
    """The candidate --candidate names in the tuning build's own table (the measuring child loads the build
    and lists it), which must list what the source was read to declare; the child checks and times that
    candidate from then on."""
    chosen = tuning.candidate_after_build(variant, opts.candidate, problem, opts.mode, read, child.candidates())
    child.choose(chosen.index)
    _say(f"candidate {chosen.index} of {variant.id}'s tuning build: {chosen.label!r} (not {variant.id}'s default launcher)")
    return chosen


@dataclass
class Facts:
    """The machine the run was measured on, as the manifest records it."""
    device: dict
    software: dict
    git: dict


def gate(variant: Variant, problem: Problem, opts: ProfileOptions, child, built, identity: dict | None,
         machine: Machine = THIS_MACHINE, candidate: Chosen | None = None) -> tuple[dict, dict | None]:
    """Correctness gates profiling and timing: the verdict kept for the same binary, shapes, seed, GPU and
    software (lab.store.check_cache; keyed by the GPU as nvidia-smi names it and torch's versions, read
    without torch), else the measuring child's check on the problem and the ragged shapes (CheckFailed
    when wrong). Returns the verdict and the key it is kept under (None where the GPU has no name yet).
    `candidate`: that tuning candidate's verdict, kept under a key of its own."""
    key = None
    if identity is not None:
        key = check_cache.cache_key(variant, built, problem, opts.check_shapes, opts.mode, identity,
                                    machine.torch_versions(), candidate)
    kept = None if (opts.fresh_check or key is None) else check_cache.get(key)
    if kept is not None:
        _say(f"check {subject(variant, candidate)}: passed, reused from {kept['reused']}")
        return kept, key
    return fresh_check(variant, problem, opts, child, key, candidate), key


def fresh_check(variant: Variant, problem: Problem, opts: ProfileOptions, child, key: dict | None,
                candidate: Chosen | None = None) -> dict:
    what = subject(variant, candidate)
    _say(f"check {what}{'' if opts.mode == 'fwd' else ' ' + opts.mode} against float64 on {problem.label()} "
         f"and {opts.check_shapes} ragged shapes")
    correctness = child.check(opts.check_shapes)
    if key is not None:
        check_cache.put(key, correctness)   # a passed verdict only
    if not correctness["passed"]:
        if correctness.get("failure"):   # the shape and the tensor (a backward's worst element), or the launch's error
            raise CheckFailed(f"{what} is wrong: {correctness['failure']} ({correctness['rule']})")
        raise CheckFailed(f"{what} is wrong on {correctness['failed_shape']}: rel_err "
                          f"{correctness['rel_err']}, tolerance {correctness['tolerance']} ({correctness['rule']})")
    return correctness


def confirm_gate(variant: Variant, problem: Problem, opts: ProfileOptions, child, correctness: dict,
                 key: dict | None, facts: Facts, candidate: Chosen | None = None) -> dict:
    """A kept verdict stands only where the GPU the child measured on is the one it was kept for (nvidia-smi
    named it before CUDA started); else the rung is checked now, before anything is stored."""
    if not correctness.get("reused") or key is None:
        return correctness
    measured_on = {k: facts.device.get(k) for k in ("name", "compute_capability", "driver")}
    if measured_on == key["device"]:
        return correctness
    _say(f"check {subject(variant, candidate)}: the kept verdict was for {key['device']}, the rung ran on "
         f"{measured_on}: checking again")
    return fresh_check(variant, problem, opts, child, None, candidate)


@dataclass
class BaselinesTimed:
    rows: list
    timed_utc: str | None = None
    cached: bool | None = None
    seconds: float = 0.0


@dataclass
class Measured:
    """What the measuring child gave once the GPU was free: the rung's time through the checked timer,
    the machine it ran on, and the SDPA baselines (from the store's cache where they were timed alike)."""
    timing: Timing
    facts: Facts
    correctness: dict
    base: BaselinesTimed
    bench_seconds: float


def measure(child, variant: Variant, problem: Problem, opts: ProfileOptions, tools, correctness: dict,
            key: dict | None, candidate: Chosen | None = None) -> Measured:
    """The rung timed by the child (a time the timer refuses raises TimingRefused, a CheckFailed: exit 1,
    nothing stored), the kept verdict confirmed for the GPU it ran on, then the baselines not in the
    store's cache; runs on a thread beside the analysis."""
    _say(f"bench {opts.mode}: {opts.reps} reps after {opts.warmup} warm-up, L2 flushed"
         + (", inputs rotating" if opts.mode != "bwd" else "") + ", in the measuring child")
    got = child.bench(opts.reps, opts.warmup)
    tool_versions, git = tools.result()
    facts = Facts(got["device"], {**got["software"], **tool_versions}, git)
    correctness = confirm_gate(variant, problem, opts, child, correctness, key, facts, candidate)
    return Measured(Timing(**got["timing"]), facts, correctness, baselines_beside(child, problem, facts, opts),
                    float(got.get("seconds") or 0.0))


def baselines_beside(child, problem: Problem, facts: Facts, opts: ProfileOptions) -> BaselinesTimed:
    """The SDPA baselines on this problem, from the store's cache where this device and software timed
    them with this protocol, else timed by the measuring child; their ratios to ours are derived with the
    run's other numbers (lab.measure.rates.run_rates)."""
    if not opts.baselines:
        return BaselinesTimed([])
    key = baseline_cache.cache_key(facts.device, facts.software, problem, reps=opts.reps, warmup=opts.warmup, mode=opts.mode,
                                   backends=baselines.BACKENDS, dtypes=baselines.baseline_dtypes(problem.dtype))
    hit = None if opts.fresh_baselines else baseline_cache.get(key)
    if hit:
        return BaselinesTimed(hit[0], hit[1], True)
    t0 = time.perf_counter()
    rows = child.baselines(opts.reps, opts.warmup)
    return BaselinesTimed(rows, baseline_cache.put(key, rows), False, time.perf_counter() - t0)


def profile_ncu(run, variant: Variant, problem: Problem, opts: ProfileOptions, rng: str,
                candidate: Chosen | None = None) -> dict:
    """Nsight Compute on the child's launch inside NVTX range `rng` (of `candidate` where one is named);
    the manifest's profile section."""
    _say(f"ncu: profiling every kernel of the {opts.mode} inside NVTX range '{rng}'"
         + (f" ({subject(variant, candidate)})" if candidate else ""))
    report_path = run.artifact_path("profile.ncu-rep")
    cmd = ncu.ncu_command(target_argv(variant, problem, mode=opts.mode, candidate=candidate), report_path, rng,
                          section_set=opts.section_set)
    ncu.run_ncu(cmd, run.artifact_path("ncu.log"), env=child_env())
    run.register_artifact("ncu_report", report_path.name)
    run.register_artifact("ncu_log", "ncu.log")
    # as the user would rerun it: the report path as stored, not the staging directory's
    stored_cmd = [report_path.name if a == str(report_path) else a for a in cmd]
    return {"tool": "ncu", "command": stored_cmd, "section_set": opts.section_set or ncu.DEFAULT_IS,
            "report": report_path.name, "nvtx_range": rng}


def record_timeline(run, variant: Variant, problem: Problem, opts: ProfileOptions, rng: str,
                    candidate: Chosen | None = None) -> dict:
    """nsys (or torch.profiler where nsys cannot write reports) on `timeline_repeats` launches."""
    _say(f"timeline: {opts.timeline_repeats} launches in range '{rng}'")
    tl = collect_timeline(target_argv(variant, problem, opts.timeline_repeats, opts.mode, candidate), run.dir / "timeline",
                          rng, opts.timeline_repeats, env=child_env())
    for name, df in tl.tables().items():
        run.add_table(f"timeline_{name}", df)
    for name, path in tl.artifacts.items():
        run.register_artifact(f"timeline_{name}", str(Path(path).relative_to(run.dir)))
    return {"source": tl.source, "reason": tl.reason, "input_format": tl.input_format,
            "launch_overhead_ns": tl.launch_overhead_ns, "launch_overhead": tl.launch_overhead,
            "repeats": opts.timeline_repeats}


def analyze(run, variant: Variant, problem: Problem, timeline_info: dict | None,
            mode: str = "fwd", ptxas: list[dict] | None = None) -> tuple[list, dict]:
    """The analysis of the run's ncu report and its tables, with the code the lines point at as it
    was when profiled (pages never reopen the report); `ptxas`: the build's records."""
    report_path = run.artifact_path("profile.ncu-rep")
    # in a child process: an ncu_report that crashes reading the report ends it, not the run (lab.analysis.isolated)
    return in_child(_run_tables, report_path, problem.to_dict(), timeline_info, mode, ptxas, list(variant.sources),
                    what=f"the analysis of {variant.id}'s ncu report")


def kept_report(run, died: ChildDied) -> LabError:
    """The error of a run whose analysis died: no run is stored, but ncu's report (minutes of replay) is
    kept beside the store's runs, <run id>.ncu-rep, for `lab analyze` once ncu_report reads it."""
    kept = run.final.parent / f"{run.final.name}.ncu-rep"
    shutil.move(str(run.artifact_path("profile.ncu-rep")), kept)
    return LabError(f"{died}; no run was stored, ncu's report is kept at {kept}",
                    hint=f"{died.hint}; then `lab analyze {kept}` reads it (or profile again)")


def _run_tables(report_path: Path, problem: dict, timeline_info: dict | None, mode: str, ptxas: list[dict] | None,
                sources: list) -> tuple[list, dict]:
    """analysis_tables and the code the lines point at (analyze's child's work: one report read)."""
    analyses, tables = analysis_tables(report_path, problem, timeline_info, mode, ptxas)
    tables["sources"] = source_lines.sources_frame(source_lines.source_texts(report_path), sources)
    return analyses, tables


def run_record(variant: Variant, source_sha: str, problem: Problem, facts: Facts, built, correctness: dict, timing, peak_mem,
               base: BaselinesTimed, ncu_info: dict | None, timeline_info: dict | None, analyses: list,
               stage: Stages, mode: str = "fwd", candidate: Chosen | None = None) -> mf.Manifest:
    """The run's manifest: every stage's result, checked against the schema (lab.store.manifest); the
    derived numbers (FLOPs, TFLOP/s, % of peak, minimum bytes, ratios) from lab.measure.rates in the mode.
    `candidate`: the tuning candidate the run ran (its build is the tuning build)."""
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
        candidate=(mf.CandidateInfo(label=candidate.label, index=candidate.index, causal=candidate.causal)
                   if candidate else None),
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

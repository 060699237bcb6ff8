"""What `lab profile` does, in order: build -> check -> bench -> ncu -> timeline -> analyze -> store
-> report. Correctness gates timing; timing gates profiling. Nothing is stored unless every step
that ran finished: the run directory is staged and renamed into place last (lab.store.runs).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from lab import __version__
from lab.errors import CheckFailed
from lab.measure.problem import Problem, check_supported
from lab.ladder import registry
from lab.ladder.registry import Variant, source_label
from lab.measure.isolated import NotBuilt, child_env, start_check
from lab.store import manifest as mf


@dataclass
class ProfileOptions:
    reps: int = 30
    warmup: int = 5
    baselines: bool = True
    ncu: bool = True
    section_set: str | None = None   # None: the lab's default (<= 20 replay passes); "full" on request
    timeline: bool = False
    timeline_repeats: int = 20
    report: bool = True
    check_shapes: int = 4
    fresh_baselines: bool = False   # re-time the SDPA baselines instead of reading the store's cache


def _say(msg: str) -> None:
    print(f"[lab] {msg}", file=sys.stderr, flush=True)


def target_argv(variant: Variant, problem: Problem, repeat: int = 1) -> list[str]:
    argv = [sys.executable, "-m", "lab.measure.target", "--variant", registry.ref(variant),
            "--shape", f"{problem.batch},{problem.heads},{problem.seqlen_q},{problem.head_dim}",
            "--seqlen-k", str(problem.seqlen_k), "--dtype", problem.dtype, "--repeat", str(repeat)]
    if problem.causal:
        argv.append("--causal")
    return argv


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


def analysis_tables(report_path: Path, problem: dict | None, timeline_info: dict | None) -> tuple[list, dict]:
    """The analysis of one ncu report and the tables a run stores from it (metrics, derived values,
    findings, Nsight's rules, per-line counters). The timeline runs first: the launch-bound judgement
    uses the launch cost it measured, the steady-state gap between consecutive kernels (the per-range
    overhead also spreads the first launch's delay, profiler start-up included, over the launches)."""
    from lab.analysis import findings as analysis
    from lab.analysis import lines as source_lines

    tl_info = timeline_info or {}
    overhead = ((tl_info.get("launch_overhead") or {}).get("kernel_gap_ns_median") or tl_info.get("launch_overhead_ns"))
    analyses = analysis.analyze_report(report_path, problem=problem, launch_overhead_ns=overhead)
    tables = {"metrics": analysis.metrics_frame(report_path),
              "derived": analysis.derived_frame(analyses),
              "findings": analysis.findings_frame(analyses),
              "ncu_rules": analysis.rules_frame(report_path),
              "lines": source_lines.lines_frame(source_lines.report_lines(report_path))}
    return analyses, tables


def reanalyze(run) -> tuple[Path, list]:
    """Run this lab's analysis again on a stored run's own ncu report (no GPU): its metrics, derived,
    findings, rules and lines tables and its findings summary are replaced; everything measured (timing,
    baselines, correctness, the recorded source) stays. The run is rebuilt in a staging copy and swapped
    into place, so a reader never sees half of it."""
    import shutil
    import tempfile

    from lab.environment import git_info
    from lab.errors import LabError
    from lab.store import manifest as mf
    from lab.store.runs import MANIFEST, _write_json_atomic

    report = run.artifact("ncu_report")
    if report is None or not report.is_file():
        raise LabError(f"run {run.id} has no ncu report to analyze again",
                       hint="it was stored with --no-ncu; profile the rung again")
    git = git_info()   # before the staging copy exists: it would count as a change to the tree
    staging = Path(tempfile.mkdtemp(prefix=f".{run.id}.", suffix=".partial", dir=run.path.parent))
    try:
        shutil.rmtree(staging)
        shutil.copytree(run.path, staging)
        analyses, tables = analysis_tables(staging / report.name, run.manifest.get("problem"), run.manifest.get("timeline"))
        d = run.record.to_dict()
        for name, df in tables.items():
            df.to_parquet(staging / f"{name}.parquet", index=False)
            d.setdefault("tables", {})[name] = f"{name}.parquet"
        d["findings_summary"] = ({"bottleneck": analyses[0].bottleneck, "count": sum(len(a.findings) for a in analyses)}
                                 if analyses else None)
        # provenance: the judgement is newer than the measurements, and by which lab
        d["reanalyzed"] = {"utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "lab_version": __version__,
                           "git": git}
        _write_json_atomic(staging / MANIFEST, mf.Manifest.from_dict(d).to_dict())
        old = run.path.with_name(f".{run.id}.old")
        os.replace(run.path, old)
        os.replace(staging, run.path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return run.path, analyses


def profile(variant: Variant, problem: Problem, opts: ProfileOptions) -> Profiled:
    """Setup -> build -> check -> bench -> baselines -> ncu -> timeline -> analysis -> store -> report."""
    from lab.environment import device_info, git_info, require_compute_capability, require_gpu, software_info

    stage = Stages()
    check_supported(variant, problem)
    # The correctness child starts first, on the cached build only: its interpreter and CUDA start-up
    # overlap the parent's (torch's import alone takes seconds). Where the rung is not built yet it
    # says so at once and is started again after the build. (A python rung has nothing to compile.)
    early = start_check(variant, problem, opts.check_shapes, compile=getattr(variant, "kind", "cuda") != "cuda")
    try:
        with stage("setup"):   # torch's import and CUDA's start-up, ncu found
            require_gpu("profile")  # before importing the build machinery: a clear refusal, fast
            require_compute_capability(variant)
            from lab.ladder import build
            from lab.store import runs as store
            from lab.measure.bench import bench_variant, tflops
            from lab.measure.target import range_name

            if opts.ncu:
                from lab.profilers import ncu
                ncu.require_ncu()  # fail before minutes of work, not after

        with stage("build"):
            _say(f"build {variant.label()}")
            built = build.build(variant)
        _say(f"  {'compiled' if built.built_now else 'cached'} in {built.seconds:.1f} s")
    except BaseException:
        early.cancel()
        raise

    with stage("check"):
        _say(f"check {variant.id} against float64 on {problem.label()} and {opts.check_shapes} ragged shapes")
        # while the child checks: what needs no GPU (facts for the manifest, the analysis's imports)
        dev, software, git = device_info(), software_info(), git_info()
        if opts.ncu:
            from lab.analysis import findings as analysis  # noqa: F401  (pandas, ncu_report: imported once, here)
        try:
            correctness = early.result()
        except NotBuilt:   # compiled just now: check the fresh build
            correctness = start_check(variant, problem, opts.check_shapes).result()
    if not correctness["passed"]:
        raise CheckFailed(f"{variant.id} is wrong on {correctness['failed_shape']}: rel_err "
                          f"{correctness['rel_err']}, tolerance {correctness['tolerance']} ({correctness['rule']})")

    with stage("bench"):
        _say(f"bench {variant.id}: {opts.reps} reps after {opts.warmup} warm-up, L2 flushed")
        timing, peak_mem = bench_variant(variant, problem, built.module, opts.reps, opts.warmup)

    base_dicts, base_timed, base_cached = [], None, None
    if opts.baselines:
        from lab.measure.baselines import BACKENDS, BASELINE_DTYPES, run_baselines
        from lab.store import baseline_cache

        key = baseline_cache.cache_key(dev, software, problem, reps=opts.reps, warmup=opts.warmup,
                                       backends=BACKENDS, dtypes=BASELINE_DTYPES)
        hit = None if opts.fresh_baselines else baseline_cache.get(key)
        with stage("baselines", "cached in the store; --fresh-baselines re-times them" if hit else "timed"):
            if hit:
                base_dicts, base_timed = hit
                base_cached = True
            else:
                base_dicts = [b.to_dict() for b in run_baselines(problem, opts.reps, opts.warmup, progress=_say)]
                base_timed, base_cached = baseline_cache.put(key, base_dicts), False
        for b in base_dicts:   # ratio: the baseline's time / ours (above 1, ours is faster)
            b["ratio"] = b["median_ms"] / timing.median if b.get("median_ms") and timing.median else None

    run_id = store.new_run_id(variant.id, problem.label())
    source_sha = hashlib.sha256(variant.source.read_bytes()).hexdigest()
    rng = range_name(variant.id, problem.label())
    with store.create_run(run_id) as run:
        profile_info = None
        analyses = []
        if opts.ncu:
            with stage("ncu"):
                _say(f"ncu: profiling the launch inside NVTX range '{rng}'")
                report_path = run.artifact_path("profile.ncu-rep")
                cmd = ncu.ncu_command(target_argv(variant, problem), report_path, rng, section_set=opts.section_set)
                ncu.run_ncu(cmd, run.artifact_path("ncu.log"), env=child_env())
            run.register_artifact("ncu_report", report_path.name)
            run.register_artifact("ncu_log", "ncu.log")
            # as the user would rerun it: the report path as stored, not the staging directory's
            stored_cmd = [report_path.name if a == str(report_path) else a for a in cmd]
            profile_info = {"tool": "ncu", "command": stored_cmd, "section_set": opts.section_set or ncu.DEFAULT_IS,
                            "report": report_path.name, "nvtx_range": rng}
        timeline_info = None
        if opts.timeline:
            from lab.profilers.timeline import collect_timeline

            with stage("timeline"):
                _say(f"timeline: {opts.timeline_repeats} launches in range '{rng}'")
                tl = collect_timeline(target_argv(variant, problem, opts.timeline_repeats), run.dir / "timeline",
                                      rng, opts.timeline_repeats, env=child_env())
                for name, df in tl.tables().items():
                    run.add_table(f"timeline_{name}", df)
            for name, path in tl.artifacts.items():
                rel = Path(path).relative_to(run.dir)
                run.register_artifact(f"timeline_{name}", str(rel))
            timeline_info = {"source": tl.source, "reason": tl.reason, "input_format": tl.input_format,
                             "launch_overhead_ns": tl.launch_overhead_ns, "launch_overhead": tl.launch_overhead,
                             "repeats": opts.timeline_repeats}

        if profile_info is not None:
            with stage("analysis"):
                from lab.analysis import lines as source_lines

                analyses, tables = analysis_tables(report_path, problem.to_dict(), timeline_info)
                # the code the lines point at, as it was when profiled (pages never reopen the report)
                tables["sources"] = source_lines.sources_frame(source_lines.source_texts(report_path), [variant.source])

        with stage("store"):
            if profile_info is not None:
                for name, df in tables.items():
                    run.add_table(name, df)
            record = mf.Manifest(
                created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                lab_version=__version__,
                git=mf.Git.from_dict(git, "git"),
                variant=mf.VariantInfo(id=variant.id, slug=variant.slug, title=variant.title,
                                       source=source_label(variant), source_sha256=source_sha,
                                       changed=variant.changed, attacks=variant.attacks,
                                       predicted_gain=variant.predicted_gain, kind=variant.kind,
                                       origin=variant.origin, layout=variant.layout,
                                       attacks_classes=list(variant.classes)),
                problem=problem,
                device=mf.Device.from_dict(dev, "device"),
                software=mf.Software.from_dict(software, "software"),
                build=mf.Build(flags=list(built.flags), cache_key=built.cache_key,
                               ptxas=[mf.PtxasEntry.from_dict(p, "build.ptxas[]") for p in built.ptxas]),
                correctness=mf.Correctness.from_dict(correctness, "correctness"),
                timing=mf.Timing.from_dict({**timing.to_dict(), "tflops": tflops(problem.flops, timing.median),
                                            "peak_memory_bytes": peak_mem}, "timing"),
                baselines=[mf.Baseline.from_dict(b, "baselines[]") for b in base_dicts],
                baselines_timed_utc=base_timed, baselines_cached=base_cached,
                profile=mf.ProfileInfo.from_dict(profile_info, "profile") if profile_info else None,
                timeline=mf.TimelineInfo.from_dict(timeline_info, "timeline") if timeline_info else None,
                findings_summary=(mf.FindingsSummary(bottleneck=analyses[0].bottleneck,
                                                     count=sum(len(a.findings) for a in analyses))
                                  if analyses else None),
                stage_seconds=dict(stage.seconds),
            )
            final = run.commit(record)

    page = None
    if opts.report:
        from lab.report.pages import render_run_page

        with stage("report"):
            page = render_run_page(final)
        store.amend_manifest(final, stage_seconds=dict(stage.seconds))   # the report's own time, once known
    _say(f"stages: {stage.summary()}")
    return Profiled(final, page)

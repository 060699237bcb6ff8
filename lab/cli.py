"""The `lab` command line. Thin: parse, call the module that does the work, print.

Exit codes: 0 success, 1 a failed check or a regression, 2 bad usage or input (a clear message,
no traceback). torch is imported only inside what runs on a GPU, so `lab report`, `lab analyze` and
`lab timeline` run on a machine without torch or GPU.
"""

from __future__ import annotations

import errno
import json
import math
import re
import shlex
import sys
import time
from pathlib import Path

import click
from click.core import ParameterSource
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from lab import __version__
from lab import sweeping as sweeper
from lab.console import rich_console
from lab.analysis import findings as analysis
from lab.analysis.isolated import in_child
from lab.analysis.lines import render_lines, source_texts
from lab.children import end_all, end_own_group
from lab.doctor import essentials_failed, run_checks
from lab.environment import require_gpus
from lab.errors import CheckFailed, LabError
from lab.ladder import build as builder
from lab.ladder import registry, scaffold, workspace
from lab.measure import check as gate
from lab.measure import sweepplan
from lab.measure.baselines import BACKENDS, select_backends
from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP
from lab.measure.call import require_mode
from lab.measure.benchtable import bench_ladder, markdown_ladder, print_ladder
from lab.measure.gate import GATE_SHAPES
from lab.measure.kernelsplit import KERNEL_CALLS, MAX_KERNEL_CALLS
from lab.measure.problem import (DEFAULT_SHAPE, DTYPE_SHORT, check_dtype, check_supported, deterministic_refusal,
                                 normalize_dtype, parse_shape, require_deterministic_modes)
from lab.measure.tune import parse_prediction, tune as run_tune
from lab.pipeline import ProfileOptions, profile as run_profile, reanalyze as run_reanalyze
from lab.profilers.ncu import section_args
from lab.profilers.timeline import read_any, renderables, require_range
from lab.report import compare_kernels
from lab.report.compare import compare_ids, text_lines
from lab.report import ledgerpage
from lab.report.pages import open_in_browser, render, render_compare
from lab.store import runs
from lab.store import sweeps as sweep_store
from lab.store import ledger as ledger_store
from lab.store import tunes as tune_store
from lab.store.evidence import latest_evidence
from lab.store.export import (DEFAULT_OUT, export_run, export_sweep, markdown_sweep, resolve_targets,
                              update_markdown_section)
from lab.store.runs import EXAMPLES_DIR, find_run, open_root

shape_option = click.option("--shape", default=None, metavar="B,H,N,D",
                            help="problem shape, e.g. 8,16,1024,64 (default: 8,16,1024,64)")
causal_option = click.option("--causal/--no-causal", default=False, help="causal mask (top-left aligned)")
dtype_option = click.option("--dtype", default=None, help="float32, float16 or bfloat16 (default: the rung's first)")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON for scripts")
# every command that reads the run store names it the same way; a store that is named must exist
profiles_option = click.option("--profiles", "profiles_dir", type=click.Path(path_type=Path), default=None,
                               envvar="LAB_PROFILES",
                               help="the run store to read (default: profiles/, and its examples/; env LAB_PROFILES)")
MAX_REPS = 100_000          # a bound that still lets a careful user ask for a lot, and refuses a typo
MAX_CHECK_SHAPES = 1_000    # seeded shapes `lab check` may be asked for: each is a float64 reference run (default 24)
reps_option = click.option("--reps", type=click.IntRange(2, MAX_REPS), default=DEFAULT_REPS, show_default=True,
                           help="timed repetitions (>= 30 for a CI95 worth reading)")
warmup_option = click.option("--warmup", type=click.IntRange(0, MAX_REPS), default=DEFAULT_WARMUP, show_default=True)
MAX_UNDER_LOAD_MS = 10_000.0   # ten seconds of calls before every repetition: past it, a typo


def _finite_ms(ctx, param, value):
    """click's FloatRange lets nan through (no comparison with nan is true): refuse it as click refuses a range."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of milliseconds")
    return value


under_load_option = click.option(
    "--under-load", "under_load_ms", type=click.FloatRange(0, MAX_UNDER_LOAD_MS), default=0, metavar="MS",
    callback=_finite_ms,
    help="time each repetition behind MS ms of the same call back to back (untimed; the timed call is checked "
         "as always), so it runs at the clock the GPU holds under sustained load, its power limit as in a training "
         "step, instead of an idle GPU's boost clock; NVML's clock while each stretch's last calls run is "
         "reported. 50 reached the limit on an H200. 0: off")
mode_option = click.option("--mode", type=click.Choice(["fwd", "bwd", "fwd+bwd"]), default="fwd", show_default=True,
                           help="the forward, the backward (dQ, dK, dV from O, dO and the LSE), or both in one call")
deterministic_option = click.option(
    "--deterministic", is_flag=True,
    help="the backward's deterministic mode: dQ, dK, dV bitwise identical run to run (rungs declaring "
         "deterministic = true; needs --mode bwd or fwd+bwd; recorded in the problem: ...-deterministic)")


class LabGroup(click.Group):
    """Turns every expected failure into one line and an exit code instead of a traceback: LabError
    (bad input, 2), CheckFailed (1), OSError anywhere in a command (a read-only --out, a name too
    long for the filesystem, a full disk: 2) and Ctrl-C (130, after ending the children)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except LabError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            if e.hint:
                click.echo(f"hint: {e.hint}", err=True)
            sys.exit(e.exit_code)
        except CheckFailed as e:
            click.secho(f"check failed: {e}", fg="red", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:

            end_all()          # children started here that the interrupted code did not end itself
            end_own_group()    # and those started by code the lab does not control
            click.secho("interrupted", fg="red", err=True)
            sys.exit(130)
        except OSError as e:
            if e.errno == errno.EPIPE:   # `lab report | head`: the reader left, not an error of ours
                sys.exit(0)
            click.secho(f"error: {os_error_line(e)}", fg="red", err=True)
            sys.exit(2)


def os_error_line(e: OSError) -> str:
    """One line for an OSError: what the system said and the path, a very long path shortened."""
    what = e.strerror or str(e)
    code = errno.errorcode.get(e.errno or -1)
    names = [str(n) for n in (e.filename, e.filename2) if n is not None]
    paths = " -> ".join(_short_path(n) for n in names)
    return f"{what}{f' ({code})' if code else ''}" + (f": {paths}" if paths else "")


def _short_path(name: str, limit: int = 120) -> str:
    name = name.replace("\n", " ")
    if len(name) <= limit:
        return name
    return f"{name[:limit // 2]}...{name[-limit // 2:]} ({len(name)} characters)"


@click.group(cls=LabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lab")
@click.option("--workspace", "workspace_dir", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="the workspace (a folder with lab.toml) to use; default: LAB_WORKSPACE, else the current "
                   "folder or the nearest parent with lab.toml; 'none' for the built-in ladder alone")
def main(workspace_dir):
    """Flash Lab: build, check, time, profile and explain a ladder of Flash-Attention kernels."""
    if workspace_dir is not None:
        workspace.use(workspace_dir)


@main.command()
@click.argument("rung_id", required=False, metavar="[ID]")
@json_option
@click.option("--markdown", is_flag=True, help="print the README's ladder table")
def variants(rung_id, as_json, markdown):
    """List the rungs, one line each: the built-in ladder and this workspace's, marked by origin.
    With ID, that rung's lab:rung block and header in full."""

    if markdown:
        click.echo(registry.markdown_table())
        return
    rungs = [registry.get(rung_id)] if rung_id else registry.variants()
    if as_json:
        click.echo(json.dumps([v.to_dict() for v in rungs], indent=2))
    elif rung_id:
        _print_rung(rungs[0])
    else:
        _print_ladder(rungs)


def _print_ladder(rungs) -> None:
    """One line per rung, within the terminal's width (rich cuts the title to what is left)."""
    ws = workspace.active()
    table = Table(box=None, title=f"workspace {ws.name}: {ws.root}" if ws else "the built-in ladder",
                  title_justify="left", pad_edge=False, header_style="bold")
    # LSE: the forward writes the row log-sum-exp (writes_lse, or a backward's), so it can feed a
    # backward as the F of a pair F+B (lab.ladder.pairing)
    # det: the backward has a deterministic mode (deterministic = true: `--deterministic`)
    for col in ("id", "origin", "kind", "dtypes", "D", "bwd", "LSE", "GQA", "det"):
        table.add_column(col, no_wrap=True)
    table.add_column("title")   # wrapable, so rich narrows it first; each cell stays one cut line
    for v in rungs:
        table.add_row(v.id, v.origin + ("*" if v.shadows else ""), v.kind,
                      ",".join(DTYPE_SHORT.get(d, d) for d in v.dtypes), ",".join(map(str, v.head_dims)),
                      "yes" if v.backward else "no", "yes" if v.writes_lse else "no", "yes" if v.gqa else "no",
                      "yes" if v.deterministic else "no", Text(v.title, no_wrap=True, overflow="ellipsis"))
    console = rich_console()
    console.print(table)
    if any(v.shadows for v in rungs):
        console.print("* shadows the built-in rung of its id (that one is builtin:ID)", highlight=False)
    console.print("`lab variants ID`: one rung's block and header in full; --json for every field",
                  highlight=False, markup=False)


def _print_rung(v) -> None:
    """The rung's facts as its file declares them (the lab:rung block) and its header's prose, verbatim;
    a pair's: what it runs (the dtypes, head dims and GQA both parts take), then each part's."""
    if v.parts:
        click.echo(f"{v.id}: {v.title}")
        click.echo(f"a pair: {v.parts[0].id}'s forward, then {v.parts[1].id}'s backward on its O and LSE; "
                   f"dtypes {', '.join(v.dtypes)}; D {', '.join(map(str, v.head_dims))}; GQA {'yes' if v.gqa else 'no'}; "
                   f"deterministic backward {'yes' if v.deterministic else 'no'}; "
                   f"min cc {'.'.join(map(str, v.min_cc))}")
        for part in v.parts:
            click.echo("")
            _print_rung(part)
        return
    where = registry.source_label(v)
    click.echo(f"{v.id}: {v.title}")
    click.echo(f"{v.origin} rung{' (shadows the built-in: builtin:' + v.id + ')' if v.shadows else ''}, {where}")
    click.echo("")
    for line in registry.block_lines(v.source):
        click.echo(f"  {line}")
    _, prose = registry.read_block(v.source)
    if any(p.strip() for p in prose):
        click.echo("")
        for line in prose:
            click.echo(f"  {line}".rstrip())


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
def init(folder):
    """Make FOLDER a workspace for your own rungs: lab.toml, kernels/, profiles/, reports/."""

    ws = scaffold.init(folder)
    click.echo(f"workspace {ws.name}: {ws.root}")
    click.echo(f"  rungs go in {ws.kernels_dir} (kernels/README.md says how); runs in {ws.profiles_dir}")
    click.echo(f"  next: cd {folder} && lab new <id> --from <rung>   (`lab variants` lists the rungs)")


@main.command()
@click.argument("new_id", metavar="NEW_ID")
@click.option("--from", "from_id", required=True, metavar="RUNG", help="the rung to copy forward (built-in or this workspace's)")
@click.option("--slug", default=None, help="the new file's slug: kernels/<NEW_ID>_<slug>.cu (default: the source's)")
def new(new_id, from_id, slug):
    """Copy a rung forward into this workspace as NEW_ID: launcher renamed, header skeleton with the
    evidence from the latest stored profile of the rung it came from."""

    ws = workspace.active()
    if ws is None:
        raise LabError("not inside a workspace: no lab.toml here or in a parent folder",
                       hint="`lab init DIR` makes one (or pass --workspace DIR)")
    source = registry.get(from_id)
    evidence = latest_evidence(source)
    predicted = (ledger_store.estimate_stub(runs.Run(evidence.run_path), evidence.bottleneck, source.id)
                 if evidence else None)
    dest = scaffold.new_rung(ws, new_id, source, slug=slug,
                              bottleneck=evidence.bottleneck if evidence else None,
                              evidence_text=evidence.header_text(source.id) if evidence else None,
                              predicted_text=predicted)
    click.echo(f"{new_id}: {dest}")
    if any(v.id == new_id for v in registry.builtin()):
        click.echo(f"note: the built-in ladder also has {new_id}; in this workspace yours wins "
                   f"(the built-in one is builtin:{new_id})", err=True)
    if evidence:
        click.echo(f"  bottleneck from {source.id}'s run {evidence.run_id}: {evidence.bottleneck}")
    else:
        click.echo(f"  no stored profile of {source.id}: the header's bottleneck is left for you to fill")
    click.echo(f"  next: edit it, then `lab build --ptxas-only --variant {new_id}` and `lab profile --variant {new_id}`")


@main.command()
@click.option("--no-probe", is_flag=True, help="skip the ncu counter-permission probe (it runs a tiny kernel)")
@json_option
def doctor(no_probe, as_json):
    """Check the GPU, torch + CUDA, nvcc, ncu (and counter permission), nsys, compilers; each problem with its fix."""

    checks = run_checks(probe_counters=not no_probe)
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        for c in checks:
            mark = click.style("ok  ", fg="green") if c.ok else click.style("FAIL", fg="red")
            click.echo(f"{mark} {c.name:18} {c.detail}")
            if not c.ok and c.fix:
                click.echo(f"     {'':18} fix: {c.fix}" + (f"  (needed for: {c.required_for})" if c.required_for else ""))
    sys.exit(1 if essentials_failed(checks) else 0)


def given(ctx: click.Context, name: str) -> bool:
    """Whether the user gave option `name` (on the command line or through its variable), not its default:
    a flag with a default (--causal/--no-causal) cannot say so by its value."""
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


def _problem(variant, shape, causal, dtype, seqlen_k=None, deterministic=False):
    problem = parse_shape(shape or DEFAULT_SHAPE, causal, dtype or variant.default_dtype, seqlen_k, deterministic)
    check_supported(variant, problem)
    return problem


def _require_deterministic(chosen, deterministic: bool, modes) -> None:
    """--deterministic: refused (exit 2, one line) before anything is built or run where no backward
    runs, or where a rung does not declare the mode (with or without --shape)."""
    require_deterministic_modes(deterministic, modes)
    if deterministic:
        lacking = next((v for v in chosen if not v.deterministic), None)
        if lacking is not None:
            raise LabError(deterministic_refusal(lacking))


@main.command()
@click.option("--variant", "variant_spec", default="all", show_default=True,
              help="v2, v1,v2 or all; a pair v9+v8 builds both of its rungs")
@click.option("--arch", default=None, metavar="sm_XY",
              help="target arch, e.g. sm_90a or sm_80 (default: this GPU's; sm_90a with --ptxas-only and no GPU)")
@click.option("--ptxas-only", is_flag=True, help="only compile each rung's .cu with ptxas -v: needs nvcc, no GPU")
@click.option("--jobs", "-j", type=int, default=None, help="rungs compiled at once (default: one per rung, up to the CPUs)")
@click.option("--verbose", is_flag=True, help="show the compiler output of the extension build")
@click.option("--tuning", is_flag=True,
              help="also build each rung's tuning extension (its `lab tune` candidates), beside the other builds")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also append the build times as Markdown (device, date, commit) to this file")
@json_option
def build(variant_spec, arch, ptxas_only, jobs, verbose, tuning, markdown_path, as_json):
    """Build rungs as PyTorch extensions, several at once (cached by source hash); registers, shared
    memory, spills per kernel. A python rung has nothing to compile: its callable is imported.
    --tuning: the rungs' tuning builds too, compiled beside the rest, so `lab tune` finds them ready."""

    chosen = registry.rungs_of(registry.select(variant_spec))   # a pair builds its two rungs
    if arch:
        builder.validate_arch(arch)
    if jobs is not None and jobs < 1:
        raise LabError(f"--jobs must be >= 1, got {jobs}")
    if tuning and not any(builder.declares_tuning(v) for v in chosen):
        raise LabError(f"--tuning: {', '.join(v.id for v in chosen)} declare(s) no tuning candidates",
                       hint="a CUDA rung lists them under #ifdef LAB_TUNING (the tuning contract in kernels/common.cuh)")
    if not ptxas_only:
        builder.require_cuda_torch("build")  # refuse before compiling anything
    if verbose and not ptxas_only:
        jobs = 1  # the compiler output of one build at a time reads; interleaved, it does not
        outcomes, wall = builder.build_one_by_one(chosen, arch, verbose=True, tuning=tuning), None
    else:
        started = time.perf_counter()
        outcomes = _build_with_progress(builder, chosen, arch, ptxas_only, jobs, quiet=as_json, tuning=tuning)
        wall = time.perf_counter() - started
    results = builder.outcome_records(outcomes, ptxas_only)
    failed = [o for o in outcomes if o.error]
    if markdown_path:
        command = f"lab build --variant {variant_spec}" + (" --ptxas-only" if ptxas_only else "") + \
            (" --tuning" if tuning else "") + (f" --jobs {jobs}" if jobs else "")
        with open(markdown_path, "a") as fh:
            fh.write(builder.markdown_builds(results, wall, command, jobs or builder.default_jobs(len(chosen))) + "\n")
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        _print_build_table(builder, results, outcomes, wall)
    if failed:
        for o in failed:
            click.secho(f"error: {o.error}", fg="red", err=True)
            if o.hint:
                click.echo(f"hint: {o.hint}", err=True)
        sys.exit(2)


def _build_with_progress(builder, chosen, arch, ptxas_only, jobs, quiet: bool, tuning: bool = False):
    """build_many with a live line per build on stderr (none with --json or when stderr is not a terminal)."""

    console = rich_console(stderr=True)
    if quiet or not console.is_terminal:
        return builder.build_many(chosen, arch, ptxas_only, jobs, tuning=tuning)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
        tasks = {}

        def start(o):
            tasks[o.label] = bar.add_task(f"{o.label}: {'ptxas' if ptxas_only else 'compiling'} {o.variant.source.name}",
                                          total=1)

        def done(o):
            t = tasks.get(o.label)
            if t is not None:
                what = "FAILED" if o.error else ("compiled" if getattr(o.result, "built_now", False)
                                                 or getattr(o.result, "compiled_now", False) else "cached")
                bar.update(t, completed=1, description=f"{o.label}: {what}")
        return builder.build_many(chosen, arch, ptxas_only, jobs, on_start=start, on_done=done, tuning=tuning)


def _print_build_table(builder, results, outcomes, wall):
    """One line per rung (its kernels' ranges), within the terminal's width; a single rung's kernels
    one by one, their names whole."""
    console = rich_console()
    if len(results) == 1:
        _print_build_kernels(builder, results[0], console)
    elif results:
        table = Table(box=None, title="ptxas -v per rung (static shared memory; dynamic is set at launch)",
                      title_justify="left", pad_edge=False, header_style="bold")
        table.add_column("rung", no_wrap=True)
        table.add_column("arch", no_wrap=True)
        for col in ("kernels", "registers", "smem B", "stack B", "spills B"):
            table.add_column(col, justify="right", no_wrap=True)
        table.add_column("build", no_wrap=True)
        for r in results:
            recs = r["ptxas"]
            span = lambda key: _span([rec[key] for rec in recs])   # noqa: E731
            spills = sum(rec["spill_stores_bytes"] + rec["spill_loads_bytes"] for rec in recs)
            table.add_row(_build_label(r), ",".join(dict.fromkeys(rec["arch"] for rec in recs)) or "-", str(len(recs)),
                          span("registers"), span("smem_bytes"), span("stack_bytes"),
                          Text(str(spills), style="yellow" if spills else ""),
                          f"{'compiled' if r['built_now'] else 'cached'} {r['seconds']:.1f} s")
        console.print(table)
        console.print("`lab build --ptxas-only --variant ID`: one rung's kernels; --json for every field",
                      highlight=False, markup=False)
    _print_serialized_wgmma(builder, results, console)
    no_sass = [_build_label(r) for r in results if not r["sass"]]
    if no_sass:
        console.print(f"no SASS kept (cuobjdump not found): {', '.join(no_sass)}", highlight=False)
    for o in outcomes:
        if o.variant.kind == "python" and not o.error:
            console.print(f"{o.variant.id}: python rung, nothing to compile (its callable imports)")
    if wall is not None and len(results) > 1:
        console.print(f"all: {wall:.1f} s wall clock")


def _print_serialized_wgmma(builder, results, console) -> None:
    """The kernels whose wgmma pipeline ptxas serialized (its C75xx notices: a wait after every product, so
    the tensor cores idle between them), a count, then each kernel under its rung and ptxas's reason."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in results:
        for rec in r["ptxas"]:
            if rec.get("wgmma_serialized"):
                groups.setdefault((_build_label(r), rec["wgmma_serialized"]), []).append(
                    builder.short_kernel_name(rec["kernel"]))
    if not groups:
        return
    count = sum(map(len, groups.values()))
    console.print(Text(f"wgmma serialized: {count} kernel{'s' if count != 1 else ''}", style="yellow")
                  + Text(" (ptxas put a wait after every wgmma: the tensor cores idle between products)"), highlight=False)
    for (rung, reason), kernels in groups.items():
        console.print(f"  {rung}, {reason} ({len(kernels)}):", highlight=False, markup=False)
        for k in kernels:
            console.print(f"    {k}", highlight=False, markup=False)


def _build_label(r: dict) -> str:
    return f"{r['variant']} tuning" if r.get("tuning") else r["variant"]


def _span(values) -> str:
    lo, hi = min(values, default=0), max(values, default=0)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _print_build_kernels(builder, r, console) -> None:
    what = "compiled" if r["built_now"] else "cached"
    console.print(f"{_build_label(r)}: {what} in {r['seconds']:.1f} s, in", highlight=False)
    console.print(str(r["build_dir"]), highlight=False, soft_wrap=True)   # whole, to be copied
    table = Table(box=None, title="ptxas -v per kernel (static shared memory; dynamic is set at launch)",
                  title_justify="left", pad_edge=False, header_style="bold")
    for col in ("regs", "smem B", "stack B", "spill st/ld B"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("arch", no_wrap=True)
    table.add_column("kernel", overflow="fold")   # whole names, last: the template arguments tell them apart
    for rec in r["ptxas"]:
        table.add_row(str(rec["registers"]), str(rec["smem_bytes"]), str(rec["stack_bytes"]),
                      f"{rec['spill_stores_bytes']}/{rec['spill_loads_bytes']}", rec["arch"],
                      builder.short_kernel_name(rec["kernel"]))
    console.print(table)


@main.command()
@click.option("--variant", "variant_spec", required=True,
              help="v1, v1,v2 or all; v9+v8: v9's forward (it writes the LSE) feeding v8's backward")
@click.option("--shapes", "shape_count", type=click.IntRange(0, MAX_CHECK_SHAPES), default=None,
              help="seeded shapes to check (default: 24, or 0 extra when --shape is given)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the shape list and the inputs")
@shape_option
@causal_option
@dtype_option
@mode_option
@deterministic_option
@json_option
@click.pass_context
def check(ctx, variant_spec, shape_count, seed, shape, causal, dtype, mode, deterministic, as_json):
    """Check rungs against a float64 reference on seeded shapes; exit 1 if any output is wrong.
    --dtype: every shape in that dtype (default: each rung's first); --causal / --no-causal: every
    shape causal, or none (default: both, seeded). --mode bwd (or fwd+bwd): O, LSE, dQ, dK and dV
    against float64 autograd, each tensor judged; --mode fwd of a rung whose forward writes the LSE
    (writes_lse, or a backward): O and its LSE. A pair F+B (--variant v9+v8): F's forward, then B's
    backward on F's O and LSE. --deterministic (with --mode bwd or fwd+bwd): the backward's
    deterministic mode on every shape, run twice there: dQ, dK and dV must also be bitwise equal."""
    chosen = registry.select(variant_spec)
    dtype = normalize_dtype(dtype) if dtype else None
    # --causal/--no-causal has a default: only a flag the user gave fixes the seeded shapes' mask
    seeded_causal = causal if given(ctx, "causal") else None
    for v in chosen:
        require_mode(v, mode)   # a rung without a backward: exit 2 before anything runs
        if dtype:
            check_dtype(v, dtype)   # a dtype the rung does not declare: exit 2, with or without --shape
    _require_deterministic(chosen, deterministic, mode)
    problems = {v.id: (_problem(v, shape, causal, dtype, deterministic=deterministic) if shape else None)
                for v in chosen}
    if shape_count is None:
        shape_count = 0 if shape else gate.DEFAULT_SHAPE_COUNT

    def progress(s):
        mark = "ok  " if s.passed else "FAIL"
        t = s.worst_tensor
        click.echo(f"[lab] {mark} {s.label}  " + (f"{t.name} max_abs_err {t.max_abs_err:.3g} (tol {t.tolerance:.3g})"
                                                   if t else f"rel_err {s.rel_err:.3g}")
                   + (f"  LSE max_abs_err {s.lse.max_abs_err:.3g} (tol {s.lse.tolerance:.3g})" if s.lse else "")
                   + (f"  {_repeat_text(s)}" if s.repeats else "")
                   + (f"  {s.error}" if s.error else ""), err=True)

    results = [gate.check_variant(v, problem=problems[v.id], extra_shapes=shape_count, seed=seed,
                                  progress=None if as_json else progress, mode=mode, dtype=dtype,
                                  causal=seeded_causal, deterministic=deterministic) for v in chosen]
    if as_json:
        click.echo(json.dumps([{"variant": r.variant_id, **r.to_dict(), "shapes": [s.to_dict() for s in r.shapes]}
                               for r in results], indent=2))
    else:

        table = Table()
        backward = mode != "fwd"
        lse = not backward and any(s.lse for r in results for s in r.shapes)   # a writes_lse rung's forward
        bits = any(s.repeats for r in results for s in r.shapes)   # the deterministic mode's second run
        cols = ("variant", "shape") + (("worst tensor",) if backward else ()) + (
            "rel_err", "max_abs_err", "mean_abs_err", "tolerance") + (("LSE max_abs_err", "LSE tolerance") if lse else ()) + (
            ("dQ/dK/dV bits, 2 runs",) if bits else ()) + ("result",)
        for col in cols:
            table.add_column(col, justify="right" if col.endswith(("err", "tolerance")) else "left")
        for r in results:
            for s in r.shapes:
                cells = [f"{x:.3g}" for x in (s.rel_err, s.max_abs_err, s.mean_abs_err, s.tolerance)]
                tensor = [s.worst_tensor.name if s.worst_tensor else "-"] if backward else []
                if lse:
                    cells += [f"{x:.3g}" for x in (s.lse.max_abs_err, s.lse.tolerance)] if s.lse else ["-", "-"]
                if bits:
                    cells.append("-" if not s.repeats else "equal" if not s.failed_repeat
                                 else f"[red]{s.failed_repeat.name} differs[/]")
                table.add_row(r.variant_id, s.label, *tensor, *cells,
                              "[green]pass[/]" if s.passed else f"[red]FAIL[/] {s.error or ''}".strip())
        console = rich_console()
        console.print(table)
        for r in results:
            console.print(f"{r.variant_id}: {'passed' if r.passed else 'FAILED'}: {r.summary()}; rule: {r.rule}")
    failed = [r for r in results if not r.passed]
    if failed:
        raise CheckFailed("; ".join(f"{r.variant_id} is wrong: {r.failure}" for r in failed))


def _repeat_text(s) -> str:
    r = s.failed_repeat
    return "dQ/dK/dV bitwise equal over 2 runs" if r is None else r.text()


@main.command()
@click.option("--variant", "variant_spec", default="all", show_default=True,
              help="v2, v1,v3 or all; v9+v8: v9's forward (it writes the LSE) feeding v8's backward")
@shape_option
@causal_option
@dtype_option
@reps_option
@warmup_option
@mode_option
@deterministic_option
@click.option("--no-baselines", is_flag=True, help="skip the SDPA backends")
@click.option("--backends", "backends_spec", default="all", show_default=True,
              help="SDPA backends to time beside the rungs: all, or a list such as cudnn,flash")
@click.option("--kernels", is_flag=True,
              help="after the table, the kernel-by-kernel split of each timed rung's and baseline's call: launches "
                   "and device time per call, share, sum (torch.profiler's CUPTI records of the timed calls; no Nsight)")
@click.option("--kernel-calls", type=click.IntRange(1, MAX_KERNEL_CALLS), default=None, metavar="N",
              help=f"calls traced for --kernels, after the timing (default {KERNEL_CALLS})")
@under_load_option
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also append the table as Markdown (device, date, commit) to this file")
@json_option
def bench(variant_spec, shape, causal, dtype, reps, warmup, mode, deterministic, no_baselines, backends_spec,
          kernels, kernel_calls, under_load_ms, markdown_path, as_json):
    """Time rungs beside the SDPA backends (cudnn, flash, efficient, math) in the rung's 16-bit dtype (fp16
    for an fp32 rung) and fp32; --mode bwd or fwd+bwd times the backward (the rung's own launcher; the
    backends' through autograd). --deterministic: the rungs' deterministic backward (its problem label
    ends in -deterministic), beside the backends' default one. --kernels: where each call's device time
    goes, kernel by kernel, for the rungs and every baseline timed."""

    if kernel_calls is not None and not kernels:
        raise LabError("--kernel-calls sets how many calls --kernels traces: add --kernels, or drop --kernel-calls")
    chosen = registry.select(variant_spec)
    _require_deterministic(chosen, deterministic, mode)
    problems = [_problem(v, shape, causal, dtype, deterministic=deterministic) for v in chosen]
    backends = select_backends(backends_spec)
    result = bench_ladder(chosen, problems, reps, warmup, baselines=not no_baselines, backends=backends, mode=mode,
                          kernel_calls=(kernel_calls or KERNEL_CALLS) if kernels else 0, under_load_ms=under_load_ms)
    if markdown_path:

        with open(markdown_path, "a") as fh:
            fh.write(markdown_ladder(result, f"lab bench --variant {variant_spec} --shape {shape or 'default'}"
                                             f"{' --causal' if causal else ''}{f' --dtype {dtype}' if dtype else ''}"
                                             f"{f' --mode {mode}' if mode != 'fwd' else ''}"
                                             f"{' --deterministic' if deterministic else ''}"
                                             f"{' --kernels' if kernels else ''}"
                                             f"{f' --kernel-calls {kernel_calls}' if kernel_calls else ''}"
                                             f"{f' --under-load {under_load_ms:g}' if under_load_ms else ''}") + "\n")
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_ladder(result)
    if result["failures"]:   # a wrong rung, or one the timer gave no time: after the table, exit 1
        raise CheckFailed("; ".join(result["failures"]))


@main.command()
@click.option("--variant", "variant_id", required=True,
              help="the rung to profile, e.g. v2; v9+v8: v9's forward (it writes the LSE) feeding v8's backward")
@shape_option
@causal_option
@dtype_option
@reps_option
@mode_option
@deterministic_option
@click.option("--set", "section_set", default=None,
              help="ncu sections: default (ncu's `detailed`, 20 replay passes), full, a lab set "
                   "(lab-tables, lab-lean, ...) or section names separated by commas")
@click.option("--no-ncu", is_flag=True, help="skip Nsight Compute (store timing only)")
@click.option("--timeline", is_flag=True, help="also record a timeline (nsys, or torch.profiler where nsys cannot)")
@click.option("--no-baselines", is_flag=True)
@click.option("--fresh-baselines", is_flag=True,
              help="re-time the SDPA baselines (default: read them from the store's cache when this device, "
                   "software, shape and protocol timed them before)")
@click.option("--fresh-check", is_flag=True,
              help="check correctness again (default: a passed check of the same binary, problem, shapes, seed and "
                   "mode on this device and software is reused, and the run says so)")
@click.option("--no-report", is_flag=True, help="do not render the HTML page")
@click.option("--candidate", default=None, metavar="LABEL",
              help="one of the rung's tuning candidates instead of its default launcher (LABEL: its label in `lab "
                   "tune`'s table, or a unique part of it): its tuning build checked, profiled, timed and stored as "
                   "a run of its own (the id ends in -cand<index>); --mode bwd: a backward candidate")
def profile(variant_id, shape, causal, dtype, reps, mode, deterministic, section_set, no_ncu, timeline, no_baselines,
            fresh_baselines, fresh_check, no_report, candidate):
    """Build (cached) -> check -> bench -> ncu -> store -> report; prints the run id and its HTML page.
    --mode bwd (or fwd+bwd): every kernel of the rung's backward, profiled inside one NVTX range;
    --deterministic: its deterministic backward (the run's problem, and so its id, ends in -deterministic);
    --candidate LABEL: a tuning candidate of the rung instead of its launcher (`lab compare` it with the
    default's run)."""

    variant = registry.get(variant_id)
    _require_deterministic([variant], deterministic, mode)
    problem = _problem(variant, shape, causal, dtype, deterministic=deterministic)
    require_mode(variant, mode)
    if section_set is not None:

        section_args(section_set)  # a bad name is refused now, not after the build and bench
    opts = ProfileOptions(reps=reps, mode=mode, ncu=not no_ncu, section_set=None if section_set == "default" else section_set,
                          timeline=timeline, baselines=not no_baselines, fresh_baselines=fresh_baselines,
                          fresh_check=fresh_check, report=not no_report, candidate=candidate)
    done = run_profile(variant, problem, opts)
    click.echo(f"run: {done.run_dir.name}")
    click.echo(f"stored: {done.run_dir}")
    if done.page:
        click.echo(f"report: {done.page}")


@main.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="where to write the HTML (default: reports/)")
@click.option("--run", "run_id", default=None, help="render only this run's page (an id, a prefix or a run folder)")
@profiles_option
@click.option("--open", "open_browser", is_flag=True, help="open the page in a web browser where one exists")
def report(out_dir, run_id, profiles_dir, open_browser):
    """Render reports/index.html and one HTML write-up per stored run; prints the index path."""

    done = render(out_dir, root=profiles_dir, run_id=run_id)
    for d in done.damaged:   # the others rendered; the damaged ones are listed on the index too
        click.secho(f"warning: damaged {d.kind} left out: {d.id}: {d.reason}", fg="yellow", err=True)
    if done.empty_message():
        click.echo(done.empty_message(), err=True)
    page = done.pages[next(iter(done.pages))] if run_id else done.index
    click.echo(str(page))
    if open_browser and not open_in_browser(page):
        click.echo("no web browser found here; open the path above", err=True)


@main.command()
@click.argument("runs", nargs=-1, required=True)
@profiles_option
def reanalyze(runs, profiles_dir):
    """Run this lab's analysis again on stored runs' own ncu reports (no GPU): new findings, lines and
    derived values (TFLOP/s, % of peak, minimum bytes, ratios by the run's mode); the times and the
    recorded source stay as measured. A run is rewritten in place, but a shipped example (under a
    store's examples/) is written into this store instead."""

    root = open_root(profiles_dir)
    targets = [find_run(ref, root) for ref in runs]   # every id resolved before anything is rewritten
    for run in targets:
        before = (run.manifest.get("findings_summary") or {}).get("bottleneck")
        # a shipped example (a store's examples/) stays as recorded: the new judgement goes to this store
        into = root if run.path.parent.name == EXAMPLES_DIR else None
        path, analyses = run_reanalyze(run, into)
        after = (analysis.findings_summary(analyses) or {}).get("bottleneck")
        click.echo(f"{run.id}: bottleneck {before} -> {after}" if before != after else f"{run.id}: bottleneck {after}")
        if into is not None:
            click.echo(f"  written to {path} (the shipped {run.path} is left as recorded)")

@main.command()
@profiles_option
@json_option
def ledger(profiles_dir, as_json):
    """Each step of the ladder (built-in, then the workspace's): the bottleneck the lab named on the
    earlier rung, what the next rung attacks and predicts, the gain measured on common work (same
    device, problem, mode, dtype), and the calibration of the lab's advice and estimates."""

    built = ledger_store.build(profiles_dir)
    if as_json:
        click.echo(json.dumps(built.to_dict(), indent=2, default=str))
        return
    for line in ledgerpage.text_lines(built):
        click.echo(line)


@main.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--threshold", "threshold_pct", type=float, default=5.0, show_default=True,
              help="percent of TFLOP/s that B may lose before a change beyond noise counts as a regression")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="where to write compare-A-B.html (default: reports/)")
@profiles_option
@json_option
@click.pass_context
def compare(ctx, run_a, run_b, threshold_pct, out_dir, profiles_dir, as_json):
    """Compare two stored runs side by side (each a run id, a prefix, a run folder, or a rung id for its
    latest run: `lab compare v5 v6`); exit 1 when B regresses beyond noise and the threshold. Either side
    may be a bare Nsight Compute report (.ncu-rep, .xz or .gz), e.g. cuDNN's kernel at the same shape:
    then the two heaviest kernels' metrics and findings are compared, not their speed (exit 0, no page)."""

    if compare_kernels.is_report_file(run_a) or compare_kernels.is_report_file(run_b):
        unused = [flag for flag, name in (("--threshold", "threshold_pct"), ("--out", "out_dir")) if given(ctx, name)]
        if unused:   # they judge and draw two runs' speeds: said, not silently dropped
            click.echo(f"note: {' and '.join(unused)} not used: a bare report is compared by its metrics, not its speed "
                       "(no verdict, no page)", err=True)
        root = open_root(profiles_dir)
        kc = compare_kernels.compare_kernels(compare_kernels.load_side(run_a, root), compare_kernels.load_side(run_b, root))
        if as_json:
            click.echo(json.dumps(kc.to_json(), indent=2))
        else:
            for line in compare_kernels.text_lines(kc):
                click.echo(line)
        return
    result = compare_ids(run_a, run_b, threshold_pct, root=profiles_dir)
    if not result.comparable:   # runs of different modes: said first, each run's own numbers, no page (exit 2)
        if as_json:
            click.echo(json.dumps(result.to_json(), indent=2))
        else:
            for line in text_lines(result):
                click.echo(line)
        sys.exit(2)
    page = render_compare(result, out_dir)
    if as_json:
        click.echo(json.dumps({**result.to_json(), "html": str(page)}, indent=2))
    else:
        for line in text_lines(result):
            click.echo(line)
        click.echo(f"page: {page}")
    sys.exit(1 if result.regression else 0)


@main.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--range", "range_name", default=None, metavar="NAME",
              help="NVTX range (or torch.profiler record_function) whose launch overhead to report")
@click.option("--launches", type=click.IntRange(min=1), default=None,
              help="launches inside each instance of --range (default: the kernels counted in it)")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="rows per table without --json")
@json_option
def timeline(file, range_name, launches, top, as_json):
    """Read a timeline: nsys SQLite export, .nsys-rep, `nsys stats --format csv`, or torch.profiler trace."""

    if launches is not None and not range_name:
        raise LabError("--launches counts the launches inside each instance of --range: pass --range too")
    tl = read_any(file, range_name=range_name, launches_per_range=launches)
    if range_name:
        require_range(tl, range_name)   # a range the timeline does not hold is an error, not a silent no-op
    if as_json:
        click.echo(json.dumps(tl.to_json(), indent=2))
        return

    console = rich_console()
    for item in renderables(tl, top=top):
        console.print(item)


@main.command()
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.option("--kernel", "kernel_regex", default=None, metavar="REGEX",
              help="only kernels whose name matches this regex (Python re.search)")
@click.option("--shape", default=None, metavar="B,H,N,D",
              help="the attention problem the report profiled: adds DRAM bytes vs the Q,K,V,O minimum and TFLOP/s")
@causal_option
@click.option("--dtype", default=None,
              help="the problem's dtype (with --shape; default: the one the kernel's name declares)")
@click.option("--lines", "n_lines", default=None, type=click.IntRange(min=0), metavar="N",
              help="the N hottest source lines of each kernel, with their code (in --json: at most N lines)")
@json_option
@click.pass_context
def analyze(ctx, report_path, kernel_regex, shape, causal, dtype, n_lines, as_json):
    """Name each kernel's bottleneck in an Nsight Compute report (.ncu-rep, or .xz/.gz of one, or a stored
    run's folder for its report and its build's ptxas records): the evidence, the estimated gain, the source
    lines behind it and the next step. Needs no GPU."""

    loose = [flag for flag, name in (("--causal/--no-causal", "causal"), ("--dtype", "dtype")) if given(ctx, name)]
    if loose and not shape:   # they describe --shape's problem: alone they would change nothing, silently
        raise LabError(f"{' and '.join(loose)} describe the problem of --shape; give --shape B,H,N,D with them")
    ptxas = runs.run_build_ptxas(report_path)   # a run's folder: its build's records, as reanalyze reads them
    report_path = runs.report_or_run(report_path)
    problem = None
    if shape:
        dt = dtype or analysis.report_dtype(report_path, kernel_regex)
        problem = parse_shape(shape, causal, dt or "float32").to_dict()
        if dt is None:   # never a float32 guess: no dtype, no bytes minimum and no % of a dtype's peak
            problem.update(dtype=None, min_bytes=None)
            click.echo("note: the kernel's name declares no dtype; pass --dtype for the Q,K,V,O byte minimum and "
                       "the % of peak", err=True)
    # in a child process: an ncu_report that crashes reading the report ends it, not this one (lab.analysis.isolated)
    analyses = in_child(analysis.analyze_report, report_path, problem=problem, kernel_regex=kernel_regex, ptxas=ptxas,
                        what=f"the analysis of {report_path}")
    if as_json:
        click.echo(json.dumps([a.to_dict(lines=n_lines) for a in analyses], indent=2))
        return
    if problem and not analysis.problem_applies(analyses):
        click.echo("note: --shape ignored: the report holds several different kernels; pick one with --kernel", err=True)
    analysis.render(analyses)
    if n_lines:

        render_lines(analyses, n_lines, source_texts(report_path))


@main.command()
@click.argument("ids", metavar="RUN_OR_SWEEP...", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "parquet", "markdown"]), default="csv", show_default=True,
              help="runs: csv or json; sweeps: csv, parquet or markdown (printed, or written into --update)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where to write <id>/ folders (default: reports/export/, beside the HTML of `lab report`)")
@click.option("--update", "update_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="markdown: replace the sweep's generated section of this file (e.g. benchmarks/RESULTS.md)")
@profiles_option
def export(ids, fmt, out_dir, update_path, profiles_dir):
    """Write stored runs (manifest and tables: metrics, findings, timeline) or sweeps (the tidy
    table) as CSV, JSON lines, Parquet or Markdown, for other tools and for RESULTS.md."""

    targets = resolve_targets(ids, fmt, open_root(profiles_dir))   # every id resolved before anything is written
    for kind, target in targets:
        if kind == "sweep" and fmt == "markdown":
            text = markdown_sweep(target)
            if update_path:
                changed = update_markdown_section(update_path, target, text)
                click.echo(f"{update_path}: {'updated' if changed else 'already up to date'} ({target.id})")
            else:
                click.echo(text)
            continue
        paths = (export_sweep(target, out_dir or DEFAULT_OUT, fmt) if kind == "sweep"
                 else export_run(target, out_dir or DEFAULT_OUT, fmt))
        for path in paths:
            click.echo(path)


class SweepGroup(click.Group):
    """`lab sweep [OPTIONS]` measures; `lab sweep merge PARTIAL...` joins shards."""

    def parse_args(self, ctx, args):
        args = self.shapes_from_brace_expansion(args)
        # `lab sweep --preset x` has no subcommand: let the group's own callback run it
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            raise click.UsageError(f"unknown sweep subcommand {args[0]!r}; use `lab sweep [OPTIONS]` or `lab sweep merge`")
        return super().parse_args(ctx, args)

    @staticmethod
    def shapes_from_brace_expansion(args: list[str]) -> list[str]:
        """bash expands `--shape 8,16,{512,1024},64` into `--shape 8,16,512,64 8,16,1024,64`: the
        words after a --shape value that are shapes too become --shape options of their own."""

        out, prev_is_shape_value = [], False
        for i, a in enumerate(args):
            if prev_is_shape_value and re.fullmatch(r"[0-9_,:{}.]+", a) and "," in a:
                out += ["--shape", a]   # still in the run of words after --shape
                continue
            prev_is_shape_value = i > 0 and args[i - 1] == "--shape"
            out.append(a)
        return out


RESUME_KEEPS = {"resume_id", "gpus_spec", "in_process", "allow_mismatch", "profiles_dir", "as_json", "help"}
"""`lab sweep --resume`'s own options: every other option of `lab sweep` is part of the stored plan."""


@main.group(cls=SweepGroup, invoke_without_command=True)
@click.option("--variant", "variant_spec", default=None, help="rungs to sweep: v5, v3,v5 or all (default: none, the baselines alone); "
                   "v9+v8: v9's forward (it writes the LSE) feeding v8's backward")
@click.option("--shape", "shapes", multiple=True, metavar="B,H,N,D",
              help="repeatable; fields may be lists {a,b}, doubling ranges a..b, heads H:Hkv (GQA), batch _ with --batch")
@click.option("--preset", default=None, help="fa-grid (16k tokens, hidden 2048, N 512..16384, D 64/128, causal and not) or memory")
@click.option("--batch", "batch_spec", default=None, metavar="1,2,4", help="batch-scaling sweep over these batches (shape batch _)")
@click.option("--heads-kv", "heads_kv_spec", default=None, metavar="8[,4]", help="K/V heads (GQA/MQA) for every shape")
@click.option("--causal", "causal", type=click.Choice(["yes", "no", "both"]), default=None, is_flag=False,
              flag_value="yes", help="causal mask: --causal, --causal no, --causal both (default: the preset's, else no)")
@click.option("--dtype", "dtype_spec", default=None, help="float16, bfloat16, float32 or a list (default: the rungs' first)")
@click.option("--mode", "mode_spec", default="fwd", show_default=True, help="fwd, bwd, fwd+bwd or a list")
@click.option("--deterministic", is_flag=True,
              help="the rungs' deterministic backward (deterministic = true; modes bwd, fwd+bwd): rows say so in "
                   "their deterministic column (the baselines' backward is torch's default) and labels")
@click.option("--timing", type=click.Choice(["auto", "events", "graph", "both"]), default="auto", show_default=True,
              help="events: call latency; graph: CUDA-graph replay (device time: each replay queued before its start event, so no launch latency); auto: events, plus graph where the cell's floor (its FLOPs and bytes at the rates this GPU sustains) allows a call under 0.5 ms, decided before timing so every run has the same rows; graph everywhere on a GPU of unknown peaks")
@click.option("--baselines", "baseline_spec", default=None,
              help="sdpa-cudnn,sdpa-flash,sdpa-efficient,sdpa-math,standard (default: all)")
@click.option("--no-baselines", is_flag=True)
@click.option("--reps", default=DEFAULT_REPS, show_default=True, help="timed repetitions per cell (fewer where --cell-budget runs out; min 5)")
@click.option("--warmup", default=DEFAULT_WARMUP, show_default=True)
@click.option("--cell-budget", "cell_budget_s", type=float, default=0.4, show_default=True,
              help="seconds of timed calls a cell may take before its repetitions are cut (never below 5; 3 for calls over 100 ms)")
@click.option("--passes", type=int, default=None, metavar="N",
              help=f"time each cell in N passes over its problem's cells, seconds apart, each with 1/N of --reps and "
                   f"--cell-budget; the row pools them, its CI95 spanning every pass's median (default "
                   f"{sweepplan.DEFAULT_PASSES}: one burst's CI95 misses the drift of short calls over seconds)")
@under_load_option
@click.option("--gpus", "gpus_spec", default=None, metavar="0,1",
              help="one worker process per GPU (pinned by UUID), fed whole problems, largest first, as each finishes one "
                   "(default: one worker on GPU 0, the code path of every multi-GPU sweep)")
@click.option("--in-process", "in_process", is_flag=True,
              help="measure in the lab's own process, not by one pinned worker (the path one-GPU sweeps took before; "
                   "to compare the two: benchmarks/sweep_scaling.py --in-process)")
@click.option("--shard", "shard_spec", default=None, metavar="i/N", help="measure only the i-th of N interleaved slices (merge with `lab sweep merge`)")
@click.option("--resume", "resume_id", default=None, metavar="SWEEP", help="measure the cells a stored sweep is missing")
@click.option("--name", default=None, help="a name for the sweep id (default: the preset, batch or custom)")
@click.option("--yes", is_flag=True, help="allow a sweep of more than the problem limit")
@click.option("--allow-mismatch", is_flag=True, help="resume on a different device")
@profiles_option
@json_option
@click.pass_context
def sweep(ctx, variant_spec, shapes, preset, batch_spec, heads_kv_spec, causal, dtype_spec, mode_spec, deterministic,
          timing, baseline_spec, no_baselines, reps, warmup, cell_budget_s, passes, under_load_ms, gpus_spec, in_process,
          shard_spec, resume_id, name, yes, allow_mismatch, profiles_dir, as_json):
    """Time rungs and baselines over many shapes, modes and timing methods into ONE stored table
    (profiles/<sweep-id>/): each cell in --passes passes over its problem's cells, pooled into a row
    whose CI95 spans every pass; Ctrl-C keeps finished rows, --resume finishes, `lab report` draws it."""
    if ctx.invoked_subcommand:
        return

    given_gpus = sweepplan.parse_list(gpus_spec, "--gpus") if gpus_spec is not None else None
    # how cells are measured: the GPU's measurer, unless the caller's context object hands in another
    measuring = ctx.find_object(sweeper.Measuring) or sweeper.ON_GPU
    # and where: one pinned worker per GPU, one on GPU 0 without --gpus, here with --in-process
    gpus = sweeper.measured_by(given_gpus, in_process, measuring)
    # what --resume measures is the stored plan: an option of the plan the user gave beside it (defaults
    # included: --mode fwd, --causal no) would be ignored, so it is refused instead
    planned = [p.opts[0] for p in ctx.command.params
               if p.name not in RESUME_KEEPS and isinstance(p, click.Option) and given(ctx, p.name)]
    if resume_id and planned:
        raise LabError(f"--resume measures the stored sweep's own plan; drop {', '.join(planned)}")
    if resume_id:
        target = sweep_store.find_sweep(resume_id, profiles_dir)
        if target.manifest.get("status") == "complete" and not target.missing_cells():
            click.echo(f"sweep {target.id} is complete: nothing to resume")
            return
        if allow_mismatch:
            target.update_manifest(mismatch_allowed=True)
    else:
        if shard_spec and given_gpus:
            raise LabError("--gpus shards the sweep itself; give --shard or --gpus, not both")
        plan = sweeper.plan_from_specs(
            variant_spec=variant_spec, shapes=list(shapes), preset=preset, batch_spec=batch_spec,
            heads_kv_spec=heads_kv_spec, causal=causal, dtype_spec=dtype_spec, mode_spec=mode_spec,
            deterministic=deterministic, timing=timing,
            baseline_spec=baseline_spec, no_baselines=no_baselines, reps=reps, warmup=warmup,
            cell_budget_s=cell_budget_s, shard_spec=shard_spec, yes=yes, command=_command_line("sweep"), name=name,
            passes=sweepplan.DEFAULT_PASSES if passes is None else passes, under_load_ms=under_load_ms)
    if measuring.on_gpu:
        require_gpus("sweep", gpus)
    if not resume_id:
        target = sweeper.create(plan, profiles_dir)
    click.echo(f"sweep: {target.id} ({len(target.missing_cells())} cells to measure) -> {target.path}", err=True)
    try:
        status, messages = sweeper.execute(target, gpus, measuring, show_progress=not as_json)
    except KeyboardInterrupt:
        if target.manifest.get("removed"):
            click.secho("interrupted before any cell finished: nothing stored", fg="yellow", err=True)
            sys.exit(130)
        click.secho(f"interrupted: {target.manifest.get('cells_done')} of {target.manifest.get('cells_planned')} cells "
                    f"kept in {target.path}; finish with `lab sweep --resume {target.id}`", fg="yellow", err=True)
        sys.exit(130)
    for m in messages:
        click.secho(m, fg="red", err=True)
    if gpus:
        for text in sweeper.worker_times(target):
            click.echo(text, err=True)
    m = target.manifest
    if as_json:
        click.echo(target.table().to_json(orient="records"))
    else:
        _print_sweep_summary(target)
        spread = sweep_store.pass_spread([r for r in target.rows() if r.get("status") == "ok"],
                                         sweep_store.PRACTICAL_THRESHOLD_PCT)
        if spread["rows_in_passes"]:
            click.echo(f"passes: {spread['passes_apart']} of {spread['rows_in_passes']} timed rows had passes more than "
                       f"{sweep_store.PRACTICAL_THRESHOLD_PCT:g}% apart (the widest "
                       f"{(spread['max_pass_spread'] - 1) * 100:.1f}%); each row's CI95 spans its passes", err=True)
    click.echo(f"sweep {target.id}: {status}, {m['cells_done']} of {m['cells_planned']} cells, {m['rows']} rows; "
               f"`lab report` draws it, `lab export {target.id} --format markdown` tabulates it", err=True)
    if status != "complete":
        click.secho(f"{m['cells_planned'] - m['cells_done']} cells missing: `lab sweep --resume {target.id}` "
                    "measures them", fg="yellow", err=True)
        sys.exit(1)


def _command_line(command: str, argv: list[str] | None = None) -> str:
    """The command as typed, for the record (empty where `lab` was called from Python), less its
    --profiles: the store a record lives in is where it is read from, and the path it was written to
    on the machine that measured it (a GPU machine's scratch folder) means nothing where it is shipped."""

    argv = sys.argv if argv is None else argv
    if Path(argv[0]).name not in ("lab", "cli.py") or command not in argv:
        return ""
    typed, kept = argv[argv.index(command):], []
    skip = False
    for a in typed:
        if skip:
            skip = False
        elif a == "--profiles":
            skip = True
        elif not a.startswith("--profiles="):
            kept.append(a)
    return "lab " + " ".join(shlex.quote(a) for a in kept)


# The summary's timing, the first a sweep has: its title says what the time is.
SUMMARY_TIMINGS = (("events", "events timing: call latency"), ("graph", "graph timing: device time, CUDA-graph replay"))


def _print_sweep_summary(target) -> None:
    """TFLOP/s of the call-latency (events) rows, or of the graph rows in a sweep timed by graph replay only, a line
    per problem and mode, and each rung against the fastest SDPA baseline there (lab.store.sweeps.versus); the page
    and `lab export` have everything else (the other timing, memory, reasons). A sweep under load says so in the
    title."""

    table = target.table()
    timing, what = next(((t, w) for t, w in SUMMARY_TIMINGS if (table["timing"] == t).any()), SUMMARY_TIMINGS[0])
    df = table[table["timing"] == timing]
    impls = list(dict.fromkeys(df["impl"]))
    load_ms = float(target.plan_dict.get("under_load_ms") or 0.0)
    loaded = f", each repetition behind {load_ms:g} ms of its own calls" if load_ms > 0 else ""
    ours, bases = sweep_store.versus_rungs(impls, target.plan_dict.get("rungs"))
    t = Table(title=f"{target.id}: TFLOP/s ({what}{loaded})", title_justify="left")
    for col in ("problem", "mode", *impls, *(f"{r} vs fastest SDPA" for r in ours)):
        t.add_column(col, justify="left" if col in ("problem", "mode") else "right")
    for (label, mode), g in df.groupby(["label", "mode"], sort=False):
        by = {r["impl"]: r for r in g.to_dict("records")}
        cells = [("" if r is None else f"{r['tflops']:.3g}" if r["status"] == "ok" else str(r["status"]))
                 for r in (by.get(i) for i in impls)]
        cells += [sweep_store.versus_text(sweep_store.versus_best(by.get(r), {b: by.get(b) for b in bases}),
                                          named=len(bases) > 1) for r in ours]
        t.add_row(str(label), str(mode), *cells)
    console = rich_console(stderr=True)
    if not console.is_terminal:
        console.width = max(console.width, 60 + 16 * len(impls) + 28 * len(ours))
    console.print(t)


@sweep.command("compare")
@click.argument("sweep_a")
@click.argument("sweep_b")
@click.option("--threshold", "threshold_pct", type=float, default=sweep_store.PRACTICAL_THRESHOLD_PCT, show_default=True,
              metavar="PCT", help="a row changed only when its medians are this many percent apart AND beyond both CI95s")
@profiles_option
@json_option
def sweep_compare(sweep_a, sweep_b, threshold_pct, profiles_dir, as_json):
    """Did anything change between two sweeps? A row differs when beyond CI95 and beyond --threshold
    percent; the rows are counted apart by what they measure (device time: graph replay with its start
    held; call latency: CUDA events, host dispatch included); a problem whose implementations all moved the
    same way is reported as a whole, with its changed rows under it, and the rows that changed on their own
    (or against their problem) after it, a rung's with its verdict against each baseline in A and B, an
    events row with its cell's graph row and the host's share of the call (events minus graph) in A and B;
    rows measured on different GPUs get the GPU-to-GPU spread. Exit 1 where rows differ."""

    result = sweep_store.compare_sweeps(sweep_store.find_sweep(sweep_a, profiles_dir),
                                        sweep_store.find_sweep(sweep_b, profiles_dir), threshold_pct)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        t = result["threshold_pct"]
        if result["under_load_ms_a"] != result["under_load_ms_b"]:
            loads = [f"{side} {'under load (' + format(ms, 'g') + ' ms before each repetition)' if ms else 'on an idle GPU'}"
                     for side, ms in (("A", result["under_load_ms_a"]), ("B", result["under_load_ms_b"]))]
            click.secho(f"warning: {', '.join(loads)}: the two timed the GPU in different states, and a difference "
                        "includes the clock its power limit allows, not only the kernels", fg="yellow", err=True)
        click.echo(f"{result['rows_compared']} rows in both ({result['only_in_a']} only in A, {result['only_in_b']} only "
                   f"in B): {len(result['differing'])} differ (beyond CI95 and {t:g}%), "
                   f"{len(result['beyond_ci95_within_threshold'])} beyond CI95 within {t:g}%, "
                   f"{result['overlapping']} agree within CI95; "
                   f"median B/A time ratio {result['median_ratio_b_over_a'] or float('nan'):.3f}")
        for m in result["by_measure"]:   # the same rule, counted apart by what a row's time is
            click.echo(f"  {m['what']}: {sweep_store.measure_agreement(m, t)}")
        _print_problem_moves(result)
        for side in ("a", "b"):
            ps = result[f"pass_spread_{side}"]
            if ps["rows_in_passes"]:
                click.echo(f"{side.upper()}: {ps['passes_apart']} of {ps['rows_in_passes']} rows timed in passes had "
                           f"passes more than {t:g}% apart (the widest {(ps['max_pass_spread'] - 1) * 100:.1f}%); "
                           "their CI95 spans every pass")
        for g in result["gpu_spread"]:
            click.echo(f"GPU to GPU, A on {g['gpu_a']} vs B on {g['gpu_b']}: {g['rows']} rows, median B/A "
                       f"{g['median_ratio_b_over_a']:.3f}, middle 90% {g['p5_ratio']:.3f}-{g['p95_ratio']:.3f}, "
                       f"extremes {g['min_ratio']:.3f}-{g['max_ratio']:.3f}")
    if result["differing"] or not result["rows_compared"]:
        sys.exit(1)


def _changed_row(d: dict) -> str:
    line = f"{d['impl']} {d['label']} {d['mode']} {d['timing']}: {d['a_ms']:.4g} vs {d['b_ms']:.4g} ms ({d['ratio']:.3f}x)"
    if d["finding"] == "against_problem":
        line += f", {d['vs_problem']:.3f}x its problem's median {d['problem_median_ratio']:.3f}"
    verdicts = [f"vs {v['baseline']} {v['a']:.3f}x -> {v['b']:.3f}x" + (" (changed)" if v["changed"] else " (unchanged)")
                for v in d["baselines"]]
    host = d.get("host")
    if host:   # an events row whose cell has a graph row in both: the device's time apart from the host's share
        line += (f"; graph {host['a_graph_ms']:.4g} vs {host['b_graph_ms']:.4g} ms ({host['graph_ratio']:.3f}x"
                 + ("" if host["graph_held"] else ", start not held") + f"), host's share (events - graph) "
                 f"{host['a_host_ms'] * 1e3:.1f} vs {host['b_host_ms'] * 1e3:.1f} us"
                 + (f": {host['host_of_move']:.0%} of the move" if host["host_of_move"] is not None else ""))
    elif d["timing"] == "events":
        line += "; no graph row of this cell in both sweeps (the host's share cannot be told apart)"
    return line + ("; " + ", ".join(verdicts) if verdicts else "")


def _print_problem_moves(result: dict) -> None:
    """The changed rows: those that moved with their whole problem under it, the rest on their own."""
    t = result["threshold_pct"]
    moved = result["problems_moved_as_a_whole"]
    if moved:
        share = f"{sweep_store.LEAN_SHARE:.0%}"
        click.echo(f"{len(moved)} problem{'s' if len(moved) > 1 else ''} moved as a whole (>= {share} of its rows "
                   f"and implementations beyond {t / 2:g}% the same way, its median beyond {t:g}%: shared by its "
                   "implementations, measured together, so the machine while it ran, not one implementation): "
                   f"{len(result['moved_with_problem'])} changed rows moved with their problem")
        for p in moved:
            lean = p["rows_slower"] if p["direction"] == "slower" else p["rows_faster"]
            click.echo(f"  {p['problem']}: {lean} of {p['rows']} rows {p['direction']} in B, median ratio "
                       f"{p['median_ratio_b_over_a']:.3f}; changed rows: {p['changed_with_problem']} moved with its "
                       f"problem, {p['changed_against_problem']} against it")
            for d in result["moved_with_problem"]:
                if d["label"] == p["problem"] and any(v["changed"] for v in d["baselines"]):
                    click.echo(f"    with it: {_changed_row(d)}")
    own = result["on_their_own"]
    if own:
        against = sum(1 for d in own if d["finding"] == "against_problem")
        click.echo(f"{len(own)} changed rows on their own ({against} against their problem's move, "
                   f"more than {t:g}% from its median):")
        for d in own:
            click.echo(f"  {_changed_row(d)}")


@sweep.command("merge")
@click.argument("partials", nargs=-1)
@click.option("--name", default=None, help="merge every stored shard of the sweep named NAME (`lab sweep --name NAME --shard i/N`)")
@click.option("--allow-mismatch", is_flag=True, help="merge partials measured on different devices or software")
@profiles_option
def sweep_merge(partials, name, allow_mismatch, profiles_dir):
    """Join the shards (--shard i/N) of one plan into one sweep: all N of them, each once, of one plan
    hash (exit 2 otherwise); exit 1 where a shard left cells unmeasured."""

    if bool(partials) == bool(name):
        raise LabError("name the shards to merge (sweep ids or folders) or --name NAME, not both")
    parts = [sweep_store.find_sweep(p, profiles_dir) for p in partials] if partials else sweep_store.shards_named(name, profiles_dir)
    merged = sweep_store.merge_sweeps(parts, profiles_dir, allow_mismatch)
    m = merged.manifest
    click.echo(f"merged: {merged.id} ({m['status']}, {m['cells_done']} of {m['cells_planned']} cells) -> {merged.path}")
    if m["status"] != "complete":
        click.secho(f"{m['cells_planned'] - m['cells_done']} cells missing: `lab sweep --resume {merged.id}`", fg="yellow", err=True)
        sys.exit(1)


@main.command()
@click.option("--variant", "variant_id", required=True, help="one rung, e.g. v5 (a pair's parts are tuned each alone)")
@shape_option
@causal_option
@dtype_option
@click.option("--reps", default=DEFAULT_REPS, show_default=True, help="timed repetitions per candidate, interleaved")
@click.option("--warmup", default=DEFAULT_WARMUP, show_default=True)
@click.option("--check-shapes", default=GATE_SHAPES, show_default=True, help="ragged shapes each candidate is checked on")
@click.option("--predict", "predictions", multiple=True, metavar="'LABEL=LO-HI'",
              help="a candidate's predicted gain over the default (LABEL: its label or a unique part of it; "
                   "LO-HI: default time / its time, e.g. 1.04-1.14), recorded before any timing and judged by "
                   "`lab ledger` (repeatable)")
@mode_option
@under_load_option
@click.option("--timing", type=click.Choice(["events", "graph"]), default="events", show_default=True,
              help="events: call latency (host dispatch included, what an eager caller waits); graph: device time, "
                   "each configuration's call replayed from a CUDA graph behind a held start (a configuration's host "
                   "cost, its workspace's allocation say, left out)")
@click.option("--against", type=click.Choice(BACKENDS), default=None, metavar="BACKEND",
              help=f"also time SDPA's BACKEND ({', '.join(BACKENDS)}) in the same rounds, its output the reference (not "
                   "checked), and print the default's paired ratio against it with its CI95")
@click.option("--profiles", "profiles_dir", type=click.Path(path_type=Path), default=None, envvar="LAB_PROFILES",
              help="the run store the tune is stored in (default: profiles/; env LAB_PROFILES)")
@json_option
def tune(variant_id, shape, causal, dtype, reps, warmup, check_shapes, predictions, mode, under_load_ms, timing,
         against, profiles_dir, as_json):
    """Check and time a rung's candidate configurations (declared in its own file) round-robin; the
    tune is stored (with its predictions, judged by `lab ledger`) where anything was timed."""

    parsed = [parse_prediction(p) for p in predictions]   # bad input refused before anything runs
    variant = registry.get(variant_id)
    problem = _problem(variant, shape, causal, dtype)
    if reps < 2:
        raise LabError("--reps must be at least 2")
    if check_shapes < 0:
        raise LabError(f"--check-shapes must be >= 0, got {check_shapes}")
    if profiles_dir is not None and profiles_dir.exists() and not profiles_dir.is_dir():
        raise LabError(f"--profiles {profiles_dir} is a file, not a run store directory")
    result = run_tune(variant, problem, reps=reps, warmup=warmup, check_shapes=check_shapes, mode=mode,
                      predictions=parsed, under_load_ms=under_load_ms, timing=timing, against=against)
    stored = tune_store.store_tune(result, reps, warmup, check_shapes, origin=variant.origin, root=profiles_dir)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "stored": str(stored.path) if stored else None}, indent=2))
    else:
        _print_tune(result)
        if stored:
            click.echo(f"stored: {stored.id} -> {stored.path}")
    refused = [r for r in result.rows if r.refused and not r.baseline]
    if refused:   # the timer measured them and would not give a time: a failed check, not a slow config
        raise CheckFailed("; ".join(f"{variant.id} {r.label}: {r.error}" for r in refused))
    if not any(r.timing for r in result.rows):
        raise CheckFailed(f"no configuration of {variant.id} passed its check on {problem.label()}; nothing stored")


def _under_load_cell(timing: dict) -> str:
    """A tuned row's clock under load: NVML's SM clock after its repetitions and the share power-capped."""
    c = timing.get("checks") or {}
    if c.get("load_sm_clock_mhz") is None:
        return "n/a (no NVML)"
    return f"{c['load_sm_clock_mhz']:g} ({c['load_power_capped_share']:.0%} capped)"


# Why an events ratio against SDPA is not its kernel's: benchmarks/v9_notes.md, "`lab tune --against` measured".
EVENTS_AGAINST_CAVEAT = ("by events, call latency: each side's host dispatch is in it, and SDPA's (Python, then ATen) "
                         "slows after the host's other work, here the configurations' output checks, more than a "
                         "lean binding's does; `--timing graph` compares the kernels' device time")


def _against_line(label: str, vs: dict | None, timing: str | None = None) -> str:
    """`lab tune --against`: the default against the baseline, paired round by round; by events, the caveat."""
    if not vs or not vs.get("ratio"):
        return f"the default against {label}: not measured (one of the two was not timed)"
    if vs.get("paired_median") is None:
        return f"the default against {label}: {vs['ratio']:.3f}x its speed (ratio of medians; no paired rounds)"
    lo, hi = vs["paired_ci95_low"], vs["paired_ci95_high"]
    where = ("ahead" if lo > 1 else "behind" if hi < 1 else "level (its CI95 spans 1)")
    return (f"the default against {label}: {vs['paired_median']:.3f}x its speed (median of {vs['rounds']} paired "
            f"rounds, CI95 {lo:.3f}-{hi:.3f}): {where}" + (f"\n  {EVENTS_AGAINST_CAVEAT}" if timing == "events" else ""))


def _print_tune(result) -> None:
    best = result.fastest()
    loaded = next(((r.timing.get("checks") or {}).get("under_load_ms") for r in result.rows
                   if r.timing and (r.timing.get("checks") or {}).get("under_load_ms")), None)
    graph = best is not None and best.timing.get("timing") == "graph"
    table = Table(title=f"lab tune {result.variant_id}{'' if result.mode == 'fwd' else ' ' + result.mode} on {result.problem.label()}"
                        f"{' causal' if result.problem.causal else ''} (median of {best.timing['reps'] if best else 0},"
                        " interleaved, L2 flushed" + ("; graph replay: device time" if graph else "")
                        + (f"; under load: each repetition behind {loaded:g} ms of its own calls" if loaded else "") + ")")
    columns = ["#", "configuration", "median ms", "CI95 ms", "TFLOP/s", "vs default"]
    columns += ["SM MHz under load"] if loaded else []
    for col in (*columns, "check"):
        table.add_column(col, justify="left" if col in ("configuration", "check") else "right")
    for r in result.rows:
        t = r.timing
        cells = (["-"] * (len(columns) - 2) if not t else
                 [f"{t['median']:.4f}", f"{t['ci95_low']:.4f}-{t['ci95_high']:.4f}", f"{t['tflops']:.1f}",
                  f"{r.vs_default['ratio']:.3f}x" if r.vs_default and r.vs_default.get("ratio") else "-"]
                 + ([_under_load_cell(t)] if loaded else []))
        mark = (f"[yellow]not applicable[/] ({r.not_applicable})" if r.not_applicable
                else f"[red]no time[/] ({r.refused})" if r.refused
                else ("[cyan]reference[/] (not checked)" if r.passed else f"[yellow]{r.error}[/]") if r.baseline
                else "[green]pass[/]" if r.passed else f"[red]FAIL[/] {r.error or ''}")
        label = f"[bold]{r.label}[/]" if r is best else r.label
        table.add_row("ref" if r.baseline else "" if r.index is None else str(r.index), label, *cells, mark)
    rich_console().print(table)
    if best:
        rich_console().print(f"fastest: {best.label}; a difference inside the CI95 columns is noise")
    if (base := result.against()) is not None:
        timing = base.timing.get("timing") if base.timing else None
        rich_console().print(_against_line(base.label, result.default_against(), timing), highlight=False, markup=False)
    for p in result.to_dict()["predictions"]:
        rich_console().print(ledgerpage.tune_prediction_phrase(p, with_label=True), highlight=False, markup=False)


if __name__ == "__main__":
    main()

"""The `lab` command line. Thin: parse, call the module that does the work, print.

Exit codes: 0 success, 1 a failed check or a regression, 2 bad usage or input (a clear message,
no traceback). Heavy modules (torch, the extension build) are imported inside the commands that
need them, so `lab report`, `lab analyze` and `lab timeline` run on a machine without torch or GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from lab import __version__
from lab.errors import CheckFailed, LabError

shape_option = click.option("--shape", default=None, metavar="B,H,N,D",
                            help="problem shape, e.g. 8,16,1024,64 (default: 8,16,1024,64)")
causal_option = click.option("--causal/--no-causal", default=False, help="causal mask (top-left aligned)")
dtype_option = click.option("--dtype", default=None, help="float32, float16 or bfloat16 (default: the rung's first)")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON for scripts")


class LabGroup(click.Group):
    """Turns LabError and CheckFailed into a message and an exit code instead of a traceback."""

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


@click.group(cls=LabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lab")
def main():
    """Flash Lab: build, check, time, profile and explain a ladder of Flash-Attention kernels."""


@main.command()
@json_option
@click.option("--markdown", is_flag=True, help="print the README's ladder table")
def variants(as_json, markdown):
    """List the kernel rungs: id, title, dtypes, what changed, the bottleneck it attacks."""
    from lab.variants import VARIANTS, markdown_table

    if markdown:
        click.echo(markdown_table())
        return
    if as_json:
        click.echo(json.dumps([{"id": v.id, "slug": v.slug, "title": v.title, "source": str(v.source.name),
                                "dtypes": list(v.dtypes), "head_dims": list(v.head_dims),
                                "min_cc": ".".join(map(str, v.min_cc)), "changed": v.changed,
                                "attacks": v.attacks, "predicted_gain": v.predicted_gain}
                               for v in VARIANTS], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=True)
    for col in ("id", "title", "dtype", "D", "changed", "attacks"):
        table.add_column(col, overflow="fold")
    for v in VARIANTS:
        table.add_row(v.id, v.title, ",".join(v.dtypes), ",".join(map(str, v.head_dims)), v.changed, v.attacks)
    Console().print(table)


@main.command()
@click.option("--no-probe", is_flag=True, help="skip the ncu counter-permission probe (it runs a tiny kernel)")
@json_option
def doctor(no_probe, as_json):
    """Check the GPU, torch + CUDA, nvcc, ncu (and counter permission), nsys, compilers; each problem with its fix."""
    from lab.doctor import run_checks

    checks = run_checks(probe_counters=not no_probe)
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        for c in checks:
            mark = click.style("ok  ", fg="green") if c.ok else click.style("FAIL", fg="red")
            click.echo(f"{mark} {c.name:18} {c.detail}")
            if not c.ok and c.fix:
                click.echo(f"     {'':18} fix: {c.fix}" + (f"  (needed for: {c.required_for})" if c.required_for else ""))
    essential = {"torch", "gpu", "nvcc", "ncu", "ncu counters", "ninja", "c++"}
    sys.exit(1 if any(not c.ok and c.name in essential for c in checks) else 0)


def _problem(variant, shape, causal, dtype, seqlen_k=None):
    from lab.problem import DEFAULT_SHAPE, check_supported, parse_shape

    problem = parse_shape(shape or DEFAULT_SHAPE, causal, dtype or variant.default_dtype, seqlen_k)
    check_supported(variant, problem)
    return problem


@main.command()
@click.option("--variant", "variant_spec", default="all", show_default=True, help="v2, v1,v3 or all")
@shape_option
@causal_option
@dtype_option
@click.option("--reps", default=30, show_default=True, help="timed repetitions (>= 30 for a CI95 worth reading)")
@click.option("--warmup", default=5, show_default=True)
@click.option("--no-baselines", is_flag=True, help="skip the SDPA backends")
@json_option
def bench(variant_spec, shape, causal, dtype, reps, warmup, no_baselines, as_json):
    """Time rungs beside the SDPA backends (cudnn, flash, efficient, math) in fp16 and fp32."""
    from lab import variants as registry
    from lab.benchtable import bench_ladder, print_ladder

    chosen = registry.select(variant_spec)
    problems = [_problem(v, shape, causal, dtype) for v in chosen]
    if reps < 2:
        raise LabError("--reps must be at least 2")
    result = bench_ladder(chosen, problems, reps, warmup, baselines=not no_baselines)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_ladder(result)


@main.command()
@click.option("--variant", "variant_id", required=True, help="the rung to profile, e.g. v2")
@shape_option
@causal_option
@dtype_option
@click.option("--reps", default=30, show_default=True)
@click.option("--set", "section_set", default=None, help="ncu section set: default (<= 20 passes) or full")
@click.option("--no-ncu", is_flag=True, help="skip Nsight Compute (store timing only)")
@click.option("--timeline", is_flag=True, help="also record a timeline (nsys, or torch.profiler where nsys cannot)")
@click.option("--no-baselines", is_flag=True)
@click.option("--no-report", is_flag=True, help="do not render the HTML page")
def profile(variant_id, shape, causal, dtype, reps, section_set, no_ncu, timeline, no_baselines, no_report):
    """Build (cached) -> check -> bench -> ncu -> store -> report; prints the run id and its HTML page."""
    from lab import variants as registry
    from lab.pipeline import ProfileOptions, profile as run_profile

    variant = registry.get(variant_id)
    problem = _problem(variant, shape, causal, dtype)
    if section_set not in (None, "default", "full"):
        raise LabError(f"--set must be default or full, got {section_set!r}")
    opts = ProfileOptions(reps=reps, ncu=not no_ncu, section_set=None if section_set == "default" else section_set,
                          timeline=timeline, baselines=not no_baselines, report=not no_report)
    run_dir = run_profile(variant, problem, opts)
    click.echo(f"run: {run_dir.name}")
    click.echo(f"stored: {run_dir}")
    if opts.report:
        from lab.report import render_run_page

        page = render_run_page(run_dir)
        click.echo(f"report: {page}")


if __name__ == "__main__":
    main()

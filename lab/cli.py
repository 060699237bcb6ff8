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
def variants(as_json):
    """List the kernel rungs: id, title, dtypes, what changed, the bottleneck it attacks."""
    from lab.variants import VARIANTS

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


if __name__ == "__main__":
    main()

"""The lab's progress lines: `[lab] ...` on stderr, flushed at once (a batch job's log shows each
step as it happens; stdout stays for what scripts read: ids, paths, JSON); and the rich console its
tables print to."""

from __future__ import annotations

import os
import sys

from rich.console import Console

PREFIX = "[lab]"
# Into a file or a pipe rich sizes tables to 80 columns and cuts a wide table's cells to "…" (a
# `lab bench` row of 15 columns in a batch job's log became unreadable): there, tables take this width.
WIDE = 200


def line(msg: str) -> str:
    return f"{PREFIX} {msg}"


def say(msg: str) -> None:
    print(line(msg), file=sys.stderr, flush=True)


def rich_console(stderr: bool = False) -> Console:
    """A console for the lab's tables: as wide as the terminal on one; into a file or a pipe (a batch
    job's log, CI) COLUMNS if set, else WIDE, so no cell is cut."""
    stream = sys.stderr if stderr else sys.stdout
    on_terminal = hasattr(stream, "isatty") and stream.isatty()
    width = None if on_terminal or os.environ.get("COLUMNS") else WIDE
    return Console(stderr=stderr, width=width)

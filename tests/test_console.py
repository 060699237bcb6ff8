"""The lab's tables are not cut when its output goes to a file or a pipe (lab.console.rich_console):
rich sizes a console that is not a terminal to 80 columns and truncates a wide table's cells to "…",
which made a `lab bench` table in a batch job's log unreadable (sixth session, on the GPU machine)."""

from __future__ import annotations

import io
import sys

from rich.table import Table

from lab import console


def _wide_table() -> Table:
    table = Table()
    for i in range(15):
        table.add_column(f"column {i}")
    table.add_row(*[f"value-{i:02d}" for i in range(15)])
    return table


def test_a_wide_table_into_a_pipe_keeps_every_cell(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()   # not a terminal, as a pipe or a log file
    monkeypatch.setattr(sys, "stdout", out)
    console.rich_console().print(_wide_table())
    text = out.getvalue()
    assert all(f"value-{i:02d}" in text for i in range(15)), text
    assert "…" not in text


def test_columns_still_sets_the_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    c = console.rich_console()
    assert c.width == 100
    c.print(_wide_table())
    assert max(len(line) for line in out.getvalue().splitlines()) <= 100


def test_the_lab_makes_its_consoles_in_one_place():
    """Every rich Console of the lab comes from lab.console.rich_console."""
    from pathlib import Path

    root = Path(console.__file__).resolve().parent
    direct = [str(p.relative_to(root)) for p in root.rglob("*.py")
              if p.name != "console.py" and "Console(" in p.read_text()]
    assert not direct, direct

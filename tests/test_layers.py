"""The house's graph: the layers contract of pyproject.toml ([tool.importlinter]) holds, and no
import cycle joins any of lab's modules. grimp reads every import statement, those inside
functions included, so a lazy import cannot hide a climb back up the chain."""

from __future__ import annotations

import subprocess
import sys

import pytest

# where import-linter (and grimp, its graph) is not installed this file skips, saying so, instead of
# stopping the whole collection (the GPU machine has neither)
grimp = pytest.importorskip("grimp", reason="grimp is not installed (pip install import-linter)")
pytest.importorskip("importlinter", reason="import-linter is not installed (pip install import-linter)")
from importlinter.application.use_cases import lint_imports  # noqa: E402
from importlinter.configuration import configure  # noqa: E402
from conftest import REPO  # noqa: E402


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.find_modules_directly_imported_by(v):
                found.append(sorted(comp))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return found


def test_cycle_finder_sees_a_planted_cycle():
    g = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        g.add_import(importer=a, imported=b)
    assert cycles(g) == [["p.a", "p.b", "p.c"]]


def test_no_import_cycle_among_labs_modules():
    graph = grimp.build_graph("lab", cache_dir=None)
    found = cycles(graph)
    details = []
    for comp in found:
        for a in comp:
            for b in graph.find_modules_directly_imported_by(a) & set(comp):
                lines = graph.get_import_details(importer=a, imported=b)
                details.append(f"{a} -> {b} (line {', '.join(str(d['line_number']) for d in lines)})")
    assert not found, "import cycles:\n" + "\n".join(details)


def test_layers_contracts_kept(capsys):
    """import-linter's own check of pyproject.toml's contracts (the layers, acyclic siblings)."""
    configure()   # what the lint-imports command does first: its file reader and printer
    kept = lint_imports(config_filename=str(REPO / "pyproject.toml"), cache_dir=None, no_logo=True)
    out = capsys.readouterr().out
    assert "the lab's layers, one way down KEPT" in out, out
    assert kept, out


def test_every_module_imports_without_torch():
    """Top-level imports everywhere, torch still lazy: importing all of lab loads no torch (`lab
    report`, `lab analyze` and the layers above run on a machine without it)."""
    code = ("import importlib, pkgutil, sys, lab\n"
            "for m in pkgutil.walk_packages(lab.__path__, 'lab.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.')))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", f"torch imported at module level: {res.stdout.strip()[:300]}"


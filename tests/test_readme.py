"""The README's ladder table is generated from the registry and must not drift from it."""

import importlib.util
from conftest import REPO  # noqa: E402


def test_readme_ladder_matches_registry():
    spec = importlib.util.spec_from_file_location("sync_readme", REPO / "tools" / "sync_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (REPO / "README.md").read_text()
    assert mod.synced(text) == text, "README ladder table is stale: run python3 tools/sync_readme.py"


def test_readme_names_the_ci_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert "python3 -m pytest -q" in (REPO / "README.md").read_text()
    assert "python3 -m pytest -q" in ci

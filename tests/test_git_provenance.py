"""The commit a stored run records (lab.environment.git_info): LAB_GIT_COMMIT, set by whoever copied the
tree to a GPU machine, wins over a .git found there. Abbreviated, it counted for nothing until
2026-11-27: the GPU machine's copy carried a stale .git (the session's first checkout), and two sessions'
tunes and a sweep recorded that commit, "dirty", for code two commits later (benchmarks/v9_notes.md)."""

from __future__ import annotations

import subprocess

import pytest

from lab import environment


def _head() -> str | None:
    out = subprocess.run(["git", "-C", str(environment.REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def test_a_full_commit_is_recorded_as_given(monkeypatch):
    monkeypatch.setenv("LAB_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    assert environment.git_info() == {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": None}


def test_an_abbreviated_commit_this_checkout_knows_is_recorded_in_full(monkeypatch):
    head = _head()
    if head is None:
        pytest.skip("not a git checkout (an installed copy): nothing to resolve the abbreviation against")
    monkeypatch.setenv("LAB_GIT_COMMIT", head[:9].upper())
    assert environment.git_info() == {"commit": head, "dirty": None}


def test_an_abbreviated_commit_git_does_not_know_is_recorded_as_given_not_the_checkout_s(monkeypatch):
    # the GPU machine's case: its .git is older than the commit that ran
    monkeypatch.setenv("LAB_GIT_COMMIT", "fffffff")
    info = environment.git_info()
    assert info == {"commit": "fffffff", "dirty": None}
    assert info["commit"] != _head()


@pytest.mark.parametrize("value", ["", "main", "12345", "not-a-sha-at-all"])
def test_anything_else_falls_back_to_the_checkout(monkeypatch, value):
    monkeypatch.setenv("LAB_GIT_COMMIT", value)
    monkeypatch.delenv("LAB_GIT_COMMIT") if not value else None
    info = environment.git_info()
    head = _head()
    if head is not None and (environment.REPO_ROOT / ".git").exists():
        assert info["commit"] == head and isinstance(info["dirty"], bool)
    else:
        assert info == {"commit": None, "dirty": None}

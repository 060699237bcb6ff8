"""The suite leaves no trace in the checkout: conftest.py compares the checkout before and after the
session (git's view, ignored files included) and fails the run where a test wrote into it."""

from __future__ import annotations

import pytest


def test_the_checkout_check_sees_a_file_written_where_git_ignores_it():
    """conftest.py fails the session when a test writes into the checkout: its view of the checkout
    changes with an ignored file (reports/ is where a stray page would land) and is whole again after."""
    import os

    from conftest import REPO, checkout_state

    before = checkout_state()
    if before is None:
        pytest.skip("not a git checkout: the suite's no-trace check does not run here")
    probe = REPO / "reports" / f".probe-{os.getpid()}.html"
    probe.parent.mkdir(exist_ok=True)
    try:
        probe.write_text("stray")
        assert checkout_state() != before
    finally:
        probe.unlink()
    assert checkout_state() == before

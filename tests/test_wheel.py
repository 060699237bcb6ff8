"""A wheel of this repository, installed into a fresh virtual environment and run from an empty
folder, works as a user's install does (tools/wheel_check.py says what it runs and checks)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

CANNOT_RUN = 2   # tools/wheel_check.py's exit code where no wheel can be built or installed offline


def test_a_wheel_installs_and_runs_from_an_empty_folder(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "tools" / "wheel_check.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=1500)
    if res.returncode == CANNOT_RUN:
        pytest.skip(res.stderr.strip().splitlines()[-1])
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "nothing written into the installed package" in res.stdout
    assert not list(tmp_path.iterdir()), "the check wrote into the folder it was run from"

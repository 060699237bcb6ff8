"""lab.analysis.isolated: a report read in a child process, so an ncu_report that crashes on it ends the
child, not the lab (`lab profile` died of a segfault in its analysis on the GPU machine, 2026-11-27)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from lab.analysis.isolated import in_child
from lab.errors import LabError
from lab.store.manifest import ManifestError

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "tests" / "fixtures" / "ncu" / "planted-basic.ncu-rep.xz"


def test_a_child_that_dies_is_a_lab_error_naming_what_it_did_and_the_fix():
    # os.abort: the child dies of a signal (SIGABRT), as a segfaulting ncu_report's does
    with pytest.raises(LabError) as e:
        in_child(os.abort, what="the analysis of r.ncu-rep")
    assert "the analysis of r.ncu-rep: its child process died" in str(e.value)
    assert "pip install ncu-report" in e.value.hint


def test_the_child_s_result_and_its_exceptions_come_back():
    assert in_child(divmod, 7, 2, what="x") == (3, 1)
    with pytest.raises(ValueError):
        in_child(int, "not a number", what="x")


def test_a_lab_error_crosses_the_process_boundary_with_its_hint():
    for err in (LabError("bad", hint="do this"), ManifestError("timing", "is missing")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.hint == err.hint


def test_lab_analyze_reads_the_report_in_its_child_and_says_the_same():
    pytest.importorskip("ncu_report", reason="NVIDIA's ncu_report is not installed")
    res = subprocess.run([sys.executable, "-m", "lab.cli", "analyze", str(REPORT), "--json"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert '"findings"' in res.stdout

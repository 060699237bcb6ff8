"""The parent side of the child-process correctness gate: a crashing rung takes down only its child.

The child here is a stand-in executable (no GPU on CI): what is tested is how the parent reads a
child that segfaults, one that reports a failed check, and one that passes.
"""

import json
import stat

import pytest

from lab.measure import isolated
from lab.errors import CheckFailed
from lab.measure.problem import parse_shape
from lab.ladder.registry import builtin

RUNG = builtin()[0]   # any rung: the child is a stand-in


def _fake_python(tmp_path, monkeypatch, body: str):
    exe = tmp_path / "fake-python"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(isolated.sys, "executable", str(exe))


def test_a_crashing_child_becomes_a_failed_check(tmp_path, monkeypatch):
    _fake_python(tmp_path, monkeypatch, 'echo "CUDA error: an illegal memory access" >&2; kill -SEGV $$')
    with pytest.raises(CheckFailed, match=rf"{RUNG.id} crashed in its child process \(killed by SIGSEGV\).*illegal memory"):
        isolated.check_in_child(RUNG, parse_shape("1,1,17,64"), extra_shapes=0)


def test_the_childs_verdict_is_returned(tmp_path, monkeypatch):
    verdict = {"passed": False, "rel_err": 0.5, "tolerance": 1e-4, "failed_shape": "B1-H1-N17-D64-float32"}
    _fake_python(tmp_path, monkeypatch, f"echo '{json.dumps(verdict)}'; exit 0")
    result = isolated.check_in_child(RUNG, parse_shape("1,1,17,64"), extra_shapes=0)
    assert result == {"passed": False, "rel_err": 0.5, "tolerance": 1e-4, "failed_shape": "B1-H1-N17-D64-float32"}


def test_the_child_is_asked_for_the_exact_problem(tmp_path, monkeypatch):
    argv_file = tmp_path / "argv"
    _fake_python(tmp_path, monkeypatch, f'echo "$@" > {argv_file}; echo \'{{"passed": true}}\'')
    assert isolated.check_in_child(RUNG, parse_shape("2,3,100,300,64", causal=True), extra_shapes=4) == {"passed": True}
    argv = argv_file.read_text().split()
    assert argv[argv.index("--shape") + 1] == "2,3,100,300,64"
    assert argv[argv.index("--shapes") + 1] == "4" and "--causal" in argv


def test_bad_input_inside_the_child_is_bad_input_not_a_crash(tmp_path, monkeypatch):
    _fake_python(tmp_path, monkeypatch, """echo '{"error": "mine supports head dims 32, 64, 128"}'""")
    from lab.errors import LabError
    with pytest.raises(LabError, match="head dims") as e:
        isolated.check_in_child(RUNG, parse_shape("1,1,17,64"), extra_shapes=0)
    assert not isinstance(e.value, CheckFailed)


def test_the_profiled_child_waits_for_go_or_cancel(tmp_path):
    """`lab profile` starts ncu's target early; it launches nothing until the parent says go."""
    from lab.ladder import target

    go = tmp_path / "go"
    (tmp_path / "go.cancel").touch()
    assert target.wait_for_go(go) is False
    go.touch()
    assert target.wait_for_go(go) is True


def test_the_stored_ncu_command_is_the_one_a_user_reruns(tmp_path, monkeypatch):
    """No --go-file handshake and the stored report's name, so `benchmarks/profile_loop.py` and a user
    rerun exactly what was profiled."""
    from lab import pipeline

    early = pipeline.EarlyNcu.__new__(pipeline.EarlyNcu)
    early.report = tmp_path / ".ncu-x.partial" / "profile.ncu-rep"
    early.cmd = ["ncu", "--nvtx", "-o", str(early.report), "python3", "-m", "lab.ladder.target", "--variant", "vX",
                 "--go-file", str(tmp_path / "go"), "--repeat", "1"]
    assert early.stored_command("profile.ncu-rep") == ["ncu", "--nvtx", "-o", "profile.ncu-rep", "python3", "-m",
                                                       "lab.ladder.target", "--variant", "vX", "--repeat", "1"]

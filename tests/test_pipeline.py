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
    assert argv[argv.index("--problem") + 1] == "B2-H3-N100x300-D64-causal-float32"
    assert argv[argv.index("--shapes") + 1] == "4" and argv[argv.index("--mode") + 1] == "fwd"


def test_bad_input_inside_the_child_is_bad_input_not_a_crash(tmp_path, monkeypatch):
    _fake_python(tmp_path, monkeypatch, """echo '{"error": "mine supports head dims 32, 64, 128"}'""")
    from lab.errors import LabError
    with pytest.raises(LabError, match="head dims") as e:
        isolated.check_in_child(RUNG, parse_shape("1,1,17,64"), extra_shapes=0)
    assert not isinstance(e.value, CheckFailed)

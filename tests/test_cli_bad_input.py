"""Bad input: a clear message and exit code 2, no traceback, nothing stored."""


import pytest

try:
    import torch
    HAS_GPU = torch.cuda.is_available()
except ImportError:
    HAS_GPU = False

from lab.ladder.registry import builtin
from conftest import LAB_VARIABLES, lab_here  # noqa: E402

FP32 = next(v for v in builtin() if v.dtypes == ("float32",)).id   # a rung without bfloat16 or D=96


def lab(*args, env=None):
    """`lab ARGS` in this process (conftest.lab_here): the lab's variables those of `env` alone."""
    return lab_here(*args, env={k: v for k, v in (env or {}).items() if k in LAB_VARIABLES})


@pytest.mark.parametrize("args, message", [
    (["profile", "--variant", "no_such_rung"], "unknown variant"),
    (["bench", "--variant", f"{FP32},nope"], "unknown variant"),
    (["profile", "--variant", FP32, "--shape", "8,16,1024,96"], "head_dim"),
    (["profile", "--variant", FP32, "--shape", "8,16,0,64"], "seqlen_q must be >= 1"),
    (["profile", "--variant", FP32, "--shape", "0,16,128,64"], "batch must be >= 1"),
    (["profile", "--variant", FP32, "--shape", "8,16,1024"], "bad shape"),
    (["profile", "--variant", FP32, "--dtype", "bfloat16"], "dtype"),
    (["profile", "--variant", FP32, "--dtype", "int8"], "unknown dtype"),
    (["bench", "--variant", ""], "no variant"),
    # an option that would change nothing is refused, never silently ignored
    (["analyze", "tests/fixtures/ncu/planted-basic.ncu-rep.xz", "--causal"], "--causal/--no-causal describe the problem of --shape"),
    (["analyze", "tests/fixtures/ncu/planted-basic.ncu-rep.xz", "--no-causal", "--dtype", "float16"],
     "--causal/--no-causal and --dtype describe the problem of --shape"),
    (["sweep", "--resume", "x", "--mode", "bwd"], "drop --mode"),
    (["sweep", "--resume", "x", "--causal", "no", "--reps", "5"], "drop --causal, --reps"),
    (["bench", "--variant", FP32, "--under-load", "nan"], "nan is not a number of milliseconds"),
    (["tune", "--variant", FP32, "--under-load", "-5"], "'--under-load'"),
    (["bench", "--variant", FP32, "--under-load", "1e9"], "'--under-load'"),
])
def test_bad_usage_exits_2_with_message(args, message, tmp_path):
    import os

    env = dict(os.environ, LAB_PROFILES=str(tmp_path))
    res = lab(*args, env=env)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU refusal; this machine has a GPU")
@pytest.mark.parametrize("command", [["profile", "--variant", FP32], ["bench", "--variant", FP32]])
def test_gpu_command_without_gpu_exits_2(command, tmp_path):
    import os

    res = lab(*command, env=dict(os.environ, LAB_PROFILES=str(tmp_path)))
    assert res.returncode == 2, res.stderr
    assert "needs an NVIDIA GPU" in res.stderr or "needs PyTorch" in res.stderr
    assert "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_variants_lists_every_rung():
    import json

    from lab.ladder.registry import variants

    res = lab("variants", "--json")
    assert res.returncode == 0
    assert [v["id"] for v in json.loads(res.stdout)] == [v.id for v in variants()]

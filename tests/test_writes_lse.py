"""Which rungs write the row log-sum-exp, on the CPU (kernels/common.cuh's backward contract: fp32
[B, H, Nq], natural log): a backward rung's forward does (backward = true implies it); a forward-only
rung does where its block says `writes_lse = true` (v9, the Hopper forward written for v8's
backward). Its binding is built with -DLAB_WRITES_LSE and takes an lse tensor; every other rung's
binding refuses one (the refusal that failed v9's LSE tests on four H200s, 2026-11-27). The binding's
own directives are run through the C preprocessor with the defines the build passes, so the test
reads what the compiler will compile. A python rung's forward returns (o, lse) under the same key;
the one call path (lab.measure.call) gives such a rung `forward_lse` and still refuses its backward.
The GPU side: tests/test_v9_gpu.py's LSE tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from lab.errors import LabError
from lab.ladder import build
from lab.ladder.registry import builtin
from lab.ladder.rungfile import parse_rung
from lab.measure.problem import Problem

KERNELS = REPO / "kernels"
WS = REPO / "tests" / "fixtures" / "backward_ws" / "kernels"
VARIANTS = builtin()
FORWARD_ONLY = next(v for v in VARIANTS if v.kind == "cuda" and not v.backward)   # the ladder's first
BACKWARD = next(v for v in VARIANTS if v.kind == "cuda" and v.backward)
REFUSAL = "this rung's forward writes no lse"


def _copy_with(tmp_path: Path, source: Path, extra: str, marker: str = "// lab:end") -> Path:
    dst = tmp_path / source.name
    dst.write_text(source.read_text().replace(marker, f"{extra}\n{marker}"))
    return dst


def test_a_forward_only_rung_may_declare_it_and_its_binding_is_built_for_it(tmp_path):
    lse = parse_rung(_copy_with(tmp_path, FORWARD_ONLY.source, "// writes_lse = true"))
    assert lse.writes_lse and not lse.backward and lse.backward_launcher is None
    assert not FORWARD_ONLY.writes_lse
    for tuning in (False, True):
        assert build.LSE_DEFINE in build._cxx_flags(lse, tuning)
        assert build.LSE_DEFINE in build._cxx_flags(BACKWARD, tuning)   # implied by backward = true
        assert build.LSE_DEFINE not in build._cxx_flags(FORWARD_ONLY, tuning)
    # the binding's C++ flags are part of the build key: the two bindings are two builds
    versions = {"torch": "2.13.0", "torch_cuda": "13.0", "nvcc": "13.0.88"}
    keys = {build.cache_key(build.sources_for(FORWARD_ONLY), [f"cxx:{f}" for f in build._cxx_flags(v, False)], versions)
            for v in (FORWARD_ONLY, lse)}
    assert len(keys) == 2
    assert lse.to_dict()["writes_lse"] is True and FORWARD_ONLY.to_dict()["writes_lse"] is False


def test_a_backward_rung_writes_it_whether_or_not_it_says_so(tmp_path):
    assert BACKWARD.writes_lse
    said = parse_rung(_copy_with(tmp_path, BACKWARD.source, "// writes_lse = true"))
    assert said.writes_lse and said.backward


@pytest.mark.parametrize("value, message", [('"yes"', "writes_lse must be true or false"),
                                            ("false", "writes_lse = false contradicts backward = true")])
def test_a_bad_declaration_is_refused(tmp_path, value, message):
    source = BACKWARD.source if value == "false" else FORWARD_ONLY.source
    with pytest.raises(LabError, match=message):
        parse_rung(_copy_with(tmp_path, source, f"// writes_lse = {value}"))


def _preprocessed_forward(defines: list[str]) -> str:
    """binding.cpp's forward() as the C preprocessor leaves it under `defines` (its #include lines
    dropped: the directives under test are the binding's own)."""
    cpp = shutil.which("cpp") or shutil.which("g++")
    if cpp is None:
        pytest.skip("no C preprocessor (cpp or g++) on this machine")
    text = "\n".join(line for line in (KERNELS / "binding.cpp").read_text().splitlines()
                     if not line.lstrip().startswith("#include"))
    args = [cpp, "-P", "-x", "c++", *([] if cpp.endswith("cpp") else ["-E"]), *defines, "-"]
    out = subprocess.run(args, input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    m = re.search(r"void forward\(.*?\n\}", out.stdout, re.S)
    assert m, out.stdout[:2000]
    return m.group(0)


def _defines(variant) -> list[str]:
    return [f for f in build._cxx_flags(variant, tuning=False) if f.startswith("-D")]


def test_the_binding_takes_lse_exactly_where_the_rung_writes_it(tmp_path):
    lse = parse_rung(_copy_with(tmp_path, FORWARD_ONLY.source, "// writes_lse = true"))
    assert REFUSAL in _preprocessed_forward(_defines(FORWARD_ONLY))
    assert REFUSAL not in _preprocessed_forward(_defines(lse))
    assert REFUSAL not in _preprocessed_forward(_defines(BACKWARD))
    # a binding compiled by hand with the backward's launcher alone still takes the forward's lse
    assert REFUSAL not in _preprocessed_forward(["-DLAB_LAUNCHER=lab_forward_x", "-DLAB_BACKWARD_LAUNCHER=lab_backward_x",
                                                 "-DLAB_BACKWARD_WORKSPACE=lab_backward_x_workspace"])


def test_the_persistent_hopper_forward_declares_it():
    """v9, found as tests/test_v9_gpu.py finds it: a forward-only rung that writes the LSE for v8's
    backward, and the only one (v6's launcher ignores args->lse)."""
    rung = next((v for v in VARIANTS if v.min_cc >= (9, 0) and v.grid == "flat"), None)
    assert rung is not None and rung.writes_lse and not rung.backward
    assert build.LSE_DEFINE in build._cxx_flags(rung, tuning=True)
    text = rung.source.read_text()
    assert "a->lse != nullptr" in text   # its launcher picks the WRITE_LSE instantiation when given one
    assert [v for v in VARIANTS if v.writes_lse and not v.backward] == [rung]   # v6's launcher ignores args->lse


def test_a_python_rung_that_declares_it_returns_the_lse_without_a_backward(tmp_path):
    torch = pytest.importorskip("torch")
    from lab.ladder import python_rung
    from lab.measure.call import NoBackward, make_call, rung

    text = (WS / "b1_right.py").read_text().replace("# backward = true\n", "# writes_lse = true\n")
    (tmp_path / "b1_right.py").write_text(text)
    variant = parse_rung(tmp_path / "b1_right.py", "workspace")
    assert variant.writes_lse and not variant.backward
    ext = python_rung.load(variant)
    problem = Problem(1, 2, 9, 13, 16, True, "float32")
    q, k, v = (torch.randn(1, 2, n, 16, dtype=torch.float64).float() for n in (9, 13, 13))
    o, lse = torch.full_like(q, float("nan")), torch.full((1, 2, 9), float("nan"))
    ext.forward(q, k, v, o, True, 0.25, lse)
    s = (q.double() @ k.double().transpose(-1, -2)) * 0.25
    s = s.masked_fill(torch.ones(9, 13, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)
    attention = rung(variant, ext, problem)
    assert attention.forward_lse is not None and attention.backward is None
    o2, lse2 = attention.forward_lse(q, k, v)
    torch.testing.assert_close(lse2, lse)
    with pytest.raises(NoBackward):
        make_call(attention, q, k, v, "bwd")
    # without the key the same module's forward is asked for o alone, and an lse buffer is refused
    plain = parse_rung(WS / "b3_forward_only.py", "workspace")
    assert rung(plain, python_rung.load(plain), problem).forward_lse is None
    with pytest.raises(RuntimeError, match="forward returns no lse"):
        python_rung.load(plain).forward(q, k, v, o, True, 0.25, lse)

"""Which rungs write the row log-sum-exp, on the CPU (kernels/common.cuh's backward contract: fp32
[B, H, Nq], natural log): a backward rung's forward does (backward = true implies it); a forward-only
rung does where its block says `writes_lse = true` (v9, the Hopper forward written for v8's
backward). Its binding is built with -DLAB_WRITES_LSE and takes an lse tensor; every other rung's
binding refuses one (the refusal that failed v9's LSE tests on four H200s, 2026-11-27). The binding's
own directives are run through the C preprocessor with the defines the build passes, so the test
reads what the compiler will compile. A python rung's forward returns (o, lse) under the same key;
the one call path (lab.measure.call) gives such a rung `forward_lse` and still refuses its backward.
A tuning build's forward_config takes the lse as forward does, and lab.ladder.tuning's candidate hands
it through (`lab tune` judges every candidate's LSE). The GPU side: tests/test_v9_gpu.py's LSE tests."""

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


def _preprocessed(defines: list[str]) -> str:
    """binding.cpp as the C preprocessor leaves it under `defines` (its #include lines dropped: the
    directives under test are the binding's own)."""
    cpp = shutil.which("cpp") or shutil.which("g++")
    if cpp is None:
        pytest.skip("no C preprocessor (cpp or g++) on this machine")
    text = "\n".join(line for line in (KERNELS / "binding.cpp").read_text().splitlines()
                     if not line.lstrip().startswith("#include"))
    args = [cpp, "-P", "-x", "c++", *([] if cpp.endswith("cpp") else ["-E"]), *defines, "-"]
    out = subprocess.run(args, input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _function(text: str, name: str) -> str | None:
    """The definition of C++ function `name` in `text` (its signature and body), None if absent."""
    m = re.search(rf"^\w[\w:<>*& ]* {name}\(.*?\n\}}", text, re.S | re.M)
    return m.group(0) if m else None


def _preprocessed_forward(defines: list[str]) -> str:
    """binding.cpp's forward() with the function that makes its arguments (forward_args)."""
    text = _preprocessed(defines)
    forward = _function(text, "forward")
    assert forward, text[:2000]
    return "\n".join(f for f in (_function(text, "forward_args"), forward) if f)


def _defines(variant, tuning: bool = False) -> list[str]:
    return [f for f in build._cxx_flags(variant, tuning=tuning) if f.startswith("-D")]


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


def _def_args(text: str, name: str) -> list[str]:
    """The Python argument names binding.cpp's module gives function `name` (its m.def's py::arg list)."""
    m = re.search(rf'm\.def\("{name}",(.*?)\);', text, re.S)
    assert m, f"binding.cpp defines no {name}"
    return re.findall(r'py::arg\("(\w+)"\)', m.group(1))


def test_a_tuning_candidate_takes_the_lse_exactly_as_the_forward_does(tmp_path):
    """`lab tune` judges the LSE of a rung that writes it for every candidate too, so the tuning build's
    forward_config takes the lse tensor and makes the candidate's arguments with forward's own function
    (lse_ptr and the refusal of a rung that writes none included). Without it every candidate of v7, v8
    and v9 left the NaN-poisoned LSE unwritten and failed (four H200s, 2026-11-27)."""
    lse = parse_rung(_copy_with(tmp_path, FORWARD_ONLY.source, "// writes_lse = true"))
    source = (KERNELS / "binding.cpp").read_text()
    assert source.count(REFUSAL) == 1   # one home, shared by forward and forward_config
    assert source.count("make_args(q, k, v, o, causal, softmax_scale, lse_ptr(lse, q))") == 1
    for variant in (lse, BACKWARD, FORWARD_ONLY):
        text = _preprocessed(_defines(variant, tuning=True))
        config = _function(text, "forward_config")
        assert config and re.search(r"const c10::optional<at::Tensor>& lse\)", config), config
        assert "forward_args(q, k, v, o, causal, softmax_scale, lse)" in config, config
        assert "forward_args(q, k, v, o, causal, softmax_scale, lse)" in _function(text, "forward")
        assert "make_args" not in config
        assert (REFUSAL in _function(text, "forward_args")) == (not variant.writes_lse)
        assert _def_args(text, "forward_config")[-2:] == ["config", "lse"]
        assert re.search(r'm\.def\("forward_config",[^;]*py::arg\("lse"\) = py::none\(\)', text)
    assert _function(_preprocessed(_defines(lse)), "forward_config") is None   # a plain build has none


class _Recording:
    """Stands in for a tuning build's module: records each call by the argument names binding.cpp gives it."""

    def __init__(self):
        self.calls = []
        text = (KERNELS / "binding.cpp").read_text()
        self.names = {n: _def_args(text, n) for n in ("forward", "forward_config")}

    def forward_config(self, *args):
        self.calls.append(("forward_config", dict(zip(self.names["forward_config"], args))))

    def forward(self, *args):
        self.calls.append(("forward", dict(zip(self.names["forward"], args))))


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd+bwd"])
def test_the_tuning_candidate_hands_the_lse_to_its_launch(mode):
    """lab.ladder.tuning.Candidate, as the correctness gate calls it (module.forward(..., lse)): a forward
    candidate launches candidate `index` with that lse; a backward candidate's forward is the rung's own."""
    from lab.ladder.tuning import Candidate

    module, lse = _Recording(), object()
    Candidate(module, 3, mode).forward("q", "k", "v", "o", True, 0.125, lse)
    (name, args), = module.calls
    assert name == ("forward_config" if mode == "fwd" else "forward")
    assert args["lse"] is lse and args["causal"] is True and args["softmax_scale"] == 0.125
    assert args.get("config", 3) == 3
    module.calls.clear()
    Candidate(module, 3, mode).forward("q", "k", "v", "o", False, 0.125)   # the timer's call: no lse
    assert module.calls[0][1]["lse"] is None

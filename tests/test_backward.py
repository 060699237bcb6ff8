"""The backward on the CPU: the one call path (lab.measure.call) in every mode, the python rung's
backward contract, the float64 autograd reference, the per-tensor judgement naming the worst element,
the backward's shape list, refusals (exit 2) of a rung without a backward from check, bench and
profile and an "unsupported" sweep row, and the pure pieces item 5 made one function each (rates,
the problem's label, the gqa key). The GPU side: tests/test_backward_gpu.py.

The fixture workspace tests/fixtures/backward_ws holds three python rungs written with torch ops:
b1 (a right backward, GQA-capable), b2 (b1 with dK x 1.05) and b3 (a forward without a backward).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.measure import rates
from lab.measure.problem import Problem, parse_shape

ROOT = Path(__file__).resolve().parent.parent
WS = ROOT / "tests" / "fixtures" / "backward_ws"
from conftest import lab_here  # noqa: E402


@pytest.fixture
def backward_ws(monkeypatch):
    from lab.ladder import workspace

    monkeypatch.setenv(workspace.ENV, str(WS))
    from lab.ladder import registry

    return registry


def lab(*args, env=None):
    """`lab ARGS` in this process (conftest.lab_here), in the tests' workspace of python rungs."""
    return lab_here(*args, cwd=ROOT, env={"LAB_WORKSPACE": str(WS), **(env or {})})


def refused(res, *messages):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    for m in messages:
        assert m in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


# ---------------------------------------------------------------------------------------------
# One function per fact
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", [Problem(8, 16, 1024, 1024, 64), Problem(2, 32, 113, 203, 128, True, "bfloat16", 8),
                                     Problem(1, 1, 1, 239, 64, True, "float16", 1),
                                     Problem(2, 32, 1000, 1000, 128, True, "bfloat16", 8, deterministic=True)])
def test_a_problem_travels_as_its_label(problem):
    assert Problem.from_label(problem.label()) == problem
    assert Problem.from_dict(problem.to_dict()) == problem


def test_a_deterministic_problem_says_so_wherever_it_is_named():
    """The flag is in the label (run ids, rows, the children's command lines) and the stored dict; a
    problem without it reads and stores as before; a baseline runs the plain problem."""
    p = parse_shape("4,16,8192,128", dtype="float16", deterministic=True)
    assert p.label() == "B4-H16-N8192-D128-float16-deterministic" and p.to_dict()["deterministic"] is True
    assert p.plain() == parse_shape("4,16,8192,128", dtype="float16") and p.with_dtype("bfloat16").deterministic
    assert "deterministic" not in p.plain().to_dict() and p.plain().label() == "B4-H16-N8192-D128-float16"
    from lab.measure.problem import label_without_dtype
    from lab.store.manifest import _problem

    assert label_without_dtype(p.label()) == "B4-H16-N8192-D128-deterministic"   # never grouped with the default's
    assert label_without_dtype("B2-H3kv1-N5x7-D64-causal-bfloat16") == "B2-H3kv1-N5x7-D64-causal"

    assert _problem(p.to_dict(), "problem") == p and _problem(p.plain().to_dict(), "problem") == p.plain()


@pytest.mark.parametrize("bad", ["B8-H16-N1024-D64", "8,16,1024,64", "B8-H16-N1024-D64-float8", ""])
def test_a_bad_label_is_bad_input(bad):
    with pytest.raises(LabError, match="bad problem label"):
        Problem.from_label(bad)


def test_a_shape_may_carry_kv_heads():
    p = parse_shape("2,32:8,1024,128", dtype="float16")
    assert (p.heads, p.heads_kv, p.gqa) == (32, 8, True)
    with pytest.raises(LabError, match="must divide heads"):
        parse_shape("2,32:5,1024,128")


def test_rates_follow_flashattentions_convention():
    p = Problem(2, 4, 256, 512, 64, causal=True)
    fwd = 4 * 2 * 4 * 256 * 512 * 64 / 2
    assert rates.flops(p) == p.forward_flops == fwd
    assert rates.flops(p, "bwd") == 2.5 * fwd and rates.flops(p, "fwd+bwd") == 3.5 * fwd
    assert rates.tflops(2e12, 1000.0) == pytest.approx(2.0)
    assert rates.ratio(3.0, 1.5) == 2.0 and rates.ratio(None, 1.0) is None and rates.ratio(1.0, 0) is None
    peaks = {"fp32_tflops": 60.0, "tensor_fp16_tflops": 900.0}
    assert rates.peak_for(peaks, "float32") == ("FP32 (FFMA)", 60.0)
    assert rates.peak_for(peaks, "bfloat16")[1] == 900.0
    assert rates.peak_for(peaks, "bfloat16") == rates.peak_for(peaks, "float16")   # one dense 16-bit tensor rate
    assert rates.pct_of_peak(450.0, peaks, "float16") == 50.0 and rates.pct_of_peak(1.0, None, "float16") is None
    with pytest.raises(ValueError, match="unknown mode"):
        rates.flops(p, "sideways")


def test_the_gqa_key_lets_a_rung_take_fewer_kv_heads(backward_ws):
    from lab.measure.problem import check_supported

    b1, b3 = backward_ws.get("b1"), backward_ws.get("b3")
    gqa = Problem(1, 8, 64, 64, 64, False, "float16", 2)
    assert b1.gqa and not b3.gqa
    check_supported(b1, gqa)
    with pytest.raises(LabError, match="does not declare GQA support"):
        check_supported(b3, gqa)


# ---------------------------------------------------------------------------------------------
# The call path, in every mode, on CPU tensors
# ---------------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")


def _sdpa_grads(q, k, v, dout, causal, scale):
    qg, kg, vg = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale, **gqa)
    return (o, *torch.autograd.grad(o, (qg, kg, vg), dout.double()))


@pytest.mark.parametrize("heads_kv", [4, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_a_python_rungs_backward_runs_in_every_mode(backward_ws, causal, heads_kv):
    from lab.ladder import python_rung
    from lab.measure.call import make_call, rung, upstream_grad
    from lab.measure.problem import make_inputs, softmax_scale

    b1 = backward_ws.get("b1")
    p = Problem(2, 4, 33, 47, 32, causal, "float32", heads_kv)
    att = rung(b1, python_rung.load(b1), p)
    q, k, v = make_inputs(p, seed=3, device="cpu")
    o_ref, *grads_ref = _sdpa_grads(q, k, v, upstream_grad(q), causal, softmax_scale(p))
    torch.testing.assert_close(make_call(att, q, k, v, "fwd")().double(), o_ref, rtol=1e-5, atol=1e-5)
    bwd = make_call(att, q, k, v, "bwd")
    for got in (bwd(), bwd(), make_call(att, q, k, v, "fwd+bwd")()):   # repeatable; fwd+bwd gives the same
        assert [g.shape for g in got] == [q.shape, k.shape, v.shape]
        for g, r in zip(got, grads_ref):
            torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-4)


def test_the_extension_interface_writes_bhnd_buffers_in_either_layout(backward_ws, tmp_path):
    """A BNHD python rung's backward gets (B, N, H, D) tensors; the buffers come back (B, H, N, D)."""
    from lab.ladder import python_rung
    from lab.ladder.rungfile import parse_rung
    from lab.measure.call import upstream_grad

    src = WS / "kernels" / "b1_right.py"
    bnhd = tmp_path / "b1_right.py"
    bnhd.write_text(src.read_text().replace("# gqa = true\n", "# gqa = true\n# layout = \"BNHD\"\n")
                    .replace("def forward(q, k, v, causal, scale):\n",
                             "def forward(q, k, v, causal, scale):\n    q, k, v = (t.transpose(1, 2) for t in (q, k, v))\n"
                             "    o, lse = _forward(q, k, v, causal, scale)\n    return o.transpose(1, 2), lse\n\n\n"
                             "def _forward(q, k, v, causal, scale):\n")
                    .replace("def backward(q, k, v, o, dout, lse, causal, scale):\n",
                             "def backward(q, k, v, o, dout, lse, causal, scale):\n"
                             "    grads = _backward(*(t.transpose(1, 2) for t in (q, k, v, o, dout)), lse, causal, scale)\n"
                             "    return tuple(g.transpose(1, 2) for g in grads)\n\n\n"
                             "def _backward(q, k, v, o, dout, lse, causal, scale):\n"))
    plain, turned = (python_rung.load(parse_rung(f, "workspace")) for f in (src, bnhd))
    assert turned.variant.layout == "BNHD"
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 17, 32, generator=gen) for _ in range(3))
    dout = upstream_grad(q)
    outs = []
    for r in (plain, turned):
        o, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:3], float("nan"))
        dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
        r.forward(q, k, v, o, True, 0.2, lse)
        r.backward(q, k, v, o, dout, lse, dq, dk, dv, True, 0.2)
        outs.append((o, lse, dq, dk, dv))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b)


def test_a_rung_without_a_backward_is_refused_in_the_call_path(backward_ws):
    from lab.ladder import python_rung
    from lab.measure.call import NoBackward, make_call, require_mode, rung

    b3 = backward_ws.get("b3")
    p = Problem(1, 2, 16, 16, 32)
    with pytest.raises(NoBackward, match="b3 has no backward") as e:
        require_mode(b3, "bwd")
    assert e.value.exit_code == 2
    att = rung(b3, python_rung.load(b3), p)
    q = torch.zeros(1, 2, 16, 32)
    make_call(att, q, q, q, "fwd")()
    for mode in ("bwd", "fwd+bwd"):
        with pytest.raises(NoBackward):
            make_call(att, q, q, q, mode)


def test_a_declared_backward_that_is_missing_is_bad_input(tmp_path):
    from lab.ladder import python_rung
    from lab.ladder.rungfile import parse_rung

    text = (WS / "kernels" / "b3_forward_only.py").read_text().replace("# lab:end", "# backward = true\n# lab:end")
    (tmp_path / "b3.py").write_text(text)
    with pytest.raises(LabError, match="declares backward = true but .* has no function 'backward'"):
        python_rung.load(parse_rung(tmp_path / "b3.py", "workspace"))


# ---------------------------------------------------------------------------------------------
# The reference, the judgement, the shapes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("heads_kv", [6, 2, 1])
@pytest.mark.parametrize("nq, nk, causal", [(1, 1, False), (17, 17, True), (40, 90, True), (90, 40, True), (1, 39, True)])
def test_the_reference_is_float64_autograd(nq, nk, causal, heads_kv):
    from lab.measure import gradcheck

    gen = torch.Generator().manual_seed(nq * 1000 + nk)
    q = torch.randn(2, 6, nq, 16, generator=gen, dtype=torch.float64) + 0.5
    k, v = (torch.randn(2, heads_kv, nk, 16, generator=gen, dtype=torch.float64) + 0.5 for _ in range(2))
    dout = torch.randn(2, 6, nq, 16, generator=gen, dtype=torch.float64)
    o, *grads = _sdpa_grads(q, k, v, dout, causal, 0.25)
    ref = gradcheck.reference_backward(q, k, v, dout, causal, 0.25)
    tiny = gradcheck.reference_backward(q, k, v, dout, causal, 0.25, chunk_bytes=1)   # one (batch, kv head) at a time
    for got in (ref, tiny):
        for name, expected in zip(("O", "dQ", "dK", "dV"), (o, *grads)):
            torch.testing.assert_close(got[name], expected.detach(), rtol=1e-10, atol=1e-10)
    kr = k.repeat_interleave(6 // heads_kv, dim=1)
    s = (q @ kr.transpose(-2, -1)) * 0.25
    if causal:
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(ref["LSE"], torch.logsumexp(s, -1), rtol=1e-12, atol=1e-12)


def test_the_judgement_names_the_worst_element_and_fails_nan():
    from lab.measure import gradcheck

    ref = torch.zeros(2, 3, 5, 4, dtype=torch.float64)
    got = ref.clone().float()
    got[1, 2, 3, 1] = 0.5
    t = gradcheck.judge_tensor("dK", got, ref, tolerance=0.1)
    assert not t.passed and t.worst_index == (1, 2, 3, 1) and t.max_abs_err == 0.5
    assert t.worst_text() == "[1, 2, 3, 1] = 0.5, float64 says 0"
    got[0, 1, 0, 0] = float("nan")   # an unwritten (poisoned) element is the one to show
    t = gradcheck.judge_tensor("dK", got, ref, tolerance=10.0)
    assert not t.passed and t.nonfinite == 1 and t.worst_index == (0, 1, 0, 0)
    assert gradcheck.judge_tensor("dV", ref.float(), ref, tolerance=0.0).passed


def test_the_backward_shapes_cover_flashattentions_corners(backward_ws):
    from lab.measure import gradcheck

    b1, b3 = backward_ws.get("b1"), backward_ws.get("b3")
    shapes = gradcheck.backward_shapes(b1, 40, seed=5)
    assert shapes == gradcheck.backward_shapes(b1, 40, seed=5) and shapes != gradcheck.backward_shapes(b1, 40, seed=6)
    pairs = {(g.problem.seqlen_q, g.problem.seqlen_k, g.problem.causal) for g in shapes}
    for nq, nk in ((1, 1), (113, 203), (1023, 1024), (1, 239)):
        assert (nq, nk, True) in pairs or (nq, nk, False) in pairs, (nq, nk)
    assert (113, 203, True) in pairs and (113, 203, False) in pairs
    assert any(g.problem.seqlen_q % 2 and g.problem.seqlen_q > 1 for g in shapes)
    assert max(g.problem.batch * g.problem.heads for g in shapes) >= 256
    assert any(g.q_scale > 1 for g in shapes) and "large logits" in next(g for g in shapes if g.q_scale > 1).label()
    assert any(g.problem.gqa for g in shapes) and not any(g.problem.gqa for g in gradcheck.backward_shapes(b3, 40))
    assert {g.problem.head_dim for g in shapes} == set(b1.head_dims)


@pytest.mark.parametrize("rung_id, passed", [("b1", True), ("b2", False)])
def test_the_backward_check_on_the_cpu(backward_ws, rung_id, passed):
    """The whole per-shape check (poisoned buffers, float64 autograd, SDPA-tied tolerances), on the CPU."""
    from lab.ladder import python_rung
    from lab.measure import check, gradcheck

    variant = backward_ws.get(rung_id)
    module = python_rung.load(variant)
    shapes = [gradcheck.GradShape(Problem(2, 3, 113, 203, 32, True, "float32")),
              gradcheck.GradShape(Problem(1, 4, 64, 97, 64, False, "float32", 2), gradcheck.LARGE_LOGITS)]
    for g in shapes:
        s = check.check_backward_problem(variant, g, module, seed=0, device="cpu")
        assert s.passed is passed, [t.to_dict() for t in s.tensors]
        assert [t.name for t in s.tensors] == list(gradcheck.TENSORS)
        if not passed:
            assert [t.name for t in s.tensors if not t.passed] == ["dK"]
            assert s.failed_tensor.name == "dK" and s.failed_tensor.worst_index is not None
            result = check.CheckResult(variant.id, check.BACKWARD_RULE, [s], mode="bwd")
            assert result.failure.startswith(f"dK on {g.label()}: max_abs_err ")
            d = result.to_dict()
            assert d["failed_tensor"] == "dK" and d["worst_element"].startswith("[") and d["mode"] == "bwd"


# ---------------------------------------------------------------------------------------------
# The deterministic mode (`deterministic = true`, `--deterministic`)
# ---------------------------------------------------------------------------------------------

DET_CALLS = []   # the deterministic= values the fixture rungs below were called with


def _deterministic_rung(tmp_path, name: str = "d1", noise: bool = False, keyword: bool = True):
    """b1 (right) declaring deterministic = true, its backward taking the keyword (recorded in
    DET_CALLS); `noise`: each call adds a different tiny offset to dQ (far inside the tolerance, so the
    values pass and only the bits over two runs can catch it)."""
    from lab.ladder.rungfile import parse_rung

    text = (WS / "kernels" / "b1_right.py").read_text()
    text = text.replace('# id = "b1"', f'# id = "{name}"').replace("# gqa = true\n", "# gqa = true\n# deterministic = true\n")
    sig = "def backward(q, k, v, o, dout, lse, causal, scale):\n"
    assert sig in text
    if keyword:
        text = text.replace(sig, "def backward(q, k, v, o, dout, lse, causal, scale, deterministic=False):\n"
                                 "    import test_backward\n    test_backward.DET_CALLS.append(deterministic)\n"
                                 f"    grads = _backward(q, k, v, o, dout, lse, causal, scale)\n"
                                 + ("    _calls.append(1)\n    grads = (grads[0] + len(_calls) * 1e-7 * grads[0].abs().max(), "
                                    "*grads[1:])\n" if noise else "")
                                 + "    return grads\n\n\n_calls = []\n\n\ndef _backward(q, k, v, o, dout, lse, causal, scale):\n")
    path = tmp_path / f"{name}_det.py"
    path.write_text(text)
    return parse_rung(path, "workspace")


def test_a_deterministic_python_rung_gets_the_keyword_only_when_asked(tmp_path):
    from lab.ladder import python_rung
    from lab.measure.call import make_call, rung

    variant = _deterministic_rung(tmp_path)
    assert variant.deterministic and variant.backward
    module = python_rung.load(variant)
    for deterministic in (False, True):
        p = Problem(1, 2, 16, 16, 32, False, "float32", deterministic=deterministic)
        q = torch.randn(1, 2, 16, 32)
        DET_CALLS.clear()
        make_call(rung(variant, module, p), q, q, q, "bwd")()
        assert DET_CALLS == [deterministic]


def test_a_declared_deterministic_backward_must_take_the_keyword(tmp_path):
    from lab.ladder import python_rung

    with pytest.raises(LabError, match="declares deterministic = true but .* takes no `deterministic` keyword"):
        python_rung.load(_deterministic_rung(tmp_path, keyword=False))


@pytest.mark.parametrize("noise", [False, True])
def test_the_deterministic_check_requires_the_same_bits_twice(tmp_path, noise):
    """`lab check --deterministic`'s per-shape check: the float64 judgement, then dQ, dK, dV of a second
    run on the same inputs bitwise equal; a backward whose dQ moves by far less than the tolerance from
    one run to the next passes the values and fails the bits, and the failure says so."""
    from lab.ladder import python_rung
    from lab.measure import check, gradcheck

    variant = _deterministic_rung(tmp_path, noise=noise)
    module = python_rung.load(variant)
    g = gradcheck.GradShape(Problem(2, 3, 113, 203, 32, True, "float32", deterministic=True))
    s = check.check_backward_problem(variant, g, module, seed=0, device="cpu")
    assert all(t.passed for t in s.tensors), [t.to_dict() for t in s.tensors]
    assert [r.name for r in s.repeats] == ["dQ", "dK", "dV"]
    result = check.CheckResult(variant.id, check.BACKWARD_RULE, [s], mode="bwd", deterministic=True)
    d = result.to_dict()
    assert d["deterministic"] is True
    if not noise:
        assert s.passed and all(r.equal for r in s.repeats) and d["bitwise_repeat_failed"] is None
        return
    assert not s.passed and s.failed_repeat.name == "dQ" and s.failed_repeat.differing > 0
    assert [r.equal for r in s.repeats] == [False, True, True]
    assert result.failure.startswith("dQ not bitwise equal over two runs of the deterministic backward: ")
    assert d["bitwise_repeat_failed"] == "dQ" and not d["passed"]
    # the same rung asked for nothing deterministic: checked once, no bits compared
    plain = check.check_backward_problem(variant, gradcheck.GradShape(g.problem.plain()), module, seed=0, device="cpu")
    assert plain.passed and plain.repeats is None


def test_bitwise_means_bits():
    from lab.measure import gradcheck

    a = torch.tensor([0.0, 1.0, float("nan")])
    assert gradcheck.bitwise_repeat("dQ", a, a.clone()).equal   # NaN equals itself bit for bit
    r = gradcheck.bitwise_repeat("dK", a, torch.tensor([-0.0, 1.0, float("nan")]))   # -0.0 == 0.0, not the same bits
    assert not r.equal and r.differing == 1 and r.max_abs_diff == 0.0


def _deterministic_builtin() -> str:
    """A built-in rung with the deterministic mode, as the CLI names it (found in the registry)."""
    from lab.ladder.registry import builtin

    return "builtin:" + next(v.id for v in builtin() if v.deterministic)


def _one_line_refusal(res, *messages):
    refused(res, *messages)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize("command", [["check"], ["check", "--shape", "1,2,64,64"], ["bench", "--no-baselines", "--shape", "1,2,64,64"],
                                     ["profile", "--no-ncu", "--shape", "1,2,64,64"],
                                     ["sweep", "--shape", "1,2,64,64", "--no-baselines"]])
def test_deterministic_of_a_rung_without_it_exits_2_in_one_line(command, tmp_path):
    """b1 has a backward but no deterministic mode: refused before anything is built or run (no GPU here)."""
    res = lab(*command, "--variant", "b1", "--mode", "bwd", "--deterministic", env={"LAB_PROFILES": str(tmp_path)})
    _one_line_refusal(res, "b1 has no deterministic backward (--deterministic)", "deterministic = true")
    assert not any(tmp_path.iterdir())   # nothing half-written


@pytest.mark.parametrize("command", [["check"], ["bench", "--no-baselines"], ["sweep", "--shape", "1,2,64,64"]])
def test_deterministic_needs_a_backward_mode(command):
    res = lab(*command, "--variant", _deterministic_builtin(), "--deterministic", "--mode", "fwd")
    _one_line_refusal(res, "--deterministic is a mode of the backward", "--mode bwd or fwd+bwd")


def test_a_sweep_row_says_whether_its_backward_was_deterministic():
    from lab.measure.sweep import base_row
    from lab.measure.sweepplan import Cell
    from lab.store.sweeps import COLUMNS

    p = Problem(1, 2, 64, 64, 64, False, "float16", deterministic=True)
    rung_row, sdpa_row = base_row(Cell("b1", p, "bwd")), base_row(Cell("sdpa-cudnn", p, "bwd"))
    assert rung_row["deterministic"] is True and sdpa_row["deterministic"] is False   # SDPA runs torch's default
    assert rung_row["label"] == sdpa_row["label"] == "B1-H2-N64-D64-float16-deterministic"   # ratios pair them
    assert base_row(Cell("b1", p.plain(), "bwd"))["deterministic"] is False and "deterministic" in COLUMNS


def test_a_deterministic_sweep_plan_asks_every_problem():
    from lab import sweeping

    spec = dict(variant_spec=_deterministic_builtin(), shapes=["1,2,64,64"], preset=None, batch_spec=None, heads_kv_spec=None,
                causal=None, dtype_spec="float16", mode_spec="bwd", timing="events", baseline_spec="sdpa-cudnn",
                no_baselines=False, reps=4, warmup=1, cell_budget_s=0.4, shard_spec=None, yes=False, command="",
                name=None, passes=1)
    plan = sweeping.plan_from_specs(**spec, deterministic=True)
    assert all(p.deterministic for p in plan.problems) and plan.key() != sweeping.plan_from_specs(**spec).key()
    from lab.measure.sweepplan import Plan

    assert Plan.from_dict(plan.to_dict()).problems == plan.problems


# ---------------------------------------------------------------------------------------------
# The commands: a rung without a backward is bad input; variants shows the column
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["check"], ["bench", "--no-baselines"], ["profile", "--no-ncu"]])
def test_asking_the_backward_of_a_rung_without_one_exits_2(command):
    args = [*command, "--variant", "b3", "--mode", "bwd", "--shape", "1,2,64,64"]
    refused(lab(*args), "b3 has no backward", "backward = true")


def test_tune_of_a_backward_refuses_what_it_cannot_tune():
    builtin_rung = next(p.stem.split("_")[0] for p in sorted((ROOT / "kernels").glob("v*_*.cu")))
    refused(lab("tune", "--variant", f"builtin:{builtin_rung}", "--mode", "bwd"), "has no backward")
    refused(lab("tune", "--variant", "b1", "--mode", "bwd", "--shape", "1,2,64,64"), "b1 declares no tuning candidates")


def test_a_sweep_row_says_unsupported_with_the_reason(backward_ws):
    from lab.measure.sweep import GpuMeasurer
    from lab.measure.sweepplan import Cell

    class Plan:
        rungs = {"b3": ["float16"]}

    measurer = object.__new__(GpuMeasurer)   # no GPU here: only the rung's refusal is exercised
    measurer.plan, measurer._gates, measurer.log = Plan(), {}, lambda s: None
    cell = Cell("b3", Problem(1, 2, 64, 64, 64, False, "float16"), "bwd")
    [row] = measurer(cell)
    assert row["status"] == "unsupported" and "b3 has no backward" in row["reason"] and row["mode"] == "bwd"


def test_variants_shows_which_rungs_have_a_backward():
    res = lab("variants", "--json")
    assert res.returncode == 0, res.stderr
    by_id = {v["id"]: v for v in json.loads(res.stdout)}
    assert by_id["b1"]["backward"] and by_id["b1"]["gqa"] and not by_id["b3"]["backward"]
    table = lab("variants").stdout.splitlines()
    header = next(line.split() for line in table if line.split()[:1] == ["id"])
    rows = {line.split()[0]: dict(zip(header, line.split())) for line in table if line.split()[:1] in (["b1"], ["b3"])}
    assert (rows["b1"]["bwd"], rows["b1"]["GQA"], rows["b3"]["bwd"]) == ("yes", "yes", "no"), table
    assert rows["b1"]["det"] == "no" and not by_id["b1"]["deterministic"]
    det = json.loads(lab("variants", _deterministic_builtin(), "--json").stdout)[0]
    assert det["deterministic"] and det["backward"]


def test_the_profilers_child_names_its_range_by_mode():
    from lab.measure.target import range_name
    from lab.pipeline import target_argv

    assert range_name("b1", "B1-H2-N64-D64-float16") == "lab b1 B1-H2-N64-D64-float16"   # the forward's, as stored
    assert range_name("b1", "B1-H2-N64-D64-float16", "bwd") == "lab b1 B1-H2-N64-D64-float16 bwd"

    class V:
        id, origin, parts = "b1", "workspace", ()   # a stand-in for a Variant: a rung, not a pair

    argv = target_argv(V(), Problem(1, 2, 64, 64, 64, True, "float16", 1), mode="fwd+bwd")
    assert argv[argv.index("--problem") + 1] == "B1-H2kv1-N64-D64-causal-float16"
    assert argv[argv.index("--mode") + 1] == "fwd+bwd"


def test_a_gradient_that_is_zero_in_float64_keeps_a_rounding_floor():
    """One key: P = 1, so dQ and dK are exactly zero in float64 and SDPA may be exact too; a correct
    kernel's rounding residue must still pass, on the scale of the gradients beside it (dV = dO)."""
    from lab.measure import gradcheck

    zero = torch.zeros(1, 1, 1, 8, dtype=torch.float64)
    ref = {"O": torch.ones(1, 1, 1, 8, dtype=torch.float64), "LSE": torch.zeros(1, 1, 1, dtype=torch.float64),
           "dQ": zero, "dK": zero, "dV": torch.full((1, 1, 1, 8), 3.0, dtype=torch.float64)}
    tol = gradcheck.tolerances({name: 0.0 for name in gradcheck.TENSORS}, ref, "float16", 1e-4)
    eps16 = torch.finfo(torch.float16).eps
    assert tol["dQ"] == tol["dK"] == tol["dV"] == pytest.approx(eps16 * 3.0) and tol["O"] == pytest.approx(eps16)
    assert gradcheck.judge_tensor("dK", torch.full((1, 1, 1, 8), 1e-6), zero, tol["dK"]).passed
    assert not gradcheck.judge_tensor("dK", torch.full((1, 1, 1, 8), 0.1), zero, tol["dK"]).passed

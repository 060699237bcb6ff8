"""Forward+backward pairings on the CPU (lab.ladder.pairing): `F+B` names F's forward feeding B's
backward as one rung of the registry, checked, timed and stored as any rung is. Python rungs of
tests/fixtures/pairing_ws: p1 writes the LSE (right), p2 is p1 with its LSE 0.05 too high (O right),
p3 has a backward (right), p4 writes no LSE, p5 is a BNHD forward, p6 a backward of head dim 256.
Also the forward's own LSE check of a writes_lse rung (`lab check --mode fwd`) and the LSE shape the
one call path gives a CUDA rung. The GPU side: tests/test_pairing_gpu.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import lab_here
from lab.errors import LabError
from lab.measure.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
WS = ROOT / "tests" / "fixtures" / "pairing_ws"


@pytest.fixture
def pairing_ws(monkeypatch):
    from lab.ladder import registry, workspace

    monkeypatch.setenv(workspace.ENV, str(WS))
    return registry


def lab(*args):
    return lab_here(*args, cwd=ROOT, env={"LAB_WORKSPACE": str(WS)})


def refused(res, *messages):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    for m in messages:
        assert m in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.startswith("error")]) <= 1, res.stderr


# ---------------------------------------------------------------------------------------------
# The registry: a pair is a rung; a bad pairing is one line, exit 2
# ---------------------------------------------------------------------------------------------

def test_a_pair_is_a_rung_of_the_one_registry(pairing_ws):
    pair = pairing_ws.get("p1+p3")
    p1, p3 = pairing_ws.get("p1"), pairing_ws.get("p3")
    assert pair.id == "p1+p3" and pair.kind == "pair" and pair.parts == (p1, p3)
    assert pair.backward and pair.writes_lse and pair.gqa and pair.layout == "BHND"
    assert pair.dtypes == p1.dtypes and pair.head_dims == p1.head_dims
    assert pair.sources == (p1.source, p3.source) and pair.label() == "p1+p3"
    assert pairing_ws.ref(pair) == "p1+p3" and pairing_ws.get(pairing_ws.ref(pair)) == pair   # a child finds it
    assert pairing_ws.source_label(pair) == "kernels/p1_lse.py + kernels/p3_backward.py"
    assert [v.id for v in pairing_ws.select("p1+p3,p3")] == ["p1+p3", "p3"]
    assert pairing_ws.rungs_of(pairing_ws.select("p1+p3,p3,p2+p3")) == [p1, p3, pairing_ws.get("p2")]
    assert pair.to_dict()["pair"] == ["p1", "p3"] and p1.to_dict()["pair"] is None
    # a part a workspace shadows is reached as any rung is
    builtin_backward = next(v for v in pairing_ws.builtin() if v.backward)
    mixed = pairing_ws.get(f"p1+builtin:{builtin_backward.id}")
    assert mixed.parts[1] == builtin_backward and mixed.origin == "workspace"
    assert mixed.dtypes == tuple(d for d in p1.dtypes if d in builtin_backward.dtypes)


@pytest.mark.parametrize("spec, message", [
    ("p4+p3", "p4+p3: p4's forward writes no row log-sum-exp"),
    ("p1+p4", "p1+p4: p4 has no backward"),
    ("p1+p2", "p1+p2: p2 has no backward"),
    ("p1+nope", "p1+nope: unknown variant 'nope'"),
    ("p5+p3", "p5 takes BNHD inputs and p3 BHND"),
    ("p1+p6", "p1+p6: no head dim in common"),
    ("p1+p3+p3", "bad pairing 'p1+p3+p3'"),
    ("+p3", "bad pairing '+p3'"),
])
def test_a_bad_pairing_is_one_line_and_exit_2(pairing_ws, spec, message):
    with pytest.raises(LabError) as e:
        pairing_ws.get(spec)
    assert message in str(e.value) and "\n" not in str(e.value)
    for command in (["check", "--mode", "bwd"], ["bench", "--no-baselines", "--mode", "fwd+bwd"],
                    ["profile", "--no-ncu", "--mode", "fwd+bwd"], ["sweep", "--mode", "bwd", "--shape", "1,2,64,64"],
                    ["tune", "--mode", "bwd"]):
        refused(lab(*command, "--variant", spec), message)


def test_tune_names_the_parts_to_tune_instead():
    refused(lab("tune", "--variant", "p1+p3", "--mode", "bwd", "--shape", "1,2,64,64"),
            "p1+p3 pairs two rungs", "lab tune --variant p1", "lab tune --variant p3 --mode bwd")


def test_a_pair_refuses_a_problem_either_part_cannot_run(pairing_ws):
    from lab.measure.problem import check_supported

    pair = pairing_ws.get("p1+p3")
    check_supported(pair, Problem(1, 4, 64, 64, 64, False, "float16", 2))   # both GQA
    only_p1 = dataclasses.replace(pairing_ws.get("p3"), gqa=False)
    with pytest.raises(LabError, match="does not declare GQA"):
        from lab.ladder import pairing

        check_supported(pairing.pair(pairing_ws.get("p1"), only_p1), Problem(1, 4, 64, 64, 64, False, "float16", 2))


# ---------------------------------------------------------------------------------------------
# The one call path and the checks, on CPU tensors
# ---------------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")


def _built(registry, spec, monkeypatch):
    """lab.ladder.build.build of a pair of python rungs, without the GPU it asks for."""
    from lab.ladder import build

    monkeypatch.setattr(build, "require_cuda_torch", lambda *a, **k: None)
    return registry.get(spec), build.build(registry.get(spec))


def _sdpa_grads(q, k, v, dout, causal, scale):
    qg, kg, vg = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale, **gqa)
    return (o, *torch.autograd.grad(o, (qg, kg, vg), dout.double()))


def test_the_build_of_a_pair_is_its_parts(pairing_ws, monkeypatch):
    from lab.ladder import pairing

    pair, built = _built(pairing_ws, "p1+p3", monkeypatch)
    assert isinstance(built.module, pairing.PairedModule) and built.variant_id == "p1+p3"
    assert built.module.forward_module.variant.id == "p1" and built.module.backward_module.variant.id == "p3"
    assert "+" in built.cache_key and built.ptxas == []


@pytest.mark.parametrize("causal", [False, True])
def test_the_pairs_modes_are_the_forwards_forward_and_the_backwards_backward(pairing_ws, monkeypatch, causal):
    from lab.measure.call import make_call, rung, upstream_grad
    from lab.measure.problem import make_inputs, softmax_scale

    p = Problem(2, 4, 33, 47, 32, causal, "float32", 2)
    q, k, v = make_inputs(p, seed=3, device="cpu")
    dout = upstream_grad(q)
    o_ref, *grads_ref = _sdpa_grads(q, k, v, dout, causal, softmax_scale(p))
    pair, built = _built(pairing_ws, "p1+p3", monkeypatch)
    att = rung(pair, built.module, p)
    assert att.name == "p1+p3" and att.supports("bwd")
    torch.testing.assert_close(make_call(att, q, k, v, "fwd")().double(), o_ref, rtol=1e-5, atol=1e-5)
    for mode in ("bwd", "fwd+bwd"):
        for g, r in zip(make_call(att, q, k, v, mode)(), grads_ref):
            torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-4)
    # the backward reads the pair's forward's LSE, not its own rung's forward: p2's LSE is off, so
    # p2+p3's gradients are wrong while its O is right
    off, built_off = _built(pairing_ws, "p2+p3", monkeypatch)
    att_off = rung(off, built_off.module, p)
    torch.testing.assert_close(make_call(att_off, q, k, v, "fwd")().double(), o_ref, rtol=1e-5, atol=1e-5)
    for mode in ("bwd", "fwd+bwd"):
        dq = make_call(att_off, q, k, v, mode)()[0].double()
        assert not torch.allclose(dq, grads_ref[0], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("spec, passed, failed", [("p1+p3", True, []), ("p2+p3", False, ["LSE", "dQ", "dK", "dV"])])
def test_the_backward_check_of_a_pair(pairing_ws, monkeypatch, spec, passed, failed):
    from lab.measure import check, gradcheck

    pair, built = _built(pairing_ws, spec, monkeypatch)
    shape = gradcheck.GradShape(Problem(2, 3, 113, 203, 32, True, "float32"))
    s = check.check_backward_problem(pair, shape, built.module, seed=0, device="cpu")
    assert s.passed is passed and [t.name for t in s.tensors if not t.passed] == failed
    assert [t.name for t in s.tensors] == list(gradcheck.TENSORS)


@pytest.mark.parametrize("rung_id, passed", [("p1", True), ("p2", False), ("p1+p3", True), ("p2+p3", False)])
def test_the_forward_check_judges_the_lse_of_a_rung_that_writes_it(pairing_ws, monkeypatch, rung_id, passed):
    """`lab check --mode fwd` of a writes_lse rung (or a pair: its forward's) checks the LSE it writes
    for a backward against float64, as the backward's check does; its O alone is right either way."""
    from lab.measure import check

    variant, built = _built(pairing_ws, rung_id, monkeypatch)
    for problem in (Problem(2, 3, 113, 203, 32, True, "float32"), Problem(1, 4, 64, 97, 64, False, "float32", 2)):
        s = check.check_problem(variant, problem, built.module, seed=0, device="cpu")
        assert s.lse is not None and s.lse.name == "LSE" and s.output_passed
        assert s.passed is passed and s.lse.passed is passed and s.error is None
        result = check.CheckResult(variant.id, check.rule_for("float32"), [s])
        d = result.to_dict()
        assert d["lse_checked"] is True and s.to_dict()["lse"]["tensor"] == "LSE"
        if not passed:
            assert result.failure.startswith(f"LSE on {problem.label()}: max_abs_err ")
            assert "LSE FAILED" in result.summary()
            assert s.lse.max_abs_err == pytest.approx(0.05, rel=1e-3)


class _OffWithoutLse:
    """p1 (right with the LSE) whose forward without one, the call the timer makes, scales O by 1.01."""

    def __init__(self, module):
        self.module = module

    def forward(self, q, k, v, o, causal, scale, lse=None):
        self.module.forward(q, k, v, o, causal, scale, lse)
        if lse is None:
            o.mul_(1.01)


def test_the_forward_check_of_a_rung_that_writes_the_lse_judges_the_call_that_is_timed_too(pairing_ws, monkeypatch):
    """A writes_lse rung's forward is timed without the LSE: a kernel that takes another path then (v9's row sums by
    the tensor cores) is judged on both calls, and the failure names the one that is wrong."""
    from lab.measure import check

    variant, built = _built(pairing_ws, "p1", monkeypatch)
    problem = Problem(2, 3, 113, 203, 32, True, "float32")
    right = check.check_problem(variant, problem, built.module, seed=0, device="cpu")
    assert right.passed and right.o_call in ("without the LSE", "with the LSE") and right.to_dict()["o_call"]
    off = check.check_problem(variant, problem, _OffWithoutLse(built.module), seed=0, device="cpu")
    assert not off.passed and off.lse.passed and off.o_call == "without the LSE"
    assert off.rel_err == pytest.approx(0.01, rel=1e-2)
    failure = check.CheckResult(variant.id, check.rule_for("float32"), [off]).failure
    assert failure.startswith(f"O on {problem.label()} (without the LSE): rel_err "), failure


def test_a_forward_that_writes_no_lse_is_checked_on_o_alone(pairing_ws, monkeypatch):
    from lab.measure import check

    variant, built = _built(pairing_ws, "p4", monkeypatch)
    s = check.check_problem(variant, Problem(2, 3, 17, 17, 32, True, "float32"), built.module, seed=0, device="cpu")
    assert s.passed and s.lse is None and "lse" not in s.to_dict() and s.o_call is None
    assert "lse_checked" not in check.CheckResult("p4", "", [s]).to_dict()


def test_the_lse_a_cuda_rung_is_given_is_b_h_nq_in_either_layout(pairing_ws):
    """lab.measure.call's forward_lse allocates the contract's [B, H, Nq] whatever the rung's layout
    (Q's first three dims are (B, N, H) in BNHD)."""
    from lab.measure.call import lse_shape, rung

    seen = []

    class Extension:   # a CUDA rung's binding: forward(q, k, v, o, causal, scale, lse)
        def forward(self, q, k, v, o, causal, scale, lse=None):
            seen.append(tuple(lse.shape))

    p = Problem(2, 3, 5, 5, 8, False, "float32")
    for layout, q in (("BHND", torch.zeros(2, 3, 5, 8)), ("BNHD", torch.zeros(2, 5, 3, 8))):
        cuda = dataclasses.replace(pairing_ws.get("p1"), kind="cuda", layout=layout)
        o, lse = rung(cuda, Extension(), p).forward_lse(q, q, q)
        assert tuple(lse.shape) == lse_shape(q, layout) == (2, 3, 5)
    assert seen == [(2, 3, 5), (2, 3, 5)]


# ---------------------------------------------------------------------------------------------
# The one measurement: a pair's timed calls are held to the same checks
# ---------------------------------------------------------------------------------------------

def _timed_pair(registry, spec, monkeypatch, dev, p):
    """The pair as lab.measure.call makes it, each part's call also launching 0.5 ms on the simulated
    device of tests/test_timer.py."""
    from lab.measure.call import rung

    pair, built = _built(registry, spec, monkeypatch)
    att = rung(pair, built.module, p)

    def launching(fn):
        def call(*args):
            dev.launch(0.5)
            return fn(*args)
        return call
    return dataclasses.replace(att, forward=launching(att.forward), forward_lse=launching(att.forward_lse),
                               backward=launching(att.backward))


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd+bwd"])
def test_a_pair_is_timed_through_the_one_measurement_with_every_call_checked(pairing_ws, monkeypatch, mode):
    from test_timer import SimDevice

    from lab.measure.checked import Measurement, Workload
    from lab.measure.timed import WRONG_OUTPUT, TimingRefused

    p = Problem(1, 2, 16, 16, 8, dtype="float32")
    dev = SimDevice()
    workload = Workload(p, device="cpu")
    m = Measurement(_timed_pair(pairing_ws, "p1+p3", monkeypatch, dev, p), workload, mode)
    t = m.time(reps=6, warmup=2, device=dev)
    assert t.checks["outputs_verified"] == 6 + t.warmup and t.checks["input_sets"] == 3
    assert t.median >= (0.5 if mode != "fwd+bwd" else 1.0)
    if mode == "fwd":
        return   # p2's O is right: its forward is timed honestly
    # the backward on p2's LSE: every call's gradients are checked, the first wrong one refuses
    dev = SimDevice()
    m = Measurement(_timed_pair(pairing_ws, "p2+p3", monkeypatch, dev, p), workload, mode)
    with pytest.raises(TimingRefused) as e:
        m.time(reps=6, warmup=2, device=dev)
    assert e.value.status == WRONG_OUTPUT and "dQ" in e.value.reason


# ---------------------------------------------------------------------------------------------
# Stored runs and sweep rows name the pair
# ---------------------------------------------------------------------------------------------

def test_a_run_and_a_sweep_are_named_after_the_pair(pairing_ws, tmp_path):
    from lab.sweeping import plan_from_specs
    from lab.store import runs

    run_id = runs.new_run_id("p1+p3", Problem(1, 2, 64, 64, 64).label(), root=tmp_path)
    assert "-p1+p3-" in run_id
    with runs.create_run(run_id, root=tmp_path) as run:   # a store refuses an id it could not keep
        assert run.dir.is_dir() and run.final.name == run_id
    plan = plan_from_specs(variant_spec="p1+p3,p3", shapes=["1,2,64,64"], preset=None, batch_spec=None,
                           heads_kv_spec=None, causal="no", dtype_spec="float32", mode_spec="bwd,fwd+bwd",
                           timing="events", baseline_spec=None, no_baselines=True, reps=5, warmup=1,
                           cell_budget_s=0.4, shard_spec=None, yes=True, command="lab sweep", name="pairs")
    assert list(plan.rungs) == ["p1+p3", "p3"]
    assert {c.impl for c in plan.cells()} == {"p1+p3", "p3"}


def test_check_of_a_pair_through_the_cli_reaches_the_gate(pairing_ws, monkeypatch):
    """`lab check --variant p1+p3 --mode bwd`: the pair goes where a rung goes, its parts built (here
    on the CPU: the gate's device and build are the only stand-ins)."""
    from lab.measure import check

    calls = []
    real = check.check_backward_problem

    def on_cpu(variant, shape, module, seed=0, device="cuda"):
        calls.append(variant.id)
        return real(variant, shape, module, seed, device="cpu")

    monkeypatch.setattr(check, "check_backward_problem", on_cpu)
    monkeypatch.setattr(check, "require_gpu", lambda *a, **k: None)
    monkeypatch.setattr(check, "require_compute_capability", lambda *a, **k: None)
    from lab.ladder import build

    monkeypatch.setattr(build, "require_cuda_torch", lambda *a, **k: None)
    res = lab("check", "--variant", "p1+p3", "--mode", "bwd", "--shape", "1,2,33,47,32", "--dtype", "float32", "--json")
    assert res.returncode == 0, res.stderr
    [found] = json.loads(res.stdout)
    assert found["variant"] == "p1+p3" and found["passed"] and calls == ["p1+p3"]
    res = lab("check", "--variant", "p2+p3", "--mode", "bwd", "--shape", "1,2,33,47,32", "--dtype", "float32")
    assert res.returncode == 1 and "p2+p3 is wrong" in res.stderr


@pytest.mark.parametrize("causal", [False, True])
def test_the_lse_error_scale_is_the_same_chunk_by_chunk(monkeypatch, causal):
    """torch's own LSE error (the LSE's tolerance) is found a chunk of query rows at a time, so that a
    forward's long timed problem fits: the same number as over the whole problem at once."""
    from lab.measure import gradcheck

    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 300, 32, generator=gen).half(), torch.randn(2, 2, 257, 32, generator=gen).half()
    s = torch.matmul(q.double(), k.double().repeat_interleave(2, dim=1).transpose(-2, -1)) * 0.2
    if causal:
        s = s.masked_fill(torch.ones(300, 257, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.logsumexp(s, -1)
    whole = gradcheck.lse_error(q, k, causal, 0.2, ref)
    monkeypatch.setattr(gradcheck, "REFERENCE_CHUNK_BYTES", 2 * 4 * 257 * 6 * 7)   # 7 query rows a chunk
    assert gradcheck.lse_error(q, k, causal, 0.2, ref) == whole > 0


def test_a_sweeps_shared_verdict_of_a_pair_has_a_file_of_its_own(tmp_path):
    """lab.sweeping.Gates keeps one verdict file per (rung, dtype, mode): a pair p1+p3 and a rung whose id
    is p1_p3 must not share one."""
    from lab.sweeping import Gates

    gates = Gates(lambda *a: {"passed": True}, {}, tmp_path)
    files = {Gates.key(rid, "float16", mode): gates._files(Gates.key(rid, "float16", mode))
             for rid in ("p1+p3", "p1_p3") for mode in ("bwd", "fwd+bwd")}
    assert len({done for done, _ in files.values()}) == 4


def test_variants_shows_a_pair_and_each_of_its_parts():
    res = lab("variants", "p1+p3")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "p1+p3: p1's forward + p3's backward"
    assert lines[1].startswith("a pair: p1's forward, then p3's backward on its O and LSE; dtypes float16, bfloat16, float32")
    assert '  id = "p1"' in lines and '  id = "p3"' in lines and "  writes_lse = true" in lines
    refused(lab("variants", "p4+p3"), "p4's forward writes no row log-sum-exp")

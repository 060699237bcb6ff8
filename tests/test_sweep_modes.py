"""The sweep's implementations and modes on CPU tensors (no GPU needed): eager standard attention
and SDPA agree in forward and backward, causal, GQA included; bwd and fwd+bwd give the same
gradients; a rung without a backward is refused as such."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from lab.measure.baselines import attention  # noqa: E402
from lab.measure.call import make_call  # noqa: E402
from lab.measure.problem import Problem, make_inputs  # noqa: E402


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_kv", [4, 2, 1])
def test_standard_attention_matches_sdpa_forward_and_backward(causal, heads_kv):
    p = Problem(2, 4, 33, 33, 16, causal, "float32", heads_kv)
    q, k, v = make_inputs(p, seed=3, device="cpu")
    std = attention("standard", p, device="cpu")
    sdpa = attention("sdpa-math", p, device="cpu")
    with sdpa.context():
        o_sdpa = make_call(sdpa, q, k, v, "fwd")()
        g_sdpa = make_call(sdpa, q, k, v, "fwd+bwd")()
    o_std = make_call(std, q, k, v, "fwd")()
    assert o_std.shape == q.shape
    torch.testing.assert_close(o_std, o_sdpa, rtol=1e-5, atol=1e-5)
    g_std = make_call(std, q, k, v, "fwd+bwd")()
    assert g_std[1].shape == k.shape   # GQA: K/V gradients have K/V's heads
    for a, b in zip(g_std, g_sdpa):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_bwd_alone_equals_the_backward_of_fwd_bwd_and_repeats():
    p = Problem(1, 2, 20, 20, 8, True, "float32")
    q, k, v = make_inputs(p, seed=1, device="cpu")
    std = attention("standard", p, device="cpu")
    bwd = make_call(std, q, k, v, "bwd")
    first, second = bwd(), bwd()   # retain_graph: repeatable, and no .grad accumulation between calls
    both = make_call(std, q, k, v, "fwd+bwd")()
    for a, b, c in zip(first, second, both):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)


def test_unknown_baseline_is_bad_input():
    from lab.errors import LabError

    with pytest.raises(LabError):
        attention("sdpa-nope", Problem(1, 1, 8, 8, 8), device="cpu")


def test_sdpa_context_factory_enters_once_per_timing_method():
    p = Problem(1, 1, 8, 8, 8)
    sdpa = attention("sdpa-math", p, device="cpu")
    for _ in range(2):   # events, then graph: a fresh context each time
        with sdpa.context():
            pass


def test_a_call_that_raises_is_labelled_by_what_raised_not_by_the_timing_method():
    """A RuntimeError under graph timing was called "CUDA graph capture failed" whatever raised it; the
    timer refuses capture failures itself (graph-capture-failed), so a backend refusing the problem is
    `unavailable` by either method, and a rung's error is `failed`, named by its type and first line."""
    import warnings

    from lab.measure.bench import EVENTS, GRAPH
    from lab.measure.sweep import raised_row
    from lab.measure.sweepplan import Cell

    p = Problem(1, 2, 64, 64, 64, False, "float32")
    q, k, v = make_inputs(p, seed=0, device="cpu")
    backend = attention("sdpa-efficient", p, device="cpu")   # no CPU kernel: PyTorch refuses the call
    with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError) as refusal:
        warnings.simplefilter("always")
        with backend.context():
            make_call(backend, q, k, v, "fwd")()
    messages = [str(w.message) for w in caught]
    crash = RuntimeError("CUDA error: an illegal memory access was encountered\n"
                         "CUDA kernel errors might be asynchronously reported at some other API call")
    for method in (EVENTS, GRAPH):
        row = raised_row(Cell("sdpa-efficient", p, "fwd"), method, refusal.value, messages, is_rung=False)
        assert (row["status"], row["timing"]) == ("unavailable", method)
        assert row["reason"] == str(refusal.value).strip().splitlines()[0] and "capture" not in row["reason"]
        row = raised_row(Cell("my-rung", p, "fwd"), method, crash, [], is_rung=True)
        assert (row["status"], row["timing"]) == ("failed", method)
        assert row["reason"] == "RuntimeError: CUDA error: an illegal memory access was encountered"

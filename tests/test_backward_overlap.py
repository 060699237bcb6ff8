"""A backward's kernel hears a backward's levers (lab.analysis.overlap, the latency and compute rules):
its output is dK and dV (stored by TMA or not), its dQ is added to an fp32 accumulator (in bulk by TMA, or
per element), and ping-pong between warpgroups, a forward's lever, is never proposed: FlashAttention-3's
backward splits each K/V tile across its consumer warpgroups, which overlap the GEMMs without taking turns.
On real reports whose answer we know: cuDNN's sm90 backward (tests/fixtures/ncu/sdpa-cudnn-bwd, FA3's
design: dK/dV by UTMASTG, dQ by UTMAREDG), v8's two shipped backward profiles (dK/dV by STG; dQ by REDG,
then by UBLKRED), and the forward reports, which keep their forward advice. How the lab knows a kernel is a
backward's (lab.analysis.direction): the run's mode, else the lab's NVTX range, else the kernel's name."""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES, FIXTURES

from lab.analysis import findings as analysis
from lab.analysis import overlap as ov
from lab.analysis.direction import direction
from lab.measure.target import range_name

CUDNN_BWD = FIXTURES / "ncu" / "sdpa-cudnn-bwd.ncu-rep.xz"
CUDNN_FWD = FIXTURES / "ncu" / "sdpa-detailed.ncu-rep.xz"
V8_REDG = "20261127-031243-v8-B4-H16-N4096-D128-float16"     # bwd_kernel: dK/dV by STG, dQ by REDG
V8_BULK = "20261127-091525-v8-B2-H16-N8192-D128-float16"     # bwd_kernel_tdq: dK/dV by STG, dQ by UBLKRED
V9_FWD = "20261127-135157-v9-B32-H16-N512-D128-float16"      # persistent ping-pong forward, O by UTMASTG
FORWARD_ONLY = ("O stored", "O with TMA", "the output stored", "softmax", "FP8")


def _shipped(run_id: str, mode: str | None = "manifest"):
    run = EXAMPLES / run_id
    if not (run / "profile.ncu-rep.xz").exists():
        pytest.skip(f"shipped run {run_id} not under profiles/examples/")
    man = json.loads((run / "manifest.json").read_text())
    return analysis.analyze_report(run / "profile.ncu-rep.xz", problem=man["problem"],
                                   mode=man.get("mode") if mode == "manifest" else mode)


def _left_items(advice: str) -> str:
    """The items of an advice's 'Left:' list, without the notes after it."""
    return advice.partition(" Left: ")[2].split(". ")[0]


def _facts(run_id: str, index: int):
    """The KernelFacts the rules read of kernel `index` of a shipped run (as lab.analysis.findings builds
    them), for the next steps of a verdict that run's kernel does not reach."""
    from lab.analysis.lines import report_lines
    from lab.analysis.metrics import kernel_facts, plain
    from lab.profilers import ncu

    rep = EXAMPLES / run_id / "profile.ncu-rep.xz"
    if not rep.exists():
        pytest.skip(f"shipped run {run_id} not under profiles/examples/")
    man = json.loads((EXAMPLES / run_id / "manifest.json").read_text())
    row = ncu.load_report(rep).to_dict("records")[index]
    c = kernel_facts(row)
    c.direction = direction(plain(row.get("kernel")), man.get("mode"), plain(row.get("nvtx")))
    c.overlap = ov.techniques(c, report_lines(rep)[index])
    return c


@pytest.fixture(scope="module")
def cudnn_bwd():
    """cuDNN's sm90 backward as `lab analyze FILE` reads it: no mode, an NVTX range without one."""
    return next(a for a in analysis.analyze_report(CUDNN_BWD) if "flash_bprop_wgmma" in a.kernel)


def test_cudnns_backward_is_told_a_backwards_levers_not_ping_pong(cudnn_bwd):
    a = cudnn_bwd
    assert a.derived["backward_from"] == "its name ('bprop')"   # its range, `lab sdpa-cudnn-bwd <shape>`, has no mode
    shown = a.derived["overlap"]
    assert shown[ov.TMA_STORE]["name"] == "dK/dV stored by TMA" and shown[ov.TMA_STORE]["present"] is True
    assert "UTMASTG" in shown[ov.TMA_STORE]["evidence"]
    assert shown[ov.DQ_REDUCE]["present"] is True and "UTMAREDG" in shown[ov.DQ_REDUCE]["evidence"]
    assert shown[ov.PINGPONG]["present"] is False and "FlashAttention-3" in shown[ov.PINGPONG]["moot"]
    lat = next(f for f in a.findings if f.cls == "latency-bound")
    step, done = ov.split_advice(lat.advice)
    assert "dK/dV stored by TMA (UTMASTG" in done and "dQ added by TMA bulk reductions (UTMAREDG" in done
    assert "output stored by TMA" not in done
    left = _left_items(lat.advice)
    assert left and "ping-pong" not in left and "Q/dO" in left
    # why not, briefly, and how the lab knew the kernel is a backward's
    assert "Not ping-pong, a forward's lever: FlashAttention-3's backward" in step and "without taking turns" in step
    assert "this kernel is a backward's by its name ('bprop')." in step
    for f in a.findings:
        assert not any(w in f.advice for w in FORWARD_ONLY), (f.cls, f.advice)
        assert "ping-pong" not in _left_items(f.advice), (f.cls, f.advice)
    line = analysis._overlap_line(shown)
    assert "overlap in the report: dK/dV stored by TMA, dQ added by TMA bulk reductions" in line
    assert "not a backward's lever: ping-pong between warpgroups" in line


def test_the_runs_mode_decides_before_the_name():
    got = analysis.analyze_report(CUDNN_BWD, mode="bwd")
    # every kernel of a bwd run is a backward's; its elementwise passes keep the plain reading
    assert {a.derived["backward_from"] for a in got} == {"the run's mode (bwd)"}
    for a in got:
        assert (ov.DQ_REDUCE in a.derived["overlap"]) == (a.derived["role"] != "elementwise"), a.kernel
    pre = next(a for a in got if "compute_dot_do_o" in a.kernel).derived["overlap"]
    assert pre[ov.TMA_STORE]["name"] == "output stored by TMA" and not pre[ov.PINGPONG].get("moot")


@pytest.mark.parametrize("run_id, dq_present, dq_op", [(V8_REDG, False, "REDG"), (V8_BULK, True, "UBLKRED")])
def test_v8s_backward_reads_dk_dv_and_dq_from_its_sass(run_id, dq_present, dq_op):
    got = _shipped(run_id)
    main = analysis.main_kernel(got)
    assert main.derived["backward_from"] == "the run's mode (bwd)"
    shown = main.derived["overlap"]
    assert shown[ov.TMA_STORE]["name"] == "dK/dV stored by TMA" and shown[ov.TMA_STORE]["present"] is False
    assert "dK and dV leave by STG" in shown[ov.TMA_STORE]["evidence"]
    assert shown[ov.DQ_REDUCE]["present"] is dq_present and dq_op in shown[ov.DQ_REDUCE]["evidence"]
    assert shown[ov.PINGPONG]["present"] is False and shown[ov.PINGPONG]["moot"]
    for a in got:
        for f in a.findings:
            assert "ping-pong" not in f.advice and not any(w in f.advice for w in FORWARD_ONLY), (f.cls, f.advice)
    # its report read alone (lab analyze FILE): the mode its NVTX range ends in
    alone = analysis.main_kernel(_shipped(run_id, mode=None))
    assert alone.derived["backward_from"] == "its NVTX range's mode (bwd)"
    assert alone.derived["overlap"] == shown


def test_v8s_next_steps_would_name_a_backwards_levers():
    """v8's verdicts (memory-bound, reduction traffic, operand feed) do not reach the overlap steps; what
    they would say of its main kernels, read from their reports: dQ in bulk where it goes by REDG, dK/dV
    by TMA, persistent CTAs over K/V tiles; what is there is not proposed; never ping-pong or FP8."""
    from lab.analysis.rules.compute_bound import tensor_pipe_steps
    from lab.analysis.rules.latency_bound import wgmma_overlap_steps

    redg = wgmma_overlap_steps(_facts(V8_REDG, 1), True)
    left = _left_items(redg)
    assert "dK and dV stored with TMA" in left and "TMA bulk reduction" in left and "next K/V tile" in left
    assert "wgmma.wait_group" not in left   # its WARPGROUP.DEPBAR.LE gsb0, 0x1 shows the GEMMs kept in flight
    assert "Already in the report: a wgmma group kept in flight" in redg
    assert "ping-pong" not in left and "this kernel is a backward's by the run's mode (bwd)." in redg
    bulk_c = _facts(V8_BULK, 1)
    bulk = wgmma_overlap_steps(bulk_c, True)
    assert "TMA bulk reduction" not in _left_items(bulk) and "dQ added by TMA bulk reductions (UBLKRED" in bulk
    pipe = tensor_pipe_steps(bulk_c)
    assert "ping-pong" not in _left_items(pipe) and "FP8" not in pipe and "Not ping-pong" in pipe
    for text in (redg, bulk, pipe):
        assert not any(w in text for w in FORWARD_ONLY), text


def test_forward_kernels_keep_their_forward_reading():
    """v9's forward and cuDNN's sm90 forward: no backward_from, the output stored by TMA, no dQ, ping-pong
    shown as a technique they have (test_overlap_analysis holds their advice)."""
    v9 = analysis.main_kernel(_shipped(V9_FWD))
    fprop = next(a for a in analysis.analyze_report(CUDNN_FWD) if "sdpa_sm90_flash_fprop" in a.kernel)
    for a in (v9, fprop):
        assert "backward_from" not in a.derived and "backward_from" not in a.to_dict()
        shown = a.derived["overlap"]
        assert ov.DQ_REDUCE not in shown and shown[ov.TMA_STORE]["name"] == "output stored by TMA"
        assert shown[ov.PINGPONG]["present"] is True and not shown[ov.PINGPONG].get("moot")


def test_direction_reads_the_lab_target_range_and_falls_back_on_the_name():
    """A user's own rung with a plain kernel name is a backward's by the run's mode, or by the mode the lab's
    target writes at the end of its NVTX range (as ncu lists it: '<default domain>: ...'); another tool's
    range without one says nothing, and the name decides, as it does in a fwd+bwd run."""
    plain_name = "void my_attention_kernel<128>(const __half *, __half *)"
    bwd_range = "<default domain>: " + range_name("myrung", "B1-H8-N1024-D64-float16", "bwd")
    both_range = "<default domain>: " + range_name("myrung", "B1-H8-N1024-D64-float16", "fwd+bwd")
    fwd_range = "<default domain>: " + range_name("myrung", "B1-H8-N1024-D64-float16", "fwd")
    assert direction(plain_name, "bwd", fwd_range).told_by == "the run's mode (bwd)"
    assert direction("flash_bwd_kernel", "fwd", bwd_range).backward is False
    d = direction(plain_name, None, bwd_range)
    assert d.backward and d.told_by == "its NVTX range's mode (bwd)"
    d = direction(plain_name, None, both_range)
    assert not d.backward and d.told_by == "its name (no backward marker), in a fwd+bwd run"
    assert direction("flash_bwd_dq_dk_dv_loop_kernel", "fwd+bwd", None).told_by == "its name ('bwd'), in a fwd+bwd run"
    # cuDNN's recorded range names a baseline 'sdpa-cudnn-bwd' but ends in no mode: the name decides
    assert direction("convert_dq_to_16bits", None, "<default domain>: lab sdpa-cudnn-bwd B2-H8-N1024-D128-float16"
                     ).told_by == "its name ('convert_dq')"
    assert direction(plain_name, None, "<default domain>: lab sdpa-cudnn-bwd B2-H8-N1024-D128-float16").backward is False

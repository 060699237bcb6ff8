"""The backward's rules (lab/analysis/rules/reduction_traffic.py, register_pressure.py) on real reports
of backward kernels (tests/fixtures/ncu/*-bwd.ncu-rep.xz, recorded by tests/planted/record_bwd.sh):
SDPA's FlashAttention-2, cuDNN and memory-efficient backward passes, and a planted kernel whose dQ is
reduced with atomics beside the same work stored without them."""

from pathlib import Path

import pytest

from lab.analysis import findings as analysis

OURS = Path(__file__).resolve().parent / "fixtures" / "ncu"


def _kernels(name, mode=None):
    return analysis.analyze_report(OURS / f"{name}.ncu-rep.xz", mode=mode)


def _one(analyses, fragment):
    (a,) = [a for a in analyses if fragment in a.kernel]
    return a


def _found(a, cls):
    return next((f for f in a.findings if f.cls == cls), None)


@pytest.fixture(scope="module")
def flash():
    return _kernels("sdpa-flash-bwd", mode="bwd")


def test_planted_atomics_name_the_reduction_traffic_and_plain_stores_do_not():
    got = _kernels("planted-bwd")
    atomics, private = _one(got, "planted_dq_atomics"), _one(got, "planted_dq_private")
    f = _found(atomics, "reduction-traffic")
    assert f is not None and "REDG" in f.title
    # the evidence is Nsight's own counters: reductions' share of L2's sectors, as the metrics say
    ev = f.evidence
    assert ev["lab__reduction_share_of_l2_sectors_pct"] == pytest.approx(
        100 * ev["lts__t_sectors_srcunit_tex_op_red.sum"] / ev["lts__t_sectors.sum"], abs=0.1)
    assert ev["sass__inst_executed_per_opcode[REDG]"] == ev["smsp__inst_executed_op_global_red.sum"] > 0
    assert f.lines and f.lines[0]["file"] == "planted_bwd.cu"   # the atomicAdd line of the planted source
    assert "K/V" not in f.advice   # not a backward by its name: general advice
    assert _found(private, "reduction-traffic") is None


def test_fa2_main_loop_is_register_pressure_and_dq_atomics(flash):
    main = _one(flash, "flash_bwd_dq_dk_dv_loop")
    rp = _found(main, "register-pressure")
    assert rp is not None and "255 registers" in rp.title and rp.evidence["sass__inst_executed_register_spilling"] > 0
    # the cause is listed before the symptom it explains: registers limit the occupancy
    classes = [f.cls for f in main.findings]
    assert classes.index("register-pressure") < classes.index("occupancy-limited")
    assert "dK/dV" in rp.advice
    red = _found(main, "reduction-traffic")
    assert red is not None and "REDG" in red.title and "bulk reduction" in red.advice
    assert red.lines   # the REDG instructions, by PC (the module has no line info)


def test_fa2_kernels_without_atomics_or_spills_name_neither(flash):
    for frag in ("flash_bwd_dot_do_o_kernel", "flash_bwd_convert_dq_kernel"):
        a = _one(flash, frag)
        assert not {"reduction-traffic", "register-pressure"} & {f.cls for f in a.findings}, frag


def test_backward_time_shares_sum_to_the_whole(flash):
    shares = [a.derived["duration_share_pct"] for a in flash]
    assert sum(shares) == pytest.approx(100.0, abs=0.05)
    main = _one(flash, "flash_bwd_dq_dk_dv_loop")
    assert main.derived["duration_share_pct"] == max(shares)   # the main loop takes most of the time
    assert main.derived["duration_share_pct"] == pytest.approx(
        100 * main.duration_ns / sum(a.duration_ns for a in flash), abs=0.01)


def test_cudnn_bprop_is_judged_as_its_design():
    got = _kernels("sdpa-cudnn-bwd", mode="bwd")
    bprop = _one(got, "flash_bprop_wgmma")
    # warp-specialised wgmma: few warps by design, occupancy ranked last with no estimate
    occ = _found(bprop, "occupancy-limited")
    assert occ is not None and "by design" in occ.title and occ.est_speedup_pct is None
    assert bprop.findings[-1].cls == "occupancy-limited"
    # its dQ goes through TMA bulk reductions: named as such, with the advice for a kernel that already has them
    red = _found(bprop, "reduction-traffic")
    assert red is not None and "UTMAREDG" in red.title and "already reduced in bulk" in red.advice
    # a few spill instructions per warp are no verdict: TMA's traffic counts on the global side
    assert bprop.bottleneck not in ("register-pressure", "local-memory")


def test_efficient_backward_spills_name_register_pressure():
    got = _kernels("sdpa-efficient-bwd")   # no mode: the kernel's name says backward
    main = _one(got, "fmha_cutlassB")
    rp = _found(main, "register-pressure")
    assert rp is not None and rp.evidence["sass__inst_executed_register_spilling"] > 1e6 and "dK/dV" in rp.advice
    assert _found(main, "reduction-traffic") is None   # a handful of ATOMs (its semaphores) are no traffic


def test_forward_mode_hears_no_backward_advice(flash):
    fwd = _kernels("sdpa-flash-bwd", mode="fwd")
    rp = _found(_one(fwd, "flash_bwd_dq_dk_dv_loop"), "register-pressure")
    assert rp is not None and "dK/dV" not in rp.advice


def test_analyze_json_gives_each_kernel_its_share_of_the_time():
    import json

    from click.testing import CliRunner

    from lab.cli import main

    res = CliRunner().invoke(main, ["analyze", str(OURS / "sdpa-cudnn-bwd.ncu-rep.xz"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    total = sum(k["duration_ns"] for k in out)
    for k in out:
        assert k["duration_share_pct"] == pytest.approx(100 * k["duration_ns"] / total, abs=0.01)
    bprop = next(k for k in out if "bprop" in k["kernel"])
    assert bprop["duration_share_pct"] == max(k["duration_share_pct"] for k in out)


def test_a_backward_kernel_is_held_against_the_backward_flops():
    """With the attention problem and mode bwd, a single-kernel report's problem TFLOP/s counts the
    backward's FLOPs (2.5x the forward's) and no forward minimum of DRAM bytes is applied to it."""
    from lab.measure.problem import Problem
    from lab.measure.rates import MODE_FLOP_FACTOR
    from lab.profilers import ncu

    problem = Problem(2, 8, 1024, 1024, 128, False, "float16")   # tests/planted/record_bwd.sh's shape
    path = OURS / "sdpa-flash-bwd.ncu-rep.xz"
    main = analysis.select_kernels(ncu.load_report(path), "dq_dk_dv_loop")
    (bwd,) = analysis.analyze_frame(main, ncu.rule_results(path), problem.to_dict(), mode="bwd")
    (fwd,) = analysis.analyze_frame(main, ncu.rule_results(path), problem.to_dict(), mode="fwd")
    assert bwd.derived["lab__problem_tflops"] == pytest.approx(
        MODE_FLOP_FACTOR["bwd"] * problem.forward_flops / bwd.duration_ns / 1e3, rel=1e-3)
    assert bwd.derived["lab__problem_tflops"] == pytest.approx(MODE_FLOP_FACTOR["bwd"] * fwd.derived["lab__problem_tflops"],
                                                            rel=1e-3)
    assert not any("minimum for Q, K, V and O" in f.title for f in bwd.findings)

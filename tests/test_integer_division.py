"""The integer-division rule (lab/analysis/rules/integer_division.py) on real reports whose answer is known: v9's
default at 16,32,1024,64 causal fp16 before step 22 (the shipped run 20261128-180404), whose consumers computed their
tile with two divisions by run-time values at each tile's start (handing them the tile ran 1.029x), and cuDNN's own
kernel on the same problem (run 20261128-180429), which shows no such line. The lines' samples are read here from the
report's own per-instruction counters (ncu_report), not from the lab's tables."""

from pathlib import Path

import pytest

from lab.analysis import findings as analysis
from lab.analysis.lines import divides_at_run_time, opcode
from lab.analysis.rules import integer_division
from lab.profilers import ncu

EXAMPLES = Path(__file__).resolve().parents[1] / "profiles" / "examples"
V9 = EXAMPLES / "20261128-180404-v9-B16-H32-N1024-D64-causal-float16" / "profile.ncu-rep.xz"
CUDNN = EXAMPLES / "20261128-180429-cudnn-B16-H32-N1024-D64-causal-float16" / "profile.ncu-rep.xz"
PLANTED = Path(__file__).resolve().parent / "fixtures" / "ncu" / "planted-detailed.ncu-rep.xz"


def _found(a, cls):
    return next((f for f in a.findings if f.cls == cls), None)


def _dividing_share_pct(path) -> float:
    """The warp samples of the source lines whose SASS divides by a run-time value, as a percent of all, from
    ncu_report's SourceCounters: per-PC samples and the SASS text of each PC, grouped by source line."""
    (_, action), = ncu.open_report(path).actions
    samples = action.metric_by_name("smsp__pcsamp_sample_count")
    correlation = samples.correlation_ids()
    by_line: dict = {}
    total = 0.0
    for i in range(samples.num_instances()):
        pc = correlation.as_uint64(i)
        n = samples.as_double(i)
        total += n
        info = action.source_info(pc)
        key = (info.file_name(), info.line()) if info is not None else pc
        ops, s = by_line.setdefault(key, ([], [0.0]))
        ops.append(opcode(action.sass_by_pc(pc)))
        s[0] += n
    return 100.0 * sum(s[0] for ops, s in by_line.values() if divides_at_run_time(ops)) / total


@pytest.fixture(scope="module")
def v9():
    (a,) = analysis.analyze_report(V9)
    return a


def test_v9s_tile_arithmetic_is_named_with_its_share_and_its_lines(v9):
    f = _found(v9, "integer-division")
    assert f is not None and f.source == "lab"
    assert f.est_speedup_pct == pytest.approx(f.evidence["lab__integer_division_samples_pct"], abs=0.01)
    assert f.est_speedup_pct >= integer_division.MATERIAL_PCT
    # the lines are the scheduler's, inlined into the forward's advance() (fwd_wgmma.cuh)
    assert f.lines and all(x["file"] == "tile_scheduler.cuh" for x in f.lines)
    assert any(c["file"] == "fwd_wgmma.cuh" for x in f.lines for c in x.get("called_from", []))
    assert "tile_scheduler.cuh:" in f.advice and "hand the quotient" in f.advice


def test_the_share_is_the_reports_own(v9):
    """What the rule read agrees with the report's per-PC counters within the issuer's waits it leaves out."""
    f = _found(v9, "integer-division")
    assert f.est_speedup_pct == pytest.approx(_dividing_share_pct(V9), abs=0.5)


def test_it_is_a_cause_beside_the_latency_not_the_bottleneck(v9):
    """2.9% of the samples: listed with its lines, below the latency finding that names the kernel's bottleneck."""
    classes = [f.cls for f in v9.findings]
    assert v9.bottleneck == "latency-bound" and classes.index("latency-bound") < classes.index("integer-division")


def test_cudnns_kernel_and_the_planted_kernels_have_no_such_finding():
    (cudnn,) = analysis.analyze_report(CUDNN)
    assert _found(cudnn, "integer-division") is None
    for a in analysis.analyze_report(PLANTED):
        assert _found(a, "integer-division") is None, a.kernel


def test_the_sass_signature_is_an_integer_division_by_a_run_time_value():
    assert divides_at_run_time(["I2F.U32.RP", "MUFU.RCP", "F2I.FTZ.U32.TRUNC.NTZ", "IMAD.HI.U32"])
    assert divides_at_run_time(["IABS", "I2F.RP", "MUFU.RCP", "IMAD.HI.U32"])
    assert not divides_at_run_time(["MUFU.RCP", "FFMA", "FMUL"])               # a float division
    assert not divides_at_run_time(["IMAD.HI.U32", "SHF.R.U32.HI"])           # by a constant: multiply and shift
    assert not divides_at_run_time([])

"""Problem arithmetic and timing statistics (no GPU needed)."""

import pytest

from lab.measure.bench import median_ci95, summarize
from lab.measure import rates
from lab.measure.rates import tflops
from lab.errors import LabError
from lab.measure.problem import Problem, check_supported, parse_shape
from lab.ladder.registry import builtin


def test_flops_and_min_bytes():
    p = parse_shape("8,16,1024,64")
    assert p.forward_flops == 4 * 8 * 16 * 1024 * 1024 * 64
    assert parse_shape("8,16,1024,64", causal=True).forward_flops == p.forward_flops / 2
    assert rates.min_bytes(p) == 4 * 8 * 16 * 64 * (4 * 1024)  # fp32: Q, K, V read, O written
    assert rates.min_bytes(parse_shape("8,16,1024,64", dtype="fp16")) == rates.min_bytes(p) // 2


def test_min_bytes_by_mode_is_one_rule():
    """The backward reads Q, K, V, dO and writes dQ, dK, dV; forward+backward also writes O; with GQA
    K, V, dK, dV have heads_kv heads. The timer's floor reads the same list."""
    from lab.measure.floor import minimal_read_bytes

    p = parse_shape("2,8:2,256,64", dtype="fp16")
    q, kv = 2 * 8 * 256 * 64 * 2, 2 * 2 * 256 * 64 * 2
    assert rates.min_bytes(p, "fwd") == q + 2 * kv + q
    assert rates.min_bytes(p, "bwd") == (q + 2 * kv + q) + (q + 2 * kv)
    assert rates.min_bytes(p, "fwd+bwd") == rates.min_bytes(p, "bwd") + q
    for mode in rates.MODES:
        assert minimal_read_bytes(p, mode) == rates.min_read_bytes(p, mode)
    assert rates.min_read_bytes(p, "bwd") == 2 * q + 2 * kv
    assert rates.min_bytes_rule("bwd") == "Q, K, V, dO read once, dQ, dK, dV written once"


def test_seqlen_k_may_differ():
    p = parse_shape("2,4,100,300,64")
    assert (p.seqlen_q, p.seqlen_k) == (100, 300)
    assert p.forward_flops == 4 * 2 * 4 * 100 * 300 * 64
    assert "N100x300" in p.label()


@pytest.mark.parametrize("spec", ["8,16,1024", "a,b,c,d", "8,16,0,64", "0,16,128,64", "8,-1,128,64", ""])
def test_bad_shapes_are_refused(spec):
    with pytest.raises(LabError):
        parse_shape(spec)


def test_rung_support_is_checked():
    v1 = next(v for v in builtin() if v.dtypes == ("float32",) and 32 in v.head_dims)
    check_supported(v1, parse_shape("1,1,17,32"))
    with pytest.raises(LabError, match="head_dim"):
        check_supported(v1, parse_shape("1,1,17,96"))
    with pytest.raises(LabError, match="dtype"):
        check_supported(v1, parse_shape("1,1,17,64", dtype="bf16"))
    with pytest.raises(LabError, match="dtype"):
        Problem(1, 1, 1, 1, 64, dtype="int8")


def test_summary_statistics():
    samples = [float(x) for x in range(1, 32)]  # 1..31
    t = summarize(samples, warmup=5, l2_flush=True)
    assert t.median == 16 and t.min == 1 and t.max == 31 and t.reps == 31
    assert t.ci95_low < t.median < t.ci95_high
    lo, hi = median_ci95(sorted(samples))
    assert (lo, hi) == (t.ci95_low, t.ci95_high)
    assert 10 <= lo <= 12 and 20 <= hi <= 22  # order statistics around n/2 +- 1.96*sqrt(n)/2


def test_tflops():
    assert tflops(2e12, 1000.0) == pytest.approx(2.0)


def test_refused_backend_reason_keeps_explanations_only():
    from lab.measure.baselines import _unavailable_reason

    msgs = ["Flash attention kernel not used because: (Triggered internally at /a/sdp_utils.cpp:1.)",
            "Memory Efficient attention has been runtime disabled. (Triggered internally at /b.h:2.)",
            "Flash attention only supports dtypes float16 and bfloat16 (Triggered internally at /c.cpp:3.)"]
    assert _unavailable_reason(msgs) == "Flash attention only supports dtypes float16 and bfloat16"
    assert _unavailable_reason(msgs[:2]) == ""


def test_markdown_ladder_marks_unavailable_backends_and_failed_rungs():
    from lab.measure.benchtable import markdown_ladder

    ok = {"backend": "flash", "dtype": "float16", "status": "ok", "median_ms": 1.0, "ratio": 0.5}
    refused = {"backend": "flash", "dtype": "float32", "status": "unavailable", "median_ms": None, "ratio": None}
    result = {"device": {"name": "GPU", "compute_capability": "9.0", "sm_count": 132},
              "git": {"commit": "0123456789abcdef", "dirty": True}, "software": {"torch": "2.11"},
              "reps": 30, "warmup": 5,
              "rows": [{"variant": "mine1", "problem": {"label": "B1-H1-N17-D64-float32"},
                        "timing": {"median": 2.0, "std": 0.1}, "tflops": 1.0, "baselines": [ok, refused]},
                       {"variant": "mine2", "problem": {"label": "B1-H1-N17-D64-float32"}}]}
    text = markdown_ladder(result)
    assert "commit 0123456789 (with uncommitted changes)" in text
    v1_row = next(line for line in text.splitlines() if line.startswith("| mine1"))
    assert "| 1 (0.5x) | n/a |" in v1_row
    assert "FAILED its check" in text


def test_vs_previous_compares_the_same_problem_up_to_dtype():
    from lab.measure.benchtable import _shape_key

    plain = parse_shape("8,16,1024,64").to_dict()
    assert _shape_key(plain) == _shape_key(parse_shape("8,16,1024,64", dtype="fp16").to_dict())
    assert _shape_key(plain) != _shape_key(parse_shape("8,16,1024,64", causal=True).to_dict())
    assert _shape_key(plain) != _shape_key(parse_shape("8,16,1024,2048,64").to_dict())


def test_bench_times_the_baselines_in_the_rungs_own_dtype(monkeypatch, capsys):
    """A bf16 rung is held to SDPA in bf16 (and fp32), never fp16 (on four H200s `lab bench --dtype
    bfloat16` printed its ratios to fp16 cuDNN and FlashAttention under "x cudnn fp16"); an fp32 rung to
    fp16 and fp32; each (shape, dtype) is timed once, and each column names the dtype it ran in."""
    from types import SimpleNamespace

    from lab.measure import baselines, benchtable
    from lab.measure.bench import Timing

    def timing(ms):
        return Timing("ms", ms, ms, 0.01, ms, ms, ms, ms, 30, 5, True)

    timed = []

    def run_baseline(problem, backend, dtype, reps, warmup, mode="fwd", kernel_calls=0, under_load_ms=0.0):
        timed.append((problem.label().rsplit("-", 1)[0], backend, dtype))
        return baselines.Baseline(f"sdpa-{backend}", backend, dtype, "ok", "", timing(1.0), 1.0)

    monkeypatch.setattr(baselines, "run_baseline", run_baseline)
    for name in ("require_gpu", "require_compute_capability"):
        monkeypatch.setattr(benchtable, name, lambda *a, **k: None)
    monkeypatch.setattr(benchtable, "gated", lambda v, p, mode: SimpleNamespace(passed=True, verdict={"passed": True},
                                                                                module=None))
    monkeypatch.setattr(benchtable, "rung_measurement",
                        lambda *a, **k: SimpleNamespace(time=lambda *a, **k: timing(2.0)))
    monkeypatch.setattr(benchtable, "device_info", lambda: {"name": "GPU", "compute_capability": "9.0", "sm_count": 132})
    monkeypatch.setattr(benchtable, "software_info", lambda: {"torch": "2.11"})
    monkeypatch.setattr(benchtable, "git_info", lambda: {"commit": "abc", "dirty": False})

    sixteen = next(v for v in builtin() if "bfloat16" in v.dtypes)
    fp32 = next(v for v in builtin() if v.dtypes == ("float32",) and 64 in v.head_dims)
    shape = "1,2,256,64"
    problems = [parse_shape(shape, dtype="bfloat16"), parse_shape(shape, dtype="float32"),
                parse_shape(shape, dtype="bfloat16")]
    result = benchtable.bench_ladder([sixteen, fp32, sixteen], problems, reps=30, warmup=5,
                                     backends=("cudnn", "flash"))
    base = "B1-H2-N256-D64"
    assert timed == [(base, "cudnn", "bfloat16"), (base, "flash", "bfloat16"), (base, "cudnn", "float32"),
                     (base, "flash", "float32"), (base, "cudnn", "float16"), (base, "flash", "float16")]
    assert [[b["dtype"] for b in row["baselines"]] for row in result["rows"]] == [
        ["bfloat16"] * 2 + ["float32"] * 2, ["float16"] * 2 + ["float32"] * 2, ["bfloat16"] * 2 + ["float32"] * 2]
    md = benchtable.markdown_ladder(result)
    head = next(line for line in md.splitlines() if line.startswith("| rung"))
    assert "SDPA cudnn bf16" in head and "SDPA flash fp16" in head and "bfp16" not in md
    monkeypatch.setenv("COLUMNS", "300")
    benchtable.print_ladder(result)
    out = capsys.readouterr().out
    assert "x cudnn bf16" in out and "x flash fp32" in out and "x cudnn fp16" in out and "bfp16" not in out


def test_the_baselines_dtypes_follow_the_rungs():
    from lab.measure.baselines import baseline_dtypes

    assert baseline_dtypes("bfloat16") == ("bfloat16", "float32")
    assert baseline_dtypes("float16") == ("float16", "float32")
    assert baseline_dtypes("float32") == ("float16", "float32")


def test_bench_under_load_times_rungs_and_baselines_behind_the_stretch_and_prints_the_clock(monkeypatch, capsys):
    """`lab bench --under-load MS` hands MS to every timing, the rung's and each baseline's, and the table and
    its Markdown say the clock NVML read after the repetitions and the share the power limit held down."""
    from types import SimpleNamespace

    from lab.measure import baselines, benchtable
    from lab.measure.bench import Timing

    asked = []

    def timing(ms, under_load_ms, mhz):
        asked.append(under_load_ms)
        t = Timing("ms", ms, ms, 0.01, ms, ms, ms, ms, 30, 5, True)
        t.checks = {"under_load_ms": under_load_ms, "under_load_calls": 200, "load_states_read": 30,
                    "load_sm_clock_mhz": mhz, "load_power_capped_share": 0.9}
        return t

    def run_baseline(problem, backend, dtype, reps, warmup, mode="fwd", kernel_calls=0, under_load_ms=0.0):
        return baselines.Baseline(f"sdpa-{backend}", backend, dtype, "ok", "", timing(1.0, under_load_ms, 1770), 1.0)

    monkeypatch.setattr(baselines, "run_baseline", run_baseline)
    for name in ("require_gpu", "require_compute_capability"):
        monkeypatch.setattr(benchtable, name, lambda *a, **k: None)
    monkeypatch.setattr(benchtable, "gated", lambda v, p, mode: SimpleNamespace(passed=True, verdict={"passed": True},
                                                                                module=None))
    monkeypatch.setattr(benchtable, "rung_measurement", lambda *a, **k: SimpleNamespace(
        time=lambda reps, warmup, under_load_ms=0.0: timing(1.1, under_load_ms, 1680)))
    monkeypatch.setattr(benchtable, "device_info", lambda: {"name": "GPU", "compute_capability": "9.0", "sm_count": 132})
    monkeypatch.setattr(benchtable, "software_info", lambda: {"torch": "2.11"})
    monkeypatch.setattr(benchtable, "git_info", lambda: {"commit": "abc", "dirty": False})

    rung = next(v for v in builtin() if "float16" in v.dtypes)
    result = benchtable.bench_ladder([rung], [parse_shape("1,2,256,64", dtype="float16")], reps=30, warmup=5,
                                     backends=("cudnn",), under_load_ms=50)
    assert asked == [50, 50, 50]   # cuDNN fp16 and fp32, then the rung
    assert result["under_load_ms"] == 50 and result["rows"][0]["under_load"]["load_sm_clock_mhz"] == 1680
    assert [b["under_load"]["load_sm_clock_mhz"] for b in result["rows"][0]["baselines"]] == [1770, 1770]
    md = benchtable.markdown_ladder(result)
    assert "behind 50 ms of its own calls" in md and f"| {rung.id} | B1-H2-N256-D64-float16 | 1.1 | 1680 | 90% of 30 |" in md
    monkeypatch.setenv("COLUMNS", "300")
    benchtable.print_ladder(result)
    out = capsys.readouterr().out
    assert "under load" in out and "1680" in out and "1770" in out and "90% of 30" in out

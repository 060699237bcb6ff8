"""The instruction-fetch rule (lab/analysis/rules/instruction_fetch.py) on two real reports of v9's D=64 causal
forward (tests/fixtures/ncu/v9-d64-causal-*-h100.ncu-rep.xz, recorded by tests/planted/record_icache.sh): the
rung's default kernel, and its HalfLastKeyTile tuning candidate, which carries more copies of the key loop and
loses to the default on instruction fetch (a planted-by-accident instruction-cache case: README.md beside the
fixtures). Also: the stall reasons the rules key on are the names the analysis produces, whichever stall
family a report carries. Expected values come from ncu_report, never from numbers copied out of the reports."""

import ast
from pathlib import Path

import pytest

from lab.analysis import code, metrics
from lab.analysis import findings as analysis
from lab.analysis import lines as source_lines
from lab.analysis.rules import instruction_fetch, latency_bound
from lab.profilers import ncu

OURS = Path(__file__).resolve().parent / "fixtures" / "ncu"
DEFAULT = OURS / "v9-d64-causal-default-h100.ncu-rep.xz"
HALF = OURS / "v9-d64-causal-half-softmax-h100.ncu-rep.xz"
FULL = OURS / "v5-full.ncu-rep.xz"          # ncu's full set: WarpStateStats' stall family beside PC sampling
LAB = Path(__file__).resolve().parents[1] / "lab"


@pytest.fixture(scope="module")
def half():
    (a,) = analysis.analyze_report(HALF)
    return a


@pytest.fixture(scope="module")
def default():
    (a,) = analysis.analyze_report(DEFAULT)
    return a


def _found(a, cls):
    return next((f for f in a.findings if f.cls == cls), None)


def _sampled_pct(path):
    """Stall No Instruction's share of the PC samples, from the report's own counters."""
    row = ncu.load_report(path).iloc[0]
    return 100.0 * row["smsp__pcsamp_warps_issue_stalled_no_instructions"] / row["smsp__pcsamp_sample_count"]


def _function_instructions(path):
    """The SASS instructions of the profiled function: SourceCounters' inst_executed has one instance each."""
    (_, action), = ncu.open_report(path).actions
    return action.metric_by_name("inst_executed").num_instances()


def test_the_candidate_is_named_an_instruction_fetch_case_with_its_evidence_and_lines(half):
    f = half.findings[0]
    assert half.bottleneck == f.cls == "instruction-fetch" and f.source == "lab"
    pct = _sampled_pct(HALF)
    assert pct >= instruction_fetch.MATERIAL_PCT
    # the gain is the stall's share of the samples, its upper bound, as the title and evidence say
    assert f.est_speedup_pct == pytest.approx(pct, abs=0.01)
    assert f.evidence["lab__no_instruction_pct_of_samples"] == pytest.approx(pct, abs=0.05)
    assert f"{pct:.1f}% of the PC samples" in f.title and "Stall No Instruction" in f.title
    assert f.evidence["smsp__pcsamp_warps_issue_stalled_no_instructions"] > 0
    # the code's size, in SASS instructions and bytes (16 per instruction on Hopper)
    n = _function_instructions(HALF)
    assert f.evidence["lab__sass_instructions"] == n and f"{n:,} SASS instructions" in f.title
    assert f.evidence["lab__sass_bytes"] >= 16 * n
    assert 0 < f.evidence["lab__hot_sass_instructions"] < n
    # what it costs the issue rate, in Nsight's names
    cost = {"sm__inst_executed.avg.per_cycle_active", "smsp__inst_executed.sum", "gpc__cycles_elapsed.max"}
    assert cost <= set(f.evidence)
    assert None not in f.evidence.values()
    # the lines where the stall is sampled, each compiled into several places of the SASS
    assert f.lines and all(line["metric"] == "no_instructions" and line["value"] > 0 for line in f.lines)
    assert f.lines[0]["file"] == "fwd_wgmma.cuh" and all(line.get("copies", 1) > 1 for line in f.lines)
    assert f"Lines: {source_lines.where(f.lines)}" in f.advice and "places of the SASS" in f.advice


def test_the_candidate_hot_lines_have_more_copies_than_the_default(half, default):
    """The candidate's extra copies of the key loop, read from the SASS: each line it is cited at sits in
    more places of the candidate's code than of the default's."""
    k = source_lines.report_lines(DEFAULT)[0]
    step = k["code"]["bytes_per_instruction"]
    for line in _found(half, "instruction-fetch").lines:
        in_default = code.copies(source_lines.executed_pcs(k, line), step)
        assert line["copies"] > in_default >= 1, line
    assert k["code"]["instructions"] == _function_instructions(DEFAULT)
    assert _function_instructions(HALF) > 1.5 * k["code"]["instructions"]


def test_the_advice_names_the_copies_and_the_warp_specialised_paths(half):
    f = _found(half, "instruction-fetch")
    assert "copies of the hot loops" in f.advice and "peel only the step that differs" in f.advice
    assert "unroll less" in f.advice
    assert "warp-specialised" in f.advice and "different code paths at once" in f.advice


def test_it_ranks_above_the_latency_steps_each_finding_keeping_its_gain(half, default):
    fetch, lat = _found(half, "instruction-fetch"), _found(half, "latency-bound")
    classes = [f.cls for f in half.findings]
    assert classes.index("instruction-fetch") < classes.index("latency-bound")
    # latency-bound keeps the gain it has without the fetch finding: the distance to the nearest roof
    d = half.derived
    assert lat.est_speedup_pct == pytest.approx(100 - max(d["compute_pct_of_peak"], d["memory_pct_of_peak"]), abs=0.01)
    assert lat.est_speedup_pct > fetch.est_speedup_pct
    assert lat.advice.startswith("First the instruction fetch (see instruction-fetch")


def test_the_default_kernel_is_no_instruction_fetch_case(default):
    assert _sampled_pct(DEFAULT) < instruction_fetch.MATERIAL_PCT
    assert _found(default, "instruction-fetch") is None and default.bottleneck == "latency-bound"
    assert "instruction fetch" not in _found(default, "latency-bound").advice.lower()


def test_cli_json_carries_the_finding_with_its_lines():
    import json

    from click.testing import CliRunner

    from lab.cli import main

    res = CliRunner().invoke(main, ["analyze", str(HALF), "--json"])
    assert res.exit_code == 0, res.output
    (k,) = json.loads(res.output)
    assert k["bottleneck"] == "instruction-fetch"
    f = k["findings"][0]
    assert f["evidence"]["lab__sass_instructions"] > 0 and f["lines"][0]["copies"] > 1


# ----------------------------------------------------------------------------- stall names


def test_every_stall_reason_a_report_carries_is_named_as_the_analysis_names_it():
    """WarpStateStats spells two reasons otherwise than PC sampling (no_instruction, gmma): the analysis
    names each reason once, as STALL_REASONS and the per-line counters do, whichever family it reads."""
    for path in (FULL, HALF):
        df = ncu.load_report(path)
        rows = df.to_dict("records")
        for i, row in enumerate(rows):
            c = metrics.kernel_facts(row)
            assert c.stalls and {r for r, _, _ in c.stalls} <= set(metrics.STALL_REASONS), path
            k = source_lines.report_lines(path)[i]
            assert {r for line in k["lines"] for r in line["stalls"]} <= set(metrics.STALL_REASONS), path
    # the full-set report reads WarpStateStats' family, and still says no_instructions
    c = metrics.kernel_facts(ncu.load_report(FULL).iloc[0].to_dict())
    assert c.stall_family.startswith("^smsp__average_warps_issue_stalled")
    assert "no_instructions" in {r for r, _, _ in c.stalls} and "no_instruction" not in {r for r, _, _ in c.stalls}


def test_the_advice_table_keys_are_stall_names_the_analysis_produces():
    assert set(latency_bound.STALL_STEPS) <= set(metrics.STALL_REASONS)
    assert instruction_fetch.REASON in metrics.STALL_REASONS


def _string_literals(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def test_no_rule_keys_on_a_stall_name_the_analysis_never_produces():
    """A literal that is a stall reason spelled otherwise (WarpStateStats' spelling, or a plural too many or too
    few: `no_instruction` for `no_instructions`) never matches what the analysis gives the rules. One-word
    reasons (wait, barrier, drain) are common words, so the plural check takes the reasons of two words and up."""
    reasons = set(metrics.STALL_REASONS)
    wrong = {r.rstrip("s"): r for r in reasons if "_" in r} | dict(metrics._STALL_ALIASES)
    for path in sorted((LAB / "analysis").rglob("*.py")):
        if path.name == "metrics.py":   # where the other family's spellings are read under the sampled names
            continue
        for s in _string_literals(path):
            right = wrong.get(s.rstrip("s")) or wrong.get(s)
            assert s in reasons or right is None, f"{path.name}: {s!r} is no stall name produced; {right!r} is"


# ----------------------------------------------------------------------------- the code's measures


def test_code_footprint_and_copies_on_made_up_pcs():
    pcs = [0x1000 + 16 * i for i in range(100)]
    executed = {pc: (1000.0 if i < 10 else 1.0) for i, pc in enumerate(pcs)}
    got = code.footprint(pcs, executed)
    assert got == {"instructions": 100, "bytes": 1600, "bytes_per_instruction": 16, "hot_instructions": 10,
                   "hot_bytes": 160}
    assert code.footprint([], {}) is None
    one_place = [0x1000 + 16 * i for i in range(0, 60, 3)]
    assert code.copies(one_place) == 1
    far = 16 * (code.COPY_GAP_INSTRUCTIONS + 1)
    assert code.copies(one_place + [p + 10 * far for p in one_place] + [p + 20 * far for p in one_place]) == 3
    assert code.copies([]) == 0

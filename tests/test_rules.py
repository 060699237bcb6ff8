"""The lab's own rules (lab/analysis/rules/), one per analysis class, each tested alone on real
Nsight Compute reports (tests/fixtures/ncu/): on a kernel built to have its cause, the rule applies and
says so with evidence, advice and source lines; on a kernel built without it, the rule stays silent."""

from pathlib import Path

import pytest

from lab import vocabulary
from lab.analysis import lines as source_lines
from lab.analysis import rules
from lab.analysis.metrics import kernel_facts
from lab.profilers import ncu

OURS = Path(__file__).resolve().parent / "fixtures" / "ncu"
PLANTED = OURS / "planted-detailed.ncu-rep.xz"
FLASH_BWD = OURS / "sdpa-flash-bwd.ncu-rep.xz"


def _kernels(path):
    df = ncu.load_report(path)
    return {r["kernel_function"]: r for r in df.to_dict("records")}, source_lines.report_lines(path)


@pytest.fixture(scope="module")
def planted():
    return _kernels(PLANTED)


def _judge(rule, row):
    c = kernel_facts(row)
    got = rule.applies(c, rules.context(c))
    return c, (got if isinstance(got, list) else [got] if got is not None else [])


# rule class -> (report, the kernel built with its cause, a kernel built without it)
CASES = {
    "small-grid": (PLANTED, "planted_small_grid", "planted_bandwidth_copy"),
    "occupancy-limited": (PLANTED, "planted_occupancy_smem", "planted_fma_bound"),
    "latency-bound": (PLANTED, "planted_small_grid", "planted_fma_bound"),
    "memory-bound": (PLANTED, "planted_bandwidth_copy", "planted_fma_bound"),
    "compute-bound": (PLANTED, "planted_fma_bound", "planted_bandwidth_copy"),
    "uncoalesced-global": (PLANTED, "planted_uncoalesced", "planted_broadcast"),
    "bank-conflicts": (PLANTED, "planted_bank_conflicts", "planted_uncoalesced"),
    "local-memory": (PLANTED, "planted_local_memory", "planted_fma_bound"),
    "divergence": (PLANTED, "planted_divergence", "planted_bandwidth_copy"),
    "launch-bound": (FLASH_BWD, "flash_bwd_convert_dq_kernel", "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"),
}


def test_one_rule_per_class_each_with_its_doc():
    assert [r.cls for r in rules.RULES if r.cls in vocabulary.CLASSES] and \
        sorted(r.cls for r in rules.RULES) == sorted(vocabulary.CLASSES)
    for r in rules.RULES:
        assert (type(r).__module__ and __import__(type(r).__module__, fromlist=["x"]).__doc__.startswith(r.cls)), r
        assert r.cls in CASES or r.cls in BACKWARD_TESTED + OWN_TESTS, f"{r.cls} has no test on a real report"
    # every symptom a rule explains is a class, and nothing explains itself
    assert all(s in vocabulary.CLASSES and s != c for s, cs in rules.CAUSES.items() for c in cs)


BACKWARD_TESTED = ("reduction-traffic", "register-pressure")   # tests/test_backward_rules.py
OWN_TESTS = ("instruction-fetch",    # tests/test_instruction_fetch.py: its case and its control are two reports
             "integer-division")     # tests/test_integer_division.py: a shipped v9 run, cuDNN's beside it


@pytest.mark.parametrize("cls", sorted(CASES))
def test_rule_applies_where_its_cause_was_built_and_not_elsewhere(cls, planted):
    path, with_it, without = CASES[cls]
    rows, lines = planted if path == PLANTED else _kernels(path)
    rule = rules.BY_CLASS[cls]
    c, found = _judge(rule, rows[with_it])
    assert found and all(f.cls == cls and f.source == "lab" for f in found), (cls, with_it)
    f = found[0]
    assert f.title and f.evidence and any(v is not None for v in f.evidence.values())
    assert f.advice and f.advice == rule.advice(c, rules.context(c))
    assert f.rank > 0
    k = lines[int(rows[with_it]["kernel_index"])]
    if k.get("lines") and cls != "launch-bound":
        assert rule.lines(f, k, c), f"{cls}: no source line cited on {with_it}"
    _, none = _judge(rule, rows[without])
    assert none == [], (cls, without, [x.title for x in none])


def test_advice_knows_a_pair_as_a_rung_and_names_only_rungs_after_both_parts():
    """`lab profile --variant F+B` opens the range `lab F+B <shape>`: its kernels are the ladder's
    (attention advice), and a rung named as the fix comes after both parts."""
    from lab.analysis import advice
    from lab.ladder import registry

    ids = registry.all_ids()
    first, second = ids[0], ids[1]
    assert advice.rung_of(f"lab {first}+{second} B1-H2-N64-D64-float16 fwd+bwd") == f"{first}+{second}"
    assert advice.rung_of(f"lab {first}+nope B1-H2-N64-D64-float16") is None
    assert advice.rung_of(f"lab {first}+ B1-H2-N64-D64-float16") is None
    assert advice.rung_of(f"lab {first}+{second}+{first} B1-H2-N64-D64-float16") is None   # a pair is two rungs
    classes = ("small-grid", "latency-bound", "uncoalesced-global", "compute-bound")
    assert any(advice.next_rung(cls, second) for cls in classes)   # the ladder has later rungs for some
    for cls in classes:
        assert advice.next_rung(cls, f"{second}+{first}") == advice.next_rung(cls, second)
        assert advice.next_rung(cls, f"{ids[-1]}+{first}") is None   # nothing after the ladder's last rung


def test_advice_names_no_rung_where_the_workspace_is_broken_and_hides_no_other_error(tmp_path, monkeypatch):
    """The registry is context for advice: a workspace it refuses (a LabError: here a lab.toml that is
    not TOML) leaves the advice without a rung; any other exception is a bug and surfaces."""
    from lab.analysis import advice
    from lab.ladder import registry

    first = registry.builtin()[0].id
    assert advice.rung_of(f"lab {first} B1-H2-N64-D64-float32") == first
    (tmp_path / "lab.toml").write_text("[workspace\n")
    monkeypatch.setenv("LAB_WORKSPACE", str(tmp_path))
    assert advice.rung_of(f"lab {first} B1-H2-N64-D64-float32") is None
    assert advice.next_rung("small-grid", first) is None
    monkeypatch.setattr(registry, "all_ids", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        advice.rung_of(f"lab {first} B1-H2-N64-D64-float32")

"""`lab tune` refuses bad input before it builds: the candidates a rung's file declares are read from its
source (lab.ladder.rungfile.tuning_entries, through lab.ladder.tuning.source_declared), so a --predict
that names no candidate, the default, several, or one not applicable to the problem, and a head_dim or
dtype with no candidates, exit 2 with one line and nothing compiled (v9's two builds take minutes).

CPU: the refusals on the built-in rungs themselves (their real sources; the build entry points replaced
by recorders that must stay unused, the build cache an empty folder that must stay empty); the reading
of the contract's forms, and of forms it must not guess at; a build whose list differs from the reading
refused loudly; a rung whose list cannot be read says so in one line before its build.
GPU (`-m gpu`): every tunable rung's source-read lists equal its tuning build's own, head_dim by dtype
by mode (the built table is the truth).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import lab_here
from lab.ladder.rungfile import tuning_entries
from lab.ladder.tuning import source_declared
from test_tune import TUNABLE, StandInTuning, _backward_tunable, _has_gpu, stand_in_tune  # noqa: F401 (a fixture)

V9 = next(v for v in TUNABLE if v.kind == "cuda" and v.min_cc >= (9, 0) and v.grid == "flat")   # the persistent Hopper forward
BACKWARD = next(v for v in reversed(TUNABLE) if _backward_tunable(v))   # the latest rung that tunes a backward


def _modes(variant) -> list[str]:
    return ["fwd", "bwd"] if _backward_tunable(variant) else ["fwd"]


@pytest.fixture
def no_build(monkeypatch, tmp_path):
    """Every way `lab tune` reaches the compiler, replaced by a recorder; LAB_CACHE an empty folder."""
    from lab.ladder import build, tuning
    from lab.measure import tune

    calls = []
    for module, names in ((tune, ("build", "build_many", "tuning_build", "is_built")),
                          (build, ("build", "build_many", "ptxas_report")), (tuning, ("build",))):
        for name in names:
            monkeypatch.setattr(module, name, lambda *a, _n=name, **k: calls.append(_n))
    cache = tmp_path / "cache"
    cache.mkdir()
    return calls, cache


def _refused(no_build, tmp_path, *args) -> str:
    calls, cache = no_build
    store = tmp_path / "store"
    res = lab_here("tune", *args, "--profiles", store, env={"LAB_CACHE": str(cache)})
    assert res.returncode == 2, (res.stdout, res.stderr)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "\n" not in errors[0] and "compile" not in res.stderr and "not read from its source" not in res.stderr
    assert calls == [] and list(cache.iterdir()) == [], calls   # no compiler ran
    assert not store.exists()
    return errors[0]


def _shared_word(labels: list[str]) -> str:
    """A word two or more labels contain and no label is: a part that names several."""
    words = sorted({w for lb in labels for w in lb.split()}, key=len, reverse=True)
    return next(w for w in words if sum(w.lower() in lb.lower() for lb in labels) > 1 and w not in labels)


def v9_causal(d: int = 64) -> tuple[list, list[str]]:
    read = source_declared(V9, d, V9.default_dtype)
    assert read, f"v9's D={d} candidates are not read from its source"
    return read, ["--variant", V9.id, "--shape", f"1,2,256,{d}", "--causal", "--dtype", V9.default_dtype]


def test_a_typo_is_refused_before_the_build(no_build, tmp_path):
    read, args = v9_causal()
    line = _refused(no_build, tmp_path, *args, "--predict", "typo=1.0-1.1")
    assert "no candidate among v9's candidates for head_dim 64" in line


def test_the_default_is_refused_before_the_build(no_build, tmp_path):
    _, args = v9_causal()
    assert "the default is what every candidate's ratio" in _refused(no_build, tmp_path, *args,
                                                                     "--predict", "default=1.0-1.1")


def test_a_part_of_several_labels_is_refused_before_the_build(no_build, tmp_path):
    read, args = v9_causal()
    part = _shared_word([d.label for d in read if d.causal is None])
    assert "ambiguous" in _refused(no_build, tmp_path, *args, "--predict", f"{part}=1.0-1.1")


def test_a_candidate_for_the_other_mask_is_refused_before_the_build(no_build, tmp_path):
    read, args = v9_causal()
    other = [d for d in read if d.causal is False]
    assert other, "v9's D=64 list declares no non-causal-only candidate: pick a rung that does"
    line = _refused(no_build, tmp_path, *args, "--predict", f"{other[0].label}=1.0-1.1")
    assert f"candidate {other[0].label!r} is not applicable" in line and "non-causal problems only" in line


def test_two_predictions_of_one_candidate_are_refused_before_the_build(no_build, tmp_path):
    read, args = v9_causal()
    label = next(c.label for c in read if c.causal in (None, True))   # one that serves the causal problem
    line = _refused(no_build, tmp_path, *args, "--predict", f"{label}=1.0-1.1", "--predict", f"{label.lower()}=1.1-1.2")
    assert f"both name candidate {label!r}" in line


def test_a_backward_typo_is_refused_before_the_build(no_build, tmp_path):
    v, d = BACKWARD, BACKWARD.head_dims[-1]
    line = _refused(no_build, tmp_path, "--variant", v.id, "--shape", f"1,2,256,{d}", "--causal", "--mode", "bwd",
                    "--dtype", v.default_dtype, "--predict", "typo=1.0-1.1")
    assert f"no candidate among {v.id}'s backward candidates for head_dim {d}" in line


# ------------------------------------------------------------------------------ the reading

@pytest.mark.parametrize("variant", TUNABLE, ids=lambda v: v.id)
def test_every_built_in_rungs_lists_are_read_from_its_source(variant):
    """Each tunable rung's lists are read (not left to the build), each head_dim has candidates for some
    dtype, and no list names one label twice (a --predict could not tell them apart)."""
    for mode in _modes(variant):
        for d in variant.head_dims:
            lists = {dt: source_declared(variant, d, dt, mode) for dt in variant.dtypes}
            assert None not in lists.values(), (variant.id, mode, d, lists)
            assert any(lists.values()), (variant.id, mode, d)
            for read in lists.values():
                labels = [x.label for x in read]
                assert len(set(labels)) == len(labels), labels


def test_v9s_non_causal_only_candidates_are_read_with_their_mask():
    read = source_declared(V9, 64, V9.default_dtype)
    text = V9.source.read_text()
    for d in read:   # a label declared beside LAB_SERVES_NON_CAUSAL on its own line of the table
        line = next(ln for ln in text.splitlines() if f'"{d.label}"' in ln and not ln.lstrip().startswith("//"))
        assert (d.causal is False) == ("LAB_SERVES_NON_CAUSAL" in line), (d, line)
    assert any(d.causal is False for d in read)


CONTRACT = r'''
#include "common.cuh"
#ifdef LAB_TUNING
static const LabTuneCandidate kA[] = {
    {"A one", launch<1>},   // a comment, "not a label"
    {"A two" " joined", launch<2>, LAB_SERVES_NON_CAUSAL},
};
static const LabTuneCandidate kB[] = {{"B one|x", launch<3>, LAB_SERVES_CAUSAL}};
struct Bwd { const char* label; void* launch; };
static const Bwd kBwd[] = {{"bwd one", nullptr}, {"bwd two", nullptr}};
namespace ns {
static LabTuneList pick(int d) {
  switch (d) {
    case 32:
    case 64: return lab_tune_list(kA);
    case 128: { return lab_tune_list(kB); }
    default: return {nullptr, 0};
  }
}
}
const int ptrs[2] = {1, 2};
LAB_EXPORT const char* lab_forward_w1_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? "" : lab_tune_labels(ns::pick(head_dim));
}
LAB_EXPORT const char* lab_backward_w1_configs(int hd, LabDtype dt) {
  if (dt == LAB_FLOAT32 || hd > 64 || hd < 64) return "";
  else if (!(hd == 64)) return "never";
  return bwd_labels(kBwd);
}
#endif
'''


@pytest.mark.parametrize("function, head_dim, dtype, entries", [
    ("lab_forward_w1_configs", 32, "float16", ["A one", "A two joined|non-causal"]),   # a case falls through
    ("lab_forward_w1_configs", 64, "bfloat16", ["A one", "A two joined|non-causal"]),
    ("lab_forward_w1_configs", 128, "float16", ["B one|x|causal"]),
    ("lab_forward_w1_configs", 256, "float16", []),                                      # default: {nullptr, 0}
    ("lab_forward_w1_configs", 64, "float32", []),
    ("lab_backward_w1_configs", 64, "float16", ["bwd one", "bwd two"]),
    ("lab_backward_w1_configs", 128, "float16", []),
    ("lab_backward_w2_configs", 64, "float16", []),   # never named: the binding's weak symbol, no list
])
def test_the_contracts_forms_are_read(tmp_path, function, head_dim, dtype, entries):
    path = tmp_path / "w1.cu"
    path.write_text(CONTRACT)
    assert tuning_entries(path, function, head_dim, dtype) == entries


@pytest.mark.parametrize("body", [
    # a list built at run time
    'static std::string s; s.clear(); for (int i = 0; i < 3; ++i) s += "x;"; return s.c_str();',
    'const char* n = "a;b"; return n;',                   # a local variable
    'return head_dim % 64 ? "a" : "b";',                  # an operator the reading does not evaluate
    'return lab_tune_labels(pick<64>(head_dim));',        # a template's brackets are not a comparison
    'return lab_tune_labels(unknown_table);',             # a table it did not find
    'return lab_tune_labels(twice(head_dim));',           # a function defined twice (under #if and #else)
])
def test_a_list_the_reading_cannot_evaluate_is_not_read(tmp_path, body):
    path = tmp_path / "w2.cu"
    path.write_text(CONTRACT.replace("#endif", "") + "#if A\nstatic LabTuneList twice(int d) { return lab_tune_list(kA); }\n"
                    "#else\nstatic LabTuneList twice(int d) { return lab_tune_list(kB); }\n#endif\n"
                    f"LAB_EXPORT const char* lab_forward_w2_configs(int head_dim, LabDtype dtype) {{ {body} }}\n")
    assert tuning_entries(path, "lab_forward_w2_configs", 64, "float16") is None


def test_a_configs_function_a_macro_defines_is_not_read(tmp_path):
    path = tmp_path / "w3.cu"
    path.write_text(CONTRACT + "#define CONFIGS(id) LAB_EXPORT const char* lab_forward_##id##_configs(int, LabDtype)\n"
                               "CONFIGS(w3) { return \"a\"; }\n// lab_forward_w3_configs: written by the macro\n")
    assert tuning_entries(path, "lab_forward_w3_configs", 64, "float16") is None


# ------------------------------------------------------------------------------ the build is the truth

def test_a_build_that_lists_other_candidates_than_its_source_read_is_refused(stand_in_tune, monkeypatch, tmp_path):
    from lab.ladder.tuning import parse_entry
    from lab.measure import tune

    monkeypatch.setattr(tune, "source_declared", lambda *a, **k: [parse_entry("C1"), parse_entry("C2 wrong")])
    res = lab_here("tune", "--variant", TUNABLE[0].id, "--shape", f"1,2,130,{TUNABLE[0].head_dims[0]}",
                   "--profiles", tmp_path / "store")
    assert res.returncode == 2 and "than its source was read to declare before the build" in res.stderr, res.stderr
    assert "built [C1; C3 (non-causal) (non-causal only); C2 wrong], read [C1; C2 wrong]" in res.stderr
    assert stand_in_tune["checked"] is None and not (tmp_path / "store").exists()


def test_a_list_not_read_is_said_before_the_build_and_checked_after_it(stand_in_tune, monkeypatch, tmp_path):
    from lab.measure import tune

    built = []
    monkeypatch.setattr(tune, "source_declared", lambda *a, **k: None)
    monkeypatch.setattr(tune, "build", lambda v: built.append(v.id) or type("B", (), {"module": None})())
    v = TUNABLE[0]
    res = lab_here("tune", "--variant", v.id, "--shape", f"1,2,130,{v.head_dims[0]}", "--predict", "typo=1.0-1.1",
                   "--profiles", tmp_path / "store")
    assert res.returncode == 2 and "no candidate among" in res.stderr, res.stderr
    said = [line for line in res.stderr.splitlines() if "not read from its source" in line]
    assert len(said) == 1 and f"lab_forward_{v.id}_configs" in said[0]
    assert built == [v.id] and stand_in_tune["checked"] is None   # refused after the build, before any check


def test_a_list_not_read_is_not_mentioned_without_predictions(stand_in_tune, monkeypatch, tmp_path):
    """Without --predict nothing waits on the reading: the tune goes on as always, and the line about the
    source would only be noise before the build."""
    from lab.measure import tune

    monkeypatch.setattr(tune, "source_declared", lambda *a, **k: None)
    v = TUNABLE[0]
    res = lab_here("tune", "--variant", v.id, "--shape", f"1,2,130,{v.head_dims[0]}", "--profiles", tmp_path / "store")
    assert "not read from its source" not in res.stderr, res.stderr
    assert stand_in_tune["checked"] is not None   # and the tune ran


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU (torch.cuda.is_available() is False): loads the tuning builds")
@pytest.mark.parametrize("variant", TUNABLE, ids=lambda v: v.id)
def test_the_source_read_lists_equal_the_tuning_builds(variant):
    """The reading against the built table, every head_dim, dtype and mode each tunable rung (v3 to v9)
    tunes (test_tune's GPU tests build the same tuning builds; v9's takes ~2.5 min on a GPU host when
    not cached)."""
    from lab.ladder.tuning import declared_candidates, tuning_module

    module = tuning_module(variant)
    for mode in _modes(variant):
        for d in variant.head_dims:
            for dt in variant.dtypes:
                built = declared_candidates(module, d, dt, mode, variant.id)
                assert source_declared(variant, d, dt, mode) == built, (variant.id, mode, d, dt)


def contract_workspace(tmp_path) -> Path:
    """A workspace whose rung w1 is CONTRACT (fp16, head_dims 64 and 256): its list for 256 is empty."""
    ws = tmp_path / "ws"
    (ws / "kernels").mkdir(parents=True)
    (ws / "lab.toml").write_text('[workspace]\nname = "t"\nkernels = "kernels"\n')
    block = "\n".join("// " + line for line in ('lab:rung', 'id = "w1"', 'slug = "contract"', 'title = "the contract"',
                                               'dtypes = ["float16"]', 'head_dims = [64, 256]', 'min_cc = "8.0"',
                                               'attacks = []', 'lab:end'))
    (ws / "kernels" / "w1_contract.cu").write_text(CONTRACT + block + "\n")
    return ws


def test_a_users_rung_with_no_candidates_for_the_problem_is_refused_before_the_build(no_build, tmp_path):
    """A workspace rung's own file, read as the built-in rungs' are: its list for this head_dim is empty
    (the switch's default), so there is nothing to tune, and that is said before a build."""
    ws = contract_workspace(tmp_path)
    calls, cache = no_build
    res = lab_here("tune", "--variant", "w1", "--shape", "1,2,128,256", "--predict", "one=1.0-1.1",
                   "--profiles", tmp_path / "store", env={"LAB_WORKSPACE": str(ws), "LAB_CACHE": str(cache)})
    assert res.returncode == 2 and "error: w1 declares no tuning candidates for head_dim 256, float16" in res.stderr, res.stderr
    assert calls == [] and list(cache.iterdir()) == []

"""The GQA contract on the CPU (kernels/common.cuh: K and V, dK and dV with heads_kv heads, a divisor of
Q's; a rung says `gqa = true`): a cuda rung may declare it and its binding is then built with
-DLAB_GQA; a rung that does not is refused a GQA problem (exit 2) by every command, before anything
is built; the checks of a GQA rung cover GQA shapes; heads_kv sits last in both argument structs (a
rung compiled against an older common.cuh reads the fields it knows); v8's GQA kernels compile
without spills. The GPU side: tests/test_gqa_gpu.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import platformdirs
import pytest

from conftest import lab_here
from lab.errors import LabError
from lab.ladder import build
from lab.ladder.registry import builtin
from lab.ladder.rungfile import parse_rung
from lab.measure import check, gradcheck
from lab.measure.problem import Problem, check_supported, parse_shape

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
VARIANTS = builtin()
FIRST = VARIANTS[0]                                         # the ladder's first rung: a plain cuda rung
HOPPER = [v for v in VARIANTS if v.min_cc >= (9, 0)]         # wgmma + TMA rungs (sm_90a)
GQA_BACKWARD = next(v for v in VARIANTS if v.kind == "cuda" and v.backward and v.gqa)
NO_GQA = [v for v in VARIANTS if v.kind == "cuda" and not v.gqa]
NO_GQA_BACKWARD = next(v for v in NO_GQA if v.backward)
NO_GQA_FORWARD_ONLY = next(v for v in NO_GQA if not v.backward and "float16" in v.dtypes)


def _copy_with(tmp_path: Path, variant, extra: str) -> Path:
    src = variant.source
    dst = tmp_path / src.name
    dst.write_text(src.read_text().replace("// lab:end", f"{extra}\n// lab:end"))
    return dst


def test_a_cuda_rung_may_declare_gqa_and_its_binding_is_built_for_it(tmp_path):
    plain = FIRST
    gqa = parse_rung(_copy_with(tmp_path, FIRST, "// gqa = true"))
    assert gqa.kind == "cuda" and gqa.gqa and not plain.gqa
    assert build.GQA_DEFINE in build._cxx_flags(gqa, tuning=False)
    assert build.GQA_DEFINE in build._cxx_flags(gqa, tuning=True)
    assert build.GQA_DEFINE not in build._cxx_flags(plain, tuning=False)
    # the binding's C++ flags are part of the build key: a rung's GQA build is not its plain build
    versions = {"torch": "2.13.0", "torch_cuda": "13.0", "nvcc": "13.0.88"}
    keys = {build.cache_key(build.sources_for(plain), [f"cxx:{f}" for f in build._cxx_flags(v, False)], versions)
            for v in (plain, gqa)}
    assert len(keys) == 2


def test_gqa_must_be_a_boolean(tmp_path):
    with pytest.raises(LabError, match="gqa must be true or false"):
        parse_rung(_copy_with(tmp_path, FIRST, '// gqa = "yes"'))


def test_the_hopper_rungs_declare_gqa_and_the_others_do_not():
    """GQA is declared by Hopper rungs only, a forward and a backward among them, the persistent
    forward (v9) too: tests/test_gqa_gpu.py checks every rung that declares it on a GPU."""
    assert HOPPER and not [v.id for v in HOPPER if not v.gqa]
    assert not [v.id for v in VARIANTS if v.gqa and v not in HOPPER]
    assert GQA_BACKWARD in HOPPER and any(v.gqa and not v.backward for v in HOPPER)   # a forward and a backward


def test_the_binding_refuses_kv_heads_unless_built_for_gqa():
    """Both ways of the binding's check are in the one source, chosen by the define the build passes."""
    text = (KERNELS / "binding.cpp").read_text()
    m = re.search(r"#ifdef LAB_GQA\n(.*?)#else\n(.*?)#endif", text, re.S)
    assert m, "binding.cpp checks K/V heads under #ifdef LAB_GQA"
    with_gqa, without = m.groups()
    assert "q.size(1) % k.size(1) == 0" in with_gqa
    assert "q.size(1) == k.size(1)" in without and "gqa = true" in without


@pytest.mark.parametrize("struct, tail", [("LabAttentionArgs", ["heads_kv", "workspace", "workspace_bytes", "counters"]),
                                          ("LabBackwardArgs", ["heads_kv", "deterministic"])])
def test_heads_kv_is_the_last_field_of_each_argument_struct(struct, tail):
    """Appended, never inserted: a rung built against an older common.cuh (a workspace copy) reads the
    same offsets for every field it knows (the backward's deterministic flag came after heads_kv, the forward's
    workspace after it)."""
    text = (KERNELS / "common.cuh").read_text()
    body = re.search(rf"struct {struct} \{{(.*?)\n\}};", text, re.S).group(1)
    fields = [re.match(r"\s*[\w\s\*]+?\b(\w+);", line).group(1) for line in body.splitlines()
              if re.match(r"\s*[\w\s\*]+?\b\w+;", line)]
    assert fields[-len(tail):] == tail, fields
    binding = (KERNELS / "binding.cpp").read_text()
    # the binding's aggregate initialisers put K's heads in that field: then the forward's workspace and counters, the
    # backward's flag
    assert len(re.findall(r"\(int\)k\.size\(1\), nullptr, 0, nullptr\};", binding)) == 1
    assert len(re.findall(r"\(int\)k\.size\(1\),\s*deterministic \? 1 : 0\};", binding)) == 1


@pytest.mark.parametrize("variant", NO_GQA, ids=lambda v: v.id)
def test_a_rung_without_gqa_is_refused_a_gqa_problem(variant):
    problem = parse_shape("2,16:2,256,64", dtype=variant.default_dtype)
    assert problem.gqa and problem.heads_kv == 2
    with pytest.raises(LabError, match=f"{variant.id} does not declare GQA support"):
        check_supported(variant, problem)
    for v in HOPPER:   # the rungs that declare it
        if v.gqa:
            check_supported(v, problem.with_dtype(v.default_dtype))


@pytest.mark.parametrize("args", [
    ("check", NO_GQA_BACKWARD, "--mode", "bwd", "--shape", "2,16:2,256,64", "--dtype", "float16"),
    ("check", NO_GQA_FORWARD_ONLY, "--shape", "1,8:1,128,64", "--dtype", "float16"),
    ("bench", NO_GQA_BACKWARD, "--mode", "bwd", "--shape", "2,32:8,512,128", "--dtype", "bfloat16"),
    ("profile", NO_GQA_FORWARD_ONLY, "--shape", "2,16:2,256,64", "--dtype", "float16"),
], ids=["check-bwd", "check-fwd", "bench", "profile"])
def test_every_command_refuses_gqa_for_a_rung_without_it(args, tmp_path):
    command, variant, *rest = args
    res = lab_here(command, "--variant", variant.id, *rest, cwd=tmp_path, env={"LAB_PROFILES": str(tmp_path / "store")})
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "does not declare GQA support" in res.stderr and "gqa = true" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_the_checks_of_a_gqa_rung_cover_gqa_shapes():
    gqa, plain = GQA_BACKWARD, NO_GQA_BACKWARD
    fwd = [p for p in check.check_shapes(gqa, check.DEFAULT_SHAPE_COUNT) if p.gqa]
    bwd = [g.problem for g in gradcheck.backward_shapes(gqa, check.DEFAULT_SHAPE_COUNT) if g.problem.gqa]
    for shapes in (fwd, bwd):
        assert shapes, "a GQA rung's default check includes GQA shapes"
        assert {p.heads_kv for p in shapes} >= {1, 2}               # multi-query and a group
        assert any(p.seqlen_q != p.seqlen_k or p.seqlen_q % 64 for p in shapes)   # ragged
        assert all(p.heads % p.heads_kv == 0 for p in shapes)
    assert {p.head_dim for p in fwd} == set(gqa.head_dims)
    assert not any(p.gqa for p in check.check_shapes(plain, check.DEFAULT_SHAPE_COUNT))
    assert not any(g.problem.gqa for g in gradcheck.backward_shapes(plain, check.DEFAULT_SHAPE_COUNT))
    # a rung without gqa keeps the shape list it had (a prefix of the same corners and seeded randoms)
    assert check.check_shapes(plain, 8) == check.check_shapes(plain, 24)[:8]


def test_a_gqa_problem_travels_to_a_child_and_keeps_its_kv_heads():
    p = Problem(2, 32, 1000, 1000, 128, True, "bfloat16", 8)
    assert Problem.from_label(p.label()) == p and p.shape_kv == (2, 8, 1000, 128)


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH: compiling the Hopper backward's GQA kernels needs it")
def test_the_hopper_backwards_gqa_kernels_compile_without_spills(monkeypatch):
    """The GQA instantiations of the Hopper backward rung (the backward's group loop and split
    epilogue, the forward's K/V row) beside its plain kernels, for sm_90a, in the tests' build cache
    (tests/test_build.py's)."""
    root = Path(platformdirs.user_cache_dir("flash-lab", appauthor=False)) / "tests"
    root.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("LAB_CACHE", str(root))
    records = build.ptxas_report(GQA_BACKWARD, "sm_90a").records
    gqa_bwd = [r for r in records if re.search(r"::bwd_kernel(?:_tdq)?<.*, true>\(", r.kernel)]   # _tdq: TMA-dQ (step 4)
    gqa_fwd = [r for r in records if re.search(r"fwd_kernel<.*OneTilePerCta, true>\(", r.kernel)]
    # the default's 8 (D 64/128 x dtype x mask) and the deterministic mode's 8 (Deterministic<>: GQA too)
    det = [r for r in gqa_bwd if "Deterministic<" in r.kernel]
    assert len(gqa_bwd) == 16 and len(det) == 8 and len(gqa_fwd) >= 8, [r.kernel[:100] for r in records]
    assert any("bwd_sum_partials_kernel" in r.kernel for r in records)
    spilled = [(r.kernel[:100], r.spill_stores_bytes, r.spill_loads_bytes) for r in records
               if r.spill_stores_bytes or r.spill_loads_bytes]
    assert not spilled, spilled


class _RecordingExtension:
    """Stands in for a built cuda rung's extension (kernels/binding.cpp's forward and backward): it
    records the shapes the lab's one call path hands it and fills the outputs it is given."""

    def __init__(self):
        self.seen = []

    def forward(self, q, k, v, o, causal, scale, lse=None):
        self.seen.append(("forward", q.shape, k.shape, v.shape, o.shape, None if lse is None else lse.shape))
        o.zero_()
        if lse is not None:
            lse.zero_()

    def backward(self, q, k, v, o, dout, lse, dq, dk, dv, causal, scale):
        self.seen.append(("backward", dq.shape, dk.shape, dv.shape))
        for t in (dq, dk, dv):
            t.zero_()


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd+bwd"])
def test_the_call_path_hands_a_cuda_rung_kv_and_their_gradients_with_kv_heads(mode):
    torch = pytest.importorskip("torch")
    from lab.measure import call

    problem = Problem(2, 8, 33, 47, 64, True, "float32", 2)
    ext = _RecordingExtension()
    attention = call.rung(GQA_BACKWARD, ext, problem)
    q, k, v = call.inputs(problem, attention, device="cpu")
    assert (q.shape[1], k.shape[1], v.shape[1]) == (8, 2, 2)
    out = call.make_call(attention, q, k, v, mode)()
    kinds = [s[0] for s in ext.seen]
    assert "forward" in kinds and (mode == "fwd") == ("backward" not in kinds)
    fwd = next(s for s in ext.seen if s[0] == "forward")
    assert fwd[2] == fwd[3] == torch.Size((2, 2, 47, 64)) and fwd[4] == torch.Size((2, 8, 33, 64))
    if mode != "fwd":
        assert fwd[5] == torch.Size((2, 8, 33))   # the LSE: one row per query head
        assert ext.seen[-1][1:] == (torch.Size((2, 8, 33, 64)), torch.Size((2, 2, 47, 64)), torch.Size((2, 2, 47, 64)))
        assert [t.shape[1] for t in out] == [8, 2, 2]

"""The registry is the only list of rungs, read from each rung's own file: every built-in rung
file declares its facts in a lab:rung block, exports its launcher and carries the header
STYLE.md asks for; bad declarations are refused with the file and line; the advice names rungs
through `demonstrating`, and no rung id is written anywhere else."""

import re

import pytest

from lab.errors import LabError
from lab.ladder import registry
from lab.ladder.registry import ANALYSIS_CLASSES, KERNELS_DIR, builtin, demonstrating, get, parse_rung, select
from lab.measure.problem import DTYPE_BYTES
from conftest import REPO  # noqa: E402

VARIANTS = builtin()

# The header sections of a rung file, as patterns: rungs word them a little differently
# ("Bottleneck attacked:" / "Bottleneck it attacks:"), but each section must be there.
HEADER_SECTIONS = {
    "what changed": r"What changed",
    "bottleneck attacked": r"Bottleneck",
    "predicted gain": r"Predicted gain",
    "measured result": r"Measured",
}


def header_comment(text: str) -> str:
    """The leading block of // comment lines."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        lines.append(line)
    return "\n".join(lines)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_source_exists_and_exports_its_launcher(variant):
    assert variant.source.is_file(), f"{variant.id}: {variant.source} is missing"
    text = variant.source.read_text()
    # The contract of kernels/common.cuh: extern "C" const char* lab_forward_<id>(const LabAttentionArgs*, cudaStream_t)
    signature = (r'(LAB_EXPORT|extern\s+"C")\s+const\s+char\s*\*\s*' + re.escape(variant.launcher)
                 + r"\s*\(\s*const\s+LabAttentionArgs\s*\*\s*\w*\s*,\s*cudaStream_t")
    assert re.search(signature, text), f"{variant.source.name} does not define {variant.launcher} with the contract's signature"
    assert "#include <torch" not in text, "rung sources are CUDA only; the binding includes torch"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_source_has_the_header_sections(variant):
    header = header_comment(variant.source.read_text())
    assert header.startswith(f"// {variant.label()}"), f"the header's first line should name {variant.label()}"
    missing = [name for name, pattern in HEADER_SECTIONS.items() if not re.search(pattern, header)]
    assert not missing, f"{variant.source.name} header lacks: {', '.join(missing)}"
    assert f"lab profile --variant {variant.id}" in header, "the header names the command that profiles the rung"
    assert variant.source.name == f"{variant.label()}.cu", "a built-in rung's file is <id>_<slug>.cu"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_prose_comes_from_the_header(variant):
    """What the registry says about a rung is read from its file, not written a second time."""
    text = " ".join(" ".join(line[2:] for line in header_comment(variant.source.read_text()).splitlines()).split())
    for field in ("changed", "attacks", "predicted_gain", "measured"):
        prose = getattr(variant, field)
        assert prose.strip(), f"{variant.id}: no {field} section read from the header"
        assert " ".join(prose.split()[-6:]) in text


def test_ids_unique_and_ordered():
    ids = [v.id for v in VARIANTS]
    assert len(set(ids)) == len(ids)
    assert len({v.slug for v in VARIANTS}) == len(VARIANTS)
    numbers = []
    for vid in ids:
        m = re.fullmatch(r"v(\d+)", vid)
        assert m, f"built-in rung id {vid!r} is not v<number>"
        numbers.append(int(m.group(1)))
    assert numbers == sorted(numbers), f"rungs are not in ladder order: {ids}"


def test_every_kernel_file_is_a_rung():
    """Every .cu / .py of kernels/ declares a rung (common.cuh and binding.cpp are not rung files)."""
    on_disk = {p.name for p in KERNELS_DIR.iterdir() if p.suffix in (".cu", ".py")}
    registered = {v.source.name for v in VARIANTS}
    assert on_disk == registered, f"without a lab:rung block: {sorted(on_disk - registered)}"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_entry_fields_are_usable(variant):
    assert variant.kind == "cuda" and variant.origin == "built-in" and variant.layout == "BHND"
    assert variant.dtypes and all(d in DTYPE_BYTES for d in variant.dtypes)
    assert variant.head_dims and all(d > 0 and d % 8 == 0 for d in variant.head_dims)
    assert set(variant.classes) <= set(ANALYSIS_CLASSES)
    assert variant.grid, "a built-in rung declares its grid"
    assert get(variant.id) is variant and get(variant.label()) is variant
    assert get(f"builtin:{variant.id}") is variant


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_declared_traits_match_the_launcher(variant):
    """aligned16 and grid are facts the GPU test acts on: the launcher's source must agree."""
    text = variant.source.read_text()
    launcher_refuses_misaligned = re.search(r'return "[^"]*16-byte aligned', text) is not None
    assert variant.aligned16 == launcher_refuses_misaligned
    if variant.batch_heads_on_grid_y:
        assert "65535" in text, "B*H on grid.y: the launcher must refuse more than 65535"


def test_vocabulary_is_the_analysis_vocabulary():
    from lab.analysis.findings import CLASSES

    assert tuple(ANALYSIS_CLASSES) == tuple(CLASSES)


@pytest.mark.parametrize("cls", ANALYSIS_CLASSES)
def test_demonstrating_names_the_first_rung_that_attacks_the_class(cls):
    found = demonstrating(cls)
    declaring = [v for v in VARIANTS if cls in v.classes]
    assert found == (declaring[0] if declaring else None)


def test_every_rung_after_the_baseline_attacks_something():
    assert all(v.classes for v in VARIANTS[1:])
    assert any(demonstrating(c) for c in ANALYSIS_CLASSES)


def test_select_all_is_the_registry_in_order():
    assert select("all") == list(VARIANTS)
    assert select(",".join(v.id for v in reversed(VARIANTS))) == list(reversed(VARIANTS))


# ----------------------------------------------------------------------------------------------
# The block's format, on files of our own
# ----------------------------------------------------------------------------------------------

GOOD_BLOCK = """\
// mine_tiled: my first kernel.
//
// lab:rung
// id = "mine"
// slug = "tiled"
// title = "Mine: tiled"
// dtypes = ["float16"]
// head_dims = [64]
// min_cc = "8.0"
// attacks = ["small-grid"]
// lab:end
//
// What changed (since the
//   previous one): the grid.
// Bottleneck attacked (profile of
//   the last run, H200): small-grid, 12 CTAs.
// Predicted gain: 2x.
// Measured: not yet.
#include "common.cuh"
"""


def _write(tmp_path, text, name="mine_tiled.cu"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_block_and_its_prose_parse(tmp_path):
    v = parse_rung(_write(tmp_path, GOOD_BLOCK), origin="workspace")
    assert (v.id, v.slug, v.kind, v.layout, v.dtypes, v.head_dims, v.min_cc, v.classes) == (
        "mine", "tiled", "cuda", "BHND", ("float16",), (64,), (8, 0), ("small-grid",))
    assert v.changed == "(since the previous one): the grid."
    assert v.attacks == "(profile of the last run, H200): small-grid, 12 CTAs."
    assert v.predicted_gain == "2x." and v.measured == "not yet."
    assert v.launcher == "lab_forward_mine"


def test_a_backward_may_declare_its_deterministic_mode(tmp_path):
    """`deterministic = true` beside `backward = true`: the capability, in the Variant and its dict; the
    built-in ladder's deterministic rungs are v8's kind (a backward whose launcher reads the flag)."""
    plain = parse_rung(_write(tmp_path, GOOD_BLOCK.replace("// lab:end", "// backward = true\n// lab:end")))
    det = parse_rung(_write(tmp_path, GOOD_BLOCK.replace("// lab:end", "// backward = true\n// deterministic = true\n"
                                                                       "// lab:end"), "det_tiled.cu"))
    assert not plain.deterministic and det.deterministic and det.backward
    assert det.to_dict()["deterministic"] is True and plain.to_dict()["deterministic"] is False
    declared = [v for v in builtin() if v.deterministic]
    assert declared and all(v.backward and re.search(r"\b(a|args)->deterministic\b", v.source.read_text())
                            for v in declared)


def test_a_file_without_a_block_is_not_a_rung(tmp_path):
    assert parse_rung(_write(tmp_path, "// helper\n__global__ void k() {}\n")) is None


@pytest.mark.parametrize("edit, message", [
    (('min_cc = "8.0"', 'min_cc = "8.0'), r"mine_tiled.cu:9: the lab:rung block is not valid TOML"),
    (('// lab:end\n', ''), r"has no `// lab:end` line"),
    (('// slug = "tiled"\n', ''), r"lacks slug"),
    (('attacks = ["small-grid"]', 'attacks = ["small_grid"]'), r"unknown class\(es\) small_grid"),
    (('dtypes = ["float16"]', 'dtypes = ["int8"]'), r"dtypes"),
    (('id = "mine"', 'id = "my rung"'), r"id 'my rung'"),
    (('min_cc = "8.0"', 'min_cc = 8'), r"min_cc"),
    (('// lab:end', '// layout = "BNHD"\n// lab:end'), r"layout BNHD is for python rungs"),
    (('// lab:end', '// colour = "red"\n// lab:end'), r"unknown key\(s\) .*colour"),
    (('// lab:end', '// grid = "diagonal"\n// lab:end'), r"grid 'diagonal'"),
    (('// lab:end', '// deterministic = true\n// lab:end'), r"deterministic = true is a mode of the backward"),
    (('// lab:end', '// backward = true\n// deterministic = "yes"\n// lab:end'), r"deterministic must be true or false"),
])
def test_bad_blocks_are_refused_with_the_file(tmp_path, edit, message):
    old, new = edit
    assert old in GOOD_BLOCK
    path = _write(tmp_path, GOOD_BLOCK.replace(old, new, 1))
    with pytest.raises(LabError, match=message) as err:
        parse_rung(path)
    assert str(path) in str(err.value)


def test_two_rungs_with_one_id_are_refused(tmp_path):
    a = _write(tmp_path, GOOD_BLOCK, "a.cu")
    b = _write(tmp_path, GOOD_BLOCK.replace('slug = "tiled"', 'slug = "other"'), "b.cu")
    with pytest.raises(LabError, match="two rungs with id 'mine'"):
        registry.scan([a, b], "workspace")


def test_a_python_rung_declares_its_callable_and_layout(tmp_path):
    text = "\n".join("# " + line[3:] if line.startswith("// ") else "#" for line in GOOD_BLOCK.splitlines()
                     if line.startswith("//"))
    text = text.replace("# lab:end", '# layout = "BNHD"\n# entry = "attention"\n# lab:end')
    v = parse_rung(_write(tmp_path, text + "\ndef attention(q, k, v, causal, scale):\n    return q\n", "mine.py"))
    assert (v.kind, v.layout, v.entry) == ("python", "BNHD", "attention")
    assert v.measured == "not yet."


def test_no_rung_id_is_written_outside_the_rung_files():
    """`lab`, the tools and the tests name rungs through the registry: no string in their code (a
    docstring is prose, not code) is a rung's id or holds its <id>_<slug> label."""
    import ast

    ids = {v.id for v in VARIANTS}
    label_re = re.compile(r"\b(%s)" % "|".join(re.escape(v.label()) for v in VARIANTS))
    offenders = []
    for folder in ("lab", "tools", "tests"):
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                          and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    if node.value in ids or label_re.search(node.value):
                        offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:80]!r}")
    assert not offenders, "rung ids written outside the registry's data:\n" + "\n".join(offenders[:20])


# ------------------------------------------------------------------------------ lab variants, as printed

def _variants(*args, columns=80):
    from click.testing import CliRunner

    from lab.cli import main

    # the built-in ladder alone: LAB_WORKSPACE through the runner's env, which it restores afterwards
    r = CliRunner().invoke(main, ["variants", *args], env={"COLUMNS": str(columns), "LAB_WORKSPACE": "none"})
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


@pytest.mark.parametrize("columns", [80, 120])
def test_variants_is_one_line_per_rung_within_the_terminal(columns):
    lines = _variants(columns=columns)
    assert len(lines) <= 40 and max(map(len, lines)) <= columns, "\n".join(lines)
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["id"])
    assert lines[header].split() == ["id", "origin", "kind", "dtypes", "D", "bwd", "LSE", "GQA", "det", "title"]
    rows = [line for line in lines if line.split()[:1] and line.split()[0] in {v.id for v in builtin()}]
    assert [r.split()[0] for r in rows] == [v.id for v in builtin()]
    for v, row in zip(builtin(), rows):
        cells = row.split()
        assert cells[1] == "built-in" and cells[2] == v.kind and cells[5] == ("yes" if v.backward else "no")
        assert cells[6] == ("yes" if v.writes_lse else "no") and cells[7] == ("yes" if v.gqa else "no")
        assert cells[8] == ("yes" if v.deterministic else "no")
        assert cells[4] == ",".join(map(str, v.head_dims))
        title = row[lines[header].index("title"):].rstrip()
        assert v.title.startswith(title.rstrip("…")) and (title == v.title or title.endswith("…"))


def test_variants_id_shows_the_rungs_block_and_header_in_full():
    from lab.ladder.rungfile import read_block

    for v in builtin():
        text = "\n".join(_variants(v.id))
        _, prose = read_block(v.source)
        for line in [*prose, *(line for line in v.source.read_text().splitlines() if line.lstrip("/# ").startswith("id = "))]:
            assert line.strip("/# ").strip() in text, (v.id, line)
        assert "lab:rung" in text and "lab:end" in text and v.title in text
    assert "Traceback" not in "\n".join(_variants("--json"))

"""The registry is the only list of rungs: every entry has its source file, that file exports the
entry's launcher and carries the header STYLE.md asks for, and every kernels/v*.cu is registered."""

import re

import pytest

from lab.measure.problem import DTYPE_BYTES
from lab.ladder.registry import KERNELS_DIR, VARIANTS, get, select

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


def test_ids_unique_and_ordered():
    ids = [v.id for v in VARIANTS]
    assert len(set(ids)) == len(ids)
    assert len({v.slug for v in VARIANTS}) == len(VARIANTS)
    numbers = []
    for vid in ids:
        m = re.fullmatch(r"v(\d+)", vid)
        assert m, f"rung id {vid!r} is not v<number>"
        numbers.append(int(m.group(1)))
    assert numbers == sorted(numbers), f"rungs are not in ladder order: {ids}"


def test_every_kernel_file_is_registered():
    on_disk = {p.name for p in KERNELS_DIR.glob("v*.cu")}
    registered = {v.source.name for v in VARIANTS}
    assert on_disk == registered, f"unregistered: {sorted(on_disk - registered)}; missing: {sorted(registered - on_disk)}"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_entry_fields_are_usable(variant):
    assert variant.dtypes and all(d in DTYPE_BYTES for d in variant.dtypes)
    assert variant.head_dims and all(d > 0 and d % 8 == 0 for d in variant.head_dims)
    assert variant.changed.strip() and variant.attacks.strip() and variant.predicted_gain.strip()
    assert get(variant.id) is variant and get(variant.label()) is variant


def test_select_all_is_the_registry_in_order():
    assert select("all") == list(VARIANTS)
    assert select(",".join(v.id for v in reversed(VARIANTS))) == list(reversed(VARIANTS))

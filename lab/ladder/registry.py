"""THE registry of kernel rungs. The CLI, build, tests, advice, reports and README all read it.

One source of truth per rung: the rung's own file, whose `lab:rung` block and header prose
lab.ladder.rungfile parses. Nothing else restates them.

Where rungs come from: the built-in ladder is every file in the lab's kernels/ with a block;
a workspace (lab.ladder.workspace: a folder with lab.toml, found upward like .git) adds the rungs
in its own kernels/. Id clash rule: inside a workspace, the workspace's rung wins (as a local file
shadows an installed one); `lab variants` marks it, and the built-in stays reachable as
`builtin:<id>`. Bad declarations raise LabError (exit 2) naming the file and line.

A forward+backward pairing `F+B` (lab.ladder.pairing: F's forward feeding B's backward) is a rung of
this registry too: `get` makes it from its two parts, each looked up as any rung is.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from lab.errors import LabError
from lab.ladder import pairing, workspace
# The rung-file facts readers reach through the registry (registry.Variant, registry.KERNELS_DIR...).
from lab.ladder.rungfile import (ANALYSIS_CLASSES, BUILTIN_PREFIX, DTYPES, KERNELS_DIR, Variant,  # noqa: F401
                                 block_lines, parse_rung, read_block, rung_files, scan)

# ---------------------------------------------------------------------------------------------
# The registry: built-in ladder + the active workspace
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _builtin_cached(folder: str) -> tuple[Variant, ...]:
    return tuple(scan(rung_files(Path(folder)), "built-in"))


def builtin() -> tuple[Variant, ...]:
    """The ladder that ships with the lab (kernels/ of this package)."""
    return _builtin_cached(str(KERNELS_DIR))


def _workspace_rungs() -> tuple[Variant, ...]:
    ws = workspace.active()
    return ws.rungs() if ws is not None else ()


def _shadowed(vid: str) -> bool:
    return any(w.id == vid for w in _workspace_rungs())


def ref(v: Variant) -> str:
    """A spec that `get` resolves to this very rung in a child process too: `builtin:<id>` for a
    built-in rung the workspace shadows. (A function of the registry, not a field of the rung: it
    depends on the active workspace.) A pair: its parts' refs, `F+B`."""
    if v.parts:
        return pairing.SEPARATOR.join(ref(p) for p in v.parts)
    return f"{BUILTIN_PREFIX}{v.id}" if v.origin == "built-in" and _shadowed(v.id) else v.id


def variants() -> tuple[Variant, ...]:
    """Every rung this command sees: the built-in ladder, then the workspace's rungs. A workspace
    rung with a built-in's id takes its place in the list (the workspace wins)."""
    ws = _workspace_rungs()
    ws_ids = {w.id for w in ws}
    builtins = builtin()
    builtin_ids = {b.id for b in builtins}
    merged = [b for b in builtins if b.id not in ws_ids]
    merged += [replace(w, shadows=w.id in builtin_ids) for w in ws]
    return tuple(merged)


def all_ids() -> list[str]:
    return [v.id for v in variants()]


def get(variant_id: str) -> Variant:
    """Look a rung up by id (`v2`), label (`v2_float4`), or `builtin:v2` for the built-in one; `v9+v8`
    is the pair of v9's forward and v8's backward (lab.ladder.pairing)."""
    spec = variant_id.strip()
    if pairing.is_pair_spec(spec):
        forward, backward = pairing.split(spec)
        try:
            parts = get(forward), get(backward)
        except LabError as e:   # which pairing named the unknown rung
            raise LabError(f"{spec}: {e}", hint=e.hint) from None
        return pairing.pair(*parts, spec)
    pool = variants()
    if spec.startswith(BUILTIN_PREFIX):
        spec, pool = spec[len(BUILTIN_PREFIX):], builtin()
    for v in pool:
        if spec in (v.id, v.label()):
            return v
    raise LabError(f"unknown variant {variant_id!r}; known: {', '.join(v.id for v in pool)}",
                   hint="`lab variants` lists the rungs")


def select(spec: str) -> list[Variant]:
    """Parse a CLI selection: `all`, `v2`, `v1,v3`, or with pairs `v9+v8,v8` (`all`: the rungs, no pairs)."""
    spec = spec.strip()
    if spec == "all":
        return list(variants())
    ids = [s.strip() for s in spec.split(",") if s.strip()]
    if not ids:
        raise LabError("no variant given; use an id such as v2, a list such as v1,v2, or all")
    return [get(i) for i in ids]


def rungs_of(chosen) -> list[Variant]:
    """The rungs behind a selection: a pair's two parts in its place, each rung once (what `lab build` builds)."""
    return list(dict.fromkeys(p for v in chosen for p in (v.parts or (v,))))


def attacking(cls: str) -> list[Variant]:
    """The built-in rungs that declare they attack `cls`, in ladder order."""
    return [v for v in builtin() if cls in v.classes]


def demonstrating(cls: str) -> Variant | None:
    """The rung of the built-in ladder that demonstrates the fix for analysis class `cls`: the
    first (lowest) one that declares it attacks the class; None where no rung does."""
    found = attacking(cls)
    return found[0] if found else None


def source_label(v: Variant) -> str:
    """The rung's file as a reader finds it: kernels/<file> under the lab, or under its workspace; a
    pair's two files, `F's + B's`."""
    if v.parts:
        return " + ".join(source_label(p) for p in v.parts)
    if v.origin == "built-in":
        return f"kernels/{v.source.name}"
    ws = workspace.active()
    return ws.relative(v.source) if ws is not None else str(v.source)


def first_sentence(text: str) -> str:
    m = re.match(r"(.+?\.)(\s|$)", text)
    return (m.group(1) if m else text).strip()


def markdown_table() -> str:
    """The README's ladder table, generated from the rung files so that it cannot drift."""
    lines = ["| rung | file | dtypes | D | min cc | backward | analysis classes it attacks |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for v in builtin():
        cells = [f"**{v.id}** {v.title}", f"`kernels/{v.source.name}`", ", ".join(v.dtypes),
                 ", ".join(map(str, v.head_dims)), ".".join(map(str, v.min_cc)), "yes" if v.backward else "no",
                 ", ".join(v.classes) or "none (the baseline)"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)

"""Scaffolding a workspace: `lab init` makes one (lab.toml, kernels/ with the launcher contract's
README, profiles/, reports/), `lab new` copies a rung forward into its kernels/."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from lab.errors import LabError
from lab.files import write_text_atomic
from lab.ladder import registry
from lab.ladder.rungfile import _ID_RE, _SECTIONS, _SLUG_RE, COMMENT, KERNELS_DIR, header_lines, read_block
from lab.ladder.workspace import LAB_TOML, TEMPLATE, Workspace, load, valid_name


# ---------------------------------------------------------------------------------------------
# lab init
# ---------------------------------------------------------------------------------------------

KERNELS_README = """\
# Your rungs

Each rung is one file here that opens with a `lab:rung` block: TOML in comment lines that declares
what the lab needs to know (see any built-in rung, e.g. `lab new vN --from v1` copies one forward).

* a **cuda** rung is a `.cu` that includes "common.cuh" (the lab finds it: {common}) and exports
  its launcher, named after its id:

      LAB_EXPORT const char* lab_forward_<id>(const LabAttentionArgs* args, cudaStream_t stream);

  It launches on `stream` and returns nullptr, or a message saying why it cannot run the problem.
  Q, K, V, O are contiguous (B, H, N, D) tensors; causal masking is top-left aligned.
  With `backward = true` in its block it also exports `lab_backward_<id>` and
  `lab_backward_<id>_workspace`, and its forward writes the row log-sum-exp (common.cuh's backward
  contract). With `gqa = true` K and V (and dK, dV) may have `args->heads_kv` heads, a divisor of
  Q's: query head h reads K/V head h / (heads / heads_kv), dK and dV are summed over each group
  (common.cuh's GQA contract); without it the lab never sends such a problem.
  A forward-only rung whose forward writes the row log-sum-exp anyway (for another rung's
  backward) says `writes_lse = true`; only then, or with a backward, is it given an lse buffer.
  A backward with a deterministic mode says `deterministic = true`: with args->deterministic = 1
  (`--deterministic`) its dQ, dK, dV must have the same bits on every run (common.cuh's
  deterministic contract; `lab check --deterministic` runs it twice and compares them).
* a **python** rung is a `.py` whose function `forward(q, k, v, causal, softmax_scale) -> o`
  (or the `entry` the block names, "module:function") computes attention; with `layout = "BNHD"`
  it gets (B, N, H, D) tensors, as flash-attn's API takes them, and returns O the same way.
  With `backward = true` its forward returns (o, lse) (lse: fp32 [B, H, Nq], natural log) and the
  same module has `backward(q, k, v, o, dout, lse, causal, softmax_scale) -> (dq, dk, dv)`
  (`writes_lse = true` without a backward: the forward returns (o, lse) alone); with
  `gqa = true` K and V may have fewer heads than Q; with `deterministic = true` the backward takes
  `deterministic=False` as a keyword, and gives the same bits on every run when it is True.

Below the block, the header's sections are the rung's record: What changed, Bottleneck attacked,
Predicted gain (before you measure), Measured, and `Profile: lab profile --variant <id>`.
"""

README = """\
# {name}

A Flash Lab workspace: your rungs in kernels/, runs in profiles/, pages in reports/.
`lab variants` lists them beside the built-in ladder; `lab profile --variant <id>` measures one.
"""


def init(folder: Path) -> Workspace:
    """Make `folder` a workspace: lab.toml, kernels/ (with the contract's README), profiles/,
    reports/ and a README. Refuses (nothing written) where one exists or a path is in the way."""
    folder = Path(folder)
    if (folder / LAB_TOML).exists():
        raise LabError(f"{folder} is already a workspace ({folder / LAB_TOML} exists)")
    if folder.exists() and not folder.is_dir():
        raise LabError(f"{folder} exists and is not a folder")
    name = folder.resolve().name
    if not valid_name(name):
        raise LabError(f"workspace name {name!r}: use letters, digits, '.', '_' or '-'")
    for sub in ("kernels", "profiles", "reports"):
        if (folder / sub).exists() and not (folder / sub).is_dir():
            raise LabError(f"{folder / sub} exists and is not a folder")
    files = {
        folder / "kernels" / "README.md": KERNELS_README.format(common=KERNELS_DIR / "common.cuh"),
        folder / "README.md": README.format(name=name),
        folder / ".gitignore": "reports/\n",
        folder / "profiles" / ".gitkeep": "",   # git keeps the (empty) run store, so `lab report` finds it
    }
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("kernels", "profiles", "reports"):
        (folder / sub).mkdir(exist_ok=True)
    for path, text in files.items():
        if not path.exists():   # a user's own README or .gitignore stays as it is
            path.write_text(text)
    write_text_atomic(folder / LAB_TOML, TEMPLATE.format(name=name))  # last: the workspace appears whole
    return load(folder)


# ---------------------------------------------------------------------------------------------
# lab new
# ---------------------------------------------------------------------------------------------

def new_rung(ws: Workspace, new_id: str, source, slug: str | None = None, bottleneck: str | None = None,
             evidence_text: str | None = None, predicted_text: str | None = None) -> Path:
    """Copy rung `source` (a registry.Variant, built-in or this workspace's) forward into the
    workspace's kernels/ as `new_id`: its launcher renamed, its lab:rung block rewritten, and a
    header skeleton whose "Bottleneck attacked" holds the evidence of source's latest profile."""
    if not _ID_RE.match(new_id):
        raise LabError(f"rung id {new_id!r}: use a letter then letters, digits or _ (e.g. v6)")
    taken = next((v for v in ws.rungs() if v.id == new_id), None)
    if taken is not None:
        raise LabError(f"this workspace already has a rung {new_id!r}: {taken.source}",
                       hint="pick another id, or edit that file")
    slug = slug or source.slug
    if not _SLUG_RE.match(slug):
        raise LabError(f"slug {slug!r}: use lower-case letters, digits or _")
    dest = ws.kernels_dir / f"{new_id}_{slug}{source.source.suffix}"
    if dest.exists():
        raise LabError(f"{dest} already exists", hint="pick another id or --slug")
    text = copy_forward(source, new_id, slug, bottleneck, evidence_text, predicted_text)
    ws.kernels_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(dest, text)
    return dest


def copy_forward(source, new_id: str, slug: str, bottleneck: str | None, evidence_text: str | None,
                 predicted_text: str | None = None) -> str:
    comment = COMMENT[source.source.suffix]
    table, _ = read_block(source.source)
    lines = source.source.read_text().splitlines()
    # the old block goes (wherever it sat, with the lines that introduce it); the new one opens the file
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{comment} lab:rung")
    stop = next(i for i in range(start, len(lines)) if lines[i].strip() == f"{comment} lab:end")
    if any(not line.strip().startswith(comment) for line in lines[:start]):
        # a block after the code (the built-in rungs'): its introducing comment lines go with it
        while start > 0 and lines[start - 1].strip().startswith(comment) and lines[start - 1].strip() != comment:
            start -= 1
    elif stop + 1 < len(lines) and lines[stop + 1].strip() == comment:
        stop += 1   # a block inside the header: the blank comment line after it too
    lines = lines[:start] + lines[stop + 1:]
    while lines and not lines[-1].strip():
        lines.pop()
    text = "\n".join(lines) + "\n"
    header = header_lines(text, comment)
    # The header ends where the leading comment block ends; its last section line is where the
    # old rung's own prose stops and its notes (layouts, diagrams) begin: those are kept.
    first = next(i for i, line in enumerate(lines) if line.strip().startswith(comment))
    end = first + len(header)
    kept_notes = _notes_after_sections(lines[first:end], comment)
    body = "\n".join(lines[end:])
    if source.kind == "cuda":  # the launchers (and their _config/_workspace variants) take the new id
        body = re.sub(rf"\blab_(forward|backward)_{re.escape(source.id)}(?=\b|_)", rf"lab_\1_{new_id}", body)
    block = dict(table, id=new_id, slug=slug,
                 title=f"{new_id}: (one line: what it changes; copied forward from {source.id})",
                 attacks=[bottleneck] if bottleneck else [])
    c = comment
    out = [f"{c} {new_id}_{slug}: copied forward from {source.label()}; say here what this rung changes.", c,
           f"{c} lab:rung", *[f"{c} {line}" for line in _toml_lines(block)], f"{c} lab:end", c,
           f"{c} What changed since {source.id}: (write it: the one optimization this rung makes, so that",
           f"{c}   `diff {source.source.name} {new_id}_{slug}{source.source.suffix}` shows exactly it)"]
    if evidence_text:
        out += _wrap(f"Bottleneck attacked: {evidence_text}", c)
    else:
        out += [f"{c} Bottleneck attacked: (no stored profile of {source.id} yet: `lab profile --variant {registry.ref(source)}`",
                f"{c}   names it with the evidence; set `attacks` in the block above to its class)"]
    # the lab's estimate for the bottleneck copied (lab.store.ledger.estimate_stub): a prediction made
    # before any measurement, which the ledger later holds against the measured gain
    out += (_wrap(f"Predicted gain: {predicted_text}", c) if predicted_text
            else [f"{c} Predicted gain: (write it before the first timing)"])
    out += [f"{c} Measured: (blank until `lab profile --variant {new_id}`)",
            f"{c} Profile: lab profile --variant {new_id}"]
    if kept_notes:
        out += [c, *kept_notes]
    return "\n".join(out) + "\n" + body + ("\n" if not body.endswith("\n") else "")


def _notes_after_sections(header: list[str], comment: str) -> list[str]:
    last = -1
    in_section = False
    for i, line in enumerate(header):
        body = line[len(comment):].lstrip(" ") if line.startswith(comment) else line
        raw = line[len(comment):]
        if any(body.startswith(label) for _, label in _SECTIONS):
            in_section, last = True, i
        elif in_section and raw[:1] == " " and raw[1:2] in (" ", "\t") and body.strip():
            last = i
        else:
            in_section = False
    notes = header[last + 1:]
    while notes and notes[0].strip() == comment:
        notes = notes[1:]
    return notes


def _toml_lines(table: dict) -> list[str]:
    out = []
    for key, value in table.items():
        out.append(f"{key} = {_toml_value(value)}")
    return out


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise LabError(f"cannot write {v!r} into a lab:rung block")


def _wrap(text: str, comment: str, width: int = 100) -> list[str]:
    lines = textwrap.wrap(text, width=width - len(comment) - 3)
    return [f"{comment} {lines[0]}"] + [f"{comment}   {line}" for line in lines[1:]]

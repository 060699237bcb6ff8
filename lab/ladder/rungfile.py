"""A rung's file: the `lab:rung` block that declares its facts and the prose sections of its
header, parsed into a Variant (lab.ladder.registry gathers them into the ladder; lab.ladder.workspace
scans a workspace's kernels/ with the same parser).


One source of truth per rung: the rung's own file. Its header opens with a `lab:rung` block, TOML
written in comment lines (`//` in a .cu, `#` in a .py), that declares the facts tools act on; the
prose sections below it (What changed / Bottleneck / Predicted gain / Measured) are read as the
rung's text. Nothing else restates them.

    // lab:rung
    // id = "v2"                       # also the launcher's name: lab_forward_v2
    // slug = "float4"
    // title = "float4: 16-byte vectorized global loads and stores"
    // dtypes = ["float32"]            # the first is the default
    // head_dims = [32, 64, 128]
    // min_cc = "7.5"
    // attacks = ["uncoalesced-global"]  # analysis classes this rung demonstrates the fix for
    // aligned16 = true                # the launcher refuses q/k/v/o not 16-byte aligned
    // grid = "bh"                     # grid.x[,grid.y]: "bh" or "q-tiles,bh" (B*H on grid.y)
    // backward = true                 # it also exports lab_backward_<id> (common.cuh's backward contract)
    // gqa = true                      # K and V may have fewer heads than Q (GQA/MQA; cuda: args->heads_kv)
    // writes_lse = true               # a forward-only rung whose forward writes the row log-sum-exp
    // deterministic = true            # its backward has a deterministic mode (needs backward = true)
    // lab:end

The block may sit anywhere in the file: `lab new` opens a new rung with it; the built-in rungs keep
theirs at the end, so that the source line numbers recorded in stored profiles stay valid.

Optional keys: kind ("cuda" for .cu, "python" for .py), layout ("BHND", or "BNHD" for a python
rung that takes flash-attn's layout), arch_flags (extra nvcc -gencode flags), entry (python:
"function" in this file, or "package.module:function"), backward, gqa, writes_lse, deterministic. With `gqa = true` K and V
(and dK, dV) may have heads_kv heads, a divisor of Q's: a cuda rung reads args->heads_kv
(kernels/common.cuh's GQA contract; its binding is built with -DLAB_GQA), a python rung gets the
tensors as they are. A rung without it is never given such a problem (refused, exit 2).

`writes_lse = true`: the rung's forward writes the row log-sum-exp (kernels/common.cuh's backward
contract: fp32 [B, H, Nq], natural log) although the rung has no backward of its own, as a Hopper
forward written for another rung's backward does. `backward = true` implies it (the backward contract
includes that forward), so a backward rung need not say it and may not say `writes_lse = false`. A
cuda rung's binding is then built with -DLAB_WRITES_LSE and accepts an lse tensor, which every other
rung's refuses; a python rung's forward returns (o, lse) as a backward rung's does.

`deterministic = true` (only beside `backward = true`): the rung's backward takes a deterministic flag
and then gives bitwise-identical dQ, dK and dV run to run on the same inputs (kernels/common.cuh's
deterministic contract: a cuda rung reads args->deterministic, its binding built with
-DLAB_DETERMINISTIC; a python rung's backward takes `deterministic=` as a keyword). `--deterministic`
on check, bench, sweep and profile asks for it; a rung without the capability is refused (exit 2).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from lab.vocabulary import CLASSES
from lab import shipped
from lab.errors import LabError

KERNELS_DIR = shipped.KERNELS_DIR   # the built-in ladder: kernels/ at the top level, lab/kernels in a wheel

# The analysis vocabulary of DESIGN.md: the classes a rung may declare it attacks.
ANALYSIS_CLASSES = CLASSES   # lab.vocabulary: shared by rungs and findings
DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("BHND", "BNHD")
KINDS = {".cu": "cuda", ".py": "python"}
COMMENT = {".cu": "//", ".py": "#"}
BLOCK_START, BLOCK_END = "lab:rung", "lab:end"
BUILTIN_PREFIX = "builtin:"

_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")     # it names a C symbol, a run id and a folder
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_CC_RE = re.compile(r"^(\d+)\.(\d+)$")
_GRID_PARTS = ("bh", "q-tiles", "flat")
# Header prose sections: the label starts the line, its text runs to the first ':' outside
# parentheses and continues on indented lines.
_SECTIONS = (("changed", "What changed"), ("bottleneck", "Bottleneck"), ("predicted_gain", "Predicted gain"),
             ("measured", "Measured"), ("profile_command", "Profile"))

REQUIRED = ("id", "slug", "title", "dtypes", "head_dims", "min_cc", "attacks")
OPTIONAL = ("kind", "layout", "arch_flags", "aligned16", "grid", "entry", "backward", "gqa", "writes_lse",
            "deterministic")


@dataclass(frozen=True)
class Variant:
    id: str                      # "v1"
    slug: str                    # "naive"
    title: str                   # one line for tables
    kind: str                    # "cuda" (a .cu exporting lab_forward_<id>) or "python" (a callable)
    source: Path                 # the rung's file: the one source of its facts
    dtypes: tuple[str, ...]      # torch dtype names the rung accepts; the first is the default
    head_dims: tuple[int, ...]   # supported D
    min_cc: tuple[int, int]      # minimum compute capability
    classes: tuple[str, ...]     # analysis classes it attacks (it demonstrates their fix)
    layout: str = "BHND"         # the layout its inputs come in: (B, H, N, D) or (B, N, H, D)
    arch_flags: tuple[str, ...] = ()  # extra nvcc -gencode flags beyond the defaults (e.g. sm_90a)
    aligned16: bool = False      # the launcher refuses q, k, v, o that are not 16-byte aligned
    grid: str = ""               # launch grid "x[,y]": "bh" one CTA per (batch, head); "q-tiles,bh"
    entry: str = ""              # python rungs: "function" in the file, or "module:function"
    backward: bool = False       # it has a backward (cuda: lab_backward_<id>; python: a `backward` callable)
    gqa: bool = False            # it takes K and V with fewer heads than Q (heads_kv divides heads)
    writes_lse: bool = False     # its forward writes the row log-sum-exp when given a buffer (backward implies it)
    deterministic: bool = False  # its backward takes a deterministic flag: then dQ, dK, dV bitwise equal run to run
    origin: str = "built-in"     # "built-in" or "workspace"
    changed: str = ""            # header prose: what changed since the previous rung
    attacks: str = ""            # header prose: the bottleneck it attacks, with the evidence
    predicted_gain: str = ""     # header prose: written before it was measured
    measured: str = ""           # header prose: the measured result (device, date)
    follows: str = ""            # header prose: the rung "What changed since <id>" names (`lab new` writes it)
    shadows: bool = field(default=False, compare=False)  # a workspace rung hiding a built-in of its id
    parts: tuple = ()            # kind "pair" (lab.ladder.pairing): (the forward's rung, the backward's rung)

    def __post_init__(self):
        if self.backward and not self.writes_lse:   # the backward contract's forward writes the LSE
            object.__setattr__(self, "writes_lse", True)

    @property
    def launcher(self) -> str:
        return f"lab_forward_{self.id}"

    @property
    def backward_launcher(self) -> str | None:
        return f"lab_backward_{self.id}" if self.backward and self.kind == "cuda" else None

    @property
    def default_dtype(self) -> str:
        return self.dtypes[0]

    @property
    def batch_heads_on_grid_y(self) -> bool:
        """B*H on grid.y: the launcher must refuse more than 65535 (non-causal at least)."""
        parts = [p.strip() for p in self.grid.split(",")]
        return len(parts) > 1 and parts[1] == "bh"

    def label(self) -> str:
        return self.id if self.parts else f"{self.id}_{self.slug}"

    @property
    def sources(self) -> tuple[Path, ...]:
        """Every file whose code runs: the rung's, or a pair's two."""
        return tuple(dict.fromkeys(p.source for p in self.parts)) if self.parts else (self.source,)

    def source_sha256(self) -> str:
        """The code that runs, as a run or a tune records it: one sha256 per source, joined by '+'."""
        return "+".join(hashlib.sha256(s.read_bytes()).hexdigest() for s in self.sources)

    def to_dict(self) -> dict:
        return {"id": self.id, "slug": self.slug, "title": self.title, "kind": self.kind, "origin": self.origin,
                "source": str(self.source), "dtypes": list(self.dtypes), "head_dims": list(self.head_dims),
                "layout": self.layout, "min_cc": ".".join(map(str, self.min_cc)), "arch_flags": list(self.arch_flags),
                "aligned16": self.aligned16, "grid": self.grid, "entry": self.entry or None, "backward": self.backward, "gqa": self.gqa,
                "writes_lse": self.writes_lse, "deterministic": self.deterministic,
                "pair": [p.id for p in self.parts] or None,
                "attacks_classes": list(self.classes), "shadows_builtin": self.shadows,
                "changed": self.changed, "attacks": self.attacks, "predicted_gain": self.predicted_gain,
                "measured": self.measured, "follows": self.follows or None}


# ---------------------------------------------------------------------------------------------
# Reading a rung file
# ---------------------------------------------------------------------------------------------

def header_lines(text: str, comment: str) -> list[str]:
    """The leading comment block (blank lines allowed before it; a .py shebang is skipped)."""
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if not out and (not stripped or stripped.startswith("#!")):
            continue
        if not stripped.startswith(comment):
            break
        out.append(stripped)
    return out


def _uncomment(line: str, comment: str) -> str:
    body = line[len(comment):]
    return body[1:] if body.startswith(" ") else body


def read_block(path: Path) -> tuple[dict, list[str]] | None:
    """(the block's TOML table, the header's prose lines) or None when the file has no block.

    The block may sit anywhere in the file: a user's rung usually opens with it; the built-in rungs
    keep theirs at the end, so that the source lines recorded in stored profiles stay where they were."""
    comment = COMMENT.get(path.suffix)
    if comment is None:
        raise LabError(f"{path}: a rung is a .cu (kind cuda) or a .py (kind python) file")
    try:
        text = path.read_text()
    except OSError as e:
        raise LabError(f"cannot read rung file {path}: {e.strerror or e}") from None
    lines = text.splitlines()
    is_marker = lambda line, word: (line.strip().startswith(comment)  # noqa: E731
                                    and _uncomment(line.strip(), comment).strip() == word)
    start = next((i for i, line in enumerate(lines) if is_marker(line, BLOCK_START)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if is_marker(lines[i], BLOCK_END)), None)
    if end is None:
        raise LabError(f"{path}:{start + 1}: the `{BLOCK_START}` block has no `{comment} {BLOCK_END}` line")
    inside = lines[start + 1:end]
    stray = next((start + 2 + i for i, line in enumerate(inside) if not line.strip().startswith(comment)), None)
    if stray is not None:
        raise LabError(f"{path}:{stray}: every line of the {BLOCK_START} block is a `{comment}` comment")
    try:
        table = tomllib.loads("\n".join(_uncomment(line.strip(), comment) for line in inside))
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        where = start + 1 + int(m.group(1)) if m else start + 1
        raise LabError(f"{path}:{where}: the {BLOCK_START} block is not valid TOML: {e}") from None
    header = header_lines(text, comment)
    first = next(i for i, line in enumerate(lines)
                 if line.strip().startswith(comment) and not line.strip().startswith("#!")) if header else 0
    prose = [_uncomment(line.strip(), comment) for i, line in enumerate(header, first) if not start <= i <= end]
    return table, prose


def block_lines(path: Path) -> list[str]:
    """The rung's lab:rung block as written (markers included, comment marks removed): what
    `lab variants ID` shows. The file is read by read_block first, so a bad block is refused there."""
    comment = COMMENT[path.suffix]
    lines = [_uncomment(line.strip(), comment) if line.strip().startswith(comment) else line
             for line in path.read_text().splitlines()]
    start = next(i for i, line in enumerate(lines) if line.strip() == BLOCK_START)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == BLOCK_END)
    return lines[start:end + 1]


def prose_sections(lines: list[str]) -> dict[str, str]:
    """The header's labelled prose, one string per section (continuation lines joined)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        key = next((k for k, label in _SECTIONS if line.startswith(label)), None)
        if key is not None and key not in found:
            current = found[key] = [line]
        elif current is not None and line[:1] in (" ", "\t") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return {k: _strip_label(" ".join(v)) for k, v in found.items()}


_SINCE = re.compile(r"^What changed since ([A-Za-z][A-Za-z0-9_]*(?:\s*/\s*[A-Za-z][A-Za-z0-9_]*)*)\s*:")


def follows_of(lines: list[str]) -> str:
    """The rung a header's "What changed since <id>:" names ("since v5/v6": the last, the latest of
    them); "" where the header names none (the first rung of a ladder)."""
    for line in lines:
        m = _SINCE.match(line)
        if m:
            return m.group(1).split("/")[-1].strip()
    return ""


def _strip_label(text: str) -> str:
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == ":" and depth == 0:
            label = text[:i]
            if "(" in label:  # "Bottleneck attacked (the v2 profile, ...): ..." keeps its evidence, in order
                return text[label.find("("):].strip()
            return text[i + 1:].strip()
    return text


def parse_rung(path: Path, origin: str = "built-in") -> Variant | None:
    """The rung declared in `path`, or None when the file has no lab:rung block."""
    path = Path(path).resolve()
    found = read_block(path)
    if found is None:
        return None
    table, rest = found
    where = f"{path}"

    def bad(msg: str) -> LabError:
        return LabError(f"{where}: {msg}", hint="the lab:rung block's keys are described in lab/ladder/registry.py")

    missing = [k for k in REQUIRED if k not in table]
    if missing:
        return _raise(bad(f"the lab:rung block lacks {', '.join(missing)}"))
    unknown = sorted(set(table) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        return _raise(bad(f"unknown key(s) in the lab:rung block: {', '.join(unknown)}"))
    vid, slug = table["id"], table["slug"]
    if not isinstance(vid, str) or not _ID_RE.match(vid):
        return _raise(bad(f"id {vid!r} must be a letter then letters, digits or _ (e.g. v6)"))
    if not isinstance(slug, str) or not _SLUG_RE.match(slug):
        return _raise(bad(f"slug {slug!r} must be lower-case letters, digits or _"))
    kind = table.get("kind", KINDS[path.suffix])
    if kind != KINDS[path.suffix]:
        return _raise(bad(f"kind {kind!r} does not match a {path.suffix} file (expected {KINDS[path.suffix]!r})"))
    dtypes = _str_list(table["dtypes"], "dtypes", bad)
    if not dtypes or any(d not in DTYPES for d in dtypes):
        return _raise(bad(f"dtypes {dtypes} must be a non-empty list of {', '.join(DTYPES)}"))
    head_dims = table["head_dims"]
    if (not isinstance(head_dims, list) or not head_dims
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in head_dims)):
        return _raise(bad(f"head_dims {head_dims!r} must be a non-empty list of positive integers"))
    m = _CC_RE.match(str(table["min_cc"]))
    if not m:
        return _raise(bad(f"min_cc {table['min_cc']!r} must be \"major.minor\", e.g. \"8.0\""))
    classes = _str_list(table["attacks"], "attacks", bad)
    wrong = [c for c in classes if c not in ANALYSIS_CLASSES]
    if wrong:
        return _raise(bad(f"attacks: unknown class(es) {', '.join(wrong)}; the classes are "
                          f"{', '.join(ANALYSIS_CLASSES)}"))
    layout = table.get("layout", "BHND")
    if layout not in LAYOUTS:
        return _raise(bad(f"layout {layout!r} must be BHND or BNHD"))
    if kind == "cuda" and layout != "BHND":
        return _raise(bad("a cuda rung takes (B, H, N, D) as kernels/common.cuh's launcher contract says; "
                          "layout BNHD is for python rungs"))
    grid = table.get("grid", "")
    if not isinstance(grid, str) or (grid and any(p.strip() not in _GRID_PARTS for p in grid.split(","))):
        return _raise(bad(f"grid {grid!r} must be x[,y] of {', '.join(_GRID_PARTS)}, e.g. \"q-tiles,bh\""))
    aligned16 = table.get("aligned16", False)
    if not isinstance(aligned16, bool):
        return _raise(bad("aligned16 must be true or false"))
    entry = table.get("entry", "forward" if kind == "python" else "")
    if kind == "cuda" and entry:
        return _raise(bad("entry is for python rungs; a cuda rung exports lab_forward_<id>"))
    if not isinstance(entry, str):
        return _raise(bad("entry must be a string: \"function\" or \"module:function\""))
    backward = table.get("backward", False)
    if not isinstance(backward, bool):
        return _raise(bad("backward must be true or false"))
    gqa = table.get("gqa", False)
    if not isinstance(gqa, bool):
        return _raise(bad("gqa must be true or false"))
    writes_lse = table.get("writes_lse", backward)
    if not isinstance(writes_lse, bool):
        return _raise(bad("writes_lse must be true or false"))
    if backward and not writes_lse:
        return _raise(bad("writes_lse = false contradicts backward = true: a backward rung's forward writes the "
                          "row log-sum-exp its backward reads (kernels/common.cuh's backward contract)"))
    deterministic = table.get("deterministic", False)
    if not isinstance(deterministic, bool):
        return _raise(bad("deterministic must be true or false"))
    if deterministic and not backward:
        return _raise(bad("deterministic = true is a mode of the backward (bitwise-identical dQ, dK, dV run to run); "
                          "this rung declares no backward = true"))
    arch_flags = tuple(_str_list(table.get("arch_flags", []), "arch_flags", bad))
    if not isinstance(table["title"], str) or not table["title"].strip():
        return _raise(bad("title must be a non-empty string"))
    prose = prose_sections(rest)
    return Variant(id=vid, slug=slug, title=table["title"].strip(), kind=kind, source=path, dtypes=tuple(dtypes),
                   head_dims=tuple(head_dims), min_cc=(int(m.group(1)), int(m.group(2))), classes=tuple(classes),
                   layout=layout, arch_flags=arch_flags, aligned16=aligned16, grid=grid, entry=entry, origin=origin,
                   backward=backward, gqa=gqa, writes_lse=writes_lse, deterministic=deterministic,
                   changed=prose.get("changed", ""), attacks=prose.get("bottleneck", ""),
                   predicted_gain=prose.get("predicted_gain", ""), measured=prose.get("measured", ""),
                   follows=follows_of(rest))


def _raise(e: LabError):
    raise e


def _str_list(value, key: str, bad) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise bad(f"{key} must be a list of strings")
    return list(value)


def rung_files(folder: Path) -> list[Path]:
    """Candidate rung files of a folder, in ladder order (v2 before v10)."""
    if not folder.is_dir():
        return []
    files = [p for p in folder.iterdir() if p.suffix in KINDS and p.is_file() and not p.name.startswith(".")]
    return sorted(files, key=_ladder_key)


def _ladder_key(p: Path):
    m = re.match(r"^[A-Za-z]*?(\d+)", p.stem)
    return (0, int(m.group(1)), p.name) if m else (1, 0, p.name)


def scan(files: list[Path], origin: str) -> list[Variant]:
    """Rungs declared in `files`; two files with one id are refused."""
    found: list[Variant] = []
    for path in files:
        v = parse_rung(path, origin)
        if v is None:
            continue
        twin = next((o for o in found if o.id == v.id), None)
        if twin is not None:
            raise LabError(f"two rungs with id {v.id!r}: {twin.source} and {v.source}",
                           hint="give one of them another id in its lab:rung block")
        found.append(v)
    return found


# ---------------------------------------------------------------------------------------------
# A cuda rung's tuning candidates, read from its source (no build)
# ---------------------------------------------------------------------------------------------
# The tuning contract (kernels/common.cuh) lists a rung's candidates in its own file: tables of
# {"label", launcher[, LAB_SERVES_*]} and `lab_{forward,backward}_<id>_configs(head_dim, dtype)`
# choosing one per head_dim and dtype. `lab tune` reads them here before it builds, so a --predict
# that names no candidate is refused without minutes of compiling. The reading evaluates the
# configs function as C would, on the few forms the contract's functions are written in (return,
# if/else, switch on an int, ?:, ==, !=, <, >, <=, >= on integers, &&, ||, !, calls of the file's own functions, and the
# helpers that turn a table into its list or labels); anything else (a list built at run time, a
# macro, a local variable) is "not read": None, and `lab tune` checks against the built table alone.
# The built table stays the source of truth: lab.measure.tune refuses a build whose list differs.

_C_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<chr>\'(?:[^\'\\\n]|\\.)*\')'
                      r'|(?P<num>\d[\w.]*)|(?P<id>[A-Za-z_]\w*)|(?P<op>::|==|!=|&&|\|\||->|<=|>=|\S)', re.S)
_C_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
_LAB_DTYPES = {"LAB_FLOAT32": 0, "LAB_FLOAT16": 1, "LAB_BFLOAT16": 2}   # common.cuh's LabDtype
_SERVES_MARKS = {"LAB_SERVES_CAUSAL": "|causal", "LAB_SERVES_NON_CAUSAL": "|non-causal", "LAB_SERVES_ALL": ""}
_NOT_CALLS = {"if", "while", "for", "switch", "return", "sizeof", "catch", "decltype", "alignof", "static_assert"}


class _NotRead(Exception):
    """The source says its candidates in a form this reading does not evaluate."""


class _Returned(Exception):
    def __init__(self, value):
        self.value = value


@dataclass(frozen=True)
class _Table:
    entries: tuple[str, ...]   # each "label" or "label|causal" / "label|non-causal", as lab_tune_labels writes it


def _c_tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens of C++ source, comments and preprocessor lines dropped (both branches of an
    #if stay: a name defined twice is then not read)."""
    lines, skip = [], False
    for line in text.splitlines():
        if skip or line.lstrip().startswith("#"):
            skip = line.rstrip().endswith("\\")
            continue
        lines.append(line)
    out = []
    for m in _C_TOKEN.finditer("\n".join(lines)):
        kind = m.lastgroup
        if kind:
            out.append((kind, m.group()))
    return out


def _c_string(literal: str) -> str:
    return re.sub(r"\\(.)", lambda m: _C_ESCAPES.get(m.group(1), m.group(1)), literal[1:-1])


def _group_end(tokens, i: int) -> int:
    """The index of the bracket closing the one at tokens[i]."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    opening, depth = tokens[i][1], 0
    for j in range(i, len(tokens)):
        if tokens[j][1] == opening:
            depth += 1
        elif tokens[j][1] == pairs[opening]:
            depth -= 1
            if depth == 0:
                return j
    raise _NotRead("unbalanced brackets")


def _split_commas(tokens) -> list[list]:
    parts, depth, cur = [], 0, []
    for t in tokens:
        if t[1] in "({[":
            depth += 1
        elif t[1] in ")}]":
            depth -= 1
        if t[1] == "," and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        parts.append(cur)
    return parts


def _tables_and_functions(tokens):
    """Candidate tables (`name[...] = { {"label", ...}, ... };`) and function definitions by name."""
    tables, functions = {}, {}
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "id" and nxt == "[":
            close = _group_end(tokens, i + 1)
            if close + 2 < len(tokens) and tokens[close + 1][1] == "=" and tokens[close + 2][1] == "{":
                end = _group_end(tokens, close + 2)
                table = _read_table(tokens[close + 3:end])
                if table is not None:
                    tables.setdefault(text, []).append(table)
                i = end + 1
                continue
        if kind == "id" and nxt == "(" and text not in _NOT_CALLS:
            close = _group_end(tokens, i + 1)
            j = close + 1
            while j < len(tokens) and tokens[j][1] in ("const", "noexcept", "override"):
                j += 1
            if j < len(tokens) and tokens[j][1] == "{" and (i == 0 or tokens[i - 1][1] not in (".", "->", "=")):
                end = _group_end(tokens, j)
                params = []
                for p in _split_commas(tokens[i + 2:close]):
                    p = p[:next((k for k, t in enumerate(p) if t[1] == "="), len(p))]
                    while p and p[-1][1] == "]":   # `items)[N]`: drop the array bound
                        p = p[:max(k for k, t in enumerate(p) if t[1] == "[")]
                    names = [t[1] for t in p if t[0] == "id"]
                    params.append(names[-1] if names else None)
                functions.setdefault(text, []).append((params, tokens[j + 1:end]))
                i = end + 1
                continue
        i += 1
    return tables, functions


def _read_table(body) -> _Table | None:
    """A candidate table's entries, or None where its elements are not {"label", ...} (another array)."""
    entries = []
    for element in _split_commas(body):
        if not element or element[0][1] != "{" or _group_end(element, 0) != len(element) - 1:
            return None
        inner = element[1:-1]
        n = next((k for k, t in enumerate(inner) if t[0] != "str"), len(inner))   # "a" "b" is one literal
        strings = [_c_string(t[1]) for t in inner[:n]]
        if not strings:
            return None
        marks = [_SERVES_MARKS[t[1]] for t in inner if t[1] in _SERVES_MARKS]
        entries.append("".join(strings) + (marks[-1] if marks else ""))
    return _Table(tuple(entries))


class _Reader:
    """Evaluates a configs function on (head_dim, dtype); raises _NotRead on any form it does not know."""

    def __init__(self, tables, functions):
        self.tables, self.functions, self.depth = tables, functions, 0

    def call(self, name: str, args: list):
        defs = self.functions.get(name, [])
        if len(defs) != 1:
            raise _NotRead(f"{name} is defined {len(defs)} times")
        params, body = defs[0]
        if len(params) != len(args) or None in params:
            raise _NotRead(f"{name}'s parameters")
        self.depth += 1
        if self.depth > 20:
            raise _NotRead("recursion")
        try:
            self.block(body, dict(zip(params, args)))
        except _Returned as r:
            return r.value
        finally:
            self.depth -= 1
        raise _NotRead(f"{name} returns nothing")

    # statements: each returns the index after it
    def block(self, toks, env):
        i = 0
        while i < len(toks):
            i = self.statement(toks, i, env, run=True)

    def statement(self, toks, i, env, run: bool) -> int:
        word = toks[i][1]
        if word == "{":
            end = _group_end(toks, i)
            if run:
                self.block(toks[i + 1:end], env)
            return end + 1
        if word == "return":
            end = self._semicolon(toks, i)
            if run:
                raise _Returned(self.expression(toks[i + 1:end], env))
            return end + 1
        if word == "if" and toks[i + 1][1] == "(":
            close = _group_end(toks, i + 1)
            taken = bool(self.expression(toks[i + 2:close], env)) if run else False
            after = self.statement(toks, close + 1, env, run and taken)
            if after < len(toks) and toks[after][1] == "else":
                after = self.statement(toks, after + 1, env, run and not taken)
            return after
        if word == "switch" and toks[i + 1][1] == "(":
            close = _group_end(toks, i + 1)
            end = _group_end(toks, close + 1)
            if run:
                self.switch(self.expression(toks[i + 2:close], env), toks[close + 2:end], env)
            return end + 1
        if word == ";":
            return i + 1
        if not run:
            return self._semicolon(toks, i) + 1
        raise _NotRead(f"a statement starting {word!r}")

    def switch(self, value, body, env):
        starts, default, i = [], None, 0
        while i < len(body):   # the case labels at the switch's own level, and where each leads
            if body[i][1] in ("case", "default"):
                colon = next(j for j in range(i, len(body)) if body[j][1] == ":" and body[j - 1][1] != ":")
                if body[i][1] == "default":
                    default = colon + 1
                elif self.expression(body[i + 1:colon], env) == value:
                    starts.append(colon + 1)
                i = colon + 1
            else:
                i = self.statement(body, i, env, run=False)
        start = starts[0] if starts else default
        i = start if start is not None else len(body)
        while i < len(body):   # falls through the labels, as C does, until break or return
            if body[i][1] == "break":
                return
            if body[i][1] in ("case", "default"):
                i = next(j for j in range(i, len(body)) if body[j][1] == ":" and body[j - 1][1] != ":") + 1
                continue
            i = self.statement(body, i, env, run=True)

    @staticmethod
    def _semicolon(toks, i) -> int:
        depth = 0
        for j in range(i, len(toks)):
            if toks[j][1] in "({[":
                depth += 1
            elif toks[j][1] in ")}]":
                depth -= 1
            elif toks[j][1] == ";" and depth == 0:
                return j
        raise _NotRead("a statement without ';'")

    # expressions: precedence climbing over ?:, ||, &&, ==/!=, < > <= >= (integers), !
    def expression(self, toks, env):
        value, rest = self._ternary(toks, env)
        if rest:
            raise _NotRead(f"an expression with {rest[0][1]!r} left over")
        return value

    def _ternary(self, toks, env):
        cond, rest = self._binary(toks, env, 0)
        if rest and rest[0][1] == "?":
            depth, j = 0, None
            for k, t in enumerate(rest[1:], 1):   # the ':' of this '?', past nested ones and '::'
                if t[1] == "?":
                    depth += 1
                elif t[1] == ":" and depth == 0:
                    j = k
                    break
                elif t[1] == ":":
                    depth -= 1
            if j is None:
                raise _NotRead("?: without ':'")
            yes = self.expression(rest[1:j], env) if cond else None
            no, after = self._ternary(rest[j + 1:], env)
            return (yes if cond else no), after
        return cond, rest

    _LEVELS = (("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="))

    def _binary(self, toks, env, level):
        if level == len(self._LEVELS):
            return self._unary(toks, env)
        left, rest = self._binary(toks, env, level + 1)
        while rest and rest[0][1] in self._LEVELS[level]:
            op = rest[0][1]
            right, rest = self._binary(rest[1:], env, level + 1)
            if op in self._LEVELS[3] and not (type(left) is int and type(right) is int):
                raise _NotRead(f"{op} on other than two integers (a template's brackets?)")
            left = {"||": lambda a, b: bool(a) or bool(b), "&&": lambda a, b: bool(a) and bool(b),
                    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
                    ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}[op](left, right)
        return left, rest

    def _unary(self, toks, env):
        if not toks:
            raise _NotRead("an empty expression")
        if toks[0][1] == "!":
            value, rest = self._unary(toks[1:], env)
            return (not value), rest
        return self._primary(toks, env)

    def _primary(self, toks, env):
        kind, text = toks[0]
        if kind == "num":
            m = re.fullmatch(r"(\d+)[uUlL]*", text)
            if not m:
                raise _NotRead(f"the number {text}")
            return int(m.group(1)), toks[1:]
        if kind == "str":
            n = next((k for k, t in enumerate(toks) if t[0] != "str"), len(toks))
            return "".join(_c_string(t[1]) for t in toks[:n]), toks[n:]
        if text == "(":
            close = _group_end(toks, 0)
            return self.expression(toks[1:close], env), toks[close + 1:]
        if text == "{":
            close = _group_end(toks, 0)
            return self._brace(toks[1:close], env), toks[close + 1:]
        if kind != "id":
            raise _NotRead(f"{text!r}")
        i = 0
        while i + 2 < len(toks) and toks[i + 1][1] == "::" and toks[i + 2][0] == "id":   # v9::candidates
            i += 2
        name, rest = toks[i][1], toks[i + 1:]
        if rest and rest[0][1] == "(":
            close = _group_end(rest, 0)
            args = [self.expression(a, env) for a in _split_commas(rest[1:close])]
            tables = [a for a in args if isinstance(a, _Table)]
            # common.cuh's lab_tune_list and lab_tune_labels, a rung's own bwd_labels: a table in, its list out
            value = tables[0] if len(args) == 1 and tables else self.call(name, args)
            return value, rest[close + 1:]
        if rest and rest[0][1] == "{":   # LabTuneList{nullptr, 0}
            close = _group_end(rest, 0)
            return self._brace(rest[1:close], env), rest[close + 1:]
        if name in env:
            return env[name], rest
        if name in _LAB_DTYPES:
            return _LAB_DTYPES[name], rest
        if name in ("nullptr", "NULL"):
            return None, rest
        if name in ("true", "false"):
            return name == "true", rest
        if name in self.tables:
            if len(self.tables[name]) != 1:
                raise _NotRead(f"table {name} is defined {len(self.tables[name])} times")
            return self.tables[name][0], rest
        raise _NotRead(f"the name {name}")

    def _brace(self, toks, env):
        """`{nullptr, 0}`: the empty list (common.cuh's LabTuneList of no candidates)."""
        parts = [self.expression(p, env) for p in _split_commas(toks)]
        if parts in ([None, 0], [], [0, 0]):
            return _Table(())
        raise _NotRead("a brace list other than {nullptr, 0}")


def tuning_entries(path: Path, function: str, head_dim: int, dtype: str) -> list[str] | None:
    """What `function` (a rung's `lab_forward_<id>_configs` or `lab_backward_<id>_configs`) returns for
    head_dim and dtype, read from the rung's source: its entries in order, each "label" or
    "label|causal" / "label|non-causal" as the binding's configs() gives them; [] where the file lists
    none (or, the backward's being optional and weak in binding.cpp, defines no such function); None
    where the source does not say them in a form this reading evaluates."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    try:
        tables, functions = _tables_and_functions(_c_tokens(text))
        if function not in functions:
            # never named: the build's list is empty too; named but not defined here (a macro): not read
            return [] if re.search(rf"\b{re.escape(function)}\b", text) is None else None
        value = _Reader(tables, functions).call(function, [head_dim, DTYPES.index(dtype)])
    except (_NotRead, RecursionError, StopIteration, IndexError, ValueError, TypeError):
        return None
    if isinstance(value, _Table):
        return list(value.entries)
    if value is None:
        return []
    if isinstance(value, str):
        return [e for e in value.split(";") if e]   # binding.cpp's split_labels
    return None

"""A rung's tuning build and its candidates. A rung declares them in its own file, through
common.cuh's tuning contract: built with -DLAB_TUNING it exports `lab_forward_<id>_configs(head_dim,
dtype)` (the labels) and `lab_forward_<id>_config(args, stream, index)`. `lab tune`
(lab.measure.tune) times them; the correctness child (lab.measure.isolated) checks one.

A candidate compiled for one mask declares it: its label in the list ends in "|causal" or
"|non-causal" (common.cuh's LabTuneCandidate::serves, written by lab_tune_labels). `Declared.refusal`
says why it does not apply to a problem of the other mask: `lab tune` shows it "not applicable" there
and never launches it, and the check child checks it on seeded shapes of its own mask only.

`source_declared` reads the same lists from the rung's source without a build
(lab.ladder.rungfile.tuning_entries), so `lab tune` refuses a --predict naming no candidate before it
compiles; `require_source_agrees` refuses a build whose list differs from that reading.

A candidate is named by its label or a unique part of it (`resolve_label`): `lab tune --predict` and
`lab profile --candidate` resolve alike; `lab profile --candidate` runs the one it names (`Chosen`)
instead of the rung's launcher: resolved against the source's reading before anything is built
(`candidate_before_build`), then against the built table (`candidate_after_build`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.errors import LabError
from lab.ladder.build import build, declares_tuning
from lab.ladder.rungfile import tuning_entries

DEFAULT_LABEL = "default"
"""How `lab tune` names the launcher's own choice: every candidate's ratio is measured against it."""
MASK_MARK = "|"
MASKS = {"causal": True, "non-causal": False}
"""The marks a candidate's entry may end in (after MASK_MARK), and the mask each serves."""


@dataclass(frozen=True)
class Declared:
    """A candidate as its rung's table declares it: its label and the one mask it serves (None: both)."""
    label: str
    causal: bool | None = None

    def refusal(self, problem) -> str | None:
        """Why the candidate does not apply to `problem` (None: it does)."""
        if self.causal is None or problem.causal == self.causal:
            return None
        return f"declared for {'causal' if self.causal else 'non-causal'} problems only"


def parse_entry(entry: str, variant_id: str = "the rung") -> Declared:
    """One entry of a `_configs` list: `label`, `label|causal` or `label|non-causal`."""
    label, mark, serves = entry.rpartition(MASK_MARK)
    if not mark:
        return Declared(entry)
    if serves not in MASKS or not label:
        raise LabError(f"{variant_id}'s tuning candidate {entry!r} declares it serves {serves!r}",
                       hint=f"a candidate's label may end in {MASK_MARK}causal or {MASK_MARK}non-causal (common.cuh's "
                            "LabTuneCandidate::serves writes it), or in neither: it serves both")
    return Declared(label, MASKS[serves])


class Candidate:
    """One candidate of a tuning build, shaped like a rung's extension (`.forward(...)`, and
    `.backward(...)` for a backward candidate), so the correctness gate and the timer take it as
    they take the rung itself. A forward candidate gets the lse the gate hands the rung's forward
    (forward_config takes it as forward does), so a rung that writes the LSE has it judged for every
    candidate. A backward candidate (mode bwd or fwd+bwd) runs the rung's own forward and candidate
    `index` of its backward (lab_backward_<id>_config)."""

    def __init__(self, module, index: int, mode: str = "fwd", causal: bool | None = None):
        self.module = module
        self.index = index
        self.mode = mode
        self.causal = causal   # the one mask it is declared for (None: both): its check's seeded shapes take it

    def forward(self, q, k, v, o, causal, softmax_scale, lse=None):
        if self.mode == "fwd":
            self.module.forward_config(q, k, v, o, causal, softmax_scale, self.index, lse)
        else:
            self.module.forward(q, k, v, o, causal, softmax_scale, lse)

    def backward(self, q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale):
        self.module.backward_config(q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale, self.index)


def configs_entries(module, head_dim: int, dtype: str, mode: str = "fwd") -> list[str]:
    """A tuning build's list as it writes it (`label`, `label|causal`): the forward's, or the backward's for
    mode bwd / fwd+bwd."""
    return list(module.configs(head_dim, dtype) if mode == "fwd" else module.backward_configs(head_dim, dtype))


def declared_candidates(module, head_dim: int, dtype: str, mode: str = "fwd", variant_id: str = "the rung") -> list[Declared]:
    """The forward's candidates as declared (label and mask), or the backward's for mode bwd / fwd+bwd."""
    return [parse_entry(e, variant_id) for e in configs_entries(module, head_dim, dtype, mode)]


def configs_function(variant, mode: str = "fwd") -> str:
    """The function of the tuning contract that lists the candidates of `mode` (common.cuh)."""
    return f"lab_{'forward' if mode == 'fwd' else 'backward'}_{variant.id}_configs"


def source_declared(variant, head_dim: int, dtype: str, mode: str = "fwd") -> list[Declared] | None:
    """The candidates the rung's file declares for head_dim and dtype, read from its source without a
    build (lab.ladder.rungfile.tuning_entries): what `lab tune` resolves --predict against before it
    compiles. None where the source does not say them in a form that reading evaluates (a list built
    at run time, a macro; a python rung or a pair): then only the built table can tell."""
    if getattr(variant, "kind", "cuda") != "cuda" or getattr(variant, "parts", ()):
        return None
    entries = tuning_entries(variant.source, configs_function(variant, mode), head_dim, dtype)
    return None if entries is None else [parse_entry(e, variant.id) for e in entries]


def require_source_agrees(variant, read: list[Declared], built: list[Declared], head_dim: int, dtype: str,
                          mode: str = "fwd") -> None:
    """Refuse (LabError) a tuning build whose list differs from what its source was read as before the
    build: the built table is the truth, and a prediction resolved against a misread list would be
    recorded for the wrong candidate. Loud, so the reading (or the rung's file) is fixed, not trusted."""
    if read == built:
        return
    shown = lambda ds: "; ".join(d.label + ("" if d.causal is None else  # noqa: E731
                                            f" ({'causal' if d.causal else 'non-causal'} only)") for d in ds)
    raise LabError(f"{variant.id}'s tuning build lists other {'backward ' if mode != 'fwd' else ''}candidates for "
                   f"head_dim {head_dim}, {dtype} than its source was read to declare before the build: built "
                   f"[{shown(built)}], read [{shown(read)}]; nothing was checked or timed",
                   hint=f"lab.ladder.rungfile.tuning_entries misreads {configs_function(variant, mode)} in "
                        f"{variant.source.name}: report it (the built table is the one to trust)")


def candidate_labels(module, head_dim: int, dtype: str, mode: str = "fwd") -> list[str]:
    """The labels of the forward's candidates, or of the backward's for mode bwd / fwd+bwd."""
    return [d.label for d in declared_candidates(module, head_dim, dtype, mode)]


def candidate(module, index: int, mode: str, problem) -> Candidate:
    """Candidate `index` of the list for `problem`'s head_dim and dtype, with the mask it declares."""
    declared = declared_candidates(module, problem.head_dim, problem.dtype, mode)
    return Candidate(module, index, mode, declared[index].causal if 0 <= index < len(declared) else None)


def require_tunable(variant, command: str = "lab tune") -> None:
    """Refuse (exit 2), before any build or GPU work, a rung without the tuning contract: its tuning
    binding would not link. A pair (lab.ladder.pairing) is two rungs' kernels: each part is tuned alone
    (`command`: how the hint names the command for one part, "lab tune" or "lab profile --candidate LABEL")."""
    if variant.parts:
        first, second = variant.parts
        if command == "lab tune":
            raise LabError(f"{variant.id} pairs two rungs; lab tune tunes one rung's candidates",
                           hint=f"tune each part: lab tune --variant {first.id} (its forward), "
                                f"lab tune --variant {second.id} --mode bwd (its backward)")
        raise LabError(f"{variant.id} pairs two rungs; a tuning candidate is one rung's",
                       hint=f"name one part: {command} --variant {first.id} (a forward candidate), "
                            f"{command} --variant {second.id} --mode bwd (a backward candidate)")
    if not declares_tuning(variant):
        raise LabError(f"{variant.id} declares no tuning candidates",
                       hint="a CUDA rung lists them under #ifdef LAB_TUNING (the tuning contract in kernels/common.cuh)")


def tuning_build(variant, arch: str | None = None, allow_compile: bool = True):
    """The rung's tuning build (its extension in .module, its kernels' ptxas records in .ptxas); refuses a
    rung whose file does not follow the tuning contract. `allow_compile=False`: the cached one only (a
    child of `lab profile --candidate`, whose parent built it)."""
    require_tunable(variant)
    built = build(variant, arch, allow_compile=allow_compile, tuning=True)
    if not hasattr(built.module, "forward_config"):
        raise LabError(f"{variant.id}'s tuning build exposes no candidates",
                       hint="export lab_forward_<id>_configs and lab_forward_<id>_config under "
                            "#ifdef LAB_TUNING (see the tuning contract in kernels/common.cuh)")
    return built


def tuning_module(variant):
    """The rung's tuning extension (tuning_build's module)."""
    return tuning_build(variant).module


# ----------------------------------------------------------------------------- a candidate by its label

def candidates_what(variant, problem, mode: str = "fwd") -> str:
    """The list a label is searched in, as messages name it: "v8's backward candidates for head_dim 64, float16"."""
    return (f"{variant.id}'s {'backward ' if mode != 'fwd' else ''}candidates for head_dim {problem.head_dim}, "
            f"{problem.dtype}")


def require_candidates(variant, declared: list[Declared], problem, mode: str = "fwd") -> None:
    """Refuse (exit 2) a rung that declares no candidates for the problem's head_dim and dtype in `mode`."""
    if not declared:
        raise LabError(f"{variant.id} declares no {'backward ' if mode != 'fwd' else ''}tuning candidates for "
                       f"head_dim {problem.head_dim}, {problem.dtype}",
                       hint="its file lists them per head_dim and dtype (kernels/common.cuh)")


def resolve_label(given: str, declared: list[Declared], problem, what: str, option: str) -> int:
    """The index in `declared` of the candidate `given` names: the label itself, else the one label that
    contains it (case ignored). LabError (exit 2) where none or several do, or where the one it names is
    not applicable to `problem` (Declared.refusal). `what` says which list was searched (candidates_what);
    `option` is the flag the messages name (--predict, --candidate)."""
    labels = [d.label for d in declared]
    exact = [i for i, lb in enumerate(labels) if lb == given]
    found = exact or [i for i, lb in enumerate(labels) if given.lower() in lb.lower()]
    if not found:
        raise LabError(f"{option} {given}: no candidate among {what} is named so",
                       hint="its candidates: " + "; ".join(labels))
    if len(found) > 1:
        raise LabError(f"{option} {given}: ambiguous, {len(found)} of {what} match it: "
                       + "; ".join(labels[i] for i in found), hint="give more of the label")
    why = declared[found[0]].refusal(problem)
    if why:
        raise LabError(f"{option} {given}: candidate {labels[found[0]]!r} is not applicable to {problem.label()} ({why})")
    return found[0]


@dataclass(frozen=True)
class Chosen:
    """The tuning candidate `lab profile --candidate` runs instead of the rung's launcher: its index in the
    rung's list for the problem's head_dim and dtype (the backward's list in mode bwd / fwd+bwd), its
    label, and the one mask it is declared for (None: both)."""
    index: int
    label: str
    causal: bool | None = None

    def of(self, variant_id: str) -> str:
        """How messages name it: `v9 candidate 'C1 BN64 S2 persistent tma-o'`."""
        return f"{variant_id} candidate {self.label!r}"


def choose(variant, given: str, declared: list[Declared], problem, mode: str = "fwd") -> Chosen:
    """The candidate `--candidate GIVEN` names in `declared` (resolve_label), or LabError (exit 2)."""
    if not given.strip():
        raise LabError("--candidate names no candidate", hint="give a candidate's label or a unique part of it")
    if given.strip().lower() == DEFAULT_LABEL:
        raise LabError(f"--candidate {given}: the default is {variant.id}'s own launcher, not a candidate",
                       hint=f"profile it without --candidate: lab profile --variant {variant.id}")
    require_candidates(variant, declared, problem, mode)
    i = resolve_label(given, declared, problem, candidates_what(variant, problem, mode), "--candidate")
    return Chosen(i, declared[i].label, declared[i].causal)


def candidate_before_build(variant, given: str, problem, mode: str = "fwd") -> list[Declared] | None:
    """`--candidate GIVEN`'s refusals before anything is built or run (exit 2): a rung without the tuning
    contract or a pair, no candidates for the problem, a label that names none, several, the default, or a
    candidate of the other mask. Returns the list read from the rung's source (source_declared), or None
    where the source does not say it statically: then the label is resolved after the build only."""
    require_tunable(variant, "lab profile --candidate LABEL")
    read = source_declared(variant, problem.head_dim, problem.dtype, mode)
    if read is not None:
        choose(variant, given, read, problem, mode)
    return read


def candidate_after_build(variant, given: str, problem, mode: str, read: list[Declared] | None,
                          entries: list[str]) -> Chosen:
    """The candidate `--candidate GIVEN` names in the built table (`entries`, the tuning build's own list
    for the problem's head_dim and dtype), which must list what the source was read to declare
    (require_source_agrees): the index a child is told is the built table's."""
    built = [parse_entry(e, variant.id) for e in entries]
    if read is not None:
        require_source_agrees(variant, read, built, problem.head_dim, problem.dtype, mode)
    return choose(variant, given, built, problem, mode)

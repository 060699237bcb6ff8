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
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.errors import LabError
from lab.ladder.build import build, declares_tuning
from lab.ladder.rungfile import tuning_entries

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


def declared_candidates(module, head_dim: int, dtype: str, mode: str = "fwd", variant_id: str = "the rung") -> list[Declared]:
    """The forward's candidates as declared (label and mask), or the backward's for mode bwd / fwd+bwd."""
    entries = module.configs(head_dim, dtype) if mode == "fwd" else module.backward_configs(head_dim, dtype)
    return [parse_entry(e, variant_id) for e in entries]


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


def require_tunable(variant) -> None:
    """Refuse (exit 2), before any build or GPU work, a rung without the tuning contract: its tuning
    binding would not link. A pair (lab.ladder.pairing) is two rungs' kernels: each part is tuned alone."""
    if variant.parts:
        first, second = variant.parts
        raise LabError(f"{variant.id} pairs two rungs; lab tune tunes one rung's candidates",
                       hint=f"tune each part: lab tune --variant {first.id} (its forward), "
                            f"lab tune --variant {second.id} --mode bwd (its backward)")
    if not declares_tuning(variant):
        raise LabError(f"{variant.id} declares no tuning candidates",
                       hint="a CUDA rung lists them under #ifdef LAB_TUNING (the tuning contract in kernels/common.cuh)")


def tuning_build(variant):
    """The rung's tuning build (its extension in .module, its kernels' ptxas records in .ptxas); refuses a
    rung whose file does not follow the tuning contract."""
    require_tunable(variant)
    built = build(variant, tuning=True)
    if not hasattr(built.module, "forward_config"):
        raise LabError(f"{variant.id}'s tuning build exposes no candidates",
                       hint="export lab_forward_<id>_configs and lab_forward_<id>_config under "
                            "#ifdef LAB_TUNING (see the tuning contract in kernels/common.cuh)")
    return built


def tuning_module(variant):
    """The rung's tuning extension (tuning_build's module)."""
    return tuning_build(variant).module

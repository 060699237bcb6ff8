"""A rung's tuning build and its candidates. A rung declares them in its own file, through
common.cuh's tuning contract: built with -DLAB_TUNING it exports `lab_forward_<id>_configs(head_dim,
dtype)` (the labels) and `lab_forward_<id>_config(args, stream, index)`. `lab tune`
(lab.measure.tune) times them; the correctness child (lab.measure.isolated) checks one."""

from __future__ import annotations

from lab.errors import LabError
from lab.ladder.build import build, declares_tuning


class Candidate:
    """One candidate of a tuning build, shaped like a rung's extension (`.forward(...)`, and
    `.backward(...)` for a backward candidate), so the correctness gate and the timer take it as
    they take the rung itself. A backward candidate (mode bwd or fwd+bwd) runs the rung's own
    forward and candidate `index` of its backward (lab_backward_<id>_config)."""

    def __init__(self, module, index: int, mode: str = "fwd"):
        self.module = module
        self.index = index
        self.mode = mode

    def forward(self, q, k, v, o, causal, softmax_scale, lse=None):
        if self.mode == "fwd":
            self.module.forward_config(q, k, v, o, causal, softmax_scale, self.index)
        else:
            self.module.forward(q, k, v, o, causal, softmax_scale, lse)

    def backward(self, q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale):
        self.module.backward_config(q, k, v, o, dout, lse, dq, dk, dv, causal, softmax_scale, self.index)


def candidate_labels(module, head_dim: int, dtype: str, mode: str = "fwd") -> list[str]:
    """The labels of the forward's candidates, or of the backward's for mode bwd / fwd+bwd."""
    return list(module.configs(head_dim, dtype) if mode == "fwd" else module.backward_configs(head_dim, dtype))


def require_tunable(variant) -> None:
    """Refuse (exit 2), before any build or GPU work, a rung without the tuning contract: its tuning
    binding would not link."""
    if not declares_tuning(variant):
        raise LabError(f"{variant.id} declares no tuning candidates",
                       hint="a CUDA rung lists them under #ifdef LAB_TUNING (the tuning contract in kernels/common.cuh)")


def tuning_module(variant):
    """The rung's tuning extension; refuses a rung whose file does not follow the tuning contract."""
    require_tunable(variant)
    module = build(variant, tuning=True).module
    if not hasattr(module, "forward_config"):
        raise LabError(f"{variant.id}'s tuning build exposes no candidates",
                       hint="export lab_forward_<id>_configs and lab_forward_<id>_config under "
                            "#ifdef LAB_TUNING (see the tuning contract in kernels/common.cuh)")
    return module

"""What the GPU probes of benchmarks/ (clock_probe.py, graph_probe.py) share: the problem's arguments, and a rung's
tuning candidates named as `lab tune --predict` names them, each made an implementation of the lab's call."""

from __future__ import annotations

import argparse

from lab.ladder import registry, tuning
from lab.measure.call import rung
from lab.measure.problem import Problem


def add_problem_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--variant", default="v9")
    ap.add_argument("--shape", default="16,32,1024,64", help="B,H,N,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="float16")


def problem_of(a: argparse.Namespace) -> tuple:
    """(the rung, the problem) the parsed arguments name (Nq = Nk = N)."""
    b, h, n, d = (int(x) for x in a.shape.split(","))
    return registry.get(a.variant), Problem(b, h, n, n, d, a.causal, a.dtype)


def candidates(variant, problem: Problem, spec: str) -> dict:
    """{label: implementation} of the tuning candidates in `spec` (labels or unique parts, ';' between them), from the
    rung's tuning build (built beforehand: `lab build --variant ID --tuning`)."""
    module = tuning.tuning_build(variant, allow_compile=False).module
    declared = tuning.declared_candidates(module, problem.head_dim, problem.dtype)
    out = {}
    for given in spec.split(";"):
        i = tuning.resolve_label(given, declared, problem, "the tuning build's candidates", "--candidates")
        out[declared[i].label] = rung(variant, tuning.Candidate(module, i), problem)
    return out

"""The child process a profiler runs: `python -m lab.measure.target --variant v3 --problem LABEL ...`.

It lives in lab.measure (it runs a rung on a problem, as the correctness and timing children do),
above the profilers it may run under, not in them: the profilers are a lower layer (the environment
asks them for their versions).

It builds nothing (the parent built the rung; loading the cached extension is all that happens
here), warms up outside any range, then calls the rung `--repeat` times in `--mode` (lab.measure.call:
a backward is the rung's own launcher, called on this thread, so every kernel of it falls inside
the range) inside one NVTX range named by `range_name()`. With `--tune-config N` it runs the rung's
tuning candidate N instead of its launcher (`lab profile --candidate`: loaded from the rung's cached
tuning build, inside the same range, so the parent's ncu filter is the same). ncu filters on that range (`--nvtx --nvtx-include "<name>/"`); the same
child serves nsys, and with `--torch-profile` the torch.profiler fallback. A rung that crashes
takes down only this process.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from lab.ladder import build, registry
from lab.ladder.tuning import candidate, tuning_build
from lab.measure.call import launch as launch_of, require_mode
from lab.measure.problem import Problem, check_supported
from lab.profilers.kineto import profile_launches


def range_name(variant_id: str, problem_label: str, mode: str = "fwd") -> str:
    # No '/' or '@': ncu's --nvtx-include syntax uses them as separators. The forward's name is
    # unchanged (stored runs' ranges and the analysis' rung_of read it); other modes end in theirs.
    return f"lab {variant_id} {problem_label}" + ("" if mode == "fwd" else f" {mode}")


def _nvtx_range(name: str):
    try:
        import nvtx

        return nvtx.annotate(name)
    except ImportError:  # torch's own NVTX binding emits the same push/pop range
        import torch   # lazy: the child's parent (pipeline, ncu, nsys) imports this module for range_name

        @contextlib.contextmanager
        def rng():
            torch.cuda.nvtx.range_push(name)
            try:
                yield
            finally:
                torch.cuda.nvtx.range_pop()

        return rng()


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m lab.measure.target", description=__doc__)
    ap.add_argument("--variant", required=True)
    ap.add_argument("--problem", required=True, help="a Problem.label(), e.g. B8-H16-N1024-D64-float16")
    ap.add_argument("--mode", default="fwd", help="fwd, bwd or fwd+bwd")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tune-config", type=int, default=None,
                    help="the rung's tuning candidate N (its index in the list for the problem's head_dim and dtype; "
                         "the backward's list in mode bwd / fwd+bwd) instead of its launcher")
    ap.add_argument("--torch-profile", type=Path, default=None,
                    help="run the launches under torch.profiler and write its trace JSON here")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch   # lazy: importing this module (range_name) must not need torch

    variant = registry.get(args.variant)
    problem = Problem.from_label(args.problem)
    check_supported(variant, problem)
    require_mode(variant, args.mode)
    if args.tune_config is None:
        module = build.load_cached(variant)
    else:   # as lab tune's check child takes it: shaped like the rung's extension (lab.ladder.tuning.Candidate)
        module = candidate(tuning_build(variant, allow_compile=False).module, args.tune_config, args.mode, problem)
    launch = launch_of(variant, module, problem, args.mode, args.seed)

    for _ in range(args.warmup):
        launch()
    torch.cuda.synchronize()
    name = range_name(variant.id, problem.label(), args.mode)
    if args.torch_profile is not None:
        profile_launches(launch, args.repeat, args.torch_profile, name)
    else:
        with _nvtx_range(name):
            for _ in range(args.repeat):
                launch()
            torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`lab tune`'s float64 checks, side by side: the default and every candidate of a rung in ONE
child (lab.measure.gate.verdicts, what `lab tune` does) against a child each (gate.verdict per
configuration, what it did before), on the same GPU, one after the other, the builds cached first.
Says whether both ways gave every configuration the same verdict, and prints a Markdown block for
benchmarks/RESULTS.md (device, date, commit). Exit 1 where a verdict differs.

    python3 benchmarks/tune_checks.py --variant v4,v5,v8 [--shape 1,2,130,64] [--check-shapes 1] [--mode fwd]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.environment import git_info  # noqa: E402
from lab.ladder import build, registry  # noqa: E402
from lab.ladder.tuning import candidate_labels, tuning_module  # noqa: E402
from lab.measure import gate  # noqa: E402
from lab.measure.problem import parse_shape  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", required=True, help="tunable rungs, e.g. v4,v5,v8")
    p.add_argument("--shape", default="1,2,130,64")
    p.add_argument("--check-shapes", type=int, default=1)
    p.add_argument("--mode", default="fwd")
    a = p.parse_args(argv)
    import torch

    rows, differ = [], []
    for variant in registry.select(a.variant):
        problem = parse_shape(a.shape, True, variant.default_dtype)
        build.build(variant)
        labels = candidate_labels(tuning_module(variant), problem.head_dim, problem.dtype, a.mode)
        configs = [None, *range(len(labels))]
        started = time.perf_counter()
        one = gate.verdicts(variant, problem, a.mode, configs, a.check_shapes)
        one_s = time.perf_counter() - started
        started = time.perf_counter()
        each = {c: gate.verdict(variant, problem, a.mode, tune_config=c, extra_shapes=a.check_shapes) for c in configs}
        each_s = time.perf_counter() - started
        same = one == each
        if not same:
            differ.append(variant.id)
        rows.append(f"| {variant.id} | {a.mode} | {len(configs)} | {one_s:.1f} | {each_s:.1f} | {each_s / one_s:.1f}x | "
                    f"{'yes' if same else 'NO'} |")
        print(rows[-1], file=sys.stderr, flush=True)
    git = git_info()
    print(f"### `lab tune`'s checks: one child against a child each\n\n{torch.cuda.get_device_name()}, "
          f"{datetime.now(timezone.utc):%Y-%m-%d}, commit {(git.get('commit') or '?')[:10]}; problem {a.shape} causal, "
          f"{a.check_shapes} extra shape(s) per configuration, builds cached.\n\n"
          "| rung | mode | configurations | one child s | a child each s | ratio | same verdicts |\n"
          "| --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(rows))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

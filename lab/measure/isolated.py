"""The correctness gate in a child process, so that a rung that crashes (a segfault, an illegal
address that poisons the CUDA context) takes down only that child.

The parent runs `python -m lab.measure.isolated --variant v3 --problem <Problem.label()> ...`: the
module's own entry point, not the CLI, and reads one JSON object from its stdout."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from lab import children
from lab.errors import CheckFailed, LabError
from lab.ladder import build, registry, workspace
from lab.ladder.tuning import Candidate, tuning_module
from lab.measure.check import check_variant
from lab.measure.problem import Problem

CHECK_TIMEOUT_S = 900


def child_env() -> dict:
    """A child must import this checkout's `lab` even when run from elsewhere."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    ws = workspace.active()   # the child sees the parent's registry, whatever its cwd
    env[workspace.ENV] = str(ws.root) if ws is not None else "none"
    return env


class PendingCheck:
    """A correctness child that is running; `result()` waits for it and reads its verdict."""

    def __init__(self, variant, problem: Problem, extra_shapes: int, tune_config: int | None = None,
                 compile: bool = True, mode: str = "fwd"):
        argv = [sys.executable, "-m", "lab.measure.isolated", "--variant", registry.ref(variant),
                "--problem", problem.label(), "--shapes", str(extra_shapes), "--mode", mode]
        if tune_config is not None:   # that tuning candidate of the rung (its tuning build, `lab tune`)
            argv += ["--tune-config", str(tune_config)]
        if not compile:
            argv.append("--no-compile")
        self.variant, self.problem = variant, problem
        self.proc = children.start(argv, capture_output=True, text=True, env=child_env())

    def result(self) -> dict:
        """The check's manifest dict (lab.measure.check.CheckResult.to_dict()); a crash or a hang
        raises CheckFailed naming how the child ended."""
        variant, problem = self.variant, self.problem
        try:
            res = children.finish(self.proc, timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"{variant.id}'s check did not finish in {CHECK_TIMEOUT_S} s (a hang?)") from None
        try:
            result = json.loads(res.stdout)
        except (json.JSONDecodeError, ValueError):
            result = None
        if res.returncode != 0 or not isinstance(result, dict):
            how = (f"killed by {signal.Signals(-res.returncode).name}" if res.returncode < 0
                   else f"exit code {res.returncode}")
            tail = " | ".join(res.stderr.strip().splitlines()[-3:])
            raise CheckFailed(f"{variant.id} crashed in its child process ({how}) while being checked on "
                              f"{problem.label()}: {tail or 'no output'}")
        if result.get("not_built"):
            raise NotBuilt(result["error"])
        if "error" in result and "passed" not in result:  # a LabError inside the child: bad input, not a crash
            raise LabError(result["error"])
        return result

    def cancel(self) -> None:
        """End the child (and its group) without reading it: the parent stopped before needing it."""
        children.end(self.proc)


class NotBuilt(LabError):
    """A child started with compile=False found no cached build: check again once it is built."""


def start_check(variant, problem: Problem, extra_shapes: int, tune_config: int | None = None,
                compile: bool = True, mode: str = "fwd") -> PendingCheck:
    """Start the correctness child now, read its verdict later (`lab profile` works meanwhile).
    compile=False: the child only loads a cached build (and says not_built when there is none), so
    it can start before the parent has made sure the rung is built."""
    return PendingCheck(variant, problem, extra_shapes, tune_config, compile, mode)


def check_in_child(variant, problem: Problem, extra_shapes: int, tune_config: int | None = None,
                   mode: str = "fwd") -> dict:
    """Run the correctness child and return its verdict (see PendingCheck.result). `tune_config`:
    check that tuning candidate of the rung (its tuning build, `lab tune`) instead of its launcher."""
    return start_check(variant, problem, extra_shapes, tune_config, mode=mode).result()


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.measure.isolated")
    p.add_argument("--variant", required=True)
    p.add_argument("--problem", required=True, help="a Problem.label(), e.g. B2-H8kv2-N113x203-D64-causal-float16")
    p.add_argument("--shapes", type=int, default=0)
    p.add_argument("--mode", default="fwd")
    p.add_argument("--tune-config", type=int, default=None)
    p.add_argument("--no-compile", action="store_true",
                   help="use the cached build only; report not_built instead of compiling")
    a = p.parse_args(argv)
    try:
        variant = registry.get(a.variant)
        problem = Problem.from_label(a.problem)
        module = None
        if a.tune_config is not None:
            module = Candidate(tuning_module(variant), a.tune_config, a.mode)
        elif a.no_compile:
            try:
                ready = build.is_built(variant)
            except Exception:   # no CUDA torch, a rung kind this cache does not describe: the parent decides
                ready = False
            if not ready:   # the parent checks again after its build: never an error here
                print(json.dumps({"error": f"{variant.id} has no cached build here", "not_built": True}))
                return 0
            module = build.load_cached(variant)
        result = check_variant(variant, problem=problem, extra_shapes=a.shapes, module=module,
                               pin_to_problem=a.tune_config is not None, mode=a.mode)
    except LabError as e:
        print(json.dumps({"error": str(e)}))
        return 0
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(_main())

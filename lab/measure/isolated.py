"""The correctness gate in a child process, so that a rung that crashes (a segfault, an illegal
address that poisons the CUDA context) takes down only that child.

The parent runs `python -m lab.measure.isolated --variant v3 --problem <Problem.label()> ...`: the
module's own entry point, not the CLI, and reads one JSON object from its stdout.

With `--configs default,0,1,...` one child checks several configurations of the rung in turn (`lab
tune`: the launcher's own choice and each tuning candidate; torch's import and CUDA's start, seconds
each, are paid once instead of once per candidate) and prints one JSON line per configuration as it
finishes. It stops at the first configuration after which the CUDA context no longer works (a
sticky error: every later check in that process would fail for it), printing no verdict for that
one. The parent (BatchCheck) keeps the verdicts that came, and lab.measure.gate checks the
configurations the child did not finish each in a child of its own, as before: a crashing candidate
is named and the others still get their verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
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


DEFAULT_CONFIG = "default"
"""How --configs names the launcher's own choice (the rung's plain build); a number is that tuning candidate."""


def _argv(variant, problem: Problem, extra_shapes: int, mode: str) -> list[str]:
    return [sys.executable, "-m", "lab.measure.isolated", "--variant", registry.ref(variant),
            "--problem", problem.label(), "--shapes", str(extra_shapes), "--mode", mode]


def _how(returncode: int) -> str:
    """How a child ended: `killed by SIGSEGV`, `exit code 1`."""
    return f"killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exit code {returncode}"


def _tail(stderr: str) -> str:
    return " | ".join(stderr.strip().splitlines()[-3:])


class PendingCheck:
    """A correctness child that is running; `result()` waits for it and reads its verdict."""

    def __init__(self, variant, problem: Problem, extra_shapes: int, tune_config: int | None = None,
                 compile: bool = True, mode: str = "fwd"):
        argv = _argv(variant, problem, extra_shapes, mode)
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
            raise CheckFailed(f"{variant.id} crashed in its child process ({_how(res.returncode)}) while being checked "
                              f"on {problem.label()}: {_tail(res.stderr) or 'no output'}")
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


def config_name(config: int | None) -> str:
    return DEFAULT_CONFIG if config is None else str(config)


class BatchCheck:
    """One correctness child checking several configurations of the rung in turn (`--configs`);
    `verdicts()` reads each verdict as it comes. Each configuration has CHECK_TIMEOUT_S, as a child
    of its own has: a hang is caught on the configuration that hangs, whatever the batch's length."""

    def __init__(self, variant, problem: Problem, extra_shapes: int, configs: list[int | None], mode: str = "fwd"):
        argv = _argv(variant, problem, extra_shapes, mode) + ["--configs", ",".join(map(config_name, configs))]
        self.variant, self.problem, self.configs = variant, problem, list(configs)
        # stderr to a file, not a pipe: read only when the child ends, it must never fill and block the child
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.proc = children.start(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=child_env())

    def verdicts(self, on_verdict=None) -> tuple[dict, str | None]:
        """({config: verdict} for the configurations the child finished, in its order; why it ended
        before the last, or None). `on_verdict(config, verdict)` as each arrives. A LabError inside
        the child (bad input) is raised, as PendingCheck.result raises it."""
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(self.proc.stdout, lines), daemon=True).start()
        found: dict = {}
        ended = None
        try:
            while ended is None and len(found) < len(self.configs):
                waiting = self.configs[len(found)]
                try:
                    line = lines.get(timeout=CHECK_TIMEOUT_S)
                except queue.Empty:
                    ended = (f"{self.variant.id} {_config_text(waiting)} did not finish its check in "
                             f"{CHECK_TIMEOUT_S} s (a hang?)")
                    break
                if line is None:   # the child's stdout closed: it ended
                    break
                msg = _message(line)
                if msg is None:    # not ours (a kernel's printf goes to stdout too)
                    continue
                if "error" in msg:   # a LabError inside the child: bad input, not a crash
                    raise LabError(msg["error"])
                config = None if msg["config"] == DEFAULT_CONFIG else int(msg["config"])
                if "verdict" in msg:
                    found[config] = msg["verdict"]
                    if on_verdict:
                        on_verdict(config, msg["verdict"])
                else:
                    ended = f"the CUDA context was lost after {self.variant.id} {_config_text(config)}: {msg.get('ended')}"
            if ended is None and len(found) < len(self.configs):
                ended = self._died()
        finally:
            children.end(self.proc)   # ends the child where it still runs (a hang, Ctrl-C, bad input)
            self._stderr.close()
        return found, ended

    def _died(self) -> str:
        """The child ended before its last verdict: how, and on what."""
        try:
            self.proc.wait(timeout=children.GRACE_S * 5)
        except subprocess.TimeoutExpired:
            children.end(self.proc)
        self._stderr.seek(0)
        return (f"{self.variant.id}'s check child crashed ({_how(self.proc.returncode)}) while checking its "
                f"configurations on {self.problem.label()}: {_tail(self._stderr.read()) or 'no output'}")


def _config_text(config: int | None) -> str:
    return "default" if config is None else f"candidate {config}"


def _pump(stream, lines: queue.Queue) -> None:
    """The child's stdout, line by line, into `lines`; None at its end."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):   # closed under us: the parent ended the child
        pass
    lines.put(None)


def _message(line: str) -> dict | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) and ("config" in msg or "error" in msg) else None


def check_configs_in_child(variant, problem: Problem, extra_shapes: int, configs: list[int | None],
                           mode: str = "fwd", on_verdict=None) -> tuple[dict, str | None]:
    """Check several configurations of the rung (None: its launcher, from the plain build; i: tuning
    candidate i) in ONE child; see BatchCheck.verdicts. lab.measure.gate.verdicts checks what it did
    not finish each in a child of its own."""
    return BatchCheck(variant, problem, extra_shapes, configs, mode).verdicts(on_verdict)


def _context_lost() -> str | None:
    """Why the CUDA context no longer works (a sticky error from the last launch), or None."""
    import torch

    try:
        torch.cuda.synchronize()
    except RuntimeError as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def _check_configs(variant, problem: Problem, shapes: int, mode: str, configs: list[int | None]) -> None:
    """The batch child: each configuration checked as its own child would check it, one JSON line
    each; it stops after the first that leaves the CUDA context broken, without its verdict (the
    parent checks it again alone, where it cannot blame the others)."""
    tuning = None
    for config in configs:
        try:
            module = None   # the launcher's own choice: check_variant loads the plain build
            if config is not None:
                tuning = tuning if tuning is not None else tuning_module(variant)
                module = Candidate(tuning, config, mode)
            result = check_variant(variant, problem=problem, extra_shapes=shapes, module=module,
                                   pin_to_problem=config is not None, mode=mode)
        except LabError as e:
            _emit({"config": config_name(config), "error": str(e)})
            return
        lost = _context_lost()
        if lost is not None:
            _emit({"config": config_name(config), "ended": lost})
            return
        _emit({"config": config_name(config), "verdict": result.to_dict()})


def _emit(msg: dict) -> None:
    print(json.dumps(msg), flush=True)


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.measure.isolated")
    p.add_argument("--variant", required=True)
    p.add_argument("--problem", required=True, help="a Problem.label(), e.g. B2-H8kv2-N113x203-D64-causal-float16")
    p.add_argument("--shapes", type=int, default=0)
    p.add_argument("--mode", default="fwd")
    p.add_argument("--tune-config", type=int, default=None)
    p.add_argument("--configs", default=None,
                   help="several configurations in turn, one JSON line each: 'default' (the launcher) and tuning "
                        "candidate numbers, e.g. default,0,1")
    p.add_argument("--no-compile", action="store_true",
                   help="use the cached build only; report not_built instead of compiling")
    a = p.parse_args(argv)
    try:
        variant = registry.get(a.variant)
        problem = Problem.from_label(a.problem)
        if a.configs is not None:
            configs = [None if c == DEFAULT_CONFIG else int(c) for c in a.configs.split(",")]
            _check_configs(variant, problem, a.shapes, a.mode, configs)
            return 0
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

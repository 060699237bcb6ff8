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

`lab profile` runs it as its measuring child (`--serve`, MeasuringChild below): one process that
imports torch at once and then waits, touching no GPU, for the parent's requests on stdin, one JSON
line each, answered by one JSON line: `check` (the float64 gate, as above), `bench` (the rung through
the checked timer, lab.measure.checked.time_rung, with the device and software facts it was measured
on) and `baselines` (SDPA's backends through the same timer); for `lab profile --candidate`, `candidates`
(the tuning build's own list for the problem, which the parent resolves the label against) and a
`candidate` index in each check and bench (that tuning candidate instead of the rung's launcher, as `lab
tune`'s check child takes it). So the parent never imports torch: the
child's start-up (seconds) runs while the parent works and ncu profiles, and the GPU work of each
request runs only when the parent asks, never beside ncu's.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from lab import children
from lab.errors import CheckFailed, LabError
from lab.ladder import build, registry, workspace
from lab.ladder.tuning import candidate, configs_entries, tuning_build, tuning_module
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
    return children.how_it_ended(returncode)


def _tail(stderr: str) -> str:
    return " | ".join(stderr.strip().splitlines()[-3:])


class PendingCheck:
    """A correctness child that is running; `result()` waits for it and reads its verdict."""

    def __init__(self, variant, problem: Problem, extra_shapes: int, tune_config: int | None = None,
                 mode: str = "fwd"):
        argv = _argv(variant, problem, extra_shapes, mode)
        if tune_config is not None:   # that tuning candidate of the rung (its tuning build, `lab tune`)
            argv += ["--tune-config", str(tune_config)]
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
        if "error" in result and "passed" not in result:  # a LabError inside the child: bad input, not a crash
            raise LabError(result["error"])
        return result

    def cancel(self) -> None:
        """End the child (and its group) without reading it: the parent stopped before needing it."""
        children.end(self.proc)


class NotBuilt(LabError):
    """The measuring child found no cached build of the rung (the parent built it first: a key that
    differs between the two is a bug to report, not the user's input)."""


def start_check(variant, problem: Problem, extra_shapes: int, tune_config: int | None = None,
                mode: str = "fwd") -> PendingCheck:
    """Start the correctness child now, read its verdict later."""
    return PendingCheck(variant, problem, extra_shapes, tune_config, mode)


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


def _check(variant, problem: Problem, shapes: int, module, mode: str):
    """The check of the rung (module None: its own build) or of a tuning candidate: on the candidate's own
    head_dim and dtype, and on seeded shapes of the one mask it is declared for (lab.ladder.tuning)."""
    return check_variant(variant, problem=problem, extra_shapes=shapes, module=module,
                         pin_to_problem=module is not None, mode=mode,
                         causal=getattr(module, "causal", None) if module is not None else None)


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
                module = candidate(tuning, config, mode, problem)
            result = _check(variant, problem, shapes, module, mode)
        except LabError as e:
            _emit({"config": config_name(config), "error": str(e)})
            return
        lost = _context_lost()
        if lost is not None:
            _emit({"config": config_name(config), "ended": lost})
            return
        _emit({"config": config_name(config), "verdict": result.to_dict()})


MEASURE_TIMEOUT_S = 3600   # one request (the check, the timing, the baselines) of the measuring child


class MeasuringChild:
    """`lab profile`'s measuring child (see the module's doc), started at once: torch's import runs
    beside the parent's own work. Each request waits for its answer; the child's stderr goes to a
    file (never a pipe nobody reads while ncu runs), whose tail names a crash."""

    def __init__(self, variant, problem: Problem, mode: str = "fwd"):
        argv = _argv(variant, problem, 0, mode) + ["--serve"]
        self.variant, self.problem, self.mode = variant, problem, mode
        self.candidate: int | None = None   # the tuning candidate checked and timed (choose); None: the launcher
        self.stderr = tempfile.TemporaryFile()
        self.proc = children.start(argv, input_pipe=True, stdout=subprocess.PIPE, stderr=self.stderr, env=child_env())

    def candidates(self) -> list[str]:
        """The rung's tuning build's own list for the problem's head_dim and dtype (the backward's in mode bwd
        and fwd+bwd), each entry as the build writes it (`label` or `label|causal`): the table the parent
        resolves `--candidate` against (lab.ladder.tuning.candidate_after_build)."""
        return self._ask("listing its tuning candidates", do="candidates")["entries"]

    def choose(self, index: int | None) -> None:
        """Check and time tuning candidate `index` from now on (None: the rung's launcher)."""
        self.candidate = index

    def check(self, extra_shapes: int) -> dict:
        """The check's manifest dict, as PendingCheck.result gives it (NotBuilt, LabError, CheckFailed alike)."""
        return self._ask("being checked", do="check", shapes=extra_shapes, candidate=self.candidate)["result"]

    def bench(self, reps: int, warmup: int) -> dict:
        """{"timing": Timing's dict, "device": device_info(), "software": software_info() without the tools,
        "seconds": the request's own time}; a time the timer refuses raises TimingRefused, with its reason."""
        return self._ask("being timed", do="bench", reps=reps, warmup=warmup, candidate=self.candidate)

    def baselines(self, reps: int, warmup: int) -> list[dict]:
        """SDPA's backends on the problem in the mode (lab.measure.baselines.run_baselines), as dicts."""
        return self._ask("timing the SDPA baselines", do="baselines", reps=reps, warmup=warmup)["rows"]

    def _ask(self, doing: str, **request) -> dict:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass   # it ended: said below, with how
        line = self._read_line(doing)
        try:
            reply = json.loads(line) if line else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            who = self.variant.id if self.candidate is None else f"{self.variant.id} candidate {self.candidate}"
            raise CheckFailed(f"{who} crashed in its child process ({self._how()}) while {doing} on "
                              f"{self.problem.label()}: {self._tail() or 'no output'}")
        if reply.get("not_built"):
            raise NotBuilt(reply["error"])
        if "refused" in reply:
            from lab.measure.timed import TimingRefused

            r = reply["refused"]
            raise TimingRefused(r["status"], r["reason"], what=r.get("what"))
        if "check_failed" in reply:
            raise CheckFailed(reply["check_failed"])
        if "error" in reply:
            raise LabError(reply["error"], hint=reply.get("hint"))
        return reply

    def _read_line(self, doing: str) -> bytes:
        deadline = time.monotonic() + MEASURE_TIMEOUT_S
        out = self.proc.stdout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise CheckFailed(f"{self.variant.id}'s child did not finish {doing} in {MEASURE_TIMEOUT_S} s (a hang?)")
            ready, _, _ = select.select([out], [], [], min(left, 5.0))
            if ready:
                return out.readline()

    def _how(self) -> str:
        try:
            return _how(self.proc.wait(timeout=10))
        except subprocess.TimeoutExpired:
            return "no answer"

    def _tail(self) -> str:
        self.stderr.seek(0)
        return _tail(self.stderr.read().decode(errors="replace"))

    def close(self) -> None:
        """End the child (and its group): the parent needs nothing more of it, or stopped early."""
        children.end(self.proc)
        self.stderr.close()


def _serve(a) -> int:
    """The measuring child's process (see MeasuringChild). Replies go to a private copy of stdout: what
    else writes to fd 1 (a rung's printf, a library's print) goes to stderr and cannot garble them."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch  # noqa: F401  (seconds: now, while the parent works and ncu profiles; no CUDA call until asked)

    return serve(registry.get(a.variant), Problem.from_label(a.problem), a.mode, sys.stdin,
                 lambda obj: replies.write(json.dumps(obj) + "\n"))


class _Loaded:
    """The measuring child's extensions, each loaded once, from the builds the parent made (NotBuilt where
    one is not cached here): the rung's own (`get(None)`), and its tuning build's table (`entries`) and
    candidates (`get(i)`: lab.ladder.tuning.candidate, shaped like the rung's extension)."""

    def __init__(self, variant, problem: Problem, mode: str):
        self.variant, self.problem, self.mode = variant, problem, mode
        self._modules: dict = {}
        self._tuning = None

    def _tuning_module(self):
        if self._tuning is None:
            if not build.is_built(self.variant, tuning=True):
                raise NotBuilt(f"{self.variant.id} has no cached tuning build here")
            self._tuning = tuning_build(self.variant, allow_compile=False).module
        return self._tuning

    def entries(self) -> list[str]:
        return [str(e) for e in configs_entries(self._tuning_module(), self.problem.head_dim, self.problem.dtype,
                                                self.mode)]

    def get(self, config: int | None):
        if config not in self._modules:
            if config is not None:
                self._modules[config] = candidate(self._tuning_module(), config, self.mode, self.problem)
            elif self.variant.kind != "python" and not build.is_built(self.variant):   # a python rung compiles nothing
                raise NotBuilt(f"{self.variant.id} has no cached build here")
            else:
                self._modules[config] = build.load_cached(self.variant)
        return self._modules[config]


def serve(variant, problem: Problem, mode: str, requests, reply) -> int:
    """Answer each request line (JSON) with one reply (a dict handed to `reply`), until the lines end. A check
    or bench naming a `candidate` runs that tuning candidate instead of the rung's launcher."""
    from lab import environment
    from lab.measure import baselines, checked
    from lab.measure.timed import TimingRefused

    loaded = _Loaded(variant, problem, mode)
    for line in requests:
        try:
            request = json.loads(line)
        except ValueError:
            return 2
        t0 = time.perf_counter()
        if request.get("do") not in ("check", "bench", "baselines", "candidates"):
            reply({"error": f"unknown request {request.get('do')!r}"})
            continue
        try:
            environment.require_gpu("profile")
            environment.require_compute_capability(variant)
            config = request.get("candidate")
            if request["do"] == "candidates":
                reply({"entries": loaded.entries()})
            elif request["do"] == "check":
                if config is None:
                    result = check_variant(variant, problem=problem, extra_shapes=request["shapes"],
                                           module=loaded.get(None), mode=mode).to_dict()
                else:   # on its own head_dim and dtype, and seeded shapes of its mask, as lab tune checks it
                    result = _check(variant, problem, request["shapes"], loaded.get(config), mode).to_dict()
                _release_cached_memory()   # the float64 references' memory, before anything is timed
                reply({"result": result})
            elif request["do"] == "bench":
                timing = checked.time_rung(variant, loaded.get(config), problem, request["reps"], request["warmup"],
                                           mode=mode)
                reply({"timing": timing.to_dict(), "device": environment.device_info(),
                       "software": environment.software_info({}), "seconds": time.perf_counter() - t0})
            else:
                rows = baselines.run_baselines(problem, request["reps"], request["warmup"], mode=mode)
                reply({"rows": [b.to_dict() for b in rows], "seconds": time.perf_counter() - t0})
        except TimingRefused as e:
            reply({"refused": e.to_dict()})
        except NotBuilt as e:
            reply({"error": str(e), "not_built": True})
        except LabError as e:
            reply({"error": str(e), "hint": e.hint})
        except CheckFailed as e:
            reply({"check_failed": str(e)})
    return 0


def _release_cached_memory() -> None:
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


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
    p.add_argument("--serve", action="store_true",
                   help="`lab profile`'s measuring child: requests on stdin, one JSON line each (MeasuringChild)")
    a = p.parse_args(argv)
    if a.serve:
        return _serve(a)
    try:
        variant = registry.get(a.variant)
        problem = Problem.from_label(a.problem)
        if a.configs is not None:
            configs = [None if c == DEFAULT_CONFIG else int(c) for c in a.configs.split(",")]
            _check_configs(variant, problem, a.shapes, a.mode, configs)
            return 0
        module = None
        if a.tune_config is not None:
            module = candidate(tuning_module(variant), a.tune_config, a.mode, problem)
        result = _check(variant, problem, a.shapes, module, a.mode)
    except LabError as e:
        print(json.dumps({"error": str(e)}))
        return 0
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(_main())

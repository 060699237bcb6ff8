"""Child processes the lab starts (the correctness child, ncu and its target, nsys, torch.profiler)
end when the lab stops waiting for them, their own children included.

`run` is subprocess.run with one difference: the child leads a process group of its own, and when
the wait ends by an exception (Ctrl-C's KeyboardInterrupt, a timeout) the whole group is ended,
so ncu's target or a profiler's helper is not left running as an orphan. subprocess.run alone
kills only the direct child. `end_own_group` does the same, at the CLI's top, for children started
by code the lab does not control (torch's extension build runs ninja, which runs nvcc).
"""

from __future__ import annotations

import os
import signal
import subprocess

GRACE_S = 2.0   # SIGTERM first (ncu and nsys clean up their temporary files), then SIGKILL


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the child's group, a grace period for the leader, then SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return   # nothing left in the group
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass


_live: set[subprocess.Popen] = set()   # started and not yet waited for: what `end_all` ends


def start(argv, *, input_pipe: bool = False, capture_output: bool = False, **popen_kwargs) -> subprocess.Popen:
    """Start a child in a process group of its own, to be waited for with `finish` (the caller may
    work meanwhile: `lab profile` starts its correctness child early)."""
    if capture_output:
        popen_kwargs["stdout"] = popen_kwargs["stderr"] = subprocess.PIPE
    if input_pipe:
        popen_kwargs["stdin"] = subprocess.PIPE
    proc = subprocess.Popen(argv, start_new_session=True, **popen_kwargs)
    _live.add(proc)
    return proc


def finish(proc: subprocess.Popen, *, input=None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Wait for a started child; on a timeout or any exception (Ctrl-C) its whole group is ended."""
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        _end_group(proc)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, e.timeout, output=out, stderr=err) from None
    except BaseException:
        _end_group(proc)
        raise
    finally:
        _live.discard(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(argv, *, input=None, capture_output: bool = False, timeout: float | None = None,
        **popen_kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(argv, ...) in a process group of its own, ended whole on any exception."""
    proc = start(argv, input_pipe=input is not None, capture_output=capture_output, **popen_kwargs)
    return finish(proc, input=input, timeout=timeout)


def end(proc: subprocess.Popen) -> None:
    """End one started child and its group, not waiting for its output."""
    if proc.poll() is None:
        _end_group(proc)
    else:
        proc.wait()
    for f in (proc.stdout, proc.stderr, proc.stdin):
        if f is not None:
            f.close()
    _live.discard(proc)


def end_all() -> None:
    """End every child started here and not yet waited for (on Ctrl-C, from the CLI)."""
    for proc in list(_live):
        _end_group(proc)
        _live.discard(proc)


def end_own_group() -> None:
    """End every other process of this process's group, when this process leads it (as a command
    started from a shell does). Used on Ctrl-C: children of code that started them without `run`
    (ninja and nvcc under torch's extension build) would otherwise outlive the lab."""
    if os.getpgrp() != os.getpid():
        return   # not the leader: the group is someone else's (a test runner's, a script's)
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(os.getpgrp(), signal.SIGTERM)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def how_it_ended(returncode: int | None) -> str:
    """How a child process ended, as the lab's messages say it: `killed by SIGSEGV`, `exit code 1`."""
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"

"""The lab's progress lines: `[lab] ...` on stderr, flushed at once (a batch job's log shows each
step as it happens; stdout stays for what scripts read: ids, paths, JSON)."""

from __future__ import annotations

import sys

PREFIX = "[lab]"


def line(msg: str) -> str:
    return f"{PREFIX} {msg}"


def say(msg: str) -> None:
    print(line(msg), file=sys.stderr, flush=True)

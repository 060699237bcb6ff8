"""Writing a file whole or not at all: into a temporary name beside it, then os.replace, so a reader
(or a run killed mid-write) never sees half of it. One home for every such write of the lab."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lab.jsonvalues import json_default


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to (by any writer: parquet, a tool's output); it
    replaces `path` when the block ends, and is removed if the block raises. The name carries the
    process id: two processes writing one file never share a temporary."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: Path, obj, indent: int | None = 2) -> None:
    """JSON with NumPy scalars as numbers and paths as strings (lab.jsonvalues.json_default)."""
    write_text_atomic(path, json.dumps(obj, indent=indent, default=json_default))

"""What the tests share: the repository's paths and the public fixtures.

The public Nsight Compute and Nsight Systems files (tests/fixtures/ncu-public, nsys-public; their
origins in each folder's SOURCES.md) are stored xz-compressed; they are unpacked here once per test
session into a temporary folder, so the tests that read them run in a plain clone."""

from __future__ import annotations

import atexit
import lzma
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLES = REPO / "profiles" / "examples"             # the shipped example runs

_UNPACKED = Path(tempfile.mkdtemp(prefix="lab-test-fixtures-"))
atexit.register(shutil.rmtree, _UNPACKED, ignore_errors=True)


def _unpacked(name: str) -> Path:
    """tests/fixtures/<name>/ with every .xz decompressed, in the session's temporary folder."""
    src, dst = FIXTURES / name, _UNPACKED / name
    dst.mkdir()
    for f in sorted(src.iterdir()):
        if f.suffix == ".xz":
            with lzma.open(f) as fin, open(dst / f.stem, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        else:
            shutil.copy2(f, dst / f.name)
    return dst


PUBLIC_NCU = _unpacked("ncu-public")    # sgemm, dot product, vector add on a Turing GPU (public)
PUBLIC_NSYS = _unpacked("nsys-public")  # nsys SQLite exports and stats CSVs of eight public repositories

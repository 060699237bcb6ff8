"""What the tests share: the repository's paths and the public fixtures, and the check that the
suite leaves the checkout as it found it.

The public Nsight Compute and Nsight Systems files (tests/fixtures/ncu-public, nsys-public; their
origins in each folder's SOURCES.md) are stored xz-compressed; they are unpacked here once per test
session into a temporary folder, so the tests that read them run in a plain clone."""

from __future__ import annotations

import atexit
import lzma
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# torch's CPU work in the tests is on tiny tensors: one OpenMP thread per process (the children a test
# starts inherit it). With a thread per core on a busy 2-core machine, OpenMP's spinning threads wait
# on each other: a 2x6x90x16 float64 backward took 17 s instead of 0.3 s. Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

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


# ------------------------------------------------------------------------------ the slow tier
# Exhaustive shape sweeps (a rung's hundreds of seeded shapes) are marked `slow` beside `gpu`: a plain
# `pytest -m gpu` runs the GPU suite in one sitting (a representative slice of each sweep), and
# `--run-slow` (or a -m expression that names slow) runs the whole sweep too.

def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (exhaustive shape sweeps on the GPU)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow") or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow tier: exhaustive shape sweep (run with --run-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def slow_beyond(cases: list, keep) -> list:
    """`cases` as pytest params, those `keep(i, case)` rejects marked slow."""
    return [c if keep(i, c) else pytest.param(*c, marks=pytest.mark.slow) for i, c in enumerate(cases)]


# ------------------------------------------------------------------------------ no trace in the checkout

# What tests may leave: Python's and pytest's own caches.
_CACHES = ("__pycache__", ".pytest_cache")


def checkout_state() -> dict[str, tuple] | None:
    """Every path git reports in the checkout (changed, untracked or ignored, each file listed) with
    its size and mtime: a test that writes into the checkout changes it, even where git ignores the
    file (reports/, profiles/). None where this is not a git checkout (an sdist, a copied tree)."""
    try:
        res = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored", "--untracked-files=all", "-z"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0 or not (REPO / ".git").exists():
        return None
    state = {}
    for entry in res.stdout.split("\0"):
        path = entry[3:]
        if not path or any(part in _CACHES for part in Path(path).parts):
            continue
        try:
            st = os.stat(REPO / path)
            state[f"{entry[:2]} {path}"] = (st.st_size, st.st_mtime_ns)
        except OSError:
            state[f"{entry[:2]} {path}"] = None
    return state


_BEFORE = checkout_state()


def pytest_sessionfinish(session, exitstatus):
    """The suite fails where it wrote into the checkout: outputs belong in temporary folders."""
    after = checkout_state() if _BEFORE is not None else None
    if after is None or after == _BEFORE:
        return
    changed = sorted(k for k in set(after) | set(_BEFORE) if after.get(k, "gone") != _BEFORE.get(k, "gone"))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"error: the tests wrote into the checkout ({len(changed)} path(s)): "
                            + ", ".join(changed[:10]), red=True)
    session.exitstatus = 1


# ------------------------------------------------------------------------------ the examples, rendered once

@pytest.fixture(scope="session")
def examples_rendered(tmp_path_factory):
    """lab.report.pages.render's result for a store holding a copy of the shipped example runs
    (profiles/examples/): rendered once a session for the tests that read those pages (test_report,
    test_ledger, test_report_browser); they read the pages and write nothing beside them."""
    from lab.report import pages
    from lab.store.runs import list_runs

    if not EXAMPLES.is_dir() or not any(r.path.parent == EXAMPLES for r in list_runs(EXAMPLES.parent)):
        pytest.skip("no recorded runs in profiles/examples/ yet")
    tmp = tmp_path_factory.mktemp("examples-rendered")
    shutil.copytree(EXAMPLES, tmp / "store" / "examples")
    return pages.render(tmp / "out", root=tmp / "store")


# ------------------------------------------------------------------------------ `lab` in this process

# The variables the lab reads or sets for itself: unset for each call unless given, restored after.
LAB_VARIABLES = ("LAB_WORKSPACE", "LAB_PROFILES", "LAB_CACHE", "COLUMNS")


class LabResult:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def lab_here(*args, cwd=None, env=None, obj=None) -> LabResult:
    """`lab ARGS` run in this process by click's runner, from `cwd`, with the lab's variables as given
    (the others unset): what a child process would print and its exit code, without paying the
    interpreter's start and the lab's imports (seconds) per call. An exception that escapes the CLI is
    raised here, so a test sees the traceback a user would have seen."""
    from click.testing import CliRunner

    from lab.cli import main

    full = {k: None for k in LAB_VARIABLES}
    full.update(env or {})
    before = os.getcwd()
    os.chdir(cwd or before)
    try:
        r = CliRunner().invoke(main, [str(a) for a in args], env=full, obj=obj)
    finally:
        os.chdir(before)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return LabResult(r.exit_code, r.stdout, r.stderr)


def host_program(tmp_path_factory, source: str, skip_why: str) -> Path:
    """A host program compiled by nvcc from `source` against kernels/ (a header's logic run on the
    CPU: the tile scheduler's walks), or a skip saying `skip_why` where nvcc is not found."""
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip(f"nvcc not found: {skip_why}")
    d = tmp_path_factory.mktemp("host")
    (d / "main.cu").write_text(source)
    exe = d / "main"
    res = subprocess.run([nvcc, "-std=c++17", "-O1", "-I", str(REPO / "kernels"), "-o", str(exe), str(d / "main.cu")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return exe

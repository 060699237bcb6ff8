"""Bad input and faults, one test per class: an OSError anywhere in a command, a damaged run in the
store, a meaningless --threshold, a comparison of a run with itself, out-of-range counts, a run
store that does not exist, and Ctrl-C in the middle of `lab profile` / `lab sweep`.

Runs are test-made with tests/test_report.py's make_run (every device name says "test-made")."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from lab import cli
from lab.store.runs import list_runs

from test_report import R1, R2, Parsed, make_run   # tests/ is on sys.path under pytest's default import mode
from conftest import EXAMPLES, REPO  # noqa: E402

TRACE = next(iter(sorted(EXAMPLES.glob("*/timeline/torch_trace.json"))), None)   # a recorded torch.profiler trace


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def lab(*args, store: Path | None = None, in_process: bool = True, timeout: float = 120) -> Done:
    """`lab ARGS` with LAB_PROFILES=store: in this process (click's runner; fast on a 2-core CI
    machine) or, with in_process=False, as its own process the way a user runs it."""
    env = dict(os.environ)
    env.pop("LAB_PROFILES", None)
    if store is not None:
        env["LAB_PROFILES"] = str(store)
    if in_process:
        r = CliRunner().invoke(cli.main, [str(a) for a in args], env={"LAB_PROFILES": str(store) if store else None})
        return Done(r.exit_code, r.stdout, r.stderr + ("".join(traceback.format_exception(r.exception))
                                                        if r.exception and not isinstance(r.exception, SystemExit) else ""))
    r = subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=timeout)
    return Done(r.returncode, r.stdout, r.stderr)


def one_line_error(r: Done, code: int = 2) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


# ------------------------------------------------------------------------- OSError, any command

@pytest.mark.parametrize("err", [errno.EROFS, errno.ENOSPC, errno.EACCES, errno.EIO])
def test_an_oserror_anywhere_in_a_command_is_one_line_and_exit_2(tmp_path, monkeypatch, err):
    """The class: whatever step raises it, an OSError becomes one line naming the path, exit 2."""
    store = tmp_path / "store"
    make_run(store, R1)

    def fails(path, text):
        raise OSError(err, os.strerror(err), str(path))

    monkeypatch.setattr("lab.report.pages.write_text_atomic", fails)   # where report pages are written
    r = CliRunner().invoke(cli.main, ["report", "--profiles", str(store), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    [line] = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert os.strerror(err) in line and errno.errorcode[err] in line and str(tmp_path / "o") in line


def test_a_name_too_long_for_the_filesystem_is_bad_input(tmp_path):
    store = tmp_path / "store"
    make_run(store, R1)
    line = one_line_error(lab("analyze", "x" * 5000 + ".ncu-rep", in_process=False))   # as a user's process
    assert len(line) < 400
    one_line_error(lab("report", "--run", "r" * 300, "--out", str(tmp_path / "o"), store=store))
    line = one_line_error(lab("export", list_runs(store)[0].id, "--out", str(tmp_path / ("d" * 300)), store=store))
    assert "ENAMETOOLONG" in line and "characters" in line


def test_an_out_folder_that_cannot_be_written_is_bad_input(tmp_path):
    try:
        os.mkdir("/sys/lab-out")
        os.rmdir("/sys/lab-out")
        pytest.skip("/sys is writable here")
    except OSError:
        pass   # read-only (EROFS) or not permitted (EPERM): the folder a user cannot write
    store = tmp_path / "store"
    a = make_run(store, R1)
    b = make_run(store, R2, created="2026-01-02T00:00:00+00:00")
    for args in (["report"], ["compare", a.name, b.name], ["export", a.name]):
        line = one_line_error(lab(*args, "--out", "/sys/lab-out", store=store))
        assert "/sys/lab-out" in line


# ------------------------------------------------------------------------ one damaged run

def test_a_damaged_run_does_not_block_the_others(tmp_path):
    store = tmp_path / "store"
    good_a = make_run(store, R1)
    good_b = make_run(store, R2, created="2026-01-02T00:00:00+00:00")
    not_json = make_run(store, "mine3", created="2026-01-03T00:00:00+00:00")
    (not_json / "manifest.json").write_text('{"schema_version": 1, "run_')
    bad_field = make_run(store, "mine4", created="2026-01-04T00:00:00+00:00")
    text = (bad_field / "manifest.json").read_text()
    (bad_field / "manifest.json").write_text(text.replace('"median": 10.0', '"median": "fast"'))
    bad_table = make_run(store, R1, created="2026-01-05T00:00:00+00:00", run_id="20260105-v1-table")
    (bad_table / "metrics.parquet").write_bytes(b"not parquet")

    out = tmp_path / "o"
    r = lab("report", "--out", str(out), store=store)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: damaged run")]
    assert len(warnings) == 3
    assert any(not_json.name in w and "cannot read manifest.json" in w for w in warnings)
    assert any(bad_field.name in w and "'timing.median' should be a number" in w for w in warnings)
    assert any(bad_table.name in w and "table 'metrics' cannot be read" in w for w in warnings)
    assert (out / f"{good_a.name}.html").is_file() and (out / f"{good_b.name}.html").is_file()
    assert not (out / f"{bad_table.name}.html").exists()
    index = Parsed((out / "index.html").read_text()).visible
    assert all(d.name in index for d in (not_json, bad_field, bad_table))

    # compare on two good runs works beside the damaged ones; naming a damaged one says why
    r = lab("compare", good_a.name, good_b.name, "--out", str(out), store=store)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    line = one_line_error(lab("compare", good_a.name, bad_field.name, "--out", str(out), store=store))
    assert "damaged" in line and "timing.median" in line
    # asked for by name, the damaged run is an error (exit 2), not a silently missing page
    line = one_line_error(lab("report", "--run", bad_table.name, "--out", str(out), store=store))
    assert "table 'metrics' cannot be read" in line


def test_a_damaged_sweep_does_not_block_the_runs_or_the_other_sweeps(tmp_path):
    """The same class as a damaged run: one unreadable sweep.json is listed with its reason."""
    import shutil

    store = tmp_path / "store"
    good_run = make_run(store, R1)
    shipped = sorted((REPO / "profiles" / "examples").glob("*sweep*/sweep.json"))
    if not shipped:
        pytest.skip("no shipped sweep to copy")
    good_sweep = store / shipped[0].parent.name
    shutil.copytree(shipped[0].parent, good_sweep)
    bad = store / "20260109-000000-sweep-broken"
    bad.mkdir()
    (bad / "sweep.json").write_text('{"schema_version": ')
    out = tmp_path / "o"
    r = lab("report", "--out", str(out), store=store)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert any(bad.name in ln and "cannot read sweep.json" in ln for ln in r.stderr.splitlines()
               if ln.startswith("warning: damaged sweep left out"))
    assert (out / f"{good_run.name}.html").is_file() and (out / f"{good_sweep.name}.html").is_file()
    assert bad.name in Parsed((out / "index.html").read_text()).visible


# ------------------------------------------------------------------------------ lab compare

@pytest.mark.parametrize("threshold", ["nan", "inf", "-inf", "-1", "-0.5"])
def test_a_meaningless_threshold_is_refused(tmp_path, threshold):
    store = tmp_path / "store"
    a = make_run(store, R1, median=1.0)
    b = make_run(store, R2, median=1.86, created="2026-01-02T00:00:00+00:00")   # 86% slower
    line = one_line_error(lab("compare", a.name, b.name, "--threshold", threshold, "--out", str(tmp_path), store=store))
    assert "--threshold" in line
    assert lab("compare", a.name, b.name, "--threshold", "0", "--out", str(tmp_path), store=store).returncode == 1


def test_comparing_a_run_with_itself_says_so(tmp_path):
    store = tmp_path / "store"
    a = make_run(store, R1)
    for other in (a.name, a.name[:12], str(a)):   # the same run by id, prefix and path
        line = one_line_error(lab("compare", a.name, other, "--out", str(tmp_path), store=store))
        assert "same run" in line


# -------------------------------------------------------------------------- option ranges

@pytest.mark.skipif(TRACE is None, reason="no recorded torch.profiler trace in profiles/examples/")
@pytest.mark.parametrize("args, words", [
    (["--range", "x", "--launches", "-3"], "--launches"), (["--range", "x", "--launches", "0"], "--launches"),
    (["--launches", "5"], "--range"), (["--top", "0"], "--top"), (["--top", "-1"], "--top"),
    (["--range", "nosuch"], "nosuch"),
])
def test_timeline_options_are_validated(args, words):
    r = lab("timeline", str(TRACE), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and words in r.stderr, r.stderr


def test_check_shape_count_is_bounded_before_any_work():
    started = time.perf_counter()
    r = lab("check", "--variant", "all", "--shapes", "100000000")
    assert r.returncode == 2 and "--shapes" in r.stderr and "Traceback" not in r.stderr
    assert time.perf_counter() - started < 30   # refused, not built: the list would take minutes


@pytest.mark.parametrize("args", [["profile", "--variant", R1, "--reps", "0"], ["bench", "--reps", "1"],
                                  ["bench", "--warmup", "-1"]])
def test_counts_out_of_range_are_refused(args):
    r = lab(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "range" in r.stderr


# ----------------------------------------------------------------------- the store's root

def test_every_reading_command_refuses_a_store_that_does_not_exist(tmp_path):
    missing = tmp_path / "nonexistent"
    for args in (["report"], ["compare", "a", "b"], ["export", "a"]):
        line = one_line_error(lab(*args, "--profiles", str(missing), "--out", str(tmp_path / "o")))
        assert "does not exist" in line and str(missing) in line
        line = one_line_error(lab(*args, "--out", str(tmp_path / "o"), store=missing))   # LAB_PROFILES alike
        assert "does not exist" in line
    assert not (tmp_path / "o").exists() and not missing.exists()


def test_export_reads_the_store_it_is_given_and_writes_beside_the_reports(tmp_path):
    store = tmp_path / "store"
    a = make_run(store, R1)
    r = lab("export", a.name, "--profiles", str(store), "--out", str(tmp_path / "x"))
    assert r.returncode == 0 and (tmp_path / "x" / a.name / "manifest.json").is_file(), r.stderr
    from lab.report.pages import DEFAULT_OUT
    from lab.store.export import DEFAULT_OUT as EXPORT_OUT
    assert EXPORT_OUT.parent == DEFAULT_OUT


# --------------------------------------------------------------------------------- Ctrl-C

# A driver that runs `lab profile` (or `lab sweep`) through the CLI on a CPU machine: the GPU steps
# are stand-ins, and the step named by argv[1] (build, check or ncu) starts a child that starts a
# grandchild and waits, as ninja (nvcc), the correctness child and ncu (its target) do. The child's
# pids are written to files; the test sends SIGINT once they exist.
DRIVER = textwrap.dedent(r'''
    import os, subprocess, sys
    from pathlib import Path
    stage, work = sys.argv[1], Path(sys.argv[2])
    command = sys.argv[3]
    block = ('sleep 300 & echo $! > "%s/grandchild.pid"; echo $$ > "%s/child.pid"; wait' % (work, work))
    # the measuring child (lab.measure.isolated --serve): answers the check request, then waits for more
    ok = "read request; echo '{\"result\": {\"passed\": true, \"rel_err\": 0.0}}'; read request"

    def script(name, body):
        p = work / name
        p.write_text("#!/bin/sh\n" + body + "\n")
        p.chmod(0o755)
        return str(p)

    import lab.environment as env
    env.require_gpu = lambda *a, **k: None
    env.require_compute_capability = lambda *a, **k: None
    env.gpu_identity = lambda: None   # no GPU named without CUDA: the stand-in build and a fresh check
    env.device_info = lambda *a: {"name": "stand-in device (test-made)"}
    env.software_info = lambda: {}
    env.git_info = lambda: {}
    from lab.ladder import build
    from lab.measure import bench, isolated
    from lab.profilers import ncu

    class Built:
        module, built_now, seconds, flags, cache_key, ptxas = None, False, 0.0, [], "k", []

    def fake_build(variant, *a, **k):
        if stage == "build":   # as torch's cpp_extension runs ninja: a plain subprocess.run
            subprocess.run(["sh", "-c", block])
        return Built()

    build.build = fake_build
    sys.executable = script("python", block if stage == "check" else ok)   # the measuring child
    from lab.measure import checked
    checked.time_rung = lambda *a, **k: bench.summarize([1.0] * 30, 5, True)
    ncu.require_ncu = lambda: "ncu"
    script("ncu", 'for a in "$@"; do [ "$prev" = -o ] && echo partial > "$a"; prev="$a"; done; ' + block)
    os.environ["PATH"] = f"{work}:{os.environ['PATH']}"
    from lab.cli import main
    from lab.ladder.registry import builtin
    R1 = builtin()[0].id   # the ladder's first rung (fp32, D=64)
    if command == "profile":
        main(["profile", "--variant", R1, "--shape", "1,1,16,64", "--no-baselines", "--no-report"])
    else:
        # in the lab's own process (on a GPU, lab sweep's default is one pinned worker: its own process)
        main(["sweep", "--variant", R1, "--shape", "1,1,16,64", "--shape", "1,1,32,64", "--no-baselines", "--in-process"])
''')


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"   # a zombie has ended; only its parent's wait is missing


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize("command, stage", [("profile", "build"), ("profile", "check"), ("profile", "ncu"),
                                            ("sweep", "check")])
def test_ctrl_c_leaves_no_run_and_no_orphan(tmp_path, command, stage):
    work = tmp_path / "work"
    work.mkdir()
    store = tmp_path / "store"
    env = dict(os.environ, LAB_PROFILES=str(store), PYTHONPATH=str(REPO))
    # a session of its own: the driver leads its process group, as a command started from a shell does
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, stage, str(work), command], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ((work / "child.pid").exists() and (work / "grandchild.pid").exists()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the stand-in child never started"
            time.sleep(0.05)
        time.sleep(0.2)
        pids = [int((work / f).read_text()) for f in ("child.pid", "grandchild.pid")]
        assert all(_alive(p) for p in pids)
        os.kill(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:   # say where the driver was, not only that it did not end
            os.killpg(proc.pid, signal.SIGKILL)
            for p in pids:   # the stand-ins may sit in groups of their own, holding the driver's pipes
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"the driver did not end within 30 s of SIGINT; its stderr ends:\n{err[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), f"orphans left running: {[p for p in pids if _alive(p)]}"
    assert list_runs(store) == []
    assert not store.exists() or list(store.iterdir()) == []   # no staging folder left either
    r = lab("report", "--out", str(tmp_path / "o"), store=store) if store.exists() else None
    assert r is None or (r.returncode == 0 and "no stored runs" in r.stderr)

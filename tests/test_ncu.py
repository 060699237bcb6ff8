"""lab.profilers.ncu: the ncu command line, running it, and reading real reports with ncu_report.

Reports: tests/fixtures/ncu-public/ (unpacked by conftest.py) (written by Nsight Compute on a Turing GPU, public) and
tests/fixtures/ncu/ (recorded on the lab's H200 by tests/planted/record.sh). Values are checked
against what ncu_report itself reads, never against numbers typed here.
"""

import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, PUBLIC_NCU
from lab.errors import LabError
from lab.profilers import ncu

PUBLIC = PUBLIC_NCU
OURS = FIXTURES / "ncu"
NAIVE = PUBLIC / "LakshyaSingh354__CudaCode__gemm_reps_naive.ncu-rep"
DOT = PUBLIC / "LakshyaSingh354__CudaCode__stage1_reps_dot_product.ncu-rep"
PLANTED = OURS / "planted-detailed.ncu-rep.xz"

needs_public = pytest.mark.skipif(not NAIVE.exists(), reason=f"public ncu fixtures not found at {PUBLIC}")
needs_planted = pytest.mark.skipif(not PLANTED.exists(), reason="tests/fixtures/ncu/ not recorded yet "
                                   "(tests/planted/record.sh on a GPU machine)")


def _actions(path):
    import ncu_report

    ctx = ncu_report.load_report(str(path))
    return ctx, [r.action_by_idx(i) for r in ctx for i in range(r.num_actions())]


# ----------------------------------------------------------------------------- reading

@needs_public
def test_load_report_matches_ncu_report_values():
    df = ncu.load_report(NAIVE)
    ctx, actions = _actions(NAIVE)
    assert len(df) == len(actions)
    for (_, row), a in zip(df.iterrows(), actions):
        assert row["kernel_mangled"] == a.name(a.NameBase_MANGLED)
        assert row["kernel_function"] == a.name()
        assert row["device"] == a["device__attribute_display_name"].value()
        for name in ("gpu__time_duration.sum", "launch__grid_size", "launch__registers_per_thread",
                     "sm__throughput.avg.pct_of_peak_sustained_elapsed", "breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed"):
            assert row[name] == a[name].value()
    assert df.attrs["units"]["gpu__time_duration.sum"] == actions[0]["gpu__time_duration.sum"].unit()
    # every metric of the action is a column
    assert set(actions[0].metric_names()) <= set(df.columns)


@needs_public
def test_named_instances_become_columns():
    df = ncu.load_report(NAIVE)
    ctx, actions = _actions(NAIVE)
    m = actions[0]["sass__thread_inst_executed_true_per_opcode"]
    ids = m.correlation_ids()
    for i in range(m.num_instances()):
        assert df.iloc[0][f"sass__thread_inst_executed_true_per_opcode[{ids.value(i)}]"] == m.value(i)


@needs_public
def test_rule_results_keep_nsight_estimates():
    rules = ncu.rule_results(DOT)
    ctx, actions = _actions(DOT)
    assert len(rules) == sum(len(a.rule_results()) for a in actions)
    raw = [d for a in actions for d in a.rule_results_as_dicts()]
    for r, d in zip(rules, raw):
        assert r["rule_id"] == d["rule_identifier"]
        assert r["section"] == d["section_identifier"]
        want = d.get("speedup_estimation", {}).get("speedup")
        assert r["est_speedup_pct"] == want
        assert r["type"] in ("OPT", "WARNING", "INFO", "ERROR", "NONE")
        assert "@section:" not in r["message"] and "@url:" not in r["message"]
    assert any(r["speedup_type"] == "global" for r in rules) and any(r["speedup_type"] == "local" for r in rules)


def test_plain_message_resolves_links():
    msg = ncu.plain_message("See @section:WarpStateStats:Warp State Statistics@ and "
                            "@url:Kernel Profiling Guide:https://docs.nvidia.com/x@.")
    assert msg == "See Warp State Statistics and Kernel Profiling Guide (https://docs.nvidia.com/x)."


@needs_planted
def test_xz_report_is_read_and_has_nvtx_of_sdpa():
    df = ncu.load_report(PLANTED)
    assert df["kernel_function"].str.startswith("planted_").all()
    assert (df["device"] == "NVIDIA H200").all()
    sdpa = OURS / "sdpa-detailed.ncu-rep.xz"
    if sdpa.exists():
        s = ncu.load_report(sdpa)
        # each kernel carries the NVTX range it ran in: the lab's range names work as ncu filters
        assert s["nvtx"].str.contains("lab sdpa-").all()


# ----------------------------------------------------------------------------- bad reports

def test_missing_path(tmp_path):
    with pytest.raises(LabError, match="no such file"):
        ncu.load_report(tmp_path / "nope.ncu-rep")


def test_folder(tmp_path):
    with pytest.raises(LabError, match="folder"):
        ncu.load_report(tmp_path)


@pytest.mark.parametrize("content", [b"hello, not a report\n", b""])
def test_not_a_report(tmp_path, content):
    p = tmp_path / "text.ncu-rep"
    p.write_bytes(content)
    with pytest.raises(LabError, match="not an Nsight Compute report"):
        ncu.load_report(p)


@needs_public
@pytest.mark.parametrize("fraction", [0.5, 0.97])
def test_truncated_copy(tmp_path, fraction):
    data = DOT.read_bytes()
    p = tmp_path / "cut.ncu-rep"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(LabError, match="truncated or damaged"):
        ncu.load_report(p)


def test_bad_xz(tmp_path):
    p = tmp_path / "x.ncu-rep.xz"
    p.write_bytes(b"not xz at all")
    with pytest.raises(LabError, match="cannot decompress"):
        ncu.load_report(p)


# ----------------------------------------------------------------------------- a module that crashes on a report

BASIC = OURS / "planted-basic.ncu-rep.xz"
# A planted ncu_report that imports and then crashes loading any report, as Nsight Compute 2025.3.1's
# extras/python module did under Python 3.12 on the GPU machine (2026-11-27): not a fake report.
CRASHING = """import os, signal

class IAction:
    pass

def load_report(path):
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def _lab(args, tmp_path, standin: bool):
    """`python -m lab.cli ARGS` as its own process (a crash of the lab's process is what is tested),
    with the planted module first on PYTHONPATH where `standin`, from an empty store."""
    import os
    import subprocess

    from conftest import REPO

    (tmp_path / "mod").mkdir(exist_ok=True)
    (tmp_path / "mod" / "ncu_report.py").write_text(CRASHING)
    env = {k: v for k, v in os.environ.items() if k not in ("LAB_WORKSPACE", "LAB_CACHE")}
    env["PYTHONPATH"] = os.pathsep.join(([str(tmp_path / "mod")] if standin else []) + [str(REPO)])
    env["LAB_PROFILES"] = str(tmp_path / "store")
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_lab_analyze_with_a_module_that_crashes_on_the_report_exits_2_naming_it(tmp_path):
    """The lab's own process never loads the report with a module that crashed on it in a child: one
    line naming the module's file and the signal, the fix as the hint, exit code 2 (without the child
    the lab dies of the SIGSEGV itself, rc -11 and no word)."""
    res = _lab(["analyze", BASIC], tmp_path, standin=True)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error")]
    assert len(errors) == 1 and str(tmp_path / "mod" / "ncu_report.py") in errors[0], res.stderr
    assert "SIGSEGV" in errors[0] and str(BASIC) in errors[0]
    assert "pip install ncu-report" in res.stderr and "Traceback" not in res.stderr
    assert _lab(["analyze", BASIC, "--json"], tmp_path, standin=False).returncode == 0   # the wheel reads it


def test_lab_doctor_tries_the_module_on_a_real_report(tmp_path):
    """`lab doctor` loads a stored report (here one shipped with the lab: the store is empty) in a child:
    the planted module fails the ncu_report check with the crash, NVIDIA's wheel passes it."""
    import json

    for standin, ok in ((True, False), (False, True)):
        res = _lab(["doctor", "--no-probe", "--json"], tmp_path, standin)
        assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr[-2000:]
        check, = [c for c in json.loads(res.stdout) if c["name"] == "ncu_report"]
        assert check["ok"] is ok, check
        if standin:
            assert "SIGSEGV" in check["detail"] and str(tmp_path / "mod" / "ncu_report.py") in check["detail"]
            assert "pip install ncu-report" in check["fix"]
        else:
            assert "loads" in check["detail"] and ".ncu-rep" in check["detail"]


def test_a_module_is_tried_in_a_child_once_per_process(monkeypatch):
    """One child per module file: after it loaded one real report, the module's next reports are loaded
    in-process at once; a report it cannot read (no crash) is no proof and asks again next time."""
    module = ncu.find_ncu_report_module()
    probes = []
    real = ncu._probe
    monkeypatch.setattr(ncu, "_probe", lambda folder, report: probes.append(report) or real(folder, report))
    monkeypatch.setattr(ncu, "_loaded_in_child", set())
    plain = ncu._materialize(BASIC)
    assert ncu.loads_in_child(module, Path("/nonexistent/x.ncu-rep")) is False
    assert ncu.loads_in_child(module, plain) is True
    assert ncu.loads_in_child(module, Path("/nonexistent/y.ncu-rep")) is True   # the module is known good
    assert [str(p) for p in probes] == ["/nonexistent/x.ncu-rep", str(plain)]
    assert ncu._loaded_in_child == {Path(module.__file__).resolve()}


# ----------------------------------------------------------------------------- the command line

def test_ncu_command_default():
    cmd = ncu.ncu_command(["python", "-m", "lab.measure.target", "--variant", "mine"], "/tmp/r.ncu-rep", "lab mine B8-H16-N1024-D64-float32")
    s = " ".join(cmd)
    assert cmd[:3] == ["ncu", "--target-processes", "all"]
    assert cmd[cmd.index("--nvtx-include") + 1] == "lab mine B8-H16-N1024-D64-float32/"   # push/pop: trailing /
    assert "--nvtx" in cmd and cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--import-source") + 1] == "yes"   # the code travels with the report
    assert cmd[cmd.index("-o") + 1] == "/tmp/r.ncu-rep" and "-f" in cmd
    assert cmd[-5:] == ["python", "-m", "lab.measure.target", "--variant", "mine"]
    assert ncu.section_args(None) == ncu.section_args(ncu.DEFAULT_SECTION_SET)
    assert " ".join(ncu.section_args(None)) in s


def test_ncu_command_sets_and_ranges():
    assert ncu.section_args("full") == ["--set", "full"]
    assert ncu.section_args("SpeedOfLight,Occupancy") == ["--section", "SpeedOfLight", "--section", "Occupancy"]
    lab_all = ncu.section_args("lab-all")
    assert "SourceCounters" in lab_all and "--metrics" in lab_all
    cmd = ncu.ncu_command(["t"], "r", ["lab a", "lab b"])
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--nvtx-include"] == ["lab a/", "lab b/"]
    for bad in ("v2/B8", "dom@range", " "):
        with pytest.raises(LabError):
            ncu.ncu_command(["t"], "r", bad)
    with pytest.raises(LabError):
        ncu.section_args("full; rm -rf /")


def _stub_ncu(tmp_path: Path, replay_log: Path | None, rc: int = 0) -> str:
    """An executable standing in for ncu that replays a log ncu really printed (recorded on the GPU
    machine), so the lab's handling of ncu's own words is tested without a GPU."""
    exe = tmp_path / "ncu"
    body = f"cat '{replay_log}'\n" if replay_log else ""
    exe.write_text(f"#!/bin/sh\n{body}exit {rc}\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.skipif(not (OURS / "none-ncu.log").exists(), reason="recorded ncu log not present")
def test_run_ncu_no_kernels_names_the_filter(tmp_path):
    exe = _stub_ncu(tmp_path, OURS / "none-ncu.log")
    cmd = ncu.ncu_command(["./planted"], tmp_path / "r.ncu-rep", "lab no such range", exe=exe)
    with pytest.raises(LabError) as e:
        ncu.run_ncu(cmd, tmp_path / "ncu.log")
    assert "no kernels" in str(e.value) and "'lab no such range/'" in str(e.value)
    assert (tmp_path / "ncu.log").read_text() == (OURS / "none-ncu.log").read_text()


def test_run_ncu_failure_and_missing_executable(tmp_path):
    exe = _stub_ncu(tmp_path, None, rc=1)
    with pytest.raises(LabError, match="exit code 1, no report written"):
        ncu.run_ncu(ncu.ncu_command(["t"], tmp_path / "r.ncu-rep", exe=exe), tmp_path / "ncu.log")
    with pytest.raises(LabError, match="not found"):
        ncu.run_ncu(ncu.ncu_command(["t"], tmp_path / "r.ncu-rep", exe=str(tmp_path / "absent")), tmp_path / "l")


def test_ncu_version_is_none_or_a_version():
    v = ncu.ncu_version()
    assert v is None or v[0].isdigit()


# ----------------------------------------------------------------------------- on a GPU

def _gpu_and_ncu():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    if ncu.ncu_version() is None:
        return "ncu is not installed"
    return None


@pytest.mark.gpu
def test_profile_one_kernel_in_an_nvtx_range(tmp_path):
    why = _gpu_and_ncu()
    if why:
        pytest.skip(why)
    target = [sys.executable, "-c",
              "import torch; x = torch.ones(1 << 20, device='cuda'); (x * 2).sum().item()\n"
              "torch.cuda.nvtx.range_push('lab gpu test'); y = x + 1; torch.cuda.synchronize()\n"
              "torch.cuda.nvtx.range_pop()"]
    rep = ncu.run_ncu(ncu.ncu_command(target, tmp_path / "t.ncu-rep", "lab gpu test", exe=ncu.find_ncu()),
                      tmp_path / "ncu.log")
    df = ncu.load_report(rep)
    assert len(df) == 1 and "lab gpu test" in df["nvtx"].iloc[0]
    assert df["profiler__replayer_passes"].iloc[0] <= 20


def test_lab_doctor_fails_a_module_that_loads_a_report_but_dies_analysing_it(monkeypatch):
    """Loading is not all (`lab profile` on the GPU machine, 2026-11-27: a clean load, then a segfault in the
    analysis): doctor runs the whole analysis of the report in a child, and a child that dies fails the check
    with the fix; one that analyses it passes."""
    from lab import doctor
    from lab.analysis.isolated import ChildDied

    def died(*a, what, **k):
        raise ChildDied(f"{what}: its child process died reading the report with ncu_report (test-made)",
                        hint="pip install ncu-report (test-made)")

    report = ncu._materialize(BASIC)
    monkeypatch.setattr(doctor, "in_child", died)
    check = doctor._ncu_report_check(report)
    assert check.ok is False and "died reading the report" in check.detail and "pip install ncu-report" in check.fix
    monkeypatch.setattr(doctor, "in_child", lambda fn, *a, what, **k: fn(*a, **k))
    check = doctor._ncu_report_check(report)
    assert check.ok is True and "loads and analyses" in check.detail

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

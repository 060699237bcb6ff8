"""Workspaces on the CPU: `lab init`, `lab new`, the registry seeing a workspace's rungs, the store
and reports moving into it, and every bad input refused with exit code 2 and nothing written.
(A workspace rung on the GPU: tests/test_rungs_gpu.py runs the example workspace's rungs.)"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from lab.ladder import registry, workspace
from lab.ladder.registry import builtin
from conftest import REPO, lab_here  # noqa: E402

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH: the test compiles the copied rung")

LADDER = builtin()
TOP = LADDER[-1]                        # the rung a user copies forward, as in `lab new v6 --from v5`
NEW = f"v{len(LADDER) + 1}"            # the next id, free in the built-in ladder
FP32 = next(v for v in LADDER if v.dtypes == ("float32",))


def lab(*args, cwd, env=None):
    """`lab ARGS` from `cwd`, in this process (conftest.lab_here): no workspace or store variable but
    those given, so the workspace is found from the folder as a user's shell finds it."""
    return lab_here(*args, cwd=cwd, env=env)


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(res, message: str):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.fixture
def ws(tmp_path):
    res = lab("init", "ws", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return tmp_path / "ws"


# ----------------------------------------------------------------------------------------------
# The walk-through
# ----------------------------------------------------------------------------------------------

@needs_nvcc
def test_init_new_variants_build(tmp_path):
    """lab init ws && cd ws && lab new <next> --from <top>; lab variants --json lists it with its
    source inside ws/, and lab build --ptxas-only compiles a rung copied forward."""
    assert lab("init", "ws", cwd=tmp_path).returncode == 0
    ws = tmp_path / "ws"
    assert {p.name for p in ws.iterdir()} >= {"lab.toml", "kernels", "profiles", "reports", "README.md"}
    res = lab("new", NEW, "--from", TOP.id, cwd=ws)
    assert res.returncode == 0, res.stderr
    listed = json.loads(lab("variants", "--json", cwd=ws).stdout)
    mine = next(v for v in listed if v["id"] == NEW)
    assert mine["origin"] == "workspace" and Path(mine["source"]).is_relative_to(ws.resolve())
    assert [v["id"] for v in listed[:len(LADDER)]] == [v.id for v in LADDER]
    # compiled: a copy of the lightest CUDA rung (the copy-forward is the same for every rung; the top
    # rung's own compile, Hopper headers included, is tests/test_build.py's every-rung test)
    light = f"{NEW}b"
    assert lab("new", light, "--from", FP32.id, cwd=ws).returncode == 0
    built = lab("build", "--ptxas-only", "--variant", light, "--json", cwd=ws, env={"LAB_CACHE": str(tmp_path / "cache")})
    assert built.returncode == 0, built.stderr
    (rec,) = json.loads(built.stdout)
    assert rec["variant"] == light and rec["ptxas"] and rec["built_now"]


def test_new_copies_forward_with_the_launcher_renamed_and_a_header_skeleton(ws):
    res = lab("new", NEW, "--from", TOP.id, "--slug", "mine", cwd=ws)
    assert res.returncode == 0, res.stderr
    path = ws / "kernels" / f"{NEW}_mine{TOP.source.suffix}"
    text = path.read_text()
    assert f"lab_forward_{NEW}(" in text and f"lab_forward_{TOP.id}(" not in text
    v = registry.parse_rung(path, "workspace")
    assert (v.id, v.slug, v.dtypes, v.head_dims, v.min_cc) == (NEW, "mine", TOP.dtypes, TOP.head_dims, TOP.min_cc)
    assert f"lab profile --variant {NEW}" in text and v.changed and v.predicted_gain
    # The copied code is the source's code: the diff is the header and the launchers' names only
    # (the forward's, and the backward's where the source has one).
    def body(t: str, rung_id: str) -> str:   # the code, without a block that follows it
        code = t[t.index("#include"):]
        if "// lab:rung" in code:
            code = code[:code.index("// lab:rung")]
            code = code[:code.rstrip().rfind("\n\n") + 1] if "// The rung's facts" in code else code
        return code.replace(f"lab_forward_{rung_id}", "LAUNCHER").replace(f"lab_backward_{rung_id}", "BACKWARD").rstrip()
    assert body(text, NEW) == body(TOP.source.read_text(), TOP.id)


def test_new_writes_the_evidence_of_the_sources_latest_profile(ws):
    """The shipped example runs hold profiles of built-in rungs: the header names the bottleneck
    of the newest one, its run and its evidence, and the block attacks that class."""
    from lab.store.evidence import evidence_of, latest_run_of
    from lab.store.runs import DEFAULT_ROOT

    source = next((v for v in reversed(LADDER) if latest_run_of(v.id, [DEFAULT_ROOT])), None)
    if source is None:
        pytest.skip("no example run of a built-in rung under profiles/examples")
    run = latest_run_of(source.id, [DEFAULT_ROOT])
    ev = evidence_of(run)
    assert lab("new", NEW, "--from", source.id, cwd=ws).returncode == 0
    v = registry.parse_rung(next((ws / "kernels").glob(f"{NEW}_*")), "workspace")
    assert run.id in " ".join(v.attacks.split()) and v.classes == (ev.bottleneck,)
    assert next(iter(ev.metrics)) in v.attacks.replace(" ", "")


def test_a_workspace_rung_with_a_built_in_id_wins_and_the_built_in_stays_reachable(ws):
    assert lab("new", TOP.id, "--from", TOP.id, "--slug", "mine", cwd=ws).returncode == 0
    listed = json.loads(lab("variants", "--json", cwd=ws).stdout)
    same = [v for v in listed if v["id"] == TOP.id]
    assert len(same) == 1 and same[0]["origin"] == "workspace" and same[0]["shadows_builtin"]
    env = {"LAB_WORKSPACE": str(ws)}
    old = dict(os.environ)
    try:
        os.environ.update(env)
        assert registry.get(TOP.id).origin == "workspace"
        assert registry.get(f"builtin:{TOP.id}").source == TOP.source
        assert registry.ref(registry.get(f"builtin:{TOP.id}")) == f"builtin:{TOP.id}"
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_runs_and_reports_live_in_the_workspace(ws, monkeypatch):
    from lab.report.pages import default_out
    from lab.store.runs import store_root

    monkeypatch.delenv("LAB_PROFILES", raising=False)
    monkeypatch.chdir(ws / "kernels")            # found upward, like .git
    monkeypatch.delenv("LAB_WORKSPACE", raising=False)
    assert store_root() == ws.resolve() / "profiles" and default_out() == ws.resolve() / "reports"
    monkeypatch.setenv("LAB_WORKSPACE", "none")
    assert workspace.active() is None and store_root() != ws.resolve() / "profiles"


def test_workspace_option_and_outside_a_workspace(ws, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert [v["id"] for v in json.loads(lab("variants", "--json", cwd=outside).stdout)] == [v.id for v in LADDER]
    assert lab("new", NEW, "--from", TOP.id, "--workspace", str(ws), cwd=outside).returncode == 2  # option order
    res = lab("--workspace", str(ws), "new", NEW, "--from", TOP.id, cwd=outside)
    assert res.returncode == 0, res.stderr
    assert NEW in [v["id"] for v in json.loads(lab("--workspace", str(ws), "variants", "--json", cwd=outside).stdout)]


# ----------------------------------------------------------------------------------------------
# Bad input: exit 2, a clear message, nothing written
# ----------------------------------------------------------------------------------------------

def test_init_refuses_an_existing_workspace_and_a_file(ws, tmp_path):
    before = snapshot(ws)
    refused(lab("init", "ws", cwd=tmp_path), "already a workspace")
    assert snapshot(ws) == before
    (tmp_path / "afile").write_text("x")
    refused(lab("init", "afile", cwd=tmp_path), "not a folder")


def test_new_refusals_write_nothing(ws, tmp_path):
    assert lab("new", NEW, "--from", TOP.id, cwd=ws).returncode == 0
    before = snapshot(ws)
    refused(lab("new", NEW, "--from", TOP.id, cwd=ws), f"already has a rung {NEW!r}")
    refused(lab("new", "other", "--from", "no_such_rung", cwd=ws), "unknown variant 'no_such_rung'")
    refused(lab("new", "bad id", "--from", TOP.id, cwd=ws), "rung id 'bad id'")
    refused(lab("new", "other", "--from", TOP.id, "--slug", "Bad-Slug", cwd=ws), "slug 'Bad-Slug'")
    assert snapshot(ws) == before
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    refused(lab("new", NEW, "--from", TOP.id, cwd=outside), "not inside a workspace")
    assert not any(outside.iterdir())


def test_lab_toml_that_does_not_parse_is_refused_with_its_line(ws):
    (ws / "lab.toml").write_text('[workspace]\nname = "ws"\nkernels = "kernels\n')
    res = lab("variants", cwd=ws)
    refused(res, "lab.toml: not valid TOML")
    assert "line 3" in res.stderr


def test_unknown_lab_toml_key_is_refused(ws):
    (ws / "lab.toml").write_text('[workspace]\nkernel = "src"\n')
    refused(lab("variants", cwd=ws), "unknown key(s) kernel")


def test_a_listed_rung_file_that_is_missing_is_refused(ws):
    (ws / "lab.toml").write_text('[workspace]\nrungs = ["elsewhere/v9_gone.cu"]\n')
    refused(lab("variants", cwd=ws), "v9_gone.cu is missing")


def test_two_rungs_with_one_id_are_refused(ws):
    assert lab("new", NEW, "--from", TOP.id, cwd=ws).returncode == 0
    src = next((ws / "kernels").glob(f"{NEW}_*"))
    shutil.copy(src, ws / "kernels" / f"{NEW}_twin{src.suffix}")
    refused(lab("variants", cwd=ws), f"two rungs with id {NEW!r}")


def test_a_workspace_env_without_lab_toml_is_refused(tmp_path):
    refused(lab("variants", cwd=tmp_path, env={"LAB_WORKSPACE": str(tmp_path)}), "has no lab.toml")
    refused(lab("--workspace", str(tmp_path), "variants", cwd=tmp_path), "no lab.toml there")


@needs_nvcc
def test_a_cu_that_does_not_export_its_launcher_is_refused_with_the_linkers_lines(ws, tmp_path):
    assert lab("new", NEW, "--from", FP32.id, "--slug", "mine", cwd=ws).returncode == 0
    path = ws / "kernels" / f"{NEW}_mine.cu"
    path.write_text(path.read_text().replace(f"lab_forward_{NEW}(", f"lab_forward_typo{NEW}("))
    res = lab("build", "--ptxas-only", "--variant", NEW, cwd=ws, env={"LAB_CACHE": str(tmp_path / "cache")})
    refused(res, f"does not export its launcher lab_forward_{NEW}")
    assert f"lab_forward_{NEW}" in res.stderr.split("does not export", 1)[1]   # the linker names it


PY_RUNG = """\
# {id}_py: a python rung.
#
# lab:rung
# id = "{id}"
# slug = "py"
# title = "a python rung"
# dtypes = ["float16"]
# head_dims = [64]
# min_cc = "8.0"
# attacks = []
# entry = "{entry}"
# lab:end
#
# What changed: test.
# Bottleneck attacked: none.
# Predicted gain: none.
# Measured: none.
{body}
"""


@pytest.mark.parametrize("entry, body, message", [
    ("forward", "import no_such_module_here\n", "No module named 'no_such_module_here'"),
    ("forward", "def forwrd(q, k, v, causal, scale):\n    return q\n", "has no function 'forward'"),
    ("no_such_pkg.attn:forward", "", "cannot import module 'no_such_pkg.attn'"),
])
def test_a_python_rung_that_does_not_import_is_refused(ws, entry, body, message):
    (ws / "kernels" / "p1_py.py").write_text(PY_RUNG.format(id="p1", entry=entry, body=body))
    listed = json.loads(lab("variants", "--json", cwd=ws).stdout)
    assert any(v["id"] == "p1" and v["kind"] == "python" for v in listed)   # declaring it imports nothing
    refused(lab("build", "--ptxas-only", "--variant", "p1", cwd=ws), message)


def test_a_python_rung_that_imports_builds_nothing(ws):
    (ws / "kernels" / "p1_py.py").write_text(PY_RUNG.format(id="p1", entry="forward",
                                                            body="def forward(q, k, v, causal, scale):\n    return q\n"))
    res = lab("build", "--ptxas-only", "--variant", "p1", cwd=ws)
    assert res.returncode == 0, res.stderr
    assert "python rung, nothing to compile" in res.stdout


# ----------------------------------------------------------------------------------------------
# The python rung's adapter (on CPU tensors: the layout and the output checks need no GPU)
# ----------------------------------------------------------------------------------------------

def _python_rung(tmp_path, layout: str, body: str):
    text = PY_RUNG.format(id="p1", entry="forward", body=body).replace("# lab:end", f'# layout = "{layout}"\n# lab:end')
    path = tmp_path / "p1_py.py"
    path.write_text(text)
    from lab.ladder import python_rung

    return python_rung.load(registry.parse_rung(path, "workspace"))


@pytest.mark.parametrize("layout", ["BHND", "BNHD"])
def test_the_callable_gets_its_layout_and_its_output_comes_back_in_bhnd(tmp_path, layout):
    torch = pytest.importorskip("torch")
    seen = {}
    body = ("import torch\nSEEN = {}\n"
            "def forward(q, k, v, causal, scale):\n"
            "    SEEN['shape'] = tuple(q.shape); SEEN['contiguous'] = q.is_contiguous()\n"
            "    return q * 2\n")
    rung = _python_rung(tmp_path, layout, body)
    q = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)
    o = torch.full_like(q, float("nan"))
    rung.forward(q, q, q, o, False, 1.0)
    seen = rung.fn.__globals__["SEEN"]
    assert seen["shape"] == ((2, 3, 5, 4) if layout == "BHND" else (2, 5, 3, 4)) and seen["contiguous"]
    assert torch.equal(o, q * 2)


@pytest.mark.parametrize("ret, message", [
    ("q[..., :-1]", r"returned shape \(2, 3, 5, 3\); expected \(2, 3, 5, 4\)"),
    ("q.double()", "returned float64; expected float32"),
    ("None", "returned NoneType, not a tensor"),
    ("1 / 0", "raised ZeroDivisionError"),
])
def test_a_wrong_output_is_a_runtime_error_the_gate_records(tmp_path, ret, message):
    torch = pytest.importorskip("torch")
    rung = _python_rung(tmp_path, "BHND", f"def forward(q, k, v, causal, scale):\n    return {ret}\n")
    q = torch.zeros(2, 3, 5, 4)
    with pytest.raises(RuntimeError, match=message):
        rung.forward(q, q, q, torch.empty_like(q), False, 1.0)


# ----------------------------------------------------------------------------------------------
# The example workspace shipped in the repository
# ----------------------------------------------------------------------------------------------

EXAMPLE = REPO / "examples" / "workspace"


def test_the_example_workspace_has_a_cuda_and_a_python_rung(tmp_path):
    rungs = workspace.load(EXAMPLE).rungs()
    kinds = {v.kind: v for v in rungs}
    assert set(kinds) == {"cuda", "python"} and kinds["python"].layout == "BNHD"
    assert all(v.changed and v.attacks and v.predicted_gain and v.measured for v in rungs)
    listed = json.loads(lab("variants", "--json", cwd=EXAMPLE).stdout)
    assert [v["id"] for v in listed if v["origin"] == "workspace"] == [v.id for v in rungs]
    # `lab report` reads the workspace's own store (its recorded runs, or says there are none)
    res = lab("report", "--out", str(tmp_path / "out"), cwd=EXAMPLE)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "index.html").is_file()
    stored = list((EXAMPLE / "profiles").glob("*/manifest.json")) if (EXAMPLE / "profiles").is_dir() else []
    assert stored or "no stored runs" in res.stderr


@needs_nvcc
def test_the_example_cuda_rung_compiles(tmp_path):
    cuda = next(v for v in workspace.load(EXAMPLE).rungs() if v.kind == "cuda")
    res = lab("build", "--ptxas-only", "--variant", cuda.id, "--json", cwd=EXAMPLE, env={"LAB_CACHE": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    (rec,) = json.loads(res.stdout)
    assert rec["ptxas"] and all(r["spill_stores_bytes"] == 0 for r in rec["ptxas"])


def test_the_example_python_rung_imports_or_names_what_is_missing():
    py = next(v for v in workspace.load(EXAMPLE).rungs() if v.kind == "python")
    res = lab("build", "--ptxas-only", "--variant", py.id, cwd=EXAMPLE)
    try:
        import triton  # noqa: F401
    except ImportError:
        refused(res, "No module named 'triton'")
    else:
        assert res.returncode == 0 and "python rung, nothing to compile" in res.stdout, res.stderr


def test_a_shadowing_rung_without_backward_points_at_the_builtin_one(ws):
    """`lab new v7 --from v5` hides the built-in v7 (which has a backward) behind a copy of v5 (which
    has none): a backward asked of it is refused (exit 2) naming builtin:v7, the rung meant."""
    with_bwd = next((v for v in LADDER if v.backward), None)
    without = next((v for v in LADDER if not v.backward and v.kind == "cuda"), None)
    if with_bwd is None or without is None:
        pytest.skip("the built-in ladder needs a rung with a backward and one without")
    assert lab("new", with_bwd.id, "--from", without.id, cwd=ws).returncode == 0
    for command in (["check"], ["bench"]):
        res = lab(*command, "--variant", with_bwd.id, "--mode", "bwd", cwd=ws)
        assert res.returncode == 2, res.stderr
        assert f"--variant builtin:{with_bwd.id}" in res.stderr and "shadows the built-in" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr

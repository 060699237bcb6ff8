"""Does a wheel of this repository work as a user installs it? Build the wheel, install it into a
fresh virtual environment, and from an empty temporary folder run what a new user runs:

    lab variants                     every built-in rung is listed
    lab report --profiles <examples> ./reports/index.html is written there, in the user's folder
    lab init ws; cd ws; lab new ...  a workspace, and a rung copied forward into it
    lab build --ptxas-only           a rung copied forward compiles against the shipped common.cuh (where nvcc is)
    lab analyze <report>             an ncu report of the shipped examples is explained
    lab export <run>                 ./reports/export/<run>/ is written there

and check that nothing was written into the installed package (its file list before and after).

The wheel is built from an sdist, so both are checked to carry the top-level kernels/ and
templates/. Offline on purpose: they are built without build isolation and the wheel installed
without its dependencies into a fresh venv that sees this interpreter's packages (the active venv's,
where it runs in one), so the check needs no index. Exit 0 when every step passed, 1 when one failed (the step and its output
printed), 2 when the check cannot run here (no pip, no venv, no setuptools able to build a wheel).

    python3 tools/wheel_check.py [--keep]     (--keep: leave the temporary folder for a look)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "profiles" / "examples"
CANNOT_RUN = 2


class Failed(Exception):
    pass


class CannotRun(Exception):
    pass


def _clean_env(**extra) -> dict:
    """The user's environment: none of this checkout's PYTHONPATH, workspace or store settings."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("LAB_")}
    env.update(extra)
    return env


def _run(argv, cwd: Path, env: dict, what: str, timeout: float = 900) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise Failed(f"{what}: exit {res.returncode}\n$ {' '.join(map(str, argv))}\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    print(f"ok   {what}", flush=True)
    return res


# What a distribution of the lab is made of: the package and, at the top level as the project's card
# names them, the built-in ladder and the report templates (pyproject.toml maps them into the package).
SOURCES = ("lab", "kernels", "templates")


def build_wheel(tmp: Path) -> Path:
    """An sdist, then the wheel built from the unpacked sdist (as `python -m build` does), so both
    are checked to carry kernels/ and templates/. From a copy of what they are made of: setuptools
    writes build/ and *.egg-info beside the sources it builds, which must not land in the checkout."""
    src, dist = tmp / "src", tmp / "dist"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in SOURCES:
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    res = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                          "print(b.build_sdist(sys.argv[1]))", str(dist)],
                         cwd=src, capture_output=True, text=True, timeout=600)
    sdists = sorted(dist.glob("flash_lab-*.tar.gz"))
    if res.returncode != 0 or not sdists:
        raise CannotRun(f"cannot build an sdist here (setuptools >= 68): {(res.stderr or res.stdout).strip()[-600:]}")
    with tarfile.open(sdists[0]) as tar:
        names = tar.getnames()
        for shipped in ("kernels/common.cuh", "kernels/binding.cpp", "templates/run.html"):
            if not any(n.endswith("/" + shipped) for n in names):
                raise Failed(f"the sdist {sdists[0].name} lacks {shipped}")
        tar.extractall(tmp / "sdist", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    unpacked = next((tmp / "sdist").iterdir())
    print(f"ok   sdist built: {sdists[0].name}", flush=True)
    # the build backend's own hook, as `python -m build` calls it (pip wheel would add pip's start and a child)
    res = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                          "print(b.build_wheel(sys.argv[1]))", str(dist)],
                         cwd=unpacked, capture_output=True, text=True, timeout=600)
    wheels = sorted(dist.glob("flash_lab-*.whl"))
    if res.returncode != 0 or not wheels:
        raise CannotRun("cannot build a wheel offline here (setuptools >= 68 installed): "
                        f"{(res.stderr or res.stdout).strip()[-600:]}")
    print(f"ok   wheel built from the sdist: {wheels[0].name}", flush=True)
    return wheels[0]


def make_venv(tmp: Path, wheel: Path) -> Path:
    """A fresh venv that sees this interpreter's packages (the dependencies and pip, offline) but not its lab.
    Not --system-site-packages: that sees the base interpreter's packages, which are not the active
    venv's when this runs inside one. The active interpreter's site folders go on the new venv's
    path as plain lines of a .pth file, after its own site-packages (so its own lab wins), and their
    .pth files are not run (so an editable install of this checkout is not picked up)."""
    venv = tmp / "venv"
    # without its own pip: ensurepip takes seconds, and this interpreter's pip is on the venv's path below
    res = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True,
                         timeout=300)
    if res.returncode != 0:
        raise CannotRun(f"cannot make a virtual environment here: {(res.stderr or res.stdout).strip()[-400:]}")
    py = venv / "bin" / "python"
    own = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, timeout=60, env=_clean_env())
    if own.returncode != 0:
        raise CannotRun(f"the new venv's python does not run: {own.stderr.strip()[-400:]}")
    here = [p for p in dict.fromkeys([*site.getsitepackages(), site.getusersitepackages()]) if Path(p).is_dir()]
    (Path(own.stdout.strip()) / "_lab_wheel_check_deps.pth").write_text("".join(f"{p}\n" for p in here))
    if subprocess.run([py, "-c", "import pip"], capture_output=True, timeout=60, env=_clean_env()).returncode != 0:
        _run([py, "-m", "ensurepip", "--default-pip"], tmp, _clean_env(), "pip put into the venv (none to share)")
    # the dependencies come from this interpreter's packages (offline): the wheel alone is installed
    _run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], tmp, _clean_env(), "wheel installed")
    return venv


def installed_files(venv: Path) -> tuple[Path, list[str]]:
    py = venv / "bin" / "python"
    res = _run([py, "-c", "import lab, pathlib; print(pathlib.Path(lab.__file__).parent)"], venv, _clean_env(),
               "the venv imports its own lab")
    pkg = Path(res.stdout.strip())
    if venv.resolve() not in pkg.resolve().parents:
        raise Failed(f"the venv imports lab from {pkg}, not from its own install under {venv}")
    root = pkg.parent
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and (p.is_relative_to(pkg) or p.parts[len(root.parts)].startswith("flash_lab-")))
    return pkg, files


def check(tmp: Path) -> None:
    if not EXAMPLES.is_dir() or not any(EXAMPLES.glob("*/manifest.json")):
        raise CannotRun(f"no shipped example runs at {EXAMPLES}")
    wheel = build_wheel(tmp)
    venv = make_venv(tmp, wheel)
    pkg, before = installed_files(venv)
    lab = venv / "bin" / "lab"
    user = tmp / "user"     # the user's empty folder
    user.mkdir()
    env = _clean_env(XDG_CACHE_HOME=str(tmp / "cache"), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")

    # everything of the top-level kernels/ and templates/ is installed inside the package
    for name in SOURCES[1:]:
        want = {p.relative_to(REPO / name).as_posix() for p in (REPO / name).rglob("*") if p.is_file()
                and "__pycache__" not in p.parts}
        got = {p.relative_to(pkg / name).as_posix() for p in (pkg / name).rglob("*") if p.is_file()} \
            if (pkg / name).is_dir() else set()
        if want - got:
            raise Failed(f"the installed package lacks {name}/{sorted(want - got)[0]} "
                         f"({len(want - got)} file(s) of {name}/ missing: pyproject.toml's package-data)")
    print("ok   kernels/ and templates/ installed whole inside the package", flush=True)

    # every built-in rung, as the package's own kernels/ declares them
    rung_files = sorted(p.name for p in (pkg / "kernels").iterdir()
                        if p.suffix in (".cu", ".py") and "lab:rung" in p.read_text(errors="replace"))
    listed = json.loads(_run([lab, "variants", "--json"], user, env, "lab variants").stdout)
    if not rung_files or sorted(Path(v["source"]).name for v in listed) != rung_files:
        raise Failed(f"lab variants lists {[v['id'] for v in listed]}; the package's kernels/ declares {rung_files}")
    ids = [v["id"] for v in listed]

    _run([lab, "report", "--profiles", EXAMPLES], user, env, "lab report --profiles <examples>")
    if not (user / "reports" / "index.html").is_file():
        raise Failed(f"lab report wrote no {user / 'reports' / 'index.html'}")

    _run([lab, "init", "ws"], user, env, "lab init ws")
    ws = user / "ws"
    source = ids[-1]   # the top of the built-in ladder, copied forward as a user starts a rung of their own
    _run([lab, "new", "mine1", "--from", source], ws, env, f"lab new mine1 --from {source}")
    if not list((ws / "kernels").glob("mine1_*")):
        raise Failed("lab new wrote no kernels/mine1_* in the workspace")
    if shutil.which("nvcc"):
        # compiled against the installed common.cuh: a copy of the first (lightest) CUDA rung, as the
        # top one's compile takes minutes and tests/test_build.py compiles every rung already
        light = next(v["id"] for v in listed if v["kind"] == "cuda")
        _run([lab, "new", "w1", "--from", light], ws, env, f"lab new w1 --from {light}")
        _run([lab, "build", "--ptxas-only", "--variant", "w1"], ws, env, "lab build --ptxas-only --variant w1")
    else:
        print("skip lab build --ptxas-only: no nvcc on PATH", flush=True)

    # a shipped run's report, xz-compressed as the store keeps it, by its file and by the run's folder
    run = sorted(p for p in EXAMPLES.iterdir() if (p / "profile.ncu-rep.xz").is_file())[0]
    _run([lab, "analyze", run / "profile.ncu-rep.xz"], user, env, f"lab analyze {run.name}/profile.ncu-rep.xz")
    _run([lab, "analyze", run], user, env, f"lab analyze {run.name}")
    _run([lab, "export", run.name, "--profiles", EXAMPLES], user, env, f"lab export {run.name}")
    if not (user / "reports" / "export" / run.name).is_dir():
        raise Failed(f"lab export wrote no {user / 'reports' / 'export' / run.name}")

    _, after = installed_files(venv)
    if after != before:
        added, gone = sorted(set(after) - set(before)), sorted(set(before) - set(after))
        raise Failed(f"the installed package changed: added {added[:10]}, removed {gone[:10]}")
    print("ok   nothing written into the installed package", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="leave the temporary folder (its path is printed)")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="lab-wheel-check-"))
    try:
        check(tmp)
    except CannotRun as e:
        print(f"cannot run the wheel check here: {e}", file=sys.stderr)
        return CANNOT_RUN
    except (Failed, subprocess.TimeoutExpired) as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    finally:
        if a.keep:
            print(f"kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("wheel check passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

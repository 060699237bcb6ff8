"""A wheel of this repository, installed into a fresh virtual environment and run from an empty
folder, works as a user's install does (tools/wheel_check.py says what it runs and checks)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

CANNOT_RUN = 2   # tools/wheel_check.py's exit code where no wheel can be built or installed offline


def test_a_wheel_installs_and_runs_from_an_empty_folder(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "tools" / "wheel_check.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=1500)
    if res.returncode == CANNOT_RUN:
        pytest.skip(res.stderr.strip().splitlines()[-1])
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "nothing written into the installed package" in res.stdout
    assert not list(tmp_path.iterdir()), "the check wrote into the folder it was run from"


def test_the_distribution_lists_every_package_and_maps_the_top_level_data():
    """pyproject.toml lists the packages by hand (find cannot see kernels/ and templates/, mapped into
    the package): every package under lab/ must be in the list, and the two mapped folders be the
    top-level ones the lab reads."""
    import tomllib

    from lab import shipped

    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "lab").rglob("__init__.py")}
    assert set(conf["packages"]) == on_disk | {"lab.kernels", "lab.templates"}
    assert conf["package-dir"] == {"lab.kernels": "kernels", "lab.templates": "templates"}
    assert shipped.KERNELS_DIR == REPO / "kernels" and shipped.TEMPLATES_DIR == REPO / "templates"
    assert (shipped.KERNELS_DIR / "common.cuh").is_file() and (shipped.TEMPLATES_DIR / "run.html").is_file()

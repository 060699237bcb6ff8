"""Where the files that ship with the lab are: kernels/ (the built-in ladder, common.cuh's launcher
contracts, binding.cpp) and templates/ (the report's Jinja templates).

They sit at the repository's top level, as the project's card names it; the build configuration
(pyproject.toml's package-dir) installs them inside the package, as lab/kernels and lab/templates.
So a checkout (an editable install, or PYTHONPATH pointing at it) finds them beside lab/, and an
installed wheel or sdist inside it. The checkout is told by its pyproject.toml beside lab/, so that a
folder left behind inside lab/ (an old layout, an untracked file) cannot shadow the real one.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    root = _PACKAGE.parent
    if (root / "pyproject.toml").is_file() and (root / name).is_dir():
        return root / name
    return _PACKAGE / name


KERNELS_DIR = shipped_dir("kernels")
TEMPLATES_DIR = shipped_dir("templates")

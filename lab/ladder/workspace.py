"""A workspace: the user's own folder of rungs, found as git finds `.git`.

    my-attn/
      lab.toml        marks the workspace (its [workspace] table; see TEMPLATE)
      kernels/        the user's rungs: .cu and .py files with a lab:rung block (lab.ladder.rungfile)
                      and a copy of common.cuh, the launcher contract a .cu rung includes
      profiles/       runs stored by `lab profile` here
      reports/        pages `lab report` renders here

Which workspace is active: `--workspace DIR` (the CLI sets LAB_WORKSPACE, so child processes see
the same one), else LAB_WORKSPACE, else the current folder or the nearest parent holding lab.toml.
LAB_WORKSPACE="" or "none" turns workspaces off. Outside a workspace everything works as before.
`lab init` and `lab new` make and fill one: lab.ladder.scaffold.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lab.errors import LabError
from lab.ladder.rungfile import rung_files, scan

LAB_TOML = "lab.toml"
ENV = "LAB_WORKSPACE"
KEYS = ("name", "kernels", "rungs")

TEMPLATE = """\
# A Flash Lab workspace. `lab` finds this file from this folder or any folder below it.
[workspace]
name = "{name}"
kernels = "kernels"     # the folder of your rungs: .cu / .py files that open with a lab:rung block
rungs = []              # more rung files outside that folder, relative to this file
"""


@dataclass(frozen=True)
class Workspace:
    root: Path
    name: str
    kernels_dir: Path
    extra_rungs: tuple[Path, ...]

    @property
    def toml(self) -> Path:
        return self.root / LAB_TOML

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profiles"

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    def rung_files(self) -> list[Path]:
        missing = [p for p in self.extra_rungs if not p.is_file()]
        if missing:
            raise LabError(f"{self.toml}: rung file {missing[0]} is missing",
                           hint="fix the path in [workspace] rungs, or remove it")
        return rung_files(self.kernels_dir) + [p for p in self.extra_rungs if p not in rung_files(self.kernels_dir)]

    def rungs(self):
        files = self.rung_files()
        stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
        return _scan_cached(stamp)

    def relative(self, path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(self.root))
        except ValueError:
            return str(path)


@lru_cache(maxsize=64)
def _scan_cached(stamp: tuple) -> tuple:
    return tuple(scan([Path(p) for p, _, _ in stamp], "workspace"))


def find(start: Path | None = None) -> Path | None:
    """The nearest folder at or above `start` (default: the current one) holding lab.toml."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / LAB_TOML).is_file():
            return folder
    return None


def load(root: Path) -> Workspace:
    """Read ROOT/lab.toml; a file that does not parse is refused with its line."""
    root = Path(root).resolve()
    path = root / LAB_TOML
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise LabError(f"cannot read {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise LabError(f"{path}: not valid TOML: {e}", hint="fix the line named above") from None
    table = data.get("workspace", {})
    if not isinstance(table, dict):
        raise LabError(f"{path}: [workspace] must be a table")
    unknown = sorted(set(table) - set(KEYS)) + sorted(set(data) - {"workspace"})
    if unknown:
        raise LabError(f"{path}: unknown key(s) {', '.join(unknown)}; lab.toml knows [workspace] "
                       f"{', '.join(KEYS)}")
    name = table.get("name", root.name)
    kernels = table.get("kernels", "kernels")
    rungs = table.get("rungs", [])
    if not isinstance(name, str) or not isinstance(kernels, str):
        raise LabError(f"{path}: [workspace] name and kernels must be strings")
    if not isinstance(rungs, list) or not all(isinstance(r, str) for r in rungs):
        raise LabError(f"{path}: [workspace] rungs must be a list of file paths")
    return Workspace(root, name, (root / kernels).resolve(), tuple((root / r).resolve() for r in rungs))


def active() -> Workspace | None:
    """The workspace this command works in, or None (see the module's docstring)."""
    env = os.environ.get(ENV)
    if env is not None:
        if env.strip().lower() in ("", "none"):
            return None
        root = Path(env).expanduser()
        if not (root / LAB_TOML).is_file():
            raise LabError(f"workspace {root} has no {LAB_TOML}", hint=f"create one with `lab init {root}`")
        return _load_cached(str(root.resolve()), (root / LAB_TOML).stat().st_mtime_ns)
    root = find()
    if root is None:
        return None
    return _load_cached(str(root), (root / LAB_TOML).stat().st_mtime_ns)


def use(folder: Path) -> None:
    """`--workspace DIR` (or "none"): the workspace for this command and, through the environment,
    for every child process it starts (check, profiler target)."""
    if str(folder).lower() == "none":
        os.environ[ENV] = "none"
        return
    if not (Path(folder) / LAB_TOML).is_file():
        raise LabError(f"--workspace {folder}: no {LAB_TOML} there", hint=f"create one with `lab init {folder}`")
    os.environ[ENV] = str(Path(folder).resolve())


@lru_cache(maxsize=16)
def _load_cached(root: str, mtime_ns: int) -> Workspace:
    return load(Path(root))


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def valid_name(name: str) -> bool:
    return bool(_NAME_RE.match(name))

"""The tune store: profiles/<tune-id>/ holds tune.json, one `lab tune` as it was measured: the rung and
its source's sha256, the problem, mode, dtype, device, software, commit and date, every configuration's
check verdict, median, CI95 and ratio to the launcher's default (with the paired rounds' CI95 of that
ratio), and the predictions given with --predict, recorded before the timing (lab.measure.tune).

The manifest is named tune.json, not manifest.json, so neither the run store's listing nor the sweep
store's mistakes a tune for one of theirs. A tune appears whole or not at all: it is written into a
hidden staging folder that is renamed into place, as lab.store.runs stores a run. A tune that timed
nothing (every configuration failed its check, or was refused) is not stored.

Manifest (schema_version 1): schema_version, kind "tune", tune_id, created_utc, lab_version, git,
variant {id, origin, source_sha256}, problem (lab.measure.problem.Problem.to_dict()), mode, dtype,
device, software, reps, warmup, check_shapes, fastest, rows (lab.measure.tune.TuneRow.to_dict()),
predictions (lab.measure.tune.judged: given, label, low, high, measured, estimator, rounds, ratio_ci95,
verdict, ci95_where, not_measured; before judge_ratio, measured was the ratio of the medians and the
last four absent or partial: the ledger judges a stored tune again from its rows).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from lab import __version__
from lab.environment import git_info
from lab.errors import LabError
from lab.files import write_json_atomic
from lab.store.runs import _SAFE, scan_store, store_root

TUNE_SCHEMA = 1
TUNE_MANIFEST = "tune.json"


class Tune:
    """A stored tune (read side)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.manifest = json.loads((self.path / TUNE_MANIFEST).read_text())
        except (OSError, ValueError) as e:
            raise LabError(f"{self.path} is not a lab tune: cannot read {TUNE_MANIFEST} ({e})") from None
        if not isinstance(self.manifest, dict) or self.manifest.get("schema_version") != TUNE_SCHEMA \
                or self.manifest.get("kind") != "tune":
            raise LabError(f"{self.path}: not a tune manifest of schema {TUNE_SCHEMA}")
        for key, kind in (("rows", list), ("predictions", list), ("problem", dict), ("variant", dict)):
            if not isinstance(self.manifest.get(key), kind):
                raise LabError(f"{self.path}: its {TUNE_MANIFEST} has no {key} {kind.__name__}")

    @property
    def id(self) -> str:
        return self.manifest["tune_id"]

    def __repr__(self) -> str:
        return f"Tune({self.id})"


def new_tune_id(variant_id: str, mode: str, problem_label: str, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-tune-{variant_id}{'' if mode == 'fwd' else '-' + mode.replace('+', '-')}-{problem_label}"


def store_tune(result, reps: int, warmup: int, check_shapes: int, origin: str | None = None,
               root: Path | None = None) -> Tune | None:
    """`result` (lab.measure.tune.TuneResult) stored whole; None where nothing was timed."""
    if not any(r.timing for r in result.rows):
        return None
    d = result.to_dict()
    root = Path(root or store_root())
    base = new_tune_id(result.variant_id, result.mode, result.problem.label())
    if not _SAFE.match(base):
        raise LabError(f"bad tune id {base!r}")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{base}.", suffix=".partial", dir=root))
    try:
        tune_id, n = base, 1
        while (root / tune_id).exists():   # two tunes stored within one second get -2, -3, ...
            n += 1
            tune_id = f"{base}-{n}"
        manifest = {"schema_version": TUNE_SCHEMA, "kind": "tune", "tune_id": tune_id,
                    "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "lab_version": __version__, "git": git_info(),
                    "variant": {"id": result.variant_id, "origin": origin, "source_sha256": result.source_sha256},
                    "problem": d["problem"], "mode": result.mode, "dtype": result.problem.dtype,
                    "device": result.device, "software": result.software,
                    "reps": reps, "warmup": warmup, "check_shapes": check_shapes,
                    "fastest": d["fastest"], "rows": d["rows"], "predictions": d["predictions"]}
        write_json_atomic(staging / TUNE_MANIFEST, manifest)
        os.replace(staging, root / tune_id)   # atomic on one filesystem: the tune appears whole
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Tune(root / tune_id)


def scan_tunes(root: Path | None = None) -> tuple[list[Tune], list]:
    """Tunes under the store root and its examples/, oldest first, and the damaged ones with their
    reason (lab.store.runs.DamagedRun)."""
    return scan_store(root, TUNE_MANIFEST, Tune, "tune")

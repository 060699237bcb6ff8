"""Correctness verdicts kept in the run store, reused only for the same binary, shapes and seed.

A warm `lab profile` of a rung that did not change checks the same machine code on the same seeded
inputs as the run before it: the verdict cannot differ. So a PASSED check is kept, keyed by everything
it depends on: the rung's binary (sha256 of the built extension, or of a python rung's source), the
problem, the number of ragged shapes and their seed, the mode, the device and driver, torch and CUDA,
and the lab's own checking code (the sources of lab.measure's check, gradcheck, gate, problem and
call: a changed tolerance or shape list is a miss). A failed check is never kept; `--fresh-check`
checks again. The run's manifest says when a verdict was reused and from when
(correctness.reused). A tuning candidate's verdict (`lab profile --candidate`) is kept under a key that
also names the candidate. Entries live in `<store>/.checks/<key>.json`, written atomically; one that
does not read back is a miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from lab import measure
from lab.files import write_json_atomic
from lab.store.manifest import Correctness, ManifestError
from lab.store.runs import store_root

CACHE_DIR = ".checks"
FORMAT = 1
SEED = 0   # the seed `lab profile`'s check runs with (lab.measure.check.check_variant's default)
_CHECK_CODE = ("check.py", "gradcheck.py", "gate.py", "problem.py", "call.py")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def binary_sha256(built) -> str:
    """The checked binary: a cuda rung's extension (the build's library, the .so its module loads from;
    `lab profile`'s parent never loads it), or a python rung's source; a pair's, its parts' build keys."""
    path = getattr(built, "library", None) or getattr(built.module, "__file__", None)
    return _sha256(Path(path)) if path and Path(path).is_file() else hashlib.sha256(built.cache_key.encode()).hexdigest()


def cache_key(variant, built, problem, shapes: int, mode: str, device: dict, software: dict, candidate=None) -> dict:
    """`candidate` (lab.ladder.tuning.Chosen): a tuning candidate's verdict, under a key of its own (its index
    and label; the binary is the tuning build's, which every candidate shares): a verdict for the rung's
    default never stands for a candidate, nor one candidate's for another. The default's key is unchanged."""
    here = Path(measure.__file__).parent
    code = hashlib.sha256(b"".join((here / n).read_bytes() for n in _CHECK_CODE if (here / n).is_file())).hexdigest()
    key = {"format": FORMAT, "variant": variant.id, "binary_sha256": binary_sha256(built),
           "source_sha256": "+".join(_sha256(s) for s in variant.sources), "problem": problem.label(), "shapes": shapes, "seed": SEED,
           "mode": mode, "check_code_sha256": code,
           "device": {k: device.get(k) for k in ("name", "compute_capability", "driver")},
           "software": {k: software.get(k) for k in ("torch", "cuda")}}
    if candidate is not None:
        key["candidate"] = {"index": candidate.index, "label": candidate.label}
    return key


def _path(key: dict, root: Path | None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return Path(root or store_root()) / CACHE_DIR / f"{digest}.json"


def get(key: dict, root: Path | None = None) -> dict | None:
    """The kept verdict (a manifest correctness dict, with `reused` saying from when), or None."""
    try:
        entry = json.loads(_path(key, root).read_text())
        if entry.get("key") != key:
            return None
        result = Correctness.from_dict(entry["result"], "correctness").to_dict()
        if result.get("passed") is not True:
            return None
        result["reused"] = (f"the check of {entry['checked_utc']} on the same binary (sha256 "
                            f"{key['binary_sha256'][:12]}), problem, {key['shapes']} ragged shapes, seed {key['seed']} "
                            f"and mode: not run again (`lab profile --fresh-check` runs it)")
        return result
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ManifestError):
        return None


def put(key: dict, result: dict, root: Path | None = None) -> None:
    """Keep a passed verdict; a store that cannot be written costs only the cache."""
    if result.get("passed") is not True:
        return
    path = _path(key, root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"key": key, "checked_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                 "result": {k: v for k, v in result.items() if k != "reused"}}, indent=1)
    except OSError:
        pass

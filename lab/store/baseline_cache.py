"""SDPA baselines cached in the run store, per (device, software, shape, dtypes, protocol).

PyTorch's SDPA backends do not change between iterations of a kernel, so `lab profile` times them
once per device, driver, torch/CUDA/cuDNN build, problem shape, baseline dtypes, backends and
repetitions, and reads them back afterwards (`--fresh-baselines` re-times them). Entries live in
`<store>/.baselines/<key>.json`: a hidden folder that `lab report` does not list, written
atomically; each baseline is checked against lab.store.manifest.Baseline when read, and an entry
that does not read back is a cache miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from lab.files import write_json_atomic
from lab.store.manifest import Baseline, ManifestError
from lab.store.runs import store_root

CACHE_DIR = ".baselines"
FORMAT = 2
"""2: timed by the checked timer (lab.measure.timed: inputs rotating, held to the floor); entries of
format 1, timed without those checks, are misses."""


def cache_key(device: dict, software: dict, problem, *, reps: int, warmup: int, backends, dtypes,
              mode: str = "fwd") -> dict:
    """What the baselines' timings depend on (the clocks are not: they vary between runs anyway).
    K/V heads and a mode other than the forward join the key only where they apply, so the
    forward's cached entries stay valid."""
    extra = {**({"heads_kv": problem.heads_kv} if problem.gqa else {}), **({"mode": mode} if mode != "fwd" else {})}
    return {"format": FORMAT, **extra,
            "device": {k: device.get(k) for k in ("name", "compute_capability", "sm_count", "memory_bytes", "driver")},
            "software": {k: software.get(k) for k in ("torch", "cuda", "cudnn")},
            "shape": [problem.batch, problem.heads, problem.seqlen_q, problem.seqlen_k, problem.head_dim, problem.causal],
            "dtypes": list(dtypes), "backends": list(backends), "reps": reps, "warmup": warmup}


def _path(key: dict, root: Path | None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return Path(root or store_root()) / CACHE_DIR / f"{digest}.json"


def get(key: dict, root: Path | None = None) -> tuple[list[dict], str] | None:
    """The cached baselines (manifest dicts, without a ratio) and when they were timed, or None."""
    path = _path(key, root)
    try:
        entry = json.loads(path.read_text())
        if entry.get("key") != key:
            return None
        baselines = [Baseline.from_dict(b, "baselines[]").to_dict() for b in entry["baselines"]]
        return baselines, str(entry["timed_utc"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ManifestError):
        return None


def put(key: dict, baselines: list[dict], root: Path | None = None) -> str:
    """Store freshly timed baselines; returns their time stamp. A store that cannot be written
    (read-only) costs only the cache, not the run."""
    timed = datetime.now(timezone.utc).isoformat(timespec="seconds")
    clean = [{k: v for k, v in Baseline.from_dict(b, "baselines[]").to_dict().items() if k != "ratio"} for b in baselines]
    path = _path(key, root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"key": key, "timed_utc": timed, "baselines": clean}, indent=1)
    except OSError:
        pass
    return timed

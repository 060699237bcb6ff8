"""`lab export`: a stored run's tables as CSV (or JSON lines) and its manifest, for other tools."""

from __future__ import annotations

import json
from pathlib import Path

from lab.errors import LabError
from lab.store.runs import REPO_ROOT, Run

FORMATS = ("csv", "json")
DEFAULT_OUT = REPO_ROOT / "reports" / "export"   # beside `lab report`'s pages: one place for what the lab writes out


def export_run(run: Run, out_dir: Path, fmt: str = "csv") -> list[Path]:
    if fmt not in FORMATS:
        raise LabError(f"unknown format {fmt!r}; use {' or '.join(FORMATS)}")
    out_dir = Path(out_dir) / run.id
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "manifest.json"]
    written[0].write_text(json.dumps(run.manifest, indent=2))
    for name in run.manifest.get("tables", {}):
        df = run.table(name)
        path = out_dir / f"{name}.{'csv' if fmt == 'csv' else 'jsonl'}"
        if fmt == "csv":
            df.to_csv(path, index=False)
        else:
            df.to_json(path, orient="records", lines=True)
        written.append(path)
    return written

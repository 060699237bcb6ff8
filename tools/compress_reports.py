"""Keep stored runs' Nsight Compute reports xz-compressed, as `lab profile` stores them now
(profile.ncu-rep -> profile.ncu-rep.xz, the manifest's artifacts entry and profile report naming it):
lab.store.runs.compress_stored_artifact on every run of each store given, its examples/ included.
Nothing measured changes. Default: this checkout's stores, profiles/ (profiles/examples/ ships) and
examples/workspace/profiles/.

    python3 tools/compress_reports.py [STORE...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.errors import LabError
from lab.store import runs

REPO = Path(__file__).resolve().parent.parent


def main(stores: list[Path]) -> int:
    before = after = 0
    for store in stores:
        found, damaged = runs.scan_runs(store)
        for d in damaged:
            print(f"{d.id}: left as it is, damaged: {d.reason}", file=sys.stderr)
        for run in found:
            plain = run.artifact("ncu_report")
            size = plain.stat().st_size if plain is not None and plain.is_file() else None
            try:
                packed = runs.compress_stored_artifact(run.path)
            except LabError as e:
                print(f"{run.id}: {e}", file=sys.stderr)
                return 2
            if packed is not None:
                before, after = before + size, after + packed.stat().st_size
                print(f"{run.path}: {size / 1e6:.2f} MB -> {packed.name} {packed.stat().st_size / 1e6:.2f} MB")
    print(f"{before / 1e6:.1f} MB of reports -> {after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main([Path(a) for a in sys.argv[1:]] or [REPO / "profiles", REPO / "examples" / "workspace" / "profiles"]))

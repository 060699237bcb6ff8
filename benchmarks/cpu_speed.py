"""CPU-side speed targets, measured as a user runs the commands (fresh process, imports included):

  lab analyze --json on a 6-kernel `ncu --set full` report   target < 3 s   (issue 3)
  lab report over 50 stored runs                            target < 2 s   (issue 6)

Speed targets live here, not in timed tests: the numbers depend on the machine's load. Run it on an
otherwise idle machine and record the result in benchmarks/RESULTS.md:
    python3 benchmarks/cpu_speed.py            (exit 1 if a median misses its target)
"""

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FULL_SET_REPORT = ROOT / "tests" / "fixtures" / "ncu" / "v5-full.ncu-rep.xz"
REPEATS = 5


def _timed(argv: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {res.stderr[-500:]}")
    return seconds


def analyze_seconds(tmp: Path) -> list[float]:
    report = tmp / "v5-full.ncu-rep"
    subprocess.run(["xz", "-dc", str(FULL_SET_REPORT)], stdout=report.open("wb"), check=True)
    return [_timed([sys.executable, "-m", "lab.cli", "analyze", "--json", str(report)]) for _ in range(REPEATS)]


def report_seconds(tmp: Path) -> list[float]:
    import os

    from lab.store.runs import list_runs

    example = list_runs(ROOT / "profiles")[-1]
    store = tmp / "store"
    for i in range(50):
        dest = store / f"{example.id}-copy{i:02d}"
        shutil.copytree(example.path, dest)
        manifest = json.loads((dest / "manifest.json").read_text())
        manifest["run_id"] = dest.name
        (dest / "manifest.json").write_text(json.dumps(manifest))
    env = dict(os.environ, LAB_PROFILES=str(store))
    return [_timed([sys.executable, "-m", "lab.cli", "report", "--out", str(tmp / "out")], env) for _ in range(REPEATS)]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    missed = False
    with tempfile.TemporaryDirectory() as d:
        for name, fn, target in (("lab analyze, 6-kernel full-set report", analyze_seconds, 3.0),
                                 ("lab report, 50 runs", report_seconds, 2.0)):
            samples = fn(Path(d))
            median = statistics.median(samples)
            missed |= median >= target
            print(f"{name}: median {median:.2f} s (min {min(samples):.2f}, max {max(samples):.2f}, "
                  f"{len(samples)} runs); target < {target:.0f} s: {'met' if median < target else 'MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

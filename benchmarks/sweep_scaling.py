"""`lab sweep` on 1, 2 and 4 GPUs of one host: wall times, speed-ups, and whether the multi-GPU
tables agree with the one-GPU table (issue 31).

The target sweep: fa-grid, fwd/bwd/fwd+bwd, fp16 and bf16, v6 and v7 beside cuDNN and FlashAttention-2
(48 problems x 4 implementations x 3 modes = 576 cells). Each count is a fresh `lab sweep` process
into a store of its own, as a user runs it, one after the other on the same machine: one GPU is
`lab sweep` (in this process, no workers), N GPUs `lab sweep --gpus 0,..,N-1`. The rungs are built
once first (`lab build`, timed and reported, not compared), so every count starts from the same build
cache; the float64 gates are checked afresh by every count (a sweep keeps no gate across runs).

Each multi-GPU table is held against the one-GPU table by `lab sweep compare`'s rule: a row changed
only beyond both CI95s AND the practical threshold (3%); the GPU-to-GPU spread is reported. Prints a
Markdown block for benchmarks/RESULTS.md (device, date, commit) with each worker's own account of
where its time went (the sweep manifest's workers). Exit 1 when a target is missed (2 GPUs >= 1.8x,
4 GPUs >= 3.4x) or a row changed.

    python3 benchmarks/sweep_scaling.py --counts 1,2,4 --out DIR [--json FILE]

Run the counts in separate calls where one call may not take them all (`--counts 1` then
`--counts 2,4 --reuse-one`, the same --out: the one-GPU sweep is read back from DIR/gpus-1, its wall
time from DIR/wall-1.json, whether or not --counts names 1: it is the reference every row is held to).

`--one-as-worker` measures the one-GPU sweep (and its --again) as `lab sweep --gpus 0`: one worker
process pinned to GPU 0 like each multi-GPU worker, instead of `lab sweep` measuring in its own
process; the code path that times a cell is then the same in every table. On four H200s (RESULTS.md,
2026-11-27, two sessions) the in-process one-GPU table was the slower in all 24 of 24 (row length,
timing) groups against the 2- and 4-GPU tables (median ratios 0.973-0.998, the shortest calls
furthest), while the 2- against the 4-GPU table leaned either way (0.984-1.012).

`--reuse` runs nothing (no build, no sweep): it reads every count's sweep and wall time already in DIR
and prints the table, on any machine, a CPU one included (the GPU machine's DIR copied back). The date
and commit are the sweeps' own (their manifests), not this checkout's.

`--again` runs the one-GPU sweep a second time (DIR/gpus-1-again) and holds it against the first by
the same rule, printed as the row "1 again": the disagreement one GPU has with itself from one run to
the next, the reference against which the multi-GPU rows' disagreement is read (on two H100s, short
calls' rows differed between the one- and two-GPU tables beyond 3%: RESULTS.md).

Each table's rows are timed in passes (`lab sweep --passes`, default 2: a row's CI95 spans its passes'
medians); the lines under the table count, per count, the rows whose passes alone were more than the
threshold apart. `-- ... --passes 1` (the whole sweep's options) times each cell in one burst, as
sweeps before passes did: the pair of runs shows what the passes cost in wall time and in agreement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.environment import git_info  # noqa: E402
from lab.store import sweeps as store  # noqa: E402

TARGET_SWEEP = ["--variant", "v6,v7", "--preset", "fa-grid", "--mode", "fwd,bwd,fwd+bwd", "--dtype", "float16,bfloat16",
                "--baselines", "sdpa-cudnn,sdpa-flash"]
TARGETS = {2: 1.8, 4: 3.4}
AGAIN = "1-again"   # the one-GPU sweep's second run (--again): its store is OUT/gpus-1-again


def _run(argv: list[str], env: dict, log: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    return time.perf_counter() - t0, rc


def _read_build_s(out: Path) -> float | None:
    """The build time an earlier call recorded in OUT (build.json; before it, that call's result.json)."""
    for name in ("build.json", "result.json"):
        try:
            return json.loads((out / name).read_text())["build_s"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="1,2,4", help="GPU counts, comma-separated (1 is the reference)")
    ap.add_argument("--out", required=True, type=Path, help="a folder: one store per count, logs, the JSON")
    ap.add_argument("--reuse-one", action="store_true",
                    help="read the one-GPU sweep already in OUT/gpus-1 (the reference, --counts naming 1 or not)")
    ap.add_argument("--reuse", action="store_true",
                    help="run nothing: read every count's sweep and wall time already in OUT and print the table")
    ap.add_argument("--again", action="store_true",
                    help="run the one-GPU sweep twice: its run-to-run disagreement, the reference row '1 again'")
    ap.add_argument("--one-as-worker", action="store_true",
                    help="measure the one-GPU sweep as one worker (--gpus 0), pinned as the others are, not in-process")
    ap.add_argument("--threshold", type=float, default=store.PRACTICAL_THRESHOLD_PCT)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--lab", default=f"{sys.executable} -m lab.cli",
                    help="the command that runs the lab (tests: `python3 -m tests.sweep_fakes`, the CPU fake measurer)")
    ap.add_argument("sweep_options", nargs="*", help="lab sweep options after --, replacing the target sweep's")
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    if (a.reuse_one or a.reuse) and 1 not in counts:
        counts = [1, *counts]   # the one-GPU sweep is what the others are held to: read back, never left out
    options = a.sweep_options or TARGET_SWEEP
    lab = a.lab.split()
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")   # the lab needs no NCCL; multicast stays off regardless
    if not a.reuse:   # --reuse reads OUT: a wrong one is reported, not created
        a.out.mkdir(parents=True, exist_ok=True)
    variants = options[options.index("--variant") + 1] if "--variant" in options else None
    results: dict = {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git": git_info(),
                     "options": options, "threshold_pct": a.threshold, "counts": {}}
    if variants and not a.reuse:
        build_s, rc = _run([*lab, "build", "--variant", variants], env, a.out / "build.log")
        if rc:
            sys.exit(f"lab build --variant {variants} failed (exit {rc}); see {a.out / 'build.log'}")
        results["build_s"] = round(build_s, 1)
        (a.out / "build.json").write_text(json.dumps({"build_s": results["build_s"]}))
    elif a.reuse:
        results["build_s"] = _read_build_s(a.out)
        if results["build_s"] is None:
            del results["build_s"]
    runs = counts + ([AGAIN] if a.again else [])
    for n in runs:
        where = a.out / f"gpus-{n}"
        if a.reuse or (n in (1, AGAIN) and a.reuse_one and store.list_sweeps(where)):
            continue
        gpus = ["--gpus", ",".join(map(str, range(1 if n == AGAIN else n)))]
        if n in (1, AGAIN) and not a.one_as_worker:
            gpus = []   # the lab's own process measures, as `lab sweep` without --gpus does
        seconds, rc = _run([*lab, "sweep", *options, *gpus, "--name", f"scale-{n}", "--profiles", str(where)], env,
                           a.out / f"sweep-{n}.log")
        results["counts"][n] = {"wall_s": round(seconds, 1), "exit": rc}
        (a.out / f"wall-{n}.json").write_text(json.dumps(results["counts"][n]))
    sweeps = {}
    for n in runs:
        found = store.list_sweeps(a.out / f"gpus-{n}")
        if not found:   # nothing to read (a wrong --out, a count never measured there): bad input, exit 2
            print(f"no sweep in {a.out / f'gpus-{n}'}; see {a.out / f'sweep-{n}.log'}", file=sys.stderr)
            return 2
        sweeps[n] = found[-1]
        m = sweeps[n].manifest
        entry = results["counts"].setdefault(n, {})
        if "wall_s" not in entry and (a.out / f"wall-{n}.json").is_file():   # --reuse-one: timed by an earlier call
            entry.update(json.loads((a.out / f"wall-{n}.json").read_text()))
        # a sweep cut off by a time limit has no cells_done yet: its rows are still compared, its wall time is not
        entry.update(sweep=sweeps[n].id, status=m.get("status"), cells=m.get("cells_done"), device=(m.get("device") or {}).get("name"),
                     workers=[{k: w.get(k) for k in ("part", "gpu_uuid", "cells", "units", "times_s", "gates_checked")}
                              for w in m.get("workers") or []])
    if a.reuse:   # the measurement's own date and commit, not this checkout's
        manifests = [sweeps[n].manifest for n in runs]
        results["date_utc"] = min(m.get("created_utc") or "" for m in manifests) or results["date_utc"]
        commits = sorted({(m.get("git") or {}).get("commit") or "unknown" for m in manifests})
        results["git"] = {"commit": commits[0] if len(commits) == 1 else "/".join(c[:12] for c in commits)}
    one = results["counts"].get(1, {}).get("wall_s")
    failed = False
    lines = [f"lab sweep {' '.join(options)} on {results['counts'][counts[-1]].get('device')}, "
             f"{results['date_utc'][:10]}, commit {(results['git'].get('commit') or 'unknown')[:12]}"
             + (f"; rungs built first in {results['build_s']} s" if "build_s" in results else ""), "",
             "| GPUs | wall s | speed-up | cells | rows changed (> CI95 and "
             f"{a.threshold:g}%) | beyond CI95 within {a.threshold:g}% | median time ratio vs 1 GPU | GPU-to-GPU middle 90% |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in runs:
        e = results["counts"][n]
        speedup = one / e["wall_s"] if one and e.get("wall_s") and n != AGAIN else None
        e["speedup"] = round(speedup, 2) if speedup else None
        if n in TARGETS and (speedup is None or speedup < TARGETS[n]):
            failed = True
        changed = within = ratio = spread = "-"
        if n != 1 and 1 in sweeps:
            c = store.compare_sweeps(sweeps[1], sweeps[n], a.threshold)
            e["compare"] = {k: c[k] for k in ("rows_compared", "median_ratio_b_over_a", "gpu_spread",
                                               "pass_spread_a", "pass_spread_b")} | {
                "changed": len(c["differing"]), "beyond_ci95_within_threshold": len(c["beyond_ci95_within_threshold"])}
            changed, within = len(c["differing"]), len(c["beyond_ci95_within_threshold"])
            ratio = f"{c['median_ratio_b_over_a']:.3f}"
            spread = ", ".join(f"{g['p5_ratio']:.3f}-{g['p95_ratio']:.3f}" for g in c["gpu_spread"]) or "-"
            failed |= bool(changed) and n != AGAIN   # the reference row judges nothing: it is the noise itself
        label = "1 again" if n == AGAIN else n
        lines.append(f"| {label} | {e.get('wall_s')} | {f'{speedup:.2f}x' if speedup else '-'} | {e.get('cells')} | {changed} "
                     f"| {within} | {ratio} | {spread} |")
    lines.append("")
    for n in runs:   # the drift a sweep's passes saw (lab sweep --passes): what its rows' CI95 now span
        spread = store.pass_spread([r for r in sweeps[n].rows() if r.get("status") == "ok"], a.threshold)
        if spread["rows_in_passes"]:
            lines.append(f"- {n} GPUs: {spread['passes_apart']} of {spread['rows_in_passes']} rows had passes more than "
                         f"{a.threshold:g}% apart (the widest {(spread['max_pass_spread'] - 1) * 100:.1f}%)")
    for n in runs:
        for w in results["counts"][n].get("workers") or []:
            t = ", ".join(f"{k} {v:.1f}" for k, v in (w.get("times_s") or {}).items() if isinstance(v, (int, float)))
            lines.append(f"- {n} GPUs, worker {w['part']} ({w['gpu_uuid']}): {w['cells']} cells in {len(w['units'])} "
                         f"problems, {len(w.get('gates_checked') or [])} gates checked; seconds: {t}")
    (a.out / "result.json").write_text(json.dumps(results, indent=2, default=str))
    if a.json:
        a.json.write_text(json.dumps(results, indent=2, default=str))
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

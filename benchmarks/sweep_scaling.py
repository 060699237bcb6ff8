"""`lab sweep` on 1, 2 and 4 GPUs of one host: wall times, speed-ups, and whether the multi-GPU
tables agree with the one-GPU table (issue 31).

The target sweep: fa-grid, fwd/bwd/fwd+bwd, fp16 and bf16, v6 and v7 beside cuDNN and FlashAttention-2
(48 problems x 4 implementations x 3 modes = 576 cells). Each count is a fresh `lab sweep` process
into a store of its own, as a user runs it, one after the other on the same machine: N GPUs are
`lab sweep --gpus 0,..,N-1`, one GPU `lab sweep --gpus 0` (one worker pinned to GPU 0, the code path
that times every multi-GPU table and `lab sweep`'s own default on a GPU). The rungs are built once
first (`lab build`, timed and reported, not compared), so every count starts from the same build
cache; the float64 gates are checked afresh by every count (a sweep keeps no gate across runs).

Each multi-GPU table is held against the one-GPU table by `lab sweep compare`'s rule: a row changed
only beyond both CI95s AND the practical threshold (3%); the GPU-to-GPU spread is reported. The changed
rows are also counted by what a row measures (a column: device time, graph replay with its start held;
call latency, CUDA events with the host's dispatch in them), each kind's agreement is a line under the
table, and each changed events row a line with its cell's graph row and the host's share of the call
(events minus graph) in both tables, where both have that graph row: a short call's move that is all
host is told from one of the device's. The rule of a change is the same for every kind. Prints a
Markdown block for benchmarks/RESULTS.md (device, date, commit) with each worker's own account of
where its time went (the sweep manifest's workers). Exit 1 when a target is missed (2 GPUs >= 1.8x,
4 GPUs >= 3.4x) or a row changed.

    python3 benchmarks/sweep_scaling.py --counts 1,2,4 --out DIR [--json FILE]

Run the counts in separate calls where one call may not take them all (`--counts 1` then
`--counts 2,4 --reuse-one`, the same --out: the one-GPU sweep is read back from DIR/gpus-1, its wall
time from DIR/wall-1.json, whether or not --counts names 1: it is the reference every row is held to).

`--in-process` also measures the one-GPU sweep in the lab's own process (`lab sweep --in-process`, the
path every one-GPU table took before 2026-11-27's eighth session; DIR/gpus-1-in-process), held against
the worker's by the same rule and printed as the row "1 in-process": on four H200s the in-process
one-GPU tables were the slower in all 24 of 24 (row length, timing) groups against the 2- and 4-GPU
tables (RESULTS.md, fourth and sixth sessions: median ratios 0.973-0.998), while a worker's one-GPU
table agreed with the 4-GPU one (eighth session: 4 of 270 rows). With `--again` it runs between the
worker's two one-GPU runs (1, 1 in-process, 1 again: the path's difference told from a drift in time).
`--one-as-worker` is accepted and changes nothing (the worker is the default now).

`--reuse` runs nothing (no build, no sweep): it reads every count's sweep and wall time already in DIR
and prints the table, on any machine, a CPU one included (the GPU machine's DIR copied back). The date
and commit are the sweeps' own (their manifests), not this checkout's.

`--again` runs the one-GPU sweep a second time (DIR/gpus-1-again) and holds it against the first by
the same rule, printed as the row "1 again": the disagreement one GPU has with itself from one run to
the next, the reference against which the multi-GPU rows' disagreement is read (on four H200s, the
eighth session: 87 of 270 rows, one GPU's short calls 4-14 us slower in the second run).

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
IN_PROCESS = "1-in-process"   # the one-GPU sweep measured in the lab's own process (--in-process)
ONE_GPU = (1, IN_PROCESS, AGAIN)   # the one-GPU runs: the reference and the two held against it
LABELS = {AGAIN: "1 again", IN_PROCESS: "1 in-process"}
SHORT_MEASURES = {"device": "device time (held graph)", "graph-unheld": "unheld graph (launch included)",
                  "call": "call latency (events)"}   # lab.store.sweeps.MEASURES, as the table's column names them
NOT_PLAN = {"--gpus": 1, "--name": 1, "--profiles": 1, "--in-process": 0}   # lab sweep's options that are no part of
                                                                            # the sweep (with how many values)


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


def _recorded_options(sweep) -> list[str] | None:
    """The sweep's own options, from the command its plan recorded (`lab sweep ...`), less those that
    say where and how it ran (NOT_PLAN); None where it recorded no command."""
    import shlex

    words = shlex.split((sweep.manifest.get("plan") or {}).get("command") or "")
    if words[:2] != ["lab", "sweep"]:
        return None
    out, i = [], 2
    while i < len(words):
        w = words[i]
        if w in NOT_PLAN:
            i += 1 + NOT_PLAN[w]
            continue
        out.append(w)
        i += 1
    return out


def _earlier_options(out: Path) -> list[str] | None:
    """The sweep options the call that measured OUT wrote into its result.json (a lab that recorded no
    command line: `python -m lab.cli` records it, the tests' fake does not)."""
    try:
        return json.loads((out / "result.json").read_text())["options"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _gpus_label(n) -> str:
    return LABELS.get(n) or f"{n} GPU{'s' if n != 1 else ''}"


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
    ap.add_argument("--in-process", action="store_true",
                    help="also measure the one-GPU sweep in the lab's own process (lab sweep --in-process): the row "
                         "'1 in-process', held against the worker's '1'")
    ap.add_argument("--one-as-worker", action="store_true",
                    help="accepted, changes nothing: the one-GPU sweep is one pinned worker (--gpus 0) by default")
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
    runs = counts + ([IN_PROCESS] if a.in_process else []) + ([AGAIN] if a.again else [])
    for n in runs:
        where = a.out / f"gpus-{n}"
        if a.reuse or (n in ONE_GPU and a.reuse_one and store.list_sweeps(where)):
            continue
        # every count is measured by pinned workers, one GPU too (lab sweep's default on a GPU, said
        # explicitly so that the table does not depend on it); --in-process's row by the lab's own process
        how = ["--in-process"] if n == IN_PROCESS else ["--gpus", ",".join(map(str, range(1 if n in ONE_GPU else n)))]
        seconds, rc = _run([*lab, "sweep", *options, *how, "--name", f"scale-{n}", "--profiles", str(where)], env,
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
    if a.reuse:   # the measurement's own date, commit and sweep options, not this checkout's
        recorded = _recorded_options(sweeps[1]) or _earlier_options(a.out)
        if recorded is not None and a.sweep_options and a.sweep_options != recorded:
            print(f"the sweeps in {a.out} were measured with `{' '.join(recorded)}`, not `{' '.join(a.sweep_options)}`; "
                  "--reuse reads what was measured: drop the options after --", file=sys.stderr)
            return 2
        options = results["options"] = recorded or options
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
             f"{a.threshold:g}%) | of them by what a row measures | of them with a problem that moved as a whole "
             f"| beyond CI95 within {a.threshold:g}% | median time ratio vs 1 GPU | GPU-to-GPU middle 90% |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    kinds, hosts = [], []   # each count's rows by what they measure, and its changed events rows: under the table
    for n in runs:
        e = results["counts"][n]
        speedup = one / e["wall_s"] if one and e.get("wall_s") and n not in (AGAIN, IN_PROCESS) else None
        e["speedup"] = round(speedup, 2) if speedup else None
        if n in TARGETS and (speedup is None or speedup < TARGETS[n]):
            failed = True
        changed = by_measure = with_problem = within = ratio = spread = "-"
        if n != 1 and 1 in sweeps:
            c = store.compare_sweeps(sweeps[1], sweeps[n], a.threshold)
            e["compare"] = {k: c[k] for k in ("rows_compared", "median_ratio_b_over_a", "gpu_spread",
                                               "pass_spread_a", "pass_spread_b")} | {
                "changed": len(c["differing"]), "beyond_ci95_within_threshold": len(c["beyond_ci95_within_threshold"]),
                # the changed rows whose whole problem moved with them (lab sweep compare: the machine's state
                # while that problem ran, not an implementation) and how many problems moved so
                "changed_with_problem": len(c["moved_with_problem"]),
                "problems_moved_as_a_whole": [p["problem"] for p in c["problems_moved_as_a_whole"]],
                # device time (held graph), unheld graph and call latency (events) apart, and each changed
                # events row's host share where its cell has a graph row in both (lab sweep compare's)
                "by_measure": c["by_measure"],
                "changed_rows": [{k: d.get(k) for k in ("impl", "label", "mode", "timing", "ratio", "measure", "host")}
                                 for d in c["differing"]]}
            by_measure = ", ".join(f"{m['changed']} of {m['rows']} {SHORT_MEASURES[m['measure']]}" for m in c["by_measure"])
            kinds += [(n, m) for m in c["by_measure"]]
            hosts += [(n, d) for d in c["differing"] if d["timing"] == "events"]
            changed, within = len(c["differing"]), len(c["beyond_ci95_within_threshold"])
            moved = len(c["problems_moved_as_a_whole"])
            with_problem = f"{len(c['moved_with_problem'])} ({moved} problem{'' if moved == 1 else 's'} moved)"
            ratio = f"{c['median_ratio_b_over_a']:.3f}"
            spread = ", ".join(f"{g['p5_ratio']:.3f}-{g['p95_ratio']:.3f}" for g in c["gpu_spread"]) or "-"
            failed |= bool(changed) and n not in ONE_GPU   # the one-GPU rows judge nothing: the noise, the path
        label = LABELS.get(n, n)
        lines.append(f"| {label} | {e.get('wall_s') or '-'} | {f'{speedup:.2f}x' if speedup else '-'} | {e.get('cells')} | {changed} "
                     f"| {by_measure} | {with_problem} | {within} | {ratio} | {spread} |")
    lines.append("")
    for n, m in kinds:   # how each kind of row agreed, by the same rule
        lines.append(f"- {_gpus_label(n)}, {SHORT_MEASURES[m['measure']]}: {store.measure_agreement(m, a.threshold)}")
    for n, d in hosts:   # a changed call-latency row: did the device's time move, or the host's share?
        h = d.get("host")
        where = (f"graph {h['graph_ratio']:.3f}x{'' if h['graph_held'] else ' (start not held)'}, host's share (events - "
                 f"graph) {h['a_host_ms'] * 1e3:.1f} -> {h['b_host_ms'] * 1e3:.1f} us"
                 + (f", {h['host_of_move']:.0%} of the move" if h["host_of_move"] is not None else "")
                 if h else "no graph row of the cell in both tables")
        lines.append(f"- {_gpus_label(n)}, changed: {d['impl']} {d['label']} {d['mode']} events {d['ratio']:.3f}x; {where}")
    for n in runs:   # the drift a sweep's passes saw (lab sweep --passes): what its rows' CI95 now span
        spread = store.pass_spread([r for r in sweeps[n].rows() if r.get("status") == "ok"], a.threshold)
        if spread["rows_in_passes"]:
            lines.append(f"- {_gpus_label(n)}: {spread['passes_apart']} of {spread['rows_in_passes']} rows had passes more than "
                         f"{a.threshold:g}% apart (the widest {(spread['max_pass_spread'] - 1) * 100:.1f}%)")
    for n in runs:
        for w in results["counts"][n].get("workers") or []:
            t = ", ".join(f"{k} {v:.1f}" for k, v in (w.get("times_s") or {}).items() if isinstance(v, (int, float)))
            lines.append(f"- {_gpus_label(n)}, worker {w['part']} ({w['gpu_uuid']}): {w['cells']} cells in {len(w['units'])} "
                         f"problems, {len(w.get('gates_checked') or [])} gates checked; seconds: {t}")
    (a.out / "result.json").write_text(json.dumps(results, indent=2, default=str))
    if a.json:
        a.json.write_text(json.dumps(results, indent=2, default=str))
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

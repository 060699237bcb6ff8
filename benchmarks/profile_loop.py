"""Warm `lab profile` against the bare ncu command it runs, side by side on one GPU (issue 9).

The target: a warm `lab profile --variant v3` (build cached, SDPA baselines cached in the store)
takes at most 1.5x the bare `ncu` command with the same sections. Both are timed as a user runs
them, fresh processes, in one session, alternating so that both see the same machine:

    lab build   (once: the build is cached for what follows; its time is reported, not compared)
    lab profile #1   (fills the store's baseline cache)      bare ncu #1
    lab profile #2   (warm: build and baselines cached)      bare ncu #2

The bare command is the one `lab profile` stored in its run's manifest (profile.command), writing
its report elsewhere. Prints a Markdown block for benchmarks/RESULTS.md (device, date, commit)
with each `lab profile`'s own stage times from its manifest. Exit 1 when warm / bare > 1.5.

    python3 benchmarks/profile_loop.py --variant v3 [--shape 8,16,1024,64] [--out FILE]

With `--before DIR` (a copy of the lab at the commit before a change; LAB_COMMIT_BEFORE and
LAB_COMMIT_AFTER name the commits in the block) both labs are timed in the same rounds on one store,
build cache and GPU: a warm-up profile each, then per round before, its bare ncu, after, its bare ncu.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.5


def _timed(argv: list[str], env: dict, cwd: Path | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {res.returncode}):\n{(res.stdout + res.stderr)[-2000:]}")
    return seconds, res.stdout + res.stderr


def _profile(lab, a, shape, env, bare_dir, tag, bare=True, cwd: Path | None = None) -> dict:
    """One `lab profile` (run from `cwd`, the lab copy's own folder: `python -m` imports from the current
    folder first) and, with `bare`, the ncu command it stored. A profile refused by the timer (exit 1) is
    tried once more and the row says so: the loop's speed is measured here, not the timer's verdicts."""
    argv = lab + ["profile", "--variant", a.variant, *shape]
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    retried = res.returncode == 1
    if retried:
        print(f"[loop] {tag}: refused once ({(res.stdout + res.stderr).strip().splitlines()[-1][:200]}); again", flush=True)
        t0 = time.perf_counter()
        res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    prof_s, out = time.perf_counter() - t0, res.stdout + res.stderr
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {res.returncode}):\n{out[-2000:]}")
    run_dir = Path(next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("stored:")))
    m = json.loads((run_dir / "manifest.json").read_text())
    cmd = list((m.get("profile") or {}).get("command") or [])
    row = {"tag": tag, "lab": prof_s, "stages": dict(m.get("stage_seconds") or {}), "cached": m.get("baselines_cached"),
           "check_reused": bool((m.get("correctness") or {}).get("reused")), "median_ms": m["timing"]["median"],
           "cmd": cmd, "bare": None, "retried": retried}
    if bare:
        cmd[cmd.index("-o") + 1] = str(bare_dir / f"bare-{tag}.ncu-rep")
        row["bare"], _ = _timed(cmd, env, cwd=cwd or ROOT)
    print(f"[loop] {tag}: lab profile {prof_s:.2f} s, bare ncu {row['bare'] or 0:.2f} s, stages {row['stages']}", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="v3")
    ap.add_argument("--shape", default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown block here")
    ap.add_argument("--before", type=Path, default=None, metavar="DIR",
                    help="another copy of the lab (the commit before a change): its warm `lab profile` is timed in "
                         "the same rounds, alternating with this one's and the bare ncu, on one store and build cache")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    if a.before is None:
        return _single(a)
    sys.path.insert(0, str(ROOT))
    from lab.environment import device_info

    store = Path(tempfile.mkdtemp(prefix="lab-loop-store-"))
    bare_dir = Path(tempfile.mkdtemp(prefix="lab-loop-bare-"))
    base_env = dict(os.environ, LAB_PROFILES=str(store), PYTHONUNBUFFERED="1")
    rest = os.pathsep + base_env["PYTHONPATH"] if base_env.get("PYTHONPATH") else ""
    envs = {"after": dict(base_env, PYTHONPATH=str(ROOT) + rest),
            "before": dict(base_env, PYTHONPATH=str(a.before.resolve()) + rest)}
    dirs = {"after": ROOT, "before": a.before.resolve()}
    lab = [sys.executable, "-m", "lab.cli"]
    shape = ["--shape", a.shape] if a.shape else []
    build_s, _ = _timed(lab + ["build", "--variant", a.variant], envs["after"], cwd=ROOT)
    # warm-up of both (not compared): the SDPA baselines timed once into the shared store, the page cache warm,
    # each lab's passed check kept where it keeps one
    for tag in ("after", "before"):
        _profile(lab, a, shape, envs[tag], bare_dir, f"warm-{tag}", bare=False, cwd=dirs[tag])
    rows = []
    for i in range(1, a.rounds + 1):
        for tag in ("before", "after"):
            rows.append({"i": i, **_profile(lab, a, shape, envs[tag], bare_dir, f"{tag}{i}", cwd=dirs[tag])})
    dev = device_info()
    commits = {t: os.environ.get(f"LAB_COMMIT_{t.upper()}", "unknown") for t in ("before", "after")}
    lines = [f"### Warm `lab profile --variant {a.variant}`, before and after, against the bare ncu command "
             f"({dev.get('name')}, {datetime.now(timezone.utc):%Y-%m-%d}, before {commits['before']}, "
             f"after {commits['after']})", "",
             f"`python3 benchmarks/profile_loop.py --variant {a.variant} --before DIR --rounds {a.rounds}`: one store and "
             f"build cache (cold `lab build` {build_s:.1f} s, not compared), one warm-up profile each, then rounds of "
             f"before, bare ncu, after, bare ncu (the bare command as the run stored it).", "",
             "| round | lab | lab profile (s) | bare ncu (s) | lab / bare | lab's own (s) | bench median (ms) | stages (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items())
        lines.append(f"| {r['i']} | {r['tag'].rstrip('0123456789')}{' (check reused)' if r['check_reused'] else ''}"
                     f"{' (timer refused once)' if r['retried'] else ''} | "
                     f"{r['lab']:.2f} | {r['bare']:.2f} | {r['lab'] / r['bare']:.2f}x | {r['lab'] - r['bare']:.2f} | "
                     f"{r['median_ms']:.4g} | {stages} |")
    best = {t: min(r["lab"] / r["bare"] for r in rows if r["tag"].startswith(t)) for t in ("before", "after")}
    worst = {t: max(r["lab"] / r["bare"] for r in rows if r["tag"].startswith(t)) for t in ("before", "after")}
    ratio = worst["after"]
    lines += ["", f"lab profile / bare ncu of the same round: before {best['before']:.2f}-{worst['before']:.2f}x, "
                  f"after **{best['after']:.2f}-{worst['after']:.2f}x** (target <= {TARGET}x: "
                  f"{'met' if ratio <= TARGET else 'missed'})."]
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
        (a.out.parent / "profile_loop.json").write_text(json.dumps(rows, indent=1))
    return 0 if ratio <= TARGET else 1


def _single(a) -> int:
    sys.path.insert(0, str(ROOT))
    from lab.environment import device_info, git_info
    from lab.store.runs import Run

    store = Path(tempfile.mkdtemp(prefix="lab-loop-store-"))
    bare_dir = Path(tempfile.mkdtemp(prefix="lab-loop-bare-"))
    env = dict(os.environ, LAB_PROFILES=str(store), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    lab = [sys.executable, "-m", "lab.cli"]
    shape = ["--shape", a.shape] if a.shape else []

    build_s, _ = _timed(lab + ["build", "--variant", a.variant], env)
    rows = []
    for i in (1, 2):
        prof_s, out = _timed(lab + ["profile", "--variant", a.variant, *shape], env)
        run_dir = Path(next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("stored:")))
        m = Run(run_dir).record
        cmd = list(m.profile.command)
        cmd[cmd.index("-o") + 1] = str(bare_dir / f"bare{i}.ncu-rep")
        bare_s, _ = _timed(cmd, env, cwd=ROOT)
        rows.append({"i": i, "lab": prof_s, "bare": bare_s, "stages": dict(m.stage_seconds),
                     "cached": m.baselines_cached, "cmd": cmd})

    warm = rows[-1]
    bare = min(r["bare"] for r in rows)
    ratio = warm["lab"] / bare
    dev = device_info()
    commit = (git_info().get("commit") or os.environ.get("LAB_GIT_COMMIT") or "unknown")[:12]
    lines = [f"### Warm `lab profile --variant {a.variant}` against the bare ncu command "
             f"({dev.get('name')}, {datetime.now(timezone.utc):%Y-%m-%d}, commit {commit})", "",
             f"`python3 benchmarks/profile_loop.py --variant {a.variant}`; cold `lab build`: {build_s:.1f} s "
             f"(not compared). Bare command (as stored by the run, report written elsewhere): "
             f"`{' '.join(warm['cmd'][:12])} ...`", "",
             "| round | lab profile (s) | baselines | bare ncu (s) | lab / bare | stages of lab profile (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items())
        lines.append(f"| {r['i']} | {r['lab']:.2f} | {'cached' if r['cached'] else 'timed'} | {r['bare']:.2f} | "
                     f"{r['lab'] / r['bare']:.2f}x | {stages} |")
    lines += ["", f"Warm lab profile / fastest bare ncu: **{ratio:.2f}x** (target <= {TARGET}x: "
                  f"{'met' if ratio <= TARGET else 'missed'})."]
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
        (a.out.parent / "profile_loop.json").write_text(json.dumps(rows, indent=1))
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

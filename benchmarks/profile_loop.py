"""Warm `lab profile` against the bare ncu command it runs, side by side on one GPU (issues 9 and 26).

The target: a warm `lab profile --variant v3` (build cached, SDPA baselines and the passed check kept
in the store) takes at most 1.5x the bare `ncu` command it runs. Both are timed as a user runs them,
fresh processes, in one session, alternating so that both see the same machine:

    lab build   (once: the build is cached for what follows; its time is reported, not compared)
    lab profile (warm-up: fills the store's baseline and check caches; not compared)
    per round:  [the lab before the change, its bare ncu,]  lab profile, its bare ncu

The bare command is the one `lab profile` stored in its run's manifest (profile.command), writing
its report elsewhere. Prints a Markdown block for benchmarks/RESULTS.md (device, date, commit) with
each `lab profile`'s own stage times from its manifest. Exit 1 when a round's lab / bare > 1.5.

    python3 benchmarks/profile_loop.py --variant v3 [--mode bwd] [--shape 8,16,1024,64] [--rounds 2]
                                       [--before DIR] [--out FILE]

`--before DIR`: a copy of the lab at the commit before a change (LAB_COMMIT_BEFORE and LAB_COMMIT_AFTER
name the commits in the block), timed in the same rounds on one store, build cache and GPU. The two
labs share the store's caches where their keys agree (the row says "check reused"); both copies are
byte-compiled first, so no round pays Python's first compile of a fresh copy.
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
    argv = lab + ["profile", "--variant", a.variant, *shape, *a.extra]
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
    ap.add_argument("--mode", default="fwd", choices=("fwd", "bwd", "fwd+bwd"))
    ap.add_argument("--shape", default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown block here")
    ap.add_argument("--before", type=Path, default=None, metavar="DIR",
                    help="another copy of the lab (the commit before a change): its warm `lab profile` is timed in "
                         "the same rounds, alternating with this one's and the bare ncu, on one store and build cache")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from lab.environment import device_info, git_info

    store = Path(tempfile.mkdtemp(prefix="lab-loop-store-"))
    bare_dir = Path(tempfile.mkdtemp(prefix="lab-loop-bare-"))
    base_env = dict(os.environ, LAB_PROFILES=str(store), PYTHONUNBUFFERED="1")
    rest = os.pathsep + base_env["PYTHONPATH"] if base_env.get("PYTHONPATH") else ""
    labs = {"after": ROOT} if a.before is None else {"before": a.before.resolve(), "after": ROOT}
    envs = {tag: dict(base_env, PYTHONPATH=str(d) + rest) for tag, d in labs.items()}
    lab = [sys.executable, "-m", "lab.cli"]
    shape = ["--shape", a.shape] if a.shape else []
    a.extra = ["--mode", a.mode] if a.mode != "fwd" else []
    for d in labs.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(d / "lab")], check=True)
    build_s, _ = _timed(lab + ["build", "--variant", a.variant], envs["after"], cwd=ROOT)
    # the warm-up (not compared): the SDPA baselines timed once into the store, the passed check kept,
    # the page cache warm
    _profile(lab, a, shape, envs["after"], bare_dir, "warm-after", bare=False, cwd=ROOT)
    rows = []
    for i in range(1, a.rounds + 1):
        for tag in labs:
            rows.append({"i": i, **_profile(lab, a, shape, envs[tag], bare_dir, f"{tag}{i}", cwd=labs[tag])})
    dev = device_info()
    commit = (git_info().get("commit") or os.environ.get("LAB_GIT_COMMIT") or "unknown")[:12]
    commits = {t: os.environ.get(f"LAB_COMMIT_{t.upper()}", commit if t == "after" else "unknown") for t in labs}
    what = f"`lab profile --variant {a.variant}{' --mode ' + a.mode if a.mode != 'fwd' else ''}`"
    which = (f"before {commits['before']}, after {commits['after']}" if a.before is not None
             else f"commit {commits['after']}")
    lines = [f"### Warm {what} against the bare ncu command ({dev.get('name')}, "
             f"{datetime.now(timezone.utc):%Y-%m-%d}, {which})", "",
             f"`python3 benchmarks/profile_loop.py --variant {a.variant}{' --mode ' + a.mode if a.mode != 'fwd' else ''}"
             f"{' --before DIR' if a.before is not None else ''} --rounds {a.rounds}`: one store and build cache "
             f"(`lab build` {build_s:.1f} s, not compared), one warm-up profile, then rounds of "
             f"{'before, bare ncu, after, bare ncu' if a.before is not None else 'lab profile, bare ncu'} (the bare "
             f"command as the run stored it: `{' '.join(rows[-1]['cmd'][:12])} ...`).", "",
             "| round | lab | lab profile (s) | bare ncu (s) | lab / bare | lab's own (s) | bench median (ms) | stages (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items())
        lines.append(f"| {r['i']} | {r['tag'].rstrip('0123456789')}{' (check reused)' if r['check_reused'] else ''}"
                     f"{' (timer refused once)' if r['retried'] else ''} | "
                     f"{r['lab']:.2f} | {r['bare']:.2f} | {r['lab'] / r['bare']:.2f}x | {r['lab'] - r['bare']:.2f} | "
                     f"{r['median_ms']:.4g} | {stages} |")
    span = {t: (min(r["lab"] / r["bare"] for r in rows if r["tag"].startswith(t)),
                max(r["lab"] / r["bare"] for r in rows if r["tag"].startswith(t))) for t in labs}
    ratio = span["after"][1]
    said = ", ".join(f"{t} {'**' if t == 'after' else ''}{lo:.2f}-{hi:.2f}x{'**' if t == 'after' else ''}"
                     for t, (lo, hi) in span.items())
    lines += ["", f"lab profile / bare ncu of the same round: {said} (target <= {TARGET}x: "
                  f"{'met' if ratio <= TARGET else 'missed'}; stages that ran beside each other add up to more than "
                  f"the wall time)."]
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
        a.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

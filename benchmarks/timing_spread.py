"""How far one cell's median moves between measurements, and why (issue 31's agreement).

The one-GPU and two-GPU tables of one sweep disagreed beyond 3% in a third of their rows, mostly
calls under 0.3 ms, in both directions (RESULTS.md). This times a few such cells by the lab's own
measurement (lab.measure.checked.Measurement, as `lab sweep` does) in ROUNDS, and prints each
cell's median per round, so the spread can be told apart by where it arises:

  same      rounds on the same inputs (one Workload, the same allocations): the timer's own
            repeatability within a process;
  fresh     each round on a new Workload, the old one freed first (torch.cuda.empty_cache): the new
            buffers may well come back at the same addresses, in the same physical memory;
  placed    each round on a new Workload while every earlier one is still held, so its buffers must
            land in other physical memory: a cell's spread across placements (issue 31, fourth
            session: two runs of one sweep disagree on short calls whose passes within each run
            agree, as if something fixed for a whole process set their speed);
  process   the same script run again in a fresh process (compare two --json files);
  neighbour the script run on several GPUs of the host at once (CUDA_VISIBLE_DEVICES per process).

    python3 benchmarks/timing_spread.py --rounds same,same,fresh,fresh --json OUT.json
    python3 benchmarks/timing_spread.py --rounds same,placed,placed,placed,same --json OUT.json
    python3 benchmarks/timing_spread.py --compare A.json B.json [C.json ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CELLS = [   # (impl, B, H, N, D, causal, mode, timing): fa-grid's short rows, and a long one as the control
    ("v6", 32, 16, 512, 128, True, "fwd", "events"), ("v6", 32, 16, 512, 128, True, "fwd", "graph"),
    ("sdpa-cudnn", 32, 16, 512, 128, True, "fwd", "events"), ("sdpa-cudnn", 32, 16, 512, 128, True, "fwd", "graph"),
    ("v6", 32, 32, 512, 64, False, "fwd", "graph"), ("sdpa-flash", 32, 32, 512, 64, False, "fwd", "graph"),
    ("v7", 16, 32, 1024, 64, False, "bwd", "events"), ("sdpa-cudnn", 16, 32, 1024, 64, False, "bwd", "events"),
    ("v6", 2, 16, 8192, 128, False, "fwd", "events"), ("sdpa-cudnn", 2, 16, 8192, 128, False, "fwd", "events"),
]


def measure(rounds: list[str], dtype: str) -> list[dict]:
    import torch

    from lab.environment import device_info, gpu_record
    from lab.ladder import build, registry
    from lab.measure.baselines import attention
    from lab.measure.call import rung
    from lab.measure.checked import Measurement, Workload
    from lab.measure.floor import attention_floor
    from lab.measure.problem import Problem

    device = device_info()
    modules = {v: build.build(registry.get(v)).module for v in {c[0] for c in CELLS if not c[0].startswith("sdpa")}}
    workloads: dict = {}
    held: list = []   # "placed" rounds' earlier workloads, kept alive so a new one cannot reuse their memory
    rows = []
    for r, kind in enumerate(rounds):
        state = gpu_record()   # the SM clock at each round's start (NVML: a few ms), told apart from the timer
        print(f"round {r}: SM {state.get('sm_clock_mhz')} MHz, memory {state.get('mem_clock_mhz')} MHz", flush=True)
        for impl_name, b, h, n, d, causal, mode, timing in CELLS:
            p = Problem(batch=b, heads=h, seqlen_q=n, seqlen_k=n, head_dim=d, causal=causal, dtype=dtype)
            impl = (attention(impl_name, p) if impl_name.startswith("sdpa")
                    else rung(registry.get(impl_name), modules[impl_name], p))
            key = (p, impl.layout)
            if kind == "placed" and key in workloads:
                held.append(workloads.pop(key))
            if kind == "fresh" or key not in workloads:
                workloads.pop(key, None)
                if kind == "fresh":
                    torch.cuda.empty_cache()
                workloads[key] = Workload(p, impl.layout)
            m = Measurement(impl, workloads[key], mode, verify=not impl_name.startswith("sdpa"),
                            floor=attention_floor(p, mode, device.get("peaks"), device.get("name")), what=impl_name)
            t0 = time.perf_counter()
            t = m.time(timing, budget_s=0.4)
            rows.append({"round": r, "kind": kind, "sm_clock_mhz": state.get("sm_clock_mhz"), "impl": impl_name, "label": p.label(), "mode": mode, "timing": timing,
                         "median_ms": t.median, "ci95": [t.ci95_low, t.ci95_high], "reps": t.reps,
                         "wall_s": round(time.perf_counter() - t0, 3)})
            print(f"r{r} {kind:<5} {impl_name:<10} {p.label():<32} {mode:<4} {timing:<6} {t.median:.4f} ms "
                  f"[{t.ci95_low:.4f}, {t.ci95_high:.4f}] n={t.reps}", flush=True)
        workloads = {} if kind == "fresh" else workloads
    return rows


def compare(files: list[Path]) -> None:
    """Per cell: its medians in every round of every file, and the spread max/min - 1 by source."""
    runs = [json.loads(f.read_text()) for f in files]
    cells: dict = {}
    for i, run in enumerate(runs):
        for row in run["rows"]:
            cells.setdefault((row["impl"], row["label"], row["mode"], row["timing"]), []).append((i, row))
    def spread(xs):
        return (max(xs) / min(xs) - 1) * 100 if len(xs) > 1 else 0.0
    print(f"{'cell':<62} {'same%':>6} {'fresh%':>6} {'placed%':>7} {'proc%':>6}  medians (ms) per file: rounds")
    for key, found in cells.items():
        same = [spread([r["median_ms"] for j, r in found if j == i and r["kind"] == "same"]) for i in range(len(runs))]
        fresh = [spread([r["median_ms"] for j, r in found if j == i and r["kind"] == "fresh"]) for i in range(len(runs))]
        placed = [spread([r["median_ms"] for j, r in found if j == i and r["kind"] == "placed"]) for i in range(len(runs))]
        per_file = [statistics.median([r["median_ms"] for j, r in found if j == i] or [float("nan")]) for i in range(len(runs))]
        text = " | ".join(" ".join(f"{r['median_ms']:.4f}" for j, r in found if j == i) for i in range(len(runs)))
        print(f"{' '.join(map(str, key)):<62} {max(same):6.1f} {max(fresh):6.1f} {max(placed):7.1f} {spread(per_file):6.1f}  {text}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", default="same,same,fresh,fresh")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--compare", nargs="+", type=Path)
    a = ap.parse_args()
    if a.compare:
        compare(a.compare)
        return 0
    import os

    from lab.environment import gpu_identity

    rows = measure(a.rounds.split(","), a.dtype)
    if a.json:
        a.json.write_text(json.dumps({"gpu": gpu_identity(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                      "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

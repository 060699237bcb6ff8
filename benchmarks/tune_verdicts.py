"""Every `lab tune --predict` verdict under a store of tunes, one markdown row each (shape, device,
candidate, predicted range, measured paired median, its CI95, verdict): the table the GPU call scripts
(benchmarks/v9_step*_gpu.sh) print last. `lab ledger` judges the same predictions beside the ladder's.

    python3 benchmarks/tune_verdicts.py STORE
"""

from __future__ import annotations

import json
import pathlib
import sys


def _fmt(x) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def rows(store: pathlib.Path) -> list[tuple[str, ...]]:
    out = []
    for f in sorted(store.glob("*/tune.json")):
        d = json.loads(f.read_text())
        for p in d.get("predictions") or []:
            lo, hi = p.get("ratio_ci95") or [None, None]
            out.append((d["problem"]["label"], (d.get("device") or {}).get("name", "?"), p["label"],
                        f"{p['low']}-{p['high']}", _fmt(p.get("measured")), f"{_fmt(lo)}-{_fmt(hi)}",
                        p.get("verdict") or p.get("not_measured") or "-"))
    return out


if __name__ == "__main__":
    found = rows(pathlib.Path(sys.argv[1]))
    print(f"\n{len(found)} predictions judged")
    print("| shape | device | candidate | predicted | measured (paired median) | CI95 | verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in found:
        print("| " + " | ".join(r) + " |")

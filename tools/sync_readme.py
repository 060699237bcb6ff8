"""Rewrite the README's generated parts from the data: python3 tools/sync_readme.py

  ladder    the ladder table, from each rung's lab:rung block (`lab variants --markdown`)
  examples  the shipped example runs and sweeps (profiles/examples/), each with the device its own
            manifest names, so that no sentence says where an example was recorded by hand

tests/test_readme.py fails when either is stale."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from lab.ladder.registry import markdown_table  # noqa: E402
from lab.store import runs, sweeps  # noqa: E402

EXAMPLES = ROOT / "profiles" / "examples"


def _section(name: str):
    return re.compile(rf"(<!-- {name}:start[^\n]*-->\n).*?(<!-- {name}:end -->)", re.S)


def examples_table(folder: Path = EXAMPLES) -> str:
    """One row per shipped run or sweep: its folder, what it holds, the device its manifest names."""
    lines = ["| example (`profiles/examples/`) | what | device |", "| --- | --- | --- |"]
    entries = [(r.id, r.manifest, "run") for r in runs.list_runs(folder)] + \
              [(s.id, s.manifest, "sweep") for s in sweeps.list_sweeps(folder)]
    for ident, m, kind in sorted(entries):
        if kind == "run":
            cand = f" candidate {m['candidate']['label']!r}" if m.get("candidate") else ""   # lab profile --candidate
            what = f"`lab profile` of {m['variant']['id']}{cand}, {m.get('mode') or 'fwd'}, {m['problem']['label']}"
        else:
            plan = m["plan"]
            impls = [*plan.get("rungs", {}), *plan.get("baselines", [])]
            what = (f"`lab sweep` {plan.get('preset') or plan.get('axis') or ''}: {', '.join(impls)}; "
                    f"{', '.join(plan.get('modes', []))}").replace("  ", " ")
        device = (m.get("device") or {}).get("name") or "not recorded"
        lines.append(f"| `{ident}` | {what} | {device} |")
    return "\n".join(lines)


def synced(text: str) -> str:
    text = _section("ladder").sub(lambda m: m.group(1) + markdown_table() + "\n" + m.group(2), text)
    return _section("examples").sub(lambda m: m.group(1) + examples_table() + "\n" + m.group(2), text)


if __name__ == "__main__":
    readme = ROOT / "README.md"
    readme.write_text(synced(readme.read_text()))

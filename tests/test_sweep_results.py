"""benchmarks/RESULTS.md's sweep tables are generated: each marked block must equal what
`lab export SWEEP --format markdown` renders from the sweep shipped in profiles/examples/."""

from __future__ import annotations

import re

from lab.store.export import MARK_BEGIN, MARK_END, markdown_sweep
from lab.store.sweeps import find_sweep
from conftest import REPO  # noqa: E402


def test_results_sweep_blocks_match_the_stored_sweeps():
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    ids = re.findall(r"<!-- lab export (\S+) --format markdown", text)
    assert ids, "RESULTS.md has no generated sweep block"
    for sweep_id in ids:
        sweep = find_sweep(sweep_id, REPO / "profiles")
        begin, end = MARK_BEGIN.format(id=sweep_id), MARK_END.format(id=sweep_id)
        block = text.split(begin, 1)[1].split(end, 1)[0].strip()
        assert block == markdown_sweep(sweep).strip(), f"{sweep_id}: regenerate with lab export {sweep_id} --format markdown --update benchmarks/RESULTS.md"

"""`lab export` writes a stored run's tables readable by other tools."""

import json

import pandas as pd
import pytest

from lab.store import runs as store
from lab.store.export import export_run
from conftest import EXAMPLES, lab_here  # noqa: E402


def _runs():
    return store.list_runs(EXAMPLES.parent) if EXAMPLES.is_dir() else []


@pytest.mark.skipif(not _runs(), reason="no shipped example runs")
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_round_trips_the_tables(tmp_path, fmt):
    run = _runs()[0]
    paths = export_run(run, tmp_path, fmt)
    assert json.loads(paths[0].read_text())["run_id"] == run.id
    for name in run.manifest["tables"]:
        path = next(p for p in paths if p.stem == name)
        df = pd.read_csv(path) if fmt == "csv" else pd.read_json(path, lines=True)
        assert len(df) == len(run.table(name))


def test_export_bad_run_exits_2(tmp_path):
    res = lab_here("export", "no-such-run", "--out", str(tmp_path))
    assert res.returncode == 2 and "no stored run" in res.stderr

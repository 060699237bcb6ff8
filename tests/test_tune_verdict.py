"""A tuning prediction is judged on one estimator and printed with that estimator's own CI95, alike by
`lab tune` (lab.measure.tune.judged), its stored tune, `lab ledger` and the report's Ledger page.

The store is real (tests/fixtures/tunes/: `lab tune --predict` of v9's O by TMA at D=64 on
B32-H32-N512-D64 causal float16, 30 interleaved rounds on an H200): the ratio of the two medians there
(1.077x) lies outside the CI95 of the paired rounds' median (1.038-1.066x), so the two estimators
disagree, and the verdict must follow the one whose interval is printed beside it. The tune was stored
before judge_ratio: its predictions' "measured" is the ratio of the medians, which the ledger must not
trust.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from conftest import FIXTURES, lab_here
from lab.measure.problem import Problem
from lab.measure.tune import MEDIANS, PAIRED, Prediction, TuneResult, TuneRow, judge_ratio, judged
from lab.report.ledgerpage import tune_ci95_note, tune_prediction_phrase
from lab.store import ledger

REAL = FIXTURES / "tunes" / "20261127-122431-tune-v9-B32-H32-N512-D64-causal-float16"


def manifest() -> dict:
    return json.loads((REAL / "tune.json").read_text())


def candidate_row(m: dict) -> dict:
    (p,) = m["predictions"]
    return next(r for r in m["rows"] if r["label"] == p["label"])


def store_with(tmp_path, edit=None):
    """A store holding the real tune, its manifest changed by `edit` first (where given)."""
    store = tmp_path / "store"
    shutil.copytree(REAL, store / REAL.name)
    if edit:
        m = manifest()
        edit(m)
        (store / REAL.name / "tune.json").write_text(json.dumps(m))
    return store


def fresh_judgement(m: dict) -> dict:
    """What `lab tune` judges (and stores, and prints) for the tune's prediction, from its rows."""
    rows = [TuneRow(**{k: v for k, v in r.items() if k != "passed"}) for r in m["rows"]]
    (p,) = m["predictions"]
    result = TuneResult(m["variant"]["id"], Problem.from_dict(m["problem"]), rows=rows, mode=m["mode"])
    return judged(Prediction(p["given"], p["low"], p["high"], p["label"]), result)


def test_the_real_stores_two_estimators_disagree():
    """The premise: the stored ratio of medians lies outside the paired median's own CI95."""
    m = manifest()
    vs = candidate_row(m)["vs_default"]
    assert vs["rounds"] == m["reps"] == 30
    assert vs["paired_ci95_low"] <= vs["paired_median"] <= vs["paired_ci95_high"] < vs["ratio"]
    assert m["predictions"][0]["measured"] == vs["ratio"]   # stored before judge_ratio


def test_lab_tune_judges_the_paired_median_and_prints_its_ci95():
    m = manifest()
    vs = candidate_row(m)["vs_default"]
    j = fresh_judgement(m)
    assert j["measured"] == vs["paired_median"] and j["estimator"] == PAIRED and j["rounds"] == 30
    assert j["ratio_ci95"] == [vs["paired_ci95_low"], vs["paired_ci95_high"]]
    assert j["verdict"] == "inside" and j["not_measured"] is None
    # predicted 1.04-1.11x: the CI95's low end falls below the range, and the verdict says so
    assert j["ci95_where"] == ["below", "inside"] and tune_ci95_note(j) == "its CI95 reaches below it"
    line = tune_prediction_phrase(j, with_label=True)   # the line `lab tune` prints
    assert line == (f"prediction {j['label']}: predicted 1.04-1.11x the default, measured {vs['paired_median']:.3f}x "
                    f"(median of 30 paired rounds, CI95 {vs['paired_ci95_low']:.3f}-{vs['paired_ci95_high']:.3f}x): "
                    "inside the range; its CI95 reaches below it")
    assert f"{vs['ratio']:.3f}x" not in line


def test_the_ledger_judges_the_stored_tune_as_lab_tune_does(tmp_path):
    """The stored "measured" (the ratio of medians) is recomputed from the stored row: the ledger's entry,
    its line and its calibration carry the paired median, as the fresh judgement does."""
    m = manifest()
    store = store_with(tmp_path)
    (e,) = ledger.build(store).tune_predictions
    j = fresh_judgement(m)
    for key in ("measured", "estimator", "rounds", "ratio_ci95", "verdict", "ci95_where"):
        assert e[key] == j[key], key
    cal = json.loads(lab_here("ledger", "--profiles", store, "--json").stdout)["tune_calibration"]
    assert (cal["inside"], cal["of"], cal["ci95_across_bound"]) == (1, 1, 1)
    assert cal["median_measured_over_predicted"] == pytest.approx(j["measured"] / math.sqrt(1.04 * 1.11))
    text = lab_here("ledger", "--profiles", store).stdout
    assert f"{e['candidate']}: {tune_prediction_phrase(j)}" in text
    assert "(above 0, below 0; the CI95 reaches past a bound in 1)" in text


def test_a_range_between_the_two_estimators_follows_the_paired_median(tmp_path):
    """A range above the paired CI95 that holds the ratio of medians: below, as the printed CI95 says."""
    vs = candidate_row(manifest())["vs_default"]
    low = (vs["paired_ci95_high"] + vs["ratio"]) / 2

    def edit(m):
        m["predictions"][0].update(low=low, high=1.2, verdict="inside")
    (e,) = ledger.build(store_with(tmp_path, edit)).tune_predictions
    assert low <= vs["ratio"] <= 1.2   # the ratio of medians would have called it inside
    assert e["verdict"] == "below" and e["ci95_where"] == ["below", "below"] and tune_ci95_note(e) == ""


@pytest.mark.parametrize("where, bounds, note", [
    ("above", lambda v: (v["paired_ci95_low"] - 0.01, (v["paired_ci95_low"] + v["paired_median"]) / 2),
     "its CI95 reaches into it"),
    ("inside", lambda v: ((v["paired_ci95_low"] + v["paired_median"]) / 2, (v["paired_median"] + v["paired_ci95_high"]) / 2),
     "its CI95 reaches below and above it"),
    ("below", lambda v: ((v["paired_median"] + v["paired_ci95_high"]) / 2, 2.0), "its CI95 reaches into it"),
    ("inside", lambda v: (v["paired_ci95_low"], v["paired_ci95_high"]), ""),   # the bounds are inside
])
def test_a_ci95_across_a_bound_is_said(where, bounds, note):
    vs = candidate_row(manifest())["vs_default"]
    j = judge_ratio(*bounds(vs), vs)
    assert j["verdict"] == where and tune_ci95_note(j) == note


def test_a_store_without_paired_rounds_is_judged_on_the_ratio_of_medians_and_says_so(tmp_path):
    """A tune whose rows kept no paired rounds (stored before them, or a timer that kept no per-round
    times): the ratio of the two medians, labelled, with the medians' own CI95s and no verdict on a CI95."""
    def edit(m):
        for r in m["rows"]:
            if r["vs_default"]:
                r["vs_default"] = {"ratio": r["vs_default"]["ratio"]}
    store = store_with(tmp_path, edit)
    m = manifest()
    row, default = candidate_row(m), next(r for r in m["rows"] if r["label"] == "default")
    (e,) = ledger.build(store).tune_predictions
    assert e["measured"] == row["vs_default"]["ratio"] and e["estimator"] == MEDIANS and e["verdict"] == "inside"
    assert e["ratio_ci95"] is None and e["ci95_where"] is None and e["rounds"] is None
    assert e["medians_ci95"] == {"default": [default["timing"]["ci95_low"], default["timing"]["ci95_high"]],
                                 "candidate": [row["timing"]["ci95_low"], row["timing"]["ci95_high"]]}
    text = lab_here("ledger", "--profiles", store).stdout
    assert f"measured {e['measured']:.3f}x (ratio of the medians, no paired rounds kept; medians' CI95: default " in text
    assert "the CI95 reaches past a bound in 0" in text


def test_the_ledger_page_shows_the_paired_median_and_where_its_ci95_reaches(tmp_path):
    store = store_with(tmp_path)
    vs = candidate_row(manifest())["vs_default"]
    assert lab_here("report", "--profiles", store, "--out", tmp_path / "out").returncode == 0
    html = (tmp_path / "out" / "ledger.html").read_text()
    section = html[html.index('<section id="tuning">'):html.index('<section id="calibration">')]
    assert f"<strong>{vs['paired_median']:.3f}x</strong>" in section and f"{vs['ratio']:.3f}x" not in section
    assert "median of 30 paired rounds, CI95" in section
    assert '<span class="pass">inside</span><br><span class="muted">its CI95 reaches below it</span>' in section

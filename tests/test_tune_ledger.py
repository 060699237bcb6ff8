"""`lab tune --predict`, the tune store and the ledger's "Tuning predictions", on the CPU.

`lab tune` runs here as it runs on a GPU with what needs one replaced (test_tune's stand-ins: a tuning
build's list, the checks' verdicts, the device's name) and its timing done by the lab's own timer
(lab.measure.timed.time_checked_interleaved) on test_timer's simulated device, whose virtual clock runs
each configuration for its own time, with a spread from round to round. The tune is stored by the
command itself, and the ledger and the report read that store: no store file is written by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import lab_here
from test_timer import SimDevice
from test_tune import RUNG, StandInTuning, stand_in_tune  # noqa: F401 (a fixture)

pytest.importorskip("torch")

# Each configuration's time on the simulated device (ms); the default is the launcher's own choice.
TIMES_MS = {"default": 1.0, "C1 BM128 split": 0.8, "C2 BM64 split": 0.95, "C3 (non-causal)": 0.7, "C4 wrong": 0.5}
ENTRIES = ["C1 BM128 split", "C2 BM64 split", "C3 (non-causal)|non-causal", "C4 wrong"]


@pytest.fixture
def simulated_tune(monkeypatch, tmp_path):
    """lab.measure.tune.tune with the GPU's parts replaced, timed by the lab's timer on a simulated
    device; returns what it saw (which configurations were checked, how many launches ran)."""
    from lab.measure import timed, tune
    from lab.measure.tune import Candidate

    dev = SimDevice()
    seen = {"checked": None, "launches": 0}
    tuning = StandInTuning(ENTRIES)
    labels = [e.split("|")[0] for e in ENTRIES]

    def verdicts(variant, problem, mode, configs, extra_shapes, on_verdict=None):
        seen["checked"] = list(configs)
        wrong = {"passed": False, "failed_shape": problem.label(),
                 "failure": f"O on {problem.label()}: max_abs_err 0.5 > tolerance 0.002"}
        return {c: (wrong if c is not None and labels[c] == "C4 wrong" else {"passed": True}) for c in configs}

    def measurement(impl, workload, mode, floor=None, what=""):
        label = labels[impl.index] if isinstance(impl, Candidate) else "default"
        rounds = iter(range(10**6))

        def call():   # a deterministic spread of +-2% from call to call
            seen["launches"] += 1
            dev.launch(TIMES_MS[label] * (1 + 0.02 * math.sin(1.7 * next(rounds) + len(label))))
        return SimpleNamespace(checked=lambda: timed.Checked(call, what=what))

    for name in ("require_gpu", "require_compute_capability", "require_tunable", "require_mode", "check_supported"):
        monkeypatch.setattr(tune, name, lambda *a, **k: None)
    monkeypatch.setattr(tune, "is_built", lambda *a, **k: True)
    monkeypatch.setattr(tune, "build", lambda v: SimpleNamespace(module="the plain build", ptxas=[]))
    monkeypatch.setattr(tune, "tuning_build", lambda v: SimpleNamespace(module=tuning, ptxas=[]))
    monkeypatch.setattr(tune, "source_declared", tuning.source_declared)
    monkeypatch.setattr(tune, "verdicts", verdicts)
    monkeypatch.setattr(tune, "attention_floor", lambda *a, **k: None)
    monkeypatch.setattr(tune, "Workload", lambda *a, **k: None)
    monkeypatch.setattr(tune, "rung", lambda variant, impl, problem: impl)
    monkeypatch.setattr(tune, "Measurement", measurement)
    monkeypatch.setattr(tune, "time_checked_interleaved",
                        lambda specs, reps, warmup, under_load_ms=0.0, method="events": timed.time_checked_interleaved(
                            specs, reps=reps, warmup=warmup, device=dev, under_load_ms=under_load_ms, method=method))
    monkeypatch.setattr(tune, "device_info", lambda: {"name": "simulated device", "compute_capability": "9.0"})
    monkeypatch.setattr(tune, "software_info", lambda: {"torch": "simulated"})
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "simulated device")
    seen["tuning"] = tuning
    return seen


def tune_args(store: Path, *extra) -> list:
    return ["tune", "--variant", RUNG.id, "--shape", "1,2,130,64", "--causal", "--dtype", RUNG.default_dtype,
            "--reps", "12", "--warmup", "2", "--check-shapes", "1", "--profiles", store, *extra]


def stored(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir()) if store.exists() else []


# ------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("value, says", [
    ("C1=1.2", "is not a range LO-HI"),
    ("C1=1.3-1.2", "low end 1.3 is above its high end 1.2"),
    ("C1=0-1.2", "must be positive"),
    ("C1=-1.1-1.2", "is not a range LO-HI"),
    ("C1=a-b", "is not a range LO-HI"),
    ("=1.1-1.2", "names no candidate"),
    ("1.1-1.2", "names no candidate"),
    ("split=1.1-1.2", "ambiguous, 2 of"),
    ("C9=1.1-1.2", "no candidate among"),
    ("default=1.1-1.2", "the default is what every candidate's ratio is measured against"),
    ("non-causal=1.1-1.2", "is not applicable to"),
])
def test_a_bad_prediction_is_refused_before_anything_runs(simulated_tune, tmp_path, value, says):
    store = tmp_path / "store"
    res = lab_here(*tune_args(store, "--predict", value))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert says in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert simulated_tune["checked"] is None and simulated_tune["launches"] == 0   # nothing checked or timed
    assert stored(store) == []


def test_two_predictions_of_one_candidate_are_refused(simulated_tune, tmp_path):
    res = lab_here(*tune_args(tmp_path / "s", "--predict", "C1=1.1-1.2", "--predict", "BM128=1.2-1.3"))
    assert res.returncode == 2 and "both name candidate 'C1 BM128 split'" in res.stderr
    assert simulated_tune["launches"] == 0 and stored(tmp_path / "s") == []


def test_a_range_may_end_in_x_and_the_label_is_found_by_a_part_of_it():
    from lab.measure.tune import Prediction, parse_prediction

    assert parse_prediction("GQA-causal-split=1.15-1.30x") == Prediction("GQA-causal-split", 1.15, 1.30)
    assert parse_prediction("a=b=1.04 - 1.14 X") == Prediction("a=b", 1.04, 1.14)   # the last '=' splits
    assert parse_prediction("x=1-1") == Prediction("x", 1.0, 1.0)


# ------------------------------------------------------------------------------ the stored tune

def test_lab_tune_stores_its_result_and_the_predictions_made_before_timing(simulated_tune, tmp_path):
    store = tmp_path / "store"
    res = lab_here(*tune_args(store, "--predict", "BM128=1.15-1.35", "--predict", "C2 BM64 split=1.2-1.4x",
                              "--predict", "wrong=1.1-1.9"), env={"COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    (path,) = stored(store)
    assert not path.name.startswith(".") and (path / "tune.json").is_file()
    m = json.loads((path / "tune.json").read_text())
    assert m["kind"] == "tune" and m["schema_version"] == 1 and m["tune_id"] == path.name
    assert m["variant"]["id"] == RUNG.id and len(m["variant"]["source_sha256"].split("+")[0]) == 64
    assert m["problem"]["label"] == f"B1-H2-N130-D64-causal-{RUNG.default_dtype}" and m["mode"] == "fwd"
    assert m["dtype"] == RUNG.default_dtype and m["device"]["name"] == "simulated device"
    assert m["created_utc"] and "commit" in m["git"] and m["reps"] == 12
    rows = {r["label"]: r for r in m["rows"]}
    assert set(rows) == {"default", "C1 BM128 split", "C2 BM64 split", "C3 (non-causal)", "C4 wrong"}
    assert rows["C3 (non-causal)"]["not_applicable"] and rows["C3 (non-causal)"]["timing"] is None
    assert not rows["C4 wrong"]["passed"] and rows["C4 wrong"]["timing"] is None
    for label in ("C1 BM128 split", "C2 BM64 split"):
        t, d, vs = rows[label]["timing"], rows["default"]["timing"], rows[label]["vs_default"]
        assert t["reps"] == 12 and t["ci95_low"] <= t["median"] <= t["ci95_high"]
        assert vs["ratio"] == pytest.approx(d["median"] / t["median"]) and vs["rounds"] == 12
        assert vs["paired_ci95_low"] <= vs["paired_median"] <= vs["paired_ci95_high"]
        assert vs["paired_ci95_low"] < vs["paired_ci95_high"]   # the rounds' spread shows
    # the simulated clock: C1 runs 0.8 of the default's time, C2 0.95 (and a dispatch each)
    assert 1.2 < rows["C1 BM128 split"]["vs_default"]["ratio"] < 1.3
    assert 1.0 < rows["C2 BM64 split"]["vs_default"]["ratio"] < 1.1
    preds = {p["label"]: p for p in m["predictions"]}
    assert [p["given"] for p in m["predictions"]] == ["BM128", "C2 BM64 split", "wrong"]
    assert preds["C1 BM128 split"]["verdict"] == "inside" and (preds["C1 BM128 split"]["low"], preds["C1 BM128 split"]["high"]) == (1.15, 1.35)
    assert preds["C2 BM64 split"]["verdict"] == "below"
    for label in ("C1 BM128 split", "C2 BM64 split"):   # judged on the paired rounds' median, with their CI95
        vs, pr = rows[label]["vs_default"], preds[label]
        assert pr["measured"] == vs["paired_median"] and pr["estimator"] == "paired rounds" and pr["rounds"] == 12
        assert pr["ratio_ci95"] == [vs["paired_ci95_low"], vs["paired_ci95_high"]]
        assert pr["ratio_ci95"][0] <= pr["measured"] <= pr["ratio_ci95"][1]
    assert preds["C4 wrong"]["verdict"] is None and "max_abs_err" in preds["C4 wrong"]["not_measured"]
    # the table's ratio column is the stored ratio, and the predictions are said under it
    line = next(ln for ln in res.stdout.splitlines() if "C1 BM128 split" in ln and "pass" in ln)
    assert f"{rows['C1 BM128 split']['vs_default']['ratio']:.3f}x" in line
    c1 = preds["C1 BM128 split"]
    assert (f"prediction C1 BM128 split: predicted 1.15-1.35x the default, measured {c1['measured']:.3f}x "
            f"(median of 12 paired rounds, CI95 {c1['ratio_ci95'][0]:.3f}-{c1['ratio_ci95'][1]:.3f}x)") in res.stdout
    assert "inside the range" in res.stdout and "below the range" in res.stdout
    assert f"stored: {path.name}" in res.stdout
    assert "prediction recorded: C1 BM128 split 1.15-1.35x" in res.stderr
    assert res.stderr.index("prediction recorded") < res.stderr.index("time ")   # said before the timing


def test_a_tune_that_timed_nothing_is_not_stored(simulated_tune, tmp_path, monkeypatch):
    from lab.measure import tune

    def all_fail(variant, problem, mode, configs, extra_shapes, on_verdict=None):
        return {c: {"passed": False, "error": "CUDA error: an illegal memory access"} for c in configs}
    monkeypatch.setattr(tune, "verdicts", all_fail)
    store = tmp_path / "store"
    res = lab_here(*tune_args(store, "--predict", "C1=1.1-1.2"))
    assert res.returncode == 1 and "nothing stored" in res.stderr
    assert stored(store) == []


def test_two_tunes_in_one_second_are_both_stored(simulated_tune, tmp_path):
    store = tmp_path / "store"
    for _ in range(2):
        assert lab_here(*tune_args(store, "--reps", "3")).returncode == 0
    names = [p.name for p in stored(store)]
    assert len(names) == 2 and all(not n.startswith(".") for n in names)


# ------------------------------------------------------------------------------ the ledger

@pytest.fixture
def tuned_store(simulated_tune, tmp_path):
    """A store holding two tunes made by `lab tune`: one with three predictions, one with none."""
    store = tmp_path / "store"
    res = lab_here(*tune_args(store, "--predict", "BM128=1.15-1.35", "--predict", "C2=1.2-1.4",
                              "--predict", "wrong=1.1-1.9"))
    assert res.returncode == 0, res.stderr
    assert lab_here(*tune_args(store, "--reps", "3")).returncode == 0
    return store


def test_lab_ledger_judges_the_stored_tunes_predictions(tuned_store):
    res = lab_here("ledger", "--profiles", tuned_store, "--json")
    assert res.returncode == 0, res.stderr
    led = json.loads(res.stdout)
    entries = led["tune_predictions"]
    (tune_dir,) = [p for p in stored(tuned_store) if json.loads((p / "tune.json").read_text())["predictions"]]
    m = json.loads((tune_dir / "tune.json").read_text())
    rows = {r["label"]: r for r in m["rows"]}
    assert [e["candidate"] for e in entries] == ["C1 BM128 split", "C2 BM64 split", "C4 wrong"]
    c1, c2, wrong = entries
    assert c1["tune"] == tune_dir.name and c1["variant"] == RUNG.id and c1["device"] == "simulated device"
    assert c1["problem"] == m["problem"]["label"] and c1["predicted"] == [1.15, 1.35]
    assert c1["measured"] == rows["C1 BM128 split"]["vs_default"]["paired_median"] and c1["verdict"] == "inside"
    assert c1["ratio_ci95"] == [rows["C1 BM128 split"]["vs_default"]["paired_ci95_low"],
                                rows["C1 BM128 split"]["vs_default"]["paired_ci95_high"]]
    assert c2["verdict"] == "below" and wrong["verdict"] is None and "max_abs_err" in wrong["not_measured"]
    cal = led["tune_calibration"]
    assert (cal["inside"], cal["above"], cal["below"], cal["of"], cal["not_measured"]) == (1, 0, 1, 2, 1)
    mids = [c1["measured"] / math.sqrt(1.15 * 1.35), c2["measured"] / math.sqrt(1.2 * 1.4)]
    assert cal["median_measured_over_predicted"] == pytest.approx(sum(mids) / 2)

    text = lab_here("ledger", "--profiles", tuned_store).stdout
    section = text[text.index("Tuning predictions"):text.index("Calibration")]
    assert f"{RUNG.id} B1-H2-N130-D64-causal-{RUNG.default_dtype} on simulated device (tune {tune_dir.name}" in section
    assert (f"C1 BM128 split: predicted 1.15-1.35x the default, measured {c1['measured']:.3f}x "
            f"(median of 12 paired rounds, CI95 {c1['ratio_ci95'][0]:.3f}-{c1['ratio_ci95'][1]:.3f}x): inside the range") in section
    assert "C2 BM64 split: predicted 1.2-1.4x the default" in section and "below the range" in section
    assert "C4 wrong: predicted 1.1-1.9x the default, not measured: O on" in section
    cal_text = text[text.index("Calibration"):]
    assert ("tuning predictions: measured inside the predicted range in 1 of 2 (above 0, below 1, 1 not measured; "
            f"the CI95 reaches past a bound in {cal['ci95_across_bound']}); "
            "median measured / predicted (range's geometric middle)") in cal_text
    assert "header predictions:" in cal_text   # beside the headers' calibration, not instead of it


def test_a_stored_verdict_is_judged_again_from_the_measured_ratio(tuned_store):
    """The ledger judges from the ratio the tune measured, not from a verdict written beside it."""
    from lab.store import ledger

    (tune_dir,) = [p for p in stored(tuned_store) if json.loads((p / "tune.json").read_text())["predictions"]]
    f = tune_dir / "tune.json"
    m = json.loads(f.read_text())
    for p in m["predictions"]:
        p["verdict"] = "inside"
    f.write_text(json.dumps(m))
    verdicts = [e["verdict"] for e in ledger.build(tuned_store).tune_predictions]
    assert verdicts == ["inside", "below", None]


def test_an_empty_store_says_no_tune_carries_a_prediction(tmp_path):
    (tmp_path / "empty").mkdir()
    text = lab_here("ledger", "--profiles", tmp_path / "empty").stdout
    assert "no stored tune carries a prediction" in text
    assert "tuning predictions: none judged yet" in text


def test_a_damaged_tune_leaves_the_others_in_the_ledger(tuned_store):
    bad = tuned_store / "20200101-000000-tune-broken"
    bad.mkdir()
    (bad / "tune.json").write_text("{not json")
    res = lab_here("ledger", "--profiles", tuned_store, "--json")
    assert res.returncode == 0 and len(json.loads(res.stdout)["tune_predictions"]) == 3
    assert "cannot read tune.json" in json.loads(res.stdout)["damaged"][bad.name]
    assert f"left out (damaged): {bad.name}:" in lab_here("ledger", "--profiles", tuned_store).stdout


def test_a_tune_is_stored_whole_or_not_at_all(simulated_tune, tmp_path, monkeypatch):
    """A write that fails mid-way leaves neither the tune nor its staging folder (exit 2, no traceback)."""
    from lab.store import tunes

    def full_disk(path, obj, indent=2):
        Path(path).write_text("{")   # half a manifest, then the failure
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tunes, "write_json_atomic", full_disk)
    store = tmp_path / "store"
    res = lab_here(*tune_args(store, "--predict", "C1=1.1-1.3"))
    assert res.returncode == 2 and "No space left on device" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert list(store.iterdir()) == []   # no tune, no .partial


def test_the_report_renders_the_tuning_predictions(tuned_store, tmp_path):
    res = lab_here("report", "--profiles", tuned_store, "--out", tmp_path / "out")
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "out" / "ledger.html").read_text()
    section = html[html.index('<section id="tuning">'):html.index('<section id="calibration">')]
    assert section.count('<tr class="tune-prediction">') == 3
    assert "<code>C1 BM128 split</code>" in section and "1.15-1.35x" in section
    assert '<span class="pass">inside</span>' in section and '<span class="fail">below</span>' in section
    assert "not measured: O on" in section and "median of 12 paired rounds, CI95" in section
    assert "tuning predictions: measured inside the predicted range in 1 of 2" in html


def test_without_the_rounds_the_ledger_shows_the_medians_ci95s(stand_in_tune, tmp_path):
    """A tune whose timings kept no per-round times (test_tune's stand-in timer: 1 ms, CI95 0.99-1.01
    for every configuration) has a ratio but no paired CI95: the ledger shows the two medians' CI95s."""
    store = tmp_path / "store"
    res = lab_here("tune", "--variant", RUNG.id, "--shape", "1,2,130,64", "--dtype", RUNG.default_dtype, "--reps", "3",
                   "--check-shapes", "1", "--profiles", store, "--predict", "C1=0.95-1.05")
    assert res.returncode == 0, res.stderr
    (e,) = json.loads(lab_here("ledger", "--profiles", store, "--json").stdout)["tune_predictions"]
    assert e["measured"] == 1.0 and e["verdict"] == "inside" and e["ratio_ci95"] is None
    assert e["estimator"] == "ratio of medians" and e["ci95_where"] is None
    assert e["medians_ci95"] == {"default": [0.99, 1.01], "candidate": [0.99, 1.01]}
    text = lab_here("ledger", "--profiles", store).stdout
    assert ("C1: predicted 0.95-1.05x the default, measured 1.000x (ratio of the medians, no paired rounds kept; "
            "medians' CI95: default 0.99-1.01 ms, candidate 0.99-1.01 ms): inside the range") in text


def test_the_ledger_says_which_tunes_ran_under_load(tmp_path):
    """The shipped pair of tunes of one candidate on one shape (one H200), alone and under load
    (benchmarks/under_load_gpu.sh): the ledger says which was under load, so two measurements of one
    prediction's candidate are never read as the same experiment."""
    import shutil

    from lab.report.ledgerpage import tune_prediction_phrase
    from lab.store import ledger

    examples = Path(__file__).resolve().parent.parent / "profiles" / "examples"
    for name in ("20261128-102936-tune-v9-B16-H32-N1024-D64-causal-float16",
                 "20261128-103006-tune-v9-B16-H32-N1024-D64-causal-float16"):
        shutil.copytree(examples / name, tmp_path / name)
    alone, loaded = ledger.build(tmp_path).tune_predictions
    assert alone["under_load_ms"] is None and loaded["under_load_ms"] == 50
    assert alone["candidate"] == loaded["candidate"] and alone["verdict"] == loaded["verdict"] == "inside"
    assert "under load" not in tune_prediction_phrase(alone)
    assert "the default under load (50 ms of calls before each repetition), measured 0.948x" in tune_prediction_phrase(loaded)

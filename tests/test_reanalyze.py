"""`lab reanalyze`: a stored run's own ncu report analyzed again on a machine with no GPU; what was
measured stays, the judgement and its tables are replaced whole."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import EXAMPLES, REPO, lab_here  # noqa: E402
from lab.store.runs import read_table


def _a_shipped_run() -> Path:
    for m in sorted(EXAMPLES.glob("*/manifest.json")):
        man = json.loads(m.read_text())
        if (man.get("artifacts") or {}).get("ncu_report"):
            return m.parent
    pytest.skip("no shipped run with an ncu report")


def _lab(*args):
    return lab_here(*args)   # in this process (conftest.lab_here)


def test_reanalyze_replaces_the_judgement_and_keeps_the_measurements(tmp_path):
    src = _a_shipped_run()
    run = tmp_path / "store" / src.name
    shutil.copytree(src, run)
    before = json.loads((run / "manifest.json").read_text())
    # a stale judgement, as an older lab would have stored it
    findings = pd.read_parquet(run / "findings.parquet")
    findings.iloc[0:0].to_parquet(run / "findings.parquet", index=False)
    stale = dict(before, findings_summary={"bottleneck": "divergence", "count": 0})
    (run / "manifest.json").write_text(json.dumps(stale))

    res = _lab("reanalyze", str(run))
    assert res.returncode == 0, res.stderr
    after = json.loads((run / "manifest.json").read_text())
    assert after["findings_summary"] == before["findings_summary"]
    assert len(pd.read_parquet(run / "findings.parquet")) == len(findings)
    for measured in ("correctness", "variant"):
        assert after[measured] == before[measured]
    # the times kept; the numbers derived from them (lab.measure.rates, by the run's mode) stored beside them
    assert {k: after["timing"].get(k) for k in before["timing"]} == before["timing"]
    assert {"flops", "tflops", "pct_of_peak", "min_bytes"} <= set(after["timing"])
    assert len(after["baselines"]) == len(before["baselines"])
    for a, b in zip(after["baselines"], before["baselines"]):
        assert {k: a.get(k) for k in b} == b
    assert {k: after["problem"][k] for k in ("batch", "heads", "seqlen_q", "seqlen_k", "head_dim", "label")} == \
        {k: before["problem"][k] for k in ("batch", "heads", "seqlen_q", "seqlen_k", "head_dim", "label")}
    assert sorted(p.name for p in run.parent.iterdir()) == [run.name]   # no staging or old copy left
    assert after["reanalyzed"]["utc"] and "lab_version" in after["reanalyzed"]     # provenance of the new judgement


def test_reanalyze_refuses_what_it_cannot_do(tmp_path):
    src = _a_shipped_run()
    run = tmp_path / "store" / src.name
    shutil.copytree(src, run)
    man = json.loads((run / "manifest.json").read_text())
    (run / man["artifacts"]["ncu_report"]).unlink()
    res = _lab("reanalyze", str(run))
    assert res.returncode == 2 and "no ncu report" in res.stderr and "Traceback" not in res.stderr
    res = _lab("reanalyze", "no-such-run", "--profiles", str(tmp_path / "store"))
    assert res.returncode == 2 and "no stored run" in res.stderr


def test_a_shipped_example_is_reanalyzed_into_the_store_not_in_place(tmp_path):
    """A run under a store's examples/ (as profiles/examples/ ships) is left as recorded: the new
    judgement is written into the store itself under the run's id, and that copy is the one the store
    lists from then on (once, not beside the example)."""
    src = _a_shipped_run()
    store = tmp_path / "store"
    example = store / "examples" / src.name
    shutil.copytree(src, example)
    recorded = {p.relative_to(example): p.read_bytes() for p in example.rglob("*") if p.is_file()}
    for first in (True, False):   # then the store's copy is the run: analyzed again in place
        res = _lab("reanalyze", src.name, "--profiles", str(store))
        assert res.returncode == 0, res.stderr
        assert ("left as recorded" in res.stdout) == first, res.stdout
    assert {p.relative_to(example): p.read_bytes() for p in example.rglob("*") if p.is_file()} == recorded
    copy = json.loads((store / src.name / "manifest.json").read_text())
    assert copy["reanalyzed"]["utc"] and copy["timing"] == json.loads(recorded[Path("manifest.json")])["timing"]
    assert sorted(p.name for p in store.iterdir()) == sorted(["examples", src.name])   # no staging left
    from lab.store import runs

    listed = [r for r in runs.list_runs(store) if r.id == src.name]
    assert [r.path for r in listed] == [store / src.name]
    assert runs.find_run(src.name, store).path == store / src.name


def _as_stored_before(src: Path, run: Path) -> bytes:
    """A copy of a shipped run as the lab stored it before reports were kept compressed: the plain
    profile.ncu-rep, the manifest naming it. Returns the report's bytes."""
    shutil.copytree(src, run)
    man = json.loads((run / "manifest.json").read_text())
    packed = run / man["artifacts"]["ncu_report"]
    plain = run / packed.name.removesuffix(".xz")
    data = lzma.decompress(packed.read_bytes())
    plain.write_bytes(data)
    packed.unlink()
    man["artifacts"]["ncu_report"] = man["profile"]["report"] = plain.name
    (run / "manifest.json").write_text(json.dumps(man, indent=2))
    return data


def test_a_run_stored_with_a_plain_report_is_read_and_reanalyzed_into_a_compressed_one(tmp_path):
    src = _a_shipped_run()
    assert json.loads((src / "manifest.json").read_text())["artifacts"]["ncu_report"] == "profile.ncu-rep.xz"
    run = tmp_path / "store" / src.name
    data = _as_stored_before(src, run)
    # read as it is: lab analyze on the run's folder and on the file, the same kernels
    by_folder = _lab("analyze", str(run), "--json")
    by_file = _lab("analyze", str(run / "profile.ncu-rep"), "--json")
    assert by_folder.returncode == by_file.returncode == 0, by_folder.stderr
    assert json.loads(by_folder.stdout) == json.loads(by_file.stdout) and json.loads(by_file.stdout)
    res = _lab("reanalyze", str(run))
    assert res.returncode == 0, res.stderr
    after = json.loads((run / "manifest.json").read_text())
    assert after["artifacts"]["ncu_report"] == after["profile"]["report"] == "profile.ncu-rep.xz"
    assert sorted(p.name for p in run.iterdir() if "ncu-rep" in p.name) == ["profile.ncu-rep.xz"]
    assert lzma.decompress((run / "profile.ncu-rep.xz").read_bytes()) == data
    again = _lab("analyze", str(run), "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(by_file.stdout)
    # the plain name, once the run keeps it compressed: one line pointing at the .xz
    gone = _lab("analyze", str(run / "profile.ncu-rep"))
    assert gone.returncode == 2 and "profile.ncu-rep.xz" in gone.stderr and "Traceback" not in gone.stderr


def test_a_report_unpacked_in_place_is_still_the_runs(tmp_path):
    """`unxz profile.ncu-rep.xz` (without -k) in a run folder, to open the report in Nsight Compute's UI,
    leaves the plain file only: the store still finds the run's report, and reanalyze keeps it compressed."""
    src = _a_shipped_run()
    run = tmp_path / "store" / src.name
    shutil.copytree(src, run)
    packed = run / "profile.ncu-rep.xz"
    data = lzma.decompress(packed.read_bytes())
    (run / "profile.ncu-rep").write_bytes(data)
    packed.unlink()
    from lab.store import runs

    assert runs.Run(run).artifact("ncu_report") == run / "profile.ncu-rep"
    assert _lab("analyze", str(run), "--json").returncode == 0
    res = _lab("reanalyze", str(run))
    assert res.returncode == 0, res.stderr
    assert lzma.decompress(runs.Run(run).artifact("ncu_report").read_bytes()) == data


def _shipped_profile_runs() -> list[str]:
    return sorted(m.parent.name for m in EXAMPLES.glob("*/manifest.json")
                  if (m.parent / "findings.parquet").exists()
                  and (json.loads(m.read_text()).get("artifacts") or {}).get("ncu_report"))


@pytest.mark.parametrize("run_id", _shipped_profile_runs())
def test_every_shipped_profile_run_stores_this_labs_judgement(run_id):
    """What `lab report` shows of a shipped run (its stored findings, per-line stalls and derived values)
    is what this lab's analysis says of the run's own report: a rule change is followed by `lab reanalyze`
    of the shipped runs into a scratch store and their findings, lines, derived and manifest copied back.
    Orderings are
    deterministic: ties (two stall reasons with the same samples) go by name, not by the hash seed."""
    from lab.pipeline import analysis_tables

    run = EXAMPLES / run_id
    man = json.loads((run / "manifest.json").read_text())
    _, tables = analysis_tables(run / man["artifacts"]["ncu_report"], man.get("problem"), man.get("timeline"),
                                man.get("mode") or "fwd", (man.get("build") or {}).get("ptxas"))
    hint = f"lab reanalyze {run_id} --profiles /tmp/X (a copy under /tmp/X/examples), then copy its tables back"
    cols = {"findings": ["kernel_index", "rank", "class", "title", "severity", "advice", "evidence"],
            "lines": ["kernel_index", "rank", "file", "line", "samples", "stalls", "mbarrier_wait_stalls", "sass"],
            "derived": ["kernel_index", "derived"]}
    for name, keep in cols.items():
        stored = pd.read_parquet(run / f"{name}.parquet")[keep].astype(str).reset_index(drop=True)
        now = tables[name][keep].astype(str).reset_index(drop=True)
        assert stored.equals(now), (name, hint)


SERIALIZED = "C7511: insufficient register resources for the wgmma pipeline"


def test_a_kernel_ptxas_serialized_says_so_in_its_verdict_and_on_the_run_page(tmp_path):
    """A run whose manifest's build.ptxas says ptxas serialized the profiled kernel's wgmma (matched by the
    mangled name Nsight Compute recorded, not the demangled one, which ncu spells otherwise): after `lab
    reanalyze` (and `lab analyze` on the run's folder), the verdict's first evidence is ptxas's notice and the
    overlap advice puts undoing it first; the run page shows both. Here the shipped v9 run (latency-bound, warpgroups waiting on their wgmma)
    with such a record added: the run as stored has none, and its stored verdict is this lab's
    (test_every_shipped_profile_run_stores_this_labs_judgement, given its build.ptxas as reanalyze is)."""
    import html
    import re

    from lab.analysis import overlap as ov
    from lab.demangle import demangle

    run_id = "20261127-135157-v9-B32-H16-N512-D128-float16"
    src = EXAMPLES / run_id
    if not (src / "profile.ncu-rep.xz").exists():
        pytest.skip(f"shipped run {run_id} not under profiles/examples/")
    store = tmp_path / "profiles"
    run = store / run_id
    shutil.copytree(src, run)
    (mangled,) = read_table(run / "metrics.parquet")["kernel_mangled"]   # the store's reader: stored long
    man = json.loads((run / "manifest.json").read_text())
    man["build"]["ptxas"] = [dict(p, wgmma_serialized="", mangled="") for p in man["build"]["ptxas"]] + [
        {"kernel": demangle([mangled])[0], "registers": 168, "arch": "sm_90a", "mangled": mangled,
         "wgmma_serialized": SERIALIZED}]
    (run / "manifest.json").write_text(json.dumps(man))
    # `lab analyze` on the run's folder reads the same records: the same first evidence
    res = lab_here("analyze", str(run), "--json")
    assert res.returncode == 0, res.stderr
    (k,) = json.loads(res.stdout)
    assert next(iter(k["findings"][0]["evidence"].items())) == (ov.SERIALIZED_EVIDENCE, SERIALIZED), k["findings"][0]
    res = lab_here("reanalyze", run_id, "--profiles", str(store))
    assert res.returncode == 0, res.stderr
    lead = pd.read_parquet(run / "findings.parquet").iloc[0]
    assert lead["class"] == "latency-bound"
    assert next(iter(json.loads(lead["evidence"]).items())) == (ov.SERIALIZED_EVIDENCE, SERIALIZED)
    assert f"ptxas serialized this kernel's wgmma pipeline ({SERIALIZED})" in lead["advice"]
    assert "setmaxnreg" in lead["advice"].partition("Overlap more")[0]   # the step for its reason, first
    res = lab_here("report", "--profiles", str(store), "--run", run_id, "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    page = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "out" / f"{run_id}.html").read_text())).split())
    assert f"{ov.SERIALIZED_EVIDENCE} = {SERIALIZED}" in page
    assert f"ptxas serialized this kernel's wgmma pipeline ({SERIALIZED})" in page
    assert f"wgmma serialized by ptxas (a wait after every product: the tensor cores idle between them) in 1 kernel: " \
           f"{demangle([mangled])[0]} ({SERIALIZED})." in page   # under the ptxas table


def test_the_serialization_step_names_the_fix_for_each_reason():
    from lab.analysis import overlap as ov

    assert ov.serialized_step(None) == ov.serialized_step("") == ""
    assert "setmaxnreg" in ov.serialized_step(SERIALIZED)
    assert "after wgmma.wait_group" in ov.serialized_step(
        "C7515: non wgmma instructions defining accumulator registers of a wgmma between start and end of the "
        "pipeline stage")
    assert "inline the callee" in ov.serialized_step("C7513: the presence of Extern calls")
    assert "ptxas.log" in ov.serialized_step("C7599: a reason not seen yet")

"""What a kernel already overlaps, read from its report (lab.analysis.overlap), and next steps that name
only what is left. On real reports whose kernels we know: v9's persistent ping-pong forward with O
stored by TMA (three runs of the tenth session, two H200s), the earlier v9 that stored O with STG, v6
(one consumer warpgroup, one CTA per tile, STG), v9's three-consumer D=64 kernel (persistent, STG), v8's
backward and cuDNN's sm90 backward; the answer comes from the report (launch__* and device attributes, SASS
per PC), never from the kernels' names. Only whether a kernel is a backward's (so that it hears a backward's
levers: dK/dV and dQ, never ping-pong) falls back on its name, where neither the run's mode nor the lab's
NVTX range says (lab.analysis.direction)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import EXAMPLES, lab_here

from lab.analysis import findings as analysis
from lab.analysis import overlap as ov

# the tenth session's ncu profiles of v9's D=128 default (fwd_kernel_o_tma: persistent, ping-pong, O by TMA)
V9_O_TMA = ("20261127-135157-v9-B32-H16-N512-D128-float16", "20261127-135215-v9-B32-H16-N512-D128-causal-float16",
            "20261127-135233-v9-B2-H16-N8192-D128-float16")
V9_STG = "20261127-085257-v9-B2-H16-N8192-D128-float16"       # persistent, ping-pong, O stored by STG
V6 = "20261123-200956-v6-B8-H16-N1024-D64-float16"            # none of the three
V8_BWD = "20261127-031243-v8-B4-H16-N4096-D128-float16"
# v9's three consumer warpgroups at D=64 (Long64), O stored by STG, one CTA per SM walking 21-22 tiles: its
# tile loop leaves by a predicated EXIT (`@!P0 EXIT` when the scheduler has no next tile) inside the loop
V9_LONG64 = "20261127-163749-v9-B4-H32-N4096-D64-float16"

ALREADY = {ov.PERSISTENT: "persistent grid", ov.TMA_STORE: "output stored by TMA", ov.PINGPONG: "ping-pong"}
# how each technique would be proposed as a next step
PROPOSED = {ov.PERSISTENT: re.compile(r"persistent", re.I), ov.TMA_STORE: re.compile(r"stored with TMA|TMA store", re.I),
            ov.PINGPONG: re.compile(r"ping-pong", re.I)}


def _main(run_id: str, **kw):
    run = EXAMPLES / run_id
    if not (run / "profile.ncu-rep.xz").exists():
        pytest.skip(f"shipped run {run_id} not under profiles/examples/")
    man = json.loads((run / "manifest.json").read_text())
    got = analysis.analyze_report(run / "profile.ncu-rep.xz", problem=man["problem"], mode=man.get("mode"), **kw)
    return analysis.main_kernel(got)


def _overlap_finding(a):
    """The finding whose next step is about overlap: latency-bound, else compute-bound."""
    return next(f for f in a.findings if f.cls in ("latency-bound", "compute-bound"))


def _split(advice: str) -> tuple[str, str]:
    """(what the advice says is there, what it proposes)."""
    head, _, left = advice.partition(" Left: ")
    return head, left


def _proposed(advice: str) -> str:
    """What an advice proposes: its 'Left:' part, else its sentences that do not say what is already there."""
    if " Left: " in advice:
        return _split(advice)[1]
    return " ".join(x for x in re.split(r"(?<=\.)\s+(?=[A-Z])", advice) if "already" not in x.lower())


@pytest.mark.parametrize("run_id", V9_O_TMA)
def test_v9s_overlap_is_found_in_its_report_and_not_proposed_again(run_id):
    a = _main(run_id)
    shown = a.derived["overlap"]
    assert all(shown[k]["present"] is True for k in ALREADY), {k: shown[k] for k in ALREADY}
    assert shown[ov.WGMMA_IN_FLIGHT]["present"] is True
    # the evidence is the report's: the grid against the SMs, the SASS that stores by TMA and takes turns
    sms = a.metrics["device__attribute_multiprocessor_count"]
    assert a.metrics["launch__grid_size"] == sms
    assert f"launch__grid_size {sms:,.0f} on {sms:,.0f} SMs x 1 block(s) per SM" in shown[ov.PERSISTENT]["evidence"]
    assert "UTMASTG" in shown[ov.TMA_STORE]["evidence"]
    assert "BAR.SYNC" in shown[ov.PINGPONG]["evidence"] and "BAR.ARV" in shown[ov.PINGPONG]["evidence"]
    f = _overlap_finding(a)
    there, left = _split(f.advice)
    assert left, f.advice
    for key, name in ALREADY.items():
        assert name in there, (key, f.advice)
        assert not PROPOSED[key].search(left), (key, left)
    # no finding's next step proposes them (the scattered stores' advice no longer asks for a TMA store)
    for g in a.findings:
        for key, rx in PROPOSED.items():
            assert not rx.search(_proposed(g.advice)), (g.cls, key, g.advice)


def test_v9s_latency_verdict_names_what_is_left_with_its_evidence():
    a = _main(V9_O_TMA[0])
    f = _overlap_finding(a)
    assert f.cls == "latency-bound"
    _, left = _split(f.advice)
    waits = a.derived["overlap"]["waits"]
    # the consumers' waits for loaded tiles and the waits on their own wgmma, in % of the samples
    assert waits["mbarrier_pct"] > 0 and waits["wgmma_pct"] > 0
    assert f"{waits['wgmma_pct']:.1f}% of the samples" in left and "WARPGROUP.DEPBAR" in left
    if waits["mbarrier_pct"] >= 5.0:
        assert "more TMA stages" in left and waits["mbarrier_where"] in left
    else:
        assert "more TMA stages" not in left and "would not help" in f.advice


def test_v6_lacks_them_and_hears_them_all():
    a = _main(V6)
    shown = a.derived["overlap"]
    assert all(shown[k]["present"] is False for k in ALREADY), {k: shown[k] for k in ALREADY}
    assert "waves" in shown[ov.PERSISTENT]["evidence"] and "STG" in shown[ov.TMA_STORE]["evidence"]
    f = _overlap_finding(a)
    assert f.cls == "latency-bound"
    there, left = _split(f.advice)
    for key, rx in PROPOSED.items():
        assert rx.search(left), (key, left)
        assert ALREADY[key] not in there
    # its scattered stores are the output written from the accumulators: a TMA store is the fix
    unc = next(g for g in a.findings if g.cls == "uncoalesced-global")
    assert "TMA store" in unc.advice


def test_earlier_v9_stores_o_with_stg_and_hears_only_that():
    a = _main(V9_STG)
    shown = a.derived["overlap"]
    assert shown[ov.PERSISTENT]["present"] is True and shown[ov.PINGPONG]["present"] is True
    assert shown[ov.TMA_STORE]["present"] is False and "STG" in shown[ov.TMA_STORE]["evidence"]
    f = _overlap_finding(a)
    there, left = _split(f.advice)
    assert "ping-pong" in there and "ping-pong" not in left
    unc = next(g for g in a.findings if g.cls == "uncoalesced-global")
    assert "TMA store" in unc.advice


def test_a_tile_loop_that_exits_by_a_predicated_exit_is_still_a_persistent_grid():
    """The grid is exactly one wave (132 CTAs on 132 SMs) and each CTA walks its tiles; the loop around the
    O stores holds the CTA's way out, `@!P0 EXIT`. Read as "no loop", the verdict said each CTA had its one
    tile and that a tile scheduler had nothing to overlap, on a kernel that has one."""
    a = _main(V9_LONG64)
    shown = a.derived["overlap"]
    assert shown[ov.PERSISTENT]["present"] is True, shown[ov.PERSISTENT]["evidence"]
    assert "fwd_wgmma.cuh:181" in shown[ov.PERSISTENT]["evidence"] and "STG" in shown[ov.PERSISTENT]["evidence"]
    assert shown[ov.TMA_STORE]["present"] is False and shown[ov.PINGPONG]["present"] is False
    advice = _overlap_finding(a).advice
    head, left = _split(advice)
    assert "persistent grid" in head and not PROPOSED[ov.PERSISTENT].search(left)
    assert PROPOSED[ov.TMA_STORE].search(left) and "Not a persistent grid" not in advice


def _left_items(advice: str) -> str:
    """The items of an advice's 'Left:' list, without the notes after it (a backward's says why it is not
    told ping-pong, naming it)."""
    return _split(advice)[1].split(". ")[0]


def test_backward_one_cta_per_tile_is_not_persistent():
    a = _main(V8_BWD)
    shown = a.derived["overlap"]
    assert shown[ov.PERSISTENT]["present"] is False and "waves" in shown[ov.PERSISTENT]["evidence"]
    assert shown[ov.TMA_STORE]["present"] is False and shown[ov.PINGPONG]["present"] is False
    # its bulk copies go into shared memory (UBLKCP.S.G): loads, not a store of the output
    assert shown[ov.ASYNC_LOADS]["present"] is True and "UBLKCP" in shown[ov.ASYNC_LOADS]["evidence"]


def test_without_sass_the_advice_says_it_cannot_tell():
    """Without the per-PC SASS (a report without SourceCounters), a one-wave grid may or may not loop
    over tiles and the named-barrier turns cannot be seen: those techniques stay in the next step, saying
    that the report cannot tell; what the per-opcode counts show (UTMASTG) is still known."""
    a = _main(V9_O_TMA[0], with_lines=False)
    shown = a.derived["overlap"]
    assert shown[ov.PERSISTENT]["present"] is None and shown[ov.PINGPONG]["present"] is None
    assert shown[ov.TMA_STORE]["present"] is True
    _, left = _split(_overlap_finding(a).advice)
    assert "ping-pong" in left and "persistent" in left and "cannot tell" in left
    assert not PROPOSED[ov.TMA_STORE].search(left)


def test_analyze_json_carries_the_overlap(tmp_path):
    rep = EXAMPLES / V9_O_TMA[0] / "profile.ncu-rep.xz"
    if not rep.exists():
        pytest.skip(f"shipped run {V9_O_TMA[0]} not under profiles/examples/")
    res = lab_here("analyze", "--json", str(rep))
    assert res.returncode == 0, res.stderr
    (k,) = json.loads(res.stdout)
    assert {k2: v["present"] for k2, v in k["overlap"].items() if k2 != "waits"} == \
        {ov.PERSISTENT: True, ov.TMA_STORE: True, ov.PINGPONG: True, ov.WGMMA_IN_FLIGHT: True, ov.ASYNC_LOADS: True}
    assert all(v["name"] and v["evidence"] for k2, v in k["overlap"].items() if k2 != "waits")


def test_a_kernel_the_lab_never_saw_cudnns_hopper_forward():
    """cuDNN's sm90 flash forward in SDPA (tests/fixtures/ncu/sdpa-detailed, no -lineinfo: SASS by PC):
    a persistent grid of one CTA per SM walking tiles, O stored by TMA, and softmax turns between two
    consumer warpgroups on named barriers (its own ids, predicated per warpgroup, not v9's registers).
    Its next step proposes none of them."""
    from conftest import FIXTURES

    rep = FIXTURES / "ncu" / "sdpa-detailed.ncu-rep.xz"
    a = next(a for a in analysis.analyze_report(rep) if "sdpa_sm90_flash_fprop" in a.kernel)
    shown = a.derived["overlap"]
    assert {k: shown[k]["present"] for k in ALREADY} == {k: True for k in ALREADY}, shown
    assert "0x" in shown[ov.PINGPONG]["evidence"]   # cited by PC: the report has no source lines
    for f in a.findings:
        for key, rx in PROPOSED.items():
            assert not rx.search(_proposed(f.advice)), (f.cls, key, f.advice)


@pytest.mark.parametrize("report", ["sdpa-cudnn-fwd-d64-causal", "sdpa-cudnn-fwd-d64"])
def test_cudnns_d64_forward_is_read_as_ping_pong_on_a_persistent_grid(report):
    """cuDNN's sm90 forward at D=64 (32,32,512,64 fp16, tests/fixtures/ncu; "knob_7_64x128x64": 64-row
    tiles, 128 keys, block 384 = a producer and two consumer warpgroups, grid 132 on 132 SMs): both
    masks read as a persistent grid with O stored by TMA and two consumer warpgroups taking turns
    (named barriers), which no next step proposes again; the verdict is latency-bound, as v9's."""
    from conftest import FIXTURES

    (a,) = analysis.analyze_report(FIXTURES / "ncu" / f"{report}.ncu-rep.xz")
    assert "sdpa_sm90_flash_fprop" in a.kernel and "64x128x64" in a.kernel
    shown = a.derived["overlap"]
    assert {k: shown[k]["present"] for k in ALREADY} == {k: True for k in ALREADY}, shown
    assert a.findings[0].cls == "latency-bound", [f.cls for f in a.findings]
    for f in a.findings:
        for key, rx in PROPOSED.items():
            assert not rx.search(_proposed(f.advice)), (f.cls, key, f.advice)


def test_asynchronous_copies_are_read_from_the_sass():
    """The ladder's latency rung double-buffers K/V with cp.async (LDGSTS); its first rung loads them
    through registers (LDG). Rungs named through the registry."""
    import glob

    from lab.ladder.registry import builtin, demonstrating

    for variant, expected, op in ((demonstrating("latency-bound").id, True, "LDGSTS"), (builtin()[0].id, False, "LDG")):
        runs = sorted(glob.glob(str(EXAMPLES / f"*-{variant}-B*" / "manifest.json")))
        if not runs:
            pytest.skip(f"no shipped {variant} run")
        a = _main(runs[0].split("/")[-2])
        got = a.derived["overlap"][ov.ASYNC_LOADS]
        assert got["present"] is expected and op in got["evidence"], got


def test_a_warp_specialised_backward_is_not_told_to_trade_registers_again():
    """cuDNN's sm90 backward already runs wgmma in warpgroups that trade registers (USETMAXREG): its
    register-pressure step says so instead of proposing setmaxnreg; FA2's backward (mma.sync) hears it."""
    from conftest import FIXTURES

    def register_step(name, frag):
        got = analysis.analyze_report(FIXTURES / "ncu" / f"{name}.ncu-rep.xz", mode="bwd")
        a = next(a for a in got if frag in a.kernel)
        return next(f for f in a.findings if f.cls == "register-pressure").advice

    cudnn = register_step("sdpa-cudnn-bwd", "flash_bprop_wgmma")
    assert "already on wgmma" in cudnn and "USETMAXREG" in cudnn
    assert "setmaxnreg" in register_step("sdpa-flash-bwd", "flash_bwd_dq_dk_dv_loop")


def test_terminal_view_says_what_is_there_apart_from_what_is_left():
    rep = EXAMPLES / V9_O_TMA[0] / "profile.ncu-rep.xz"
    if not rep.exists():
        pytest.skip(f"shipped run {V9_O_TMA[0]} not under profiles/examples/")
    res = lab_here("analyze", str(rep))
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())   # the console wraps long lines
    assert "overlap in the report: persistent grid, output stored by TMA, ping-pong between warpgroups" in out
    nxt = out[out.index("next: "):out.index("already: ")]
    assert "Left: " in nxt and not any(rx.search(nxt.partition("Left: ")[2]) for rx in PROPOSED.values())
    assert "already: ping-pong between warpgroups (" in out


def test_the_run_page_shows_what_is_there_apart_from_the_next_step(tmp_path):
    """`lab reanalyze` of the shipped v9 run into a store of its own, then `lab report --run`: the page's
    next iteration names what is left, and what the kernel already does in a paragraph of its own."""
    import html
    import shutil

    src = EXAMPLES / V9_O_TMA[0]
    if not (src / "profile.ncu-rep.xz").exists():
        pytest.skip(f"shipped run {V9_O_TMA[0]} not under profiles/examples/")
    store = tmp_path / "profiles"
    shutil.copytree(src, store / "examples" / src.name)
    res = lab_here("reanalyze", src.name, "--profiles", str(store))
    assert res.returncode == 0, res.stderr
    res = lab_here("report", "--profiles", str(store), "--run", src.name, "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    page = html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "out" / f"{src.name}.html").read_text()))
    nxt = page[page.index("Recommended next iteration"):]
    step, _, rest = nxt.partition("What the kernel already does, by its report: ")
    assert rest.startswith("ping-pong between warpgroups") and "persistent grid" in rest and "UTMASTG" in rest
    assert "Left: " in step and not any(rx.search(step.partition("Left: ")[2]) for rx in PROPOSED.values())


def test_a_grid_under_one_wave_hears_the_grid_not_a_tile_scheduler():
    """cuDNN's sm90 backward (tests/fixtures/ncu/sdpa-cudnn-bwd) launches fewer CTAs than SMs, each with
    its K/V tile from the start: a tile scheduler would have no next tile to overlap, so its latency step
    does not propose persistent CTAs; it says why, with the report's grid and SM count, and points to the
    grid (small-grid, which the same report raises). A grid of several waves still hears it (v6)."""
    from conftest import FIXTURES

    got = analysis.analyze_report(FIXTURES / "ncu" / "sdpa-cudnn-bwd.ncu-rep.xz", mode="bwd")
    a = next(a for a in got if "flash_bprop_wgmma" in a.kernel)
    shown = a.derived["overlap"][ov.PERSISTENT]
    small = next(f for f in a.findings if f.cls == "small-grid")
    grid, sms = small.evidence["launch__grid_size"], small.evidence["device__attribute_multiprocessor_count"]
    assert grid < sms and shown["present"] is False and "fewer CTAs than SMs" in shown["evidence"]
    lat = next(f for f in a.findings if f.cls == "latency-bound")
    _, left = _split(lat.advice)
    assert "tile scheduler so" not in lat.advice and "persistent CTAs" not in lat.advice, lat.advice
    assert f"fewer CTAs ({grid:,}) than SMs ({sms:,})" in left and "small-grid" in left, left
    # lab analyze's line puts persistence apart from what is missing (and ping-pong, not a backward's lever)
    assert not PROPOSED[ov.PINGPONG].search(_left_items(lat.advice)), lat.advice
    assert "not the lever for this grid: persistent grid" in analysis._overlap_line(a.derived["overlap"])
    v6 = _overlap_finding(_main(V6))
    assert "persistent CTAs with a tile scheduler" in _split(v6.advice)[1]


def test_a_one_wave_grid_without_a_tile_loop_is_moot_and_a_grid_stride_loop_is_not_one_cta_per_tile():
    """cuDNN's dot(dO, O) pre-pass fits one wave (all CTAs resident at once, one tile each): persistence
    is moot there. v8's dQ convert runs a grid-stride loop over a grid of several waves: its CTAs loop, so
    the evidence does not call it one CTA per tile, yet it is not persistent (more CTAs than fit at once)."""
    from conftest import FIXTURES

    got = analysis.analyze_report(FIXTURES / "ncu" / "sdpa-cudnn-bwd.ncu-rep.xz", mode="bwd")
    pre = next(a for a in got if "compute_dot_do_o" in a.kernel).derived["overlap"][ov.PERSISTENT]
    assert pre["present"] is False and "one wave" in pre["evidence"] and pre.get("moot"), pre
    bwd = _main_all(V8_BWD)
    conv = next(a for a in bwd if "bwd_convert_kernel" in a.kernel).derived["overlap"][ov.PERSISTENT]
    assert conv["present"] is False and "waves" in conv["evidence"] and "its CTAs loop" in conv["evidence"], conv
    assert "one CTA per tile" not in conv["evidence"] and not conv.get("moot")
    main = analysis.main_kernel(bwd).derived["overlap"][ov.PERSISTENT]
    assert "one CTA per tile" in main["evidence"] and not main.get("moot")


def _main_all(run_id: str):
    run = EXAMPLES / run_id
    if not (run / "profile.ncu-rep.xz").exists():
        pytest.skip(f"shipped run {run_id} not under profiles/examples/")
    man = json.loads((run / "manifest.json").read_text())
    return analysis.analyze_report(run / "profile.ncu-rep.xz", problem=man["problem"], mode=man.get("mode"))


def test_a_grid_of_one_cta_per_head_that_walks_its_query_tiles_is_not_persistent():
    """The first rung launches one CTA per (batch, head), fewer than the SMs, and each walks its query
    tiles in a loop that stores O: a loop over output tiles, but on a grid not sized to the machine. It
    is not called persistent; the technique is moot there, the grid being the lever (small-grid)."""
    import glob

    from lab.ladder.registry import builtin

    runs = sorted(glob.glob(str(EXAMPLES / f"*-{builtin()[0].id}-B*" / "manifest.json")))
    if not runs:
        pytest.skip("no shipped run of the first rung")
    a = _main(runs[0].split("/")[-2])
    got = a.derived["overlap"][ov.PERSISTENT]
    assert got["present"] is False and "fewer CTAs than SMs" in got["evidence"], got
    assert "loop over output tiles" in got["evidence"] and "small-grid" in got["moot"], got
    assert a.findings[0].cls == "small-grid"


def test_occupancy_advice_points_to_latency_bound_only_where_that_is_the_verdict():
    """A warp-specialised kernel's occupancy finding says more work in flight per warpgroup is the lever
    and points to the latency-bound step; v8's backward is memory-bound (a unit at its roof), so it has no
    such step to point to (the pointer led nowhere before)."""
    for run_id, verdict in ((V8_BWD, "memory-bound"), (V9_O_TMA[0], "latency-bound")):
        a = _main(run_id)
        occ = next(f for f in a.findings if f.cls == "occupancy-limited")
        assert a.bottleneck == verdict, (run_id, a.bottleneck)
        assert ("see latency-bound" in occ.advice) == (verdict == "latency-bound"), (run_id, occ.advice)

"""The rendered pages in a real browser: Debian's headless Chromium loads each page from disk.

Per page: no console message at all (an uncaught error, a failed resource load and a stray
console.log all reach stderr through --enable-logging=stderr), the DOM after scripts ran holds the
key sections and numbers, and a screenshot is taken and is not blank. The example runs in
profiles/examples/ are rendered when they exist; otherwise runs made by tests/test_report.py's
helper. Set LAB_REPORT_SCREENSHOTS=DIR to keep the screenshots for a person to look at.

Install the browser with `apt-get install -y chromium` (the tests skip without it).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from lab.report import formatting

from lab.report import pages as report

from lab.report import rundata
from lab.store.runs import list_runs
from conftest import EXAMPLES, REPO  # noqa: E402


CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install -y chromium)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? ?(.*)")


def chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp / "chromium-profile"
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=90)


def console_messages(stderr: str) -> list[str]:
    return [m.group(1) for line in stderr.splitlines() if (m := CONSOLE.search(line))]


def load(page: Path, tmp: Path, fragment: str = "") -> str:
    """The DOM after the page's scripts ran; fails on any console message."""
    r = chromium(page.resolve().as_uri() + fragment, tmp, "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    messages = console_messages(r.stderr)
    assert not messages, f"{page.name}: console said {messages}"
    return r.stdout


def png_distinct_bytes(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values in the image data): a blank page has only a few."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


def screenshot(page: Path, tmp: Path, keep: Path | None) -> Path:
    shot = tmp / f"{page.stem}.png"
    r = chromium(page.resolve().as_uri(), tmp, f"--screenshot={shot}", "--window-size=1200,2400",
                 "--hide-scrollbars")
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    assert not console_messages(r.stderr)
    width, height, distinct = png_distinct_bytes(shot)
    assert (width, height) == (1200, 2400)
    assert distinct > 50, f"{shot} looks blank ({distinct} distinct byte values)"
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shot, keep / shot.name)
    return shot


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, request):
    """The example runs rendered (conftest's examples_rendered), or test-made runs until examples exist."""
    tmp = tmp_path_factory.mktemp("browser")
    examples = [r for r in list_runs(EXAMPLES.parent) if r.path.parent == EXAMPLES] if EXAMPLES.is_dir() else []
    if examples:
        done = request.getfixturevalue("examples_rendered")
        return done, [rundata.load(r) for r in examples], tmp, True
    from test_report import R1, R2, make_run

    store = tmp / "store"
    make_run(store, R1, median=30.0, created="2026-01-01T00:00:00+00:00", timeline=True,
             findings=[{"class": "small-grid", "title": "8 CTAs on 132 SMs", "evidence": {"launch__grid_size": 8}}])
    make_run(store, R2, median=12.0, created="2026-01-02T00:00:00+00:00",
             findings=[{"class": "latency-bound", "title": "long scoreboard stalls"}])
    done = report.render(tmp / "out", root=store)
    return done, [rundata.load(r) for r in list_runs(store)], tmp, False


def test_the_detector_catches_a_console_error(tmp_path):
    """Control: a page with an uncaught error must fail `load`, or the checks below prove nothing."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><title>t</title><script>notDefined()</script>")
    with pytest.raises(AssertionError, match="notDefined"):
        load(bad, tmp_path)


def test_run_pages_load_clean_with_their_sections_and_numbers(rendered):
    done, runs, tmp, _ = rendered
    keep = Path(os.environ["LAB_REPORT_SCREENSHOTS"]) if os.environ.get("LAB_REPORT_SCREENSHOTS") else None
    for i, rd in enumerate(runs):
        page = done.pages[rd.id]
        dom = load(page, tmp)
        for section in ("environment", "protocol", "problem", "performance", "correctness", "roofline", "stalls",
                        "occupancy", "memory", "bottleneck", "timeline", "appendix"):
            assert f'id="{section}"' in dom, (page.name, section)
        assert formatting.fmt_ms(rd.median_ms) in dom
        assert formatting.fmt_num(rd.tflops) in dom
        if i == 0 or keep:
            screenshot(page, tmp, keep)


def test_index_sorts_and_filters_in_the_browser(rendered):
    done, runs, tmp, _ = rendered
    keep = Path(os.environ["LAB_REPORT_SCREENSHOTS"]) if os.environ.get("LAB_REPORT_SCREENSHOTS") else None
    dom = load(done.index, tmp)
    assert 'data-ready="1"' in dom                       # the inline script ran to its end
    assert f"{len(runs)} of {len(runs)} runs shown" in dom
    for rd in runs:
        assert f'href="{rd.id}.html"' in dom
    screenshot(done.index, tmp, keep)

    # a sort given in the URL
    # the TFLOP/s column's position, read from the header rather than counted by hand
    head = dom[dom.index("<thead>"):dom.index("</thead>")]
    tflops_column = re.findall(r'data-key="([^"]+)"', head).index("tflops")

    def rows_of(dom: str) -> list[tuple[str, float | None]]:
        body = dom[dom.index("<tbody>"):dom.index("</tbody>")]
        out = []
        for rung, hidden, cells in re.findall(r'<tr data-rung="([^"]+)"[^>]*?( hidden="")?>(.*?)</tr>', body, re.S):
            if not hidden:
                v = re.findall(r'data-v="([^"]*)"', cells)[tflops_column]
                out.append((rung, float(v) if v else None))
        return out

    page_order = [v for _, v in rows_of(dom) if v is not None]
    # ask for the order the page does not already have, so that the check sees the script work
    direction = "desc" if page_order == sorted(page_order) else "asc"
    ranked = rows_of(load(done.index, tmp, f"#sort=tflops:{direction}"))
    assert len(ranked) == len(runs)
    values = [v for _, v in ranked if v is not None]
    assert values == sorted(values, reverse=direction == "desc")
    assert len(set(values)) < 2 or values != page_order

    # a filter given in the URL: only that rung's rows stay visible
    rung = runs[-1].variant_id
    filtered = rows_of(load(done.index, tmp, f"#rung={rung}&sort=tflops:asc"))
    assert filtered and {r for r, _ in filtered} == {rung}
    assert len(filtered) == sum(r.variant_id == rung for r in runs)


def test_comparison_page_loads_clean(rendered):
    done, runs, tmp, _ = rendered
    if not done.comparisons:
        pytest.skip("no run has a stored run of its previous rung on the same problem and device")
    keep = Path(os.environ["LAB_REPORT_SCREENSHOTS"]) if os.environ.get("LAB_REPORT_SCREENSHOTS") else None
    for page in done.comparisons:
        dom = load(page, tmp)
        assert "Time and throughput" in dom and "Key metrics" in dom and "Findings" in dom
        assert "regression" in dom.lower()
    screenshot(done.comparisons[0], tmp, keep)

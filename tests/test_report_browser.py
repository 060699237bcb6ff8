"""The rendered pages in a real browser: Debian's headless Chromium loads each page from disk.

Per page: no console message at all (an uncaught error, a failed resource load and a stray
console.log: the DevTools protocol's Runtime.exceptionThrown, Log.entryAdded and
Runtime.consoleAPICalled), the DOM after scripts ran holds the key sections and numbers, and a
screenshot is taken and is not blank. The example runs in profiles/examples/ are rendered when they
exist; otherwise runs made by tests/test_report.py's helper. Set LAB_REPORT_SCREENSHOTS=DIR to keep
the screenshots for a person to look at.

One browser serves the module, each page loaded in a tab of its own: a browser started per page
took one to two seconds to start for a page that loads in a few tenths.

Install the browser with `apt-get install -y chromium` (the tests skip without it).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import select
import shutil
import struct
import subprocess
import time
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
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT = 90   # seconds for any one answer of the browser
SHOT = (1200, 2400)


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: the
    browser reads commands on its fd 3 and answers on fd 4, JSON messages ending in NUL)."""

    def __init__(self, profile: Path):
        to_browser, self._w = os.pipe()
        self._r, from_browser = os.pipe()
        # above 4, so that placing them at 3 and 4 in the child cannot overwrite one with the other
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser, from_browser)]
        os.close(to_browser), os.close(from_browser)
        self.log = profile.parent / "chromium-stderr.txt"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen([str(CHROMIUM), *FLAGS, "--remote-debugging-pipe",
                                          f"--user-data-dir={profile}", "about:blank"],
                                         preexec_fn=lambda: (os.dup2(high[0], 3), os.dup2(high[1], 4)),
                                         pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=err)
        for fd in high:
            os.close(fd)
        self._buf, self._id, self._events = b"", 0, []

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if not select.select([self._r], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError(f"the browser said nothing for {TIMEOUT} s")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise EOFError(f"the browser exited: {self.log.read_text(errors='replace')[-2000:]}")
            self._buf += chunk
        message, _, self._buf = self._buf.partition(b"\0")
        return json.loads(message)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        os.write(self._w, json.dumps({"id": self._id, "method": method, "params": params,
                                      **({"sessionId": session} if session else {})}).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            m = self._receive(deadline)
            if m.get("id") == self._id:
                assert "error" not in m, f"{method}: {m['error']}"
                return m["result"]
            self._events.append(m)

    def wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self._events):
            self._events.append(self._receive(deadline))

    def visit(self, url: str, viewport: tuple[int, int] | None = None) -> tuple[str, list[str], bytes | None]:
        """(the DOM after the page's scripts ran, its console messages, a PNG of the viewport when
        one is given) of `url` loaded in a fresh tab."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable", session)
            if viewport:
                self.send("Emulation.setDeviceMetricsOverride", session, width=viewport[0], height=viewport[1],
                          deviceScaleFactor=1, mobile=False)
                self.send("Emulation.setScrollbarsHidden", session, hidden=True)
            self._events.clear()
            self.send("Page.navigate", session, url=url)
            self.wait_for("Page.loadEventFired", session)
            # a task the page queued at its load runs (and may log) before the DOM is read
            self.send("Runtime.evaluate", session, expression="new Promise(r => setTimeout(r, 50))", awaitPromise=True)
            dom = self.send("Runtime.evaluate", session, expression="document.documentElement.outerHTML",
                            returnByValue=True)["result"]["value"]
            png = base64.b64decode(self.send("Page.captureScreenshot", session, format="png")["data"]) if viewport else None
            messages = [console_message(e) for e in self._events if e.get("sessionId") == session]
            return dom, [m for m in messages if m], png
        finally:
            self.send("Target.closeTarget", targetId=target)
            self._events.clear()

    def close(self) -> None:
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=30)
        except (AssertionError, OSError, EOFError, TimeoutError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self._w), os.close(self._r)


def console_message(event: dict) -> str | None:
    """What the browser's console would show for a protocol event, None for any other event."""
    method, p = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        d = p["exceptionDetails"]
        return (d.get("exception") or {}).get("description") or d.get("text")
    if method == "Runtime.consoleAPICalled":
        return f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
    if method == "Log.entryAdded":
        e = p["entry"]
        return f"{e['level']} ({e['source']}): {e['text']} {e.get('url', '')}".strip()
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile")
    yield b
    b.close()


def load(page: Path, browser: Browser, fragment: str = "") -> str:
    """The DOM after the page's scripts ran; fails on any console message."""
    dom, messages, _ = browser.visit(page.resolve().as_uri() + fragment)
    assert not messages, f"{page.name}: console said {messages}"
    return dom


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


def screenshot(page: Path, browser: Browser, tmp: Path, keep: Path | None) -> Path:
    shot = tmp / f"{page.stem}.png"
    _, messages, png = browser.visit(page.resolve().as_uri(), viewport=SHOT)
    assert not messages, f"{page.name}: console said {messages}"
    shot.write_bytes(png)
    width, height, distinct = png_distinct_bytes(shot)
    assert (width, height) == SHOT
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


@pytest.mark.parametrize("body, said", [
    ("<script>notDefined()</script>", "notDefined"),                       # an uncaught error
    ('<img src="missing.png" alt="">', "ERR_FILE_NOT_FOUND"),              # a failed resource load
    ('<script>console.log("stray")</script>', "stray"),                     # a stray console.log
])
def test_the_detector_catches_a_console_message(tmp_path, browser, body, said):
    """Control: each kind of console message must fail `load`, or the checks below prove nothing."""
    bad = tmp_path / "bad.html"
    bad.write_text(f"<!doctype html><title>t</title>{body}")
    with pytest.raises(AssertionError, match=said):
        load(bad, browser)


def test_run_pages_load_clean_with_their_sections_and_numbers(rendered, browser):
    done, runs, tmp, _ = rendered
    keep = Path(os.environ["LAB_REPORT_SCREENSHOTS"]) if os.environ.get("LAB_REPORT_SCREENSHOTS") else None
    for i, rd in enumerate(runs):
        page = done.pages[rd.id]
        dom = load(page, browser)
        for section in ("environment", "protocol", "problem", "performance", "correctness", "roofline", "stalls",
                        "occupancy", "memory", "bottleneck", "timeline", "appendix"):
            assert f'id="{section}"' in dom, (page.name, section)
        assert formatting.fmt_ms(rd.median_ms) in dom
        assert formatting.fmt_num(rd.tflops) in dom
        if i == 0 or keep:
            screenshot(page, browser, tmp, keep)


def test_index_sorts_and_filters_in_the_browser(rendered, browser):
    done, runs, tmp, _ = rendered
    keep = Path(os.environ["LAB_REPORT_SCREENSHOTS"]) if os.environ.get("LAB_REPORT_SCREENSHOTS") else None
    dom = load(done.index, browser)
    assert 'data-ready="1"' in dom                       # the inline script ran to its end
    assert f"{len(runs)} of {len(runs)} runs shown" in dom
    for rd in runs:
        assert f'href="{rd.id}.html"' in dom
    screenshot(done.index, browser, tmp, keep)

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
    ranked = rows_of(load(done.index, browser, f"#sort=tflops:{direction}"))
    assert len(ranked) == len(runs)
    values = [v for _, v in ranked if v is not None]
    assert values == sorted(values, reverse=direction == "desc")
    assert len(set(values)) < 2 or values != page_order

    # a filter given in the URL: only that rung's rows stay visible
    rung = runs[-1].variant_id
    filtered = rows_of(load(done.index, browser, f"#rung={rung}&sort=tflops:asc"))
    assert filtered and {r for r, _ in filtered} == {rung}
    assert len(filtered) == sum(r.variant_id == rung for r in runs)


def test_comparison_page_loads_clean(rendered, browser):
    done, runs, tmp, _ = rendered
    if not done.comparisons:
        pytest.skip("no run has a stored run of its previous rung on the same problem and device")
    keep = Path(os.environ["LAB_REPORT_SCREENSHOTS"]) if os.environ.get("LAB_REPORT_SCREENSHOTS") else None
    for page in done.comparisons:
        dom = load(page, browser)
        assert "Time and throughput" in dom and "Key metrics" in dom and "Findings" in dom
        assert "regression" in dom.lower()
    screenshot(done.comparisons[0], browser, tmp, keep)

"""The HTML report of each bundled example, opened in a real headless browser (Debian's
`chromium`): no console errors, the chart drew every category, the peak annotation shows the
ledger's byte count; a screenshot goes to test-artifacts/. Skips where chromium is missing.

The same traced examples also check the Perfetto export against the ledger (no browser).
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from memledger.cli import main
from memledger.ledger.model import Ledger
from memledger.report.perfetto import trace_events

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
EXAMPLES = ("mlp", "gpt", "cnn")
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install chromium; .ci/run tries)")


@pytest.fixture(scope="session")
def example_reports(traced_examples, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """{name: (ledger, report.html)}: the session's traced examples, each reported once."""
    out = tmp_path_factory.mktemp("report_examples")
    paths = {}
    for name in EXAMPLES:
        ledger, html = traced_examples[name], out / f"{name}.html"
        assert main(["report", str(ledger), "-o", str(html)]) == 0
        paths[name] = (ledger, html)
    return paths


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120)


class _Dom(HTMLParser):
    """Attributes of elements by id, the drawn areas, and the peak label's text."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}
        self.areas: dict[str, str] = {}
        self.text: dict[str, str] = {}
        self._open: str | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.by_id[a["id"]] = a
            self._open = a["id"]
        if tag == "path" and "ml-area" in a.get("class", ""):
            self.areas[a["data-category"]] = a.get("d", "")

    def handle_data(self, data):
        if self._open:
            self.text[self._open] = self.text.get(self._open, "") + data

    def handle_endtag(self, tag):
        self._open = None


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_report_opens_in_a_browser(name, example_reports, tmp_path):
    ledger_path, html = example_reports[name]
    led = Ledger.load(ledger_path)
    res = chromium(tmp_path, "--dump-dom", html.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    console = [ln for ln in res.stderr.splitlines() if "CONSOLE" in ln]
    assert console == [], console                      # nothing logged by the page at all
    dom = _Dom()
    dom.feed(res.stdout)
    status = dom.by_id["ml-status"]
    assert (status["data-status"], status["data-errors"]) == ("ok", ""), status
    # every category with live bytes in the ledger is drawn, as a non-empty area
    cats = led.curve_by_category()
    expected = [c for c in cats.columns if cats[c].to_numpy().any()]
    assert status["data-drawn"].split(",") == expected
    assert list(dom.areas) == expected and all(d.startswith("M") for d in dom.areas.values())
    # the peak annotation shows the ledger's exact peak
    pk = led.peak()
    assert dom.by_id["ml-peak-label"]["data-bytes"] == str(pk.bytes)
    assert f"({pk.bytes:,} B)" in dom.text["ml-peak-label"]
    assert dom.by_id["ml-measured"]["data-bytes"] == str(led.measured["peak_bytes"])
    if name != "gpt":   # one screenshot for a reader: each is another browser start
        return
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"report_{name}.png"
    res = chromium(tmp_path, "--window-size=1240,1500", f"--screenshot={shot}",
                   html.as_uri() + "#peak")
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_perfetto_counters_at_the_peak_equal_the_ledger(name, example_reports):
    led = Ledger.load(example_reports[name][0])
    pk = led.peak()
    events = trace_events(led)
    last: dict[str, int] = {}
    for e in sorted((e for e in events if e["ph"] == "C"), key=lambda e: e["ts"]):
        if e["ts"] <= pk.event:
            last[e["name"].removeprefix("live ")] = e["args"]["bytes"]
    assert {c: b for c, b in last.items() if b} == {
        c: b for c, b in led.by_category(pk.event).items() if b}
    assert sum(last.values()) == pk.bytes
    [instant] = [e for e in events if e["ph"] == "i"]
    assert (instant["ts"], instant["args"]["bytes"]) == (pk.event, pk.bytes)


@needs_chromium
@pytest.mark.slow
def test_report_interactions_zoom_pan_toggle_hover_click(example_reports, tmp_path):
    # GIVEN the GPT report opened at #selftest, which drives the page's own handlers with
    # real DOM events (wheel, drag, double click, legend clicks, hover, click on the chart)
    ledger_path, html = example_reports["gpt"]
    led = Ledger.load(ledger_path)
    res = chromium(tmp_path, "--dump-dom", html.as_uri() + "#selftest")
    assert res.returncode == 0, res.stderr[-2000:]
    assert [ln for ln in res.stderr.splitlines() if "CONSOLE" in ln] == []
    dom = _Dom()
    dom.feed(res.stdout)
    st = dom.by_id["ml-selftest"]
    assert st["data-status"] == "ok", st
    n = led.n_events - 1
    # the wheel zoomed in around the middle: 0.8 of the events, centred
    z0, z1 = map(int, st["data-zoomed"].split(","))
    assert 0 < z0 < z1 < n and abs((z1 - z0) - 0.8 * n) <= 2
    assert st["data-panned"] == "right"            # dragging left shows later events
    assert st["data-reset"] == f"0,{n}"            # double click: the whole run again
    # a legend click hides its category (one area fewer, left out of the drawn list) and a
    # second click brings it back
    hidden = st["data-hidden"]
    assert hidden not in st["data-drawn-hidden"].split(",")
    assert int(st["data-areas-hidden"]) + 1 == int(st["data-areas-shown"])
    # hover names the op and the module under the cursor (the peak: the loss, in the script)
    assert st["data-tip"].startswith("op ") and " in " in st["data-tip"]
    # a click lists the tensors live there: every storage is in the page for this size, so
    # their bytes are the ledger's live bytes at that event, exactly
    ev = int(st["data-clicked"])
    assert ev == led.peak().event   # snapped to the drawn point (it read the event before)
    assert int(st["data-clicked-bytes"]) == int(led.live_at(ev)["bytes"].sum())
    assert dom.by_id["ml-at-panel"]["data-event"] == str(ev)

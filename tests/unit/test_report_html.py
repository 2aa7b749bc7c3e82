"""The HTML report's data and page, without a browser (tests/integration has the browser)."""

import json
import re

from memledger.cli import main
from memledger.ledger.model import Ledger
from memledger.report.html import render_html
from memledger.report.html_data import report_data

HEAD = {"k": "header", "schema": "memledger.ledger/1"}


def tiny_records(module: str = "fc") -> list[dict]:
    """400 B parameter from event 0; 400 B activation on [1, 3): peak 800 B at event 1."""
    return [
        HEAD,
        {"k": "phase", "ev": 0, "ph": "forward", "step": 1},
        {"k": "alloc", "sid": 0, "ev": 0, "bytes": 400, "ph": "forward", "dtype": "float32",
         "shape": [10, 10]},
        {"k": "role", "sid": 0, "role": "parameter", "name": f"{module}.weight"},
        {"k": "alloc", "sid": 1, "ev": 1, "bytes": 400, "ph": "forward", "mod": module,
         "op": "aten.relu.default", "dtype": "float32", "shape": [4, 25]},
        {"k": "saved", "sid": 1, "ev": 1, "mod": module},
        {"k": "phase", "ev": 2, "ph": "backward", "step": 1},
        {"k": "free", "sid": 1, "ev": 3, "last": 2},
        {"k": "live", "sid": 0, "last": 3},
        {"k": "step", "step": 1, "ev": 3, "ns": 0},
        {"k": "measured", "source": "cpu-profiler", "device": "cpu", "peak_bytes": 832},
        {"k": "end", "ev": 4, "status": "ok"},
    ]


def test_report_data_of_a_tiny_ledger():
    d = report_data(Ledger.from_records(tiny_records()), "tiny.ledger")
    assert d["x"] == [0, 1, 2, 3]
    assert d["categories"] == ["parameter", "activation"]
    assert d["series"] == {"parameter": [400, 400, 400, 400], "activation": [0, 400, 400, 0]}
    assert d["peak"]["bytes"] == 800 and d["peak"]["event"] == 1      # 400 + 400
    assert d["peak"]["human"] == "800 B"
    assert d["measured"]["peak_bytes"] == 832
    assert d["at_peak"]["workspace"] == 32                              # 832 - 800
    assert d["phases"] == [[0, 2, "forward", 1], [2, 4, "backward", 1]]
    assert d["step_ends"] == [3]
    assert [(r["category"], r["bytes"], r["freed"]) for r in d["top"]] == [
        ("parameter", 400, 4), ("activation", 400, 3)]     # freed 4 = n_events: live at end
    assert d["activations"] == {"saved_bytes": 400, "by_module": [["fc", 400]]}
    assert d["idle"] == []   # the activation: last used at 2, freed at 3 -> 3 - 1 - 2 = 0


def test_a_million_events_downsample_to_max_points_and_keep_the_peak():
    n = 1_000_000
    led = Ledger.from_records([
        HEAD,
        {"k": "alloc", "sid": 0, "ev": 0, "bytes": 8, "ph": "forward"},
        {"k": "alloc", "sid": 1, "ev": 765_432, "bytes": 1024, "ph": "forward"},
        {"k": "free", "sid": 1, "ev": 765_433},
        {"k": "end", "ev": n, "status": "ok"},
    ])
    d = report_data(led, max_points=2000)
    # buckets of ceil(1e6 / 2000) = 500 events -> 2000 points; the one-event spike survives
    assert len(d["x"]) == 2000
    assert 765_432 in d["x"]
    totals = [sum(d["series"][c][i] for c in d["categories"]) for i in range(len(d["x"]))]
    assert max(totals) == d["peak"]["bytes"] == 1032                   # 8 + 1024


def test_page_is_self_contained_and_escapes_ledger_text():
    evil = "</script><script>alert(1)</script>"
    html = render_html(Ledger.from_records(tiny_records(module=evil)), "tiny")
    assert "alert(1)</script>" not in html          # neither in the JSON nor in the tables
    # JSON-escaped form: <, > and & never appear raw inside the <script> (issue 10)
    assert "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in html
    # no network: nothing is fetched from anywhere
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    data = re.search(r'<script type="application/json" id="ml-data">(.*?)</script>', html, re.S)
    assert json.loads(data.group(1))["peak"]["bytes"] == 800


def test_report_cli(tmp_path):
    ledger = tmp_path / "t.ledger"
    ledger.write_text("\n".join(json.dumps(r) for r in tiny_records()) + "\n")
    out = tmp_path / "t.html"
    assert main(["report", str(ledger), "-o", str(out)]) == 0
    assert 'id="ml-status"' in out.read_text()
    assert main(["report", str(tmp_path / "missing.ledger"), "-o", str(out)]) == 2


def test_the_page_lists_the_summary_notes_show_prints():
    """The notes `show` prints under the peak (the allocator's agreement, memory reference
    cycles held, ...) are on the page too, a warning marked as one."""
    recs = [{**r, "gc": 1} if r["k"] == "free" else r   # freed inside a garbage collection
            for r in tiny_records()]
    led = Ledger.from_records(recs)
    notes = report_data(led)["notes"]
    assert notes[0].startswith("Allocator peak 832 B (cpu-profiler)")
    assert notes[1].startswith("400 B saved for backward (1 storage) went unread")   # no unpack
    assert notes[2].startswith("Warning: Python's garbage collector freed 400 B (1 storage)")
    page = render_html(led, "gc.ledger")
    assert '<li class=warn>Warning: Python&#x27;s garbage collector freed 400 B' in page

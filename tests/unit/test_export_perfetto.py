"""Perfetto / Chrome trace JSON: valid, and the counters at the peak are the ledger's."""

import json

from memledger.cli import main
from memledger.ledger.model import Ledger
from memledger.report.perfetto import trace_events
from test_report_html import tiny_records  # tests/unit is on sys.path (rootdir-less dir)


def counters_at(events: list[dict], ts: int) -> dict[str, int]:
    """The value each counter track holds at `ts`: its last sample at or before ts."""
    out: dict[str, int] = {}
    for e in sorted((e for e in events if e["ph"] == "C"), key=lambda e: e["ts"]):
        if e["ts"] <= ts:
            out[e["name"].removeprefix("live ")] = e["args"]["bytes"]
    return out


def scoped_ledger() -> Ledger:
    recs = tiny_records()
    recs.insert(-1, {"k": "scope", "mod": "fc", "ev0": 1, "ev1": 2, "ph": "forward", "step": 1,
                     "ns": 1000})
    recs.insert(-1, {"k": "scope", "mod": "", "ev0": 0, "ev1": 2, "ph": "forward", "step": 1,
                     "ns": 5000})
    return Ledger.from_records(recs)


def test_counters_at_the_peak_equal_the_ledger():
    led = scoped_ledger()
    events = trace_events(led)
    peak = [e for e in events if e["ph"] == "i"]
    assert len(peak) == 1 and peak[0]["ts"] == 1 and peak[0]["args"]["bytes"] == 800
    at = counters_at(events, 1)
    assert at == {"parameter": 400, "activation": 400}           # 400 + 400 = 800
    assert {c: b for c, b in led.by_category(1).items() if b} == at
    assert peak[0]["args"]["by_category"] == led.at_peak()   # what `show --json` says
    # the activation track falls back to 0 when it is freed at event 3
    assert counters_at(events, 3)["activation"] == 0


def test_the_peak_event_carries_the_allocators_workspace_as_show_does():
    recs = tiny_records()
    recs.append({"k": "measured", "peak_bytes": 848, "source": "cpu-profiler"})
    led = Ledger.from_records(recs)
    peak = [e for e in trace_events(led) if e["ph"] == "i"][0]["args"]
    assert peak["bytes"] == 800 and peak["allocator_bytes"] == 848
    assert peak["by_category"]["workspace"] == 48 == led.at_peak()["workspace"]
    assert sum(peak["by_category"].values()) == 848


def test_slices_for_phases_modules_and_steps():
    events = trace_events(scoped_ledger())
    x = [(e["tid"], e["name"], e["ts"], e["dur"]) for e in events if e["ph"] == "X"]
    assert x == [(1, "forward", 0, 2), (1, "backward", 2, 2),
                 (2, "", 0, 2), (2, "fc", 1, 1),        # parent first, child nested inside
                 (3, "step 1", 0, 4)]                   # step 1 ended after event 3


def test_export_cli_writes_valid_trace_json(tmp_path):
    ledger = tmp_path / "t.ledger"
    ledger.write_text("\n".join(json.dumps(r) for r in tiny_records()) + "\n")
    assert main(["export", str(ledger), "--format", "perfetto"]) == 0
    doc = json.loads((tmp_path / "t.json").read_text())   # default name: ledger + .json
    # ts is an event index, not time: no unit of real time is claimed
    assert "displayTimeUnit" not in doc
    assert doc["otherData"]["time_axis"].startswith("event index")
    assert all({"ph", "pid", "name"} <= set(e) for e in doc["traceEvents"])
    assert main(["export", str(ledger), "--format", "svg"]) == 2


def test_backward_slices_by_module():
    # grads made in backward at events 2 (fc) and 3 (fc), 4 (head): runs fc [2, 4), head [4, 5)
    recs = tiny_records()
    end = recs.pop()
    recs += [
        {"k": "alloc", "sid": 5, "ev": 2, "bytes": 8, "ph": "backward", "mod": "fc"},
        {"k": "alloc", "sid": 6, "ev": 3, "bytes": 8, "ph": "backward", "mod": "fc"},
        {"k": "alloc", "sid": 7, "ev": 4, "bytes": 8, "ph": "backward", "mod": "head"},
        {**end, "ev": 5},
    ]
    events = trace_events(Ledger.from_records(recs))
    bw = [(e["name"], e["ts"], e["dur"]) for e in events if e.get("tid") == 4 and e["ph"] == "X"]
    assert bw == [("fc", 2, 2), ("head", 4, 1)]

"""`memledger diff`: peak, categories, modules and tensors, with the arithmetic."""

import json

from memledger.cli import main
from memledger.ledger.model import Ledger
from memledger.report.diff import diff_ledgers
from test_report_html import tiny_records  # tests/unit is on sys.path (rootdir-less dir)


def grown_records() -> list[dict]:
    """B: the activation grows 400 -> 1200 B (shape 4x25 -> 4x75) and a new 100 B temporary
    lives on [1, 2). Live: ev0 400, ev1 400+1200+100 = 1700 (peak), ev2 1600, ev3 400."""
    recs = [dict(r) for r in tiny_records()]
    for r in recs:
        if r["k"] == "alloc" and r["sid"] == 1:
            r.update(bytes=1200, shape=[4, 75])
        if r["k"] == "measured":
            r["peak_bytes"] = 1732                   # workspace stays 32 B
    recs[5:5] = [{"k": "alloc", "sid": 2, "ev": 1, "bytes": 100, "ph": "forward", "mod": "fc",
                  "op": "aten.add.Tensor", "dtype": "float32", "shape": [25]},
                 {"k": "free", "sid": 2, "ev": 2, "last": 1}]
    return recs


def test_diff_by_peak_category_module_and_tensor():
    d = diff_ledgers(Ledger.from_records(tiny_records()), Ledger.from_records(grown_records()))
    assert (d.peak.a, d.peak.b, d.peak.delta) == (800, 1700, 900)
    assert (d.measured.a, d.measured.b, d.measured.delta) == (832, 1732, 900)
    changed = {c: (x.a, x.b, x.delta) for c, x in d.at_peak.items() if x.a or x.b}
    assert changed == {"parameter": (400, 400, 0), "activation": (400, 1200, 800),
                       "temporary": (0, 100, 100), "workspace": (32, 32, 0)}
    # module "fc" owns the parameter, the activation and the temporary: 800 -> 1700
    assert [(m.module, m.a, m.b, m.delta) for m in d.by_module] == [("fc", 800, 1700, 900)]
    assert [(m.module, m.delta) for m in d.saved_by_module] == [("fc", 800)]
    assert [(t.category, t.what, t.shape, t.a, t.b, t.delta, t.new) for t in d.grown] == [
        ("activation", "aten.relu.default", "4x75", 400, 1200, 800, False),
        ("temporary", "aten.add.Tensor", "25", 0, 100, 100, True)]


def test_what_shrank_is_listed_too():
    # the other way round: B -> A, the relu output shrank and the add's output is gone
    # (a category's net change once hid tensors that shrank behind new ones)
    d = diff_ledgers(Ledger.from_records(grown_records()), Ledger.from_records(tiny_records()))
    assert [(t.what, t.a, t.b, t.delta, t.gone) for t in d.shrunk] == [
        ("aten.relu.default", 1200, 400, -800, False), ("aten.add.Tensor", 100, 0, -100, True)]
    assert not d.grown


def test_measured_is_compared_only_when_both_were_measured():
    unmeasured = Ledger.from_records([r for r in grown_records() if r["k"] != "measured"])
    d = diff_ledgers(Ledger.from_records(tiny_records()), unmeasured)
    assert d.measured is None
    assert d.unmeasured == "B was traced with --no-measure"
    assert d.at_peak["workspace"].b == 0            # no allocator view: nothing unexplained


def test_diff_of_a_ledger_with_itself_is_empty():
    led = Ledger.from_records(tiny_records())
    d = diff_ledgers(led, led)
    assert d.peak.delta == 0 and not d.by_module and not d.grown and not d.shrunk
    assert all(x.delta == 0 for x in d.at_peak.values())


def test_diff_cli_json(tmp_path, capsys):
    a, b = tmp_path / "a.ledger", tmp_path / "b.ledger"
    a.write_text("\n".join(json.dumps(r) for r in tiny_records()) + "\n")
    b.write_text("\n".join(json.dumps(r) for r in grown_records()) + "\n")
    assert main(["diff", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "memledger.diff/1"
    assert out["peak"] == {"a": 800, "b": 1700, "delta": 900}
    assert out["grown"][0]["delta"] == 800
    assert main(["diff", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "Peak 800 B → 1.7 KiB  +900 B (+900 B)" in text
    assert any(line.split()[:3] == ["+100", "B", "│"] and "new" in line
               for line in text.splitlines())

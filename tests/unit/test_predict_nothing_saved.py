"""predict on a ledger where nothing was saved for backward (inference, no_grad) says
why every policy reads +0 B, instead of a bare table of zeros."""

import json

from memledger.cli import main
from test_report_html import tiny_records  # tests/unit is on sys.path


def write(tmp_path, records) -> str:
    records = list(records)
    records.insert(-1, {"k": "scope", "mod": "fc", "ev0": 1, "ev1": 2, "ph": "forward",
                        "step": 1, "ns": 1000})      # fc's forward call: what a policy selects
    path = tmp_path / "t.ledger"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return str(path)


def test_nothing_saved_is_said(tmp_path, capsys):
    no_saves = [r for r in tiny_records() if r["k"] != "saved"]
    assert main(["predict", write(tmp_path, no_saves), "-p", "checkpoint:fc"]) == 0
    out = capsys.readouterr().out
    assert "nothing in this ledger was saved for backward" in " ".join(out.split())


def test_a_ledger_with_saves_says_nothing_of_the_kind(tmp_path, capsys):
    assert main(["predict", write(tmp_path, tiny_records()), "-p", "checkpoint:fc"]) == 0
    assert "nothing in this ledger was saved" not in capsys.readouterr().out

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


def test_a_save_list_name_no_op_had_is_named(tmp_path, capsys):
    # op names as the collector writes them (`relu.default`)
    recs = [{**r, "op": "relu.default"} if r.get("op") else r for r in tiny_records()]
    path = write(tmp_path, recs)
    # bmm reaches the dispatcher; matmul, which never does, is refused instead
    # (tests/unit/test_aten_names.py)
    assert main(["predict", path, "-p", "selective:fc:save=bmm,relu"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "save=bmm: no op of that name ran in the traced steps" in out
    assert "save=relu:" not in out                 # relu ran
    assert main(["predict", path, "-p", "selective:fc"]) == 0   # the default list: silent
    assert "no op of that name" not in capsys.readouterr().out


def test_a_ledger_cut_off_before_its_first_backward_is_predicted(tmp_path, capsys):
    """A script that raised in its first forward leaves a partial ledger with saves and no
    backward phase: predict read the backward phases' ends and failed (IndexError, exit 70)."""
    cut = []
    for r in tiny_records():
        if r["k"] == "phase" and r.get("ph") == "backward":
            break
        cut.append(r)
    cut.append({"k": "end", "ev": max(r.get("ev", 0) for r in cut) + 1, "status": "error",
                "message": "script raised ValueError"})
    assert any(r["k"] == "saved" for r in cut)
    assert main(["predict", write(tmp_path, cut), "-p", "checkpoint:fc"]) == 0
    assert "checkpoint:fc" in capsys.readouterr().out

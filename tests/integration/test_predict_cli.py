"""`memledger predict` and `memledger measure` through the real CLI on the tiny GPT."""

from __future__ import annotations

import json

import pytest

from memledger.cli import main


@pytest.fixture(scope="module")
def gpt_ledger(traced_examples):
    return traced_examples["gpt"]   # 3 steps, traced once per test run (tests/conftest.py)


def test_predict_json_contract(gpt_ledger, capsys):
    capsys.readouterr()
    rc = main(["predict", str(gpt_ledger), "--policy", "none", "--policy",
               "checkpoint:blocks.*", "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "memledger.predict/1"
    base, ck = data["policies"]
    assert base["peak_bytes"] == data["baseline_peak_bytes"]
    assert ck["peak_bytes"] < base["peak_bytes"] and ck["added_time_s"] > 0
    assert set(ck["at_peak"]) >= {"parameter", "activation", "workspace", "other"}
    assert ck["regions"] == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]


@pytest.mark.parametrize("policy,needle", [
    ("checkpoint:layers.*", "matches no module"),
    ("explode:blocks.*", "unknown policy kind"),
    ("checkpoint:blocks.0+checkpoint:blocks.0.attn", "regions nest"),
])
def test_predict_bad_policy_exits_2_with_one_line(gpt_ledger, capsys, policy, needle):
    capsys.readouterr()
    assert main(["predict", str(gpt_ledger), "--policy", policy]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and err.startswith("memledger:")


def test_measure_bad_selector_exits_2(capsys):
    capsys.readouterr()
    assert main(["measure", "examples/train_mlp.py", "--policy", "checkpoint:blocks.*",
                 "--steps", "1", "--time-steps", "1"]) == 2
    assert "matches no module" in capsys.readouterr().err

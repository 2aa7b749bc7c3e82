"""CPU peaks are deterministic, so tight budgets do not flake: ten real traces of the MLP
example (in this process, `memledger.trace()` around the unmodified script), each checked
against the bundled budget (configs/budget_mlp.toml, within 1% of the peak), give the same
bytes every time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import memledger
from memledger.budget import evaluate, load_budget
from memledger.trace.script import run_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ten_checks_give_the_same_bytes(monkeypatch):
    monkeypatch.setattr(sys, "argv", list(sys.argv))       # run_script sets argv and path
    monkeypatch.setattr(sys, "path", list(sys.path))
    budget, _ = load_budget(ROOT / "configs" / "budget_mlp.toml")
    seen = []
    for _ in range(10):
        with memledger.trace() as led:
            run_script(ROOT / "examples" / "train_mlp.py", ["--steps", "2"])
        r = evaluate(led.ledger, budget)
        seen.append((r.ok, r.peak_bytes, [lim.actual_bytes for lim in r.limits]))
    assert seen == [seen[0]] * 10
    ok, peak, (peak_again, opt_state) = seen[0]
    # the ledger peak (no allocator pass in-process), inside Adam's first step:
    # params 1,597,480 + grads 1,597,480 + Adam state 3,194,984 + Adam's temporaries
    # 2,101,764 + the batch (x 64x256x4 = 65,536 + y 64x8 = 512) 66,048 = 8,557,756 B
    assert ok and peak == peak_again == 8_557_756
    assert opt_state == 3_194_984           # 2 x 4 B x 399,370 parameters + 6 fp32 steps x 4 B
    assert peak <= budget.peak.bytes < peak * 1.01          # the bundled budget is tight

"""`memledger check` on a fake ledger whose peak is an upper bound (Note [A fake peak that
is an upper bound], memledger/budget/evaluate.py)."""

from __future__ import annotations

import json

import memledger
from memledger.cli import main

SIMULATED = "ledger (a fake run: simulated, no allocator"


def _fake_ledger(path, bound_first: bool):
    """A fake ledger with one `nonzero` of unknown values (upper bound: 4,096 rows of 2
    int64, 65,536 B), before the peak or after it."""
    import torch

    with memledger.trace(path, fake=True):
        x = torch.nn.Linear(64, 64, bias=False).weight.detach()   # values no fake run has
        if bound_first:
            (x > 0).nonzero()
        big = torch.empty(256, 256)   # 262,144 B: the peak, with x
        del big
        if not bound_first:
            (x > 0).nonzero()
    return path


def test_check_says_a_fake_peak_is_an_upper_bound(tmp_path, capsys):
    """Before: "ledger (a fake run: simulated, no allocator)" whatever stand-ins sized the
    peak; torchmd-net's fake peak (warp's neighbour list at all `max_num_pairs`) is 2.2x
    the real one, and `check` did not say so."""
    led = _fake_ledger(tmp_path / "bound.ledger", bound_first=True)
    assert main(["check", str(led), "--budget", "1GiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["peak_source"] == (
        SIMULATED + "; an upper bound: 1 size read off values the run does not have took "
        "its upper bound, first aten.nonzero.default at test_check_fake_bound.py:22)")


def test_check_says_nothing_of_a_bound_after_the_peak(tmp_path, capsys):
    led = _fake_ledger(tmp_path / "late.ledger", bound_first=False)
    assert main(["check", str(led), "--budget", "1GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_source"] == SIMULATED + ")"

"""Losses whose backward torch writes as a formula of its own (tests/clients/train_losses.py),
under bf16 autocast, where the loss's backward holds the step's peak: the ledger equals the
allocator and every policy's prediction equals its measurement, to the byte.

`bce_pos_weight` is the case Note [A derivative formula in place but for the mode]
(trace/collector.py) was made for: its backward chains five in-place ops untraced, and the
traced ledger read 54,604 B over the allocator before (`checkpoint:blocks.0` 21,836 B over
measured)."""

from __future__ import annotations

import pytest

from tests.clients.harness import gaps_of, run_client

pytestmark = pytest.mark.clients

POLICIES = ["checkpoint:blocks.*", "checkpoint:blocks.0", "selective:blocks.*",
            "offload:blocks.*", "checkpoint:blocks.0+offload:blocks.1"]


@pytest.mark.parametrize("loss", ["bce_pos_weight", "label_smoothing"])
def test_loss_under_autocast_is_exact(loss):
    run = run_client("train_losses.py", ["--loss", loss, "--amp"], POLICIES)
    assert gaps_of(run) == {}
    assert all(p.measured for p in run.policies.values())   # every policy ran

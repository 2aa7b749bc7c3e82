"""Note [CTC's target lengths] (trace/collector.py): `F.ctc_loss` with reduction "mean"
divides by the clamped target lengths, made untraced in the loss's dtype from a list of the
lengths, and under a dispatch mode by clamping the integer lengths tensor itself. The
collector clamps them cast to the loss's dtype, as the untraced run does: the divisor the
ledger records (and `DivBackward0` saves) has the untraced bytes, and the loss is the same."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import memledger

N, T, C, S = 8, 24, 17, 6   # sequences, frames, classes (blank 0), target length


def _ctc(reduction: str, amp: bool = False) -> torch.Tensor:
    torch.manual_seed(0)
    head = torch.nn.Linear(16, C)
    x = torch.randn(T, N, 16)
    targets = torch.randint(1, C, (N, S))
    in_lens = torch.full((N,), T, dtype=torch.long)
    tgt_lens = torch.randint(2, S + 1, (N,))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):   # the loss in fp32
        log_probs = head(x).log_softmax(-1)   # bf16 under autocast
        loss = F.ctc_loss(log_probs, targets, in_lens, tgt_lens, reduction=reduction)
    loss.backward()
    return loss.detach()


def _divisors(led):
    st = led.storages
    return st[st["op"] == "clamp_min.default"]


@pytest.mark.parametrize("amp", [False, True])
def test_the_mean_divisor_has_the_loss_dtype_as_untraced(tmp_path, amp):
    plain = _ctc("mean", amp)
    with memledger.trace(tmp_path / "a.ledger") as led:
        traced = _ctc("mean", amp)
    assert torch.equal(traced, plain)
    div = _divisors(led)
    assert len(div) == 1
    assert div["dtype"].iloc[0] == "float32" and div["bytes"].iloc[0] == N * 4   # not int64
    # the division reads a float divisor: no cast of the lengths noted as its scratch
    assert all(b != N * 4 for r in led.extra.get("scalars", []) for b in r.get("cbytes", []))


def test_a_sum_has_no_divisor_and_a_scripts_own_clamp_stays_integer(tmp_path):
    with memledger.trace(tmp_path / "a.ledger") as led:
        _ctc("sum")
        torch.randint(2, S + 1, (N,)).clamp_min(1)   # not the loss's: int64 as written
    div = _divisors(led)
    assert div["dtype"].tolist() == ["int64"] and div["bytes"].tolist() == [N * 8]

"""Note [A derivative formula in place but for the mode] (trace/collector.py): the backward
of `binary_cross_entropy_with_logits` chains in-place ops on its own temporaries untraced
and runs them out of place under a dispatch mode. The traced chain is folded into one
buffer where each temporary is read by nothing after the op, and only in the table's
formulas."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import memledger

N, C = 64, 40
BUF = N * C * 4   # one (N, C) fp32 buffer: 10,240 B


def _bce(pos_weight: bool) -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(8, C)
    logits = head(torch.randn(N, 8))
    target = torch.rand(N, C)
    kw = {"pos_weight": torch.full((C,), 2.0)} if pos_weight else {}
    F.binary_cross_entropy_with_logits(logits, target, **kw).backward()


def _most_buffers_at_once(led) -> int:
    """The most (N, C) buffers the backward made that were live at one event."""
    st = led.storages
    bw = st[(st["phase"] == "backward") & (st["bytes"] == BUF)]
    events = sorted(set(bw["created"]))
    return max(int(((bw["created"] <= e) & (bw["freed"] > e)).sum()) for e in events)


def _trace(tmp_path, fn):
    with memledger.trace(tmp_path / "a.ledger") as led:
        fn()
    return led, led.extra.get("inplace", [])


def test_pos_weight_chain_is_one_buffer_as_untraced(tmp_path):
    led, folds = _trace(tmp_path, lambda: _bce(pos_weight=True))
    # t.add(1).sub_(target).mul_(sigmoid).sub_(t), then .mul_(grad): four folds
    assert sorted(f["op"] for f in folds) == ["mul_", "mul_", "sub_", "sub_"]
    st = led.storages
    for f in folds:
        into, made = st.loc[f["in"]], st.loc[f["sid"]]
        assert into["bytes"] == made["bytes"] == BUF
        assert into["freed"] == made["created"]
    # untraced: t = pos_weight * target, the chain, and the sigmoid
    assert _most_buffers_at_once(led) == 3


def test_plain_chain_is_one_buffer(tmp_path):
    led, folds = _trace(tmp_path, lambda: _bce(pos_weight=False))
    assert sorted(f["op"] for f in folds) == ["mul_", "sub_"]   # sigmoid().sub_(target).mul_(grad)
    assert _most_buffers_at_once(led) == 1


def test_a_formula_out_of_place_both_ways_keeps_its_temporaries(tmp_path):
    def acos():   # grad * -((-x * x + 1).rsqrt()): out of place untraced too
        x = torch.rand(N, C, requires_grad=True)
        torch.acos(x).sum().backward()
    led, folds = _trace(tmp_path, acos)
    assert folds == []
    assert _most_buffers_at_once(led) >= 3


def test_clamp_to_tensor_bounds_ands_its_masks_in_place(tmp_path):
    def clamp():   # (x >= lo).logical_and_(x <= hi): two (N, C) bool masks, not three
        x = torch.randn(N, C, requires_grad=True)
        torch.clamp(x * 2, min=torch.zeros(C), max=torch.ones(C)).sum().backward()
    led, folds = _trace(tmp_path, clamp)
    assert [f["op"] for f in folds] == ["logical_and_"]
    st = led.storages
    into, made = st.loc[folds[0]["in"]], st.loc[folds[0]["sid"]]
    assert into["bytes"] == made["bytes"] == N * C and into["freed"] == made["created"]


def test_masked_select_scatters_into_its_zeros_in_place(tmp_path):
    def select():   # zeros_like(x).masked_scatter_(mask, grad)
        x = torch.randn(N, C, requires_grad=True)
        (x * 2).masked_select(x > 0).sum().backward()
    led, folds = _trace(tmp_path, select)
    assert [f["op"] for f in folds] == ["masked_scatter_"]
    st = led.storages
    into, made = st.loc[folds[0]["in"]], st.loc[folds[0]["sid"]]
    assert into["op"] == "zeros_like.default" and into["freed"] == made["created"]
    assert made["bytes"] == BUF

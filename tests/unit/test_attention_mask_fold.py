"""Note [The attention mask, added in place but for the mode] (trace/collector.py): torch's
math attention adds a float mask into its scores in place untraced, out of place under a
dispatch mode. The traced sum is folded into the scores (the scores go at the add) where
the next op is the math path's `_safe_softmax` of the sum, and only there."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import memledger

pytest.importorskip("torch.nn.attention")
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

B, H, L, D = 2, 4, 32, 8
SCORES = B * H * L * L * 4   # the fp32 scores, (2, 4, 32, 32): 32,768 B


def _attention(math: bool) -> None:
    torch.manual_seed(0)
    proj = torch.nn.Linear(D, 3 * D)
    opt = torch.optim.SGD(proj.parameters(), lr=0.1)
    q, k, v = proj(torch.randn(B, H, L, D)).chunk(3, dim=-1)
    mask = torch.randn(B, H, L, L)
    if math:
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:   # eager attention: `scores + mask` is out of place untraced too
        scores = (q @ k.transpose(-2, -1)) * D ** -0.5
        out = torch.softmax(scores + mask, dim=-1) @ v
    out.sum().backward()
    opt.step()


def _folds(tmp_path, math: bool) -> list[dict]:
    with memledger.trace(tmp_path / "a.ledger") as led:
        _attention(math)
    return led, led.extra.get("inplace", [])


def test_the_math_attentions_mask_add_is_folded_into_the_scores(tmp_path):
    led, folds = _folds(tmp_path, math=True)
    assert len(folds) == 1
    st = led.storages
    into, made = st.loc[folds[0]["in"]], st.loc[folds[0]["sid"]]
    assert made["op"] == "add_" and made["bytes"] == into["bytes"] == SCORES
    assert into["op"] == "bmm.default"
    assert into["freed"] == made["created"]   # the scores go at the add: one buffer


def test_a_scripts_own_scores_plus_mask_stays_out_of_place(tmp_path):
    led, folds = _folds(tmp_path, math=False)
    assert folds == []
    st = led.storages
    sums = st[(st["op"] == "add.Tensor") & (st["bytes"] == SCORES)]
    assert len(sums) == 1

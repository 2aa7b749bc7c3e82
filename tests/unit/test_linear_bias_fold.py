"""Note [A Linear's bias, added in place but for the mode] (trace/collector.py): `F.linear`
of an input it cannot flatten into one `addmm` runs `matmul` and adds the bias in place
untraced, out of place under a dispatch mode. The traced sum is folded into the `matmul`
output where the caller is `nn.Linear` (or an RNN layer) or torch's functional multi-head
attention, and only there: a script's own `x @ w.t() + b` is out of place untraced too."""

from __future__ import annotations

import torch

import memledger

B, L, E = 4, 16, 32
KV = B * L * 2 * E * 4   # the key/value projection of (B, L, E) fp32: 16,384 B


def _pool(own_sum: bool) -> None:
    """Attention pooling: one learned probe attends over a batch-first sequence, as
    SigLIP's head does; the key and value come from one `linear` of a transposed input."""
    torch.manual_seed(0)
    attn = torch.nn.MultiheadAttention(E, 2, batch_first=True)
    probe = torch.nn.Parameter(torch.randn(1, 1, E))
    opt = torch.optim.SGD([*attn.parameters(), probe], lr=0.1)
    x = torch.randn(B, L, E)
    if own_sum:   # the same projection written out by hand: out of place both ways
        w, b = attn.in_proj_weight[E:], attn.in_proj_bias[E:]
        out = x.transpose(0, 1) @ w.t() + b
    else:
        out, _ = attn(probe.expand(B, 1, E), x, x, need_weights=False)
    out.sum().backward()
    opt.step()


def _folds(tmp_path, own_sum: bool):
    with memledger.trace(tmp_path / "a.ledger") as led:
        _pool(own_sum)
    st = led.storages
    # the sums before backward (a script with no module call of its own is all `setup`)
    sums = st[st["op"].isin(["add.Tensor", "add_"]) & (st["bytes"] == KV)
              & ~st["phase"].isin(["backward", "optimizer"])]
    return st, sums, led.extra.get("inplace", [])


def test_multi_head_attentions_key_value_bias_is_folded_into_its_matmul(tmp_path):
    st, sums, folds = _folds(tmp_path, own_sum=False)
    assert len(sums) == 1 and sums["op"].iloc[0] == "add_"
    fold = next(f for f in folds if f["sid"] == sums.index[0])
    into = st.loc[fold["in"]]
    assert into["bytes"] == KV and into["freed"] == sums["created"].iloc[0]   # one buffer


def test_a_scripts_own_matmul_plus_bias_stays_out_of_place(tmp_path):
    _, sums, _ = _folds(tmp_path, own_sum=True)
    assert len(sums) == 1 and sums["op"].iloc[0] == "add.Tensor"

"""Saved-for-backward bytes of one GPT block, counted by hand, against the API's ledger.

B=2, T=5, C=12, nh=3 (hs=4), dropout 0, fp32. What autograd keeps (not parameters, not the
block input x):
  ln_1: mean, rstd (B, T, 1) each                      2 × B·T·4       =   80
  c_attn: its input ln_1(x) (B·T, C)                   B·T·C·4         =  480
  q @ kᵀ: q and kᵀ copied contiguous for bmm           2 × B·T·C·4     =  960
  masked_fill: the mask (1, 1, T, T) bool              T·T·1           =   25
  softmax: its output (B, nh, T, T)                    B·nh·T·T·4      =  600
  att @ v: v copied contiguous (softmax output already counted)  B·T·C·4 = 480
  c_proj: y made contiguous (B, T, nh, hs)             B·T·C·4         =  480
  ln_2: its input x + attn (B, T, C), mean, rstd       B·T·C·4 + 2·B·T·4 = 560
  c_fc: its input ln_2(x)                              B·T·C·4         =  480
  gelu: its input c_fc(x) (B·T, 4C)                    B·T·4C·4        = 1920
  mlp.c_proj: gelu's output                            B·T·4C·4        = 1920
                                                                 total = 7985
"""

import torch

import memledger
from tests.conftest import load_example

B, T, C, NH = 2, 5, 12, 3


def test_gpt_block_saved_activations_exact():
    ex = load_example("gpt")
    cfg = ex.GPTConfig(vocab_size=16, block_size=T, n_layer=1, n_head=NH, n_embd=C, dropout=0.0)
    torch.manual_seed(0)
    block = ex.Block(cfg)
    x = torch.randn(B, T, C)
    with memledger.trace() as led:
        block(x).sum().backward()
    _, saved = led.saved_before_backward()
    f = 4  # bytes per fp32 element
    expected = {
        "ln_1": 2 * B * T * f,
        "attn.c_attn": B * T * C * f,
        # q, k; the causal mask (bool); the softmax output; v; and the scale
        # 1 / sqrt(head size), a Python float `mul` saves as a wrapped float64 (Note
        # [Wrapped scalars saved for backward])
        "attn": 2 * B * T * C * f + T * T + B * NH * T * T * f + B * T * C * f + 8,
        "attn.c_proj": B * T * C * f,
        "ln_2": B * T * C * f + 2 * B * T * f,
        "mlp.c_fc": B * T * C * f,
        "mlp.gelu": B * T * 4 * C * f,
        "mlp.c_proj": B * T * 4 * C * f,
    }
    assert saved.groupby("saved_module")["bytes"].sum().to_dict() == expected
    assert saved["bytes"].sum() == 7993
    # the block input is not an activation, and parameters never are
    assert led.storages.loc[led.storages["pre"], "category"].isin(
        ["parameter", "buffer", "input", "other"]).all()


def test_views_and_split_never_double_count():
    # qkv = Linear(x) is one storage of B·T·3C·4 bytes; split/view/transpose add none.
    lin = torch.nn.Linear(C, 3 * C)
    x = torch.randn(B, T, C)
    with torch.no_grad(), memledger.trace() as led:
        qkv = lin(x)
        q, k, v = qkv.split(C, dim=2)
        q.view(B, T, NH, C // NH).transpose(1, 2)
        k.t() if k.dim() == 2 else k.transpose(0, 1)
    made = led.storages[~led.storages["pre"]]
    assert made["bytes"].tolist() == [B * T * 3 * C * 4]


def test_gradients_accumulate_into_one_storage():
    # Two backward passes without zero_grad: .grad is accumulated in place, one storage.
    lin = torch.nn.Linear(C, C, bias=False)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(B, C)
    with memledger.trace() as led:
        lin(x).sum().backward()
        lin(x).sum().backward()
        opt.step()
    grads = led.storages[led.storages["category"] == "gradient"]
    assert grads["bytes"].tolist() == [C * C * 4]


def test_a_sparse_gradient_is_its_indices_and_its_values():
    """Note [Sparse tensors]: nn.Embedding(1000, 8, sparse=True) looked up with 4 x 5 ids
    has a sparse COO gradient of 20 rows: indices (1, 20) int64 = 160 B and values (20, 8)
    fp32 = 640 B, both counted as the gradient (before, neither was: a sparse tensor has no
    storage of its own); SparseAdam's coalesced copy is the same two sizes again."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(1000, 8, sparse=True)
    ids = torch.randint(0, 1000, (4, 5))
    opt = torch.optim.SparseAdam(emb.parameters())
    with memledger.trace() as led:
        emb(ids).sum().backward()
        opt.step()
    st = led.storages
    assert sorted(st.loc[st["category"] == "gradient", "bytes"]) == [160, 640]
    assert sorted(st.loc[st["op"] == "_coalesce.default", "bytes"]) == [160, 640]


def test_compare_captures_a_sparse_gradient_dense():
    """`compare`'s gates read a sparse gradient as the dense update it makes (before, its
    `isfinite` check raised inside the user's script and compare blamed the script)."""
    from memledger.verify.capture import _cpu, bitwise_equal

    g = torch.sparse_coo_tensor(torch.tensor([[0, 3, 3]]), torch.ones(3, 2), (5, 2))
    dense = _cpu(g)
    assert dense.layout is torch.strided and dense[3].tolist() == [2.0, 2.0]
    assert bool(torch.isfinite(dense).all()) and bitwise_equal(dense, _cpu(g.coalesce()))


def test_an_unpacked_tensor_goes_when_its_node_returns():
    """Note [When an unpacked tensor goes]: AddmmBackward0 reads the Linear's input h; after
    the node returned autograd sums the (5, 3) bias gradient to (3,) and only then releases
    h. The unpack's `end` falls before that sum, h's free after it: a copy checkpoint made
    again goes at `end`, 3 floats sooner than the baseline's h."""
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4, requires_grad=True)
    with memledger.trace() as led:
        lin(x * 2).sum().backward()     # x * 2 saves nothing: only addmm saves h
    st = led.storages
    h = st[st["op"] == "mul.Tensor"].iloc[0]            # the forward's; then backward's x2
    (bias_sum,) = [r for _, r in st[st["op"] == "sum.dim_IntList"].iterrows()]
    assert (h["bytes"], bias_sum["bytes"]) == (5 * 4 * 4, 3 * 4)
    assert h["unpack_ev"] < h["unpack_end_ev"] <= bias_sum["created"] < h["freed"]

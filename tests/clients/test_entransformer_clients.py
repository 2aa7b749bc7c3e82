"""En-transformer (tests/clients/train_entransformer.py): lucidrains' E(n)-equivariant
transformer on random point clouds (tokens, 3-D coordinates, edge tokens, a mask of padded
nodes), trained as its README writes it: `EnTransformer(num_tokens, dim, depth, neighbors,
edge_dim, num_edge_tokens, ...)`, a plain Adam loop denoising the coordinates plus a
cross-entropy on the tokens.

Measured (`tests/clients/harness.py run_client`, the helper hunt46g, 2026-12-06, torch
2.13.0 CPU, one thread, 2 steps; every one equal in predict and measure, and the ledger
equal to the allocator):
- the README's loop (2 blocks, dim 16, 2 heads of 32, 4 neighbours, masked, edge tokens):
  741,964 B; `checkpoint:layers.*` 534,700 B, `offload:layers.*` 356,776 B,
  `selective:@EquivariantAttention` 620,808 B, `checkpoint:@EquivariantAttention`
  550,440 B, `offload:@FeedForward` 718,348 B, `checkpoint:layers.0+offload:layers.1`
  534,700 B. `--bf16` 607,268 B in the ledger (614,212 B with kernel scratch, = the
  allocator); `--dropout 0.1 --accumulate 2` 809,940 B; `--linear-heads 2 --cross`
  (Taylor-series linear attention, cross products) 985,892 B: every policy above exact.
- `--adj` (the README's chain adjacency, `num_adj_degrees=2`): 1,392,056 B;
  `offload:layers.*` 529,340 B, `offload:@FeedForward` 1,368,440 B; every checkpoint and
  selective policy on the blocks or the attention refused alike, as each attention writes
  the adjacency it is handed (`adj_mat.masked_fill_`): Note [A tensor handed in a tuple or
  by keyword], trace/outside_state.py.
- `--ckpt` (the library's `checkpoint=True`: `checkpoint_sequential`, reentrant):
  428,912 B; every policy on the first block or inside it refused alike, naming layers.0
  (Note [The module a checkpointed function runs first], trace/script_checkpoint.py).
  (En-transformer 1.6.6 hands `checkpoint_sequential` a tuple: under the reentrant
  checkpoint the blocks' parameters get no gradients; and it needs `neighbors` with a
  mask, else `k_mask` is unset: the library's, left alone.)
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("en_transformer") is None:
    pytest.skip("En-transformer is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]

SCRIPT = "train_entransformer.py"


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """en_transformer (einx, taylor_series_linear_attention, jaxtyping) imported before the
    first pass; in a fixture, not at the module's top, which every worker imports."""
    import en_transformer  # noqa: F401


def test_entransformer_readme_loop():
    """The README's model and loop: every policy exact, and the doctor finds nothing."""
    pols = {"checkpoint:layers.*": 534_700, "offload:layers.*": 356_776,
            "selective:@EquivariantAttention": 620_808}
    run = run_client(SCRIPT, [], list(pols))
    assert run.ledger_peak == run.allocator_peak == 741_964
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error(SCRIPT, [], 2, None, "")


def test_an_adjacency_written_in_place_handed_in_a_tuple_and_by_keyword():
    """`--adj`: each attention does `adj_mat.masked_fill_(self_mask, False)` on the
    adjacency its block hands it by keyword, the block being handed it inside one tuple
    (`Block.forward(inp)`). predict refused `checkpoint:layers.*` as a write into "a tensor
    it keeps from before (a metric's running sums, a counter)" while measure, which saw no
    changed argument in the tuple, measured 901,640 B; `checkpoint:@EquivariantAttention`
    was refused by both in two different lines (the trace never saw keyword arguments).
    Both now refuse alike, naming the changed input (Note [A tensor handed in a tuple or by
    keyword], trace/outside_state.py)."""
    run = run_client(SCRIPT, ["--adj"], ["checkpoint:layers.*",
                                         "checkpoint:@EquivariantAttention",
                                         "offload:layers.*"], steps=1)
    assert run.ledger_peak == run.allocator_peak
    for policy, module in (("checkpoint:layers.*", "layers.0"),
                           ("checkpoint:@EquivariantAttention", "layers.0.attn.fn")):
        p = run.policies[policy]
        assert p.predicted is None and p.measured is None, (policy, p)
        assert p.predict_refusal == p.measure_refusal, (policy, p)
        assert p.predict_refusal.startswith(
            f"memledger: {policy} would re-run {module}, whose forward changes the tensor "
            "it is handed in place")
    off = run.policies["offload:layers.*"]
    assert off.predicted == off.measured


def test_a_checkpointed_closure_is_named_by_its_first_module():
    """`--ckpt`: the library's `checkpoint_sequential` checkpoints a closure, not a
    module's method; the trace names the script's region by the first module run under it
    (layers.0), measure named it by the module being entered: "inside the script's own
    checkpoint of layers.0.ff.fn" against predict's "of layers.0" (Note [The module a
    checkpointed function runs first], trace/script_checkpoint.py)."""
    run = run_client(SCRIPT, ["--ckpt"], ["offload:@FeedForward",
                                          "checkpoint:@EquivariantAttention"], steps=1)
    assert run.ledger_peak == run.allocator_peak
    off = run.policies["offload:@FeedForward"]
    ck = run.policies["checkpoint:@EquivariantAttention"]
    for p in (off, ck):
        assert p.measured is None and p.predict_refusal == p.measure_refusal, p
    assert "layers.0.ff.fn, which runs inside the script's own checkpoint of layers.0 " \
        in off.predict_refusal
    assert "layers.0.attn.fn, and the script already checkpoints layers.0 itself" \
        in ck.predict_refusal

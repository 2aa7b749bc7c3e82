"""The two replay fixes pytorch-forecasting showed (tests/clients/test_pf_clients.py, which
skips without it), pinned in plain torch (tests/clients/train_handback.py): a loop by hand
keeps the model's output (`out = model(x)`) until the next step's forward has run. And the
offloader's fix sinkhorn-transformer showed (tests/clients/test_sinkhorn_clients.py): a
save autograd let go of unread, under a graph the loop keeps (`--case unread`, the helper
hunt47b), and a save no backward reads of a storage that stays (`--case shared`,
the helper hunt50d: memformer's memory).

Measured (`tests/clients/harness.py run_client`, the helper pin44, 2026-12-06, torch 2.13.0
CPU; 2 steps, batch 8, hidden 32). "Before" is the replay of ad1f8be~1 (both fixes out) on
the same ledgers; b2b65dc~1 (the first fix in) gives the second's alone.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_weights_a_call_hands_back_are_the_callers():
    """TFT's variable selection, cut down (`select`): the call returns its softmax weights
    beside its output, the model puts them in its output dict, the loop keeps `out` to the
    next forward and no forward op reads them after the call. Read as kept by a line inside
    the region (Rule 10, `_restashed`), the re-run's copy and, through its graph, the
    re-run's saves were held to the next forward: `checkpoint:select` predicted 38,252 B
    against 35,040 B measured (3,212 B over). The collector's `ret` record for the call
    names both storages it hands back, and the replay leaves them to Rule 3 (Note [What a
    call hands back], memledger/replay/engine.py): 35,040 = 35,040."""
    run = run_client("train_handback.py", ["--case", "weights"], ["checkpoint:select"])
    assert run.ledger_peak == run.allocator_peak == 30_000
    ret = [r for r in run.ledger.extra["ret"] if r["mod"] == "select"]
    assert len(ret) == 2 and all(len(r["sids"]) == 2 for r in ret)   # (outputs, weights)
    p = run.policies["checkpoint:select"]
    assert (p.predicted, p.measured) == (35_040, 35_040)


def test_a_read_back_copy_a_save_backward_never_reads_holds():
    """N-BEATS' blocks, cut down (`blocks.*`): each block's ReLU output is saved twice, by
    its backcast and its forecast Linear; the loss reads the forecast alone, so backward
    never unpacks the last block's backcast save, and the loop's `out` (the backcast)
    keeps that node to the next forward. measure's offloader holds a read-back copy until
    every save of its storage is unpacked, so to then; the replay let it go with the
    forecast's node: `offload:blocks.*` predicted 53,784 B against 54,808 B measured, one
    8 x 32 fp32 ReLU output (1,024 B) under at the optimizer step (Note [A save backward
    never reads], memledger/replay/engine.py): 54,808 = 54,808. The peak is at Adam's
    step, with 12 B of kernel scratch the allocator pass measured."""
    run = run_client("train_handback.py", ["--case", "backcast"], ["offload:blocks.*"])
    assert run.ledger_peak == 54_796
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 54_808
    p = run.policies["offload:blocks.*"]
    assert (p.predicted, p.measured) == (54_808, 54_808)


def test_a_save_let_go_of_unread_does_not_hold_the_read_back_copy():
    """Blocks whose tanh output `h` is read by their output Linear and by `h.abs()`, whose
    node dies unread in forward (its output goes to an `argmax`), under
    `retain_graph=True` with `loss` kept to the next step. measure's offloader counted
    the abs save among those to read back and held each block's read-back `h` (8 x 32
    fp32) until the kept graph went: `offload:blocks.*` predicted 40,104 B against
    42,152 B measured. A record autograd lets go of now tells its copy (Note [A save let
    go of unread, for the offloader], memledger/measure/offload.py; found on
    sinkhorn-transformer's sort net, tests/clients/test_sinkhorn_clients.py)."""
    run = run_client("train_handback.py", ["--case", "unread"], ["offload:blocks.*"], steps=1)
    assert run.ledger_peak == 42_652
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 42_664
    p = run.policies["offload:blocks.*"]
    assert (p.predicted, p.measured) == (40_104, 40_104)


def test_a_save_no_backward_reads_holds_the_copy_of_a_storage_that_stays():
    """A memory read by `read` (the prediction's path), by `update` and by the product
    `update(m) * m` outside both (the next memory's path, which no backward reaches), as
    memformer's segment memory is read by the encoder's cross-attention, the memory
    updater and the GRU cell. The product's save keeps `m` on the device, so offload
    copies it; the read-back copy `read`'s backward made was held by `update`'s save,
    never unpacked, until the loop let go of `out` at the next step's forward, and the
    replay let the copy go when `read`'s backward returned: `offload:read+offload:update`
    predicted 33,008 B against 34,032 B measured, one 8 x 32 fp32 memory (1,024 B) under
    (Note [A save backward never reads, of a storage that stays], memledger/replay/
    engine.py; the helper hunt50d). Each alone was exact before and is still."""
    pols = ["offload:read+offload:update", "offload:read", "offload:update"]
    run = run_client("train_handback.py", ["--case", "shared"], pols, steps=1)
    assert run.ledger_peak == 32_996
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 33_008
    for policy, peak in zip(pols, (34_032, 33_008, 33_008)):
        p = run.policies[policy]
        assert (p.predicted, p.measured) == (peak, peak), policy

"""A force field in plain torch (tests/clients/train_forces.py): forces by
`autograd.grad(energy, pos, create_graph=True)`, then the loss's backward through the
graph that pass built. The other side of Note [A dropped storage a later call reads in the
second pass] (replay/engine.py): a storage only the first pass reads, but through a pass
that builds a graph and saves it again, stays refused."""

import pytest

from tests.clients.harness import ledger_pass, predicted_peak, run_client


def test_a_mask_the_force_pass_saves_again_stays_refused():
    """Each block's mask `(b > 0)` is saved by its `mul` alone and read by the force pass
    alone, which saves it again in the graph it builds; the loss's backward reads that
    copy, and torch re-runs the last block again for its `tanh`. Under
    `checkpoint:blocks.*` the first re-run's mask is the force graph's, held into the
    second pass, which the replay does not model (read as a first-pass copy, e3nn's
    forces come out 92,404 B against 92,304 B measured): predict refuses it, `memledger
    measure` runs it (36,884 B, one step), as for e3nn (tests/clients/test_e3nn_clients.py).
    `checkpoint:blocks.0` (its mask read by both passes) is priced as measured, 31,828 B."""
    from memledger.errors import NotPredicted
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    led = ledger_pass("train_forces.py", [], steps=1)
    assert led.peak().bytes == 26_772
    with pytest.raises(NotPredicted, match="would re-run blocks.1 in each of two backward"):
        predict(led, [parse_policy("checkpoint:blocks.*")], bandwidth=1e9)
    assert predicted_peak(led, "checkpoint:blocks.0") == 31_828


def test_a_force_graph_copy_held_through_its_broadcast_sum_is_predicted_as_measured():
    """tests/clients/train_forces_broadcast.py, `checkpoint:emb`: the force pass re-runs
    the embedding and its `mul` saves the copy of `c` (144 edges x 16, float32, 9,216 B);
    in the loss's backward that node's gradient for `c.unsqueeze(1)` (144 x 1 x 16) is
    summed to shape after its apply, and autograd lets go of the node, and the copy, only
    then. The replay let the copy go when the apply returned: 264,984 B predicted against
    274,200 B measured (Note [A copy the force graph holds, let go with its node],
    replay/engine.py)."""
    run = run_client("train_forces_broadcast.py", [], ["checkpoint:emb", "offload:emb"])
    assert run.ledger_peak == run.allocator_peak == 306_008
    assert (run.policies["checkpoint:emb"].predicted,
            run.policies["checkpoint:emb"].measured) == (274_200, 274_200)
    assert (run.policies["offload:emb"].predicted,
            run.policies["offload:emb"].measured) == (268_568, 268_568)

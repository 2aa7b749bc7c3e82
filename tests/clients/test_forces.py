"""A force field in plain torch (tests/clients/train_forces.py): forces by
`autograd.grad(energy, pos, create_graph=True)`, then the loss's backward through the
graph that pass built. The other side of Note [A dropped storage a later call reads in the
second pass] (replay/engine.py): a storage only the first pass reads, but through a pass
that builds a graph and saves it again, stays refused."""

import pytest

from tests.clients.harness import ledger_pass, predicted_peak


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

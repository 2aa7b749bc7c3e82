"""Gradient storages no `.grad` holds any longer (Note [A gradient dropped from .grad],
trace/dropped_grads.py): the collector's watch, and how the ledger reads its `ungrad`
records (ledger/held_roles.py), old ledgers (none) as before."""

from __future__ import annotations

import numpy as np
import pandas as pd

from memledger.ledger.held_roles import dropped_spans, past_gradients


def _one_gradient(freed: int = -1):
    """One gradient storage, sid 7, made at event 2, named `w`."""
    df = pd.DataFrame({"created": [2], "freed": [freed]}, index=pd.Index([7], name="sid"))
    roles = pd.DataFrame({"sid": [7], "role": ["gradient"], "name": ["w"]})
    return df, roles, np.array(["gradient"], dtype=object)


def test_a_drop_moves_a_gradient_from_its_event_and_the_last_record_says():
    df, roles, cats = _one_gradient()
    assert past_gradients(df, roles, cats, [], []).empty          # no record: as before
    got = past_gradients(df, roles, cats, [], [], [{"k": "ungrad", "sid": 7, "ev": 5}])
    assert (got.index.tolist(), got["until"].tolist(), got["name"].tolist()) == \
        ([7], [5], ["w"])
    # a `.grad` again after the drop: the record taken back, the storage stays a gradient
    back = [{"k": "ungrad", "sid": 7, "ev": 5}, {"k": "ungrad", "sid": 7, "ev": -1}]
    assert past_gradients(df, roles, cats, [], [], back).empty
    # dropped again later: from that drop
    again = [*back, {"k": "ungrad", "sid": 7, "ev": 9}]
    assert past_gradients(df, roles, cats, [], [], again)["until"].tolist() == [9]
    # freed at the drop's event: nothing after it to move
    df, roles, cats = _one_gradient(freed=5)
    assert past_gradients(df, roles, cats, [], [],
                          [{"k": "ungrad", "sid": 7, "ev": 5}]).empty


def test_the_watch_sees_a_drop_and_a_gradient_put_back():
    import torch

    from memledger.trace.dropped_grads import DroppedGradients
    from memledger.trace.outside_state import storage_key

    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    key = storage_key(p.grad)
    watch = DroppedGradients()
    assert watch.held(p, key, 7) is False
    assert watch.look({key: 7}) == []                 # still `.grad`
    kept = p.grad
    p.grad = None
    assert watch.look({key: 7}) == [7]                # dropped, alive
    assert watch.look({key: 7}) == []                 # said once
    p.grad = kept
    assert watch.held(p, key, 7) is True              # a `.grad` again: taken back
    p.grad = None
    assert watch.look({}) == []                       # freed: nothing to say
    del kept


def test_a_take_back_with_its_event_closes_a_span():
    """Note [A gradient dropped from .grad, then put back]: a drop, then a take-back that
    says when (`at`), is a span; one without `at` (older ledgers) gives none; the last drop
    with no take-back after it is no span (it is `past_gradients`' cut)."""
    recs = [{"k": "ungrad", "sid": 7, "ev": 5}, {"k": "ungrad", "sid": 7, "ev": -1, "at": 9},
            {"k": "ungrad", "sid": 7, "ev": 12},
            {"k": "ungrad", "sid": 8, "ev": 5}, {"k": "ungrad", "sid": 8, "ev": -1}]
    assert dropped_spans(recs) == [(7, 5, 9)]

"""Note [A view whose grad_fn cannot be read] (memledger/trace/doctor_retention.py)."""

from __future__ import annotations

import torch

from memledger.trace.doctor_retention import RetentionWatch, _grad_tensors


def test_a_no_grad_view_of_a_parameter_updated_in_place_is_no_history_and_no_crash():
    """heavyball's SOAP keeps a `no_grad` view of each parameter (`optimizer.mapping`)
    across its in-place update; reading the view's `grad_fn` raises, and the doctor's step boundary crashed
    (exit 70, "A view was created in no_grad mode ...") on a correct loop."""
    p = torch.nn.Parameter(torch.ones(4))
    with torch.no_grad():
        view = p.view(2, 2)
        p.add_(1)
    kept = p * 2                      # a tensor with history, still found
    watch = RetentionWatch()
    watch.start()
    found = _grad_tensors()
    assert any(t is kept for t in found) and not any(t is view for t in found)
    assert watch.boundary(1) == []
    assert watch.boundary(2) == []    # `kept` is no step's graph grown: nothing retained

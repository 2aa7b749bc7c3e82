"""A forward whose graph saved nothing is no unused_graph finding (Note [A graph that saved
nothing], trace/doctor_unused.py): cooper's `DenseMultiplier` returns a clone of its
weight, which the primal Lagrangian uses detached each roll."""

from __future__ import annotations

import torch
from torch import nn

from memledger.trace.doctor_unused import UnusedGraphWatch


class Multiplier(nn.Module):
    """cooper.multipliers.DenseMultiplier's forward."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self) -> torch.Tensor:
        return torch.clone(self.weight)


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class Custom(nn.Module):
    def forward(self, x):
        return Doubled.apply(x)


def _records(script) -> list[dict]:
    records: list[dict] = []
    with UnusedGraphWatch(records, step=lambda: 1):
        script()
    return records


def test_a_clone_of_a_weight_used_detached_is_not_reported():
    mult, violation = Multiplier(), torch.tensor([0.5])

    def script():
        primal = (mult().detach() * violation).sum()   # the multiplier's graph dropped
        del primal

    assert _records(script) == []   # before: one record, "a `Multiplier` ran 1 forward"


def test_a_dropped_forward_that_saved_activations_is_still_reported():
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)

    def script():
        h = torch.tanh(x)   # the call's input has history: the walk stops there
        out = lin(h)        # AddmmBackward0 saves the input
        del out

    [rec] = _records(script)
    assert rec["cls"] == "Linear"


def test_a_call_through_its_inputs_history_only_is_not_charged_for_it():
    """An elementwise add on an input saves nothing; the input's tanh (made before the
    call) saved its result, which is not the call's."""
    class Shift(nn.Module):
        def forward(self, h):
            return h + 1.0

    shift, x = Shift(), torch.randn(3, requires_grad=True)

    def script():
        h = torch.tanh(x)
        out = shift(h)
        del out

    assert _records(script) == []


def test_a_custom_function_is_taken_to_save():
    custom, x = Custom(), torch.randn(3, requires_grad=True)

    def script():
        out = custom(x)
        del out

    assert len(_records(script)) == 1

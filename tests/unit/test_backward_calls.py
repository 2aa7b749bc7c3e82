"""Note [A backward patched over Tensor.backward] (memledger/trace/backward_calls.py): a
`functools.wraps` wrapper of torch's backward is a backward, to the doctor's probe and to
the gates' capture, which stops recording a step's loss inputs at it."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from memledger.trace.backward_calls import is_backward


def _patched():
    original = torch.Tensor.backward

    @functools.wraps(original)
    def backward(self, *args, **kwargs):   # heavyball's `patch_backward`, in spirit
        kwargs["create_graph"] = True
        return original(self, *args, **kwargs)
    return backward


def test_torchs_backwards_and_a_wrapper_of_one_are_backwards():
    assert is_backward(torch.Tensor.backward) and is_backward(torch.autograd.backward)
    assert is_backward(_patched())
    assert not is_backward(torch.add) and not is_backward(functools.wraps(torch.add)(
        lambda *a: None))


def test_the_capture_stops_recording_inputs_at_a_patched_backward(monkeypatch):
    from memledger.verify.capture import _LossInputs

    recorded: list[str] = []
    cap = SimpleNamespace(made={}, in_model=False, steps_by="optimizer",
                          record_input=lambda label, t: recorded.append(label))
    w = torch.ones(3, requires_grad=True)
    target = torch.full((3,), 2.0)
    monkeypatch.setattr(torch.Tensor, "backward", _patched())
    mode = _LossInputs(cap)
    with mode:
        loss = ((w - target) ** 2).sum()   # `target` is read: an input
        loss.backward()
        torch.mul(target, 3.0)             # after backward: not a loss input
    assert mode.recording is False
    assert recorded == ["sub arg[1]"]
    assert w.grad is not None and w.grad.grad_fn is not None   # the wrapper's create_graph

"""Which functions a torch-function mode is handed are a backward call."""

from __future__ import annotations

import types

import torch

_BACKWARDS = (torch.Tensor.backward, torch.autograd.backward)


# Note [A backward patched over Tensor.backward]
# torch hands a torch-function mode `Tensor.backward` as it finds it on the class at the
# call (`handle_torch_function(Tensor.backward, ...)` in torch/_tensor.py). A library that
# patches it puts its own function there: heavyball's PSGD with `hessian_approx=True` swaps
# in a `functools.wraps` wrapper that forces `create_graph=True` while its closure runs
# (`patch_backward`). That backward was no backward to the probe: no root, no record, so
# its loss, still held by `loss = opt.step(closure)` at the next step boundary, read as a
# graph no backward had run through, and the doctor warned "`loss` carries autograd
# history across optimizer steps (... 4 B, a graph of 36 nodes)" on a correct loop
# (tests/clients/train_heavyball.py --opt psgd-hvp, every second step). A function whose
# `__wrapped__` chain reaches torch's backward is one. The gates' capture
# (verify/capture.py) stops recording a step's loss inputs at the same calls.
def is_backward(func) -> bool:
    """`func` is torch's `Tensor.backward` or `autograd.backward`, or a `functools.wraps`
    wrapper of one (Note [A backward patched over Tensor.backward])."""
    if func in _BACKWARDS:
        return True
    if type(func) is not types.FunctionType:
        return False
    for _ in range(4):
        func = getattr(func, "__wrapped__", None)
        if func is None:
            return False
        if func in _BACKWARDS:
            return True
    return False

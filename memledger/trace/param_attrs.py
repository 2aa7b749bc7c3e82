"""Tensors a script hands a parameter as an attribute: gradients by another name, as set.

# Note [A parameter's gradients, as they are set]
Note [Gradients a parameter holds by another name] (trace/collector.py) reads a parameter's
`*grad*` attributes at each optimizer step. Jacobian descent keeps its gradients on the
parameter for a shorter while: torchjd's `autojac.backward(losses)` sets `p.jac`, the
Jacobian of the losses (one row per loss, the parameter's shape after it), as the backward
returns, and `jac_to_grad(params, aggregator)` deletes it before its first op, aggregating
the rows into `.grad`. No op runs while `.jac` is set, so no step-time or phase-time
read of the parameters can see it: the Jacobians read "temporary · cat in (script)", 79 %
of the peak of tests/clients/train_torchjd.py `--mode jd` (137.7 KiB) and 97 % under
`--mode iwrm` (one row per example: 548.1 KiB of the 1.1 MiB united in `jac_to_grad`,
plus each parameter's 16 rows), with nothing to say whose they were.

So, while a collector records, `torch.nn.Parameter.__setattr__` tells it of each tensor a
parameter is given under a public name (not `_`-prefixed: a library's own bookkeeping,
DTensor's `_local_tensor`), whose shape ends with the parameter's (a gradient, or a stack
of them: a Jacobian, Opacus's per-sample `grad_sample`, BackPACK's `grad_batch`): it is a
`gradient`, named `<parameter>.<attribute>` (`blocks.0.fc1.weight.jac`). `p.grad = g`
goes through torch's own descriptor, read as before. The class has no `__setattr__` of its
own (object's is used), so ours only adds a call to a rare event, and is removed when the
collector exits.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

_SETATTR = "__setattr__"


class _Removable:
    def __init__(self, before: list[tuple[type, Any]]) -> None:
        self._before = before

    def remove(self) -> None:
        for cls, was in reversed(self._before):
            if was is None:
                if _SETATTR in vars(cls):
                    delattr(cls, _SETATTR)
            else:
                setattr(cls, _SETATTR, was)


def gradient_like(p: torch.Tensor, name: str, value: Any) -> bool:
    """Is `value`, set as `p.<name>`, one of `p`'s gradients or a stack of them?"""
    if name.startswith("_") or not isinstance(value, torch.Tensor) or \
            name in ("grad", "data") or not isinstance(p, torch.nn.Parameter):
        return False
    n = p.dim()
    return value.dim() >= n and tuple(value.shape[value.dim() - n:]) == tuple(p.shape)


def watch_parameter_attributes(on_set: Callable[[torch.Tensor, str, torch.Tensor], None],
                               classes: tuple[type, ...] = (torch.nn.Parameter,)):
    """Call `on_set(parameter, name, tensor)` after each gradient-like attribute a parameter
    is given (Note [A parameter's gradients, as they are set]); `.remove()` the result to
    stop. `classes`: the types a parameter has (a fake run's parameters are FakeTensors that
    `isinstance(p, nn.Parameter)` accepts: `Parameter.__new__` keeps a tensor subclass's
    type)."""
    before = []
    for cls in classes:
        was = vars(cls).get(_SETATTR)
        inner = was if was is not None else object.__setattr__

        def __setattr__(self, name: str, value: Any, _inner=inner) -> None:
            _inner(self, name, value)
            if gradient_like(self, name, value):
                on_set(self, name, value)

        before.append((cls, was))
        setattr(cls, _SETATTR, __setattr__)
    return _Removable(before)

"""The doctor's watch on gradients taken without a graph and added to a loss (check 9).

# Note [A gradient penalty without create_graph]
`torch.autograd.grad(out, x)` returns gradients with no history unless `create_graph=True`.
A loss term computed from them (WGAN-GP's `((grad.norm(2, dim=1) - 1) ** 2).mean()`, an
R1 penalty, a gradient-norm regulariser) is then a constant: added to the loss it changes
the loss's value and nothing else, so the penalty trains nothing, silently. The watch:

1. The outputs of `torch.autograd.grad` without `create_graph` are *constant* (with the
   line of that call).
2. An op whose inputs include a constant and none that requires grad makes constants
   (norm, `- 1`, `** 2`, mean, `10 *`: the penalty). Not `.detach()`: the script asks for
   a value without a graph there, on purpose. torchmd-net's LNNP smooths each loss by an
   EMA of the last one, detached (`loss = a * loss + (1 - a) * ema`); an evaluation in
   eval mode takes its forces by `autograd.grad` without a graph (`create_graph=
   self.training`), and where its loss fed that EMA (a first version of
   tests/clients/train_torchmdnet.py, one EMA for both stages) the next training loss was
   read as a dead penalty: "a loss term made from torch.autograd.grad() without
   create_graph=True ... pass create_graph=True", advice for a graph nobody wanted
   (tests/doctor/gradient_penalty.py --fixed --smooth).
3. An addition or subtraction of a constant and a tensor that requires grad makes a
   *dead-term* tensor (`loss_d = D(fake).mean() - D(real).mean() + 10 * penalty`): the
   constant is a term of it. A dead-term tensor stays one through additions and
   subtractions, and through scaling by what requires no grad (`loss / accum`, `.mean()`).
4. `backward()` (or `torch.autograd.grad`) from a dead-term tensor is a finding: a
   `penalty` record with the lines of the gradient call, of the addition and of the
   backward.

Not a finding: first-order MAML (`v - lr * g`, g without a graph, is a fast weight that
then goes through the model: a matmul, not rule 3's arithmetic, so the loss carries no
dead term), FGSM's `x + eps * g.sign()` (x requires no grad: rule 2, a constant input),
a gradient norm computed for logging (never added to a loss). Only while some constant
or dead-term tensor is alive does an op cost more than a dictionary lookup.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from memledger.trace.where import user_line

_Tensor = torch.Tensor
_ADD = frozenset({"add", "add_", "__add__", "__radd__", "__iadd__", "sub", "sub_", "__sub__",
                  "__rsub__", "__isub__", "rsub"})
# what keeps a dead term a term when its other inputs require no grad (rule 3)
_SCALE = frozenset({"mul", "mul_", "__mul__", "__rmul__", "__imul__", "div", "div_",
                    "__truediv__", "__itruediv__", "neg", "__neg__", "mean", "sum", "clone",
                    "reshape", "view", "squeeze", "float", "to", "contiguous"})

_DETACH = frozenset({"detach", "detach_"})


class _Marks:
    """Tensors by identity (a tensor's `__eq__` is elementwise), forgotten when they die."""

    def __init__(self) -> None:
        self._d: dict[int, tuple[weakref.ref, dict[str, Any]]] = {}

    def __bool__(self) -> bool:
        return bool(self._d)

    def get(self, t: object) -> dict[str, Any] | None:
        e = self._d.get(id(t))
        return e[1] if e is not None and e[0]() is t else None

    def add(self, t: _Tensor, info: dict[str, Any]) -> None:
        key = id(t)
        self._d[key] = (weakref.ref(t, lambda _, k=key: self._d.pop(k, None)), info)


def _tensors(xs) -> list[_Tensor]:
    out = []
    for x in xs:
        if isinstance(x, _Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(t for t in x if isinstance(t, _Tensor))
    return out


class PenaltyWatch:
    """Rules 1-4 of Note [A gradient penalty without create_graph]: appends one `penalty`
    record to `records` (the probe's) per backward from a dead-term loss."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self._const = _Marks()
        self._dead = _Marks()

    @property
    def watching(self) -> bool:
        return bool(self._const) or bool(self._dead)

    def grad_taken(self, args: tuple, kwargs: dict, out) -> None:
        """Rule 1, after `torch.autograd.grad(*args, **kwargs)` returned `out`."""
        create = kwargs.get("create_graph", args[4] if len(args) > 4 else False)
        if create:
            return
        file, line = user_line()
        for g in _tensors([out]):
            if not g.requires_grad:
                self._const.add(g, {"grad_file": file, "grad_line": line})

    def after(self, func, args: tuple, kwargs: dict, out) -> None:
        """Rules 2 and 3, after an op ran (only while `watching`)."""
        ins = _tensors(args) + _tensors(kwargs.values())
        const = next((c for t in ins if (c := self._const.get(t)) is not None), None)
        dead = next((d for t in ins if (d := self._dead.get(t)) is not None), None)
        if const is None and dead is None:
            return
        name = getattr(func, "__name__", "")
        if name in _DETACH:   # rule 2: a value asked for without a graph
            return
        live = [t for t in ins if t.requires_grad and self._dead.get(t) is None]
        outs = _tensors([out])
        if dead is not None:
            if name in _ADD or (name in _SCALE and not live):
                for t in outs:
                    self._dead.add(t, dead)
            return
        if not any(t.requires_grad for t in ins):
            for t in outs:
                self._const.add(t, const)
        elif name in _ADD:
            file, line = user_line()
            for t in outs:
                if t.requires_grad:
                    self._dead.add(t, {**const, "add_file": file, "add_line": line})

    def backward_from(self, roots, step: int) -> None:
        """Rule 4: before a backward (or autograd.grad) from `roots` in training `step`."""
        if not self._dead:
            return
        for t in _tensors([roots]):
            info = self._dead.get(t)
            if info is not None:
                file, line = user_line()
                self.records.append({"k": "penalty", "step": step, **info,
                                     "file": file, "line": line})
                return

"""An optimizer that is no `torch.optim.Optimizer`, named for the "no optimizer step" line.

# Note [An optimizer torch's hooks do not see]
memledger ends a step at `optimizer.step()` through torch's global optimizer step hooks,
which only `torch.optim.Optimizer` fires. A class with its own `step()` and `zero_grad()`
that does not derive from it (torchopt's `torchopt.Adam`, `torchopt.SGD`: drop-in
optimizers over pytrees) steps unseen, and `trace` and `doctor` ended with "the script ran
no optimizer step ... call optimizer.step() in the script", to a script that calls it
(tests/clients/train_torchopt.py `--mode adam`). So as the first backward pass ends
(where a training loop's frames hold its optimizer, about to step) the script's frames
are looked through once for such an object, and the line names it with what to do
instead. One walk of the stack per run, outermost frame first, a local called `self`
last (that is the library's own frame); nothing is hooked.
"""

from __future__ import annotations

import sys
from types import FrameType

_THIS_PACKAGE = __name__.rsplit(".", 2)[0]   # "memledger"


def _optimizer_like(obj: object) -> bool:
    import torch

    cls = type(obj)
    return callable(getattr(cls, "step", None)) and callable(getattr(cls, "zero_grad", None)) \
        and not isinstance(obj, (torch.optim.Optimizer, torch.nn.Module, type))


def optimizer_like_in_stack(frame: FrameType | None = None) -> str:
    """`name (module.Class)` of the first optimizer-like object the stack's frames hold
    that is no torch.optim.Optimizer, or ""."""
    frames = []
    f = frame or sys._getframe(1)
    while f is not None:
        if not f.f_globals.get("__name__", "").startswith(_THIS_PACKAGE):
            frames.append(f)
        f = f.f_back
    found = ""
    for f in reversed(frames):   # outermost first: the script's names before a library's
        for name, value in list(f.f_locals.items()):
            if _optimizer_like(value):
                cls = type(value)
                text = f"`{name}` ({cls.__module__}.{cls.__qualname__})"
                if name != "self":
                    return text
                found = found or text
    return found


def no_step_hint(optimizer_like: str, doctor: bool = False) -> str:
    """What the "no optimizer step" lines say after their first clause when
    `optimizer_like` names an optimizer torch's hooks do not see; "" when it names none."""
    if not optimizer_like:
        return ""
    what = (f"; {optimizer_like} has step() and zero_grad() but is no torch.optim.Optimizer, "
            f"whose step hooks {'the doctor' if doctor else 'memledger'} reads")
    if doctor:
        return what + ", and its checks are per step (`memledger trace --steps-by forward` " \
            "traces such a loop)"
    return what + ": count steps by forward passes (--steps-by forward) or trace the " \
        "whole script (--steps-by whole)"

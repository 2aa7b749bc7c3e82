"""An optimizer that is no `torch.optim.Optimizer`, named for the "no optimizer step" line.

# Note [An optimizer torch's hooks do not see]
memledger ends a step at `optimizer.step()` through torch's global optimizer step hooks,
which only `torch.optim.Optimizer` fires. A class with its own `step()` and `zero_grad()`
that does not derive from it (torchopt's `torchopt.Adam`, `torchopt.SGD`: drop-in
optimizers over pytrees) steps unseen, and `trace` and `doctor` ended with "the script ran
no optimizer step ... call optimizer.step() in the script", to a script that calls it
(tests/clients/train_torchopt.py `--mode adam`). So when a second backward pass ends (the
doctor: begins) and no optimizer step has been seen, the live objects are looked through
once for such an object, and the line names its class with what to do instead.

Not at the first backward: every training loop's first backward comes before its first
step, and the walk (`gc.get_objects()`, tens of ms) would then run in every trace. Not
through the stack's `f_locals`: on Python 3.11 reading it makes a snapshot dict that the
frame keeps, holding every local of the training loop (a loss, a batch) for as long as the
frame runs, which the untraced run does not; that first version read the ledger 2,308 B to
10,500 B over the allocator on Opacus' loops. And a running frame's `gc.get_referents`
does not list its locals. A script whose only backward pass is its first gets no name.
"""

from __future__ import annotations

import gc


def _optimizer_like(cls: type) -> bool:
    return callable(getattr(cls, "step", None)) and callable(getattr(cls, "zero_grad", None))


def optimizer_like_alive() -> str:
    """`module.Class` of the first live object with `step()` and `zero_grad()` that is no
    torch.optim.Optimizer (nor a module, nor a class), or ""."""
    import torch

    skip = (torch.optim.Optimizer, torch.nn.Module, type)
    seen: dict[type, bool] = {}
    for obj in gc.get_objects():
        cls = type(obj)
        hit = seen.get(cls)
        if hit is None:
            hit = seen[cls] = _optimizer_like(cls) and not issubclass(cls, skip)
        if hit:
            return f"{cls.__module__}.{cls.__qualname__}"
    return ""


def no_step_hint(optimizer_like: str, doctor: bool = False) -> str:
    """What the "no optimizer step" lines say after their first clause when
    `optimizer_like` names an optimizer torch's hooks do not see; "" when it names none."""
    if not optimizer_like:
        return ""
    what = (f"; a {optimizer_like} is alive, which has step() and zero_grad() but is no "
            f"torch.optim.Optimizer, whose step hooks {'the doctor' if doctor else 'memledger'} "
            "reads")
    if doctor:
        return what + ", and its checks are per step (`memledger trace --steps-by forward` " \
            "traces such a loop)"
    return what + ": count steps by forward passes (--steps-by forward) or trace the " \
        "whole script (--steps-by whole)"

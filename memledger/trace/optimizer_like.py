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

# Note [An optimizer that never steps]
LOMO and AdaLomo (`lomo_optim.Lomo(model, lr)`) are `torch.optim.Optimizer`s that never
step: their hooks on the parameters update them inside backward, and the loop calls
`optimizer.fused_backward(loss, lr)`, no `step()` (their `step()` is torch's, which raises
NotImplementedError). The walk above skipped every torch.optim.Optimizer, so `doctor` said
"the script ran no optimizer step; the doctor checks training steps, so call
optimizer.step() in the script" (tests/clients/train_optimi.py `--opt lomo`), advice that
fails on such an optimizer, and `trace` named evaluation, inference or a hand-written
update. The same walk now also collects the torch optimizers alive (none has stepped: the
hooks saw no step), and the line names the first, whose update is then likely done
elsewhere (in backward). The ledger pass files what they hold as optimizer state from then
on, read again at each root forward (Note [State made between steps], trace/collector.py):
Lomo's gradient norms and clipping coefficient (`--opt lomo --clip 1.0`: 120 B resident at
the end, `temporary` before). The ledger pass looks under `--steps-by forward` and `whole`
too (no optimizer step seen by the second backward's end), for the state alone: the line
is only for a trace that found no step.

# Note [An optimizer that applies gradients]
# Keras 3's optimizers (`keras.optimizers.Adam`, on the torch backend too) are no
# torch.optim.Optimizer and have no `step()` or `zero_grad()`: `model.fit` and a custom
# loop call `optimizer.apply(grads, model.trainable_weights)` (`apply_gradients(pairs)`),
# which updates the variables with torch ops of its own. A Keras loop is traced with
# `--steps-by forward`, and there the walk above (no torch step by the second backward's
# end) found nothing: the optimizer's moments (a `m` and a `v` variable per weight, each
# its bytes), its `iterations` counter (int64) and its learning-rate variable read
# `temporary`, 169,996 B resident at the end of tests/clients/train_keras.py `--loop
# custom`. The same walk now also collects the live objects with `apply_gradients()` (nor
# a module, nor a class, nor a torch optimizer), and the ledger pass files what they hold
# as optimizer state as it does a torch optimizer's, read again at each root forward
# (`held_tensors`, trace/optimizer_state.py: everything the object reaches but the model's
# parameters, its gradients and its modules; Keras' variables are plain objects holding
# a tensor, its `_trainable_variables` hold the model's own weights). They are not named
# in the "no optimizer step" line (that line's advice is for `step()`/`zero_grad()`
# objects); the line already says what to do without an optimizer step.
"""

from __future__ import annotations

import gc


def _optimizer_like(cls: type) -> bool:
    return callable(getattr(cls, "step", None)) and callable(getattr(cls, "zero_grad", None))


def _applies_gradients(cls: type) -> bool:
    """Note [An optimizer that applies gradients]."""
    return callable(getattr(cls, "apply_gradients", None))


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def optimizer_like_alive(appliers: list | None = None) -> tuple[str, list]:
    """`module.Class` of the first live object with `step()` and `zero_grad()` that is no
    torch.optim.Optimizer (nor a module, nor a class), or "", and the torch.optim.Optimizers
    alive (Note [An optimizer that never steps]). `appliers`: a list the live objects with
    `apply_gradients()` are added to (Note [An optimizer that applies gradients]); the walk
    then goes on to the end."""
    import torch

    skip = (torch.optim.Optimizer, torch.nn.Module, type)
    seen: dict[type, tuple[bool, bool]] = {}
    optimizers = []
    found = ""
    for obj in gc.get_objects():
        cls = type(obj)
        # Note [A dead proxy among the live objects]
        # By the type, not `isinstance`: `isinstance` asks the object its `__class__`, and a
        # `weakref.proxy` whose referent is gone raises ReferenceError when asked anything.
        # One such proxy alive anywhere in the process (a library's, a test's) made the
        # first backward of a trace raise from inside the collector's module hook: seen in
        # one pytest process running tests/unit/test_recompute_probe.py after the client
        # tiers. A live proxy's referent is among the objects itself.
        if issubclass(cls, torch.optim.Optimizer):
            optimizers.append(obj)
            continue
        hit = seen.get(cls)
        if hit is None:
            plain = not issubclass(cls, skip)
            hit = seen[cls] = (plain and _optimizer_like(cls),
                               plain and appliers is not None and _applies_gradients(cls))
        if hit[1]:
            appliers.append(obj)
        if hit[0] and not found:
            found = _name(cls)
            if appliers is None:
                return found, optimizers
    return found, optimizers


def optimizers_alive() -> list:
    """The torch.optim.Optimizers alive (by the type: Note [A dead proxy among the live
    objects])."""
    import torch

    return [obj for obj in gc.get_objects() if issubclass(type(obj), torch.optim.Optimizer)]


def unstepped_name(optimizers: list) -> str:
    """`module.Class` of the first of `optimizers` (none of which stepped), or ""."""
    return _name(type(optimizers[0])) if optimizers else ""


def status_hint(probe, steps: int) -> dict:
    """The keys a worker's status adds for the "no optimizer step" lines: the optimizer-like
    object `probe` found (`optimizer_like`), else its torch optimizer that never stepped
    (`optimizer_unstepped`); none once a step was seen."""
    like = getattr(probe, "optimizer_like", "")
    unstepped = getattr(probe, "optimizer_unstepped", "")
    if steps or not (like or unstepped):
        return {}
    return {"optimizer_like": like} if like else {"optimizer_unstepped": unstepped}


def no_step_hint(optimizer_like: str, doctor: bool = False, unstepped: str = "") -> str:
    """What the "no optimizer step" lines say after their first clause when
    `optimizer_like` names an optimizer torch's hooks do not see, or `unstepped` a torch
    optimizer that never stepped; "" when they name none."""
    if not optimizer_like and unstepped:   # Note [An optimizer that never steps]
        what = (f"; a {unstepped} is alive, a torch.optim.Optimizer whose step() the script "
                "never called (one that updates the parameters inside backward, from hooks "
                "on them, steps no other way)")
        if doctor:
            return what + ": count its steps by forward passes (doctor --steps-by forward)"
        return what + ": count steps by forward passes (--steps-by forward) or trace the " \
            "whole script (--steps-by whole)"
    if not optimizer_like:
        return ""
    what = (f"; a {optimizer_like} is alive, which has step() and zero_grad() but is no "
            f"torch.optim.Optimizer, whose step hooks {'the doctor' if doctor else 'memledger'} "
            "reads")
    if doctor:
        return what + ": count its steps by forward passes (doctor --steps-by forward)"
    return what + ": count steps by forward passes (--steps-by forward) or trace the " \
        "whole script (--steps-by whole)"

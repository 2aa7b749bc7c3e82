"""torch.func transforms (grad, vjp, jacrev, hessian) run with memledger's own saved-tensor
hooks stepped aside: Note [torch.func transforms under memledger's hooks]."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator

import torch
import torch.autograd.graph as _graph

# Note [torch.func transforms under memledger's hooks]
# memledger sees what autograd saves through `saved_tensors_hooks` (the collector's pack
# and unpack), and measure's offload and checkpoint act through them too. torch.func's
# grad / vjp / jacrev / hessian refuse to run under any such hook (`disable_saved_tensors_
# hooks` raises "torch.func.{grad, vjp, jacrev, hessian} don't yet support saved tensor
# hooks"), so a script whose forward differentiates with torch.func, which runs plain,
# could not be traced at all: titans-pytorch's NeuralMemory computes per-chunk gradients of
# its memory MLP with `vmap(grad(...))` in every forward (tests/clients/train_titans.py),
# and `trace` said "exit 2: `titans_pytorch` ... differentiates with torch.func", naming
# an option the library does not have. While a transform runs, the hooks on the stack are
# now popped and pushed back after it, when every one of them is memledger's: the
# collector's, offload's, the timers', or torch's checkpoint where measure's checkpoint
# of a region put it (`own_checkpointed`, counted while the region's function runs, its
# first run and its re-run). A stack with a hook of the script's own (its own checkpoint,
# its own offload) is left as it is, and torch refuses as it would without memledger.
#
# What autograd saves inside the transform (the outer graph's saves, made while the
# inner gradient is computed) is then seen by no pack hook, alike in every pass: the ledger
# counts those bytes, made and freed where the allocator sees them, as temporaries living
# to their free, not as activations; replay's offload and checkpoint leave them resident,
# and measure's offload and checkpoint, whose hooks are stepped aside too, leave them so.
# A region called inside a transform (NeuralMemory's memory MLP, run by `functional_call`
# under `grad`) runs plain there in measure (`in_func_transform`: no hook could be pushed),
# as replay, which sees no save there to act on, predicts.
# train_titans.py --mode mem: ledger = allocator = 984,008 B; `offload:mem` 667,136 B and
# `checkpoint:mem` 1,051,828 B, predicted = measured.

_local = threading.local()


def _own_depth() -> int:
    return getattr(_local, "own", 0)


def own_checkpointed(fn: Callable) -> Callable:
    """`fn` (a region measure checkpoints) counted as memledger's while it runs."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        _local.own = _own_depth() + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _local.own -= 1
    return run


def in_func_transform() -> bool:
    """Whether a torch.func transform runs (saved-tensor hooks are disabled): a region of
    measure's called there runs plain, as in backward."""
    return not torch._C._autograd._saved_tensors_hooks_is_enabled()


def _ours(pack: Any) -> bool:
    mod = getattr(getattr(pack, "__func__", pack), "__module__", None) or ""
    if mod == "memledger" or mod.startswith("memledger."):
        return True
    return mod == "torch.utils.checkpoint" and _own_depth() > 0


_top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
_pop = getattr(torch._C._autograd, "_pop_saved_tensors_default_hooks", None)
_push = getattr(torch._C._autograd, "_push_saved_tensors_default_hooks", None)


@contextlib.contextmanager
def _stepped_aside(orig: Callable, error_message: str) -> Iterator[None]:
    popped: list[tuple[Any, Any]] = []
    while (top := _top(True)) is not None:
        popped.append(top)
        _pop()
    if not all(_ours(pack) for pack, _ in popped):   # a hook of the script's: as torch does
        for hooks in reversed(popped):
            _push(*hooks)
        popped = []
    try:
        with orig(error_message):
            yield
    finally:
        for hooks in reversed(popped):
            _push(*hooks)


@contextlib.contextmanager
def func_transforms_step_aside() -> Iterator[None]:
    """While active, `torch.autograd.graph.disable_saved_tensors_hooks` (what each
    torch.func transform enters) steps memledger's own hooks aside for its length."""
    orig = _graph.disable_saved_tensors_hooks
    if None in (_top, _pop, _push) or getattr(orig, "_memledger", False):
        yield
        return
    patched = functools.partial(_stepped_aside, orig)
    patched._memledger = True   # type: ignore[attr-defined]
    _graph.disable_saved_tensors_hooks = patched
    try:
        yield
    finally:
        _graph.disable_saved_tensors_hooks = orig

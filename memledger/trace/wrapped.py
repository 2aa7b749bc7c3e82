"""Tensors that wrap other tensors: their memory is their inner tensors'.

# Note [Wrapper subclasses]
A traceable wrapper subclass (`torch.utils._python_dispatch.is_traceable_wrapper_subclass`:
torchao's 8-bit and 4-bit optimizer states and float8 / NF4 weights, and DTensor) is a
tensor with no memory of its own: `_make_wrapper_subclass` gives it the shape and dtype it
stands for, and `__tensor_flatten__` names the plain tensors that hold its data. Its
`untyped_storage()` still answers, with a storage whose `nbytes()` is what the *stand-in*
dtype would take and whose data pointer is invalid. Read as a storage, torchao's
`AdamW8bit` state of a (512, 256) weight was two fp32 storages of 524,288 B each, where it
holds a uint8 `codes` tensor (131,072 B) and an fp32 `scale` per 256-value block (2,048 B),
and a quantization map shared by every state: the ledger said 8-bit Adam kept as much as
AdamW. So the collector reads such a tensor as its inner tensors, each a storage of its
own, named `<name>.<attribute>` (`0.weight.exp_avg.codes`).

The ops a subclass runs on its inner tensors (its `__torch_dispatch__`: dequantize the
codes to fp32, update, quantize again) ran below the collector's mode, which had called
the op itself with the mode off: unseen, torchao's eager `AdamW8bit` step left 3,803,136 B
of its fp32 temporaries out of the ledger (9.2 MiB at the allocator). So the collector
returns NotImplemented for an op on such a tensor (`defers`): the dispatcher hands the op
to the subclass with the mode still on, and the subclass's own ops come through it like
any other. A DTensor keeps the way it had (read as its local shard, `local_tensor`, Note
[Sharded storages]; its collectives and their roles are written at its outer op).
The other readers of storages do the same: `measure` skips a wrapper parameter's inner
storages (`storage_ptrs`), offload writes a saved wrapper's floating-point inner tensors
(measure/offload.py), compare's capture copies the bytes it holds (verify/capture.py).
Not counted: a Python number handed to an op on the wrapper itself (`state * 0.9`) is
wrapped by the outer call, 8 B held while the subclass runs its own ops, and the outer op
is the one the collector no longer sees (torchao's optimizers dequantize first and never
do this).
"""

from __future__ import annotations

import functools
import sys

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from memledger.trace.sharding import _PLAIN, local_tensor


def inner_tensors(t: torch.Tensor, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(attribute path, plain tensor) of each tensor a wrapper subclass holds, at any depth;
    [] for a tensor that is not one (Note [Wrapper subclasses])."""
    if not is_traceable_wrapper_subclass(t):
        return []
    names, _ = t.__tensor_flatten__()
    out: list[tuple[str, torch.Tensor]] = []
    for name in names:
        inner = getattr(t, name)
        path = f"{prefix}{name}"
        out.extend(inner_tensors(inner, path + ".") or [(path, inner)])
    return out


def wrapped_parts(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """`inner_tensors` of `t` read as this rank holds it (a DTensor as its local shard, which
    is no wrapper here); [] at once for a plain tensor, the common case."""
    return [] if type(t) in _PLAIN else inner_tensors(local_tensor(t))


_functorch_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor",
                             lambda t: False)


# Note [A model found inside a torch.func transform]
# measure applies a policy at the model's first call (Note [The call that found the
# model]); a loop that differentiates with `torch.func.grad(loss_fn)(params, x, y)`, the
# model run by `functional_call` inside it (tests/clients/train_func.py), makes that call
# inside the transform, its parameters functorch's TensorWrappers, and reading their
# storages failed as memledger's own error ("internal error (NotImplementedError: Cannot
# access storage of TensorWrapper)"), once the trace could go through such a transform
# (Note [torch.func transforms under memledger's hooks], trace/func_transforms.py). A
# region called inside a transform runs plain, in measure as in replay.
def storage_ptrs(t: torch.Tensor) -> list[int]:
    """Data pointers of the storages that hold `t`'s memory: a DTensor's local shard's, a
    wrapper's inner tensors' (a QLoRA NF4 weight's codes and scales: its own storage has
    no valid pointer, and `measure` failed reading it), else its own."""
    t = local_tensor(t)
    # Note [A model found inside a torch.func transform]: the parameters a
    # `functional_call` put in their place there are functorch's wrappers (TensorWrapper,
    # "Cannot access storage"), whose memory is the tensor each wraps
    while _functorch_wrapped(t):
        t = torch._C._functorch.get_unwrapped(t)
    inner = inner_tensors(t)
    return [x.untyped_storage().data_ptr() for _, x in inner] if inner else \
        [t.untyped_storage().data_ptr()]


@functools.lru_cache(maxsize=None)
def defers(types: tuple[type, ...]) -> bool:
    """Whether an op whose tensor arguments include these subclass types goes to the
    subclass with the collector's mode still on (Note [Wrapper subclasses]): a traceable
    wrapper subclass other than DTensor."""
    return any(hasattr(t, "__tensor_flatten__") and not _is_dtensor(t) for t in types)


def _is_dtensor(t: type) -> bool:
    mod = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(mod, "DTensor", None)
    return dtensor is not None and issubclass(t, dtensor)

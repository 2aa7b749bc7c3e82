"""Derivative formulas re-stated for the ledger pass as torch runs them untraced.

# Note [A derivative formula that branches on the mode]
Some of torch's derivative formulas (torch/csrc/autograd/FunctionsManual.cpp) ask
`areAnyTensorSubclassLike` / `isTensorSubclassLike` and take a short path only for plain
tensors; both answer true for every tensor while ANY dispatch mode is on the stack
(`c10::impl::dispatch_mode_enabled()`), so the ledger pass sees the other path, whose ops
and temporaries the untraced run never has. `cumprod`'s backward untraced, where its input
has no zero (torch 2.13's profile: `mul`, `eq`, `any`, `item`, `flip`, `cumsum`, `flip`,
`div`): `w = output.conj() * grad`, `is_zero = input == 0`, then
`reversed_cumsum(w).div(input.conj())`, whose `w.flip().cumsum().flip()` keeps both inner
temporaries to the end of its return statement. Traced, the composite-compliant path
(~33 ops: `zeros_like`, the zero mask's `cumsum`, `max`, `scatter_`, `masked_fill`s,
`where`, a second `cumprod`, ...). `prod`'s, over a dim or of all: untraced `input == 0`
and its `sum` (or `nonzero`), then `grad * (result / input).conj()`; traced
`prod_safe_zeros_backward` (`ones`, two `cat`s, two `cumprod`s, `flip`). In a step whose
peak is that backward (tests/clients/train_cumprod.py) the ledger read 13,824 to 65,536 B
over the allocator, the offload and checkpoint predictions with it (the numbers in
tests/clients/test_cumprod.py).

The mode cannot be taken off for the node's apply (its ops would go unseen, and nothing
of ours runs between the formula's check and its first op), and the two paths share no
ops to fold (Note [A derivative formula in place but for the mode], trace/collector.py,
folds an out-of-place op into its in-place twin). So for the ledger pass alone
(`UntracedFormulas`, held by each collector from its `__enter__` to its `__exit__`) a
Python kernel of ours sits at the autograd keys of plain dense tensors (`AutogradCPU`,
`AutogradCUDA`) for the overloads re-stated (`_KERNELS`: `aten::cumprod`, `aten::prod`,
`aten::prod.dim_int`), registered with `torch.library.Library("aten", "IMPL")`. Only calls
of those ops pay (a first attempt routed every torch call of the script through a
`TorchFunctionMode`: 8-10 % of a tiny GPT's ledger pass, and a jagged nested tensor's own
`__torch_function__` then ran under it and changed an exact case; reverted). The kernel
runs the op as an autograd.Function whose forward is the native op (saving its input and
result, as the native node does) and whose backward is the untraced formula written out
op for op, each temporary held as long as C++ holds it: the dispatch mode then sees what
the untraced run allocates, in its order. It does so only where the untraced run takes
the formula re-stated: a dispatch mode on the stack (without one torch takes the short
path itself: a thread the collector does not trace), grad enabled, a plain strided tensor
(`torch.Tensor` or a Parameter) that requires grad, no `dtype` cast, no forward-mode AD
level, outside torch.func's transforms. Every other call (a sparse tensor, a subclass, a
fake run's tensors, grad off, the Function's own forward) goes to torch's own kernel for
that key, taken with `torch.library.get_kernel` before ours replaced it, with the keyset
the dispatcher handed us: torch's path unchanged. A nested tensor (strided or jagged)
dispatches at `AutogradNestedTensor`, which we leave alone. Where the untraced formula
itself branches on values (an input with a zero) the kernel calls torch's too: it asks
`(input == 0).any()` with the dispatch mode off (the ledger sees nothing of it; the
untraced run does not ask in forward), so such a call is priced as before, the composite
path, not exact there. Asked in backward instead, with the native node's gradient taken
there (cumprod46's way: a re-run of the forward op beside the composite path), a
`cumprod` of a ReLU's output (train_cumprod.py's shape, `--length 64 --dim 8 --batch 16`)
read a ledger of 137,496 B, where the composite path reads 129,304 and the allocator
128,664, and `prod(-1)`'s `checkpoint:body` was predicted 193,112 B where the composite
path's 176,728 B is measured. The backward keeps that re-run only for a zero the forward
did not see (values changed behind autograd's back). Double backward builds torch's
graph. A C++ caller's `at::cumprod` reaches the kernel too (it is the dispatcher's). The
node is named `_CumprodBackward` / `_ProdBackward` in the ledger pass (nothing keys on
those names).

The registration is counted (nested collectors register once) and undone when the last
collector leaves (`Library._destroy` puts torch's kernel back: the dispatcher's computed
kernel for the key is the generated VariableType one again), and in a forked child (Note
[A forked child traces nothing]). Torch's own autograd kernels sit at the `Autograd` alias,
so ours fill keys that hold nothing of their own; a key that does (someone's kernel
registered there for that op) is left alone, and that op priced as before: replacing it
would make torch warn ("Overriding a previously registered kernel ..."), and under a
dispatch mode torch calls a Python kernel through a table of the latest one registered
for its op and key, so theirs, called from ours, would run ours again, without end. The
registration runs under `warnings.catch_warnings` all the same: nothing reaches the user.
Cost: one registration per pass (0.16 ms with its removal), and per `cumprod` / `prod`
call of the script a Python call and the zero check; no other op pays.

The other branches on the check seen in a profile against a mode's ops (torch 2.13 CPU):
an in-place op run out of place under the mode, folded by Note [In place but for the mode]
(gradient sums; `index_put` / `scatter_add` / `index_add` / `scatter` of indexing, gather,
index_select, topk, sort, kthvalue, median), by Note [A derivative formula in place but
for the mode] (`binary_cross_entropy_with_logits` with a `pos_weight`, `clamp`) and the
Notes on a Linear's bias and math attention's mask; not covered: `trace`'s backward
(`index_fill` for `index_fill_`), `take`'s (`put` for `put_`), `atan2`'s (`masked_fill` for
`masked_fill_`), `masked_scatter`'s (its own kernel's ops untraced). An entry in
`_KERNELS` re-states one more formula.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any, Callable

import torch

_PLAIN = (torch.Tensor, torch.nn.Parameter)
# the autograd keys of a plain dense tensor's devices (a nested tensor's is
# AutogradNestedTensor, a subclass's Python key is below these)
_KEYS = ("AutogradCPU", "AutogradCUDA")

_local = threading.local()   # `native`: the zero case's re-run takes torch's kernel
_fwd_ad = getattr(torch.autograd, "forward_ad", None)


def _native_grad(fn, x: torch.Tensor, grad: torch.Tensor, *args: Any) -> torch.Tensor:
    """The native node's gradient of `fn(x, *args)` (its formula, as the mode runs it; a
    graph of it where backward builds one)."""
    graph = torch.is_grad_enabled()   # inside backward: create_graph
    _local.native = True
    try:
        with torch.enable_grad():
            return torch.autograd.grad(fn(x, *args), x, grad, create_graph=graph)[0]
    finally:
        _local.native = False


class _Cumprod(torch.autograd.Function):
    """`cumprod_backward`'s untraced short path (no zero in the input)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int) -> torch.Tensor:
        out = torch.cumprod(x, dim)   # grad off here: torch's kernel
        ctx.dim = dim
        ctx.save_for_backward(x, out)   # as CumprodBackward0: self and result
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, out = ctx.saved_tensors
        dim = ctx.dim % max(x.dim(), 1)
        if x.numel() <= 1 or x.dim() == 0 or x.shape[dim] == 1:
            return grad, None
        w = out.conj() * grad
        is_zero = x == 0
        if _value(is_zero.any()):
            del w, is_zero
            return _native_grad(torch.cumprod, x, grad, ctx.dim), None
        # `reversed_cumsum(w, dim).div(input_conj)`: reversed_cumsum is
        # `w.flip(dim).cumsum(dim).flip(dim)`, whose two inner temporaries live to the
        # end of its return statement, and its result to the end of the division's
        f = w.flip(dim)
        c = f.cumsum(dim)
        r = c.flip(dim)
        del c, f
        out = r.div(x.conj())
        del r, is_zero, w
        return out, None


class _Prod(torch.autograd.Function):
    """`prod_backward`'s untraced short path (no zero in the input), over all elements
    (`dim` None) or one dim."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int | None, keepdim: bool) -> torch.Tensor:
        # grad off here: torch's kernel
        out = torch.prod(x) if dim is None else torch.prod(x, dim, keepdim)
        ctx.dim, ctx.keepdim = dim, keepdim
        ctx.save_for_backward(x, out)   # as ProdBackward0/1: self and result
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, result = ctx.saved_tensors
        dim, keepdim = ctx.dim, ctx.keepdim
        if x.dim() == 0:
            return grad, None, None
        if dim is None and _run_fake(x):
            # a fake run's input has no zero (Note [A fake run's formula]): the mask, and
            # the indices of none (no bytes), where `nonzero` would ask for values
            mask = x == 0
            del mask
        elif dim is None:
            # `zero_idx = (input == 0).nonzero()`: the mask lives to the statement's end
            zero_idx = (x == 0).nonzero()
            if zero_idx.numel() != 0:
                del zero_idx
                return _native_grad(torch.prod, x, grad), None, None
        else:
            d = dim % x.dim()
            if not keepdim:
                grad, result = grad.unsqueeze(d), result.unsqueeze(d)
            zero_mask = x == 0
            slice_zero_count = zero_mask.sum(d, True)
            if _value(slice_zero_count.sum()) != 0:
                del zero_mask, slice_zero_count
                return _native_grad(torch.prod, x, grad if keepdim else grad.squeeze(d),
                                    dim, keepdim), None, None
        # `grad * (result / input).conj()`: the quotient to the statement's end
        q = result / x
        out = grad * q.conj()
        del q
        return out, None, None


def _functorch_level() -> Any:
    """The innermost torch.func transform running (`vmap`, `grad`), or None: a Function
    without `setup_context` cannot run under one, and its tensors are wrappers anyway."""
    peek = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)
    return peek() if peek is not None else None


def _run_fake(t: Any) -> bool:
    """Whether `t` is a tensor of memledger's own fake run (`trace --fake`: its mode, not a
    compiler's or an exporter's fake tensors; Note [A fake run's formula])."""
    fake = sys.modules.get("memledger.trace.fake")   # loaded by a fake run (no cycle here)
    return fake is not None and fake.of_the_run(t)


def _routable(x: Any, dtype: Any) -> bool:
    """Whether the untraced run takes the re-stated formula for a call on `x` here: a
    dispatch mode on the stack, grad mode on, a plain strided tensor (or a fake run's
    stand-in for one: Note [A fake run's formula]) that requires grad, no cast to another
    dtype, no forward-mode AD, no torch.func transform."""
    return (type(x) in _PLAIN or _run_fake(x)) and x.requires_grad and \
        torch.is_grad_enabled() and \
        not getattr(_local, "native", False) and dtype in (None, x.dtype) and \
        x.layout == torch.strided and not x.is_nested and \
        torch._C._len_torch_dispatch_stack() > 0 and \
        (_fwd_ad is None or getattr(_fwd_ad, "_current_level", -1) < 0) and \
        _functorch_level() is None


def _value(t: torch.Tensor) -> Any:
    """`t.item()`; a fake run's 0 (False), whose values are unknown (Note [A fake run's
    formula]): no zero in the input."""
    return 0 if _run_fake(t) else t.item()


# Note [A fake run's formula]
# A fake run's tensors (`trace --fake`) are FakeTensors, which took torch's own kernel:
# the composite path, priced as a real input with a zero would be. The real run of
# tests/clients/train_cumprod.py (no zero) read 37,504 B (cumprod), 13,824 (complex),
# 53,248 (prod over a dim) and 65,536 B (prod of all) under the fake one at the peak and in
# every policy. A fake input's values are unknown, so its call takes the re-stated formula
# as one with no zero (the common case: a product of factors, a decay), and fake = real
# there; docs/fake.md lists it among the values a fake run does not have.
def _has_zero(x: torch.Tensor) -> bool:
    """Whether `x` holds a zero, asked where the dispatch mode does not see it: the
    untraced formula's own branch, known in forward (Note [A derivative formula that
    branches on the mode]); a fake run's input, unknown, has none (Note [A fake run's
    formula])."""
    if _run_fake(x):
        return False
    with torch._C._DisableTorchDispatch(), torch.no_grad():
        return bool((x == 0).any().item())


def _cumprod(native: Any) -> Callable[..., Any]:
    def kernel(keyset, x, dim, dtype=None):
        if isinstance(dim, int) and _routable(x, dtype) and not _has_zero(x):
            return _Cumprod.apply(x, dim)
        return native.call_boxed(keyset, x, dim, dtype=dtype)
    return kernel


def _prod(native: Any) -> Callable[..., Any]:
    def kernel(keyset, x, dtype=None):
        if _routable(x, dtype) and not _has_zero(x):
            return _Prod.apply(x, None, False)
        return native.call_boxed(keyset, x, dtype=dtype)
    return kernel


def _prod_dim(native: Any) -> Callable[..., Any]:
    def kernel(keyset, x, dim, keepdim=False, dtype=None):
        if isinstance(dim, int) and isinstance(keepdim, bool) and _routable(x, dtype) and \
                not _has_zero(x):
            return _Prod.apply(x, dim, keepdim)
        return native.call_boxed(keyset, x, dim, keepdim, dtype=dtype)
    return kernel


# the overload -> a maker of our kernel around torch's
_KERNELS = {"cumprod": _cumprod, "prod": _prod, "prod.dim_int": _prod_dim}


class UntracedFormulas:
    """The kernels of Note [A derivative formula that branches on the mode], registered
    while at least one collector holds this (counted; one registration at a time)."""

    _lock = threading.Lock()
    _holders = 0
    _lib: Any = None

    @classmethod
    def acquire(cls) -> None:
        with cls._lock:
            cls._holders += 1
            if cls._holders == 1:
                cls._lib = _register()

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            if cls._holders == 0:
                return
            cls._holders -= 1
            if cls._holders == 0:
                lib, cls._lib = cls._lib, None
                if lib is not None:
                    lib._destroy()

    @classmethod
    def forget_in_child(cls) -> None:
        """A forked child: torch's kernels back, nothing held (Note [A forked child
        traces nothing])."""
        lib, cls._lib, cls._holders = cls._lib, None, 0
        cls._lock = threading.Lock()   # the parent's may have been held at the fork
        if lib is not None:
            try:
                lib._destroy()
            except Exception:   # noqa: BLE001 - the child still works, pricing as before
                pass

    @classmethod
    def registered(cls) -> bool:
        return cls._lib is not None


def _register() -> Any:
    """A Library holding our kernels, or None where torch cannot take them (the ledger
    pass then prices the composite path, as before)."""
    try:
        lib = torch.library.Library("aten", "IMPL")
    except Exception:   # noqa: BLE001
        return None
    try:
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": ours replaces one for the pass
            warnings.simplefilter("ignore")
            for op, make in _KERNELS.items():
                for key in _KEYS:
                    if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", key):
                        continue   # someone's own kernel there: theirs, left alone
                    native = torch.library.get_kernel(f"aten::{op}", key)
                    lib.impl(op, make(native), key, with_keyset=True)
    except Exception:   # noqa: BLE001 - an older torch without get_kernel: as before
        lib._destroy()
        return None
    return lib

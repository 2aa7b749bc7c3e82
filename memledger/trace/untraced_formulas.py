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
folds an out-of-place op into its in-place twin). So for the ledger pass a
`TorchFunctionMode`, entered with the collector, routes the script's call of such an op
(`_FORMULAS`, by the torch function and the Tensor method) to an autograd.Function whose
forward is the native op (saving its input and result, as the native node does) and
whose backward is the untraced formula written out op for op, each temporary held as
long as C++ holds it: the dispatch mode then sees what the untraced run allocates, in its
order. Where the untraced formula itself branches on values (an input with a zero), the
backward takes the native node's gradient (the composite path under the mode, as before,
plus a re-run of the forward op: not exact there). Double backward builds torch's graph.
Only calls made from Python are routed (a C++ kernel's inner `at::cumprod` is not), and
only where the untraced run takes the formula re-stated: grad enabled, a plain tensor that
requires grad, no `dtype` cast, no `out=`, outside torch.func's transforms; a fake run's
tensors (`trace --fake`) are not plain, and keep the composite path. The node is named
`_CumprodBackward` / `_ProdBackward` in the ledger pass (nothing keys on those names).

The other branches on the check seen in a profile against a mode's ops (torch 2.13 CPU):
an in-place op run out of place under the mode, folded by Note [In place but for the mode]
(gradient sums; `index_put` / `scatter_add` / `index_add` / `scatter` of indexing, gather,
index_select, topk, sort, kthvalue, median), by Note [A derivative formula in place but
for the mode] (`binary_cross_entropy_with_logits` with a `pos_weight`, `clamp`) and the
Notes on a Linear's bias and math attention's mask; not covered: `trace`'s backward
(`index_fill` for `index_fill_`), `take`'s (`put` for `put_`), `atan2`'s (`masked_fill` for
`masked_fill_`), `masked_scatter`'s (its own kernel's ops untraced). An entry in
`_FORMULAS` re-states one more formula.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _native_grad(fn, x: torch.Tensor, grad: torch.Tensor, *args: Any) -> torch.Tensor:
    """The native node's gradient of `fn(x, *args)` (its formula, as the mode runs it; a
    graph of it where backward builds one)."""
    graph = torch.is_grad_enabled()   # inside backward: create_graph
    with torch.enable_grad(), torch._C.DisableTorchFunction():
        return torch.autograd.grad(fn(x, *args), x, grad, create_graph=graph)[0]


class _Cumprod(torch.autograd.Function):
    """`cumprod_backward`'s untraced short path (no zero in the input)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int) -> torch.Tensor:
        with torch._C.DisableTorchFunction():
            out = torch.cumprod(x, dim)
        ctx.dim = dim
        ctx.save_for_backward(x, out)   # as CumprodBackward0: self and result
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, out = ctx.saved_tensors
        dim = ctx.dim % max(x.dim(), 1)
        if x.numel() <= 1 or x.dim() == 0 or x.shape[dim] == 1:
            return grad, None
        with torch._C.DisableTorchFunction():
            w = out.conj() * grad
            is_zero = x == 0
            if is_zero.any().item():
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
        with torch._C.DisableTorchFunction():
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
        with torch._C.DisableTorchFunction():
            if dim is None:
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
                if slice_zero_count.sum().item() != 0:
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


def _bind(args: tuple, kwargs: dict, names: tuple[str, ...]) -> dict | None:
    """The call's arguments by name (`names`: the positional ones, in order), or None for
    an argument this module does not route (`out=`, a name not in `names`)."""
    if len(args) > len(names):
        return None
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            return None
        bound[k] = v
    return bound


def _routable(x: Any, dtype: Any) -> bool:
    """Whether the untraced run takes the re-stated formula for a call on `x`: a plain
    tensor that requires grad, grad mode on, no cast to another dtype."""
    return type(x) in _PLAIN and x.requires_grad and torch.is_grad_enabled() and \
        dtype in (None, x.dtype) and _functorch_level() is None


def _cumprod(args: tuple, kwargs: dict) -> Any:
    """`_Cumprod` where the untraced run takes the re-stated path; else NotImplemented."""
    b = _bind(args, kwargs, ("input", "dim", "dtype"))
    if b is None or not isinstance(b.get("dim"), int) or \
            not _routable(b.get("input"), b.get("dtype")):
        return NotImplemented
    return _Cumprod.apply(b["input"], b["dim"])


def _prod(args: tuple, kwargs: dict) -> Any:
    """`_Prod` where the untraced run takes the re-stated path; else NotImplemented."""
    b = _bind(args, kwargs, ("input", "dim", "keepdim", "dtype"))
    if b is None or not _routable(b.get("input"), b.get("dtype")):
        return NotImplemented
    dim, keepdim = b.get("dim"), b.get("keepdim", False)
    if dim is None and "keepdim" in b or dim is not None and not isinstance(dim, int) or \
            not isinstance(keepdim, bool):
        return NotImplemented
    return _Prod.apply(b["input"], dim, keepdim)


_FORMULAS = {torch.cumprod: _cumprod, torch.Tensor.cumprod: _cumprod,
             torch.prod: _prod, torch.Tensor.prod: _prod}


class UntracedFormulas(TorchFunctionMode):
    """Routes the calls of `_FORMULAS`' ops to their untraced formulas (Note [A derivative
    formula that branches on the mode]); entered with the collector."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = _FORMULAS.get(func)
        if route is not None:
            got = route(args, kwargs)
            if got is not NotImplemented:
                return got
        return func(*args, **kwargs)

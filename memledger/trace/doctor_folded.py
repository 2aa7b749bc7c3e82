"""Gradients the script keeps, and the backward passes they carry into what it makes of them
(Note [A gradient folded into the step's]).

# Note [A gradient folded into the step's]
`dropped_update` counts a backward pass as used when a step consumes a `.grad` it filled
(Note [Which backward reached a parameter] in doctor_probe.py). A loop that keeps each
loss's gradients and puts their sum back before the step (per-task gradients, as PCGrad
keeps them) clears `.grad` between the losses:

    for loss in (loss_a, loss_b):
        opt.zero_grad(set_to_none=True)
        loss.backward()
        kept.append([p.grad for p in params])   # the tensors, no copy
    for p, *gs in zip(params, *kept):
        p.grad = sum(gs)                        # both passes' gradients
    opt.step()

The second backward found `.grad` None (a fresh start), so its parameters' pending passes
became [2], and the step credited pass 2 alone: the doctor warned "3 of 6 backward passes
made gradients that no optimizer.step() used (a zero_grad ran before any step used them)"
on tests/clients/train_pass_end.py `--order keep`, whose every pass reaches the update.

The rule: a `.grad` the script reads (outside a step and a zero_grad) while passes are
pending on it carries those passes; an op on such a tensor makes outputs that carry them
too (the union over its tensor arguments, one level of lists: `g1 + g2`, `torch.stack(gs)`,
`g.clone()`, `acc.add_(g)`); a carried tensor set as a parameter's `.grad` (or its
`.grad.data`), or written into a parameter's current `.grad` in place (`p.grad.add_(k)`,
`p.grad.copy_(k)`, `torch._foreach_add_(grads, kept)`), folds its passes into that
parameter's gradient, and the step that consumes it uses them (`folded` in its record).
A gradient read is its passes only while its version stays the one read: a
`zero_grad(set_to_none=False)` zeroes it in place, and the next backward writes the next
pass into the same tensor, so a kept reference to it holds the later pass, not the
earlier one (tests/doctor/kept_grads.py `--bug zero`: a real drop, still found). A pass
whose kept gradients only feed a log (their norm) is folded into nothing, and still a
drop (`--bug log`).

Not micro-batches: the folded passes are kept out of the step's `bw`, which the
accumulation checks read (a sum of per-task gradients is the script's choice, not a loss
left undivided). A statistic of a kept gradient is no gradient: Note [A statistic of a
gradient carries no pass]. A gradient written over: Note [A gradient written over].

# Note [A statistic of a gradient carries no pass]
fix56a's rule carried a kept gradient's passes through every op, so a value computed from
it that only scales another pass's gradient folded the kept pass in: `p.grad.mul_(k.norm())`
(tests/doctor/kept_grads.py `--bug scale`: the first loss's gradient norm rescales the
second's, meant to be added) read every pass as used, where the first loss's gradient
reaches no update (3 of 6 passes dropped). A one-element output of an op whose carrying
arguments hold more than one element (a norm, a sum, a dot product, a max: `k.norm()`,
`(k * g).sum()`, `torch.linalg.vector_norm(k)`) is a statistic of them and carries no
pass; nor does an output that is not floating point (a mask `k > 0`, a sign test: a
decision about the values, not values). The kept gradient itself, scaled by such a
number and summed in (`p.grad + k * (|g| / |k|)`, `--fold scaled`), still carries its
pass: the product's other argument is `k`, of the parameter's size. A parameter of one
element (a scalar temperature, a bias of one output) has statistics of its own size: there
the one-element output of a reduction (`norm`, `sum`, `mean`, `dot`, ... by the name of
torch's function) carries no pass either (tests/doctor/kept_grads.py's last layer,
Linear(16, 1), has a bias of one element, whose `k.norm()` alone folded the first pass in).
Known limitation: a per-row statistic (`k.norm(dim=1)`, more than one element) carries as
a gradient would.

# Note [A gradient written over]
A step credited the passes that filled a parameter's `.grad` whatever the script did to it
before the step, so a gradient written over by a tensor made from none of it still counted
its pass as used: `p.grad = k.clone()` after the second backward (tests/doctor/
kept_grads.py `--bug replace`: the first loss's kept gradient put in place of the second's,
which was meant to be added) read every pass as used, where the second loss's gradients
reach no update (3 of 6 passes). Now a write over a parameter's current `.grad`, outside
a step and outside a backward (a hook or an engine callback that sets it, as FSDP's, is
the backward's own), removes the passes pending on it (those that filled it and those
folded into it) that the value written does not carry by the rule above: `p.grad = t`,
`p.grad.data = t`, and in place `zero_()`, `torch._foreach_zero_`, `fill_(c)`, `mul_(0)`,
`copy_(t)`. A value that is the gradient itself or a view of its storage (a gradient
buffer set again) writes nothing over; `p.grad = None` is a clear, as before. A step that
finds such a gradient None or zero credits the removed passes as before:
`zeroed_before_step` names that bug (a `zero_grad()`, or `p.grad = torch.zeros_like(p)`,
between backward and step), and a second finding for it would say nothing more. Written
over, then refilled from kept tensors (`p.grad = torch.zeros_like(p); p.grad.add_(k)`:
`--bug reset`), the step uses what was folded in only; `--fold reset` adds the current
gradient back too (`.add_(g)`, read before the write) and uses both passes. An in-place
fold into a `.grad` the script set (the zeros above) is read as one into a gradient (it
was passed over: the fold of `k` went unseen, and `--fold reset` drew "3 of 6"). Any
tensor such an in-place op writes over carries nothing of what it carried before, only
what its other arguments carry (`p.grad.copy_(torch.randn_like(p))`, tests/doctor/
written_over.py `--write copy`, once read as the gradient folded into itself).
Known limitation: a gradient sent through values no torch op made (`torch.from_numpy(
compress(p.grad.numpy()))`, set back as `.grad`) carries nothing, and reads as written
over. Cost: one dict lookup per op outside a step; the rest only at such a write.

Cost: nothing while no gradient with pending passes was read; then a scan of each op's
tensor arguments (a dict lookup each) until a step uses those passes or the tensors die.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

_Tensor = torch.Tensor
# reductions whose one-element output is a statistic even of a one-element gradient (Note
# [A statistic of a gradient carries no pass]), by the name of torch's function
_REDUCTIONS = frozenset({
    "norm", "vector_norm", "matrix_norm", "sum", "nansum", "mean", "nanmean", "max", "min",
    "amax", "amin", "dot", "vdot", "inner", "std", "var", "prod", "median", "dist",
    "logsumexp"})


def shares_storage(value: Any, g: Any) -> bool:
    """`value` is `g` or a view of its storage (Note [A gradient written over]); True
    where it cannot be told (a sparse or wrapper tensor: nothing is taken away)."""
    if value is g:
        return True
    try:
        return value.untyped_storage().data_ptr() == g.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return True


class FoldedGradients:
    """id(tensor) -> (weak reference, the passes it carries, the version read or None)."""

    def __init__(self) -> None:
        self._of: dict[int, tuple[weakref.ref, frozenset[int], int | None]] = {}

    def __bool__(self) -> bool:
        return bool(self._of)

    def read(self, g: _Tensor, passes) -> None:
        """The script read gradient `g`, which passes `passes` (not yet used) filled."""
        try:
            version = g._version
        except RuntimeError:   # no version counter (an inference tensor): not followed
            return
        self._put(g, frozenset(passes), version)

    def passes_in(self, args, kwargs) -> frozenset[int]:
        """The passes the tensor arguments of an op carry, before it runs."""
        out: set[int] = set()
        for a in (*args, *kwargs.values()) if kwargs else args:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(t, _Tensor):
                    out.update(self.of(t))
        return frozenset(out)

    def of(self, t: _Tensor) -> frozenset[int]:
        e = self._of.get(id(t))
        if e is None or e[0]() is not t:
            return frozenset()
        if e[2] is not None and t._version != e[2]:   # cleared or written over since read
            del self._of[id(t)]
            return frozenset()
        return e[1]

    def made(self, out: Any, passes: frozenset[int], args=(), kwargs=None,
             func: Any = None) -> None:
        """The outputs of an op whose arguments carried `passes` carry them (an in-place
        op's target among them: the union with what it carried); a statistic of them
        carries none (Note [A statistic of a gradient carries no pass])."""
        big = None   # do the carrying arguments hold more than one element? (asked once)
        for t in out if isinstance(out, (list, tuple)) else (out,):
            if isinstance(t, _Tensor):
                if not t.is_floating_point() and not t.is_complex():
                    continue   # a mask, an index: a decision about the values
                if t.numel() == 1:
                    if big is None:
                        big = getattr(func, "__name__", "") in _REDUCTIONS or \
                            self._carriers_larger(args, kwargs or {})
                    if big:
                        continue
                e = self._of.get(id(t))
                read = e is not None and e[0]() is t and e[2] is not None
                # a gradient read and written in place since (a clip's `_foreach_mul_`):
                # still a gradient, at its new version
                self._put(t, passes | (e[1] if e is not None and e[0]() is t else frozenset()),
                          t._version if read else None)

    def _carriers_larger(self, args, kwargs) -> bool:
        """An argument carrying passes holds more than one element."""
        for a in (*args, *kwargs.values()) if kwargs else args:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(t, _Tensor) and self.of(t) and t.numel() > 1:
                    return True
        return False

    def forget(self, targets: Any) -> None:
        """`targets` (a tensor or a list of them) are written over: they carry nothing."""
        for t in targets if isinstance(targets, (list, tuple)) else (targets,):
            e = self._of.get(id(t))
            if e is not None and e[0]() is t:
                del self._of[id(t)]

    def used(self, passes: set[int]) -> None:
        """A step used `passes`: tensors carrying only those carry nothing that matters."""
        for k in [k for k, e in self._of.items() if e[1] <= passes]:
            del self._of[k]

    def _put(self, t: _Tensor, passes: frozenset[int], version: int | None) -> None:
        key = id(t)
        of = self._of

        def gone(ref: weakref.ref, key: int = key) -> None:
            e = of.get(key)
            if e is not None and e[0] is ref:
                del of[key]

        try:
            ref = weakref.ref(t, gone)
        except TypeError:
            return
        of[key] = (ref, passes, version)

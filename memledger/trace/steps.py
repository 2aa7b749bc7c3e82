"""When a training step ends, for both passes of `memledger trace` (Note [When a step ends]
in trace/collector.py).

A step ends at the optimizer `step()` after which every parameter that had a gradient when
the step's first optimizer began has been stepped by some optimizer. The parameters come
from every optimizer alive then (found once by a scan of live objects, then each optimizer
that steps), so a backbone optimizer and a head optimizer stepping after one backward make
ONE step. Example: body Linear(8, 16) under `o1`, head Linear(16, 4) under `o2`, both with
gradients: after `o1.step()` the head's 2 parameters are still pending, after `o2.step()`
none are: step 1 ends there.

Fallbacks, for parameters with a gradient that no optimizer steps: the step also ends when
an optimizer that already stepped in it steps again (the next iteration), and the collector
ends it when the next top-level forward begins.
"""

from __future__ import annotations

import gc
import weakref

import torch


class StepBoundary:
    def __init__(self) -> None:
        self._opts: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._scanned = False
        self._pending: set[int] | None = None   # param ids still to step in this step
        self._stepped: set[int] = set()         # optimizers (ids) that stepped in it
        self._depth = 0                          # step() calls in progress (LBFGS closure)

    @staticmethod
    def _params(opt: torch.optim.Optimizer):
        return (p for g in opt.param_groups for p in g["params"])

    def pre(self, opt: torch.optim.Optimizer) -> bool:
        """Called before `opt.step()`. True when an open step must end first (fallback)."""
        self._depth += 1
        self._opts.add(opt)
        restep = self._pending is not None and id(opt) in self._stepped
        if self._pending is None or restep:
            if not self._scanned:
                self._scanned = True
                # type(o), not isinstance: no attribute lookups on arbitrary objects
                self._opts.update(o for o in gc.get_objects()
                                  if issubclass(type(o), torch.optim.Optimizer))
            self._pending = {id(p) for o in self._opts for p in self._params(o)
                             if p.grad is not None}
            self._stepped = set()
        return restep

    def post(self, opt: torch.optim.Optimizer) -> bool:
        """Called after `opt.step()`. True when the training step has ended."""
        self._depth = max(0, self._depth - 1)
        self._stepped.add(id(opt))
        self._pending = (self._pending or set()) - {id(p) for p in self._params(opt)}
        if self._pending:
            return False
        self.reset()
        return True

    @property
    def open(self) -> bool:
        """A step some optimizer began and that is not over, with no step() running."""
        return bool(self._pending) and self._depth == 0

    def reset(self) -> None:
        self._pending = None
        self._stepped = set()


# ---- steps without an optimizer ------------------------------------------------------------
# For scripts that never call `optimizer.step()` (evaluation, inference, a hand-written
# update), `memledger trace --steps-by forward` ends a step when the next forward of a root
# module with parameters begins (a step is one forward and whatever follows it: backward
# and update included; the last one ends with the script), and `--steps-by whole` makes
# the whole script one step. The ledger pass counts them in the Collector, the allocator
# pass with StepCounter below: the same rule in both passes.
STEPS_BY = ("optimizer", "forward", "whole")


class StepCounter:
    """Calls `on_step()` at each step end for `by` in ("forward", "whole"); `remove()` takes
    its hooks off; `script_ended()` closes the open step unless `on_step` already stopped
    the script (it raised)."""

    def __init__(self, by: str, on_step) -> None:
        from torch.nn.modules import module as nn_module

        if by not in STEPS_BY[1:]:
            raise ValueError(f"StepCounter counts by forward or whole, not {by!r}")
        self.by, self._on_step = by, on_step
        self.forwards = 0
        self.stopped = False
        self._depth = 0
        self._handles = [] if by == "whole" else [
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post, always_call=True)]

    def _fire(self) -> None:
        try:
            self._on_step()
        except BaseException:
            self.stopped = True   # the steps asked for are done: the script stops here
            raise

    def _pre(self, module, args) -> None:
        if self._depth == 0 and next(module.parameters(), None) is not None:
            if self.forwards:
                self._fire()      # a new root forward: the previous step ended
            self.forwards += 1
        self._depth += 1

    def _post(self, module, args, output) -> None:
        self._depth = max(self._depth - 1, 0)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def script_ended(self) -> None:
        self.remove()
        if not self.stopped and (self.by == "whole" or self.forwards):
            try:
                self._fire()
            except BaseException:
                pass   # a stop raised at the very end: the script is over anyway

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

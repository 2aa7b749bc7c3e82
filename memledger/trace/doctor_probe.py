"""The doctor's probe: what the training mechanics did, step by step, as plain records.

It watches through torch's own mechanisms and never changes what the script computes:

- a `TorchFunctionMode` sees `backward()` (count, loss value, line), the loss functions
  (`cross_entropy`, `nll_loss`: reduction, valid tokens), and the ops that cut the graph
  (`.detach()`, `.data`, `.numpy()`, an op run under `no_grad` on a tensor that requires
  grad; torch's reentrant checkpoint runs its forward that way), the `p.grad` reads of
  torch's clip functions and GradScaler's scale and unscale (Note [Where a clip and a step
  fall] in doctor_order.py);
- per parameter, a tensor hook (before autograd accumulates) and a post-accumulate-grad
  hook: which backward passes reached it, and whether `.grad` still held a consumed gradient;
- global module forward pre-hooks: parameter names, the modules that ran, Dropout and
  BatchNorm in eval mode under grad;
- global optimizer step pre/post hooks: the step's parameters, their gradients (finite?
  zeroed? clipped? the previous step's again?), frozen parameters that moved, the variable
  holding each LR scheduler, and at each step boundary the tensors that still
  carry autograd history from an earlier step (Note [Cross-step retention] in
  doctor_retention.py).

The records are read by memledger/doctor/ (pure, no torch), which turns them into findings.
The probe's own tensor work runs with every mode disabled (`_quiet`), so a Collector traced
alongside never sees it.

# Note [Which backward reached a parameter]
A step's window is everything since that optimizer's previous step. The tensor hook on
parameter P runs before autograd adds the incoming gradient into `P.grad`; at that moment
`P.grad` is None or zero (zeroed: a fresh start), or it still holds gradient. Holding
gradient that a step already consumed is a leak (no `zero_grad` between steps); holding
gradient no step consumed is deliberate accumulation. Whether `.grad` is zero is read only
when it may have changed: `(id(grad), grad._version)` is remembered after each accumulation,
and an untouched gradient is known to be non-zero without reading it. Example: K=2 micro
batches, fc.weight (64 KiB of fp32): backward 1 finds None (fresh), backward 2 finds the
same tensor at the same version (accumulating), step consumes both; backward 3 finds None
(zero_grad ran): no finding. Without zero_grad, backward 3 finds the consumed tensor: leak.
The finding waits for the step that consumes the tainted gradient: a GAN's generator
backward adds to the discriminator's used gradient, but the discriminator's zero_grad
clears it before its step (the next backward finds None): no leak. The doctor's step count
and its retention boundaries follow the training-step rule of trace/steps.py; `--steps 3`
means three training steps, as in `trace`.

# Note [Gradients of two weights]
A gradient no step has used yet is only meant to be added to at the same weights (K
micro-batches, one step). When a parameter changed value in place between the backward
that filled its `.grad` and the next backward that adds to it, outside any step (SAM's
`first_step` ascends along the gradient and must zero it; a hand-made weight perturbation),
the step uses g(w) + g(w'): a `mixed` record, written when a step consumes it. Only when
something read `.grad` in between (SAM's ascent is computed from it): weight noise injected
and removed around each micro-batch of an accumulation reads no gradient and is the
intended estimate, gradients at perturbed weights. The change
is told by the version counter, confirmed by a checksum (the L2 norm) taken when the gradient arrived
(in-place writes of the same values, a sharded parameter gathered again, are not changes).
SAM's first_step(zero_grad=True) clears the gradient: the next backward is fresh, nothing
to report.

# Note [Backward passes of one forward]
K backward passes before one step are micro-batches (accumulation: loss_not_divided,
token_denominator) only if each backpropagates a forward of its own. A multi-task loop
that runs the trunk once and calls `loss_k.backward(retain_graph=True)` per head sums the
partial gradients of one objective over one batch: dividing by K would be wrong. The
probe tells them apart by the graph itself: each backward's walk (the one that looks for
input leaves) tags every node it passes in the node's `metadata` dict with (window,
backward number); a later backward of the same window that meets a tagged node shares a
forward with that one (`shares` in its record). AccumulateGrad nodes (one per leaf, met
by every forward) are not tagged. Tags, not `id(node)`: a node's Python wrapper dies after
the walk and its id is reused, and sequence numbers restart in each thread (DataParallel's
replicas).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import sys
import weakref
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as nn_module
from torch.nn.parameter import UninitializedTensorMixin
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from memledger.crash import internal   # Note [memledger's own hooks fail as memledger]
from memledger.trace.backward_calls import is_backward
from memledger.trace.collector import StopTracing
from memledger.trace.compiled import eager_stance
from memledger.trace.doctor_folded import FoldedGradients, shares_storage
from memledger.trace.doctor_order import OrderWatch, clip_frame, clips_nothing, zero_factor
from memledger.trace.doctor_garbage import GarbageWatch
from memledger.trace.doctor_loose import LooseParams
from memledger.trace.doctor_losses import (ACTIVATION_MODULE, ACTIVATION_MODULES,
                                          MADE_BY_CALL, call_args, logsumexp_taken,
                                          loss_inputs, made_by_call)
from memledger.trace.doctor_penalty import PenaltyWatch
from memledger.trace.doctor_rng import RANDOM_OPS, RngWatch
from memledger.trace.doctor_unused import UnusedGraphWatch
from memledger.trace.doctor_retention import (MAX_NODES, WALKED, RetentionWatch,
                                               readable_grad_fn)
from memledger.trace.roots import (
    ByModule, RootNames, module_named_parameters, module_parameters, paths_under)
from memledger.trace.optimizer_like import optimizer_like_alive, unstepped_name
from memledger.trace.steps import OptimizerSteps, StepCounter
from memledger.trace.param_attrs import gradient_like
from memledger.trace.where import in_reentrant_checkpoint, user_line, user_name_of
from memledger.trace.warning_sites import WarningSites

_Tensor = torch.Tensor
_DATA = torch._C.TensorBase.__dict__["data"]
_GRAD = torch._C.TensorBase.__dict__["grad"]   # `p.grad` reads: a clip function's (order.py)
# Note [A zero_grad reads no gradient]
# `Optimizer.zero_grad` and `Module.zero_grad` read `p.grad` (`if p.grad is not None`) to
# clear it. Read as the script using its gradients, that hid `wasted_gradients` where it
# matters most: an optimizer built over a loss's own weights (ArcFace's class centres, a
# proxy loss's proxies) whose `zero_grad()` the loop calls and whose `step()` it forgets,
# so backward computes 384 B of gradient for `loss_func.W` every step and the centres never
# move: no finding, where leaving out the optimizer altogether gave one. A read from the
# `zero_grad` methods' own code is no read (nor one between two weights for Note [Gradients
# of two weights]); an optimizer's is kept, by class, on the parameter (`zeroed_by`), so the
# finding says which optimizer never steps. A subclass's own `zero_grad` reads as before.
_ZERO_GRADS = {inspect.unwrap(torch.optim.Optimizer.zero_grad).__code__,
               inspect.unwrap(nn.Module.zero_grad).__code__}
_SCALE_MULS = {torch.Tensor.mul, torch.Tensor.__mul__}   # GradScaler.scale()'s multiply
_SCALER_FILE = torch.amp.grad_scaler.__file__
_UNSCALE = torch._amp_foreach_non_finite_check_and_unscale_   # GradScaler.unscale_()
_CUTS = {torch._C.TensorBase.detach: "detach", torch._C.TensorBase.detach_: "detach",
         torch._C.TensorBase.numpy: "numpy"}


_DETACH_IN_PLACE = torch._C.TensorBase.detach_
# Note [A gradient cleared by hand] (doctor_order.py): the ops that clear a gradient in
# place, those of a factor or value only where it is 0 (`OrderWatch.cleared`)
_CLEARS = {torch._C.TensorBase.zero_: "zero_", torch.zero_: "zero_",
           torch._C.TensorBase.mul_: "mul_", torch._C.TensorBase.fill_: "fill_",
           torch._foreach_zero_: "_foreach_zero_", torch._foreach_mul_: "_foreach_mul_"}
# Note [A gradient written over] (doctor_folded.py): the writes over a `.grad`
_OVERWRITES = {_GRAD.__set__: "set", _DATA.__set__: "data",
               torch._C.TensorBase.zero_: "zero_", torch.zero_: "zero_",
               torch._foreach_zero_: "zero_", torch._C.TensorBase.fill_: "fill_",
               torch._C.TensorBase.mul_: "mul_", torch._C.TensorBase.copy_: "copy_"}
_AUTOGRAD_GRAD = torch.autograd.grad
_LOSSES = {F.cross_entropy: "cross_entropy", F.nll_loss: "nll_loss"}
_LOSS_MODULE = nn.modules.loss._Loss   # Note [A loss module of its own]
# losses read for their value only (check 4's loss_not_divided): no ignored targets
_VALUE_LOSSES = {f: f.__name__ for f in (
    F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy,
    F.binary_cross_entropy_with_logits, F.kl_div, F.cosine_embedding_loss,
    F.margin_ranking_loss, F.hinge_embedding_loss, F.soft_margin_loss,
    F.multilabel_soft_margin_loss, F.poisson_nll_loss, F.gaussian_nll_loss, F.ctc_loss)}
_LOSSES.update(_VALUE_LOSSES)
# a logsumexp normalises what it is taken of (Note [Values that are no log-probabilities]
# in doctor_losses.py): looked up with the losses, so other ops pay nothing more
_LOGSUMEXP = "logsumexp"
_LOSSES.update({f: _LOGSUMEXP for f in (torch.logsumexp, torch.Tensor.logsumexp,
                                         torch.special.logsumexp)})
# a mean a function named as a loss takes: Note [A loss function of its own]
_MEAN = "mean"
_LOSSES.update({f: _MEAN for f in (torch.mean, torch.Tensor.mean)})
# functional dropout (transformers' attention: `F.dropout(w, p, training=module.training)`):
# check 7 sees nn.Dropout by its module hook; these by their call and the training flag
# passed (a dispatch mode would not: with training=False no aten op runs at all)
_DROPOUTS = {f: f"F.{f.__name__}" for f in (
    F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
    F.feature_alpha_dropout)}
_DROPOUTS.update({f: f"torch.{f.__name__}" for f in (
    torch.dropout, torch.alpha_dropout, torch.feature_dropout, torch.feature_alpha_dropout)})
_grad_enabled = torch.is_grad_enabled
# Note [Backward passes of one forward]: the (window, backward number) that last walked a
# graph node, kept in the node's own metadata dict (it lives and dies with the node)
_WALKED = WALKED   # Note [A branch no backward ran, kept past a later backward]
# Note [A validation forward under grad]: the eval-mode records whose module's input this
# node made, marked `backprop` when a backward walks the node
_MODE = "memledger.doctor.mode"


def _node_metadata(node) -> dict | None:
    """A graph node's own metadata dict (it lives and dies with the node); None for no node
    or one without it."""
    if node is None:
        return None
    try:
        return node.metadata
    except (AttributeError, RuntimeError):
        return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The probe's own tensor work: no torch-function or dispatch mode sees it, no graph."""
    with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
        yield


def _next_sequence_nr() -> int:
    """The sequence number autograd gives the next graph node made on this thread (its
    counter grows by one a node: a node numbered below was made before this call)."""
    with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.enable_grad():
        return (torch.zeros((), requires_grad=True) * 1).grad_fn._sequence_nr() + 1


def _functorch_wrapped(t: Any) -> bool:
    """A tensor of a torch.func transform (Note [A loss no backward can run from])."""
    return torch._C._functorch.is_functorch_wrapped_tensor(t)


def _values(g: torch.Tensor) -> torch.Tensor:
    """What a gradient holds, as a dense tensor to test: a sparse gradient's values
    (nn.Embedding(sparse=True); `.any()` and `isfinite` have no sparse kernels)."""
    if g.layout is torch.sparse_coo:
        return g._values()
    if g.layout is not torch.strided:   # CSR and friends
        return g.values()
    return g


# Note [Zero as backward left it]
# A gradient that is zero at step() was cleared since backward (zero_grad between them: the
# step uses none of it, `zeroed_before_step`) or is zero as backward computed it (every
# hinge margin met; GRPO's advantages, zero where each group's completions scored alike).
# Told apart first by the tensor and its version as backward left it; but a clip scales
# the gradient in place (`clip_grad_norm_`, transformers' Trainer at max_grad_norm=1.0 by
# default), which moves the version and keeps a zero gradient zero: TRL's GRPO on a tiny
# Llama (tests/clients/train_trl.py --trainer grpo), whose first steps scored both
# completions of each prompt alike, read as "the gradients of 21 parameters were cleared
# between backward and optimizer.step()". So `grad.any()` is taken as each backward leaves
# a gradient, kept as a tensor (no device sync), and read only at a step that finds the
# gradient zero after something changed it: zero then as well is zero as computed, and
# the step, which had nothing to apply, is no `no_update` either (doctor/updates.py).
def _zero_as_left(any_then: torch.Tensor | None) -> bool:
    """The gradient was zero as its last backward left it (Note [Zero as backward left
    it]); False when not known."""
    if any_then is None:
        return False
    with _quiet():
        return not bool(any_then)


# Note [What a backward weighs a loss by]
# `loss_not_divided` compared the value a backward ran on with the value of the one loss
# computed since the previous backward: equal, and K such passes a step, is K micro-batch
# means summed. A loss built otherwise was never read: infini-transformer-pytorch's
# wrapper (tests/clients/train_infini.py --accum 2 --bug no-scale) takes a
# `cross_entropy(..., reduction='none')` per segment, a masked mean of it times the
# segment's share of the sequence's tokens, sums them, and calls backward inside its own
# forward every two segments: 2 passes per call, 2 losses in the first, none a single
# valued mean, and the doctor said nothing while each call added its whole sequence's
# mean (the gradient twice the mean at 2 calls a step); the plain-torch form, a helper
# in another file doing the same (tests/doctor/helper_accum.py --bug), the same.
# Where the backward ran is no obstacle: in a library the backward's and the losses'
# line are both the script's call (frames inside installed packages are passed over), in
# a helper of the project both are the helper's. What a backward does to a loss is
# read directly instead: a tensor hook on each loss output under grad receives
# d(backward root)/d(output) as backward passes it, and its sum is the loss's `weight`:
# 1 for a mean backpropagated as it is, 1/K for loss / K, and for reduction='none' the
# sum of what each element was weighed by (1/48 each of a 48-token sequence's masked
# mean, however the segments split it). A loss no backward ran through gets none.
# doctor/accumulation.py reads the weights (Note [Passes that weigh whole means]).
# Cost: one hook per loss call under grad; at backward, one sum of its gradient (a
# scalar for a reduced loss) and one read.
def _weight_hook(rec: dict[str, Any]):
    def hook(grad):
        with _quiet(), contextlib.suppress(RuntimeError, TypeError, ValueError):
            rec["weight"] = rec.get("weight", 0.0) + float(grad.detach().double().sum())
    return hook


def _overwrites_target(how: str, args) -> bool:
    """An in-place op that writes its target over, whatever it held (`zero_`, `fill_`,
    `copy_`, `mul_(0)`): Note [A gradient written over] in doctor_folded.py."""
    if how == "mul_":
        return zero_factor(args[1] if len(args) > 1 else None) is not None
    return how in ("zero_", "fill_", "copy_")


def _apart_from_named(losses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A pass's losses: a mean taken in a function named as a loss counts only where the
    pass holds no other loss (Note [A loss function of its own])."""
    if any(x.get("by_name") for x in losses) and not all(x.get("by_name") for x in losses):
        return [x for x in losses if not x.get("by_name")]
    return losses


def _checksum(p: torch.Tensor) -> torch.Tensor:
    """A parameter's L2 norm in float32, kept as a tensor (no device sync): not a sum, which
    a step along a gradient that sums to zero (a softmax layer's bias) leaves unchanged."""
    return torch.linalg.vector_norm(p.detach(), dtype=torch.float32)


def _frozen_param_target(a: Any) -> bool:
    """The target of an in-place op is a parameter without a gradient (`ema_p.add_`), or a
    list starting with one (`torch._foreach_lerp_(ema_params, ...)`)."""
    if isinstance(a, (list, tuple)):
        a = a[0] if a else None
    return type(a) is nn.Parameter and not a.requires_grad


def _lr_zero(opt: torch.optim.Optimizer) -> bool:
    """Every parameter group holding a gradient steps with learning rate 0 (a warm-up
    schedule's first step: transformers' linear and cosine warm-ups start at 0)."""
    lrs = []
    with _quiet():
        for g in opt.param_groups:
            if any(p.grad is not None for p in g["params"]):
                with contextlib.suppress(KeyError, TypeError, ValueError, RuntimeError):
                    lrs.append(float(g["lr"]))
    return bool(lrs) and all(lr == 0.0 for lr in lrs)


# Note [A step that builds state]
# Some optimizers' first step only builds their state and moves no parameter: SOAP fills
# its preconditioner statistics and eigenbases and returns (`if group['step'] == 1:
# continue`), ADOPT puts the first squared gradient into exp_avg_sq (its update divides
# by the previous step's second moment, so it has none to divide by yet); both by design
# (pytorch_optimizer 4.1.0). The doctor warned `no_update` "in step 1 although 29 had
# gradients (learning rate 0? a wrapper that skips the step?)" on a correct loop
# (tests/clients/train_pto.py --opt soap, --opt adopt). The probe notes whether a step
# found `optimizer.state` empty for its parameters and left it filled; such a step is no
# finding when a later step of the same optimizer moved its parameters
# (doctor/updates.py). A step that a wrapper skips never reaches the optimizer, so builds
# nothing; an optimizer that never moves its parameters (learning rate 0 throughout) is
# still found by its later steps. Where no step seen moved them but each wrote the
# optimizer's state (AdaShift gathers `keep_num`, 10, gradients before its first update;
# a 3-step doctor run warned "learning rate 0? a wrapper that skips the step?"), the
# warning stands, with that said instead (`state_written`, `_state_mark`).
def _has_state(opt: torch.optim.Optimizer, params: list) -> bool:
    """Does `opt.state` hold an entry for any of `params` (read without adding one: it is
    a defaultdict)?"""
    state = getattr(opt, "state", None)
    if not isinstance(state, dict):
        return False
    with _quiet():
        return any(bool(state.get(p)) for p in params)


def _state_mark(opt: torch.optim.Optimizer) -> tuple[int, int]:
    """(tensors, sum of their version counters) the optimizer holds: moved by a step that
    wrote its state, in place or by new tensors. AdaShift moves no parameter for its first
    `keep_num` (10) steps, only its state: `no_update` says so rather than guessing at a
    learning rate of 0 (Note [A step that builds state])."""
    from memledger.trace.optimizer_state import held_tensors

    n = total = 0
    with _quiet():
        for t, _ in held_tensors(opt, lambda k: ""):
            n += 1
            with contextlib.suppress(RuntimeError, AttributeError):   # an inference tensor
                total += t._version
    return n, total


def _parent_training(parents: ByModule, module: nn.Module) -> bool | None:
    """Is the module that holds `module` in training mode? (None: a top-level module.)
    A BatchNorm or Dropout in eval inside a network in training was put there by a call of
    its own (mmdetection's `norm_eval`, a `freeze_bn()` after `model.train()`); a
    forgotten `model.train()` leaves the whole network, its parent too, in eval."""
    ref = parents.get(module)
    parent = ref() if ref is not None else None
    return None if parent is None else bool(parent.training)


def _frozen(module: nn.Module) -> bool:
    """A BatchNorm frozen on purpose (fine-tuning a detection backbone): eval mode and no
    parameter that wants a gradient."""
    params = list(module.parameters(recurse=False))
    return bool(params) and not any(p.requires_grad for p in params)


def _named_params(root: nn.Module, prefix: str) -> Iterator[tuple[nn.Module, nn.Parameter, str]]:
    """(owning module, parameter, full name) of every parameter under `root`."""
    for m, path in paths_under(root, prefix):
        for n, p in module_named_parameters(m, recurse=False):
            yield m, p, ".".join(x for x in (path, n) if x)


# Note [A doctor without an optimizer]
# Evaluation, inference and hand-written updates (`p -= lr * p.grad`, LOMO's fused update)
# call no `optimizer.step()`, and the doctor refused them ("the script ran no optimizer
# step"), though their classic bugs are the ones it finds: a validation loop summing
# losses with their graphs (`total = total + loss`: every batch's graph stays reachable)
# and inference under gradients (autograd keeps what each forward saved). With
# `steps_by` "forward" or "whole", steps end by trace's StepCounter (trace/steps.py: the
# next forward of a model with parameters, or the script's end), so retention, garbage
# and unused-graph boundaries fall where `trace --steps-by` ends its steps; optimizer
# steps, if any, are still read as records but end no training step. Checks about
# optimizer steps (leaks past zero_grad, skipped updates, schedulers) find nothing where
# no optimizer steps. tests/integration/test_doctor_steps_by.py.

_TOP_HOOKS = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
_UNKNOWN: Any = object()   # torch cannot say which saved-tensor hooks are on


def _top_saved_hooks() -> Any:
    """The (pack, unpack) pair on top of the saved-tensor hook stack now, None when none
    is on, `_UNKNOWN` where torch cannot say (taken as on)."""
    if _TOP_HOOKS is None:
        return _UNKNOWN
    try:
        return _TOP_HOOKS(True)
    except (RuntimeError, TypeError):
        return _UNKNOWN

class DoctorProbe(TorchFunctionMode):
    """Records the training mechanics of a script while active (see the module docstring).

    Example usage::

        probe = DoctorProbe(max_steps=3)
        with probe:
            run_script("train.py", [])     # stops with StopTracing after 3 steps
        findings = diagnose(probe.records)

    Known limitations: one thread; loss functions other than cross_entropy / nll_loss are
    read for their value only (not token counts; torch.nn.functional's, not a library's own);
    masks applied by hand (`(loss * mask).sum() / mask.sum()`)
    are correct already and not inspected.
    """

    def __init__(self, max_steps: int | None = None, collections: bool = True,
                 steps_by: str = "optimizer") -> None:
        """`collections`: also read the garbage Python's own collections free mid-step
        (held to the step's end: off when a ledger is recorded alongside). `steps_by`: what
        ends a step, as `memledger trace --steps-by` (Note [A doctor without an
        optimizer])."""
        super().__init__()
        self.max_steps = max_steps
        self.steps_by = steps_by
        self._counter = None   # StepCounter, when steps are not counted by optimizer.step()
        self.records: list[dict[str, Any]] = []
        self._warning_sites = WarningSites(__name__)   # Note [A warning the script's op raised]
        self._penalty = PenaltyWatch(self.records)     # Note [A gradient penalty without ...]
        # Note [Parameters held weakly]: id -> parameter, while it lives
        self._params: weakref.WeakValueDictionary[int, nn.Parameter] = \
            weakref.WeakValueDictionary()
        self._index: dict[int, int] = {}               # id(param) -> index in records
        self._detached: set[int] = set()   # Note [A parameter detached in place]
        self._death: dict[int, weakref.ref] = {}       # id(param) -> ref that notes its end
        self._died: list[int] = []                     # ids of parameters gone since
        self._n_params = 0
        self._owner: dict[int, int] = {}               # id(param) -> id(owning module)
        self._owner_ref: dict[int, weakref.ref] = {}   # id(param) -> its owning module
        self._module_of: dict[int, weakref.ref] = {}   # id(module) -> module, while registering
        self._late: set[int] = set()                   # hooked at their first step only
        self._names = RootNames()                      # Note [The model]: as the ledger names
        self._param_recs: dict[int, dict[str, Any]] = {}   # id(param) -> its "param" record
        self._ran: set[int] = set()                    # modules run in this window
        # Note [A forward that takes another path in eval mode] (doctor/modes.py): modules
        # run under grad in this window in eval mode (their holder in eval too) / in training
        self._ran_eval: set[int] = set()
        self._ran_train: set[int] = set()
        # Note [Parameters a call ran without]: id(module) -> [(holder, name, id(param))];
        # ids of parameters found in their place / replaced in a call in this window
        self._slots: dict[int, list[tuple[weakref.ref, str, int]]] = {}
        self._in_place: set[int] = set()
        self._replaced: set[int] = set()
        self._mode_seen: set[int] = set()
        self._mode_pending: dict[int, dict] = {}   # Note [A validation forward under grad]
        self._mode_recs: list[tuple[weakref.ref, dict[str, Any]]] = []   # renamed with roots
        self._roots = 0
        self._handles: list[Any] = []
        self._param_handles: list[Any] = []
        # id(optimizer) -> index, while it lives (Note [An optimizer's id, taken again])
        self._opts: dict[int, int] = {}
        self._opt_refs: dict[int, weakref.ref] = {}
        self._n_opts = 0
        self._opt_steps: dict[int, int] = {}
        self._scheds: list[tuple[weakref.ref, int, bool]] = []
        self._sched_steps: dict[int, int] = {}         # scheduler index -> steps so far
        self._sched_base: dict[int, int] = {}          # index -> `_step_count` before the run
        # Note [A scheduler resumed from a checkpoint]: id -> (ref, _step_count) at the first
        # forward, of schedulers whose optimizer had state already (None: not looked yet)
        self._resumed_scheds: dict[int, tuple[weakref.ref, int]] | None = None
        self._sched_cls: list[str] = []
        self._steps = 0
        self._in_opt = 0
        # Note [Which backward reached a parameter]
        self._accum: dict[int, int] = {}               # id(param) -> backward passes this window
        self._bws: dict[int, list[int]] = {}           # id(param) -> backward indices pending
        self._consumed: set[int] = set()               # .grad consumed by a step, not reset
        self._grad_state: dict[int, tuple[int, int]] = {}
        # id(param) -> `grad.any()` as the last backward left it (a 0-d tensor)
        self._grad_any: dict[int, torch.Tensor] = {}
        self._bw = 0                                   # backward passes so far
        self.optimizer_like = ""   # Note [An optimizer torch's hooks do not see]
        self.optimizer_unstepped = ""   # Note [An optimizer that never steps]
        self._bw_rec: dict[str, Any] | None = None
        self._bw_params: set[int] = set()
        self._loose = LooseParams()   # Note [A parameter no module holds]
        # the backward records not yet judged and their parameters' versions as each left
        # them: moved before a later backward (SAM's ascent step) means its gradient was used
        # (Note [Moves of several backward passes, through .data])
        self._bw_pending: list[tuple[dict[str, Any], dict[int, int]]] = []
        # id(param) -> its checksum when `.data` was first taken outside a step since its
        # pending backward (Note [Moves of several backward passes, through .data])
        self._data_sums: dict[int, torch.Tensor] = {}
        self._root_of: dict[int, int] = {}   # id(module) -> its top-level network's number
        self._parent = ByModule()            # module -> weakref to the module holding it
        self._root_num = ByModule()          # top-level network -> its number (with params)
        self._net_seen: set[int] = set()     # networks whose first forward under grad is known
        self._hooked: set[int] = set()       # parameters whose gradient hooks are on
        self._none_grad: set[int] = set()    # reached by backward, no gradient computed
        # gradients a backward computed (`.grad` or `torch.autograd.grad`) since the last
        # step of their optimizer (Note [A gradient the script takes itself])
        self._computed: set[int] = set()
        self._losses: list[dict[str, Any]] = []
        # id(loss module) -> losses recorded when its call began (Note [A loss module of
        # its own])
        self._loss_mods: dict[int, int] = {}
        self._returns = 0   # training module calls returned (Note [Segments are no heads])
        self._cuts: dict[int, int] = {}                # id(param) -> cut record index
        # Note [A cut the graph goes around]: id(tensor cut) -> (weakref, cut record)
        self._cut_srcs: dict[int, tuple[weakref.ref, dict]] = {}
        # ... and the graph nodes the cut tensor was made from by ops of one input (their
        # sequence numbers -> the cut records): Note [A cut of a stabiliser]
        self._cut_nodes: dict[int, list[dict]] = {}
        # the sequence number of the first graph node made in this window (Note [A state
        # carried in from an earlier step], doctor/graph.py)
        self._window_seq = 0
        self._visited: set[int] = set()
        self._before: dict[int, Any] = {}
        self._step_rec: dict[str, Any] = {}
        self._closure_pending = False   # Note [A step that runs its closure]
        # the step's read a closure with no backward left for the optimizer's own backward
        # (Note [A closure that leaves backward to the optimizer])
        self._read_at_backward: Callable[[], None] | None = None
        self._closure_calls = [0]   # the closure calls of the step running now
        self._retention = RetentionWatch()             # Note [Cross-step retention]
        self._retention.known_params = lambda: list(self._params.values())
        # Note [Tensors only the garbage collector frees]
        self._garbage = GarbageWatch(collections)
        self._rng = RngWatch()   # Note [The same randomness every step] in doctor_rng.py
        # Note [A graph no backward used]
        self._unused = UnusedGraphWatch(self.records, lambda: self._train_steps + 1,
                                        lambda: self._bw)
        # training steps, by the rule every other pass uses (trace/steps.py): two
        # optimizers after one backward, or a GAN's, step once per iteration
        self._step_rule = OptimizerSteps(self._training_step_ended, hooks=False)
        self._train_steps = 0
        self._script_over = False   # the script has returned: its last step ends now
        # a consumed gradient that a backward added to: a leak only if a step consumes it
        # before zero_grad (Note [Which backward reached a parameter])
        self._tainted: dict[int, dict[str, Any]] = {}
        # Note [Gradients of two weights]
        self._pver: dict[int, tuple[int, Any]] = {}    # id(param) -> (version, sum) at backward
        self._mixed: dict[int, dict[str, Any]] = {}    # id(param) -> its `mixed` record
        self._grads_read: set[int] = set()             # `.grad` read since it last arrived
        # Note [Gradients an optimizer takes outside its step]
        self._grad_ids: dict[int, int] = {}            # id(a param's .grad) -> id(param)
        self._grads_kept: set[int] = set()             # written into optimizer state since
        # Note [A gradient folded into the step's] in doctor_folded.py: the kept gradients'
        # passes, and id(param) -> passes folded into its `.grad` since it was last fresh
        self._folded = FoldedGradients()
        self._pack_seen: Any = None   # Note [Saved-tensor hooks around a function]
        self._folded_in: dict[int, set[int]] = {}
        # Note [A gradient written over]: id(param) -> passes its `.grad` lost to a write
        # over it, and id(tensor) -> id(param) for a `.grad` the script set
        self._gone: dict[int, set[int]] = {}
        self._grads_set: dict[int, int] = {}
        # Note [Where a clip and a step fall] in doctor_order.py
        self._order = OrderWatch(self.records, self._params, self._index)
        self._sched_where: dict[int, dict[str, Any]] = {}   # scheduler index -> its variable
        self._ddp = False   # a DistributedDataParallel module ran (Note [Replicas that drift])
        self._ranks: int | None = None   # world size, once a process group exists
        self._local: dict[int, Any] = {}   # id(param) -> this rank's gradient sum (float64)
        # the step's `replica` record and its parameters, until step() returns (Note
        # [Replicas a step makes equal again] in doctor/replicas.py)
        self._replica_open: tuple[dict, list] | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "DoctorProbe":
        if self.steps_by != "optimizer":   # before the probe's own forward hook: a new
            # forward ends the step before the probe counts it in the next one
            self._counter = StepCounter(self.steps_by, self._training_step_ended)
        self._handles = [
            nn_module.register_module_forward_pre_hook(internal(self._module_pre)),
            # Note [A loss module of its own]
            nn_module.register_module_forward_hook(internal(self._module_post)),
            register_optimizer_step_pre_hook(internal(self._opt_pre)),
            register_optimizer_step_post_hook(internal(self._opt_post)),
        ]
        self._retention.start()
        self._rng.start()
        self._garbage.__enter__()
        self._unused.__enter__()
        eager_stance(True)   # Note [Compiled code runs eager under the collector]
        self._warning_sites.__enter__()   # Note [A warning the script's op raised]
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb) -> None:
        super().__exit__(exc_type, exc, tb)
        eager_stance(False)
        self._warning_sites.__exit__(exc_type, exc, tb)
        for h in self._handles + self._param_handles:
            h.remove()
        self._handles, self._param_handles = [], []
        self._script_over = True   # Note [Garbage at the script's end]
        if self._counter is not None:   # the last forward's step ends with the script
            self._counter.script_ended()
        else:
            self._step_rule.script_ended()   # a step its optimizers left open ends here
        self._finish()

    def stopped_by_others(self, steps: int) -> None:
        """The Collector alongside ends its `steps`-th step: under `steps_by` "forward", at
        the next forward's start, it stops the script there, which began no step the probe
        should close at the script's end (it read 4 steps of 3). Its last step may also end
        with the script itself, where the Collector closes it before the probe (its
        `__exit__` runs first): the probe has closed one step fewer then and closes its own
        as ever (a training loop of 2 steps and 3 validation batches, `doctor -o --steps 5`:
        "4 steps (by forward)" against the ledger's 5)."""
        if self._counter is not None and self._train_steps >= steps:
            self._counter.stopped = True

    def _finish(self) -> None:
        self._count_scheduler_steps()
        for k, (ref, opt_index, before_first) in enumerate(self._scheds):
            if opt_index >= 0:
                self.records.append({
                    "k": "sched", "cls": self._sched_cls[k], "opt": opt_index,
                    "before_first_step": before_first, "steps": self._sched_steps.get(k, 0),
                    "opt_steps": self._opt_steps.get(opt_index, 0),
                    **self._sched_where.get(k, {})})
        self.records.extend(self._loose.records())
        self.records.append({"k": "end", "steps": self._train_steps, "backward": self._bw,
                             "optimizer_steps": self._steps,
                             **({"steps_by": self.steps_by} if self._counter else {})})
        self._retention.stop()
        self._rng.stop()
        self._garbage.__exit__()
        self._unused.__exit__()

    def _count_scheduler_steps(self) -> None:
        for k, (ref, _, _) in enumerate(self._scheds):
            s = ref()
            if s is not None:   # gone once the script ends: keep the last count seen
                self._sched_steps[k] = int(getattr(s, "_step_count", 1)) - self._sched_base[k]

    # ---- parameters and modules -----------------------------------------------------------
    # Note [Parameters held weakly]
    # The checks follow each parameter across steps by id(), and a parameter kept by the
    # probe would outlive the script's last reference: an evaluation copy the script makes
    # and drops each step (`copy.deepcopy(model)` run under no_grad) stayed alive in the
    # doctor, every copy of it, so `doctor -o` recorded a ledger that never freed them
    # (`tests/doctor/snapshot.py`: 2.1 MiB at the peak against 1.1 MiB traced) and the
    # `cyclic_garbage` scan had to count such parameters as garbage by hand. The probe
    # holds parameters through a WeakValueDictionary; a weak reference's callback notes the
    # id of each that dies, and its state under that id is forgotten before the next
    # parameter is registered (a new object may reuse the id), before the unfrozen ones are
    # hooked, and at each step's end. Records keep their index: indices count up, never
    # reused.
    def _forget_dead(self) -> None:
        if not self._died:
            return
        dead = self._died[:]
        self._died.clear()   # the same list: each callback appends to it
        for pid in dead:
            if pid in self._params:   # the id taken already by a parameter registered since
                continue              # the callback ran (its state is its own now)
            held = self._grad_state.get(pid)
            if held is not None and self._grad_ids.get(held[0]) == pid:
                del self._grad_ids[held[0]]
            for d in (self._index, self._death, self._owner, self._owner_ref,
                      self._param_recs, self._accum, self._bws, self._grad_state,
                      self._cuts, self._tainted, self._pver, self._mixed, self._local,
                      self._folded_in, self._gone):
                d.pop(pid, None)
            for s_ in (self._late, self._consumed, self._hooked, self._none_grad,
                       self._grads_read, self._in_place, self._replaced, self._computed,
                       self._grads_kept):
                s_.discard(pid)
        self._order.forget(dead)

    def _add_param(self, p: nn.Parameter, name: str, owner: int, late: bool,
                   root: int | None = None) -> None:
        self._forget_dead()
        pid = id(p)
        if pid in self._index:
            return
        self._index[pid] = self._n_params
        self._n_params += 1
        self._loose.held(pid)   # Note [A parameter no module holds]
        self._params[pid] = p
        died = self._died
        self._death[pid] = weakref.ref(p, lambda _, pid=pid: died.append(pid))
        self._owner[pid] = owner
        if owner and self._owner_ref.get(pid) is None:
            m = self._module_of.get(owner)
            if m is not None:
                self._owner_ref[pid] = m
        if late:
            self._late.add(pid)
        lazy = isinstance(p, UninitializedTensorMixin)   # no bytes yet: `_hook` fills them
        self._param_recs[pid] = {"k": "param", "i": self._index[pid], "name": name,
                                 "trainable": bool(p.requires_grad),
                                 "bytes": 0 if lazy else p.nbytes, "root": root}
        if not lazy and p.numel() == 0:   # Note [A parameter with no elements]
            self._param_recs[pid]["empty"] = True
        self.records.append(self._param_recs[pid])
        self._hook(pid, p)

    def _hook(self, pid: int, p: nn.Parameter) -> None:
        """Gradient hooks on a parameter that wants a gradient (torch refuses them on one
        that does not); `_hook_unfrozen` catches those that want one later. Not on one that
        is no longer a leaf (an EMA copy updated in place outside `no_grad` has a graph):
        torch refuses a post-accumulate hook there, and it accumulates no gradient. Nor on a
        lazy module's parameter before its first forward made it (torch refuses every use
        of it: Note [Lazy parameters] in trace/collector.py); `_hook_unfrozen` hooks it
        before the backward that follows."""
        if isinstance(p, UninitializedTensorMixin):
            return
        if p.requires_grad and p.is_leaf and pid not in self._hooked:
            self._hooked.add(pid)
            self._param_recs[pid]["trainable"] = True
            self._param_recs[pid]["bytes"] = p.nbytes
            self._param_handles.append(p.register_hook(self._make_grad_pre(pid)))
            self._param_handles.append(p.register_post_accumulate_grad_hook(self._grad_post))

    def _hook_unfrozen(self) -> None:
        """Before each backward: parameters unfrozen since they were first seen (progressive
        unfreezing; a GAN's discriminator frozen before its first forward) get their hooks,
        or their gradients go unseen (an `unused_parameter` warning about parameters that
        had gradients; a `grad_leak` missed)."""
        self._forget_dead()
        if len(self._hooked) < len(self._params):
            for pid, p in list(self._params.items()):
                self._hook(pid, p)

    def _routed_around(self, pid: int) -> bool:
        """The parameter's module did not run because the forward chose among the elements
        of a ModuleList / ModuleDict: the element holding it did not run while a sibling
        did (a mixture of experts' unrouted expert, a task head, LayerDrop's skipped
        block). A submodule a running element never calls (`blocks.3.extra`, forgotten in
        every block) is not this: its element ran."""
        ref = self._owner_ref.get(pid)
        child = ref() if ref is not None else None
        while child is not None:
            pref = self._parent.get(child)
            parent = pref() if pref is not None else None
            if isinstance(parent, (nn.ModuleList, nn.ModuleDict)):
                if any(id(m) in self._ran for m in child.modules()):
                    return False
                return any(id(m) in self._ran for s in parent.children() if s is not child
                           for m in s.modules())
            child = parent
        return False

    # Note [Parameters a container holds]
    # An `nn.ParameterList` / `nn.ParameterDict` is a module that holds parameters and is
    # never called: the module that holds it reads them in its forward (`for w in
    # self.weights: x = x @ w`). Owned by the container, such a parameter's module "did not
    # run" in every step, and one that got no gradient read "their modules did not run in
    # that step, or not as module calls" where its module ran: titans-pytorch's MemoryMLP
    # keeps its layers so (tests/clients/train_titans.py --mode mem). The module that runs
    # them is the nearest holder that is no such container.
    def _runner(self, m: nn.Module) -> nn.Module:
        while isinstance(m, (nn.ParameterList, nn.ParameterDict)):
            ref = self._parent.get(m)
            parent = ref() if ref is not None else None
            if parent is None:
                break
            m = parent
        return m

    # Note [Parameters a call ran without]
    # `torch.func.functional_call(module, {name: tensor}, args)` (and torch.nn.utils.
    # stateless) runs the module with other tensors put in its parameters' places for the
    # length of the call: the module ran, and its output reached the loss, but the
    # parameters themselves were never read. titans-pytorch's NeuralMemory runs its memory
    # MLP so, with per-head copies (`memory_model_parameters`, which do get gradients) in
    # place of the MLP's own weights, which stay in `model.parameters()` and so in the
    # optimizer: the doctor said "their modules ran but the output never reached the loss"
    # of the MLP's norm and "did not run" of its weights (held in a ParameterList, Note
    # [Parameters a container holds]), both false. Each call of a module that owns
    # parameters now looks whether each is in its place; one that was in no call of the
    # window is said to be "ran without". Calls under no_grad are not looked at: they give
    # no gradient either way, and NeuralMemory's constructor runs the MLP once so, with its
    # own weights, to check its output's shape.
    def _note_in_place(self, mid: int) -> None:
        if not _grad_enabled():
            return
        params = self._params
        for ref, name, pid in self._slots.get(mid, ()):
            holder, p = ref(), params.get(pid)
            if holder is None or p is None:
                continue
            if holder._parameters.get(name) is p:
                self._in_place.add(pid)
            else:
                self._replaced.add(pid)

    def _register_root(self, root: nn.Module) -> None:
        prefix = self._names.prefix[root]
        number = self._roots
        if next(module_parameters(root), None) is not None:
            self._roots += 1
            self._root_num[root] = number
        for m in root.modules():   # check 7 asks whether a gradient reached this network
            self._root_of.setdefault(id(m), number)
            for c in m.children():   # and whether the module holding it is in training
                self._parent.setdefault(c, weakref.ref(m))
        self._retention.add_root(prefix, root)
        for m, p, name in _named_params(root, prefix):
            runs = self._runner(m)   # Note [Parameters a container holds]
            self._module_of = {id(runs): weakref.ref(runs)}
            self._add_param(p, name, id(runs), late=False, root=number)
            # Note [Parameters a call ran without]: where the module looks for it
            self._slots.setdefault(id(runs), []).append(
                (weakref.ref(m), name.rsplit(".", 1)[-1], id(p)))
            if self._names.absorbed:   # a module seen on its own before is one of root's
                self._param_recs[id(p)]["name"] = name

    def _rename_roots(self, opt: torch.optim.Optimizer) -> None:
        """At the first step the model may move to another top-level module (a student run
        after its teacher): name their parameters as the ledger does from then on."""
        for root in self._names.on_step(opt)[::-1]:   # the new model's names last (Note
            prefix = self._names.prefix[root]            # [A wrapper of the model])
            self._retention.rename_root(root, prefix)
            for _, p, name in _named_params(root, prefix):
                if id(p) in self._param_recs:
                    self._param_recs[id(p)]["name"] = name
        # a module recorded before the rename (a student's Dropout in eval mode in step 1)
        # is named as in later steps: one module, not `Sequential.2` and `2`
        for ref, rec in self._mode_recs:
            m = ref()
            if m is not None:
                rec["mod"] = self._names.paths.get(m) or rec["mod"]

    # Note [A loss module of its own]
    # Check 4 reads the losses the script computes: the calls of `torch.nn.functional`'s
    # losses (Note [What a backward weighs a loss by]). A loss module that calls none (a
    # library's own: a Charbonnier loss, `torch.sqrt((pred - y) ** 2 + eps ** 2).mean()`,
    # as image-restoration libraries write it) left each pass with no loss, and the step
    # was not read: accumulation over 2 micro-batches without dividing
    # (tests/doctor/own_loss.py --bug) drew no finding. A module whose class is torch's
    # `_Loss` or is named `...Loss`, called under grad, whose forward recorded no loss and
    # returned one value that requires grad, is that value's loss: recorded as a loss call
    # (its class, `reduction` where the module has one, else "mean"; its value; the weight
    # backward gives it), at the line that called it. A loss module that calls one of
    # `torch.nn.functional`'s is read by that call, as before. A library loss written as a
    # function: Note [A loss function of its own]. Cost: one dict test per
    # module return (a call of a loss module: one more read of its output; a training
    # module's tensor output: one metadata write, Note [Segments are no heads]).
    def _module_post(self, module: nn.Module, args, out) -> None:
        if isinstance(out, _Tensor) and module.training:   # Note [Segments are no heads]
            self._mark_call(module, out)                        # (doctor/accumulation.py)
        if not self._loss_mods:
            return
        start = self._loss_mods.pop(id(module), None)
        if start is None or len(self._losses) != start or not isinstance(out, _Tensor) \
                or not out.requires_grad or _functorch_wrapped(out):
            return
        with _quiet(), contextlib.suppress(RuntimeError, TypeError, ValueError):
            if out.numel() != 1:
                return
            reduction = getattr(module, "reduction", "mean")
            rec: dict[str, Any] = {"fn": type(module).__name__, "module": True,
                                   "reduction": reduction if isinstance(reduction, str)
                                   else "mean",
                                   "value": float(out.detach().float().cpu())}
            rec["file"], rec["line"] = user_line()
            self._losses.append(rec)
            out.register_hook(_weight_hook(rec))   # Note [What a backward weighs a loss by]

    # Note [A loss function of its own]
    # Note [A loss module of its own] left a library loss written as a function unseen:
    # `charbonnier_loss(pred, y)` returning `torch.sqrt((pred - y) ** 2 + eps ** 2).mean()`
    # (tests/doctor/own_loss.py --function, the function in a helper file, loss_fn.py),
    # 2 micro-batches undivided, drew nothing. By the rule of Note [What a backward weighs
    # a loss by] it is a loss like any other: a mean its backward weighs 1 undivided, 1/K
    # divided; and by that Note's where a loss is computed decides nothing, a module's
    # forward or a function. A function is told by its name as a module is by its class:
    # a mean of more than one element to one, under grad, requiring grad, taken directly
    # in a function whose name holds "loss" (`charbonnier_loss`, `loss_fn`, basicsr's
    # `reduce_loss`, a script's `compute_loss`), is recorded as a loss (the function's
    # name, reduction "mean", its value, its weight), at the line the script called it.
    # A pass that holds another loss (a `torch.nn.functional` loss, a loss module's) keeps
    # that alone: a regulariser's mean beside a cross-entropy in one `compute_loss` is no
    # loss of its own (read so, the pass's two weights, 1 and 0.01, would make no run of
    # 1, and the cross-entropy left undivided went unseen). A sum is not recorded
    # (`loss_not_divided` spares sums). Known limitation: a loss function that reduces by
    # `.sum() / n` is not seen. Cost: a frame's name read per mean op under grad.
    def _mean_in_loss(self, name: str, args, kwargs, out) -> None:
        if not isinstance(out, _Tensor) or not out.requires_grad or _functorch_wrapped(out):
            return
        x = args[0] if args else kwargs.get("input")
        with _quiet(), contextlib.suppress(RuntimeError, TypeError, ValueError):
            if out.numel() != 1 or not isinstance(x, _Tensor) or x.numel() <= 1:
                return
            rec: dict[str, Any] = {"fn": name, "by_name": True, "reduction": "mean",
                                   "value": float(out.detach().float().cpu())}
            rec["file"], rec["line"] = user_line()
            made = made_by_call(args[0]) if args else None   # Note [Segments are no heads]
            if made is not None:
                rec["made"] = made
            self._losses.append(rec)
            out.register_hook(_weight_hook(rec))   # Note [What a backward weighs a loss by]

    def _mark_call(self, module: nn.Module, out: _Tensor) -> None:
        """Note the call of training module `module` on the graph node that made its output
        (Note [Segments are no heads] in doctor/accumulation.py)."""
        with torch._C.DisableTorchFunction():
            meta = _node_metadata(readable_grad_fn(out))
        if meta is not None:
            self._returns += 1
            meta[MADE_BY_CALL] = (id(module), self._returns)

    def _module_pre(self, module: nn.Module, args) -> None:
        mid = id(module)
        if (isinstance(module, _LOSS_MODULE) or type(module).__name__.endswith("Loss")) \
                and _grad_enabled():   # Note [A loss module of its own]
            self._loss_mods[mid] = len(self._losses)
        hooks = _top_saved_hooks()
        if hooks is not None:
            self._retention.saved_unreadable = True   # Note [A graph kept by retain_graph]
            if hooks is not _UNKNOWN:   # Note [Every pack hook the script registers]
                self._retention.hooks_seen(hooks[0])
        # a top-level call: a module no other holds, or one already known as top-level
        top = module in self._names.prefix or module not in self._names.paths
        _, new = self._names.path(module, top_level=top)
        if new:   # the module, or the one whose method called it (trace/roots.py)
            self._register_root(self._names.root)
            if self._resumed_scheds is None:
                self._resumed_scheds = _resumed_schedulers()
        self._ran.add(mid)
        if _grad_enabled():   # Note [A forward that takes another path in eval mode]
            if module.training:
                self._ran_train.add(mid)
            elif _parent_training(self._parent, module) is not True:
                self._ran_eval.add(mid)
        if type(module) in ACTIVATION_MODULES and args and isinstance(args[0], _Tensor):
            # Note [An activation the loss applies again]: which nn.Softmax made a loss's
            # input, kept on the node that made the module's input
            meta = _node_metadata(readable_grad_fn(args[0]))
            if meta is not None:
                meta[ACTIVATION_MODULE] = self._names.paths.get(module, "")
        if mid in self._slots:
            self._note_in_place(mid)
        if self._cut_srcs and _grad_enabled() and torch._C._current_graph_task_id() != -1:
            self._module_around_cut(module)   # Note [A cut the graph goes around]
        number = self._root_num.get(module)
        if number is not None and number not in self._net_seen and _grad_enabled():
            # a network's first forward under grad: where a frozen teacher or loss network
            # would be wrapped in no_grad, and whether a gradient must flow through it
            self._net_seen.add(number)
            file, line = user_line()
            self.records.append({
                "k": "net", "root": number, "training": bool(module.training),
                "input_grad": any(isinstance(a, _Tensor) and a.requires_grad for a in args),
                "var": user_name_of(module)[0], "file": file, "line": line})
        if not self._ddp and type(module).__name__ == "DistributedDataParallel":
            self._ddp = True
        if not module.training and mid not in self._mode_seen and _grad_enabled() and (
                (isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0) or
                (isinstance(module, nn.modules.batchnorm._BatchNorm)
                 and module.track_running_stats and not _frozen(module))):
            self._mode_call(module, args, {"mod": self._names.paths.get(module, ""),
                                           "cls": type(module).__name__,
                                           "parent_training": _parent_training(self._parent,
                                                                               module)})

    # Note [A validation forward under grad]
    # `eval_mode` is a module in eval inside a training step, where dropout is off. A
    # validation pass in eval without `torch.no_grad()`, then `model.train()`, ran the same
    # modules in eval under grad in a window whose backward reached the network, and read as
    # one. What tells them apart is whether a backward used the call: the record marks the
    # graph node that made the call's input (`graph`), and a backward walk that passes it
    # marks the record `backprop` (a walk cut off at MAX_NODES marks every pending one).
    # A module keeps one record: a call no backward used yet is updated by the module's next
    # call in eval (a validation loop's batches), and the first that is used stays. An
    # input no graph node made (a BatchNorm on the raw batch) is read by the node that
    # made the call's output instead: TabNet's encoder starts with a BatchNorm1d on the
    # batch, and its validation pass (`network.eval()`, no `no_grad`, `network.train()`
    # after) read "1 BatchNorm1d modules (`tabnet.encoder.initial_bn`) ran in eval mode in
    # training step 3, 5" while every other module of that pass was let be
    # (tests/clients/train_tabnet.py). No node there either (no parameter of its own, or
    # none that wants a gradient): counted as before.
    def _mode_call(self, module: nn.Module, args: tuple, what: dict) -> None:
        """Check 7's record of a module (or a functional dropout's caller) in eval under
        grad (Note [A validation forward under grad])."""
        mid = id(module)
        file, line = user_line()
        rec = self._mode_pending.get(mid)
        if rec is None:
            rec = {"k": "mode", "window": self._steps + 1, **what, "bw": self._bw,
                   "root": self._root_of.get(mid, -1), "file": file, "line": line}
            if not self._names.decided:
                self._mode_recs.append((weakref.ref(module), rec))
            self.records.append(rec)
        else:   # its earlier calls' graphs went unused so far: this call speaks for them
            rec.update(window=self._steps + 1, bw=self._bw, file=file, line=line)
        node = next((a.grad_fn for a in args if isinstance(a, _Tensor)
                     and a.grad_fn is not None), None)
        if node is None and not what.get("fn"):
            self._mode_output(module, rec)   # the raw batch: the call's own output says
            return
        self._mode_node(mid, rec, node)

    def _mode_node(self, mid: int, rec: dict, node) -> None:
        """Tie the eval-mode record `rec` to graph node `node`; no node: counted as is."""
        meta = _node_metadata(node)
        if meta is None:
            rec.pop("graph", None)
            self._mode_seen.add(mid)
            return
        rec["graph"] = True
        meta.setdefault(_MODE, []).append((mid, rec))
        self._mode_pending[mid] = rec

    def _mode_output(self, module: nn.Module, rec: dict) -> None:
        """Note [A validation forward under grad]: a module in eval whose input no graph node
        made (a BatchNorm on the raw batch) is tied to the node that made its output, by a
        forward hook on this one call (hooks added in a pre-hook run for the call)."""
        handle = None

        def after(mod: nn.Module, args: Any, output: Any) -> None:
            handle.remove()
            out = output if isinstance(output, (tuple, list)) else (output,)
            self._mode_node(id(mod), rec, next(
                (t.grad_fn for t in out if isinstance(t, _Tensor) and t.grad_fn is not None),
                None))

        handle = module.register_forward_hook(internal(after), always_call=True)

    def _functional_dropout(self, name: str, args: tuple, kwargs: dict) -> None:
        """Check 7 for a dropout call: off (training=False, p > 0) under grad, inside a
        module's forward. The module that called it holds it as a module holds its
        nn.Dropout: `parent_training` is that module's flag, so a forgotten
        `model.train()` (`training=self.training`, the module in eval) is one, and a
        `training=False` written while the module trains is on purpose. No `training`
        passed: the default, on (dropping), or off whatever the mode (the alpha dropouts'):
        not this."""
        train = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train"))
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        try:
            if train is None or train or float(p) <= 0 or not _grad_enabled():
                return
        except (TypeError, ValueError, RuntimeError):
            return
        module = _calling_module(sys._getframe(2))
        if module is None or isinstance(module, nn.modules.dropout._DropoutNd) or \
                id(module) in self._mode_seen:
            return   # an nn.Dropout's own call: its module hook records it
        self._mode_call(module, args[:1], {
            "fn": True, "mod": self._names.paths.get(module, "") or type(module).__name__,
            "cls": name, "parent_training": bool(module.training)})

    # Note [A gradient the script takes itself]
    # sb3-contrib's TRPO takes the policy's gradients with `torch.autograd.grad(objective,
    # actor_params)` (and the KL's, with create_graph=True, for the Fisher-vector products),
    # solves for a natural-gradient direction and moves the actor by line search
    # (`param.data = ...`); one Adam then steps the critic, holding every parameter of the
    # policy, whose actor parameters never get `.grad` (the script sets it to None). The doctor
    # read that as "6 trainable parameters (`mlp_extractor.policy_net.0.weight`, ...) got no
    # gradient in step 1 while 6 others did: their modules ran but the output never reached the
    # loss" (and in step 2, "their modules did not run"): their output reached two losses, and
    # a backward computed their gradients. The gradient hook on each parameter (`register_hook`,
    # which `autograd.grad` fires too, where the hook after accumulation does not) notes every
    # gradient computed since the parameter's optimizer last stepped; a step's parameter with
    # such a gradient and none accumulated is `taken` (the script took it itself, a MAML inner
    # step or a hand-written update alike), which the unused-parameter check counts as reached
    # (doctor/graph.py), in that step and in the others of its window.
    # ---- gradients (Note [Which backward reached a parameter]) ------------------------------
    def _make_grad_pre(self, pid: int):
        def pre(grad):
            if grad is not None:   # Note [A gradient the script takes itself]
                self._computed.add(pid)   # (None: a Function's backward returned none)
            self._grad_pre(pid)
            if self._replicated():   # Note [Replicas that drift]: this rank's own gradient
                with _quiet():
                    if grad.layout is torch.strided and type(grad).__name__ != "DTensor":
                        part = grad.detach().double().sum()
                        self._local[pid] = part if self._accum.get(pid, 0) == 0 or \
                            pid not in self._local else self._local[pid] + part
        return pre

    def _replicated(self) -> bool:
        """Several ranks (Note [Replicas that drift]); decided once the group exists."""
        if self._ranks is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                self._ranks = dist.get_world_size()
        return bool(self._ranks and self._ranks > 1)

    def _grad_pre(self, pid: int) -> None:
        p = self._params[pid]
        g = p.grad
        fresh = g is None
        if not fresh:
            st = self._grad_state.get(pid)
            if st is None or st != (id(g), g._version):
                with _quiet():
                    fresh = not bool(_values(g).any())
        self._order.grad_arrives(pid, fresh)
        if fresh:
            self._bws[pid] = []
            self._folded_in.pop(pid, None)   # Note [A gradient folded into the step's]
            self._gone.pop(pid, None)        # Note [A gradient written over]
            self._accum[pid] = 0
            self._consumed.discard(pid)
            self._tainted.pop(pid, None)    # zeroed since: what was added is gone
        elif pid in self._consumed:
            self._consumed.discard(pid)
            rec = self._bw_rec or {}
            self._tainted[pid] = {"k": "leak", "i": self._index[pid], "window": self._steps + 1,
                                  "file": rec.get("file", ""), "line": rec.get("line", 0)}
            if pid in self._grads_kept:   # Note [Gradients an optimizer takes outside its
                self._tainted[pid]["by"] = "state"   # step]
        else:
            self._moved_under_grad(pid, p)
        if fresh:
            self._mixed.pop(pid, None)

    def _moved_under_grad(self, pid: int, p: nn.Parameter) -> None:
        """Note [Gradients of two weights]: a backward is about to add into a gradient no
        step has used, and the parameter changed value since that gradient was taken."""
        seen = self._pver.get(pid)
        if seen is None or seen[0] == p._version or pid in self._mixed or \
                pid not in self._grads_read:
            return
        changed = False
        with _quiet(), contextlib.suppress(RuntimeError, TypeError):
            changed = seen[1] is not None and bool(_checksum(p) != seen[1])
        if changed:
            rec = self._bw_rec or {}
            self._mixed[pid] = {"k": "mixed", "i": self._index[pid], "window": self._steps + 1,
                                "file": rec.get("file", ""), "line": rec.get("line", 0)}

    def _grad_post(self, p: nn.Parameter) -> None:
        pid = id(p)
        if p.grad is None:   # backward reached it and computed nothing: an autograd
            self._none_grad.add(pid)   # Function whose backward returns None for it
            return
        self._none_grad.discard(pid)
        self._accum[pid] = self._accum.get(pid, 0) + 1
        bws = self._bws.setdefault(pid, [])
        if not bws or bws[-1] != self._bw:
            bws.append(self._bw)
        self._bw_params.add(pid)
        g = p.grad
        if g is not None:
            old = self._grad_state.get(pid)
            if old is not None and self._grad_ids.get(old[0]) == pid:
                del self._grad_ids[old[0]]
            self._grad_state[pid] = (id(g), g._version)
            self._grad_ids[id(g)] = pid
            with _quiet(), contextlib.suppress(RuntimeError, TypeError):
                # a tensor, no device sync: read only at a step that finds it zero
                self._grad_any[pid] = _values(g).any()   # Note [Zero as backward left it]
        total = None
        with _quiet(), contextlib.suppress(RuntimeError, TypeError):
            total = _checksum(p)   # the weights this gradient was taken at
        self._pver[pid] = (p._version, total)
        self._grads_read.discard(pid)
        self._grads_kept.discard(pid)

    # ---- torch functions ------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func is _AUTOGRAD_GRAD:   # Note [A gradient penalty without create_graph]
            self._penalty.backward_from(args[0] if args else kwargs.get("outputs"),
                                        self._train_steps + 1)
            out = func(*args, **kwargs)
            self._penalty.grad_taken(args, kwargs, out)
            return out
        folded = None
        if not self._in_opt:   # Note [Saved-tensor hooks around a function]
            self._pack_at_op()
            over = _OVERWRITES.get(func)   # Note [A gradient written over]
            if over is not None and args and (self._bws or self._folded_in):
                self._written_over(over, args)
            # Note [A gradient folded into the step's] (doctor_folded.py)
            if self._folded:
                if over is not None and args and _overwrites_target(over, args):
                    # its target's values are gone: what it carried too (Note [A
                    # gradient written over])
                    self._folded.forget(args[0])
                    folded = self._folded.passes_in(args[1:], kwargs)
                else:
                    folded = self._folded.passes_in(args, kwargs)
        out = self._function(func, args, kwargs)
        if folded:
            with contextlib.suppress(RuntimeError):   # a tensor with no version counter
                self._folded.made(out, folded, args, kwargs, func)
            self._fold_into_grads(func, args, folded)
        if self._rng.waiting is not None:   # Note [The same randomness every step]
            self._rng.after()
        if self._penalty.watching:
            self._penalty.after(func, args, kwargs, out)
        return out

    # Note [Saved-tensor hooks around a function]
    # The store check (Note [Every pack hook the script registers], doctor_retention.py)
    # read torch's saved-tensor hook stack at module calls only: a
    # `saved_tensors_hooks(pack, unpack)` context entered around a function of the
    # script's that calls no module (`F.linear` on the model's weights) was never seen,
    # and tests/doctor/saved_hooks.py `--functional` (the same leaky store, 5 storages,
    # 964 B a step) drew the graph walk's words instead ("`stash` carries autograd history
    # ... each step adds 3 tensors, 896 B ... keep what that line adds detached": the saves
    # with history only, a fix that frees nothing), and its store of copies (`--functional
    # --copy`) nothing. Every torch function call outside a step now reads the pair on top
    # (one call into torch's stack) and hands a pack not seen last time to the store
    # check, which keeps the user's own weakly, as at a module call. Only the store check
    # reads it: the graph walk's "saves unreadable" flag stays a module call's (a
    # checkpointed function's hooks are torch's, and change nothing here). Cost: one
    # stack read (under 1 us on this machine) and an identity test per op.
    def _pack_at_op(self) -> None:
        hooks = _top_saved_hooks()
        if hooks is None or hooks is _UNKNOWN or hooks[0] is self._pack_seen:
            return
        self._pack_seen = hooks[0]
        self._retention.hooks_seen(hooks[0])

    def _grad_owner(self, t: Any) -> int | None:
        """id(param) whose current `.grad` is `t` (one a backward filled, or one the
        script set: Note [A gradient written over]); None otherwise."""
        pid = self._grad_ids.get(id(t))
        if pid is None:
            pid = self._grads_set.get(id(t))
        if pid is None:
            return None
        return pid if getattr(self._params.get(pid), "grad", None) is t else None

    def _pending(self, pid: int) -> set[int]:
        """The passes whose gradients `.grad` of parameter `pid` holds, no step used yet."""
        return set(self._bws.get(pid, ())) | self._folded_in.get(pid, set())

    def _written_over(self, how: str, args) -> None:
        """An op that may write over a parameter's `.grad` is about to run (Note [A
        gradient written over] in doctor_folded.py)."""
        if torch._C._current_graph_task_id() != -1:
            return   # a hook or a callback of the backward: its own
        value = args[1] if len(args) > 1 else None
        if how == "set":
            p = args[0]
            if value is None or not isinstance(value, _Tensor) or \
                    self._params.get(id(p)) is not p:
                return   # `p.grad = None`: a clear (zeroed_before_step's)
            self._grads_set[id(value)] = id(p)
            self._write_over(id(p), p.grad, value)
            return
        if how == "mul_" and zero_factor(value) is None:
            return   # scaled, not written over
        if how not in ("copy_", "data"):
            value = None   # zeros, or a constant
        first = args[0]
        for t in first if isinstance(first, (list, tuple)) else (first,):
            pid = self._grad_owner(t)
            if pid is not None:
                self._write_over(pid, t, value)

    def _write_over(self, pid: int, g: Any, value: Any) -> None:
        pending = self._pending(pid)
        if not pending or (isinstance(value, _Tensor) and g is not None
                           and shares_storage(value, g)):
            return
        keep = self._folded.of(value) if isinstance(value, _Tensor) and self._folded \
            else frozenset()
        gone = pending - keep
        if gone:
            self._bws[pid] = [n for n in self._bws.get(pid, ()) if n in keep]
            if pid in self._folded_in:
                self._folded_in[pid] &= keep
            self._gone.setdefault(pid, set()).update(gone)

    def _fold_into_grads(self, func, args, passes: frozenset[int]) -> None:
        """An op whose arguments carry `passes`: when it sets a parameter's `.grad` (or
        its `.grad.data`), or writes a parameter's `.grad` in place, those passes are
        folded into that gradient (Note [A gradient folded into the step's])."""
        if not args:
            return
        owner = getattr(func, "__self__", None)
        name = getattr(func, "__name__", "")
        if name == "__set__" and owner is _GRAD:
            targets = [id(args[0])] if id(args[0]) in self._params else []
        elif name == "__set__" and owner is _DATA:
            targets = [pid] if (pid := self._grad_owner(args[0])) is not None else []
        elif _in_place(func):
            targets = [pid for t in (args[0] if isinstance(args[0], (list, tuple))
                                     else (args[0],))
                       if (pid := self._grad_owner(t)) is not None]
        else:
            return
        for pid in targets:
            self._folded_in.setdefault(pid, set()).update(passes)

    def _function(self, func, args, kwargs):
        if is_backward(func):   # Note [A backward patched over Tensor.backward]
            return self._backward(func, args, kwargs)
        loss = _LOSSES.get(func)
        if loss is not None:
            if loss is _LOGSUMEXP:
                if args and _grad_enabled():
                    with _quiet(), contextlib.suppress(RuntimeError, AttributeError):
                        logsumexp_taken(args[0])
                return func(*args, **kwargs)
            if loss is _MEAN:   # Note [A loss function of its own]
                out = func(*args, **kwargs)
                if _grad_enabled() and "loss" in sys._getframe(2).f_code.co_name.lower():
                    self._mean_in_loss(sys._getframe(2).f_code.co_name, args, kwargs, out)
                return out
            return self._loss(loss, func, args, kwargs)
        drop = _DROPOUTS.get(func)
        if drop is not None:
            self._functional_dropout(drop, args, kwargs)
        rnd = RANDOM_OPS.get(func)
        if rnd is not None:   # Note [The same randomness every step] in doctor_rng.py
            self._rng.drew(rnd, args, kwargs)
        # the caller of __torch_function__, which called this
        if func in _SCALE_MULS and sys._getframe(2).f_code.co_filename == _SCALER_FILE:
            return self._scale(func, args, kwargs)
        if func is _UNSCALE and args:
            self._order.unscaled(args[0])
        if args and _frozen_param_target(args[0]) and _grad_enabled() and \
                getattr(func, "__name__", "").endswith("_"):
            # an in-place op outside no_grad on a frozen parameter from a tensor that
            # requires grad (an EMA update without torch.no_grad()): it gets history
            out = func(*args, **kwargs)
            for p in args[0] if isinstance(args[0], (list, tuple)) else (args[0],):
                if isinstance(p, _Tensor) and p.grad_fn is not None:
                    self._retention.param_history(p, *user_line())
            return out
        if self._in_opt and args and getattr(func, "__self__", None) is _DATA:
            self._written_through_data(args[0])
        if not self._in_opt:
            if func is _DETACH_IN_PLACE and args and id(args[0]) in self._index and \
                    isinstance(args[0], _Tensor) and args[0].requires_grad:
                self._detached_in_place(args[0])   # Note [A parameter detached in place]
            if self._order.reads and args:
                if func in _CLEARS:
                    # `p.grad.zero_()`, `.mul_(0)`, `.fill_(0)`, `torch._foreach_zero_(grads)`:
                    # Note [A gradient cleared by hand] (doctor_order.py)
                    self._order.cleared(_CLEARS[func], args, user_line)
                elif self._order.aliased(args[0]) and _in_place(func):
                    # `p.grad.data.add_(x)` after the step: Note [A write through a
                    # gradient's .data] (doctor_order.py)
                    self._order.written(args[0])
            if len(args) > 1 and self._bw_pending and _in_place(func):
                self._into_state(args)   # Note [Gradients an optimizer takes outside its step]
            cut = _CUTS.get(func)
            if cut is None:
                owner = getattr(func, "__self__", None)
                if owner is _DATA:
                    cut = "data"
                    if self._bw_pending and args:
                        self._data_taken(args[0])
                    if args and id(args[0]) in self._grad_ids and not args[0].requires_grad:
                        return self._grad_data(func, args, kwargs)
                elif owner is _GRAD:
                    reader = sys._getframe(2)   # past __torch_function__
                    if args and id(args[0]) in self._params and reader.f_code in _ZERO_GRADS:
                        self._zeroed_by(args[0], reader)
                    elif args and id(args[0]) in self._params:
                        name = getattr(func, "__name__", "")
                        if name == "__set__" and len(args) > 1 and args[1] is None:
                            # `p.grad = None`: Note [A gradient cleared by hand]
                            self._order.zeroed(args[0], user_line, "none")
                        elif name == "__set__" and len(args) > 1:
                            # `p.grad = torch.zeros_like(p)`: Note [A clear by a zero
                            # tensor, a zero tensor set] (doctor_order.py)
                            self._order.set_to(args[0], args[1], user_line, "set")
                        out = func(*args, **kwargs)
                        if name == "__get__" and out is not None:
                            self._order.read_by_script(args[0], out)
                            pending = self._pending(id(args[0]))   # Note [A gradient
                            if pending:                            # folded into ...]
                                self._folded.read(out, pending)
                        # a read that found no gradient used none (Note [Moved without
                        # reading the gradient]): `Module._apply` reads every `param.grad`
                        # to move it along
                        if out is not None or getattr(func, "__name__", "") != "__get__":
                            self._grads_read.add(id(args[0]))   # Note [Gradients of two
                            # weights]; the script uses this gradient (master weights copied
                            # by hand): not a wasted one (doctor/params.py wasted_gradients)
                            self._param_recs[id(args[0])]["grad_read"] = True
                        self._grad_read(args[0])   # a clip before backward reads None
                        return out
                    return func(*args, **kwargs)
            if cut is not None:
                if args and isinstance(args[0], _Tensor) and args[0].requires_grad:
                    self._cut(cut, args[0])
                elif cut == "numpy":
                    self._numpy_round_trip()
            elif not _grad_enabled() and getattr(func, "__name__", "") != "__get__":
                # the tensor an in-place op writes is not read into anything: Note [A
                # state_dict is no cut]; no tensor locals here: Note [No tensor locals
                # where ops are called]
                self._cut_each("no_grad", args, kwargs, _in_place(func))
        if (self._cut_srcs or self._cut_nodes) and _grad_enabled():
            out = func(*args, **kwargs)
            self._around_cut((*args, *kwargs.values()) if kwargs else args, out)
            return out
        return func(*args, **kwargs)

    # Note [A frozen parameter written with its own values]
    # LBFGS (torch's, and pykan's copy that its `fit` steps) updates every parameter it
    # holds through one flat vector: `p.add_(update, alpha=t)` for each, a zero update for a
    # parameter without a gradient, and after each line-search probe `p.copy_(saved)` back.
    # A frozen parameter in the optimizer (`model.parameters()`, as pykan's `get_params()`)
    # keeps its values, but its version counter moves, and the doctor said "1 parameter
    # with requires_grad=False (`0.bias`) was changed by optimizer.step() in steps 1-3"
    # (an error: tests/doctor/closure.py --lbfgs --frozen --fixed), and on a KAN trained by
    # `fit` "14 parameters ... (`node_bias_0`, ...)", so `compare` judged no policy. A frozen
    # parameter with no gradient is judged by its values: its norm before and after the
    # step (one float, where a copy would double a frozen backbone for the doctor's run);
    # one with a gradient is compared to a copy, as before.

    # Note [A step that writes through .data]
    # Whether step() moved a parameter is read off its version counter; a write through
    # `p.data` (`p.data.add_(update)`, as torch-optimizer's Shampoo and many optimizers
    # written before `torch.no_grad` steps do) goes to an alias with a counter of its own,
    # and the doctor warned "optimizer.step() changed no trainable parameter in step 1-3"
    # on a Shampoo loop whose loss fell. When step() takes `.data` of a parameter whose
    # counter it has not moved yet, the parameter's checksum is taken there, before the
    # write the alias is for, and compared after the step (as for a fused step).
    def _written_through_data(self, p) -> None:
        before = self._before.get(id(p))
        if before is None or before[2] is not None or before[1] is not None or \
                p._version != before[0]:
            return
        with _quiet():
            self._before[id(p)] = (before[0], None, _checksum(p))

    def _backward(self, func, args, kwargs):
        t = args[0] if args else kwargs.get("tensors")
        if isinstance(t, (list, tuple)):
            t = t[0] if len(t) == 1 else None
        self._penalty.backward_from(args[0] if args else kwargs.get("tensors"),
                                    self._train_steps + 1)
        value = None
        if isinstance(t, _Tensor) and t.numel() == 1:
            with _quiet():
                value = float(t.detach().float().cpu())
        file, line = user_line()
        self._hook_unfrozen()
        scaled = self._order.is_scaled(t)
        self._moved_since_backward()
        self._bw += 1
        if self._bw == 2 and not self._steps:   # Note [An optimizer torch's hooks do not
            self.optimizer_like, unstepped = optimizer_like_alive()   # see]
            self.optimizer_unstepped = unstepped_name(unstepped)
        rec = {"k": "backward", "n": self._bw, "window": self._steps + 1, "value": value,
               "file": file, "line": line, "losses": _apart_from_named(self._losses)}
        if isinstance(t, _Tensor) and t.grad_fn is not None:
            inputs, shared, met = self._walk_graph(t.grad_fn, file, line)
            if inputs:
                rec["input_grads"] = True
            if shared is not None:   # Note [Backward passes of one forward]
                rec["shares"] = shared
            for n in met:   # Note [A graph kept by retain_graph], and Note [A retained
                self._retention.used_again(n)   # graph another optimizer's backward used]
        else:
            # several tensors at once: no walk says which eval-mode calls this backward
            # used, so all count (Note [A validation forward under grad])
            for mid, pending in list(self._mode_pending.items()):
                self._mode_used(mid, pending)
        self._losses = []
        self._retention.backward_seen(   # Note [A branch no backward ran, kept past a
            self._bw, isinstance(t, _Tensor) and t.grad_fn is not None,   # later backward]
            rec.get("shares"), (file, line))
        if isinstance(t, _Tensor):
            retain = kwargs.get("retain_graph", args[2] if len(args) > 2 else None)
            self._retention.backward_from(t, bool(retain), (file, line), self._bw,
                                          "shares" in rec)
        self._bw_rec, self._bw_params = rec, set()
        self.records.append(rec)
        before = _beside_grad(self._params.values())
        try:
            out = func(*args, **kwargs)
        except RuntimeError as e:   # Note [A backward that fails through an earlier step]
            self.records.extend(self._retention.at_failure(self._train_steps + 1, str(e), t,
                                                              (file, line)))
            if isinstance(t, _Tensor) and not t.requires_grad:   # Note [A loss with no
                rec["no_history"] = str(e).splitlines()[0][:160]   # history]
            raise
        if _beside_grad(self._params.values()) - before:   # Note [Gradients beside .grad]
            rec["beside_grad"] = True
        bad = 0
        with _quiet():
            for pid in self._bw_params:
                g = getattr(self._params.get(pid), "grad", None)
                if g is not None and not bool(torch.isfinite(_values(g)).all()):
                    bad += 1
        if scaled:
            self._order.scaled_backward(self._bw_params)
        rec["params"], rec["nonfinite"] = len(self._bw_params), bad
        rec["reached"] = sorted(self._index[p] for p in self._bw_params if p in self._index)
        self._bw_rec = None
        alive = ((pid, self._params.get(pid)) for pid in self._bw_params)
        versions = {pid: p._version for pid, p in alive if p is not None}
        # a pending record whose parameters this backward fills again has lost its chance
        self._bw_pending = [(r, v) for r, v in self._bw_pending if v.keys().isdisjoint(versions)]
        # a checksum is its record's: this backward's parameters start without one (one
        # kept from SAM's previous ascent read as a move of its next first gradient)
        self._data_sums = {pid: c for pid, c in self._data_sums.items() if pid not in versions
                           and any(pid in v for _, v in self._bw_pending)}
        self._bw_pending.append((rec, versions))
        if self._read_at_backward is not None:   # Note [A closure that leaves backward to
            read, self._read_at_backward = self._read_at_backward, None   # the optimizer]
            with torch._C.DisableTorchFunction():
                read()
        return out

    def _walk_graph(self, root, file: str, line: int) -> tuple[bool, int | None, set[int]]:
        """One walk of the graph about to be backpropagated (backward number `self._bw`):
        (does it give a gradient to a leaf that is no parameter, the number of an earlier
        backward of this window that walked one of its nodes, the numbers of the earlier
        backward passes of any window whose tags it met). An input leaf (FGSM's and PGD's
        perturbation `delta`) means the backward is taken for that gradient; the
        parameters' it also fills are not the step's to use (`dropped_update`). A shared
        node: Note [Backward passes of one forward]; of any window: Note [A retained graph
        another optimizer's backward used] in trace/doctor_retention.py."""
        key, inputs, shared, count = (self._steps + 1, self._bw), False, None, 0
        met: set[int] = set()
        stack = [root]
        while stack and count < MAX_NODES:
            node = stack.pop()
            if node is None:
                continue
            var = getattr(node, "variable", None)
            if var is not None:   # AccumulateGrad: one per leaf, shared by every forward
                if id(var) not in self._params:
                    if not isinstance(var, nn.Parameter):
                        inputs = True
                    elif var.requires_grad:   # Note [A parameter no module holds]
                        self._loose.reached(var, self._bw, self._steps + 1, file, line)
                continue
            meta = _node_metadata(node)
            tag = meta.get(_WALKED) if meta is not None else None
            if tag == key:
                continue   # walked already in this walk (the tag, not id(): ids are reused)
            if tag is not None:
                met.add(tag[1])
                if tag[0] == key[0]:
                    shared = tag[1]
            if meta is not None:
                meta[_WALKED] = key
                for mid, rec in meta.get(_MODE, ()):   # Note [A validation forward under
                    self._mode_used(mid, rec)          # grad]
            count += 1
            stack.extend(f for f, _ in node.next_functions)
        if stack and count >= MAX_NODES:   # cut off: the calls it did not reach may be its
            for mid, rec in list(self._mode_pending.items()):
                self._mode_used(mid, rec)
        return inputs, shared, met

    def _mode_used(self, mid: int, rec: dict) -> None:
        """A backward used the eval-mode call `rec` records: it stays as it is."""
        rec["backprop"] = True
        if self._mode_pending.get(mid) is rec:
            del self._mode_pending[mid]
            self._mode_seen.add(mid)

    def _moved_since_backward(self) -> None:
        """The previous backward's parameters changed in place since it ran (outside any
        step: SAM's `first_step` moves them along the gradient, then zeroes it, and a second
        backward at that point feeds the step), and their gradients were read: that
        gradient was used, not dropped.

        # Note [Moved without reading the gradient]
        Moved alone is not used: pykeen's training loop (tests/clients/train_pykeen.py)
        probes the batch size with forward and backward passes and no step, then clears the
        gradients and re-initializes the weights in place (`reset_parameters_`) before
        training. The re-initialization read as SAM's ascent, and the doctor said "1 of 4
        backward passes made gradients that no optimizer.step() used" where the probe
        dropped 2. A move counts only for a parameter whose `.grad` was read since the
        backward (`_grads_read`), as SAM's ascent reads it; and a read that found no
        gradient (`.grad` None: pykeen's `model.to(device)` after the re-initialization,
        `Module._apply` reading each parameter's gradient to move it along, after
        `zero_grad()` set them to None) is no read."""
        params, keep = self._params, []
        for rec, versions in self._bw_pending:
            if any(pid in self._grads_read and self._moved(params.get(pid), pid, v)
                   for pid, v in versions.items()):
                rec["moved"] = True
            elif not self._grads_kept.isdisjoint(versions):
                rec["into_state"] = True
            else:
                keep.append((rec, versions))
        self._bw_pending = keep

    # Note [Gradients an optimizer takes outside its step]
    # SophiaG (sophia-opt, the paper's code) refreshes its diagonal Hessian every k steps
    # with a backward of its own: after the step and zero_grad, a forward, labels sampled
    # from the logits, their cross-entropy's backward, then `optimizer.update_hessian()`,
    # which writes each gradient into the optimizer's state (`state['hessian'].mul_(beta2).
    # addcmul_(p.grad, p.grad, value=1 - beta2)`), and zero_grad again. No step() uses that
    # backward and no parameter moves, and the doctor warned `dropped_update` "2 of 5
    # backward passes made gradients that no optimizer.step() used" on the README's loop
    # (tests/clients/train_muon_sophia.py --opt sophia --hess-every 1, 3 steps). Such a
    # backward is used: outside a step, an in-place op wrote a tensor of the optimizer's
    # state for a parameter (`optimizer.state[p]`) with that parameter's `.grad` among its
    # other arguments (`_into_state`), before the next backward. Not "its gradient was read
    # and the state changed": SAM's first step reads the gradient (its norm) and stores
    # `old_p` in the state, and with no ascent (tests/doctor/sam.py --no-ascent) that
    # backward is dropped indeed. What is not seen: a gradient written into state out of
    # place (`state['h'] = b * h + g * g`), one through a tensor made from it first
    # (`-p.grad`), or into an object that is not an optimizer's state (EWC's Fisher in a
    # dict of the script's): those keep the warning. A gradient so taken is consumed, as by
    # a step: a backward that adds to it before a zero_grad, its sum then stepped, is a
    # `grad_leak` (the refresh's sampled-label gradient summed into the next step's: the
    # loop without its second zero_grad, tests/doctor/hessian_refresh.py --bug leak, which
    # the doctor passed in silence).
    def _into_state(self, args) -> None:
        """An in-place op outside a step: does it write a parameter's optimizer state
        from that parameter's gradient? (Note [Gradients an optimizer takes outside its
        step])"""
        params, grads = self._params, self._grad_ids
        pids = set()
        for a in args[1:]:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                pid = grads.get(id(t)) if isinstance(t, _Tensor) else None
                if pid is not None and getattr(params.get(pid), "grad", None) is t:
                    pids.add(pid)
        if not pids:
            return
        target = args[0]
        targets = {id(t) for t in (target if isinstance(target, (list, tuple)) else (target,))}
        for ref in self._opt_refs.values():
            state = getattr(ref(), "state", None)
            if not isinstance(state, dict):
                continue
            for pid in pids - self._grads_kept:
                entry = state.get(params.get(pid))
                if isinstance(entry, dict) and any(id(v) in targets for v in entry.values()):
                    self._grads_kept.add(pid)
                    self._consumed.add(pid)   # added to uncleared, a leak as after a step

    # Note [Moves of several backward passes, through .data]
    # cooper's ExtrapolationConstrainedOptimizer runs two backward passes per half-step, the
    # primal Lagrangian's (the model's parameters) and the dual one's (the multiplier's),
    # then its optimizers' `extrapolation()`, which reads each gradient and moves the
    # parameter along it by `p.data.add_(u)`, then `zero_grad()`, a second forward and
    # both backward passes again, and only then `step()`. The extrapolation uses the first
    # two backward passes as SAM's ascent uses its first, but the doctor said "4 of 8
    # backward passes made gradients that no optimizer.step() used" (tests/clients/
    # train_cooper.py --optimizer extra, 2 steps): only the last backward's record was
    # judged (the primal one was replaced by the dual one before the move), and a write
    # through `.data` moves an alias's version counter, not the parameter's (as Note [A
    # step that writes through .data] says of steps). Every backward record stays pending
    # until one of its parameters moves with its gradient read (then it was used) or a
    # later backward fills one of them again (then it had its chance); and a parameter of a
    # pending record whose `.data` is taken outside a step has its checksum taken there,
    # once (before its gradient is read, maybe: `p.data.add_(p.grad)` takes `.data`
    # first), so a move through the alias is seen at the next backward, where it counts
    # only with the gradient read (Note [Moved without reading the gradient]).
    def _moved(self, p: Any, pid: int, version: int) -> bool:
        """Whether pending parameter `p` moved since its backward left it at `version`."""
        if p is None:
            return False
        if p._version != version:
            return True
        before = self._data_sums.get(pid)
        if before is None:
            return False
        with _quiet():
            return not bool(torch.equal(before, _checksum(p)))

    # Note [A gradient written through .data]
    # `p.grad.data` is an alias of the gradient with a version counter of its own: an
    # in-place write through it (`p.grad.data.zero_()`, the clear of older tutorials and
    # loops; `p.grad.data.mul_(0)`) moves no version of the
    # gradient. Note [Which backward reached a parameter] reads a gradient's values only
    # where its (id, version) changed since backward left it, so the next backward found the
    # cleared gradient "as the step used it" and the doctor said `grad_leak` for 4
    # parameters "in steps 2 and 3" of a loop that clears every step (tests/doctor/
    # late_grad_write.py --fixed --clear data; tests/doctor/grad_leak.py --fixed --clear
    # data), and missed the late write such a clear throws away. Where the script takes
    # `.data` of a gradient the probe knows (outside a step), the remembered version is
    # forgotten (its values are read at the next backward, as after any write), and the
    # alias is kept with the script's reads of that gradient (Note [A gradient cleared by
    # hand], doctor_order.py): a clear through it is a clear of the gradient. Cost: a dict
    # lookup per `.data` taken outside a step; one value read of that gradient at its
    # next backward.
    def _grad_data(self, func, args, kwargs):
        g = args[0]
        pid = self._grad_ids[id(g)]
        p = self._params.get(pid)
        if getattr(func, "__name__", "") == "__set__" and len(args) > 1:
            return self._grad_data_set(func, args, kwargs, p, pid)
        out = func(*args, **kwargs)
        if p is not None and p.grad is g and isinstance(out, _Tensor):
            st = self._grad_state.get(pid)
            if st is not None and st[0] == id(g):
                self._grad_state[pid] = (id(g), -1)   # not a version: values read next
            self._order.alias_of(out, g, pid)
        return out

    # Note [A gradient's .data set]
    # `p.grad.data = x` swaps the gradient's storage and moves no version counter: the
    # gradient is the same tensor at the same version, so Note [Which backward reached a
    # parameter] found it "as the step used it" at the next backward, and a loop that
    # clears every step by `p.grad.data = torch.zeros_like(p.grad)` read as `grad_leak`
    # (4 parameters, steps 2 and 3, 360 B: tests/doctor/grad_leak.py --fixed --clear
    # data-set). The remembered version is forgotten there, as for `.data` taken
    # (its values are read at the next backward), and a set to a tensor of zeros while the
    # step's entry is open is a clear (Note [A clear by a zero tensor, a zero tensor set],
    # doctor_order.py); a set to anything else moves the pointer, which the next clear
    # reads as a write (Note [A gradient written after the step]).
    def _grad_data_set(self, func, args, kwargs, p: Any, pid: int):
        g = args[0]
        if p is not None and p.grad is g:
            self._order.set_to(p, args[1], user_line, "data.set")
        out = func(*args, **kwargs)
        st = self._grad_state.get(pid)
        if p is not None and p.grad is g and st is not None and st[0] == id(g):
            self._grad_state[pid] = (id(g), -1)   # not a version: values read next
        return out

    def _data_taken(self, p: Any) -> None:
        """`.data` of `p` taken outside a step: Note [Moves of several backward passes,
        through .data]."""
        pid = id(p)
        if pid in self._data_sums or not any(pid in v for _, v in self._bw_pending):
            return
        with _quiet():
            self._data_sums[pid] = _checksum(p)

    # Note [A loss no backward can run from]
    # A backward record carries the losses computed since the previous backward (check 4
    # reads them: one loss per micro-batch, its value against the backward's). An
    # evaluation between two steps computes losses too, under no_grad (transformers'
    # Trainer with eval_strategy="steps": one cross_entropy per eval batch), and the next
    # training backward then held 1 + 2 losses: `loss_not_divided` on T5 with
    # gradient_accumulation_steps=2 read "step 1" instead of "step 1-3". A loss whose
    # output carries no graph is no loss any backward runs from; it is not recorded. Under
    # a torch.func transform the output is a wrapper whose flag does not say so: kept.
    def _loss(self, name: str, func, args, kwargs):
        out = func(*args, **kwargs)
        if isinstance(out, _Tensor) and not out.requires_grad and \
                not _functorch_wrapped(out):
            return out
        # Note [A reduction however it was passed] (doctor_losses.py)
        target, ignore, reduction = call_args(name, func, args, kwargs)
        rec: dict[str, Any] = {"fn": name, "reduction": reduction}
        # inside a torch.func transform (vmap of grad: per-sample gradients) a value cannot
        # be read: the loss is then recorded without its numbers
        with _quiet(), contextlib.suppress(RuntimeError):
            if isinstance(target, _Tensor) and not target.is_floating_point():
                rec["tokens"] = int(target.numel())
                rec["valid"] = int((target != ignore).sum())
            if isinstance(target, _Tensor) and target.layout is torch.strided:
                # which samples: Note [Passes that weigh whole means] (doctor/accumulation.py)
                rec["target"] = [target.untyped_storage().data_ptr(),
                                 target.storage_offset(), list(target.shape)]
            if isinstance(out, _Tensor) and out.numel() == 1:
                rec["value"] = float(out.detach().float().cpu())
            elif isinstance(out, _Tensor) and reduction == "none" and out.numel() > 1:
                # Note [A loss reduced after the call] (doctor/accumulation.py)
                rec["mean"] = float(out.detach().float().mean().cpu())
            made = made_by_call(args[0]) if args else None   # Note [Segments are no heads]
            if made is not None:                              # (doctor/accumulation.py)
                rec["made"] = made
        rec["file"], rec["line"] = user_line()
        self._losses.append(rec)
        if isinstance(out, _Tensor) and out.requires_grad and not _functorch_wrapped(out):
            out.register_hook(_weight_hook(rec))   # Note [What a backward weighs a loss by]
        # Note [An activation the loss applies again], Note [A loss that broadcasts its
        # target], Note [Values that are no log-probabilities], Note [kl_div's
        # reduction='mean'] (doctor_losses.py)
        found: list[dict[str, Any]] = []
        with _quiet(), contextlib.suppress(RuntimeError, TypeError, ValueError,
                                           AttributeError, IndexError):
            found = loss_inputs(name, func, args, kwargs, target, ignore, reduction, out)
        for r in found:   # in place: a logsumexp taken later marks a not_log_probs record
            r.update(step=self._train_steps + 1, file=rec["file"], line=rec["line"])
            self.records.append(r)
        return out

    def _scale(self, func, args, kwargs):
        """`GradScaler.scale(loss)`: a backward from its output makes scaled gradients."""
        out = func(*args, **kwargs)
        factor = args[1] if len(args) > 1 else None
        with _quiet(), contextlib.suppress(RuntimeError, TypeError, ValueError):
            factor = float(factor)   # type: ignore[arg-type]
        self._order.scaled_output(out, factor if isinstance(factor, float) else 0.0)
        return out

    def _zeroed_by(self, p: nn.Parameter, frame) -> None:
        """`p.grad` read by a `zero_grad` (Note [A zero_grad reads no gradient]): no use of
        the gradient; an optimizer's is noted, by class, as one that holds `p`."""
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.optim.Optimizer):
            self._param_recs[id(p)]["zeroed_by"] = type(owner).__name__
        self._order.zeroed(p, user_line)   # Note [A gradient written after the step]

    def _grad_read(self, p: nn.Parameter) -> None:
        """`p.grad` read by torch's clip_grad_norm_ / clip_grad_value_ (Note [Where a clip
        and a step fall] in doctor_order.py); any other read returns at the first test."""
        frame, fn, arg = clip_frame(sys._getframe(3))   # the frame that read `.grad`
        if frame is None:
            return
        caller = frame.f_back
        while caller is not None and caller.f_code.co_filename == frame.f_code.co_filename:
            caller = caller.f_back   # past clip_grad.py's own wrappers
        # one clip call, told from the next one: two calls from one line with no backward
        # or step between them (a loop over models) share a position and a record
        key = (id(frame), id(caller), getattr(caller, "f_lasti", 0), self._bw, self._steps)

        def new_clip():
            limit = frame.f_locals.get(arg)
            with _quiet():
                if clips_nothing(limit):
                    return None   # clip_grad_norm_(params, inf): the norm read for logging
                with contextlib.suppress(RuntimeError, TypeError, ValueError):
                    limit = float(limit)
            file, line = user_line()
            return fn, limit if isinstance(limit, float) else None, file, line, self._steps + 1

        self._order.clip_reads(p, key, new_clip)

    # Note [No tensor locals where ops are called]
    # `torch.jit.trace` names each value of the graph it records after a local variable of
    # the Python frame that called the op, if one holds that tensor (torch/jit/_trace.py,
    # `_create_interpreter_name_lookup_fn`); under this mode that frame is `_function`.
    # Its loop over a no_grad op's arguments left the last one bound to `a`, so a traced
    # call under no_grad (torch.jit.trace's check run) named its input `%a` where the
    # first trace, with gradients, had `%5`, and torch's sanity check failed on the
    # difference ("Graphs differed across invocations!"): `memledger doctor` on an e3nn
    # model compiled with `e3nn.util.jit.compile` (tests/clients/train_e3nn.py --compile)
    # said "the doctor could not watch the script: script raised TracingCheckError". So
    # the frame that calls the op binds no tensor: loops over arguments run in helpers.
    # Note [A parameter detached in place]
    # `p.detach_()` on a parameter turns its requires_grad off for good (torch's detach_ is
    # not dispatched: only this mode sees it). compressive-transformer-pytorch's
    # `SelfAttention.forward` calls `self.to_kv.weight.detach_()` after using the weight, in
    # the first training forward that compresses memory: every memory layer's key/value
    # projection trains in that step and never after, and the doctor said nothing (the
    # parameters read as frozen from then on, and a frozen parameter is no finding). A
    # `param_detached` record names each such parameter once, with the line and the step;
    # doctor/params.py warns (tests/clients/test_grad_turned_off.py, the compressive tier).
    def _detached_in_place(self, p: _Tensor) -> None:
        i = self._index[id(p)]
        if i in self._detached:
            return
        self._detached.add(i)
        file, line = user_line(3)
        self.records.append({"k": "param_detached", "window": self._steps + 1,
                             "file": file, "line": line, "params": [i]})

    def _cut_each(self, op: str, args: tuple, kwargs: dict, in_place: bool = False) -> None:
        """`_cut` each argument that requires grad (`in_place`: but the one the op writes,
        its first), keyword arguments too (Note [Parameters handed over by keyword])."""
        written = args[0] if in_place and args else None
        for a in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(a, _Tensor) and a.requires_grad and a is not written:
                self._cut(op, a)

    # Note [Parameters handed over by keyword]
    # `F.layer_norm`, `F.group_norm` and `F.batch_norm` hand their weight and bias to
    # `__torch_function__` as keyword arguments (`handle_torch_function(layer_norm, ...,
    # weight=weight, bias=bias)`), where `F.linear` and `F.embedding` pass theirs by
    # position. Read by position alone, a LayerNorm run under no_grad cut nothing: its
    # parameters were "unreached" ("their modules ran but the output never reached the
    # loss", a warning) beside the cut_graph error for the Linears of the same block.
    # reformer-pytorch's `ReversibleSequence` with `layer_dropout` and the irreversible
    # path runs its `ReversibleBlock`s, whose forward is under no_grad, instead of the
    # `IrreversibleBlock`s (tests/clients/train_reformer.py --mode plain --layer-dropout
    # 0.5): 25 parameters "cut by an op under `torch.no_grad()`" and 12 LayerNorm weights
    # and biases "never reached the loss"; now one error for the 37.

    def _cut(self, op: str, t: _Tensor) -> None:
        fn = readable_grad_fn(t)   # Note [A view whose grad_fn cannot be read]
        if fn is None:
            pids = [id(t)] if id(t) in self._params else []
            if pids and _saving_state_dict(sys._getframe(1)):
                return   # Note [A state_dict is no cut]
        else:
            pids = self._reach_params(fn)
        new = [pid for pid in pids if pid not in self._cuts]
        if op == "no_grad" and len(new) < len(pids):   # Note [A part the model runs frozen]
            new += [pid for pid in pids if pid in self._cuts and self._frozen_again(pid)]
        if not new:
            return
        if op == "no_grad" and in_reentrant_checkpoint():
            op = "checkpoint"
        file, line = user_line(3)
        for pid in new:
            self._cuts[pid] = len(self.records)
        rec = {"k": "cut", "op": op, "window": self._steps + 1, "file": file, "line": line,
               "params": sorted(self._index[p] for p in new)}
        if op == "no_grad" and all(self._frozen_part(pid) for pid in new):
            rec["frozen"] = True   # Note [A part the model runs frozen]
        if fn is not None and fn._sequence_nr() < self._window_seq:
            rec["carried"] = True   # Note [A state carried in from an earlier step]
        self.records.append(rec)
        with contextlib.suppress(TypeError):   # Note [A cut the graph goes around]
            self._cut_srcs[id(t)] = (weakref.ref(t), rec)
        if fn is not None:
            self._cut_made_from(fn, rec)   # Note [A cut of a stabiliser]

    # Note [A part the model runs frozen]
    # A model may run one of its parts frozen inside its own training forward: put in eval
    # mode and called under `torch.no_grad()`, as a pretrained encoder is (transfusion-
    # pytorch's `modality_encoder`: `with torch.no_grad(): mod.encoder.eval(); ...`, while
    # the rest of the model trains; the library gives the optimizer
    # `parameters_without_encoder_decoder()`). Handed `model.parameters()`, as its README's
    # `Transfusion(..., modality_encoder=nn.Conv2d(3, 8, 3, padding=1))` invites, the
    # encoder's weight and bias get no gradient, and the doctor said "the path from the
    # loss was cut by an op under `torch.no_grad()`; run this part of the forward with
    # grad enabled" (an error, which stops `compare`), at the script's `model(batch)`
    # line: a fix the user cannot make in the library, for a freeze the model means. A
    # no_grad cut all of whose parameters' modules are in eval mode while the module
    # holding each is in training is marked `frozen`: doctor/graph.py says so, a warning
    # whose fix is to leave them out of the optimizer. A forward under no_grad in training
    # mode (reformer's reversible blocks run on the irreversible path) or a whole model in
    # eval (a validation pass whose cache a training step then reads: litgpt's adapter)
    # keeps the error.
    # The part may be a whole subtree put in eval by one call (discrete-key-value-bottleneck-
    # pytorch's `self.encoder.eval()` on a `Sequential` encoder: each Linear's holder, the
    # Sequential, is in eval too, and the cut read as the error, stopping `compare`); its
    # top, the outermost module in eval above the parameter's, is held by one in training.
    # A validation under no_grad (the whole model in eval) before the training forward reads
    # the part first in the window: its cut, not frozen, held the parameter, and the error
    # came back from step 2 on (tests/clients/train_loralib.py --model dkvb --validate). A
    # later no_grad read of it as a frozen part is recorded too; doctor/graph.py prefers it.
    def _frozen_again(self, pid: int) -> bool:
        was = self.records[self._cuts[pid]]
        return was["op"] == "no_grad" and not was.get("frozen") and self._frozen_part(pid)

    def _frozen_part(self, pid: int) -> bool:
        ref = self._owner_ref.get(pid)
        m = ref() if ref is not None else None
        if m is None or m.training:
            return False
        while (up := _parent_training(self._parent, m)) is False:
            m = self._parent.get(m)()   # alive: _parent_training just read it
        return up is True

    # Note [A state_dict is no cut]
    # `module.state_dict()` hands back each parameter `.detach()`ed (torch's
    # `_save_to_state_dict`): a copy of the weights (a checkpoint, a best-model snapshot,
    # an EMA), not a path any loss takes to the parameter. Read as a cut, it was blamed for
    # whatever parameter got no gradient in that window: TabNet's EarlyStopping callback
    # deep-copies `network.state_dict()` at each epoch's end, and TabNet keeps a
    # `tabnet.initial_bn` its forward never calls, so the step after the first epoch read
    # "got no gradient ...: the path from the loss was cut by `.detach()`" (an error, which
    # stops `compare`) where the other steps read "their modules did not run" (a warning;
    # tests/clients/train_tabnet.py). A parameter a forward detaches itself
    # (`F.linear(x, self.weight.detach())`) is still a cut. Nor is an in-place write into
    # a parameter under no_grad (`load_state_dict`'s `param.copy_(...)`, an EMA's swap):
    # it writes the parameter, it reads no path from it. EarlyStopping loads the best
    # weights back at the end of TabNet's `fit`, and a second `fit(..., warm_start=True)`
    # read "cut by an op under `torch.no_grad()`" (an error) for `initial_bn` in its first
    # step.

    # Note [A cut the graph goes around]
    # A cut (`.detach()`, `.data`, an op under no_grad) is blamed for the parameters its
    # input's graph holds that got no gradient. That is wrong when the same tensor also
    # flows on with its graph, into an op whose output requires grad: then the cut is not
    # what kept the loss from them, and if they got none, that output never reached the
    # loss (a dead branch). PyG's softmax subtracts each group's `src.detach()` maximum
    # from `src` itself, and a lazy layer's first forward initialises its weight through
    # `.data` before using the weight: on a `HeteroConv` whose last layer's author branch
    # reaches no loss, the doctor said "cut by `.detach()`" and "cut by `.data`" (errors,
    # which stop `compare`) where the branch is unused (a warning). Such a cut is marked
    # `around` and read as no cut (doctor/graph.py).
    # Inside autograd's engine (a tensor hook, a custom Function's backward) this mode is
    # off: torch pops a torch-function mode while its handler runs, and the engine runs
    # `Tensor.backward` from the handler, so no op in there reaches `_around_cut`. Module
    # hooks are process-wide and still fire: a module that runs with grad enabled in there
    # uses its own parameters under grad, so a cut on them is gone around
    # (`_module_around_cut`). sentence-transformers' GradCache losses embed every
    # mini-batch under `no_grad` (each parameter a cut) and run the model again with
    # grad inside a hook on the loss: BERT's pooler, which mean pooling never reads, was
    # "cut by an op under `torch.no_grad()`" (an error) where `MultipleNegativesRanking
    # Loss`, the same model without the cache, gets "the output never reached the loss".
    # Note [A cut of a stabiliser]
    # The tensor cut may be a statistic of another that flows on with its graph: the
    # log-sum-exp idiom `x - x.amax(dim, keepdim=True).detach()` (hyper-connections' mHC
    # Sinkhorn normalisation, a hand-written softmax) cuts the maximum and keeps `x`. When
    # such a branch never reached the loss (the last MMDiT block's text stream, whose
    # output the model drops: tests/clients/train_mmdit.py --model general --streams 2),
    # its parameters got no gradient and the doctor said "the path from the loss was cut
    # by `.detach()`" (an error, which stops `compare`) where the same branch without the
    # stabiliser reads "the output never reached the loss" (a warning). So the nodes the
    # cut tensor was made from through ops of a single differentiable input (`amax`, then
    # `+ eps`: each node's graph holds exactly the parameters the cut's does) are kept by
    # their sequence numbers, a parameter such a chain ends at by its id, and an op under
    # grad that reads a tensor one of those nodes made (or that parameter) goes around the
    # cut as reading the cut tensor itself does. A node of two inputs ends the chain: the
    # parameters of the other input are not held by the first (`h = lin(x); h.detach()`
    # reads both the weight's and the bias's, and stays a cut). At most 8 nodes a cut.
    # tests/doctor/dead_stabilized.py.
    def _cut_made_from(self, fn, rec: dict) -> None:
        node = fn
        for _ in range(8):
            nxt = [f for f, _ in node.next_functions if f is not None]
            if len(nxt) != 1:
                return
            node = nxt[0]
            var = getattr(node, "variable", None)   # AccumulateGrad: a leaf, the chain ends
            if var is not None:
                with contextlib.suppress(TypeError):
                    self._cut_srcs.setdefault(id(var), (weakref.ref(var), rec))
                return
            self._cut_nodes.setdefault(node._sequence_nr(), []).append(rec)

    def _module_around_cut(self, module: nn.Module) -> None:
        for p in module.parameters(recurse=False):
            entry = self._cut_srcs.get(id(p))
            if entry is not None and entry[0]() is p:
                entry[1]["around"] = True
                del self._cut_srcs[id(p)]

    def _around_cut(self, args, out) -> None:
        if not (isinstance(out, _Tensor) and out.requires_grad):
            if not (isinstance(out, (tuple, list)) and any(
                    isinstance(o, _Tensor) and o.requires_grad for o in out)):
                return
        for a in args:
            for t in (a if isinstance(a, (tuple, list)) else (a,)):
                entry = self._cut_srcs.get(id(t)) if isinstance(t, _Tensor) else None
                if entry is not None and entry[0]() is t:
                    entry[1]["around"] = True
                    del self._cut_srcs[id(t)]
                if self._cut_nodes and isinstance(t, _Tensor) and t.requires_grad:
                    fn = readable_grad_fn(t)   # Note [A cut of a stabiliser]
                    for rec in self._cut_nodes.pop(fn._sequence_nr(), ()) if fn else ():
                        rec["around"] = True

    def _numpy_round_trip(self) -> None:
        """`x.detach().numpy()`: the cut just recorded on this line is a numpy round trip."""
        last = self.records[-1] if self.records else {}
        if last.get("k") == "cut" and last["op"] == "detach" and \
                (last["file"], last["line"]) == user_line(3):
            last["op"] = "numpy"

    def _reach_params(self, root) -> list[int]:
        """Parameters whose AccumulateGrad the graph from `root` reaches (not yet visited)."""
        return [id(v) for v in _leaves(root, self._visited) if id(v) in self._params]

    # ---- optimizer steps ------------------------------------------------------------------
    def _opt_pre(self, opt: torch.optim.Optimizer, args, kwargs):
        self._in_opt += 1
        if self._in_opt > 1:   # a wrapper's inner optimizer (accelerate's, ZeRO's): the
            return None        # outermost step() is the script's
        with torch._C.DisableTorchFunction():
            self._rename_roots(opt)
            if self._step_rule.pre(opt) and self._counter is None:   # a step left open
                self._training_step_ended()                             # ended here
            # args: (optimizer, closure?) as step() was called
            closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
            if not callable(closure):
                self._step_pre(opt)
                return None
        return self._read_after_closure(opt, closure, args, kwargs)

    # Note [A step that runs its closure]
    # `optimizer.step(closure)` (Lightning's Trainer always steps so; LBFGS needs it) runs the
    # forward and backward inside step(), after the pre-hook: read there, the gradients are
    # the previous step's (a NaN this step's backward made went unseen) and this step's
    # backward is credited to none (a false dropped_update). So the closure is wrapped: the
    # step is read when its first call returns; later calls (LBFGS's line search) are the
    # same step's re-evaluations (`reeval` in its record). While the closure runs, the probe
    # is not "in the optimizer": its forward and backward are the script's, and a cut there
    # (`.detach()` in a LightningModule's forward) read as two unused_parameter warnings
    # ("their modules did not run") where the plain loop gets its cut_graph error; Lightning's
    # clipping, inside the closure after backward, was unwatched.
    #
    # Note [A closure that leaves backward to the optimizer]
    # torchmin's `Minimizer` (pytorch-minimize) takes a closure that returns the loss and
    # calls no backward ("it should not include any `backward()` calls"): its step runs a
    # whole minimization, each evaluation the closure (the script's `zero_grad()` and
    # forward), then `f.backward()` of its own, and Hessian-vector products by more
    # backward passes through the gradient's graph. Read as the closure returned, step 2
    # found the gradients of step 1's last evaluation cleared by the closure's
    # `zero_grad()` and no backward of its own yet: "ERROR zeroed_before_step the
    # gradients of 8 parameters ... were cleared between backward and optimizer.step() in
    # step 2" (tests/clients/train_torchmin.py, every method), an error that stopped
    # `compare`. A first closure call that ran no backward has the step's read made when
    # the next backward returns (or when step() returns, if none comes); a later call is a
    # re-evaluation as before, read as it returns (before its backward, which would find
    # its gradients fresh and forget the products' backward passes since the last read).
    # The backward passes a step runs after its last read (the products of the last
    # evaluation) are that step's re-evaluations too, read as step() returns: before, the
    # next step's read took them as its own.
    def _read_after_closure(self, opt: torch.optim.Optimizer, closure, args, kwargs):
        calls = [0]
        self._closure_calls = calls

        def read_after(*a, **kw):
            depth, self._in_opt = self._in_opt, 0
            backwards = self._bw
            try:
                loss = closure(*a, **kw)
            finally:
                self._in_opt = depth
            with torch._C.DisableTorchFunction():
                calls[0] += 1
                if calls[0] > 1:
                    if self._read_at_backward is None:   # the step's read made already
                        self._same_step(opt)
                elif self._bw == backwards:   # Note [A closure that leaves backward to the
                    self._read_at_backward = functools.partial(self._step_pre, opt)  # optimizer]
                else:
                    self._step_pre(opt)
            return loss

        self._closure_pending = True
        if "closure" in kwargs:
            return args, {**kwargs, "closure": read_after}
        return (args[0], read_after, *args[2:]), kwargs

    def _same_step(self, opt: torch.optim.Optimizer) -> None:
        """Backward passes of a step's later closure calls are that step's re-evaluations
        (`reeval`): used by it, but not micro-batches of one gradient."""
        again = set(self._step_rec.get("reeval", ()))
        for g in opt.param_groups:
            for p in g["params"]:
                self._accum.pop(id(p), None)
                again.update(self._bws.pop(id(p), ()))
        self._step_rec["reeval"] = sorted(again - set(self._step_rec.get("bw", ())))

    def _step_pre(self, opt: torch.optim.Optimizer) -> None:
        params = [p for g in opt.param_groups for p in g["params"]]
        oi = self._opts.get(id(opt))
        first = oi is None
        if first:
            oi = self._opts[id(opt)] = self._n_opts
            self._n_opts += 1
            self._forget_when_gone(opt)   # Note [An optimizer's id, taken again]
            for j, p in enumerate(params):
                self._add_param(p, f"optimizer{oi}.param{j}", 0, late=True)
            if oi == 0:
                self._find_schedulers()
        self._opt_steps[oi] = self._opt_steps.get(oi, 0) + 1
        for k, (ref, o, _) in enumerate(self._scheds):
            s = ref()
            if s is not None and o == -1 and getattr(s, "optimizer", None) is opt:
                self._scheds[k] = (ref, oi,
                                   int(getattr(s, "_step_count", 1)) > self._sched_base[k])
                # the scheduler's own step() calls are invisible to hooks; the check finds
                # them in the source by the variable that holds it (doctor/source.py)
                var, vfile, vline = user_name_of(s)
                self._sched_where[k] = {"var": var, "file": vfile, "line": vline}
        file, line = user_line()
        idx = self._index
        rec: dict[str, Any] = {"k": "step", "opt": oi, "cls": type(opt).__name__,
                               "step": self._steps + 1, "file": file, "line": line,
                               "train_step": self._train_steps + 1,
                               "params": [idx[id(p)] for p in params],
                               "trainable": [idx[id(p)] for p in params if p.requires_grad],
                               "late": [idx[id(p)] for p in params if id(p) in self._late],
                               "accum": {}, "nonfinite": [], "zeroed": [], "zero": [],
                               "zero_as_computed": [], "not_run": [], "routed": [], "none_grad": [],
                               "ran_without": [], "taken": [], "eval_only": [],
                               "bw": [], "graded": 0}
        bws: set[int] = set()
        folded: set[int] = set()   # Note [A gradient folded into the step's]
        over: set[int] = set()     # Note [A gradient written over]
        self._grads_set.clear()
        self._before = {}
        fused = bool(getattr(opt, "defaults", {}).get("fused"))
        # Note [Where a clip and a step fall]: clipped? a repeat of the previous step?
        rec.update(self._order.at_step(oi, [id(p) for p in params],
                                       {id(p) for p in params if self._accum.get(id(p))}))
        with _quiet():
            for p in params:
                pid = id(p)
                n = self._accum.pop(pid, 0)
                g = p.grad
                if n:
                    rec["accum"][idx[pid]] = n
                    if g is None:
                        rec["zeroed"].append(idx[pid])
                    elif not bool(_values(g).any()):
                        # cleared (zeroed in place, or another tensor) since backward left
                        # it, or zero as backward left it: every hinge margin met, a
                        # derivative that is zero there; only the first is a bug
                        left = self._grad_state.get(pid) == (id(g), g._version) or \
                            _zero_as_left(self._grad_any.get(pid))
                        rec["zero_as_computed" if left else "zero"].append(idx[pid])
                elif p.requires_grad and pid in self._computed:
                    rec["taken"].append(idx[pid])   # Note [A gradient the script takes
                elif p.requires_grad and pid in self._none_grad and g is None:   # itself]
                    rec["none_grad"].append(idx[pid])
                elif p.requires_grad and pid in self._replaced and pid not in self._in_place:
                    rec["ran_without"].append(idx[pid])   # Note [Parameters a call ran without]
                elif p.requires_grad and self._owner.get(pid, 0) not in self._ran:
                    rec["not_run"].append(idx[pid])
                    if self._routed_around(pid):
                        rec["routed"].append(idx[pid])
                # Note [A forward that takes another path in eval mode] (doctor/modes.py)
                own = self._owner.get(pid, 0)
                if p.requires_grad and own in self._ran_eval and own not in self._ran_train:
                    rec["eval_only"].append(idx[pid])
                if g is not None and not bool(torch.isfinite(_values(g)).all()):
                    rec["nonfinite"].append(idx[pid])
                rec["graded"] += g is not None
                self._computed.discard(pid)
                bws.update(self._bws.pop(pid, ()))
                folded.update(self._folded_in.pop(pid, ()))
                gone = self._gone.pop(pid, None)   # Note [A gradient written over]
                if gone and (g is None or not bool(_values(g).any())):
                    bws.update(gone)   # cleared: zeroed_before_step's finding
                elif gone:
                    over.update(gone)
                mixed = self._mixed.pop(pid, None)
                if mixed is not None and g is not None:
                    mixed["step"] = self._steps + 1
                    self.records.append(mixed)
                leak = self._tainted.pop(pid, None)
                if leak is not None and g is not None and (
                        self._grad_state.get(pid) == (id(g), g._version)
                        or bool(_values(g).any())):
                    # the gradient a backward added onto a consumed one, consumed again
                    # uncleared: as backward left it, or changed in place since (a clip,
                    # `scaler.unscale_`) but not zeroed. A GAN's discriminator, whose
                    # gradient the generator's backward adds to and zero_grad clears
                    # before its step, is not this (None, or zero)
                    self.records.append(leak)
                if g is not None:
                    self._consumed.add(pid)
                elif p.requires_grad and p.__dict__:   # Note [A step with no gradient]
                    rec.setdefault("beside", []).extend(
                        a for a, v in p.__dict__.items() if gradient_like(p, a, v)
                        and a not in rec.get("beside", ()))
                if not p.requires_grad:
                    # with a gradient, a copy to compare; without, its norm (Note [A frozen
                    # parameter written with its own values])
                    self._before[pid] = (p._version, p.detach().clone(), None) \
                        if g is not None else (p._version, None, _checksum(p))
                else:
                    # a fused optimizer (torch's fused AdamW, transformers' Trainer default
                    # since torch 2.8) writes parameters without bumping their version
                    # counters: a sum per parameter tells whether it moved
                    self._before[pid] = (p._version, None, _checksum(p)
                                         if fused and g is not None else None)
        rec["bw"] = sorted(bws)
        if folded - bws:   # Note [A gradient folded into the step's]: used, no micro-batches
            rec["folded"] = sorted(folded - bws)
        self._folded.used(bws | folded)
        if over - bws - folded:
            rec["written_over"] = sorted(over - bws - folded)
            # their parameters are about to move by this step, which uses none of their
            # gradients: no ascent along them (Note [Moved without reading the gradient])
            params_now = self._params
            self._bw_pending = [
                (r, v) for r, v in self._bw_pending if r["n"] not in over or any(
                    pid in self._grads_read and self._moved(params_now.get(pid), pid, ver)
                    for pid, ver in v.items())]
        rec["lr_zero"] = _lr_zero(opt)
        rec["state_empty"] = not _has_state(opt, params)   # Note [A step that builds state]
        self._state_mark = _state_mark(opt)
        self._step_rec = rec
        self.records.append(rec)
        self._replica_record(oi, params, file, line)

    # Note [Replicas that drift] (the check: memledger/doctor/replicas.py)
    # On several ranks each rank's probe writes, at every optimizer step, five float64
    # checksums per replicated trainable parameter with a gradient: its gradient's sum and
    # L2 norm, its weight's sum and L2 norm, as step() is about to use them, and the sum of
    # the gradients this rank's backward passes brought it since it was last cleared
    # (its own gradient, before any all-reduce: a tensor hook on the parameter). No collective:
    # the launcher compares the ranks' records after the run. Sharded parameters (DTensor:
    # FSDP2, each rank holds its own shard) are left out. One `.tolist()` per step.
    def _replica_record(self, oi: int, params: list, file: str, line: int) -> None:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        rows, sums, kept = [], [], []
        with _quiet():
            for p in params:
                g = p.grad
                if (not p.requires_grad or g is None or g.layout is not torch.strided
                        or type(p).__name__ == "DTensor" or type(g).__name__ == "DTensor"):
                    continue
                gd, pd = g.detach().double(), p.detach().double()
                local = self._local.pop(id(p), None)   # before the ranks' all-reduce
                rows.append(self._index[id(p)])
                kept.append(p)
                sums.append(torch.stack([
                    gd.sum(), torch.linalg.vector_norm(gd), pd.sum(), torch.linalg.vector_norm(pd),
                    local.to(gd.device) if local is not None else gd.new_tensor(float("nan"))
                ]).cpu())
            values = torch.stack(sums).tolist() if sums else []
        names = {i: self._param_recs.get(pid, {}).get("name", f"param{i}")
                 for pid, i in self._index.items() if i in set(rows)}
        rec = {"k": "replica", "rank": dist.get_rank(), "opt": oi,
               "step": self._steps + 1, "file": file, "line": line, "ddp": self._ddp,
               "params": [[i, names[i], *v] for i, v in zip(rows, values)]}
        self.records.append(rec)
        self._replica_open = (rec, list(zip(rows, kept)))

    def _replica_after(self) -> None:
        """The weights' sum and L2 norm as step() returns, on the open `replica` record
        (Note [Replicas a step makes equal again] in doctor/replicas.py)."""
        opened, self._replica_open = self._replica_open, None
        if opened is None:
            return
        rec, kept = opened
        with _quiet():
            sums = [torch.stack([p.detach().double().sum(),
                                 torch.linalg.vector_norm(p.detach().double())]).cpu()
                    for _, p in kept]
            values = torch.stack(sums).tolist() if sums else []
        rec["after"] = [[i, *v] for (i, _), v in zip(kept, values)]

    # Note [An optimizer's id, taken again]
    # The probe knew each optimizer by `id()`, and an id outlives its object: a script that
    # builds a new optimizer every step (tests/doctor/fresh_optimizer.py --opt sgd) may get
    # a dead one's address back. Step 1's SGD freed at step 2, step 3's built where it lay:
    # one index stepped the parameters in steps 1 and 3, another in step 2, and the
    # doctor said "4 parameters ... are in 2 optimizers" (an error) on a loop that has one
    # at a time: 2 runs in 60 of that script in one process, each run's heap another (a
    # flake of the suite, seen in two sessions; `--keep-last`, which drops the one before
    # last just before building the next, 6 runs in 10). As for parameters (Note
    # [Parameters held weakly]), an optimizer's id is forgotten when it dies, so the next
    # one is a new one: 0 in 60 and 0 in 10.
    def _forget_when_gone(self, opt: torch.optim.Optimizer) -> None:
        key, opts, refs = id(opt), self._opts, self._opt_refs

        def gone(_ref: weakref.ref) -> None:
            if refs.get(key) is _ref:
                opts.pop(key, None)
                refs.pop(key, None)

        with contextlib.suppress(TypeError):   # an optimizer no weak reference can hold
            refs[key] = weakref.ref(opt, gone)

    def _opt_post(self, opt: torch.optim.Optimizer, args, kwargs) -> None:
        from memledger.verify.capture import bitwise_equal

        if self._in_opt > 1:   # an inner optimizer's step inside the script's (see _opt_pre)
            self._in_opt -= 1
            return

        with torch._C.DisableTorchFunction():
            if self._read_at_backward is not None:   # no backward after the first closure
                read, self._read_at_backward = self._read_at_backward, None
                read()
            elif self._closure_pending and self._closure_calls[0] and \
                    any(self._bws.get(id(p)) for g in opt.param_groups for p in g["params"]):
                self._same_step(opt)   # Note [A closure that leaves backward to the optimizer]
            if self._closure_pending and not self._before:   # step() never ran its closure
                self._step_pre(opt)
            self._closure_pending = False
            rec = self._step_rec
            moved, updated = [], 0
            with _quiet():
                for pid, (version, copy, total) in self._before.items():
                    p = self._params[pid]
                    changed = p._version != version
                    if copy is not None:
                        changed = not bitwise_equal(copy, p.detach())
                    elif total is not None and (not changed or not p.requires_grad):
                        changed = bool(_checksum(p) != total)
                    if not p.requires_grad and changed:
                        moved.append(self._index[pid])
                    updated += p.requires_grad and changed
            rec["frozen_moved"], rec["updated"] = moved, updated
            self._replica_after()
            rec["state_built"] = bool(rec.pop("state_empty", False)) and \
                _has_state(opt, [p for g in opt.param_groups for p in g["params"]])
            rec["state_written"] = _state_mark(opt) != getattr(self, "_state_mark", None)
            self._order.after_step(rec["opt"], rec["step"],
                                   [id(p) for g in opt.param_groups for p in g["params"]])
            self.records.extend(self._retention.stepped(
                {id(p) for g in opt.param_groups for p in g["params"]}, self._train_steps + 1))
            self._before = {}
            self._steps += 1
            self._count_scheduler_steps()
            self._cuts, self._visited, self._ran, self._mode_seen = {}, set(), set(), set()
            self._ran_eval, self._ran_train = set(), set()
            self._in_place, self._replaced = set(), set()
            self._cut_srcs, self._cut_nodes = {}, {}
            self._window_seq = _next_sequence_nr()
            self._mode_pending = {}
            ended = self._step_rule.post(opt) and self._counter is None
        self._in_opt -= 1
        if ended:
            self._training_step_ended()

    def _training_step_ended(self) -> None:
        """Note [Cross-step retention]: its boundaries are training steps (a tensor alive
        between a backbone's and a head's optimizer.step() is one step's)."""
        self._train_steps += 1
        with torch._C.DisableTorchFunction():
            self.records.extend(self._retention.boundary(self._train_steps))
            self.records.extend(self._rng.boundary(self._train_steps))
            self.records.extend(self._garbage.boundary(self._train_steps,
                                                       scan=not self._script_over))
        self._forget_dead()
        if self.max_steps is not None and self._train_steps >= self.max_steps:
            self._unused.active = False   # the stop drops graphs the next step would use
            raise StopTracing()

    def _find_schedulers(self) -> None:
        resumed = self._resumed_scheds or {}
        for o in _live_schedulers():
            seen = resumed.get(id(o))
            self._sched_base[len(self._scheds)] = \
                seen[1] if seen is not None and seen[0]() is o else 1
            self._scheds.append((weakref.ref(o), -1, False))
            self._sched_cls.append(type(o).__name__)


# Note [A scheduler resumed from a checkpoint]
# A scheduler counts its own steps (`_step_count`, 1 once built) and a checkpoint carries the
# count: resumed (`load_state_dict`, accelerate's `load_state`, a Trainer's
# `resume_from_checkpoint`), it starts the run with the saved run's steps, and the doctor,
# which read the count as this run's, said "stepped 6 times for 3 optimizer steps" and "ran
# before the first optimizer.step()" of a run resumed after 4 steps
# (tests/clients/train_accelerate.py --resume). A built scheduler's count and a loaded one's
# look alike; what tells a resumed run is its optimizer, which has state before its first
# step only when loaded (Adam's moments, SGD's momentum). So at the run's first top-level
# forward, where a resumed script has loaded its checkpoints and not yet stepped, the
# schedulers of optimizers with state are noted with their counts, which are this run's
# starting point; every other scheduler starts from 1. Not seen: a resumed optimizer with no
# state (plain SGD), whose scheduler is read from 1 as before.
# Note [Gradients beside .grad]
# Libraries of per-sample gradients attach what a backward computes to the parameters
# themselves, beside `.grad`: Opacus's `p.grad_sample` (its `_norm_sample` under ghost
# clipping), BackPACK's extensions' `p.grad_batch`, `p.variance`. Their optimizers use those
# where no torch optimizer step shows it: Opacus's BatchMemoryManager clips and sums each
# physical batch's `grad_sample` in a `step()` that then skips the update (no torch step
# hook fires), and ghost clipping's first backward only measures norms, then zeroes `.grad`
# itself. `dropped_update` read both as backward passes whose gradients no step used
# (tests/clients/train_opacus.py --bmm: "2 of 3"; --mode ghost: "3 of 6"). A backward
# that left new tensors on the parameters is marked `beside_grad` and not judged so.
def _beside_grad(params) -> set[int]:
    """ids of the tensors the parameters hold as attributes of their own (and in lists)."""
    out: set[int] = set()
    for p in params:
        for v in p.__dict__.values():
            if isinstance(v, _Tensor):
                out.add(id(v))
            elif isinstance(v, (list, tuple)):
                out.update(id(x) for x in v if isinstance(x, _Tensor))
    return out


def _live_schedulers() -> list[Any]:
    """Every LR scheduler alive now (one scan of the collector's objects)."""
    from torch.optim.lr_scheduler import LRScheduler

    # type(): never wake lazy proxies
    return [o for o in gc.get_objects() if issubclass(type(o), LRScheduler)]


def _resumed_schedulers() -> dict[int, tuple[weakref.ref, int]]:
    return {id(o): (weakref.ref(o), int(getattr(o, "_step_count", 1)))
            for o in _live_schedulers() if getattr(getattr(o, "optimizer", None), "state", None)}


def _calling_module(frame, depth: int = 12) -> nn.Module | None:
    """The module whose method is running in `frame` or the frames around it (`self`):
    transformers' `eager_attention_forward(module, ...)` is called by the attention
    module's forward, one frame out."""
    while frame is not None and depth > 0:
        obj = frame.f_locals.get("self")
        if isinstance(obj, nn.Module):
            return obj
        frame, depth = frame.f_back, depth - 1
    return None


_STATE_DICT_SAVE = nn.Module._save_to_state_dict.__code__


_IN_PLACE_DUNDERS = frozenset(f"__i{op}__" for op in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
    "rshift", "matmul"))


def _in_place(func) -> bool:
    """An op that writes its first argument (`copy_`, `add_`, `__iadd__`): its name."""
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE_DUNDERS


def _saving_state_dict(frame, depth: int = 6) -> bool:
    """Whether `frame` or one of the `depth` frames above it is torch's
    `Module._save_to_state_dict` (Note [A state_dict is no cut])."""
    while frame is not None and depth > 0:
        if frame.f_code is _STATE_DICT_SAVE:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _leaves(root, visited: set[int]):
    """The tensors whose AccumulateGrad nodes the graph from `root` reaches, each node once
    (`visited`: nodes to skip, added to as the walk goes; at most MAX_NODES)."""
    stack = [root]
    while stack and len(visited) < MAX_NODES:
        n = stack.pop()
        if n is None or id(n) in visited:
            continue
        visited.add(id(n))
        var = getattr(n, "variable", None)
        if var is not None:
            yield var
            continue
        stack.extend(f for f, _ in n.next_functions)

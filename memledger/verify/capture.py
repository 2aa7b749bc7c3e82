"""What one verification run records, in-process, while an unmodified script trains.

    cap = Capture(max_steps=3)
    installer = install_policy(policy, on_applied=cap.on_model)   # the model, when it appears
    cap.start()
    run_script(...)            # stops with StopTracing after 3 training steps
    cap.stop(); save_capture(cap.data(meta), path)

Per training step (one `optimizer.step()` call, or several optimizers stepping after one
backward: trace/steps.py, the rule trace and measure count by; or, with
`Capture(steps_by="forward"|"whole")`, a step per forward or the whole script, Note [A
capture without an optimizer]) it keeps:

- `inputs`: (label, digest) of every tensor passed to the model's forward (the root module
  call) and, between the end of that forward and the backward, of every tensor argument that
  does not require grad of a torch function (the loss's targets: `F.cross_entropy(logits,
  y)` gives `y`). See Note [Which tensors are inputs].
- `grads`: a CPU copy of every parameter's gradient, taken in an optimizer step *pre*-hook,
  before the optimizer reads it (`None` where the gradient is missing); for
  `step(closure)`, when the closure's first call returns (Note [A capture's step that runs
  its closure]).
- `params`, `buffers`, `optim`: CPU copies after the step (post-hook); optimizer state per
  parameter name and key (`exp_avg`, `step`, ...), plain numbers turned into 0-d tensors.
- `rng`: a digest of each global random generator's state after the step (torch's CPU
  generator, numpy's, Python's `random`); with `rng_start` (the same at the script's
  start) the gates name a generator the script drew from without seeding it (Note [A
  baseline drawn anew], verify/tolerance.py), and with `rng_first_call` (the same as the
  first module call begins) one seeded alike that two runs drew apart (Note [Seeded
  alike, drawn apart]).
- `unmoved`: trainable parameters with a gradient that the step left bitwise unchanged;
  `frozen_changed`: `requires_grad=False` parameters the step changed; `nonfinite`:
  parameters whose gradient holds a NaN or an infinity.

# Note [Which tensors are inputs]
"Inputs" are data, not values the model computes: a policy may legally change *how* the
forward runs, never *what* it is fed. So only tensors that do not require grad count after
the forward (targets, masks), and recording stops at the first backward call (or
`torch.autograd.grad`) and never runs inside a backward pass, so a checkpoint's recompute
inside backward (which calls the same functions again) is never counted. Forward inputs are read in a global forward hook with kwargs, after the forward:
a forward that writes into its own input in place would be recorded as written.
Nor does a value computed from the model's count once its history is gone: the forward's
outputs, and what a torch function makes from them or from another such value, are marked
(`_LossInputs.mark`), so `loss.detach().clone()` (Lightning's closure does it every step)
is no input while the targets, and what is made from them alone (`labels.flatten()`), are.
Nor does what the model's torch calls are handed while it runs again in the same step (a
model called twice: two views of a batch, Transformer-XL's segments): the second call's
inputs are read by the forward hook like the first's, and inside it a policy's own code
runs (non-reentrant checkpoint reads `x.device`, a `__get__` of the block's input), which
put a tensor in the policy's list that the baseline's lacked: `checkpoint:blocks.*` on
tests/clients/train_loops.py --loop twice was rejected with "input layer_norm arg[0]
differs at step 0", and x-transformers as Transformer-XL with "input __get__ arg[0]".
Counted, a baseline whose gradients differ between runs in the last bits (a GPU's
atomics) moved its step-2 loss, and every policy was rejected at the inputs gate with
"the script's inputs are not reproducible ... seed the data loader".

Everything is saved with `torch.save` as plain tensors, strings and numbers into a file of
our own making and read back with `weights_only=True`: never a user's pickle.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.overrides import TorchFunctionMode

from memledger.crash import internal   # Note [memledger's own hooks fail as memledger]
from memledger.trace.backward_calls import is_backward
from memledger.trace.collector import StopTracing, object_attributes
from memledger.trace.rng_state import generator_digests as generator_states
from memledger.trace.roots import plain_name
from memledger.trace.sharding import local_tensor
from memledger.trace.steps import OptimizerSteps, StepCounter
from memledger.trace.wrapped import inner_tensors

FORMAT = "memledger.capture/1"


def _bytes(x: torch.Tensor) -> torch.Tensor:
    """A tensor's values as one flat uint8 tensor.

    Not `x.contiguous().reshape(-1).view(torch.uint8)`: a tensor whose dimensions have size
    1 counts as contiguous whatever their strides, and one expanded from a scalar keeps
    stride 0 there (`torch.tensor(0.5).expand(1)`, the scale of pyro's
    `dist.Normal(0., 0.5).expand([1])`); `contiguous()` and `reshape(-1)` hand it back as it
    is and `view(torch.uint8)` refuses it ("self.stride(-1) must be 1 to view Float as
    Byte"). The capture raised that inside the script's own `log_prob`, and `compare` read
    it as the baseline script failing (exit 3). A copy with fresh strides takes any tensor."""
    return x.detach().reshape(-1).clone(memory_format=torch.contiguous_format) \
        .view(torch.uint8)


def digest(t: torch.Tensor) -> str:
    """sha256 over dtype, shape and the raw bytes of a tensor (any dtype, any device)."""
    x = t.detach().cpu()
    h = hashlib.sha256(f"{x.dtype}|{tuple(x.shape)}|".encode())
    if x.numel():
        h.update(_bytes(x).numpy().tobytes())
    return h.hexdigest()[:32]


def _cpu(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of what this rank holds: an FSDP2 parameter's (or gradient's) local shard,
    not its DTensor (`compare --nproc` compares rank r's shards with rank r's). A sparse
    gradient (nn.Embedding(sparse=True)) is compared dense: `isfinite` and the bitwise
    gate have no sparse kernels, and its dense form is the update it makes."""
    t = local_tensor(t.detach())
    if (inner := inner_tensors(t)):   # 8-bit state, an NF4 weight: the bytes it holds, as
        return torch.cat([_bytes(x).cpu()   # the bytes it holds, as held
                          for _, x in inner])   # (Note [Wrapper subclasses]; NF4's `.to`
    if t.layout is not torch.strided:            # takes no `copy`: compare's baseline failed)
        t = t.to_dense()
    with torch._C.DisableTorchFunctionSubclass():   # Note [A capture holds plain tensors]
        return t.to("cpu", copy=True)


# Note [A capture holds plain tensors]
# A capture is read back with `weights_only=True`, which loads torch's own classes only. A
# tensor subclass that lives by `__torch_function__` hands its class on through every op,
# `.to(copy=True)` included: pypose's LieTensor (`pp.Parameter(pp.randn_SE3(8))`, its
# class and its `ltype` pickled with it) came back as an UnpicklingError ("Unsupported
# global: GLOBAL pypose.lietensor.lietensor.LieTensor"), and `compare` on its pose graph
# died as memledger's internal error (exit 70) after its baseline ran. The copy is made
# with subclasses' `__torch_function__` off, so it is a plain Tensor of the same values
# (a wrapper subclass, which lives by `__torch_dispatch__`, was unwrapped above);
# tests/unit/test_capture_subclass.py pins it in plain torch.


def _keep_grad(step: dict, name: str, grad: torch.Tensor) -> None:
    """A CPU copy of `grad` as the step's gradient of `name`, noted if not finite."""
    step["grads"][name] = _cpu(grad)
    if not bool(torch.isfinite(step["grads"][name]).all()) and name not in step["nonfinite"]:
        step["nonfinite"].append(name)


def _plain(named) -> list[tuple[str, Any]]:
    """Names as the model has them, without a wrapper's (`_orig_mod.`, Fabric's
    `_forward_module.`): what a verdict names is what the user wrote (trace/roots.py)."""
    return [(plain_name(n), x) for n, x in named]


def _tensors(obj: Any, label: str, seen: set[int] | None = None,
             depth: int = 0) -> list[tuple[str, torch.Tensor]]:
    """(label, tensor) for every tensor in nested args (tuples, lists, dicts, objects'
    attributes: Note [Tensors handed inside an object], trace/collector.py)."""
    if isinstance(obj, torch.Tensor):
        return [(label, obj)]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in _tensors(v, f"{label}[{i}]", seen,
                                                               depth + 1)]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _tensors(v, f"{label}[{k!r}]", seen,
                                                               depth + 1)]
    held = object_attributes(obj) if depth < 8 else []
    seen = set() if seen is None else seen
    if not held or id(obj) in seen:
        return []
    seen.add(id(obj))
    return [x for k, v in held for x in _tensors(v, f"{label}.{k}", seen, depth + 1)]


class _LossInputs(TorchFunctionMode):
    """Records data tensors given to torch functions after the forward, until backward."""

    def __init__(self, cap: "Capture") -> None:
        super().__init__()
        self.cap = cap
        self.recording = True
        self._made = cap.made   # kept by the capture: a running sum stays marked

    def mark(self, obj: Any) -> None:
        """Every tensor in `obj` is computed from the model's values: never an input."""
        for _, t in _tensors(obj, ""):
            self._made[id(t)] = weakref.ref(t)
        if len(self._made) > 4096:     # ids of freed tensors are reused: drop the dead
            for k in [k for k, r in self._made.items() if r() is None]:
                del self._made[k]

    def _computed(self, t: torch.Tensor) -> bool:
        if t.requires_grad:
            return True
        r = self._made.get(id(t))
        return r is not None and r() is t

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if is_backward(func) or func is torch.autograd.grad:
            self.recording = False
            if self.cap.steps_by != "optimizer" and is_backward(func) and \
                    torch._C._current_graph_task_id() == -1:
                out = func(*args, **kwargs)   # Note [A capture without an optimizer]
                self.cap.after_backward()
                return out
        # inside a backward pass (a checkpoint's recompute, which calls the same functions
        # again): never an input. A MAML loop's inner `torch.autograd.grad(create_graph=True)`
        # re-ran a checkpointed Linear there, and `checkpoint:0` was rejected for an input
        # the baseline never had ("input linear arg[0] differs")
        # nor inside a later call of the model (Note [Which tensors are inputs]): its inputs
        # are read after it, and what runs inside it is no loss's input
        if not self.recording or torch._C._current_graph_task_id() != -1 or \
                self.cap.in_model:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "fn")
        computed = func in _UNINITIALIZED   # Note [Memory no one wrote is no input]
        read = {k: v for k, v in kwargs.items() if k != "out"}
        for label, t in _tensors(list(args), f"{name} arg") + _tensors(read, name):
            if self._computed(t):
                computed = True
            else:
                self.cap.record_input(label, t)
        out = func(*args, **kwargs)
        if computed:
            self.mark(out)
        return out


# Note [Memory no one wrote is no input]
# An input is data the script reads; `torch.empty` hands out memory no one has written, and
# `out=` is written by the call, not read. TRL's fused LM head keeps a `torch.empty` buffer
# and projects each tile into a slice of it (`torch.mm(h, w.t(), out=mm_buf[:n, :m])`): in
# DPO's reference pass, which runs outside the model's call, the slice (`__getitem__
# arg[0]`) and the `out=` were digested as inputs, whatever the allocator left there, and
# every policy on tests/clients/train_trl.py --trainer dpo was rejected with "the script's
# inputs are not reproducible: two baseline runs differ at step 0 on __getitem__ arg[0]".
# So what the factories of unwritten memory make is marked as computed (never an input, nor
# what is made from it), and an `out=` argument is not recorded.
_UNINITIALIZED = frozenset({torch.empty, torch.empty_like, torch.empty_strided,
                            torch.Tensor.new_empty, torch.Tensor.new_empty_strided})


class Capture:
    """Hooks that record inputs, gradients and post-step state; see the module docstring."""

    def __init__(self, max_steps: int, steps_by: str = "optimizer") -> None:
        self.max_steps = max_steps
        self.steps_by = steps_by
        self._counter = None   # StepCounter: Note [A capture without an optimizer]
        self.model: nn.Module | None = None
        self.device = "cpu"
        self.steps: list[dict] = []
        self.rng_start: dict[str, str] = {}   # generator_states() at the script's start
        # the same as the first module call begins (Note [Seeded alike, drawn apart],
        # verify/tolerance.py)
        self.rng_first_call: dict[str, str] | None = None
        self.start_weights: dict[str, str] = {}   # the weights' digests before the first step
        self._inputs: list[tuple[str, str]] = []
        self._before: dict[str, torch.Tensor] = {}
        self._mode: _LossInputs | None = None
        self._hooks: list = []
        self._pending: dict | None = None   # the training step being recorded
        self._opts: list = []               # the optimizers that stepped in it
        self._opt_index: dict[int, int] = {}  # id(optimizer) -> order of its first step
        self._steps: OptimizerSteps | None = None
        self.made: dict[int, weakref.ref] = {}   # computed from the model's: _LossInputs
        self.in_model = 0   # calls of the model running now (_LossInputs records none inside)
        self._unread: dict[int, dict] = {}  # id(optimizer) -> its step, closure not yet run
        self._depth = 0                     # module calls running now
        self._parts: list[nn.Module] = []   # Note [A part of the model called on its own]
        self._tops: list[weakref.ref] = []  # top-level modules, in order of first call:
        # Note [Parameters the model does not hold]

    # ---- wiring ------------------------------------------------------------------------
    def on_model(self, handle) -> None:
        """`install_policy`'s callback: the model the optimizer trains has been found."""
        earlier = self.model
        if earlier is not None and earlier is not handle.model and \
                any(m is earlier for m in handle.model.modules()):
            # what was taken for the model is part of it, called on its own while the model
            # was built (spectral_norm's parametrization: Note [The model]). What its
            # "forward" recorded is not the step's input: since then _LossInputs has been
            # recording every torch call, memledger's own policy code included (a policy
            # read `untyped_storage` on buffers, an input the baseline never had)
            self._leave_mode()
            self._inputs.clear()
        self.model = handle.model
        first = next(self.model.parameters(), None)
        self.device = str(first.device) if first is not None else "cpu"
        if self._counter is not None and self._pending is None:
            self._open_step()   # the first step begins at the model's first call

    def start(self) -> None:
        self.rng_start = generator_states()
        self._hooks = [
            nn_module.register_module_forward_pre_hook(internal(self._forward_begin)),
            nn_module.register_module_forward_hook(internal(self._forward_done), with_kwargs=True),
            # after a forward that raised too (checkpoint's early stop in its re-run); not
            # with kwargs: torch calls such a hook without them then
            nn_module.register_module_forward_hook(internal(self._forward_end), always_call=True),
        ]
        if self.steps_by != "optimizer":   # Note [A capture without an optimizer]
            self._counter = StepCounter(self.steps_by, self._end_counted_step)
            return
        # a training step as trace counts it: trace/steps.py (fed by the hooks below)
        self._steps = OptimizerSteps(self._end_step, hooks=False)
        self._hooks += [register_optimizer_step_pre_hook(internal(self._pre_step)),
                        register_optimizer_step_post_hook(internal(self._post_step))]

    def stop(self) -> None:
        self._leave_mode()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._counter is not None:   # the open step ends with the script
            if len(self.steps) < self.max_steps:
                self._counter.script_ended()
            self._counter.remove()
            return
        if self._steps is not None:
            self._steps.remove()
        if self._pending is not None and len(self.steps) < self.max_steps:
            try:   # the script ended inside a step some optimizer began: it ends here
                self._end_step()
            except StopTracing:
                pass

    def record_input(self, label: str, t: torch.Tensor) -> None:
        self._inputs.append((label, digest(t)))

    # ---- hooks ---------------------------------------------------------------------------
    def _forward_begin(self, module, args) -> None:
        # not `self.model` first: inside a compiled forward that read is what dynamo fails
        # on (below)
        if torch.compiler.is_compiling():
            return
        if self.rng_first_call is None:
            self.rng_first_call = generator_states()
        self._depth += 1
        if self._depth == 1 and not any(r() is module for r in self._tops):
            self._tops.append(weakref.ref(module))
        if module is self.model:
            self.in_model += 1
        elif self._depth == 1 and self.model is not None and self._mode is not None and \
                torch._C._current_graph_task_id() == -1 and \
                any(m is module for m in self.model.modules()):
            self.in_model += 1   # Note [A part of the model called on its own]
            self._parts.append(module)

    # Note [A part of the model called on its own]
    # A module the model holds may be called outside the model's forward: train_struct.py's
    # `model.crf(potentials, tags)`, the CRF's loss, called by the loop (or torchbearer's
    # criterion) after `model(tokens)`. Its inner torch calls were read as the loss's
    # inputs, and under a policy on it the policy's own code runs inside the call
    # (non-reentrant checkpoint reads `x.device`, a `__get__` of each argument): compare
    # rejected `checkpoint:crf` (tests/clients/train_struct.py --model chain --loss
    # marginals --lengths) with "input ge arg[0] differs at step 0", the baseline's first
    # read of the tags (`y >= 0`) meeting the policy's `__get__`, though every gradient
    # was bitwise equal. Such a call is read as the model's is: nothing inside it, its
    # arguments after it (those not computed from the model's values: the tags, not the
    # potentials), its output marked computed. Only from the model's first call on (the
    # loss window) and outside backward, where a call is a checkpoint's re-run, never an
    # input: without the two, a compiled Falcon's policy run read 6 inputs in step 0
    # against the baseline's 2 (tests/clients/test_real_clients.py::
    # test_compiled_falcon_gates_pass).
    def _forward_part_done(self, module, args, kwargs, output) -> None:
        self._parts.pop()
        if self._mode is not None and torch.is_grad_enabled():
            # read while the call still counts as open: the digests' own torch calls are
            # no inputs
            for label, t in _tensors(args, "part arg") + _tensors(kwargs, "part kwarg"):
                if not self._mode._computed(t):
                    self.record_input(label, t)
            self._mode.mark(output)
        self.in_model = max(self.in_model - 1, 0)

    def _forward_done(self, module, args, kwargs, output) -> None:
        # Inside a torch.compile'd forward dynamo traces every global hook at each submodule
        # call; reading `self.model` there tracks the model a second time and dynamo fails
        # (transformers' Falcon: "already tracked for mutation"). The model's own call, the
        # one that records, runs outside the compiled frame (its wrapper's hooks run eager).
        if torch.compiler.is_compiling():
            return
        if self._parts and self._parts[-1] is module:
            self._forward_part_done(module, args, kwargs, output)
            return
        if module is not self.model:
            return
        self.in_model = max(self.in_model - 1, 0)
        if not torch.is_grad_enabled():
            return
        for label, t in _tensors(args, "forward arg") + _tensors(kwargs, "forward kwarg"):
            self.record_input(label, t)
        if self._mode is None:
            self._mode = _LossInputs(self)
            self._mode.__enter__()
        self._mode.recording = True
        self._mode.mark(output)

    def _forward_end(self, module, args, output) -> None:
        if not torch.compiler.is_compiling():
            self._depth = max(self._depth - 1, 0)

    # Note [A step read inside backward]
    # An optimizer stepped by a gradient hook inside backward (torchtune's
    # `optimizer_in_bwd`: Note [An optimizer stepped inside backward], trace/steps.py) ran
    # the step hooks with the autograd engine's copy of the thread's state, whose torch
    # function mode stack is empty (the loss-input mode steps aside while it handles
    # `backward`): leaving the mode there raised "trying to pop from empty mode stack", and
    # `compare` on tests/clients/train_torchtune.py --opt-in-bwd stopped with an internal
    # error before any gate. There the mode only stops recording (backward already stopped
    # it); it is left, or used again, outside backward, where it was entered.
    def _leave_mode(self) -> None:
        if self._mode is not None:
            if torch._C._current_graph_task_id() != -1:
                self._mode.recording = False
                return
            self._mode.__exit__(None, None, None)
            self._mode = None

    # Note [Parameters the model does not hold]
    # A parameter the optimizer steps and the model does not hold was named by its place in
    # its optimizer, the optimizers numbered in the order they first stepped. Pyro's optim
    # wrapper keeps one `torch.optim.Adam` per parameter and steps them in the order of a
    # Python set of tensors (`SVI.step`), that is of their addresses: another order in each
    # run. The guide's parameters (`AutoDelta`'s, held by the guide module, not by the
    # model) then took each other's names between the baseline and a policy's run, and
    # `compare -p selective:layers.*` on tests/clients/train_pyro.py --case det was
    # rejected with "param_groups[0][0] has no gradient at step 0" (the baseline's first
    # optimizer was another parameter's there). So such a parameter is named by the
    # top-level module that holds it, as the ledger names one (`AutoDelta.sigma`: its
    # class name; `#2` for a second of one class, by order of first call), and only a
    # parameter no module holds (a bare `nn.Parameter`, `pyro.param` outside a module)
    # by its optimizer's place.
    def _module_names(self) -> dict[int, str]:
        names: dict[int, str] = {}
        taken: dict[str, int] = {}
        for ref in self._tops:
            m = ref()
            if m is None or m is self.model:
                continue
            cls = type(m).__name__
            taken[cls] = taken.get(cls, 0) + 1
            label = cls if taken[cls] == 1 else f"{cls}#{taken[cls]}"
            for n, p in _plain(m.named_parameters()):
                names.setdefault(id(p), f"{label}.{n}")
        if self.model is not None:
            names.update({id(p): n for n, p in _plain(self.model.named_parameters())})
        return names

    def _named_params(self, opt) -> list[tuple[str, nn.Parameter]]:
        names = self._module_names()
        k = self._opt_index.setdefault(id(opt), len(self._opt_index))
        prefix = f"optimizer{k}." if k else ""   # a second optimizer's unnamed parameters
        out, seen = [], set()
        for g, group in enumerate(opt.param_groups):
            for j, p in enumerate(group["params"]):
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append((names.get(id(p), f"{prefix}param_groups[{g}][{j}]"), p))
        return out

    def _pre_step(self, opt, args, kwargs):
        self._leave_mode()
        if self._steps.pre(opt):        # a step left open by its optimizers ends here
            self._end_step()
        if self._pending is None:       # the training step's first optimizer
            every = _plain(self.model.named_parameters()) if self.model is not None else []
            self._before = {n: _cpu(p) for n, p in every}
            if not self.steps and not self.start_weights:   # Note [A run that began elsewhere]
                self.start_weights = {n: digest(t) for n, t in self._before.items()}
            self._pending = {"inputs": [], "grads": {}, "nonfinite": [], "optim": {}}
            self._opts = []
        step = self._pending
        if opt not in self._opts:
            self._opts.append(opt)
        for name, p in self._named_params(opt):
            if name not in self._before:
                self._before[name] = _cpu(p)
        # args: (optimizer, closure?) as step() was called
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure):
            self._read_grads(opt, step)
            return None
        return self._read_after_closure(opt, step, closure, args, kwargs)

    # Note [A capture's step that runs its closure]
    # `optimizer.step(closure)` (Lightning's Trainer steps so even in manual optimization;
    # LBFGS needs it) runs the forward and backward inside step(), after the pre-hook. Read
    # there, the gradients were the previous step's (None in the first: Lightning zeroes
    # them with set_to_none inside the closure) and the forward's inputs went to the next
    # step, so a policy that changed the gradients was caught one step late, by the update
    # gate ("parameter ... differs after step 0"), and a one-step compare compared none.
    # So the closure is wrapped and the step is read when its first call returns (after
    # Lightning's clipping, which runs inside it): the gradients the update uses. LBFGS's
    # later calls re-evaluate the same step. As the doctor reads it (Note [A step that runs
    # its closure] in trace/doctor_probe.py).
    def _read_after_closure(self, opt, step: dict, closure, args, kwargs):
        calls = [0]

        def read_after(*a, **kw):
            loss = closure(*a, **kw)
            calls[0] += 1
            if calls[0] == 1:
                with torch._C.DisableTorchFunction():
                    self._read_grads(opt, step)
            return loss

        self._unread[id(opt)] = step
        if "closure" in kwargs:
            return args, {**kwargs, "closure": read_after}
        return (args[0], read_after, *args[2:]), kwargs

    # Note [One optimizer read once per parameter]
    # optimi's gradient release steps ONE optimizer per parameter inside backward
    # (`opt.step(param=p)`, then `opt.zero_grad(param=p)`): each pre-hook sees the one
    # gradient that step uses, the earlier ones already freed, the later ones not made.
    # Each read wrote every parameter of the optimizer, so the last update's read set the
    # 28 gradients read before it back to None: `compare` on tests/clients/train_optimi.py
    # `--opt adamw --bf16 --release` said "gradients bitwise" over 1 gradient of 29 a step,
    # and a policy that changed any other would have passed that gate. A read within one
    # training step never turns a gradient already read into None; a gradient present is
    # read again (a closure's re-read, a second optimizer over the same parameter).
    def _read_grads(self, opt, step: dict) -> None:
        """The step's inputs so far and the gradients `opt` is about to use."""
        self._unread.pop(id(opt), None)
        step["inputs"] += self._inputs
        self._inputs = []
        self._leave_mode()
        for name, p in self._named_params(opt):
            if p.grad is None:
                step["grads"].setdefault(name, None)
                continue
            _keep_grad(step, name, p.grad)

    def _post_step(self, opt, args, kwargs) -> None:
        step = self._unread.pop(id(opt), None)
        if step is not None:   # step() never called its closure: the gradients it had
            self._read_grads(opt, step)
        for name, p in self._named_params(opt):
            st = opt.state.get(p, {})
            self._pending["optim"][name] = {
                k: _cpu(v) if isinstance(v, torch.Tensor) else torch.tensor(float(v))
                for k, v in st.items() if isinstance(v, (torch.Tensor, int, float))}
        if self._steps.post(opt):      # the last optimizer of the training step
            self._end_step()

    # Note [A capture without an optimizer]
    # `compare --steps-by forward|whole` gates scripts that update their parameters by hand
    # (`p -= lr * p.grad`, LOMO's update fused into backward): no optimizer hook ever runs.
    # The steps are StepCounter's (trace/steps.py), as trace and measure count them; a step
    # opens at the model's first call (its parameters copied then) and each later one where
    # the last ended, with the parameters that step left. Its gradients are read as each
    # backward returns, before the script's own update can read or free them: a second
    # backward in one step reads them again, accumulated, as an optimizer's pre-hook would
    # have. An update that consumes them inside backward leaves none to read, in every run
    # alike; the update gate still compares the parameters each step leaves.
    def _open_step(self, before: dict | None = None) -> None:
        if before is None:
            every = _plain(self.model.named_parameters()) if self.model is not None else []
            before = {n: _cpu(p) for n, p in every}
        self._before = before
        self._pending = {"inputs": [], "grads": {}, "nonfinite": [], "optim": {}}

    def after_backward(self) -> None:
        """A backward returned (counted steps only): the gradients the model holds now."""
        step = self._pending
        if self._counter is None or step is None or self.model is None:
            return
        step["grads"].clear()
        step["nonfinite"].clear()
        for name, p in _plain(self.model.named_parameters()):
            if not p.requires_grad:
                continue
            if p.grad is None:
                step["grads"][name] = None
            else:
                _keep_grad(step, name, p.grad)

    def _end_counted_step(self) -> None:
        if self._pending is None:   # no model found yet: nothing to compare
            return
        self._pending["inputs"] += self._inputs
        self._inputs = []
        self._end_step()            # raises StopTracing after the last step asked for
        self._open_step(dict(self.steps[-1]["params"]))   # the next begins where it ended

    def _end_step(self) -> None:
        """One record per training step (trace/steps.py): every optimizer that stepped in it."""
        step, self._pending = self._pending, None
        if step is None:
            return
        params: dict[str, nn.Parameter] = {}
        for opt in self._opts:
            params.update(dict(self._named_params(opt)))
        if self.model is not None:
            params.update(dict(_plain(self.model.named_parameters())))
        after = {n: _cpu(p) for n, p in params.items()}
        step["params"] = after
        step["buffers"] = ({n: _cpu(b) for n, b in _plain(self.model.named_buffers())}
                           if self.model is not None else {})
        moved = {n: not bitwise_equal(self._before[n], after[n])
                 for n in after if n in self._before}
        step["unmoved"] = [n for n, p in params.items()
                           if p.requires_grad and step["grads"].get(n) is not None
                           and not moved.get(n, True)]
        step["frozen_changed"] = [n for n, p in params.items()
                                  if not p.requires_grad and moved.get(n, False)]
        step["rng"] = generator_states()
        self.steps.append(step)
        self._opts = []
        if len(self.steps) >= self.max_steps:
            raise StopTracing()

    # ---- file ----------------------------------------------------------------------------
    def data(self, meta: dict) -> dict:
        return {"format": FORMAT, "meta": meta, "steps": self.steps,
                "rng_start": self.rng_start, "rng_first_call": self.rng_first_call or {},
                "start": self.start_weights}


def save_capture(data: dict, path: str) -> None:
    """Write a capture (plain tensors, strings, numbers) to our own file. Through a file we
    open: a failed write closes it at once, where torch.save opening the path itself keeps
    it open from the exception's frames, its blocks held even once it is unlinked (Note [A
    full temporary folder] in memledger/outputs.py)."""
    with open(path, "wb") as fh:
        torch.save(data, fh)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return bool(torch.equal(_bytes(a), _bytes(b)))


def load_capture(path: str) -> dict:
    """Read a capture file back (tensors and plain containers only)."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file")
    return data

"""Applying a policy to a real model with torch's own machinery.

Two entry points:

    handle = apply_policy(model, Policy.parse("checkpoint:blocks.*"))   # a model you hold
    ... train ...
    handle.remove()                                                     # the plain model again

    handle = install_policy(Policy.parse("offload:blocks.*"))           # a script you run
    run_script("train.py", argv)        # the policy lands on the model's first forward
    handle.applied                      # the PolicyHandle once it landed (None before)
    handle.remove()

What each kind does to a selected module (its `forward` is wrapped as an instance attribute,
so the module's hooks, `state_dict` and parameters are untouched):

- `checkpoint`: `torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False,
  preserve_rng_state=True)`. Activations saved inside are dropped after the forward and
  recomputed at the first unpack in backward (early stop on; dropout masks identical
  because the RNG state is restored), so gradients are bitwise equal to the baseline.
- `selective`: the same with `context_fn=create_selective_checkpoint_contexts(fn)`, where
  `fn` answers MUST_SAVE for the part's `save` op kinds (aten overload-packet names such as
  `mm`, `addmm`) and PREFER_RECOMPUTE otherwise.
- `offload`: `torch.autograd.graph.saved_tensors_hooks` around the forward (see
  memledger/measure/offload.py): on CPU each saved storage goes to a slot of one file and
  is read back at unpack (the bytes leave the process's memory; the kernel's page cache
  may keep them until it needs the room); on CUDA to pinned host memory on a side
  stream. Parameters and storages below `min_bytes` stay where they are.

`install_policy` is for unmodified scripts: a global module forward pre-hook waits for the
first call of a module that has parameters and no enclosing module call (the model the
optimizer trains, in any ordinary training loop), resolves the selectors against its
`named_modules()` and wraps the selected submodules, then removes itself.

Known limitations: regions never nest (the policy refuses it); a module called twice per
step is checkpointed per call; a model first called under `torch.no_grad()` (evaluation
before training) still gets the policy, which only acts when gradients are enabled.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import functools
import hashlib
import inspect
import itertools
import sys
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.nn.parameter import UninitializedTensorMixin
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.checkpoint import (
    _DEFAULT_DETERMINISM_MODE,
    _StopRecomputationError,
    CheckpointPolicy,
    _checkpoint_without_reentrant_generator,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from memledger.crash import internal
from memledger.errors import MatchesNoModule, PolicyError
from memledger.measure.offload import Offloader
from memledger.replay.aten_names import save_op_refusal
from memledger.replay.policies import (
    DEFAULT_SAVE_OPS,
    Policy,
    PolicyKind,
    Region,
    before_the_model_message,
    idle_modules_message,
    own_call_message,
    resolve,
    uncalled_message,
)
from memledger.replay.script_checkpoint import (
    nested_checkpoint_message,
    nested_function_checkpoint_message,
    offload_inside_message,
)
from memledger.replay.scripted import refuse_scripted_regions
from memledger.replay.stateful import (
    ARGUMENT_CHANGED,
    INPUT_WRITTEN,
    emptied_cache_message,
    mode_message,
    selective_mutated_message,
    selective_recast_message,
    selective_twice_message,
    paired_hooks_message,
    state_rewritten_message,
    stateful_message,
)
from memledger.trace.func_transforms import in_func_transform, own_checkpointed
from memledger.trace.mode_readers import reads_a_flag
from memledger.trace.script_checkpoint import (
    CheckpointRunWatch,
    FunctionCheckpoint,
    checkpoint_pack_hook,
    find_checkpoint_call,
    function_checkpoint_site,
    outermost_call_under_checkpoint,
)
from memledger.trace.roots import (
    COMPILED, RootNames, containers, module_aliases, module_parameters, named_modules)
from memledger.trace.where import in_reentrant_checkpoint
from memledger.trace.outside_state import (
    argument_objects,
    argument_versions,
    changed_containers,
    handed_containers,
    paired_hooks,
    reachable_tensors,
    routed_calls,
    storage_key,
    watch_routed_outputs,
    written_arguments,
    written_state,
)


@dataclass
class PolicyHandle:
    """What `apply_policy` did; `remove()` puts the original forwards back. It refers to the
    model and its modules weakly (Note [A policy holds its model weakly])."""

    model_ref: weakref.ref
    policy: Policy
    regions: list[Region]
    modules: dict[str, weakref.ref] = field(default_factory=dict)   # path -> wrapped module
    forwards: dict[str, "_RegionForward"] = field(default_factory=dict)   # path -> its forward
    offloaders: list[Offloader] = field(default_factory=list)
    hooks: list[Any] = field(default_factory=list)   # the nesting guards' pre-hooks
    # path -> (parameter, its version) when the policy went on, for `idle_part` (Note
    # [Modules run through another method], replay/policies.py)
    versions: dict[str, list[tuple[weakref.ref, int]]] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)   # paths `note_used` found used
    # Note [Work no gradient shows]: the wrappers of each region's own methods; the modules
    # inside the regions and above them (id -> path) not yet seen called, and those seen
    methods: dict[str, list[tuple[str, "_RegionForward"]]] = field(default_factory=dict)
    watch: dict[int, str] = field(default_factory=dict)
    called: set[str] = field(default_factory=set)
    # path -> class name of the regions whose class has a `__call__` of its own (Note [A
    # class with a call of its own], replay/policies.py)
    own_call: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> nn.Module | None:
        """The model the policy was put on; None once the script let go of it."""
        return self.model_ref()

    def remove(self) -> None:
        for path, ref in self.modules.items():
            mod = ref()
            if mod is not None and mod.__dict__.get("forward") is self.forwards[path]:
                del mod.__dict__["forward"]   # the class's forward again
        for path, wrapped in self.methods.items():   # Note [Work no gradient shows]
            ref = self.modules.get(path)
            mod = ref() if ref is not None else None
            for name, w in wrapped:
                if mod is not None and mod.__dict__.get(name) is w:
                    del mod.__dict__[name]   # the class's method again
        self.methods.clear()
        self.watch.clear()
        self.modules.clear()
        for h in self.hooks:
            h.remove()
        self.hooks.clear()
        for o in self.offloaders:
            o.close()
        self.offloaders.clear()

    def idle_part(self) -> PolicyError | None:
        """The refusal of the first policy part none of whose modules' forwards ran yet:
        they never ran (Note [Modules that never ran], replay/policies.py), or their
        parameters were used all the same, by code that runs them through another method
        (Note [Modules run through another method]); None when each part's forwards did."""
        for part in self.policy.parts:
            paths = [r.path for r in self.regions if r.part is part]
            if paths and not any(self.forwards[p].ran for p in paths if p in self.forwards):
                used = [p for p in paths if p in self.used or self._used(p)
                        or (p in self.forwards and self.forwards[p].direct)
                        or any(w.ran for _, w in self.methods.get(p, ()))
                        or any(c.startswith(p + ".") for c in self.called)]
                if used:
                    if all(p in self.own_call for p in used):
                        # a class whose `__call__` runs `forward` without torch's hooks
                        # (gpytorch's): predict's words (Note [A class with a call of its
                        # own], replay/policies.py)
                        return PolicyError(own_call_message(
                            part.selector, used, self.own_call[used[0]], sorted(self.called)))
                    # Note [What an uncalled module's refusal advises] (replay/policies.py)
                    return PolicyError(uncalled_message(part.selector, used,
                                                        sorted(self.called),
                                                        self._method_that_ran(used[0])))
                return PolicyError(idle_modules_message(part.selector, paths))
        return None

    def _method_that_ran(self, path: str) -> str:
        """The first of the region's watched public methods that ran, or "" (Note [The
        method that ran], replay/policies.py)."""
        ran = [(w.ran_at, name) for name, w in self.methods.get(path, ()) if w.ran_at >= 0]
        return min(ran)[1] if ran else ""

    # Note [Parameters used while the model lived]
    # `idle_part` runs as the policy comes off, when the script has ended; a model local to
    # the script's `main()` is gone by then, its parameters' weak references dead, and
    # every region read as unused: mambapy's `dt_proj`, whose weight the mixer multiplies
    # by hand (`self.dt_proj.weight @ delta`) and never calls, was refused as "never ran in
    # the steps (the script's input never reaches them ...)" where predict said it runs
    # through another method. Each optimizer step (its pre-hook, gradients in place) notes
    # the regions whose parameters were used so far.
    def note_used(self) -> None:
        """At an optimizer step: remember the regions whose parameters were used so far."""
        for path in self.versions:
            if path not in self.used and self._used(path):
                self.used.add(path)

    def note_call(self, module: nn.Module) -> None:
        """A module was called: one inside a region marks the region used (Note [Work no
        gradient shows]), and one around it is named in the refusal."""
        path = self.watch.pop(id(module), None)
        if path is not None:
            self.called.add(path)

    def _used(self, path: str) -> bool:
        """Whether a parameter of the module at `path` got a gradient or was written (by an
        optimizer step) since the policy went on."""
        for ref, version in self.versions.get(path, ()):
            p = ref()
            # a non-leaf (higher's fast weights) has no `.grad`; torch warns on the read
            if p is not None and ((p.is_leaf and p.grad is not None) or
                                  p._version != version):
                return True
        return False

    def __enter__(self) -> "PolicyHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def module_table(model: nn.Module) -> list[tuple[str, str]]:
    """(path, class name) of every module, as the policy resolver wants them: one per path
    (a compiled submodule's wrapper and the module it wraps share one, `plain_name`; the
    wrapped module's class is the one to select by)."""
    table: dict[str, str] = {}
    for name, m in named_modules(model):   # the wrapper first, then the module it wraps
        table[name] = type(m).__name__
    return list(table.items())


# Note [Modules by the model's names]
# A region's modules are watched (`note_call`) to name the ones that ran inside a module
# the script never called. Named by the region's own `named_modules()`, a module it holds
# a second reference to took that second path: performer-pytorch's `ProjectionUpdater`
# keeps the `Performer.net` it redraws as `self.instance`, and measure's refusal of
# `checkpoint:net.performer.proj_updater` listed "modules around it that did run:
# net.performer, net.performer.proj_updater.instance, ...", paths the model's
# `named_modules()` never gives (it names them `net.performer.net...` once) and predict,
# reading the trace's names, cannot say. Each module is now watched by the model's own
# name for it where it has one.
def apply_policy(model: nn.Module, policy: Policy, offload_dir: str | None = None,
                 check_save: bool = True) -> PolicyHandle:
    """Wrap the forward of each module the policy selects; raise PolicyError if it cannot.

    `offload_dir`: where CPU offload writes its files (default: a fresh temporary folder).
    `check_save=False` lets a save list name an op selective never sees (the calibration's
    `save=none_`: keep nothing on purpose).
    """
    regions = resolve(policy, module_table(model), containers=containers(model),
                      aliases=module_aliases(model))
    handle = PolicyHandle(model_ref=weakref.ref(model), policy=policy, regions=regions)
    _wrap(handle, model, regions, {}, offload_dir, check_save)
    return handle


def extend_policy(handle: PolicyHandle, offload_dir: str | None = None) -> list[str]:
    """Put the policy on the modules the model registered since it went on (Note [A region
    registered after the first call]): the paths newly wrapped; PolicyError as
    `apply_policy` raises it."""
    model = handle.model
    if model is None:
        return []
    regions = resolve(handle.policy, module_table(model), containers=containers(model),
                      aliases=module_aliases(model))
    new = [r for r in regions if r.path not in handle.modules]
    state = _model_state(model)
    for o in handle.offloaders:   # the new modules' parameters stay where they are
        o.skip_also(state)
    handle.regions += new
    _wrap(handle, model, new, {o.min_bytes: o for o in handle.offloaders}, offload_dir, True)
    return [r.path for r in new]


def _model_state(model: nn.Module) -> list[torch.Tensor]:
    """The parameters and buffers offload leaves on the device: not a tensor an op computed
    that the model holds in `_parameters` (higher's first fast weights, `p.clone()`), which
    the ledger reads as an activation and the replay moves (Note [A computed tensor in a
    module's parameters], trace/collector.py); and the constants its modules hold as plain
    attributes (Note [A constant a module holds, left on the device])."""
    return [*(p for p in module_parameters(model) if p.grad_fn is None), *model.buffers(),
            *_held_constants(model)]


# Note [A constant a module holds, left on the device]
# A tensor a module keeps as a plain attribute, not requiring grad, is model state to the
# ledger (Note [A tensor a module holds unregistered], trace/collector.py: the role
# `buffer`), and the replay never moves a buffer its module holds (engine.py `movable`):
# offloading it frees nothing, the module keeps it. The offloader skipped registered
# buffers only, so it wrote such a constant out at pack and read it back at unpack: a copy
# the baseline never had, held (Note [Rounds of a read-back, replayed]) from the first
# unpack of its saves to the last. Where the module runs once a step, the copy lives for
# one node and missed the peak; where it runs K times a step (a rollout, a shared block),
# the copy spans the backward of K calls. cliffordlayers keeps its algebra's signature `g`
# as a plain float32 tensor on every Clifford layer and each kernel build saves `g[0]`
# (`g[0] * w[1]`): a 1-D net applied to its own output 3 times, `offload:head` measured
# 4 B over predicted, `offload:blocks.*` 12 B (tests/clients/test_clifford_clients.py).
# In plain torch: tests/clients/train_plain_index.py --calls 3, each block's int64 index
# (8,192 B) a plain attribute saved by `index`: `offload:*` measured 95,496 B against
# 79,112 predicted (and measured with `--buffer`). Such constants are now left on the
# device as buffers are: the tensors `vars(module)` holds, of plain type, strided, not
# requiring grad, found when the policy goes on (made in setup, as the ledger's rule asks).
# A constant made in a step (a cache) is not among them and moves as the ledger's
# activation it is.
def _held_constants(model: nn.Module) -> list[torch.Tensor]:
    """The plain tensors the model's modules hold as attributes, not requiring grad."""
    out, seen = [], set()
    for _, mod in named_modules(model):
        for t in vars(mod).values():
            if type(t) is torch.Tensor and not t.requires_grad and \
                    t.layout is torch.strided and not t.is_nested and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
    return out


def _wrap(handle: PolicyHandle, model: nn.Module, regions: list[Region],
          offloaders: dict[int, Offloader], offload_dir: str | None, check_save: bool) -> None:
    """Wrap the forward of each region's module; the offloaders by their `min_bytes`."""
    policy = handle.policy
    # Note [A compiled submodule is wrapped outside its compiled code]
    every = named_modules(model)   # torch.compile's wrapper before the module it wraps
    named: dict[str, nn.Module] = {}
    by_id: dict[int, str] = {}   # Note [Modules by the model's names]
    for name, m in every:
        named.setdefault(name, m)
        by_id.setdefault(id(m), name)
    # an FSDP2 parameter is a DTensor: its storage is its local shard's (Note [Sharded storages]),
    # a wrapper's its inner tensors' (Note [Wrapper subclasses]); a lazy module's state has
    # none until its first forward (Note [Lazy parameters] in trace/collector.py): the
    # offloader takes its storage when it has one
    state = _model_state(model)
    lazy = [t for t in state if isinstance(t, UninitializedTensorMixin)]
    ready = [t for t in state if not isinstance(t, UninitializedTensorMixin)]
    for r in regions:
        mod = named[r.path]
        orig = _weakly_bound(mod.forward, mod)   # Note [A policy holds its model weakly]
        kind = r.part.kind
        if kind in (PolicyKind.CHECKPOINT, PolicyKind.SELECTIVE):
            # Note [TorchScript inside a region] (memledger/replay/scripted.py)
            refuse_scripted_regions(policy.text(), [r.path], [
                (".".join(x for x in (r.path, p) if x), "ScriptModule")
                for p, m in named_modules(mod) if isinstance(m, torch.jit.ScriptModule)])
            guard = _NestingGuard(policy.text(), r.path, every)
            # inside a compiled submodule the check would be traced by Dynamo, and break
            # the user's graph at every submodule (Note [A compiled submodule is wrapped...])
            inner = [] if getattr(mod, COMPILED, None) is not None else [
                m for m in mod.modules()
                if m is not mod and not isinstance(m, torch.jit.ScriptModule)]
            handle.hooks += [m.register_forward_pre_hook(guard.check_inner) for m in inner]
            if check_save and kind is PolicyKind.SELECTIVE and r.part.save != DEFAULT_SAVE_OPS:
                _check_save_ops(policy.text(), r.part.save)
            context = _selective_context(r.part.save_ops()) \
                if kind is PolicyKind.SELECTIVE else None
            wrapped = _checkpointed(orig, mod, context, (policy.text(), r.path), guard)
        elif kind is PolicyKind.OFFLOAD:
            key = r.part.min_bytes
            if key not in offloaders:
                # Note [A parameter given a new storage] (measure/offload.py)
                offloaders[key] = Offloader(min_bytes=key, skip_state=ready,
                                            directory=offload_dir, skip_later=lazy)
            wrapped = _offloaded(orig, offloaders[key],
                                 _NestingGuard(policy.text(), r.path, every))
        else:  # pragma: no cover - resolve never yields NONE regions
            continue
        mod.forward = _RegionForward(wrapped, orig, calls_only=True)   # shadows the class's
        # Note [A forward called directly runs plainly]: its pre-hook marks a module call
        handle.hooks.append(mod.register_forward_pre_hook(_CallMark(mod.forward)))
        handle.versions[r.path] = [(weakref.ref(p), p._version)
                                        for p in module_parameters(mod)]
        handle.methods[r.path] = _watched_methods(mod)   # Note [Work no gradient shows]
        # Note [Modules by the model's names]
        handle.watch.update((id(m), by_id.get(id(m)) or ".".join(x for x in (r.path, p) if x))
                            for p, m in mod.named_modules() if m is not mod)
        parts = r.path.split(".")
        handle.watch.update((id(named[a]), a) for a in
                            (".".join(parts[:i]) for i in range(1, len(parts))) if a in named)
        handle.modules[r.path] = weakref.ref(mod)
        if type(mod).__call__ is not nn.Module.__call__:
            handle.own_call[r.path] = type(mod).__name__
        handle.forwards[r.path] = mod.forward
    handle.offloaders += [o for o in offloaders.values() if o not in handle.offloaders]


# Note [Work no gradient shows]
# measure tells a module run through another of its methods from one that never ran (Note
# [Modules run through another method], replay/policies.py) by its parameters: a gradient,
# or written by a step. Work under `torch.no_grad()` or on frozen parameters leaves
# neither. An evaluation script that decodes with pytorch-crf (`crf.decode(emissions)`
# under no_grad, traced `--steps-by forward`) and a training step that encodes through a
# frozen encoder's method (`self.enc.encode(x)`, as diffusion fine-tuning runs its frozen
# VAE) were refused by predict, which reads the ops, as "never called as a module: the
# code runs its work through another of its methods", and by measure as "never ran in the
# steps (the script's input never reaches them ...)"; the evaluation script was not
# refused by measure at all ("applied to crf"): measure judged idle parts only once an
# optimizer step had decided the model, and such a script has none. measure now also
# counts a region used when one of its class's public methods ran (a wrapper on the
# instance, like the forward's: Note [A policy's forward travels as the original]) or a
# module inside it was called, and judges idle parts at the script's end when steps are
# counted by forward or by the whole script (`--steps-by`).
def _watched_methods(mod: nn.Module) -> list[tuple[str, "_RegionForward"]]:
    """Wrap, on the instance, each public method the module's classes define beyond
    nn.Module's own API (its `forward` aside): a wrapper that notes it ran. torch's own
    classes are left alone (an LSTM's `flatten_parameters` runs inside its forward, and a
    compiled module's wrapper is torch's)."""
    out: list[tuple[str, _RegionForward]] = []
    seen: set[str] = set()
    for cls in type(mod).__mro__:   # the module's own classes (not mixins beside them)
        if cls is nn.Module or not issubclass(cls, nn.Module) or \
                cls.__module__.split(".")[0] == "torch":
            continue
        for name, fn in vars(cls).items():
            if name in seen or name.startswith("_") or name == "forward" or \
                    hasattr(nn.Module, name) or name in mod.__dict__ or \
                    not isinstance(fn, types.FunctionType):
                continue
            seen.add(name)
            bound = _weakly_bound(types.MethodType(fn, mod), mod)
            wrapper = _RegionForward(bound, bound)
            mod.__dict__[name] = wrapper
            out.append((name, wrapper))
    return out


# Note [A compiled submodule is wrapped outside its compiled code]
# `model.blocks[1] = torch.compile(block)` puts an OptimizedModule at `blocks.1`, and the
# block under it as `blocks.1._orig_mod`, one name for both (`plain_name`). The policy's
# forward goes on the OptimizedModule: the user's own `checkpoint(block, x)` around a
# compiled block, the compiled code untouched. On the block inside, Dynamo traced the
# policy's bookkeeping into the block's graph (graph breaks at its nesting and state
# checks, a recompile every step), and each compile's garbage held the block's input
# until the garbage collector ran: `checkpoint:blocks.*` on tests/clients/train_mech.py
# --case compiled_block measured 12,288 B over torch's own checkpoint of the same blocks,
# or not, by when the collector happened to run (warm or cold worker, the tests before it
# in one pytest process). For the same reason the nesting guard's pre-hooks stay off the
# modules inside.

# Note [A policy's forward travels as the original]
# The forward a policy puts on a module is an attribute of the module instance, so it
# travels with the module's __dict__: `torch.save(model, f)` (pytorch/examples'
# word_language_model saves its best model so) failed under every policy with "Can't
# pickle <function LSTM.forward>: it's not the same object as torch.nn.modules.rnn.
# LSTM.forward", and `copy.deepcopy(model)` (a best-so-far or EMA copy) gave the copy a
# forward that ran the ORIGINAL module. Pickled or copied, the wrapper is the forward it
# wraps: a bound method pickles as `getattr(module, "forward")`, which finds the class's
# forward while the module is rebuilt. Deep-copied, it is that function bound to the copy
# through a weak reference (`_WeakForward`): a bound method in the copy's own __dict__
# would be a reference cycle, and a copy the script drops (an evaluation snapshot made by
# `copy.deepcopy` each step) would stay until Python's garbage collector ran:
# tests/doctor/garbage.py --cycle snapshot --fixed measured 263,168 B (the copy's `a`) over
# its prediction under `checkpoint:a`. The saved or copied model runs plainly; the policy
# stays on the model it was put on.
#
# Note [A forward called directly runs plainly]
# A policy acts on a module's calls: the trace sees a module's work begin and end only
# where torch's module hooks fire, and predict refuses a module whose forward the code
# calls directly (`self.rnn_cell.forward(x)`, as ncps' CfC and LTC run their cell every
# time step; Note [Modules whose forward is called directly], replay/policies.py). measure
# put its policy on the module's `forward`, which such a call runs too: it measured
# `checkpoint:rnn_cell` on an LTC (78,600 B against a 170,780 B baseline) and
# `checkpoint:@CfCCell` on a wired CfC where predict refused both, and where one module ran
# both ways it checkpointed the direct calls that predict, pricing the module calls alone,
# left as they were. The region's forward pre-hook (`enter`) now marks each module call,
# and a call of the forward that no module call announced runs the module's own forward,
# plainly, noted as `direct`: a part whose modules ran only so is refused as the policy
# comes off in predict's words (`PolicyHandle.idle_part`), and one that also ran as module
# calls is measured on those, as predicted. An instance forward put on top of the policy's
# (accelerate's hooks call the forward they found) still runs inside the module call.
_RAN_ORDER = itertools.count()
# whether a watched method that runs now counts as the one that ran (Note [The method that
# ran]): the installer's, while a policy is on
_METHOD_GATE: list[Callable[[], bool] | None] = [None]


class _RegionForward:
    """A policy's forward for one module (`run`), standing in for `orig` when pickled or
    copied. `calls_only`: a region's forward, which runs `run` only inside a module call
    (Note [A forward called directly runs plainly]); a watched method runs it always."""

    def __init__(self, run: Callable, orig: Callable, calls_only: bool = False) -> None:
        functools.update_wrapper(self, orig)   # name, doc, `__wrapped__` for inspect
        self.run, self.orig = run, orig
        self.ran = False   # Note [Modules that never ran] (replay/policies.py)
        self.ran_at = -1   # when it first ran, among the wrappers (Note [The method that ran])
        self.calls_only = calls_only
        self.entering = False   # a module call's pre-hooks ran, its forward not yet
        self.direct = False     # the forward ran outside a module call

    def enter(self, module: nn.Module, args: Any) -> None:
        """The module's forward pre-hook: a module call of the module this wraps."""
        if module.__dict__.get("forward") is self:   # not a deep copy's (its hooks are ours)
            self.entering = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.calls_only:
            if not self.entering:
                self.direct = True
                return self.orig(*args, **kwargs)
            self.entering = False
        self.ran = True
        if self.ran_at < 0 and (gate := _METHOD_GATE[0]) is not None and gate():
            self.ran_at = next(_RAN_ORDER)   # Note [The method that ran]
        return self.run(*args, **kwargs)

    def __reduce_ex__(self, protocol: int) -> Any:
        return self.orig.__reduce_ex__(protocol)

    def __deepcopy__(self, memo: dict) -> Any:
        owner, func = getattr(self.orig, "__self__", None), getattr(self.orig, "__func__", None)
        if owner is None or func is None:
            return copy.deepcopy(self.orig, memo)
        return _WeakForward(func, copy.deepcopy(owner, memo))   # the copy, from `memo`

class _CallMark:
    """A region's forward pre-hook: marks a module call for its forward (Note [A forward
    called directly runs plainly]), held weakly. Pickled or deep-copied with the module, it
    marks nothing for the copy, whose forward is the class's (Note [A policy's forward
    travels as the original])."""

    def __init__(self, forward: "_RegionForward | None" = None) -> None:
        self.forward = weakref.ref(forward) if forward is not None else None

    def __call__(self, module: nn.Module, args: Any) -> None:
        forward = self.forward() if self.forward is not None else None
        if forward is not None:
            forward.enter(module, args)

    def __reduce_ex__(self, protocol: int) -> Any:
        return (_CallMark, ())

    def __deepcopy__(self, memo: dict) -> Any:
        return self   # `enter` tells the copy's calls from the module's


# Note [A policy holds its model weakly]
# A policy's forward is an attribute of the module it wraps. Holding the module's bound
# forward (or the module itself, in a closure) it made a reference cycle, module ->
# __dict__ -> wrapper -> module, and the PolicyHandle held the model and each wrapped module
# besides: a model the script dropped stayed alive until the policy moved to the next model
# and Python's garbage collector ran. A script that builds a model per step (a search over
# settings, tests/doctor/rebuilt.py) measured 4,500 B under `offload:0` where the replay,
# which frees the model as the script does, predicted 3,792. So the wrapper calls the class
# function bound through a weak reference (`_WeakForward`), the checkpoint wrapper refers to
# its module weakly, and the handle holds weak references and the wrappers. torch's
# checkpoint still gets a bound method, made at each call: its graph holds the module for
# the re-run, as a checkpoint the script wrote would (a model dropped between its forward
# and its backward is re-run all the same).
def _weakly_bound(forward: Callable, module: nn.Module) -> Callable:
    """`forward` through a weak reference to `module` when it is `module`'s bound method (a
    forward the script or a library put on the instance is kept as it is)."""
    if getattr(forward, "__self__", None) is module and \
            isinstance(forward, types.MethodType):
        return _WeakForward(forward.__func__, module)
    return forward


def _strong(forward: Callable) -> Callable:
    """What checkpoint keeps for the re-run (Note [A policy holds its model weakly])."""
    return forward.bound() if isinstance(forward, _WeakForward) else forward


class _WeakForward:
    """`func` bound to `owner` through a weak reference: the forward a policy wraps, and a
    deep copy's forward (Notes [A policy holds its model weakly], [A policy's forward
    travels as the original])."""

    def __init__(self, func: Callable, owner: nn.Module) -> None:
        functools.update_wrapper(self, func)
        self.func, self.owner = func, weakref.ref(owner)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(self.owner(), *args, **kwargs)

    def bound(self) -> Callable:
        """A bound method, held by whoever holds it (checkpoint's graph, for its re-run)."""
        return types.MethodType(self.func, self.owner())

    @property
    def __signature__(self) -> inspect.Signature:   # the bound method's: no `self`
        return inspect.signature(self.bound())

    @property
    def __self__(self) -> nn.Module | None:   # as a bound method's
        return self.owner()

    @property
    def __func__(self) -> Callable:
        return self.func

    def __reduce_ex__(self, protocol: int) -> Any:
        return types.MethodType(self.func, self.owner()).__reduce_ex__(protocol)

    def __deepcopy__(self, memo: dict) -> Any:
        return _WeakForward(self.func, copy.deepcopy(self.owner(), memo))


class _NestingGuard:
    """Refuses a region that would nest with a checkpoint of the script's own (Note [The
    script's own checkpoint], memledger/replay/script_checkpoint.py): a checkpointed or
    offloaded region that runs inside the script's checkpoint (met as the region is
    entered), or a checkpointed region inside which one of the script's runs (met at a
    submodule's call, under a checkpoint hook that is not the region's own)."""

    def __init__(self, policy: str, path: str, named: list[tuple[str, nn.Module]]) -> None:
        self.policy, self.path = policy, path
        self.paths = {id(m): p for p, m in named}   # a compiled module and its wrapper alike
        self.own: list[Any] = []   # the region's own checkpoint pack hook while it runs
        # a checkpoint-run watch per open first run, with the script's checkpoints of a
        # function met in it, and the modules the script checkpoints in it (Note [A
        # checkpoint met in a call, not under its path], replay/script_checkpoint.py)
        self.watches: list[tuple[CheckpointRunWatch, list[FunctionCheckpoint],
                                 list[nn.Module]]] = []

    def run(self, orig: Callable) -> Callable:
        """`orig` as checkpoint runs it, the region's own pack hook noted meanwhile."""
        @functools.wraps(orig)
        def forward(*args: Any, **kwargs: Any) -> Any:
            pack = checkpoint_pack_hook()
            if pack is None:           # the re-run: nothing to guard
                return orig(*args, **kwargs)
            self.enter(pack)
            try:
                out = orig(*args, **kwargs)
            except BaseException:
                self.leave()
                raise
            self.leave(done=True)
            return out
        return forward

    # Note [A policy checkpoint around a checkpointed function] (trace/script_checkpoint.py)
    def enter(self, pack: Any) -> None:
        """The region's first run begins under its own pack hook `pack`: watch the
        checkpoints whose first run begins in it."""
        self.own.append(pack)
        watch = CheckpointRunWatch(self._checkpoint_run)   # Note [A checkpoint that keeps
        watch.__enter__()                                   # no generator state]
        self.watches.append((watch, [], []))

    def leave(self, done: bool = False) -> None:
        """The first run ends (`done`: returned); refuse if the script checkpointed a
        function of no module in it (a module call under it was refused already)."""
        self.own.pop()
        watch, seen, modules = self.watches.pop()
        watch.__exit__(None, None, None)
        if done and seen:
            site = seen[0]
            region = self.paths.get(id(site.caller), self.path) \
                if site.caller is not None else self.path
            raise PolicyError(nested_function_checkpoint_message(
                self.policy, self.path, region, site.fn, site.at, site.lib))
        if done and modules:   # a module the region calls but does not hold by name: its
            # calls were not hooked (`check_inner`), so met here (Note [A checkpoint met in
            # a call, not under its path], replay/script_checkpoint.py)
            raise PolicyError(nested_checkpoint_message(
                self.policy, self.path, self.paths.get(id(modules[0]), ""), inside=False))

    def _checkpoint_run(self) -> None:
        if not self.watches:
            return
        if (site := function_checkpoint_site()) is not None:
            self.watches[-1][1].append(site)
        elif (call := find_checkpoint_call()) is not None and call.module is not None:
            self.watches[-1][2].append(call.module)

    def check_outer(self, message: Callable = nested_checkpoint_message) -> None:
        """As the region is entered: does it run inside a checkpoint of the script's?"""
        if checkpoint_pack_hook() is not None or \
                (not torch.is_grad_enabled() and in_reentrant_checkpoint()):
            self._refuse(message, inside=True)   # Note [An alternative that is refused too]

    def check_inner(self, module: nn.Module, args: Any) -> None:
        if not self.own:
            return
        pack = checkpoint_pack_hook()
        if (pack is not None and pack is not self.own[-1]) or \
                (not torch.is_grad_enabled() and in_reentrant_checkpoint()):
            self._refuse(nested_checkpoint_message, module)

    def _refuse(self, message: Callable, module: nn.Module | None = None,
                inside: bool = False) -> None:
        """Name the script's region as the ledger does: the module its checkpointed
        function belongs to, else the outermost module called under it (this region, or
        the submodule being entered)."""
        call = find_checkpoint_call()
        if call is not None and call.module is not None:
            region = self.paths.get(id(call.module), "")
        elif module is None and (first := outermost_call_under_checkpoint()) is not None:
            # Note [The module a checkpointed function runs first] (trace/script_checkpoint.py)
            region = self.paths.get(id(first), self.path)
        else:
            region = self.paths.get(id(module), "") if module is not None else self.path
        raise PolicyError(message(self.policy, self.path, region, inside=inside))


# Note [A region called inside backward]
# A policy acts on a region's calls in forward only: the ledger's replay selects the calls
# recorded in the forward phase (memledger/replay/prepared.py), so a call made while
# autograd's engine runs a node must run plainly here too, or `measure` would measure what
# `predict` never priced. Such calls come from a custom backward that runs modules again:
# transformers' Reformer makes each reversible layer's input again in
# `_ReversibleFunction.backward` by calling the layer's `attention` and `feed_forward` under
# `enable_grad` (its forward calls them under `no_grad`). Checkpointing `attention` there
# measured 174.1 KiB under the baseline (2 layers, hidden 64, batch 16, seq 16) while the
# replay predicted the baseline to the byte. Checkpoint's own re-run calls the wrapped
# function, never these wrappers (regions never nest), so it is not affected.
def _in_backward() -> bool:
    """Whether autograd's engine is running a node (a custom backward calls the module)."""
    return torch._C._current_autograd_node() is not None


# Note [An early stop a library wrapped]
# A non-reentrant re-run stops by raising `_StopRecomputationError` from the pack hook of
# the last save it needs (torch's early stop, which `measure` runs, as the replay prices
# it): torch's unpack hook catches it around the re-run. The exception is an `Exception`,
# so a library that catches what its call raises and raises its own error `from` it passes
# torch something else: einx compiles each expression into a function and turns any error
# inside it into a `CallOperationError` (x-transformers' `Attention` ends with
# `einx.where('b n, b n d, -> b n d', mask, out, 0.)`, whose `torch.where` output is the
# region's last save under `selective:@Attention`). The stop then left the backward as the
# script's error: "the script failed under 'selective:@Attention': script raised
# CallOperationError" where predict priced the policy (train_frame_avg.py --net xtf
# --mask). The region's function, as checkpoint calls it, raises again the stop it finds in
# the chain (`__cause__`, else `__context__`) of what leaves it as a new stop: everything
# the re-run needed was kept before the stop was raised (the pack hook stores its tensor
# first), so the re-run ends where torch's own stop ends it, and nothing holds the
# library's error (and through it the re-run's frames) once torch has caught the stop. Only a stop of a re-run in flight is
# looked for: an error with no stop in its chain leaves as it came.
def _stop_in_chain(e: BaseException) -> BaseException | None:
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, _StopRecomputationError):
            return e
        seen.add(id(e))
        e = e.__cause__ if e.__cause__ is not None else e.__context__
    return None


# Note [An early stop TorchScript dropped]
# A region whose last save is made inside a `torch.jit.script` function (assoc-scan's
# `AssocScan`: its combine `binary_operator` is scripted, and its `addcmul` is the scan's
# last save; nothing after it saves) stops its re-run inside the TorchScript interpreter,
# which turns every Python exception raised under it into a RuntimeError of its own ("The
# following operation failed in the TorchScript interpreter. ... RuntimeError: ") with no
# cause or context: the stop is gone from the chain Note [An early stop a library wrapped]
# reads, and torch's own checkpoint fails the backward (plain torch as well, on the first
# backward: `checkpoint(AssocScan(), gates, inputs, use_reentrant=False)`). So `measure`
# said "the script failed under 'checkpoint:blocks.0.scan'" with the interpreter's
# traceback, where predict priced the policy (tests/clients/train_scan.py --model assoc).
# The stop torch raises is the pack hook's, once the re-run has packed as many tensors as
# the first run saved (`recomp_counter[gid] == len(weak_holders)`, early stop on): where
# an error leaves the region's function while the innermost saved-tensor hooks are a
# re-run's and that count is reached, the error is that stop, whatever carried it, and
# leaves as torch's own. Everything the re-run needed was packed before the stop; an error
# before the count is reached (the script's own) leaves as it came. The hook's frame and
# group are read from its closure (`target_frame_ref`, `gid`: torch 2.13's
# `_recomputation_hook`, under its `torch._dynamo.disable` wrapper); a torch that names
# them otherwise keeps the old behaviour (the script's failure).
def _stop_reached() -> bool:
    """Whether a non-reentrant re-run in flight (the innermost saved-tensor hooks are its
    `_recomputation_hook`'s) has packed every tensor its first run saved, with early stop
    on: the moment torch raises its stop (Note [An early stop TorchScript dropped])."""
    try:
        hooks = torch._C._autograd._top_saved_tensors_default_hooks(True)
    except (AttributeError, RuntimeError, TypeError):
        return False
    names = _closure_names(hooks[0]) if hooks else {}
    frame_ref, gid = names.get("target_frame_ref"), names.get("gid")
    frame = frame_ref() if callable(frame_ref) else None
    if frame is None or not getattr(frame, "early_stop", False):
        return False
    try:
        return frame.recomp_counter[gid] == len(frame.weak_holders)
    except (AttributeError, KeyError, TypeError):
        return False


def _closure_names(fn: Any, depth: int = 3) -> dict[str, Any]:
    """The free variables of `fn` and of the functions it closes over (a decorator's
    wrapper holds the function it wraps), by name; the innermost wins."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells:
        return {}
    out: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, cells):
        try:
            value = cell.cell_contents
        except ValueError:   # an empty cell
            continue
        out[name] = value
        if depth and callable(value) and hasattr(value, "__code__"):
            out.update(_closure_names(value, depth - 1))
    return out


def _stops_as_torch_stops(fn: Callable) -> Callable:
    """`fn` whose re-run's early stop leaves as torch's own, whatever wrapped it on the
    way (Note [An early stop a library wrapped])."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _StopRecomputationError:
            raise
        except Exception as e:
            # Note [An early stop TorchScript dropped]
            if _stop_in_chain(e) is None and not _stop_reached():
                raise
        # a new stop, raised once the wrapper is gone: raised inside the `except`, the
        # library's stop would take the wrapper as its context, which holds it as its
        # cause, a cycle that kept the re-run's frames and their tensors alive until the
        # collector ran (251,872 B over the prediction on train_frame_avg.py --net xtf
        # --mask under `checkpoint:net.attn_layers.layers.2.1`)
        raise _StopRecomputationError
    return run


def _checkpointed(orig: Callable, module: nn.Module, context_fn: Callable | None,
                  where: tuple[str, str] = ("checkpoint", ""),
                  guard: _NestingGuard | None = None) -> Callable:
    module_ref = weakref.ref(module)   # Note [A policy holds its model weakly]
    # Note [State a re-run writes again] (replay/stateful.py): the region's modules, read
    # once (their parameters and buffers are read at each call: they may be replaced)
    parts = [(n, weakref.ref(m)) for n, m in module.named_modules()]

    made: list[_Recompute] = []   # the call's, told when its forward is done
    first = [True]   # Note [A set-up on the first call] (replay/first_call.py)

    def contexts() -> tuple[Any, Any]:
        fwd, recompute = context_fn() if context_fn is not None else (
            contextlib.nullcontext(), contextlib.nullcontext())
        # the BatchNorm guard outermost: its own copies must not run under selective
        # checkpointing's recompute mode, which would look for them among the saved ops
        # (the module lives while checkpoint's graph holds its bound forward)
        state = _state_versions(parts)
        setup = _parameter_digests(parts) if first else None   # the first call's only
        first.clear()
        rec = _Recompute(module_ref(), recompute, where if context_fn is not None else None,
                         (where, state), parts, _state_digests(state), setup)
        made[:] = [rec]
        return fwd, rec

    def forward_done(args: tuple, kwargs: dict) -> None:   # Note [What the forward call left]
        if made:   # Note [A list changed after the call] (trace/outside_state.py)
            made.pop().forward_done(handed_containers(args, kwargs))

    def before(args: tuple, kwargs: dict) -> tuple | None:
        """What the checks after the forward compare with; None: the call runs plain."""
        if _in_backward() or in_func_transform():   # Note [A region called inside
            return None                                 # backward]: no policy there
        if guard is not None:
            guard.check_outer()
        if not torch.is_grad_enabled():
            return None
        return _state_storages(args, kwargs), argument_versions(args, kwargs), _routes(parts)

    def after(args: tuple, kwargs: dict, state: tuple) -> None:
        storages, versions, routes = state
        if written_arguments(versions):   # the re-run would start from a changed input
            raise PolicyError(stateful_message(where[0], where[1], INPUT_WRITTEN))
        # Note [Hooks paired across forward and backward] (trace/outside_state.py)
        if (mod := module_ref()) is not None:
            hooked = next((n for n, m in mod.named_modules() if paired_hooks(m)), None)
            # Note [A backward hook made by hand] (trace/outside_state.py)
            hooked = hooked if hooked is not None else next(
                (n for n, m, calls in routes if routed_calls(m) > calls), None)
            if hooked is not None:
                inner = where[1] + ("." + hooked if hooked and where[1] else hooked)
                raise PolicyError(paired_hooks_message(where[0], where[1], inner or where[1]))
        _refuse_written_state(args, kwargs, storages, *where)

    @functools.wraps(orig)
    def forward(*args: Any, **kwargs: Any) -> Any:
        state = before(args, kwargs)
        if state is None:
            return orig(*args, **kwargs)
        # torch's own checkpoint, which Dynamo knows (a region inside compiled code)
        # counted as memledger's (Note [torch.func transforms under memledger's hooks])
        fn = own_checkpointed(_strong(orig))
        fn = _stops_as_torch_stops(guard.run(fn) if guard is not None else fn)
        out = checkpoint(fn, *args,
                         use_reentrant=False, preserve_rng_state=True, context_fn=contexts,
                         **kwargs)
        forward_done(args, kwargs)
        after(args, kwargs, state)
        return out

    def halves(args: tuple, kwargs: dict):
        """`forward` around a call torch runs itself: Note [The call that found the model].
        torch's `checkpoint(fn, use_reentrant=False)` is this generator around `fn`; the
        re-run calls `fn`, the first run is the caller's."""
        state = before(args, kwargs)
        if state is None:
            return (yield)
        fn = own_checkpointed(_strong(orig))
        ck = _checkpoint_without_reentrant_generator(   # Note [An early stop a library wrapped]
            _stops_as_torch_stops(guard.run(fn) if guard is not None else fn), True, contexts,
            _DEFAULT_DETERMINISM_MODE, False, True, *args, **kwargs)
        next(ck)
        own = guard is not None and (pack := checkpoint_pack_hook()) is not None
        if own:   # as guard.run around the first run
            guard.enter(pack)
        try:
            out = yield
        except BaseException as e:
            if own:
                guard.leave()
            try:
                ck.throw(e)
            except StopIteration:
                pass
            raise e
        if own:
            try:
                guard.leave(done=True)
            except PolicyError:
                ck.close()   # its hooks off before the refusal leaves
                raise
        for _ in ck:
            pass
        forward_done(args, kwargs)
        after(args, kwargs, state)
        return out

    forward.memledger_halves = halves
    return forward


def _routes(parts: list) -> list[tuple[str, nn.Module, int]]:
    """(name, module, calls routed so far) of the region's modules that hold forward hooks
    of their own, each watched from here on (Note [A backward hook made by hand] in
    trace/outside_state.py)."""
    out = []
    for name, ref in parts:
        m = ref()
        if m is not None and m._forward_hooks:
            watch_routed_outputs(m)
            out.append((name, m, routed_calls(m)))
    return out


# Note [State written outside a region] (memledger/trace/outside_state.py): a call that
# stores new tensors into an object it was handed (a KV cache) would store them again when
# recomputed. Checked after the region's forward, so the refusal comes before any recompute.
def _state_storages(args: tuple, kwargs: dict) -> set[int]:
    return {k for obj in argument_objects(args, kwargs) for t in reachable_tensors(obj)
            if (k := storage_key(t)) is not None}


def _refuse_written_state(args: tuple, kwargs: dict, before: set[int], policy: str,
                          path: str) -> None:
    written = written_state(args, kwargs, lambda k: k not in before)
    if written:
        raise PolicyError(stateful_message(policy, path, written[0][0]))


def _state_versions(parts: list[tuple[str, Any]]) -> list[tuple[str, Any, int]]:
    """(name, weak reference, version) of the region's buffers as its forward begins, less
    a training BatchNorm's (Note [BatchNorm under recompute]): Note [State a re-run writes
    again] in replay/stateful.py. Weak: a buffer the forward replaces (I-BERT's
    `self.x_min = ...`) must go when it would (a strong one held 24 B to the backward)."""
    out = []
    for path, ref in parts:
        m = ref()
        if m is None or (isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training
                         and m.track_running_stats):
            continue
        for n, t in m._buffers.items():
            # a lazy module's first forward makes its buffers (once: a re-run does not)
            if t is not None and not isinstance(t, UninitializedTensorMixin):
                out.append((f"{path}.{n}" if path else n, weakref.ref(t), t._version))
        for n, t in m.__dict__.items():   # tensors kept as plain attributes: a metric's
            if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter):   # sums
                out.append((f"{path}.{n}" if path else n, weakref.ref(t), t._version))
    return out


# Note [A write through .data, seen by its digest]
# A write through `.data` (`self.means.data.copy_(means)`) bumps no version counter, so the
# versions said nothing of it (Note [State a re-run writes again] in replay/stateful.py),
# while the trace sees it as any write. routing-transformer's `Kmeans` initialises its
# means on its first call that way (`if self.initted: return`, then `means.data.copy_`,
# `initted.data.copy_`), and its re-run, finding `initted` set, skips those ops: torch's
# selective checkpoint, which hands back what the forward kept by op and call index, gave
# the re-run's first `bmm` the output of the init's first, and the script failed ("shape
# '[2, 2, 4, 8, 1, 8]' is invalid for input of size 512", exit 3) where predict refused
# `selective:@SelfAttention` ("whose forward writes ...kmeans.means in place";
# tests/clients/train_routing.py). Each state's digest (Note [A replaced state, judged by
# its digest]) is now taken beside its version as the forward begins and compared as the
# re-run starts where the version did not move: a write through `.data` names the write as
# a version's move does (Note [The write the forward made, named]), and a selective
# re-run that then fails, however torch's cache fails it (a shape, not its own words),
# says predict's line (Note [Other ops after a write of state]). Pinned in plain torch:
# tests/clients/train_data_write.py.
def _state_digests(state: list) -> list:
    """Per `_state_versions` entry, its tensor's digest now (None: unreadable or gone)."""
    return [_digest(t, contiguous_only=True) if (t := ref()) is not None else None
            for _, ref, _ in state]


def _parameter_digests(parts: list) -> list:
    """(name in the region, weak reference, digest) of the region's parameters now: Note
    [A set-up on the first call] (replay/first_call.py). Taken as the region's first call
    begins, once: a pass over its parameters' bytes."""
    out = []
    for path, ref in parts:
        m = ref()
        for n, p in (m._parameters.items() if m is not None else ()):
            if p is not None:
                out.append((f"{path}.{n}" if path else n, weakref.ref(p), _param_digest(p)))
    return out


def _set_up_since(setup: list | None) -> str | None:
    """The first parameter, by name, whose digest moved since `setup` was taken (None:
    none, or no digests): Note [A set-up on the first call] (replay/first_call.py)."""
    return min((n for n, ref, d in setup or () if d is not None and (p := ref()) is not None
                and _param_digest(p) != d), default=None)


def _param_digest(p: torch.Tensor) -> tuple | None:
    """`_digest` of a parameter's bytes; None for what is no plain tensor or parameter: a
    lazy module's UninitializedParameter, or a wrapper a library swapped in for the call
    (opacus's ExpandedWeight), whose `detach` raises."""
    if type(p) not in (torch.Tensor, nn.Parameter):
        return None
    return _digest(p.detach(), contiguous_only=True)


def _data_written(state: list, digests: list) -> list[str]:
    """The names in `state` whose version did not move but whose digest did since
    `digests` were taken (Note [A write through .data, seen by its digest])."""
    out = []
    for (n, ref, v), d in zip(state, digests):
        t = ref()
        if d is not None and t is not None and t._version == v and \
                _digest(t, contiguous_only=True) != d:
            out.append(n)
    return out


def _attributes_now(parts: list) -> list:
    """(name, module, attribute, tensor) of the tensors the region's modules keep as
    buffers or plain attributes now, buffers first (held for the re-run only; Note [A
    buffer replaced from the one before] in trace/collector.py)."""
    out = []
    for path, ref in parts:
        m = ref()
        if m is None:
            continue
        for k, t in [*m._buffers.items(), *m.__dict__.items()]:
            if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter):
                out.append((f"{path}.{k}" if path else k, m, k, t))
    return out


def _attribute(m: nn.Module, k: str) -> Any:
    return m._buffers.get(k) if k in m._buffers else m.__dict__.get(k)


# Note [What the forward call left]
# A re-run that replaces a module's tensor is judged against what the forward call it
# re-runs left there, not against what it finds as it starts: a module called once per
# time step and handed its state as an argument (tutorial 5's `self.lif1(cur1, mem1)`,
# snntorch: `self.mem = mem`, then the new membrane) leaves the last time step's membrane
# on the module, and the re-run of time step t, a faithful one, makes step t's again:
# other values than it found, the same as its forward call left. Compared with what it
# found, `checkpoint:lif1` was refused ("writes lif1.reset in place") while predict priced
# it (train_snntorch.py --mode class). What each forward call left is held weakly (a
# strong reference would keep a replaced membrane to the backward); when it is gone (a
# later call replaced it, nothing else held it) the re-run cannot be judged by it and is
# not: the re-run of the last call, backward's first, finds what its forward left still
# there, which judges a state carried from call to call (snntorch's `init_hidden=True`
# membrane, a metric's sums) as before.
def _refuse_replaced_state(where: tuple[str, str], attrs: list,
                           left: dict[str, Any] | None = None) -> None:
    """As a re-run ends: a tensor buffer or attribute the re-run replaced by other values
    than its forward call left (Metric.forward's running sums; a pure recompute, pruning's
    `weight`, makes the same values): Note [State a re-run writes again] in
    replay/stateful.py, Note [What the forward call left]. `attrs`: `_attributes_held`'s
    entries as the re-run started; `left`: name -> weak reference to the tensor the forward
    call left; None: judged against what the re-run found (Note [A replaced state, judged
    by its digest])."""
    for name, m, k, ref, was_left, digest, strong in attrs:
        now = _attribute(m, k)
        before = strong if strong is not None else ref()
        if not isinstance(now, torch.Tensor) or now is before:
            continue
        if left is not None and name in left and (then := left[name]()) is not None:
            if now is then:
                continue
            with torch.no_grad():
                same = now.shape == then.shape and now.dtype == then.dtype and \
                    bool(torch.equal(now, then))
        elif left is not None and name in left and not was_left:
            continue    # gone: nothing to judge the re-run by
        elif before is not None:   # still held (elsewhere, or here: no digest)
            with torch.no_grad():
                same = now.shape == before.shape and now.dtype == before.dtype and \
                    bool(torch.equal(now, before))
        else:   # what the re-run found (or the forward left), gone with the re-run's write
            same = digest is not None and _digest(now) == digest
        if not same:
            policy, path = where
            raise PolicyError(state_rewritten_message(
                policy, path, f"{path}.{name}" if path and name else (name or path),
                replaced=True))


# Note [A replaced state, judged by its digest]
# measure held every tensor the region's modules kept as the re-run started, strongly, to
# its end, to compare what the re-run put in their place (Note [What the forward call
# left]). A state the re-run replaces then lived to the re-run's end in the measured run
# only: linear-attention-transformer's reversible blocks record `torch.get_rng_state()`
# on their `Deterministic` (`cpu_state`, 5,056 B) on every forward, the re-run records it
# again, and the untraced run frees the old one there; `selective:net.net.transformer`
# (train_linattn.py --mode rev --accumulate 2, tiny) measured 110,680 B against 105,624 B
# predicted, the one state apart. Now the re-run's start keeps of each a weak reference and,
# where the comparison may need its values once it is gone (it is what the forward left, or
# nothing says what that was), a digest: shape, dtype and a hash of its bytes read in place
# (a CPU tensor through numpy, no allocation; a device tensor through a host copy, which
# the device's allocator does not count). A replaced state still alive (held elsewhere)
# is compared as before; one gone is compared by digest, bitwise (a faithful re-run makes
# the same bits): the metric sums and snntorch membranes that Note refuses are refused as
# before. A tensor whose bytes cannot be read so (a subclass, sparse, a conjugate view) is
# held as before. Pinned in plain torch: tests/clients/train_rngstate.py.
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _digest(t: torch.Tensor, contiguous_only: bool = False) -> tuple | None:
    """(shape, dtype, hash of the values' bytes) of `t`, allocating nothing the measured
    allocator counts; None where its bytes cannot be read so (Note [A replaced state,
    judged by its digest]), or, with `contiguous_only`, where they are not one span (Note
    [Bytes read without numpy])."""
    if type(t) is not torch.Tensor or t.layout != torch.strided or t.is_quantized \
            or t.is_conj() or t.is_neg() or t.device.type == "meta":
        return None
    try:
        with torch.no_grad():
            d = t.detach()
            as_int = _INT_OF_SIZE.get(d.element_size())
            if as_int is None or d.dtype.is_complex:
                return None
            if d.device.type != "cpu":
                d = d.cpu()   # host memory: not the device allocator's
            if d.is_contiguous():   # Note [Bytes read without numpy]
                n = d.numel() * d.element_size()
                span = (ctypes.c_char * n).from_address(d.data_ptr()) if n else b""
                return (tuple(t.shape), t.dtype,
                        hashlib.blake2b(memoryview(span), digest_size=16).digest())
            if contiguous_only:
                return None
            a = d.view(as_int).numpy()
        a = a if a.flags.c_contiguous else np.ascontiguousarray(a)
        return (tuple(t.shape), t.dtype, hashlib.blake2b(a.data, digest_size=16).digest())
    except (RuntimeError, TypeError, ValueError):
        return None


# Note [Bytes read without numpy]
# `Tensor.numpy()` marks the tensor's storage as one that cannot be resized, for good (numpy
# holds its pointer). Digests taken as each checkpointed forward begins (Note [A write
# through .data, seen by its digest]) met torch's eager QAT observers, whose `min_val` and
# `max_val` start empty and are resized by their first observation: "Trying to resize
# storage that is not resizable", the script failed under `checkpoint:blocks.*`
# (tests/integration/test_other_loops.py, train_mech.py --case qat). A contiguous tensor's
# bytes are now read in place through ctypes, which marks nothing; there, a tensor that is
# not one span is not digested at all.


def _attributes_held(parts: list, left: dict[str, Any] | None) -> list:
    """`_attributes_now` as a re-run starts, each tensor held weakly (Note [A replaced
    state, judged by its digest]): (name, module, attribute, weak reference, whether it is
    what the forward call left, digest or None, the tensor where it has no digest)."""
    out = []
    for name, m, k, t in _attributes_now(parts):
        was_left = left is not None and name in left and left[name]() is t
        needed = left is None or name not in left or was_left
        digest = _digest(t) if needed else None
        out.append((name, m, k, weakref.ref(t), was_left, digest,
                    t if needed and digest is None else None))
    return out


# Note [A re-run torch refused after a write of state]
# sb3-contrib's CrossQ runs its critic's BatchRenorm layers in training mode for the critic's
# forward only (`set_bn_training_mode(True)`, the forward, `set_bn_training_mode(False)`):
# the forward writes their running statistics in place (`self.ra_mean += ...`, a module of
# the library's own, not a torch BatchNorm), and a checkpoint's re-run in backward takes the
# evaluation branch, writes nothing and saves other tensors. predict refused
# `checkpoint:critic.qf0` from the forward's write ("whose forward writes
# critic.qf0.0.ra_mean in place", Note [State a re-run writes again] in
# replay/stateful.py); measure, which refuses a write the re-run makes (Note [A write after
# the last save]), found none and met torch's "A different number of tensors was saved
# during the original forward and recomputation", said as "cannot re-run critic.qf0:
# torch's checkpoint found the re-run unlike the first run": one policy, two reasons. Each
# re-run now notes, as it starts, the first state of its region written since its forward
# began (`_LAST_RERUN`; the re-run torch then checks is the last one started); where torch's
# checkpoint refuses that re-run, measure says predict's line for that write (worker.py).
# A re-run with no such write keeps torch's reason.
# And (Note [A cache emptied before every call], replay/emptied_cache.py) the region's
# modules that hold a buffer now which they held none under as its forward began (a cache
# the forward filled): where torch refuses that re-run, measure says predict's line for it.
# [((policy, path), the first state written since its forward or None,
#   (the last module, by path, that filled an empty buffer since then or None, whether a
#    buffer it filled has an autograd graph))]
_LAST_RERUN: list = []


def rerun_refusal(fills: bool = True, selective: bool = False) -> str | None:
    """predict's line for the state the last re-run's forward wrote, if it wrote any (Note
    [A re-run torch refused after a write of state]), or (`fills`: torch's checkpoint
    refused it, or its selective checkpoint met other ops) for the empty buffer it filled:
    under `selective`, one filled without a graph is said as selective's (Note [A fill a
    selective re-run finds full], replay/emptied_cache.py)."""
    if not _LAST_RERUN:
        return None
    (policy, path), written, (filled, graph), set_up = _LAST_RERUN[0]
    if written is not None:
        return state_rewritten_message(policy, path, f"{path}.{written}" if path else written)
    if fills and filled is not None:
        return emptied_cache_message(policy, path, filled, selective and not graph)
    if fills and set_up is not None:   # Note [A set-up on the first call] (first_call.py)
        # imported here: replay.prepared pulls pandas in, whose import starts a thread, and
        # the zygote imports this module before it forks (Note [Warm starts])
        from memledger.replay.first_call import first_call_setup_message

        return first_call_setup_message(policy, path, f"{path}.{set_up}" if path else set_up)
    return None


def checkpoint_refusal(policy_text: str, error: BaseException, regions: list[str]) -> str:
    """The one line for torch's CheckpointError under a policy (measure's, and compare's
    gates'): predict's line where the last re-run started from state its forward wrote or
    a cache it filled (`rerun_refusal`), else torch's reason, naming the region it re-ran
    last (the one it refused; `regions`, every region applied, where none is known)."""
    if (said := rerun_refusal()) is not None:
        return f"memledger: {said}"
    first = str(error).strip().splitlines()[0] if str(error) else ""
    where = _LAST_RERUN[0][0][1] if _LAST_RERUN else ", ".join(regions)
    return (f"memledger: {policy_text} cannot re-run {where}: torch's checkpoint found the "
            f"re-run unlike the first run ({first}); the region's forward depends on state "
            "outside its arguments that changes before the re-run in backward (an attribute "
            "the script sets between forward and backward, say); offload it instead")


def _full_buffers(parts: list) -> frozenset[tuple[str, str]]:
    """(module path, buffer name) of the region's modules' buffers that hold a tensor of
    some elements (one of none, sinabs' empty membrane, is empty: Note [A state filled on
    the first call], replay/emptied_cache.py)."""
    return frozenset((path, k) for path, ref in parts if (m := ref()) is not None
                     for k, v in m._buffers.items() if v is not None and v.numel())


def _filled_since(where: tuple[str, str], parts: list,
                  before: frozenset[tuple[str, str]]) -> tuple[str | None, bool]:
    """The last module of the region, by path, holding a buffer it held none under in
    `before` (Note [A cache emptied before every call], replay/emptied_cache.py), or None;
    and whether one of those buffers has an autograd graph."""
    region = where[1]
    new = _full_buffers(parts) - before
    if not new:
        return None, False
    mods = dict(parts)
    graph = any(getattr((m := mods[p]()) is not None and m._buffers.get(k), "grad_fn", None)
                is not None for p, k in new)
    return max(f"{region}.{p}" if region and p else p or region for p, _ in new), graph


def _versions_now(state: list) -> list:
    """`state` (name, weak reference, version) with each tensor's version now."""
    return [(n, ref, t._version if (t := ref()) is not None else v) for n, ref, v in state]


# Note [A write after the last save]
# torch's checkpoint stops a re-run once it has made again the last tensor backward needs
# (early stop, on by default): a region's in-place write of its state after its last save
# is never run again, and the replay leaves it alone (`ev < stop` in engine.py
# `_refuse_rewritten_state`). measure compared the versions as the re-run started with
# those as the forward began, so it refused every write the forward made: a block that
# updates a metric of its output last (train_ema_metrics.py --mode metrics
# --monitor-output) was refused by measure and predicted (192,192 B), and torch's own
# checkpoint counts that batch once (MeanMetric's `weight` 1.0 after one step). The
# versions are now taken as the re-run starts and compared as it ends (stopped early or
# not): a write the re-run makes is refused, in backward, as before.
#
# Note [The write the forward made, named]
# The line names what the region's forward wrote ("whose forward writes X in place"), as
# predict does from the trace's writes. measure named the first of the region's buffers
# the re-run wrote, and a re-run that starts from what the forward left can take another
# path and write others: performer-pytorch's `Performer.forward` bumps a counter buffer
# (`calls_since_last_redraw += 1`) and, once it reaches `feature_redraw_interval`, draws
# the attention's projection matrices again (`projection_matrix.copy_(...)`) and zeroes
# it. With an interval of 1, step 0's forward bumps the counter, and the re-run of
# `checkpoint:net.performer`, finding it at 1, redraws the matrices: predict said
# "writes net.performer.proj_updater.calls_since_last_redraw in place", measure "writes
# net.performer.net.layers.0.0.fn.fast_attention.projection_matrix in place", which that
# forward never wrote (tests/clients/train_performer.py --redraw 1). Now, where the re-run
# wrote any, a buffer the forward wrote (before the re-run started) is named, the first by
# name (Note [The state named first, by name], replay/stateful.py); one the re-run alone
# wrote only where there is none.
# Note [A re-run's write through .data]
# A write through `.data` bumps no version counter, so a re-run that wrote its region's state
# that way ran on, refused only by predict (from the trace's writes): vector-quantize-
# pytorch's EMA codebook (`old.data.lerp_(new, ...)` in `ema_inplace`) inside discrete-key-
# value-bottleneck-pytorch's bottleneck, where `checkpoint:bottleneck` re-ran the quantizer
# from the codebook the forward had moved, stepped the EMA a second time, and measured
# 113,925 B where predict said "whose forward writes bottleneck.vq._codebook.cluster_size
# in place" (tests/clients/train_loralib.py --model dkvb; until this session measure
# refused it for a mode the bottleneck sets itself, Note [A mode the region sets itself]).
# The digests the forward's check takes (Note [A write through .data, seen by its digest])
# are taken again as the re-run starts and compared as it ends, beside the versions: the
# same cost again per re-run (one pass over the region's buffers and tensor attributes).
def _refuse_rewritten_state(where: tuple[str, str], state: list,
                            forward_wrote: frozenset[str] = frozenset(),
                            digests: list | None = None) -> None:
    """As a re-run ends: a buffer or tensor attribute of the region written since the
    versions in `state` (Note [State a re-run writes again] in replay/stateful.py), or
    through `.data` since `digests` (Note [A re-run's write through .data]), one in
    named by the first in `forward_wrote` by name (Note [The write the forward made,
    named], Note [The state named first, by name] in replay/stateful.py)."""
    dotted = set(_data_written(state, digests)) if digests is not None else set()
    rewritten = [n for n, ref, v in state if (t := ref()) is not None and
                 (t._version != v or n in dotted)]
    # Note [The state named first, by name] (replay/stateful.py): of what the forward
    # wrote, as predict names it from the trace's writes of that call
    written = None if not rewritten else min(forward_wrote, default=min(rewritten))
    if written is not None:
        policy, path = where
        raise PolicyError(state_rewritten_message(
            policy, path, f"{path}.{written}" if path and written else (written or path)))


# Note [BatchNorm under recompute]
# A BatchNorm in training mode updates its running statistics on every forward, so plain
# checkpointing updates them twice per step (forward, then recompute): running_mean drifts
# and num_batches_tracked counts 2 per step. The recompute must still run BatchNorm exactly
# as the forward did (same saved tensors, or checkpoint refuses it), so memledger lets it
# update the statistics and then puts the values from before the recompute back. Cost: one
# copy of the buffers (2 × C floats + 8 bytes each) of every BatchNorm the region's first
# run called, per recompute; the replay prices the BatchNorms the ledger saw called
# (`stats` on their scope records). A BatchNorm the region holds but its forward never
# calls is left alone: TabNet's `TabNetNoEmbeddings` keeps an `initial_bn` (12 features)
# that only its encoder's own `initial_bn` does the work of; copying it too measured
# `checkpoint:tabnet` 104 B (48 + 48 + 8) over the replay (tests/clients/train_tabnet.py).
# "Called" is read off `num_batches_tracked`'s version counter, which `_BatchNorm.forward`
# bumps (`add_(1)`) on every training call, while the running means, written inside
# `native_batch_norm`, keep theirs: no hook and no device sync. A BatchNorm without that
# counter (a subclass that drops it) is copied as before.
def _batchnorm_counters(module: nn.Module) -> dict[int, int]:
    """{id(BatchNorm): num_batches_tracked's version} for the BatchNorms under `module`,
    taken as its first run starts."""
    return {id(m): m.num_batches_tracked._version for m in module.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)
            and getattr(m, "num_batches_tracked", None) is not None}


@contextlib.contextmanager
def _batchnorm_stats_frozen(module: nn.Module, counters: dict[int, int] | None = None):
    def called(m: nn.Module) -> bool:
        n = getattr(m, "num_batches_tracked", None)
        return counters is None or n is None or id(m) not in counters \
            or n._version != counters[id(m)]

    bns = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
           and m.training and m.track_running_stats and called(m)]
    kept = [(b, b.detach().clone()) for m in bns for b in m.buffers(recurse=False)
            if b is not None]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in kept:
                buf.copy_(value)


# Note [Parameters handed in]
# `torch.func.functional_call(model, tensors, ...)` runs a forward with other tensors in
# the modules' `_parameters` for the length of the call: a MAML step's fast weights
# (`p - lr * grad`), Opacus's `ExpandedWeight` wrappers (`grad_sample_mode="ew"`). A
# checkpoint re-runs the region in backward, after that call has returned, so the re-run
# read the module's own parameters: the recomputed activations came from other weights.
# torch's checkpoint refused the Opacus re-run ("Recomputed values ... have different
# metadata") and, same shapes, silently gave MAML's second-order step other gradients
# (`checkpoint:2` on tests/clients/train_maml.py, 0.054 max abs on `0.weight`). The
# re-run now puts back what the first run read, as the call did, and then restores.
def _parameters_now(module: nn.Module) -> list[tuple[nn.Module, str, torch.Tensor]]:
    return [(m, name, t) for m in module.modules() for name, t in m._parameters.items()
            if t is not None]


# Note [A parameter's requires_grad, as the first run had it]
# compressive-transformer-pytorch's `SelfAttention.forward` calls `self.to_kv.weight.detach_()`
# after its first use of the weight (the auxiliary reconstruction loss must not train it):
# in the first training forward that compresses memory the weight goes from requiring a
# gradient to not, for good. A checkpoint's re-run of that forward in backward then read a
# weight without requires_grad: its linear saved other tensors than the first run's, and
# torch's checkpoint refused ("A different number of tensors was saved during the original
# forward and recomputation"), said as "the region's forward depends on state outside its
# arguments ...": measure refused `checkpoint:net.attn_layers.*`, which predict priced (the
# trace saw the first run's saves, as the script ran them). Like the tensors themselves
# (Note [Parameters handed in]), each parameter's requires_grad is put back for the
# re-run as the first run began, and restored after it: the re-run saves what the first run
# saved, and the gradients are the script's own (the first run's graph decides which
# gradients flow; AccumulateGrad drops one for a leaf that no longer requires it, in both).
def _requires_grad_now(params: list[tuple[nn.Module, str, torch.Tensor]]) -> list:
    """(parameter, its requires_grad) of the region's parameters: Note [A parameter's
    requires_grad, as the first run had it]."""
    # plain parameters only: a tensor in their place (Opacus's `ExpandedWeight`, Note
    # [Parameters handed in]) answers no attribute read ("Expanded Weights encountered but
    # cannot handle function __get__"), and a subclass's flag is its own business
    return [(t, t.requires_grad) for _, _, t in params if type(t) is nn.Parameter]


@contextlib.contextmanager
def _requires_grad_as(flags: list[tuple[torch.Tensor, bool]]):
    changed = [(t, t.requires_grad) for t, rg in flags if t.requires_grad != rg]
    for t, now in changed:
        t.requires_grad_(not now)
    try:
        yield
    finally:
        for t, now in changed:
            t.requires_grad_(now)


@contextlib.contextmanager
def _parameters_as(params: list[tuple[nn.Module, str, torch.Tensor]]):
    swapped = []
    for m, name, t in params:
        now = m._parameters.get(name)
        if now is not t:
            m._parameters[name] = t   # as functional_call does: no type check
            swapped.append((m, name, now))
    try:
        yield
    finally:
        for m, name, now in reversed(swapped):
            m._parameters[name] = now


def _refuse_other_mode(where: tuple[str, str], modes: list,
                       left: dict[str, bool] | None = None) -> None:
    """As a re-run starts: refuse it if a module of the region is in another mode than its
    first run began in and a module of the region may read a flag (Note [Which modules
    read a training flag], trace/mode_readers.py), naming the first moved module by path
    (Note [A re-run in another mode], trace/modes.py; predict's `_refuse_other_mode` in
    replay/engine.py). `left`: each module's flag as the first run ended; one the region's
    own forward switched, and nothing since, is not moved (Note [A mode the region sets
    itself])."""
    policy, path = where
    moved = [(f"{path}.{n}" if path and n else n or path, was) for n, ref, was in modes
             if (m := ref()) is not None and m.training != was
             and (left is None or left.get(n) != m.training)]
    if moved and any(reads_a_flag(m) for _, ref, _ in modes if (m := ref()) is not None):
        module, was = min(moved)
        raise PolicyError(mode_message(policy, path, module, was))


# Note [A mode the region sets itself]
# Some modules put a part of themselves in eval mode inside their own forward: discrete-
# key-value-bottleneck-pytorch's `DiscreteKeyValueBottleneck` calls `self.encoder.eval()`
# and runs its pretrained encoder under no_grad on every call (transfusion-pytorch its
# modality encoder). Its first run begins with the encoder in train mode (`model.train()`)
# and ends with it in eval; the re-run begins in eval and calls `.eval()` again, so every
# module of it computes in the mode the first run computed in. measure compared the flags
# as the re-run starts with those as the first run began and refused: "checkpoint:
# bottleneck would re-run bottleneck in eval mode (its bottleneck.encoder first), while its
# forward ran in train mode: the script switches the model's mode between a forward and its
# backward", which the script never does, while predict (which reads each module's flag at
# its calls under grad, none here) priced it: 111,633 B against a refusal
# (tests/clients/train_loralib.py --model dkvb --keys frozen). The flags are also read as
# the first run ends (`forward_done`); a module whose flag now is the one the first run
# left, not the one it began with, was switched by the region itself and is not counted.
# A module that reads its flag before its own forward switches it would compute otherwise
# in the re-run; none is known.
class _Recompute:
    """The BatchNorm guard and checkpoint's own recompute context entered as one (context_fn
    wants one object). Entered once per recompute: a step with two backward passes through
    the region (`retain_graph=True`, a gradient penalty) re-runs it twice with this same
    object, so the guard, a one-shot generator, is made afresh each time. Selective
    checkpointing allows one recompute (torch raises "Trying to backward an extra time"):
    `selective` names (policy, path) and refuses the second, as predict does."""

    def __init__(self, module: nn.Module, recompute: Any,
                 selective: tuple[str, str] | None = None,
                 state: tuple[tuple[str, str], list] | None = None,
                 parts: list | None = None, digests: list | None = None,
                 setup: list | None = None) -> None:
        self._module, self._recompute, self._selective = module, recompute, selective
        # the region's parameters' digests as its first call began (that call's only):
        # Note [A set-up on the first call] (replay/first_call.py)
        self._setup = setup
        self._state = state   # (policy, path), its buffers' versions as the forward began
        self._digests = digests   # and their digests: Note [A write through .data, ...]
        self._state_parts = parts or []   # the region's modules (path, weak reference)
        self._attrs: list = []      # their tensor attributes as the re-run starts
        self._forward_wrote: frozenset[str] = frozenset()   # what its forward wrote of them
        self._left: dict[str, Any] | None = None   # Note [What the forward call left]
        self._handed: list = []   # Note [A list changed after the call]
        self._stack = contextlib.ExitStack()
        self._entered = 0
        # made as the first run starts (checkpoint calls context_fn then): the tensors
        # the region's parameters are at that moment, Note [Parameters handed in]
        self._params = _parameters_now(module)
        # and whether each wanted a gradient then: Note [A parameter's requires_grad, as
        # the first run had it]
        self._grad_flags = _requires_grad_now(self._params)
        self._counters = _batchnorm_counters(module)   # Note [BatchNorm under recompute]
        # each module's training flag as the first run starts: Note [A re-run in another
        # mode] (trace/modes.py)
        self._modes = [(n, ref, m.training) for n, ref in self._state_parts
                       if (m := ref()) is not None]
        self._modes_left: dict[str, bool] | None = None   # and as it ends (forward_done)
        # the buffers that hold a tensor as the first run starts: Note [A cache emptied
        # before every call] (replay/emptied_cache.py)
        self._full = _full_buffers(self._state_parts)
        self._rerun_digests: list | None = None   # as the re-run starts
        # Note [A cast the re-run makes again, said as predict says it]
        self._autocast = any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda"))

    def __enter__(self) -> None:
        self._entered += 1
        if self._selective is not None and self._entered > 1:
            raise PolicyError(selective_twice_message(*self._selective))
        if self._state is not None and self._entered == 1:   # versions as the re-run starts
            where, state = self._state
            if changed_containers(self._handed):   # Note [A list changed after the call]
                raise PolicyError(stateful_message(*where, ARGUMENT_CHANGED))
            # Note [A re-run in another mode]; Note [A mode the region sets itself]
            _refuse_other_mode(where, self._modes, self._modes_left)
            self._state = (where, _versions_now(state))
            # Note [A re-run's write through .data]
            self._rerun_digests = _state_digests(self._state[1])
            # Note [A re-run torch refused after a write of state]
            wrote = [n for (n, _, v0), (_, _, v1) in zip(state, self._state[1]) if v0 != v1]
            if self._digests is not None:   # Note [A write through .data, seen by its digest]
                dotted = set(_data_written(state, self._digests))
                wrote = [n for n, _, _ in state if n in dotted or n in wrote]
                self._digests = None
            # Note [The write the forward made, named]; the state named is the first by
            # name (Note [The state named first, by name], replay/stateful.py)
            self._forward_wrote = frozenset(wrote)
            first_written = min(wrote, default=None)
            _LAST_RERUN[:] = [(where, first_written,
                               _filled_since(where, self._state_parts, self._full),
                               _set_up_since(self._setup))]
            self._setup = None
            self._attrs = _attributes_held(self._state_parts, self._left)
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_parameters_as(self._params))
        self._stack.enter_context(_requires_grad_as(self._grad_flags))
        self._stack.enter_context(_batchnorm_stats_frozen(self._module, self._counters))
        self._stack.enter_context(self._recompute)

    def forward_done(self, handed: list | None = None) -> None:
        """The forward call ended: what it left on the region's modules, held weakly (Note
        [What the forward call left]); the lists and dicts it was handed, as they are now
        (Note [A list changed after the call], trace/outside_state.py)."""
        self._handed = handed or []
        # Note [A mode the region sets itself]
        self._modes_left = {n: m.training for n, ref in self._state_parts
                            if (m := ref()) is not None}
        if self._state is not None:
            self._left = {n: weakref.ref(t) for n, _, _, t in _attributes_now(self._state_parts)}

    def __exit__(self, *exc: Any) -> Any:
        done = self._stack.__exit__(*exc)
        if self._state is not None and self._entered == 1:   # Note [A write after the last
            _refuse_rewritten_state(*self._state, self._forward_wrote,   # save]
                                    self._rerun_digests)   # Note [A re-run's write through .data]
            _refuse_replaced_state(self._state[0], self._attrs, self._left)
            self._attrs = []
        if self._selective is not None and isinstance(exc[1], RuntimeError):
            text = str(exc[1])
            for marker, why in _SAC_FAILURES:   # torch's own refusal, said in one line
                if marker in text:
                    policy, path = self._selective
                    # Note [Other ops after a write of state]
                    said = rerun_refusal(selective=True) if marker == _SAC_OTHER_OPS \
                        else None
                    if said is not None:
                        raise PolicyError(said) from exc[1]
                    if marker == _SAC_OTHER_OPS and self._autocast and \
                            _sac_op(text) == "aten._to_copy.default":   # Note [A cast the
                        raise PolicyError(selective_recast_message(policy, path)) \
                            from exc[1]                    # re-run makes again, said ...]
                    line = why(policy, path, exc[1]) if callable(why) else \
                        why.format(policy=policy, path=path, op=_sac_op(text))
                    raise PolicyError(line) from exc[1]
            # Note [A write through .data, seen by its digest]: another error of a re-run
            # that started from state its forward wrote (torch's cache handed an op
            # another call's output)
            if self._forward_wrote and (said := rerun_refusal()) is not None:
                raise PolicyError(said) from exc[1]
        return done


# Note [Other ops after a write of state]
# A selective re-run that starts from state its forward wrote runs other ops than the
# forward did, and torch's selective checkpoint raises on the first ("... encountered
# during backward but not found in storage") before the re-run writes any state of its
# own (Note [A write after the last save]). performer-pytorch's `Performer.forward` bumps a
# counter buffer and redraws its projections once the counter reaches the interval: the
# re-run of `selective:net.performer` found the counter at 1 and drew random numbers
# (`aten.randn`) its forward had not. predict refused it for the write ("whose forward
# writes net.performer.proj_updater.calls_since_last_redraw in place"), measure for the op
# ("re-ran net.performer and met aten.randn.default that its forward did not run ..."):
# one policy, two reasons (tests/clients/train_performer.py --mode lm). As for torch's
# plain checkpoint (Note [A re-run torch refused after a write of state]), where the
# forward of the re-run that failed wrote state, measure now says predict's line for it.
_SAC_OTHER_OPS = "encountered during backward but not found in storage"

# What torch's selective checkpoint raises in a re-run that the ledger cannot foresee, and
# the one line measure says instead (exit 2, not "the script failed")
_SAC_FAILURES = (
    # the re-run called an op the forward did not: under autocast, a weight's cast that the
    # forward found in autocast's cache (the module called twice); a module that reuses a
    # buffer or plain attribute its first call made (Note [A buffer a call makes and later
    # calls reuse], trace/collector.py; Note [A cache kept as a plain attribute],
    # replay/engine.py: predict refuses those too)
    (_SAC_OTHER_OPS,
     "{policy} re-ran {path} and met {op} that its forward did not run (under autocast: a "
     "weight's cast the forward took from autocast's cache, the module called twice; or a "
     "buffer or attribute the forward made and the re-run found), which torch's selective "
     "checkpoint cannot replay; checkpoint or offload that module instead"),
    # an op kept in forward, then changed in place (a Linear followed by ReLU(inplace=True));
    # predict refuses it too from a ledger's `mutated` records (Note [Written in place in
    # forward], trace/collector.py), in the same line
    ("selective activation checkpoint has been mutated",
     lambda policy, path, err: selective_mutated_message(policy, path, _cached_op(err))),
)


def _cached_op(err: BaseException) -> str:
    """The op kind torch's selective checkpoint was handing back from its cache when it
    found the output changed (Note [The kept op a re-run finds changed], replay/stateful.py):
    `func` in the `__torch_dispatch__` frame of its cached mode, which torch's message does
    not name; "an op" where the traceback has no such frame."""
    tb, op = err.__traceback__, "an op"
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "__torch_dispatch__" and \
                type(frame.f_locals.get("self")).__name__ == "_CachedTorchDispatchMode":
            func = frame.f_locals.get("func")
            op = getattr(getattr(func, "overloadpacket", func), "__name__", op)
        tb = tb.tb_next
    return op


# Note [A cast the re-run makes again, said as predict says it]
# A module called twice under autocast takes its weights' casts from autocast's cache on
# the second call; the re-run casts them again, and torch's selective cache raises on the
# `aten._to_copy.default` its forward never ran. predict says so from the ledger (engine.py
# `_refuse_selective_recast`: "whose forward took a weight's autocast cast from autocast's
# cache ..."), and measure said the generic line ("re-ran blocks.2 and met
# aten._to_copy.default that its forward did not run (under autocast: ...; or a buffer or
# attribute the forward made and the re-run found) ..."; train_loops.py --loop twice
# --autocast, `selective:blocks.*`): one cause, two lines. Where the region's first run
# began under autocast (cpu or cuda) and the op torch met is that cast, measure now says
# predict's line (`selective_recast_message`); another op, or a cast outside autocast,
# keeps the generic line. Cost: two flag reads per region's first run.
def _sac_op(text: str) -> str:
    """The op torch's selective checkpoint names first in its error: "aten.mm.default
    invocation index 0 encountered ..." when the op ran fewer times in the forward, but
    "aten._to_copy.default encountered ..." when it never ran there (torch 2.13), which
    splitting at " invocation" left whole, torch's multi-line advice in the one line."""
    return text.split(maxsplit=1)[0] if text.strip() else "an op"


def _check_save_ops(policy: str, ops: tuple[str, ...]) -> None:
    """Selective checkpointing's policy sees ops as they reach the dispatcher, after
    torch's composite ops are broken up: `save=matmul`, `linear`, `conv2d`, `dropout` or
    `scaled_dot_product_attention` never match, and a name that is no aten op at all never
    does either; either way nothing is kept and the policy is plain checkpoint, silently.
    Refuse those names in one line (the user's explicit save list only)."""
    for name in ops:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            raise PolicyError(save_op_refusal(policy, name, False))
        seen = False
        for overload in packet.overloads():
            if "out" in overload:   # aten.linear.out has a kernel of its own; never called
                continue
            try:
                op = getattr(packet, overload)
                if not op.has_kernel_for_dispatch_key(
                        torch._C.DispatchKey.CompositeImplicitAutograd):
                    seen = True
                    break
            except RuntimeError:   # an overload the build does not register
                continue
        if not seen:   # predict says the same from its lists (Note [Save names predict
            raise PolicyError(save_op_refusal(policy, name, True))   # checks without torch])


def _selective_context(save_ops: tuple[str, ...]) -> Callable:
    keep = frozenset(save_ops)

    def policy_fn(ctx, op, *args, **kwargs) -> CheckpointPolicy:
        name = getattr(getattr(op, "overloadpacket", op), "__name__", str(op))
        return CheckpointPolicy.MUST_SAVE if name in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy_fn)


def _offloaded(orig: Callable, offloader: Offloader,
               guard: _NestingGuard | None = None) -> Callable:
    def plain() -> bool:
        if _in_backward() or in_func_transform():   # Note [A region called inside
            return True                                 # backward]: no policy there
        if guard is not None:
            guard.check_outer(offload_inside_message)
        return not torch.is_grad_enabled()

    @functools.wraps(orig)
    def forward(*args: Any, **kwargs: Any) -> Any:
        if plain():
            return orig(*args, **kwargs)
        offloader.refresh_skip()   # Note [A parameter given a new storage]
        with torch.autograd.graph.saved_tensors_hooks(offloader.pack, offloader.unpack):
            return orig(*args, **kwargs)

    def halves(args: tuple, kwargs: dict):
        """`forward` around a call torch runs itself: Note [The call that found the model]."""
        if plain():
            return (yield)
        offloader.refresh_skip()
        with torch.autograd.graph.saved_tensors_hooks(offloader.pack, offloader.unpack):
            return (yield)

    forward.memledger_halves = halves
    return forward


class PolicyInstaller:
    """Applies a policy to the model (Note [The model], memledger/trace/roots.py): the first
    top-level module with parameters that is called; at the first optimizer step, if that
    module never ran with gradients (a teacher), the policy moves to the module the step
    updates most (its student), as the ledger's names do."""

    def __init__(self, policy: Policy, offload_dir: str | None = None,
                 on_applied: Callable[[PolicyHandle], None] | None = None,
                 steps_by: str = "optimizer") -> None:
        self.policy = policy
        self.steps_by = steps_by   # what ends a step (trace/steps.py)
        self.offload_dir = offload_dir
        self.on_applied = on_applied
        self.applied: PolicyHandle | None = None
        self.error: PolicyError | None = None
        self._depth = 0
        self._roots = RootNames()
        self._first: Any = None   # Note [The call that found the model]: its halves
        # depth -> the halves of a call whose module became a region in its own pre-hook
        # (Note [A region registered after the first call])
        self._late: dict[int, Any] = {}
        # the model called since the first optimizer step named it (Note [Steps that end
        # where the model is decided], replay/policies.py)
        self._called_since_named = False
        # Note [memledger's own hooks fail as memledger] (crash.py). The script's own error
        # in the call that found the model is no exception of these hooks: `_post` hands it
        # to the policy's halves and returns, and torch raises it after the hook.
        self._since_step = False   # an optimizer step, and no model call after it yet
        # Note [Modules made in the forward, named for a refusal]: while a refusal waits,
        # the open calls' names by depth, and the modules made in the model's forward
        self._names: list[str] | None = None
        self._made: dict[str, str] = {}
        _METHOD_GATE[0] = self._method_counts
        self._hooks = [
            nn_module.register_module_forward_pre_hook(internal(self._pre)),
            nn_module.register_module_forward_hook(internal(self._post), always_call=True),
            register_optimizer_step_pre_hook(internal(self._step)),
        ]

    def _pre(self, module: nn.Module, args) -> None:
        self._depth += 1
        if self._roots.stale(module):   # Note [A region registered after the first call]
            self._look_again(module, args)
        if self.applied is not None and self.applied.watch:   # Note [Work no gradient shows]
            self.applied.note_call(module)
        if self._names is not None:
            self._name_call(module)
        if self._depth != 1:
            return
        self._since_step = False
        _, new = self._roots.path(module, top_level=True)
        root = self._roots.root   # the module, or the one whose method called it
        if self._roots.decided and self._roots.prefix.get(root) == "":
            self._called_since_named = True
        if new and self._roots.prefix[root] == "":   # the model, for now
            self._apply(root)
            self._first_call(module, args)
            if type(self.error) is MatchesNoModule and self._names is None:
                self._names = []
                self._name_call(module)

    # Note [Modules made in the forward, named for a refusal]
    # A module the model's forward makes and holds nowhere is named by the trace by its
    # caller's path and its class (Note [Modules the model makes in its forward],
    # trace/collector.py), and a selector of that name is refused by both sides in one
    # line saying what it is (Note [A selector of a module made in the forward],
    # replay/policies.py). The installer resolves the policy at the model's first call,
    # before any such module exists; where that left a refusal waiting (MatchesNoModule),
    # it names the calls from then on as the collector does, keeps the names of those the
    # model holds nowhere, and explains the refusal with them at the first optimizer step
    # and at the end. A run whose policy resolved pays one attribute test per call.
    def _name_call(self, module: nn.Module) -> None:
        names = self._names
        del names[self._depth - 1:]
        path = self._roots.paths.get(module)
        if path is None:
            parent = names[-1] if names else ""
            path = f"{parent}.{type(module).__name__}".lstrip(".")
            if names and names[0] == "":   # inside the model's call
                self._made.setdefault(path, type(module).__name__)
        names.append(path)

    # Note [The call that found the model]
    # The model is found at the first call of a module with no module call around it (Note
    # [The model], trace/roots.py). A model whose own call no hook sees (gpytorch's
    # `ExactGP` has a `__call__` of its own; diffusers' `vae.encode` is a method) is found
    # at its first submodule's call, and when that submodule is itself a region, torch had
    # read its `forward` before the pre-hook wrapped it (`_call_impl` binds `self.forward`
    # first): its first call ran without the policy. tests/clients/train_gpytorch.py --case
    # dkl under `checkpoint:feature_extractor` measured 642,688 B, step 1's backward
    # holding the MLP's ReLU outputs that every later call, and the replay, let go (626,328
    # B predicted). So that call gets the policy from here: the wrapper's `halves` (its work
    # before the forward and after it, as torch's checkpoint runs its generator around the
    # function) begin in this pre-hook and end in the forward hook. The call's keyword
    # arguments are read from `_call_impl`'s frame; where they cannot be, the call runs
    # plain as before.
    def _first_call(self, module: nn.Module, args: tuple) -> None:
        self._first = _halves_begun(module, args)

    # Note [A region registered after the first call]
    # The policy was resolved against the model's `named_modules()` at its first call; a
    # module the model registers later (a head its first forward builds, litgpt's
    # `set_kv_cache`: Note [A module registered after the first call], trace/roots.py) had
    # no policy, and a selector naming only such modules was refused, "matches no module",
    # where the ledger names their calls. At a call of a module with no path after a
    # registration, the installer looks again: where the model holds new modules, the
    # policy is resolved again and put on the regions not wrapped yet (`extend_policy`;
    # the offloaders leave the new parameters alone), or, where it was refused for want of
    # them before the first step decided the model, put on afresh. The module being called
    # had its forward read by torch before this hook ran: where it is a new region, its
    # call gets the policy through the wrapper's halves, as the call that found the model
    # does (Note [The call that found the model]), ended in the forward hook at its depth.
    def _look_again(self, module: nn.Module, args: tuple) -> None:
        found = self._roots.look_again()
        model = self._roots.model()
        if not found or model is None:
            return
        inside = {id(m) for m in model.modules()}
        if not any(id(m) in inside for m, _ in found):
            return
        if self.applied is not None and self.applied.model is model:
            try:
                extend_policy(self.applied, self.offload_dir)
            except PolicyError as e:   # the script stops, as at the first call
                self.error = e.with_traceback(None)
                raise self.error from None
        elif self.applied is None and self.error is not None and \
                (not self._roots.decided or type(self.error) is MatchesNoModule):
            self._apply(model)
        else:
            return
        if self.applied is not None and (gen := _halves_begun(module, args)) is not None:
            self._late[self._depth] = gen

    # Note [A model gone with the script]
    # The top-level modules are held weakly (`prefix`), so once the script has returned, a
    # model it made inside `main()` is gone. A script that ends before the steps asked
    # (`measure --steps 2` of a run of 1 step, which trace records as "1 step (the script
    # ended after 1 of the 2 asked)" and predict prices) is asked after its end, and read
    # as having called no module: measure refused "the policy never applied: no model ran
    # in the 1 step taken (--steps 1): the script called no module" (false) where predict
    # priced 43.5 KiB (tests/clients/train_scan.py --model log --steps 1 under
    # `checkpoint:blocks.*`). A policy that was applied had its model: None then too.
    def roots_without_model(self) -> list[tuple[str, str]] | None:
        """(label, class) of the top-level modules called so far where none is the model
        (Note [No model in the steps taken], replay/policies.py); None once one is (or was:
        Note [A model gone with the script])."""
        if self._roots.model() is not None or self.applied is not None:
            return None
        return [(label, type(m).__name__) for m, label in self._roots.prefix.items()]

    def _method_counts(self) -> bool:
        """Whether a watched method running now is where the trace would look for it (Note
        [The method that ran], replay/policies.py): no module call open, not in backward,
        not between an optimizer step and the model's next call (the trace's optimizer
        phase, whose storages it names "optimizer")."""
        return self._depth == 0 and not self._since_step and not _in_backward()

    def _step(self, optimizer, args, kwargs) -> None:
        self._since_step = True
        if self.applied is not None:   # Note [Parameters used while the model lived]
            self.applied.note_used()
        if self._roots.decided:
            return
        moved = self._roots.on_step(optimizer)
        if moved:                     # the model is another module: its student
            if self.applied is not None:
                self.applied.remove()
                self.applied = None
            self._apply(moved[0])   # raises the error, explained, but one that matches
            # no module yet (Note [A region registered after the first call])
        elif self.error is not None:  # the model is decided, and the policy does not fit it
            self.error = self._explained(self.error)
            if type(self.error) is MatchesNoModule:   # not yet, maybe: Note [A region
                return                                # registered after the first call]
            raise self.error

    def _explained(self, error: PolicyError) -> PolicyError:
        """The error again, now that the top-level modules called beside the model are
        known: a selector that names one of them is told so (replay/policies.py)."""
        model = self._roots.model()
        others = [p for _, p in self._roots.prefix.items() if p]
        if model is None or not (others or self._made):
            return error
        try:
            resolve(self.policy, module_table(model), others=others,
                    containers=containers(model), moved=bool(self._roots.was),
                    aliases=module_aliases(model), made=self._made)
        except PolicyError as better:
            return better
        return error

    def _apply(self, module: nn.Module) -> None:
        # a module taken for the model before (spectral_norm's parametrization, called while
        # the model was built: Note [The model]) lets go of the policy first, so it is never
        # applied twice
        if self.applied is not None:
            self.applied.remove()
            self.applied = None
        try:
            self.applied = apply_policy(module, self.policy, self.offload_dir)
        except PolicyError as e:
            # the runner reports it as exit 2, not as the script's failure. Kept without its
            # traceback: the frames it holds hold the script's frames above them, whose
            # tensors outlived their calls (a botorch GP found as the model while it is
            # fitted, before the acquisition function that the policy fits: 2,456 B over
            # the prediction at the next peak)
            self.error = e.with_traceback(None)
            if not self._roots.decided:
                return       # the model may be another module still (Note [The model])
            # said as predict says it: a selector of a module beside the model is told so
            self.error = self._explained(self.error).with_traceback(None)
            if type(self.error) is MatchesNoModule:   # the model may register the module
                return   # still (Note [A region registered after the first call])
            raise self.error from None
        self.error = None
        if self.on_applied is not None:
            self.on_applied(self.applied)

    def _post(self, module, args, output) -> Any:
        gen = self._late.pop(self._depth, None) if self._late else None
        self._depth = max(0, self._depth - 1)
        if gen is None and self._depth == 0 and self._first is not None:
            gen, self._first = self._first, None   # the call that found the model
        if gen is None:
            return None
        error = sys.exc_info()[1] if output is None else None
        if error is not None:   # the forward raised (torch calls this hook still)
            try:
                gen.throw(error)
            except BaseException as e:
                if e is not error:
                    raise
            return None
        try:
            gen.send(output)
        except StopIteration as stop:
            return stop.value
        return None

    def remove(self) -> None:
        """Take the policy off; a part none of whose modules ran in any step the script
        took is refused now (Note [Modules that never ran], replay/policies.py), as predict
        refuses one no traced step ran. Not at the first step: LayerDrop (wav2vec2's and
        SEW's encoders, `layerdrop=0.1`) skips a layer in one step and runs it in the next,
        and the ledger's steps read its parameters, so predict took the policy that
        measure refused (SEW, `offload:sew.encoder.layers.1`)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if _METHOD_GATE[0] == self._method_counts:
            _METHOD_GATE[0] = None
        if type(self.error) is MatchesNoModule and self._made:   # Note [Modules made in
            self.error = self._explained(self.error)              # the forward, named...]
        if self.applied is not None:
            # no optimizer step decides the model where steps are counted otherwise (Note
            # [Work no gradient shows]): it is the one found by then
            decided = self._roots.decided or self.steps_by != "optimizer"
            if self.error is None and decided and (idle := self.applied.idle_part()) is not None:
                self.error = idle
                if self._roots.was and not self._called_since_named:
                    # nothing of the model ran: the first part with regions is the idle one
                    part = next(p for p in self.policy.parts
                                if any(r.part is p for r in self.applied.regions))
                    self.error = PolicyError(before_the_model_message(
                        part.selector, [r.path for r in self.applied.regions if r.part is part],
                        str(self._roots.was)))
            self.applied.remove()


def _halves_begun(module: nn.Module, args: tuple) -> Any:
    """The policy's halves of a region's call begun from its pre-hook (Note [The call that
    found the model]); None where the module is no region or the keywords cannot be read."""
    forward = module.__dict__.get("forward")   # a _RegionForward, or not a region
    if isinstance(forward, _RegionForward):   # its first call does not pass through it
        forward.ran = True
    halves = getattr(getattr(forward, "run", None), "memledger_halves", None)
    kwargs = _call_kwargs() if halves is not None else None
    if kwargs is None:
        return None
    gen = halves(args, kwargs)
    next(gen)
    return gen


def _call_kwargs() -> dict | None:
    """The keyword arguments of the module call whose forward pre-hooks are running: a local
    of `Module._call_impl`'s `inner` (Note [The call that found the model]); None if not
    found."""
    f = sys._getframe(1)
    for _ in range(8):
        if f is None:
            return None
        if f.f_code.co_name == "inner" and f.f_code.co_filename == nn_module.__file__:
            kwargs = f.f_locals.get("kwargs")
            return kwargs if isinstance(kwargs, dict) else None
        f = f.f_back
    return None


def install_policy(policy: Policy, offload_dir: str | None = None,
                   on_applied: Callable[[PolicyHandle], None] | None = None,
                   steps_by: str = "optimizer") -> PolicyInstaller:
    """Arrange for `policy` to be applied to the model of a script about to run.

    The baseline (`none`) installs nothing but still reports the model through `on_applied`.
    `steps_by`: what ends a step (trace/steps.py).
    """
    _LAST_RERUN.clear()   # Note [A re-run torch refused after a write of state]
    return PolicyInstaller(policy, offload_dir, on_applied, steps_by)

"""Tensors a module call stores into objects it was handed: state written outside a region.

# Note [State written outside a region]
A checkpointed region is run twice (forward, then recompute in backward). That is only
the same computation if the region's forward is a function of its inputs: if it also
*stores* tensors into an object passed in from outside, the recompute stores them a
second time. transformers' KV cache is the common case: with `use_cache=True` (the default
of GPT-2 and Llama, even in training) each attention layer does, through the `cache`
argument,

    layer.keys = torch.cat([layer.keys, key_states], dim=-2)    # (B, nh, T, hs) more each call

so the recompute doubles the cache (B=2, nh=2, T=32, hs=32, fp32: 16,384 B of keys and
16,384 B of values per layer, then 32,768 + 32,768), the attention reads keys of length
2T, and selective checkpointing fails in backward (`aten.slice.Tensor ... not found in
storage`). It also keeps the keys alive after the region's forward, so a storage that
checkpoint or offload would free is not freed.

Detection, without knowing any library: when a module call returns, walk the non-tensor
objects among its arguments (attributes, lists, dicts; a few levels deep, never through a
module or a tensor) and collect the tensors reachable from them. One whose storage was
created *during the call* was stored there by the call: the call writes state outside
itself. The collector writes a `stateful` record for that call (its module, first event,
the object's class and the storages), `predict` refuses to re-run such a call, and
`measure` (memledger/measure/apply.py) refuses it after the call's first forward, before
any recompute. Offload keeps those storages on the device (the object holds them).

An in-place write into a tensor the call was handed is not a new storage: it is found by
the tensor's version counter instead (`argument_versions` before the call,
`written_arguments` after). A Mixtral layer's router jitter does `hidden_states *= noise`
on its input: re-run, the region would start from the changed tensor, and torch's
checkpoint fails in backward ("modified by an inplace operation"). The call is recorded
as `stateful` with the object `INPUT_WRITTEN`, and refused alike. Known limitation: a
write into a tensor held inside an object (a static cache's `index_copy_`) is not seen.

# Note [Hooks paired across forward and backward]
A module with its own forward hook and its own full backward hook usually pairs them: what
the forward hook stores for each call, the backward hook consumes. Opacus's
`GradSampleModule` does so on every trainable layer: the forward hook appends the layer's
input to `module.activations` and counts the call (`p._forward_counter += 1`), the backward
hook pops that input, computes the per-sample gradients and only when the count is back to
0 moves them to `p.grad_sample`. A checkpoint (or selective) re-run fires the forward hooks
a second time, but backward runs through the first forward's graph only, so the backward
hooks fire once: the count stays at 1, `p.grad_sample` is never set and `optimizer.step()`
raises "Per sample gradient is not initialized" (tests/clients/train_opacus.py, MLP,
`checkpoint:_module.blocks.*`). Neither half makes a storage during the call (the input is
stored as a `detach()` alias), so Note [State written outside a region] cannot see it; the
hooks themselves are what says it. The collector writes a `stateful` record with the object
`PAIRED_HOOKS` for each forward call of a module holding both kinds (its own
`_forward_hooks` or `_forward_pre_hooks`, and full backward hooks or backward pre-hooks:
memledger's module hooks are global, never the module's own), and predict refuses any
region re-run that holds such a call; measure refuses it after the region's first forward,
before any recompute. Offload re-runs nothing and is allowed. A forward hook alone (a
logger, spectral norm's pre-hook) is not refused: nothing in backward expects one call.
Disabled hooks (`GradSampleModule.disable_hooks()`) still count: the hooks' objects say
nothing about what they do.

# Note [A backward hook made by hand]
The same pairing without a backward hook: a module's own forward hook that hands its
outputs on through an autograd Function of its own, whose backward is the other half.
torchjd's autogram `Engine(model, batch_dim=None)` hooks every layer holding parameters so:
the hook counts the call (`track_forward_call`) and returns the outputs through
`AutogramNode.apply(...)`, whose backward computes the layer's Jacobian; before it
aggregates, the engine checks that every counted call met its backward ("Some modules had
a forward pass without an associated backward pass"). A checkpoint re-run fires the hook
again and the new node is never reached (torch's checkpoint keeps only what the re-run
saves), so the script fails in its next step; predict had priced `checkpoint:blocks.*`
of tests/clients/train_torchjd.py `--mode autogram --no-batch-dim` at 519,180 B (2 steps)
while measure ended with the script's ValueError (exit 3). Whether a hook does this is
only seen by running it: `watch_routed_outputs` puts one hook of ours before the
module's own and one after them (torch runs global hooks first, then the module's own in
order), and a call whose tensor outputs leave the module's own hooks with the grad_fn of
a Python autograd Function (`BackwardCFunction`) they did not have before is routed. The
trace records it as `PAIRED_HOOKS` and predict refuses a re-run holding it; measure puts
the same watch on the region's hooked modules and refuses after the region's first
forward. A forward hook that returns a new tensor made by torch's own ops (`out * 2`),
or registers tensor hooks on the outputs (FSDP2's post-forward), routes nothing. Only
modules that already hold forward hooks of their own are watched, so a model without any
keeps its hook dictionaries as they were.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator

import torch

# the collector's names
from memledger.replay.stateful import (  # noqa: F401
    ARGUMENT_CHANGED, INPUT_WRITTEN, OWN_STATE, PAIRED_HOOKS)

_ATOMS = (str, bytes, int, float, complex, bool, type(None), type, torch.dtype,
          torch.device, torch.Size)
_MAX_DEPTH = 4
_MAX_OBJECTS = 512   # per argument: a walk never costs more than this many objects


# the attributes every nn.Module has (its parameters, buffers, children, hooks): not state
# its forward keeps
_MODULE_OWN = frozenset(torch.nn.Module().__dict__)
_MAX_KEPT = 64   # tensors read from one container attribute: a call keeps a few, not a data set


def attribute_tensors(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    """Tensors `module` holds as plain attributes: directly (`self.h = h`), or in a list,
    tuple or dict attribute (`self.heads[i] = head(x)`: MONAI's DynUNet keeps its deep
    supervision outputs in one list that every skip layer shares). Note [Tensors a call
    keeps on its module] in trace/collector.py."""
    for key, v in module.__dict__.items():
        if key in _MODULE_OWN:
            continue
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple, dict)):
            items = list(v.values()) if isinstance(v, dict) else v
            yield from (x for x in items[:_MAX_KEPT] if isinstance(x, torch.Tensor))


def argument_objects(args: tuple, kwargs: dict | None) -> Iterator[Any]:
    """The arguments that could hold state: anything but tensors, modules and atoms."""
    for a in (*args, *(kwargs or {}).values()):
        if not isinstance(a, (torch.Tensor, torch.nn.Module, *_ATOMS)) and not callable(a):
            yield a


def reachable_tensors(obj: Any) -> list[torch.Tensor]:
    """Tensors reachable from `obj` through containers and instance attributes."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack and len(seen) < _MAX_OBJECTS:
        o, depth = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            found.append(o)
            continue
        if depth >= _MAX_DEPTH or isinstance(o, (torch.nn.Module, *_ATOMS)):
            continue
        if isinstance(o, (list, tuple, set, frozenset)):
            children = o
        elif isinstance(o, dict):
            children = o.values()
        else:
            d = getattr(o, "__dict__", None)   # plain instance attributes, no properties
            if not isinstance(d, dict):
                continue
            children = d.values()
        stack.extend((c, depth + 1) for c in children)
    return found


def storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def written_state(args: tuple, kwargs: dict | None, is_new) -> list[tuple[str, list[int]]]:
    """[(class name, storage keys)] of argument objects holding storages `is_new(key)`."""
    out = []
    for obj in argument_objects(args, kwargs):
        keys = [k for t in reachable_tensors(obj) if (k := storage_key(t)) is not None
                and is_new(k)]
        if keys:
            out.append((type(obj).__name__, sorted(set(keys))))
    return out



def paired_hooks(module: torch.nn.Module) -> bool:
    """Does `module` hold forward hooks of its own and full backward hooks of its own?
    Note [Hooks paired across forward and backward]."""
    if not (module._forward_hooks or module._forward_pre_hooks):
        return False
    return bool(module._backward_pre_hooks) or (
        bool(module._backward_hooks) and getattr(module, "_is_full_backward_hook", None) is True)


_ROUTED: "weakref.WeakKeyDictionary[torch.nn.Module, int]" = weakref.WeakKeyDictionary()
_WATCHED: "weakref.WeakKeyDictionary[torch.nn.Module, Any]" = weakref.WeakKeyDictionary()


def _grad_fns(output: Any) -> list:
    return [t.grad_fn for t in _flat_tensors(output)]


def _flat_tensors(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in _flat_tensors(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in _flat_tensors(o)]
    return []


_LISTENERS: list = []   # called with each routed module: the collectors recording now


class _Listening:
    def __init__(self, fn) -> None:
        self._fn = fn
        _LISTENERS.append(fn)

    def remove(self) -> None:
        if self._fn in _LISTENERS:
            _LISTENERS.remove(self._fn)


def listen_for_routed_calls(fn) -> _Listening:
    """Call `fn(module)` at each routed call of a watched module until `.remove()`."""
    return _Listening(fn)


def watch_routed_outputs(module: torch.nn.Module) -> None:
    """Note [A backward hook made by hand]: from now on, count the calls of `module` whose
    own forward hooks hand its outputs on through a Python autograd Function
    (`routed_calls`), and tell the listeners of each. Once per module."""
    if module in _WATCHED:
        return
    before: list = []

    def first(_m, _args, output):
        before[:] = [f for f in _grad_fns(output) if f is not None]
        return None

    def last(m, _args, output):
        seen = before[:]
        before.clear()
        if not torch.is_grad_enabled():
            return None
        for f in _grad_fns(output):
            if isinstance(f, torch.autograd.function.BackwardCFunction) and \
                    not any(f is g for g in seen):
                _ROUTED[m] = _ROUTED.get(m, 0) + 1
                for fn in list(_LISTENERS):
                    fn(m)
                break
        return None

    _WATCHED[module] = (module.register_forward_hook(first, prepend=True),
                        module.register_forward_hook(last))


def routed_calls(module: torch.nn.Module) -> int:
    """How many calls of `module` its own forward hooks routed (Note [A backward hook made by
    hand]); 0 for a module never watched."""
    return _ROUTED.get(module, 0)


# Note [A list changed after the call]
# A call handed a list (or a dict) keeps no copy of it: torch's checkpoint keeps the list
# object for the re-run, and the re-run reads it as it is in backward. x-unet's `XUnet`
# hands each cross-stage attention residual (`XAttnRes`) the `history` list of the stage
# outputs so far, then appends the stage's own output to the same list: re-run in
# backward, `down_xattnres.0` (handed an empty list) found 4 entries and x-unet's
# assertion failed ("history must have 1 entries, but received 4"). Predict had priced
# `checkpoint:down_xattnres.*` of tests/clients/train_xunet.py `--video --xattnres` at a
# number and measure ended with the script's AssertionError (exit 3). Where the re-run
# does not fail it computes from other inputs, so the gradients change. The trace takes
# the identities of each list or dict argument's items as each call returns (a write
# inside the call is Note [State written outside a region]'s) and compares them as the
# model's outermost call returns: a call whose list changed is written `stateful` with the
# object ARGUMENT_CHANGED, which predict refuses to re-run. Measure takes the same
# identities as the region's forward returns and compares them as its re-run starts, and
# refuses there, in the same line. Offload re-runs nothing and is allowed. Known
# limitation: a change the script makes after the model's call returns (to a list it
# handed the model) is seen by measure alone.
def handed_containers(args: tuple, kwargs: dict | None) -> list[tuple[Any, tuple]]:
    """(container, the identities of its items now) of a call's list and dict arguments."""
    return [(a, container_items(a)) for a in (*args, *(kwargs or {}).values())
            if isinstance(a, (list, dict))]


def container_items(c: Any) -> tuple:
    if isinstance(c, dict):
        return tuple((k, id(v)) for k, v in c.items())
    return tuple(id(v) for v in c)


def changed_containers(handed: list[tuple[Any, tuple]]) -> bool:
    """Did a list or dict a call was handed change since `handed_containers` read it?"""
    return any(container_items(c) != items for c, items in handed)


# Note [A tensor handed in a tuple or by keyword]
# Note [State written outside a region] read the version counters of a call's top-level
# tensor arguments only, and the trace only its positional ones (torch hands a global
# forward pre-hook no kwargs). En-transformer's `Block.forward(inp)` is handed
# `(feats, coors, mask, edges, adj_mat)` as one tuple, and its attention
# (`EquivariantAttention.forward(..., adj_mat=adj_mat)`) does
# `adj_mat.masked_fill_(self_mask, False)` on the adjacency it was handed by keyword
# (tests/clients/train_entransformer.py --adj). Neither side saw the tuple's tensor, and
# only measure the keyword's: `checkpoint:layers.*` was refused by predict as a write into
# "a tensor it keeps from before (a metric's running sums, a counter)" (the `mutated`
# record of a storage made before the call) and measured at 901,640 B, and
# `checkpoint:@EquivariantAttention` refused by both in two different lines. The versions
# are now read through tuples, lists and dicts among the arguments (each tensor once), and
# the trace reads the keyword arguments off torch's `_call_impl` frame
# (`Collector._call_kwargs`); both refuse alike, naming the changed input.
#
# Note [Versions read without holding the tensor]
# The versions are kept beside a weak reference to each tensor, never the tensor: a
# tensor handed inside a list or dict is held by the container alone, and a call that
# replaces the entry lets it go there. se3-transformer-pytorch's `EGNN` layer does
# `features[degree] = features[degree] + update` on the dict it is handed: with the
# tensors held to the call's return, the trace kept conv_in's degree-1 output (2, 8, 8, 3)
# fp32, 1,536 B, through the whole of the next layer, and the ledger peak read 1,536 B
# over the allocator's (tests/clients/train_se3.py --egnn; tests/clients/
# test_dict_handed.py). A tensor gone by the call's return counts as not written: the
# call took it out of its container, which is Note [A list changed after the call]'s and
# this Note's `written_state` (a new tensor put in its place) to judge, not a version's.
def argument_versions(args: tuple, kwargs: dict | None) -> list[tuple[weakref.ref, int]]:
    """(weak reference to the tensor, its version) of a call's tensor arguments, before it
    runs, those inside its tuple, list and dict arguments too (Note [A tensor handed in a
    tuple or by keyword]; Note [Versions read without holding the tensor])."""
    out: list[tuple[weakref.ref, int]] = []
    seen: set[int] = set()
    _versions_into((*args, *(kwargs or {}).values()), out, seen, 0)
    return out


def _versions_into(items, out: list, seen: set, depth: int) -> None:
    for a in items:
        if isinstance(a, torch.Tensor):
            if id(a) in seen:
                continue
            seen.add(id(a))
            try:
                out.append((weakref.ref(a), a._version))
            except RuntimeError:   # an inference tensor keeps no version counter
                pass
        elif depth < 4 and isinstance(a, (tuple, list)):
            _versions_into(a, out, seen, depth + 1)
        elif depth < 4 and isinstance(a, dict):
            _versions_into(a.values(), out, seen, depth + 1)


def written_arguments(versions: list[tuple[weakref.ref, int]]) -> bool:
    """Did the call change one of its tensor arguments in place? (One let go of during the
    call is no write: Note [Versions read without holding the tensor].)"""
    return any((t := ref()) is not None and t._version != v for ref, v in versions)

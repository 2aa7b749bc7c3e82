"""Which modules may read a training flag in their forward: a look at their Python code.

# Note [Which modules read a training flag]
A re-run in another mode (Note [A re-run in another mode], trace/modes.py) computes other
values only where code the re-run runs reads a `training` flag. Every module counted
before (the forty-ninth session): a block of Linear, GELU and LayerNorm re-run in eval
mode computes what its train-mode forward did, and was refused. A module's flag is its
instance attribute `training`; code reads it as `.training` (an attribute name in its code
object's `co_names`) or by the string (`getattr(m, "training")`, `m.__dict__["training"]`:
a string constant). So a module *reads a flag* (`reads_a_flag`) where code it runs in a
forward names `training` so:
- its class's methods, properties, static and class methods, through its MRO but for
  `nn.Module` itself (whose `__init__` and `train()` name it; neither runs in a forward)
  and `object`, with the functions nested in them (code objects in `co_consts`): torch's
  Dropout, BatchNorm, InstanceNorm, RReLU, RNN/LSTM/GRU, MultiheadAttention and the
  Transformer layers; Linear, GELU, LayerNorm, Conv, Embedding do not;
- what that code calls by a global name or `module.attribute` (both among `co_names`): a
  Python function, closure cells included, or a class that is no `nn.Module` (a helper
  object's methods), followed transitively; not into torch's own Python code (its
  functions take the flag as an argument, `F.dropout(x, p, training)`; those that read a
  module argument's `.training` run outside a forward: fusion, swa_utils, tensorboard,
  mkldnn, or reach it as a hook or an instance forward, looked at below) nor memledger's;
  a module class named so is not followed (one made in the forward carries a fresh flag;
  one of the region is looked at itself);
- what the instance holds: its forward hooks and forward pre-hooks and torch's global
  ones (memledger's own left out), and callables in its `__dict__` (an instance's own
  `forward`, as `torch.cuda.make_graphed_callables` sets one that reads `func.training`;
  spectral_norm's hook reads `module.training`): each looked at as above, torch's
  included;
- a TorchScript module (`torch.jit.ScriptModule`): its code is no Python code, so it
  counts.
A region's re-run is refused where a module of it moved and a module of it reads a flag
(the moved one, or another: a parent reading `self.child.training`); the rule is per
region, since which flag a code reads (its own or a child's) is no thing a look at names
tells. What the look cannot see counts as a read where it can: a walk past `_BUDGET` code
objects, an error while looking. What it misses: a name built at run time (`getattr(m,
"train" + "ing")`), a C extension handed the module, a method reached through an object
held in a container the code indexes, a module class's static method called by its class.
Per class, the answer is kept (`_BY_CLASS`); the instance's part is looked at each time.
Both sides ask here only where a mode moved: the trace as a backward pass begins and
writes a `modes` record (its `reads`), measure as a re-run starts; the per-op hot path is
untouched.
"""

from __future__ import annotations

import functools
import os
import types
import weakref

import torch
from torch import nn

_NAME = "training"
_BUDGET = 20_000   # code objects one question walks; past it, counted as a read
_BY_CLASS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # memledger/


class _TooFar(Exception):
    pass


def _owned_by(obj, prefixes: tuple[str, ...]) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    return isinstance(mod, str) and (mod in prefixes or mod.startswith(
        tuple(p + "." for p in prefixes)))


class _Walk:
    """One question: does code reachable from the entries name `training`?"""

    def __init__(self) -> None:
        self.seen: set = set()
        self.todo: list[tuple[types.CodeType, dict]] = []

    def entry(self, obj) -> None:
        """A callable the module runs itself (a method, a hook): looked at, torch's too."""
        self._callable(obj, follow=False)

    def _callable(self, obj, follow: bool) -> None:
        """`follow`: reached by a name in code: torch's and memledger's are left out."""
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        if _owned_by(obj, ("memledger",)) or (follow and _owned_by(obj, ("torch",))):
            return
        if isinstance(obj, (staticmethod, classmethod)):
            self._callable(obj.__func__, follow)
        elif isinstance(obj, property):
            for f in (obj.fget, obj.fset, obj.fdel):
                if f is not None:
                    self._callable(f, follow)
        elif isinstance(obj, functools.partial):
            self._callable(obj.func, follow)
        elif isinstance(obj, types.MethodType):
            self._callable(obj.__func__, follow)
            self._class(type(obj.__self__), follow)
        elif isinstance(obj, types.FunctionType):
            if obj.__code__.co_filename.startswith(_OURS):   # a wrapper of ours that
                return                  # functools.wraps named after the script's method
            self.todo.append((obj.__code__, obj.__globals__))
            for cell in obj.__closure__ or ():
                try:
                    held = cell.cell_contents
                except ValueError:   # an empty cell
                    continue
                if callable(held) and not isinstance(held, (nn.Module, torch.Tensor)):
                    self._callable(held, follow=True)
        elif isinstance(obj, type):
            if not (follow and issubclass(obj, nn.Module)):
                self._class(obj, follow)
        elif not isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType,
                                  types.ModuleType, nn.Module, torch.Tensor)) and \
                callable(obj):
            self._class(type(obj), follow)   # an object with __call__ (spectral_norm's hook)

    def _class(self, cls: type, follow: bool) -> None:
        for k in cls.__mro__:
            if k is nn.Module or k is object or (k, "class") in self.seen:
                continue
            self.seen.add((k, "class"))
            if follow and _owned_by(k, ("torch", "builtins")):
                continue
            for v in list(vars(k).values()):
                if isinstance(v, (types.FunctionType, staticmethod, classmethod, property,
                                  functools.partial)):
                    self._callable(v, follow)

    def reads(self) -> bool:
        walked = 0
        while self.todo:
            code, globs = self.todo.pop()
            if code in self.seen:
                continue
            self.seen.add(code)
            walked += 1
            if walked > _BUDGET:
                raise _TooFar
            if _NAME in code.co_names:
                return True
            for c in code.co_consts:
                if isinstance(c, str) and c == _NAME:
                    return True
                if isinstance(c, types.CodeType):
                    self.todo.append((c, globs))
            self._names(code.co_names, globs)
        return False

    def _names(self, names: tuple[str, ...], globs: dict) -> None:
        for name in names:
            obj = globs.get(name)
            if obj is None:
                continue
            if isinstance(obj, types.ModuleType):
                if _owned_by(obj, ("torch", "memledger")) or \
                        obj.__name__.split(".")[0] in ("torch", "memledger"):
                    continue
                space = vars(obj)
                for attr in names:   # `helpers.fn(...)`: any name of the code
                    held = space.get(attr)
                    if held is not None and (isinstance(held, (types.FunctionType, type))
                                             or isinstance(held, functools.partial)):
                        self._callable(held, follow=True)
            elif isinstance(obj, (types.FunctionType, type, functools.partial)):
                self._callable(obj, follow=True)


def _class_reads(cls: type) -> bool:
    try:
        return _BY_CLASS[cls]
    except KeyError:
        pass
    walk = _Walk()
    try:
        walk.entry(cls)
        found = walk.reads()
    except Exception:   # noqa: BLE001  _TooFar included: what the look cannot see counts
        found = True
    _BY_CLASS[cls] = found
    return found


def _global_hooks() -> list:
    from torch.nn.modules import module as mod
    return [*getattr(mod, "_global_forward_pre_hooks", {}).values(),
            *getattr(mod, "_global_forward_hooks", {}).values()]


_HELD_BY_TORCH = frozenset({"_parameters", "_buffers", "_modules", "_forward_hooks",
                            "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                            "_state_dict_hooks", "_state_dict_pre_hooks",
                            "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
                            "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
                            "_forward_hooks_always_called", "_non_persistent_buffers_set"})


def reads_a_flag(module: nn.Module) -> bool:
    """Whether code `module` runs in a forward may read a `training` flag (Note [Which
    modules read a training flag])."""
    if isinstance(module, torch.jit.ScriptModule):
        return True
    walk = _Walk()
    try:
        if _class_reads(type(module)):
            return True
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values(),
                     *_global_hooks()]:
            walk.entry(hook)
        for name, v in vars(module).items():
            if name not in _HELD_BY_TORCH and callable(v) and \
                    not isinstance(v, (nn.Module, torch.Tensor, type)):
                walk.entry(v)
        return walk.reads()
    except Exception:   # noqa: BLE001  _TooFar included: counted as a read
        return True

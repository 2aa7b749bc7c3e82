"""The names of top-level modules, and which one is the model: one rule for every pass.

# Note [The model]
Policies act on one module, the model; the ledger names its modules as its
`named_modules()` names them (`blocks.0`) and every other top-level module's under that
module's class name (`Sequential.0`: a GAN's discriminator, a loss module called on its
own). The model is the first top-level module with parameters the script calls, unless no
call of it had gradients by the first optimizer step (a teacher, run under `no_grad`
before its student): then it is the top-level module with the most parameters that step
updates, which takes the model's names from then on, and the teacher is named by its
class. Calls made before that step keep the names they were recorded with, in the ledger
as in `measure` (whose policy moves to the student at that step too). Why not the first
module whose call trains: a distillation script calls a projection `Linear` on the batch
before the student (its parameters want gradients, its output is detached).

The collector (ledger pass), ModuleTimer (allocator pass), the policy installer
(`measure`) and the doctor's probe (whose findings name parameters) must agree: untraced module times are matched to the ledger's calls by path,
and a policy names modules as the model's `named_modules()` does. When the timer named
every top-level module from its own root, a GAN's generator and discriminator both had a
module `0`; when the installer took the first module with parameters, a distillation
script's policies went to its teacher, and the doctor named a student's parameters
`Sequential.2.weight` where `show` said `2.weight`.
"""

from __future__ import annotations

import weakref

import torch


class ByModule:
    """A mapping keyed by module identity that forgets dead modules: a dead module's id is
    reused by the next one made (a loss module built per call), so a dict by id named a
    new model after a dead `ReLU`; identity, not `__eq__`, as a WeakKeyDictionary would use."""

    def __init__(self) -> None:
        self._d: dict[int, tuple[weakref.ref, object]] = {}

    def get(self, m, default=None):
        e = self._d.get(id(m))
        return e[1] if e is not None and e[0]() is m else default

    def __contains__(self, m) -> bool:
        e = self._d.get(id(m))
        return e is not None and e[0]() is m

    def __getitem__(self, m):
        if m not in self:
            raise KeyError(m)
        return self._d[id(m)][1]

    def __setitem__(self, m, value) -> None:
        self._d[id(m)] = (weakref.ref(m), value)

    def setdefault(self, m, value) -> None:
        if m not in self:
            self[m] = value

    def pop(self, m, default=None):
        if m not in self:
            return default
        return self._d.pop(id(m))[1]

    def update(self, pairs) -> None:
        for m, value in pairs:
            self[m] = value

    def items(self) -> list[tuple[object, object]]:
        return [(m, v) for r, v in self._d.values() if (m := r()) is not None]

    def keys(self) -> list:
        return [m for m, _ in self.items()]


class RootNames:
    """Prefixes and paths of the top-level modules seen so far (Note [The model])."""

    def __init__(self) -> None:
        self.prefix = ByModule()            # top-level module -> prefix ("": the model's names)
        self.paths = ByModule()             # module -> path, submodules included
        self.decided = False                # the first optimizer step has been seen
        self._with_grad = ByModule()        # top-level modules called with gradients on
        self.absorbed: list[torch.nn.Module] = []   # by the last new top-level module

    def path(self, module: torch.nn.Module, top_level: bool) -> tuple[str | None, bool]:
        """(path, new top-level module) of a module being called; a top-level call names a
        module seen for the first time. A submodule called on its own (a recompute in
        backward) keeps its path. None: a module no top-level module holds."""
        new = top_level and module not in self.prefix and module not in self.paths
        if new:
            self.absorbed = self._absorb(module)
            has_params = next(module.parameters(), None) is not None
            self.prefix[module] = "" if has_params and self.model() is None \
                else type(module).__name__
            moved = {id(m) for r in self.absorbed for m in r.modules()}
            for m, path in paths_under(module, self.prefix[module]):
                if id(m) in moved:
                    self.paths[m] = path
                else:
                    self.paths.setdefault(m, path)   # a shared submodule keeps its first path
        if top_level and not self.decided and torch.is_grad_enabled() and module in self.prefix:
            self._with_grad[module] = True
        return self.paths.get(module), new

    def _absorb(self, module: torch.nn.Module) -> list[torch.nn.Module]:
        """Top-level modules seen before that `module` holds: they were called on their own
        before it (spectral_norm calls its parametrization while the model is being built),
        and are its submodules from now on; the model's names go with them."""
        inside = {id(m) for m in module.modules()}
        held = [m for m in self.prefix.keys() if m is not module and id(m) in inside]
        for m in held:
            self.prefix.pop(m)
        return held

    def model(self) -> torch.nn.Module | None:
        return next((m for m, p in self.prefix.items() if p == ""), None)

    def on_step(self, optimizer: torch.optim.Optimizer) -> list[torch.nn.Module]:
        """At the first optimizer step: the model is decided (Note [The model]). The
        top-level modules renamed (the new model first, then the one that held its names)."""
        if self.decided:
            return []
        self.decided = True
        held = self.model()
        if held is None or held in self._with_grad:
            return []
        stepped = {id(p) for g in optimizer.param_groups for p in g["params"]}
        count = [(sum(id(p) in stepped for p in m.parameters()), m) for m in self.prefix.keys()]
        n, best = max(count, key=lambda c: c[0], default=(0, None))
        if best is None or best is held or n == 0:
            return []
        self.prefix[held] = type(held).__name__
        self.prefix[best] = ""
        for m in (best, held):
            self.paths.update(paths_under(m, self.prefix[m]))
        return [best, held]

    def alive(self) -> list[torch.nn.Module]:
        return list(self.prefix.keys())


COMPILED = "_orig_mod"   # torch.compile's OptimizedModule holds the model under this name


def plain_name(name: str) -> str:
    """A module or parameter name as the model itself has it: `torch.compile(model)` puts
    `_orig_mod.` before every name (`_orig_mod.0.weight` is the model's `0.weight`)."""
    if COMPILED not in name:
        return name
    return ".".join(p for p in name.split(".") if p != COMPILED)


def named_modules(root: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """`root.named_modules()` under the model's own names (`plain_name`): a policy's
    `blocks.*` selects the same modules with or without torch.compile."""
    return [(plain_name(n), m) for n, m in root.named_modules()]


def paths_under(root: torch.nn.Module, prefix: str) -> list[tuple[torch.nn.Module, str]]:
    """(module, path) for `root` and its submodules, under `prefix`."""
    return [(m, ".".join(p for p in (prefix, name) if p)) for name, m in named_modules(root)]

"""The names of top-level modules, and which one is the model: one rule for every pass.

# Note [The model]
Policies act on one module, the model; the ledger names its modules as its
`named_modules()` names them (`blocks.0`) and every other top-level module's under that
module's own name (`D.0`: a GAN's discriminator, a loss module called on its own; Note
[Root names] below). The model is the first top-level module with parameters the script
calls, unless no call of it had gradients by the first optimizer step (a teacher, run
under `no_grad` before its student): then it is the top-level module with the most
parameters that step updates, which takes the model's names from then on, and the teacher
is named as the others are. Calls made before that step keep the names they were recorded
with, in the ledger as in `measure` (whose policy moves to the student at that step too).
Why not the first module whose call trains: a distillation script calls a projection
`Linear` on the batch before the student (its parameters want gradients, its output is
detached).

The collector (ledger pass), ModuleTimer (allocator pass), the policy installer
(`measure`) and the doctor's probe (whose findings name parameters) must agree: untraced
module times are matched to the ledger's calls by path, and a policy names modules as the
model's `named_modules()` does. When the timer named every top-level module from its own
root, a GAN's generator and discriminator both had a module `0`; when the installer took
the first module with parameters, a distillation script's policies went to its teacher,
and the doctor named a student's parameters `Sequential.2.weight` where `show` said
`2.weight`. The top-level module a call names may be the module whose method made it (Note
[A model called through its methods]) or one the script holds it in (Note [A model held
by the script], below `method_owner`).

# Note [A model called through its methods]
A script may never call its model's forward, only methods that call its parts: diffusers'
`AutoencoderKL` trains as `vae.encode(x).latent_dist` then `vae.decode(z)`, which call
`vae.encoder`, `vae.quant_conv`, `vae.decoder`, `vae.post_quant_conv`. Each of those was
a top-level module, the encoder taken for the model and the rest named beside it: the
policies a user writes from `vae.named_modules()` (`decoder.up_blocks.*`) were refused
as selecting "modules of 'decoder', which the script calls beside the model", and
`encoder.down_blocks.*` as matching no module. So a top-level call of a module seen for
the first time looks up the Python stack for a method (a frame outside torch and
memledger whose `self` is a module) of a module that holds it; the outermost such module
is the top-level module instead, named and chosen as the model by the rules above, and
the called module takes its path under it (`encoder`). Later top-level calls of its parts
are calls of that module's submodules; `measure` and the doctor's probe find the same
root. Torch's own frames are left out: its `_call_impl` runs as the module being called.
So is a constructor: a model that runs a part on a dummy input in its `__init__` (to size
its head) does not hold its later parts yet, and its names are taken when it is called,
which absorbs that part (`_absorb`).

# Note [A wrapper of the model]
An EMA module holds the model and its shadow copy (ema-pytorch's `EMA(model)`:
`online_model` and `ema_model`) and its `__call__` runs the copy: evaluating with
`ema(x)` makes the EMA the outermost module whose method called a module it holds (Note
[A model called through its methods]). Two ways that went wrong:
1. After the first optimizer step, `_absorb` took the model into the new top-level
   module, which took the model's names: from then on the model's calls read
   `online_model.blocks.0`, and `checkpoint:blocks.*` "matches no module" in predict while
   measure, which had named the model at step 1, refused `online_model.blocks.*` (and
   said the model's modules were the EMA copy's). Once the first step has named the
   model, no module absorbs it: the wrapper is named beside it (`EMA`, its copy
   `EMA.ema_model.blocks.0`), the model keeps `blocks.0`.
2. Before that step (the copy evaluated once before training), the wrapper was the first
   top-level module with parameters, so the model; the model's own calls were calls
   inside it, and at the step it stayed the model (it holds every parameter the step
   updates). The model's top-level calls with gradients inside another top-level module
   are now candidates at the first step too, and of those stepping as many parameters the
   one called with gradients wins: the model takes its names, the wrapper is labelled. Its
   names are written after the wrapper's, which hold the model too (the ledger reads the
   last name).

# Note [Root names]
The model's modules keep `named_modules()`'s names (policies select them so). Every other
top-level module is named, at its first call, by the first of these that no other
top-level module has taken (nor a child of the model: `head` would read as the model's):
1. the name the script calls it by: a variable of the calling frame (the first frame
   outside torch, memledger and the module's own methods) bound to that very module, else
   an attribute of that frame's `self` holding it, else a global of that frame (the first
   in definition order if several), else `name.child` where a module so named holds it as
   a child (`ema.ema_model(x)`; an EMA wrapper's own `__call__` running its copy is
   skipped for the script's line that called `ema(x)`: the copy read `Net.blocks.0.fc1.
   weight` and `EMA.ema_model.blocks.0.fc1.weight`, named by the model's class and the
   wrapper's, before);
2. its class name;
3. its class name and an ordinal, `Sequential#2` (order of first call).
A GAN `G = nn.Sequential(...); D = nn.Sequential(...)` with `bce = nn.BCEWithLogitsLoss()`
names D's first weight `D.0.weight` (it read `Sequential.0.weight` beside the
generator's `0.weight`) and the loss `bce`; two losses of one class called through a
helper's argument `crit` read `crit` and `MSELoss`. Every pass runs the same script, so
it finds the same frames and names. A teacher called first names itself then, so it is
`teacher` once the student takes the model's names at the first step. Reading a frame's
variables before Python 3.13 leaves a snapshot of them on the frame (its tensors, kept
until the frame ends): `script_name` empties it.
"""

from __future__ import annotations

import os
import sys
import weakref

import torch

# re-exported: the names other modules take from here
from memledger.ledger.names import COMPILED, WRAPPERS, plain_name  # noqa: F401
from memledger.trace.where import frame_locals as _frame_locals  # noqa: F401 (collector)
from memledger.trace.where import is_user_file

# frames of torch and of memledger are not the script's (Note [Root names])
_NOT_THE_SCRIPT = (os.path.dirname(torch.__file__) + os.sep,
                   os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)


class ByModule:
    """A mapping keyed by module identity that forgets dead modules: a dead module's id is
    reused by the next one made (a loss module built per call), so a dict by id named a
    new model after a dead `ReLU`; identity, not `__eq__`, as a WeakKeyDictionary would use."""

    def __init__(self) -> None:
        self._d: dict[int, tuple[weakref.ref, object]] = {}

    def get(self, m, default=None):
        e = self._d.get(id(m))
        return e[1] if e is not None and e[0]() is m else default

    def nonempty(self) -> bool:
        """Whether any module was put in (alive or not)."""
        return bool(self._d)

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
        self.was = ""   # the label the model had before that step named it (Note [The model])
        self._with_grad = ByModule()        # top-level modules called with gradients on
        # modules a top-level module holds, called on their own with gradients on before
        # the first step: the model a wrapper of it holds (Note [A wrapper of the model])
        self._inner_with_grad = ByModule()
        self._script_name = ByModule()      # top-level module -> the script's name for it
        # the last new top-level module and the ones it absorbed, held weakly: a model
        # copy the script drops (an evaluation snapshot) goes as it would untraced
        self._root: weakref.ref | None = None
        self._absorbed: list[weakref.ref] = []
        self._owner = ByModule()            # module called by its root's method -> the root
        # labels that name no top-level module from the last new one's call on: those it
        # absorbed, and where it is the model, those its children's names take (Note [A
        # label the model's child takes])
        self.retired: list[str] = []
        self.renamed: list[torch.nn.Module] = []   # top-level modules labelled again there
        self._labels: set[str] = set()      # every label given so far, the dead's included
        # submodules registered when the paths were last walked (Note [A module registered
        # after the first call])
        _watch_registrations()
        self.registered = _REGISTERED[0]

    @property
    def root(self) -> torch.nn.Module | None:
        """The last new top-level module (while alive)."""
        return self._root() if self._root is not None else None

    @property
    def absorbed(self) -> list[torch.nn.Module]:
        """The top-level modules the last new one holds (those alive)."""
        return [m for m in (r() for r in self._absorbed) if m is not None]

    def path(self, module: torch.nn.Module, top_level: bool) -> tuple[str | None, bool]:
        """(path, new top-level module) of a module being called; a top-level call names a
        module seen for the first time, or the module whose method called it (`root`: Note
        [A model called through its methods]). A submodule called on its own (a recompute
        in backward) keeps its path. None: a module no top-level module holds."""
        if self.stale(module):   # Note [A module registered after the first call]
            self.look_again()
        new = top_level and module not in self.prefix and module not in self.paths
        if not new and top_level and module in self.prefix and self.model() is None and \
                next(module_parameters(module), None) is None:
            # Note [A part labelled before its model was called]
            owner = method_owner(module)
            new = owner is not None and owner not in self.prefix
        promoted = ""
        if not new and top_level and self.prefix.get(module) and self.model() is None and \
                not self.decided and next(module_parameters(module), None) is not None:
            # Note [A model labelled before its parameters were registered]
            promoted = self.prefix.pop(module)
            new = True
        if new:
            owner = method_owner(module)
            # Note [A model held by the script]: the model whose parts the script calls
            held = script_holder(module, self.model()) if owner is None else None
            root = owner or held or module
            self._root = weakref.ref(root)
            self._absorbed = [weakref.ref(m) for m in self._absorb(root, held is not None)]
            if promoted:
                self.retired.append(promoted)
            has_params = next(module_parameters(root), None) is not None
            self._script_name[root] = script_name(root)
            self.prefix[root] = "" if has_params and self.model() is None \
                else self._label(root)
            self._labels.add(self.prefix[root])
            moved = {id(m) for r in [*self.absorbed, *([root] if promoted else [])]
                     for m in r.modules()}   # a promoted module's parts take its new names
            for m, path in paths_under(root, self.prefix[root]):
                if id(m) in moved:
                    self.paths[m] = path
                else:
                    self.paths.setdefault(m, path)   # a shared submodule keeps its first path
            if root is not module:
                self._owner[module] = root
            if self.prefix[root] == "":
                self._make_way(root)
        if top_level and not self.decided and torch.is_grad_enabled():
            top = module if module in self.prefix else self._owner.get(module)
            if top is not None and top in self.prefix:
                self._with_grad[top] = True
            elif top is None and module in self.paths:
                self._inner_with_grad[module] = True
        return self.paths.get(module), new

    # Note [A module registered after the first call]
    # The paths of a top-level module's submodules are taken at its first call. A module
    # may register a child later: a head built in the model's first forward (`if self.head
    # is None: self.head = nn.Sequential(...)`), litgpt's `set_kv_cache` giving each
    # attention a `kv_cache` module of a model trained already. Its calls had no path: the
    # collector named them by their caller and class and marked them `unowned` (Note
    # [Modules the model makes in its forward], trace/collector.py), and measure's
    # installer, which resolves the policy against `named_modules()` at the model's first
    # call, never saw them: `checkpoint:head` "matches no module" on both sides, where
    # `model.named_modules()` lists `head` by the time the step runs. So torch's global
    # module-registration hook counts registrations (a counter, nothing held), and a call
    # of a module with no path, after a registration since the last look, walks the
    # top-level modules again (`look_again`): the module takes its path under its
    # top-level module, as if it had been there at the first call (a shared submodule
    # keeps its first path). A module made and called in every forward and registered
    # nowhere stays without one (`unowned`); one with children of its own (a Sequential
    # made per call) costs one walk per forward, none otherwise. The collector, the
    # timer, the doctor's probe and measure's installer all ask here (Note [The model]);
    # the installer puts the policy on the modules so found (measure/apply.py, Note [A
    # region registered after the first call]).
    def look_again(self) -> list[tuple[torch.nn.Module, str]]:
        """Walk the top-level modules again for submodules registered since the last walk
        (Note [A module registered after the first call]): (module, path) of those found."""
        self.registered = _REGISTERED[0]
        found = []
        for root, prefix in self.prefix.items():
            for m, path in paths_under(root, prefix):
                if m not in self.paths:
                    self.paths[m] = path
                    found.append((m, path))
        return found

    def stale(self, module: torch.nn.Module) -> bool:
        """Whether a call of `module` should look again (Note [A module registered after
        the first call]): submodules were registered since the last look, and it has no
        path."""
        return self.registered != _REGISTERED[0] and module not in self.paths and \
            module not in self.prefix

    def _absorb(self, module: torch.nn.Module, held: bool = False) -> list[torch.nn.Module]:
        """Top-level modules seen before that `module` holds: they were called on their own
        before it (spectral_norm calls its parametrization while the model is being built),
        and are its submodules from now on; the model's names go with them. Not the model
        once the first step named it, nor ever into a module the script holds it in
        (`held`: Note [A model held by the script])."""
        inside = {id(m) for m in module.modules()}
        # Note [A wrapper of the model], 1
        model = self.model() if self.decided or held else None
        held = [m for m in self.prefix.keys()
                if m is not module and m is not model and id(m) in inside]
        self.retired = [label for label in (self.prefix.pop(m) for m in held) if label]
        self.renamed = []
        return held

    # Note [A model labelled before its parameters were registered]
    # Keras 3 on torch builds a model at its first call, before torch's `__call__` runs:
    # its `call` runs as a method on the meta device (`compute_output_spec`), so the first
    # top-level call is its embedding's, and the model, whose method made it, is the new
    # top-level module (Note [A model called through its methods]). It holds no parameter
    # then: Keras registers them with torch (`_torch_params`, a ParameterDict of every
    # variable under the model) when the build ends. Labelled `LM` beside a model never
    # found, its parameters were never named: 0 B of `parameter` in a Keras training loop,
    # the weights filed `activation` and `temporary` (tests/clients/train_keras.py). While
    # no model is known (before the first optimizer step), a labelled top-level module
    # called again that holds parameters now is new again: the model, where it is the
    # first with parameters, its old label retired (Note [A label the model's child
    # takes]).
    # Note [A part labelled before its model was called]
    # A part a model's constructor calls (botorch's `SingleTaskGP` its `Normalize`, before
    # `nn.Module.__init__`: `_built`) is a top-level module of its own, labelled, and a
    # model called with a hook later absorbs it (`_absorb`, as spectral_norm's
    # parametrization). A model whose own call no hook sees (gpytorch's `__call__`) is
    # never called so: its part's later calls, from the model's forward, were calls of a
    # known top-level module, and the model was never found, its parameters `other` in a
    # fit that no torch optimizer steps (botorch's scipy L-BFGS). So while no model is
    # known, a top-level call of a known module without parameters looks up the stack for
    # a method of a module that holds it (a walk per such call, until a model is found),
    # and that module is new: it absorbs the part and takes its names.
    # Note [A label the model's child takes]
    # Rule 1 of Note [Root names] keeps a label clear of the model's children only once
    # the model is known, and the ledger's `root` record of a label outlives the module
    # (dropped, or absorbed by a later top-level module: Note [The model]). The replay read
    # every call under a `root` label as that module's, beside the model. botorch's
    # `qLogNoisyExpectedImprovement` prunes its baseline in its constructor through a
    # sampler of its own, a local `sampler` in `prune_inferior_points`, labelled so and
    # dropped; the acquisition function, the model from its first call, holds a child
    # `sampler` too, which read as the dropped one's: predict refused `checkpoint:sampler`
    # ("selects modules of 'sampler', which the script calls beside the model") while
    # measure applied it to the model's. So a label is retired where it stops naming a
    # top-level module: absorbed, or, when a module becomes the model, taken by one of its
    # children (a live module so labelled is labelled again, by the same rules). The
    # collector writes a `retired` record; the replay reads calls under a retired label
    # before its event as the former module's, and from there on as the model's.
    def _make_way(self, model: torch.nn.Module) -> None:
        children = {n for n, _ in model.named_children()}
        taken = self._labels & children
        for m, label in self.prefix.items():
            if m is not model and label in taken:
                self.prefix[m] = new = self._label(m)
                self._labels.add(new)
                self.paths.update(paths_under(m, new))
                self.renamed.append(m)
        self.retired += sorted(taken - set(self.retired))

    def _label(self, module: torch.nn.Module, avoid: str = "") -> str:
        """A name for a top-level module besides the model (Note [Root names]); not
        `avoid` either."""
        taken = {p for m, p in self.prefix.items() if m is not module and p} | {avoid}
        model = self.model()
        if model is not None and model is not module:
            taken |= {n for n, _ in model.named_children()}
        cls = type(module).__name__
        for name in (self._script_name.get(module), cls):
            if name and name not in taken:
                return name
        i = 2
        while f"{cls}#{i}" in taken:
            i += 1
        return f"{cls}#{i}"

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
        inner = [m for m in self._inner_with_grad.keys() if m not in self.prefix]
        # most parameters stepped; of a tie, one called with gradients (the model that a
        # wrapper holding it and its EMA copy ties with: Note [A wrapper of the model])
        count = [(sum(id(p) in stepped for p in module_parameters(m)),
                  m in self._with_grad or m in self._inner_with_grad, i, m)
                 for i, m in enumerate([*self.prefix.keys(), *inner])]
        n, _, _, best = max(count, key=lambda c: (c[0], c[1], -c[2]), default=(0, 0, 0, None))
        if best is None or best is held or n == 0:
            return []
        if _holds_more_trained(held, best):   # Note [A model of several trained parts]
            return []
        before = self.prefix.get(best, self.paths.get(best, ""))
        self.was = before
        self.prefix[best] = ""
        # labelled as the new model's neighbour: while both read "" the old one was the
        # model `_label` kept clear of, and TRL's DPO with precomputed reference log-probs
        # named its reference `model`, a child of the new model; nor the name the new model
        # had, which its calls before this step were recorded with (Note [Root names])
        self.prefix.pop(held)
        self.prefix[held] = self._label(held, avoid=before)
        self._labels.add(self.prefix[held])
        for m in (held, best):   # the new model's paths win where `held` holds it
            self.paths.update(paths_under(m, self.prefix[m]))
        return [best, held]

    def alive(self) -> list[torch.nn.Module]:
        return list(self.prefix.keys())


# Note [A model of several trained parts]
# Stable-Baselines3's off-policy algorithms keep an actor and a critic in one policy module,
# each with an optimizer of its own. The rollout calls the policy (`policy.predict`, under
# `no_grad`), so the policy is the first top-level module with parameters; then the first
# gradient step trains the critic, called with gradients on its own. Where the entropy
# coefficient's optimizer steps first (SAC, TQC: a bare tensor, no module's) the policy
# stayed the model; where the critic's does (sb3-contrib's CrossQ, SB3's TD3) the rule for
# a teacher run under `no_grad` (Note [The model]) moved the model to the critic, which
# ties with the policy on the parameters that step updates and was called with gradients:
# the actor read `policy.actor.latent_pi` beside the model and the critic `qf0`. A user's
# `critic.qf0`, as the policy's `named_modules()` names it, matched no module in predict
# while measure, whose policy applies to the first model until that step, re-ran
# `critic.qf0` in the critic's first call and failed there (two reasons for one policy),
# and no policy could select the actor at all. A module that holds the candidate and
# parameters besides it that an optimizer trains (the actor's, which the actor's optimizer
# steps) is a model of several trained parts, and stays the model; a wrapper of the model
# and its copy (ema-pytorch's EMA: Note [A wrapper of the model]) holds none that any
# optimizer trains besides it, and the model still moves into it. The optimizers are found
# among the live objects, once per pass, only where a model holding its candidate would
# move (as Note [An optimizer that never steps] finds them, trace/optimizer_like.py).
def _holds_more_trained(held: torch.nn.Module, best: torch.nn.Module) -> bool:
    """`held` holds `best` and parameters outside it that a live optimizer holds."""
    if not any(m is best for m in held.modules()):
        return False
    inside = {id(p) for p in module_parameters(best)}
    outside = {id(p) for p in module_parameters(held) if id(p) not in inside}
    if not outside:
        return False
    from memledger.trace.optimizer_like import optimizers_alive

    return any(id(p) in outside for opt in optimizers_alive()
               for g in opt.param_groups for p in g["params"])


def method_owner(module: torch.nn.Module) -> torch.nn.Module | None:
    """The outermost module whose method, running in a frame outside torch and memledger,
    called `module` at the top level and holds it (Note [A model called through its
    methods]), among those the script's own code names if it names any (Note [A library's
    wrapper around the model]); None when no such frame is on the stack."""
    owners: list[torch.nn.Module] = []   # innermost first
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_argcount and code.co_varnames[0] == "self" and \
                code.co_name != "__init__" and not code.co_filename.startswith(_NOT_THE_SCRIPT):
            with _frame_locals(f) as local:
                me = local.get("self")
            if isinstance(me, torch.nn.Module) and me is not module and _built(me) and \
                    any(m is module for m in me.modules()) and \
                    not any(o is me for o in owners):
                owners.append(me)
        f = f.f_back
    if len(owners) > 1:
        named = _named_by_user_code({id(o) for o in owners})
        owners = [o for o in owners if id(o) in named] or owners
    return owners[-1] if owners else None


# Note [A module called while a module is built]
# A constructor may call modules: nGPT-pytorch's `NormLinear.__init__` (with
# `manual_norm_weights`) normalizes its new weight through `norm_weights_`, which calls
# its `L2Norm` module on it; registering a parametrization calls it to check the shape.
# Such a call at the top level is the model being built, no forward: the `L2Norm` (no
# parameters, held by the `NormLinear` whose method called it) opened a "forward", and as
# it returned the "loss" began, so the rest of the build (every parameter, the rotary
# embedding's 256 KiB cache) was filed in "loss": `show`'s peak by phase read setup 2,048
# B (tests/clients/train_ngpt.py --manual --renorm manual). While the frame of an
# `nn.Module`'s `__init__` is on the stack (in setup), a weight read or a top-level call
# of a module without parameters leaves the phase as it is; how the call is named and
# counted stays as it was, and a call of a module with parameters (a shape probe's
# forward) still opens a forward.
def building_a_module() -> bool:
    """Whether a frame of an `nn.Module` subclass's `__init__` is on the stack (Note [A
    module called while a module is built])."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name == "__init__" and code.co_argcount and code.co_varnames[0] == "self":
            with _frame_locals(f) as local:
                if isinstance(local.get("self"), torch.nn.Module):
                    return True
        f = f.f_back
    return False


# Note [A library's wrapper around the model]
# A library may wrap the script's model in modules of its own, made per call, and call the
# model's methods through theirs: torchsde's `sdeint(sde, ..., logqp=True, names=...)` wraps
# the user's SDE in `RenameMethodsSDE`, then `SDELogqp`, and calls `SDELogqp.f`, which calls
# the user's `f`, which calls `self.drift`. The outermost method's module was `SDELogqp`, so
# the model was torchsde's per-call wrapper and every name read
# `_base_sde._base_sde.drift.blocks.0` (the policy the user writes from their own module,
# `checkpoint:drift.blocks.*`, matched nothing). Among several method owners on the stack,
# the outermost one that code of the script's own files names (a local variable, module-level
# code's globals among them, or `self`) is taken: the user's SDE there; the wrappers, bound
# to no name of the script's, are passed over. normflows' `NormalizingFlow` the script binds
# to `model` stays the model when its methods call the script's own flow classes.
def _named_by_user_code(ids: set[int]) -> set[int]:
    """Which of the modules `ids` a frame of the script's own files binds to a name."""
    found: set[int] = set()
    f = sys._getframe(2)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            with _frame_locals(f) as local:
                found.update(id(v) for v in list(local.values()) if id(v) in ids)
        f = f.f_back
    return found


# Note [A model held by the script]
# A script may never call its model, nor a method of it, only its parts, from its own loop:
# `for b in model["blocks"]: h = b(h)` (mixture-of-attention's padded sequences, the blocks
# in an `nn.ModuleDict` that has no forward), or the research shape `x = model.embed(ids);
# for blk in model.blocks: x = blk(x); logits = model.head(x)`. The first part called was
# the model (block 0, or `embed`), its modules named `fc1`, `norm`, ..., and the next parts
# were named beside it by the loop variable (`b.fc1`) or the script's words (`model.head`):
# `checkpoint:*` covered block 0 only, and `checkpoint:blocks.*`, which the user writes
# from `model.named_modules()`, was refused by predict and measure alike as matching no
# module (tests/clients/train_parts_loop.py). Note [A model called through its methods]
# finds the holder on the stack, as a method's `self`; here no frame of it is on the
# stack, and the script holds it by a name. So a top-level call of a module seen for the
# first time with no method owner looks at the names of the calling frame (the frame Note
# [Root names] reads: its locals, its `self`'s attributes, its globals) for modules that
# hold the called one among their descendants; the outermost of them is the top-level
# module instead, the model by the rules of Note [The model], and the parts take their
# `named_modules()` paths under it (`blocks.0`). Only modules count: a Trainer-like object
# that holds everything is looked into only as the frame's `self`. Such a holder never
# absorbs the model (`_absorb`): where it holds the model already (an EMA wrapper whose
# copy the script runs by its parts, `for b in ema.ema_model.blocks`) it is named beside
# it, as Note [A wrapper of the model], 1, names a wrapper, and the copy's parts read
# `ema.ema_model.blocks.0` (they read `b` and `Block` before). Passed over:
# - a module with a forward of its own that holds nothing besides the called module (a
#   wrapper of it: torch.compile's, DDP, Fabric's, which the script called around): the
#   module called whole is its own model, as before; a container without a forward (an
#   `nn.ModuleDict`) is a root for names even then;
# - a wrapper of one module it holds (the called one, or one a name of the frame binds):
#   one whose parameters besides that module are an untrained copy of it (same shapes, in
#   order; untrained: held by no live optimizer that trains any of the holder's
#   parameters, or, where no such optimizer is alive yet, not requiring gradients: an
#   optimizer of another model left alive in the process, as an earlier test's in one
#   pytest worker, made `test_roots.py`'s two-block ModuleDict read as a model and its
#   copy), as ema-pytorch's `EMA(model)` holds the model and its copy, and
#   Stable-Baselines3's `DQNPolicy` its `q_net` and `q_net_target` (DQN's `train()` calls
#   the target first, under no_grad, through `self.q_net_target`: the policy holding both
#   was taken for the model there, and the gradients read `q_net.0.bias (and 1 more)`,
#   tests/clients/test_sb3_clients.py); the model inside the wrapper is the holder where it
#   holds the called module, else the called module stays a top-level module of its own.
#   Not where the module it wraps is the model already: then the wrapper is named beside
#   it (above). DQN's `q_net`, called after its target was taken for the model, is still
#   a top-level module of its own: the policy wraps `q_net`, not the target.
# Two models held separately (a GAN's `G` and `D`, a teacher and its student) and a loss
# module held by none stay apart: no name of the script holds both. A module that holds
# both (a `System` holding `gen` and `disc`, a `ModuleList` of them) is the model, as a
# module holding several trained parts is (Note [A model of several trained parts]). A
# constructor's frame is passed over, as `method_owner` passes it. The collector, the
# timer, measure's installer and the doctor's probe ask here through `RootNames.path`, and
# `ForwardStarts` (trace/steps.py) counts the holder's first part as a forward's start, as
# it does a method owner's. The walk runs at a module's first top-level call only (a loss
# module made per call pays it at each: one frame's names), and the optimizers are looked
# for only where a candidate holds a copy of the same shapes.
def script_holder(module: torch.nn.Module,
                  model: torch.nn.Module | None = None) -> torch.nn.Module | None:
    """The outermost module a name of the calling frame binds that holds `module` among its
    descendants (Note [A model held by the script]); None where there is none, or only
    wrappers. A wrapper of `model` (the model so far) is named beside it, not passed over."""
    f = _script_frame(module)
    if f is None or f.f_code.co_name == "__init__":
        return None
    named: list[torch.nn.Module] = []   # the modules the frame's names bind, once each
    for _, value in _frame_names(f):
        if isinstance(value, torch.nn.Module) and _built(value) and \
                not any(v is value for v in named):
            named.append(value)
    found = [v for v in named if v is not module and _holds(v, module)]
    if not found:
        return None
    own = {id(p) for p in module_parameters(module)}
    found = [h for h in found
             if _no_forward(h) or any(id(p) not in own for p in module_parameters(h))]
    trained: list[set[int] | None] = [None]   # looked for once, where needed
    held = [h for h in found
            if not any(_a_copy_beside(h, m, trained) for m in [module, *named]
                       if m is not h and m is not model and _holds(h, m))]
    outer = [h for h in held if not any(o is not h and _holds(o, h) for o in held)]
    return outer[0] if outer else None


# ids of the modules under a module the script names: id -> (the module, weakly; the
# registration count they were taken at; the ids). Walked again after a registration
# (Note [A module registered after the first call]); a loss module made per call checks
# the script's model once, not per call (torch's `modules()` walked 1,201 modules in 12 ms
# on a busy box, per call)
_UNDER: dict[int, tuple[weakref.ref, int, frozenset[int]]] = {}


def _holds(holder: torch.nn.Module, module: torch.nn.Module) -> bool:
    """`module` is `holder` or one of its descendants."""
    _watch_registrations()   # a pass with no RootNames (StepCounter's ForwardStarts) too
    hit = _UNDER.get(id(holder))
    if hit is None or hit[0]() is not holder or hit[1] != _REGISTERED[0]:
        ids, stack = {id(holder)}, [holder]
        while stack:
            for c in stack.pop()._modules.values():
                if c is not None and id(c) not in ids:
                    ids.add(id(c))
                    stack.append(c)
        for k in [k for k, v in _UNDER.items() if v[0]() is None]:
            del _UNDER[k]
        hit = _UNDER[id(holder)] = (weakref.ref(holder), _REGISTERED[0], frozenset(ids))
    return id(module) in hit[2]


def _a_copy_beside(holder: torch.nn.Module, inner: torch.nn.Module,
                   trained: list) -> bool:
    """`holder` holds, besides `inner`, only an untrained copy of it (Note [A model held by
    the script]: an EMA wrapper)."""
    shapes = [p.shape for p in module_parameters(inner)]
    mine = {id(p) for p in module_parameters(inner)}
    rest = []
    for p in module_parameters(holder):   # stops one past the copy's length
        if id(p) not in mine:
            rest.append(p)
            if len(rest) > len(shapes):
                return False
    if not rest or [p.shape for p in rest] != shapes:
        return False
    if trained[0] is None:
        from memledger.trace.optimizer_like import optimizers_alive

        trained[0] = {id(p) for o in optimizers_alive() for g in o.param_groups
                      for p in g["params"]}
    # only an optimizer that trains some of `holder` says what it trains: one left alive
    # elsewhere in the process (an earlier run in a notebook, an earlier test) says nothing
    # of this model, and its parameters must not make the second block read as a copy
    if not any(id(p) in trained[0] for p in module_parameters(holder)):
        return not any(p.requires_grad for p in rest)
    return not any(id(p) in trained[0] for p in rest)


def _built(module: torch.nn.Module) -> bool:
    """`nn.Module.__init__` has run on `module`. A subclass may call its own methods before
    it does: botorch's `SingleTaskGP.__init__` runs `self.transform_inputs(X)`, which calls
    the `Normalize` it is handed, before `super().__init__()`; that frame's `self` has no
    `_modules` yet, and `modules()` raised AttributeError inside the module pre-hook (every
    botorch model: `trace` exit 70). Such a module holds no submodule yet."""
    return "_modules" in vars(module)


def script_name(module: torch.nn.Module) -> str | None:
    """The name the script calls `module` by, in the first frame outside torch and
    memledger and `module`'s own methods (Note [Root names], 1): a name bound to it, else
    `name.child` for a module so named that holds it as a child (`ema.ema_model`); None
    when it has none there."""
    names = _script_names(skip=module)
    found = next((name for name, value in names if value is module), None)
    if found is None:
        found = next((f"{name}.{child}" for name, value in names
                      if isinstance(value, torch.nn.Module)
                      for child, sub in value._modules.items() if sub is module), None)
    return found


def script_modules() -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every module the script's frame names (Note [Modules never
    called]), first by local, then by its `self`'s attributes, then by global."""
    seen: set[int] = set()
    out = []
    for name, value in _script_names():
        if isinstance(value, torch.nn.Module) and id(value) not in seen:
            seen.add(id(value))
            out.append((name, value))
    return out


def _script_names(skip: torch.nn.Module | None = None) -> list[tuple[str, object]]:
    """(name, value) of the first frame outside torch and memledger (and outside the
    methods of `skip`: a module called through its own `__call__`, as an EMA wrapper runs
    its copy): its locals, its `self`'s attributes and submodules, its globals (public
    identifiers only)."""
    f = _script_frame(skip)
    return [] if f is None else _frame_names(f)


def _script_frame(skip: torch.nn.Module | None = None):
    """The first frame outside torch and memledger and the methods of `skip`; None."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(_NOT_THE_SCRIPT)
                             or (skip is not None and _self_of(f) is skip)):
        f = f.f_back
    return f


def _frame_names(f) -> list[tuple[str, object]]:
    """(name, value) of frame `f`'s locals, its `self`'s attributes and submodules, its
    globals (public identifiers only)."""
    with _frame_locals(f) as local:
        owner = local.get("self")
        # `_modules` is an nn.Module's dict of submodules; another class's may be anything
        # (skorch's `NeuralNet._modules` is a list of names: `{**list}` raised inside the
        # optimizer's step pre-hook, and `trace` failed as "script raised TypeError")
        mods = getattr(owner, "_modules", None)
        held = {**vars(owner), **(mods if isinstance(mods, dict) else {})} \
            if owner is not None and hasattr(owner, "__dict__") else {}
        return [(name, value) for space in (local, held, f.f_globals)
                for name, value in list(space.items())
                if name.isidentifier() and not name.startswith("_") and name != "self"]


def _self_of(f) -> object:
    """The `self` of a method's frame; None for any other frame."""
    code = f.f_code
    if not (code.co_argcount and code.co_varnames[0] == "self"):
        return None
    with _frame_locals(f) as local:
        return local.get("self")


# COMPILED, WRAPPERS and plain_name live in memledger/ledger/names.py (no torch there, imported
# above): a policy's selector is read by the same rule (replay/policies.py, Note [Selectors
# through a wrapper]).


# Note [A module registered after the first call]: how many submodules were registered
# (assigned or added to a module) in this process since memledger first named one; torch's
# global hook, installed once, counts and holds nothing
_REGISTERED = [0]
_REGISTRATION_HOOK: list = []


def _count_registration(parent, name, sub) -> None:
    _REGISTERED[0] += 1


def _watch_registrations() -> None:
    if not _REGISTRATION_HOOK:
        _REGISTRATION_HOOK.append(
            torch.nn.modules.module.register_module_module_registration_hook(
                _count_registration))


def named_modules(root: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """`root.named_modules()` under the model's own names (`plain_name`): a policy's
    `blocks.*` selects the same modules with or without torch.compile."""
    return [(plain_name(n), m) for n, m in root.named_modules()]


# Note [A module under a second path]
# A model may register one module object under several paths: perceiver-pytorch's
# `weight_tie_layers=True` builds its layers with a `cache_fn` that hands every layer after
# the first the same `PerceiverBlock`, so `self.layers` holds it as `layers.1`, `layers.2`,
# ... `print(model)` shows every one of them, while `named_modules()`, which names the
# modules a policy selects among (and the trace names the calls by), lists the object once,
# by its first path. A user who read `layers.2` off the printed model and wrote
# `checkpoint:layers.2` was told "matches no module" by predict and measure alike, with a
# list of module names in which the very module meant sat under another name
# (tests/clients/train_perceiver.py --tie). Both sides now know each module's other paths
# (the trace writes them, `aliases` records; measure reads the model) and say that the
# selector names a module by a second path, which one it is, and that a policy on it acts on
# every call of it. Not read as the first path: the user meant one layer, and a policy is
# put on a module, so on all its calls.
#
# The walk is torch's own order (pre-order, children as registered) without its memo, so
# that a shared module's submodules get their second paths too (`layers.2.cross_attn`), and
# stops at a cycle (performer-pytorch's `ProjectionUpdater` holds the `Performer` it sits
# in) and after `_ALIASES_AT_MOST` second paths (a shared subtree held many times).
_ALIASES_AT_MOST = 10_000


def module_aliases(root: torch.nn.Module) -> dict[str, str]:
    """Each second path of a module under `root` -> the path `named_modules()` names it by
    (Note [A module under a second path]); plain names, as `named_modules` gives them."""
    first = {id(m): n for n, m in named_modules(root)}
    out: dict[str, str] = {}
    stack: list[tuple[str, torch.nn.Module, frozenset]] = [("", root, frozenset((id(root),)))]
    while stack and len(out) < _ALIASES_AT_MOST:
        path, mod, chain = stack.pop()
        name, named = plain_name(path), first.get(id(mod))
        if path and named is not None and name != named and name not in out:
            out[name] = named
        children = [(f"{path}.{k}" if path else k, c) for k, c in mod._modules.items()
                    if c is not None and id(c) not in chain]
        stack.extend((p, c, chain | {id(c)}) for p, c in reversed(children))
    return out


# Note [A forward that is no function]
# A module may say it has no forward by setting the attribute to something that cannot be
# called: geoopt's manifolds (`PoincareBall`, `Stiefel`, ... are nn.Modules, holding the
# curvature as a parameter) set `forward = NotImplemented`, and the code calls their other
# methods (`ball.dist(x, y)`, `ball.expmap0(u)`). Only torch's own placeholder was taken for
# "no forward", so `checkpoint:*` on a Poincare embedding (the model, its `ball`) was
# refused by predict as "never called as a module: the code runs its work through another
# of its methods ... or call the module itself (`self.ball(x)`)", which raises, and by
# measure, which saw no gradient of the curvature (it is not trained), as "never ran in the
# steps (the script's input never reaches them ...)", though `ball.dist` ran every step.
# A forward that is not callable is no forward either: such a module is a container to
# both sides, passed over by a glob and refused in the same words when selected alone;
# with no submodule that ran, the words say its methods run, not its submodules.
def _no_forward(m: torch.nn.Module) -> bool:
    """Whether `m` has no forward of its own: torch's placeholder, or one that cannot be
    called (Note [A forward that is no function])."""
    # the instance's forward, not the class's: a scripted module's is found on the instance
    fwd = getattr(m, "forward", None)
    return not callable(fwd) or getattr(fwd, "__func__", None) is torch.nn.Module.forward


def containers(root: torch.nn.Module) -> dict[str, str]:
    """path -> class name of each module under `root` with no forward of its own (an
    nn.ModuleList, nn.ModuleDict; Note [A forward that is no function]): a policy never
    selects one (Note [Containers], replay/policies.py)."""
    return {name: type(m).__name__ for name, m in named_modules(root)
            if name and _no_forward(m)}


def paths_under(root: torch.nn.Module, prefix: str) -> list[tuple[torch.nn.Module, str]]:
    """(module, path) for `root` and its submodules, under `prefix`."""
    return [(m, ".".join(p for p in (prefix, name) if p)) for name, m in named_modules(root)]


# Note [Parameters read without the module's own method]
# Keras 3 on torch (`keras.layers.Layer` is a `torch.nn.Module`) overrides
# `named_parameters()`: a layer's first call of it makes `layer._torch_params`, a
# ParameterDict of its variables' values *as they are then*, and keeps it. Keras builds a
# layer by running its `call` on the meta device before its variables hold values
# (`compute_output_spec`), and memledger's hooks asked `next(module.parameters(), None)`
# at each of those top-level calls: every layer got a `_torch_params` of meta placeholders
# there, which the untraced run never makes (it makes the model's after the build, of the
# real weights). The traced model then had parameters during its build, so each call the
# build made began a step under `--steps-by forward`: the ledger pass traced 5 steps of a
# `fit` (3 of a custom loop) where the allocator pass counted 2, no measured peak, and the
# parameters named were the placeholders (tests/clients/train_keras.py). So the passes
# read a module's parameters as torch registers them (torch's own `named_parameters`, not
# the class's), which leaves the module as it was; a layer that registered none yet has
# none.
def module_named_parameters(module, recurse: bool = True, remove_duplicate: bool = True):
    """(name, parameter) as torch's own `named_parameters` lists them, not an override of
    the module's class (Note [Parameters read without the module's own method])."""
    return torch.nn.Module.named_parameters(module, recurse=recurse,
                                            remove_duplicate=remove_duplicate)


def module_parameters(module, recurse: bool = True):
    """The parameters torch's own `named_parameters` lists (Note [Parameters read without
    the module's own method])."""
    return (p for _, p in module_named_parameters(module, recurse=recurse))


# Note [Every parameter of a model, in one walk]
# The collector reads every parameter of the models alive several times a step: the
# `.grad`s as each backward pass begins and ends (Note [The pass that writes the
# gradients], ledger/model.py), the gradients it names at a pass's end and at the
# optimizer's hooks. torch's `named_parameters` is a generator over `named_modules`, a
# generator of generators one level per depth, and builds every name: 590 us of the
# collector's 815 us per read of the tiny GPT's 52 `.grad`s (benchmarks/overhead.py, box
# under load), four reads a step. `all_parameters` walks the same tree by hand, as those
# two methods do (pre-order, children as registered, each module and each parameter once
# by the same `in` test on sets of them) and builds no name: the same parameters in the
# same order. A module whose class has its own `named_modules` (followed by torch's walk
# below the root) or a root with its own `_named_members` is read through torch's.
_NAMED_MODULES = torch.nn.Module.named_modules
_NAMED_MEMBERS = torch.nn.Module._named_members
_MODULE_HASH = torch.nn.Module.__hash__
_TENSOR_HASH = torch.Tensor.__hash__


def all_parameters(module) -> list:
    """`list(module_parameters(module))`, in one walk without names (Note [Every parameter
    of a model, in one walk])."""
    if type(module)._named_members is not _NAMED_MEMBERS:
        return list(module_parameters(module))
    out: list = []
    memo: set[int] = set()   # ids: a tensor's hash is its id (`Tensor.__hash__`), a
    seen: set[int] = set()   # module's its identity, where the class keeps them
    stack = [module]
    while stack:
        m = stack.pop()
        cls = type(m)
        if cls.named_modules is not _NAMED_MODULES or cls.__hash__ is not _MODULE_HASH:
            return list(module_parameters(module))
        if id(m) in seen:
            continue
        seen.add(id(m))
        for _, v in m._parameters.items():
            if v is None or id(v) in memo:
                continue
            if type(v).__hash__ is not _TENSOR_HASH:
                return list(module_parameters(module))
            memo.add(id(v))
            out.append(v)
        if (children := m._modules):
            stack += [c for c in reversed(children.values()) if c is not None]
    return out

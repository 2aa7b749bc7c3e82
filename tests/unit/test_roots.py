"""Note [The model] (memledger/trace/roots.py): the names of top-level modules, and which
one is the model, as the collector, ModuleTimer and measure's installer all decide it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memledger.errors import PolicyError
from memledger.trace.roots import RootNames


def _call(names: RootNames, _m: nn.Module) -> str:
    # `_m`: a name Note [Root names] skips, so these modules are named by their class
    return names.path(_m, top_level=True)[0]


def _traced(run) -> tuple[list[str], set[str]]:
    """(`root` records, parameter names) of a Collector's ledger records for `run()`."""
    from memledger.ledger.writer import MemorySink
    from memledger.trace.collector import Collector

    sink = MemorySink()
    with Collector(sink):
        run()
    roots = [r["mod"] for r in sink.records if r["k"] == "root"]
    params = {r["name"] for r in sink.records if r["k"] == "role" and r["role"] == "parameter"}
    return roots, params


def test_roots_are_named_as_the_script_calls_them():
    # Note [Root names]: a GAN of two Sequentials read `0.weight` and `Sequential.0.weight`
    G = nn.Sequential(nn.Linear(4, 8))
    D = nn.Sequential(nn.Linear(8, 1))
    kept = [nn.Sequential(nn.Linear(4, 4)) for _ in range(3)]

    def run():
        D(G(torch.randn(2, 4))).sum().backward()
        for m in kept:   # `m` taken by the first, then the class: the class and an ordinal
            m(torch.randn(2, 4))
        torch.optim.SGD(G.parameters(), lr=0.1).step()

    roots, params = _traced(run)
    assert roots == ["D", "m", "Sequential", "Sequential#2"]
    assert {"0.weight", "D.0.weight", "m.0.weight", "Sequential.0.weight",
            "Sequential#2.0.weight"} <= params


def test_a_teacher_is_named_by_the_script_once_its_student_is_the_model():
    teacher, student = nn.Sequential(nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 4))

    def run():
        with torch.no_grad():
            target = teacher(torch.randn(2, 4))
        ((student(torch.randn(2, 4)) - target) ** 2).sum().backward()
        torch.optim.SGD(student.parameters(), lr=0.1).step()

    roots, params = _traced(run)
    # the student, called second, was `student` until the first step made it the model
    assert roots == ["student", "teacher"]
    assert {"0.weight", "teacher.0.weight"} <= params


def test_a_dead_modules_id_does_not_name_the_next_one():
    names = RootNames()
    for _ in range(50):     # ids of freed modules are reused at once
        _call(names, nn.ReLU())
    net = nn.Sequential(nn.Linear(2, 2))
    assert _call(names, net) == "" and names.paths.get(net[0]) == "0"


def test_the_model_moves_from_a_teacher_to_its_student_at_the_first_step():
    names = RootNames()
    teacher, proj, student = nn.Linear(8, 4), nn.Linear(8, 4), nn.Sequential(nn.Linear(4, 4))
    with torch.no_grad():
        _call(names, teacher)
    _call(names, proj)                       # wants gradients, but no optimizer steps it
    _call(names, student)
    assert [names.prefix[m] for m in (teacher, proj, student)] == ["", "Linear", "Sequential"]
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    assert names.on_step(opt) == [student, teacher]
    # `Linear` is proj's: two top-level Linears once shared it (Note [Root names])
    assert [names.prefix[m] for m in (teacher, student)] == ["Linear#2", ""]
    assert names.paths.get(student[0]) == "0" and names.paths.get(teacher) == "Linear#2"
    assert names.on_step(opt) == []          # decided once


def test_a_teacher_renamed_at_the_step_takes_no_name_of_the_new_model():
    """TRL's DPO with `precompute_ref_log_probs=True` runs its reference model (a copy of
    the policy's class) before training, where TRL's frame calls it `model`: the reference
    was the model until the first step, then named `model`, which is the policy's own
    child (`LlamaForCausalLM.model`), and predict refused `model.layers.*` as "modules of
    'model', which the script calls beside the model". Nor may it take the name the policy
    had before the step (its class), which the policy's earlier calls were recorded with."""
    class Lm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

    def precompute(model: nn.Module) -> str:   # TRL's frame: the reference as `model`
        with torch.no_grad():
            return names.path(model, top_level=True)[0]

    names = RootNames()
    ref, policy = Lm(), Lm()
    assert precompute(ref) == ""
    assert _call(names, policy) == "Lm"
    assert names.on_step(torch.optim.SGD(policy.parameters(), lr=0.1)) == [policy, ref]
    assert [names.prefix[m] for m in (policy, ref)] == ["", "Lm#2"]
    assert names.paths.get(policy.model) == "model" and names.paths.get(ref.model) == "Lm#2.model"


def test_a_model_that_ran_with_gradients_keeps_its_names():
    # a GAN: the generator is called first, with gradients; the discriminator's optimizer
    # steps first. The generator stays the model.
    names = RootNames()
    gen, disc = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 1))
    _call(names, gen)
    _call(names, disc)
    assert names.on_step(torch.optim.SGD(disc.parameters(), lr=0.1)) == []
    assert (names.prefix[gen], names.prefix[disc]) == ("", "Sequential")


def test_a_module_called_on_its_own_while_the_model_is_built_becomes_the_models():
    # spectral_norm calls its parametrization as it registers it, before the model that
    # holds it runs: that container was the model, and every policy was refused
    names = RootNames()
    fc = torch.nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4))
    pl = fc.parametrizations.weight
    _call(names, pl)
    assert names.prefix[pl] == ""
    net = nn.Sequential(nn.Linear(4, 4), nn.Sequential(fc))
    assert _call(names, net) == "" and names.absorbed == [pl]
    assert pl not in names.prefix and names.model() is net
    assert names.paths.get(pl) == "1.0.parametrizations.weight"
    assert names.paths.get(fc) == "1.0"


def test_a_compiled_model_keeps_its_own_names():
    """torch.compile wraps the model in an OptimizedModule that holds it as `_orig_mod`:
    the ledger, the doctor and the policies name its modules as the model does (`0`,
    `0.weight`), not `_orig_mod.0`."""
    import torch

    from memledger.trace.roots import named_modules, paths_under, plain_name

    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    compiled = torch.compile(model, backend="eager")
    assert plain_name("_orig_mod.0.weight") == "0.weight" and plain_name("_orig_mod") == ""
    assert [n for n, _ in named_modules(compiled)] == ["", "", "0"]
    assert dict((id(m), p) for m, p in paths_under(compiled, ""))[id(model[0])] == "0"


def test_a_model_set_up_by_lightning_fabric_keeps_its_own_names():
    """Lightning Fabric's `fabric.setup(model)` wraps it in a `_FabricModule` holding it as
    `_forward_module` (and `_original_module`, the same object): `blocks.*` selected
    nothing before ("the model's modules are _forward_module (LM), ...")."""
    import torch

    from memledger.trace.roots import named_modules, plain_name

    class FabricLike(torch.nn.Module):   # the shape of lightning_fabric's _FabricModule
        def __init__(self, model):
            super().__init__()
            self._forward_module = model
            self._original_module = model

    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert plain_name("_forward_module.0.weight") == "0.weight"
    assert [n for n, _ in named_modules(FabricLike(model))] == ["", "", "0"]


def test_the_scripts_names_where_self_has_a_modules_list():
    # skorch's `NeuralNet` keeps `_modules` as a list of attribute names; read as a dict of
    # submodules, `{**list}` raised inside the optimizer's step pre-hook (skorch steps in
    # its own method, whose `self` is the net), and `trace` failed as the script's error
    from memledger.trace.roots import script_modules

    class Net:
        _modules = ["module_"]

        def __init__(self) -> None:
            self.module_ = torch.nn.Linear(2, 2)

        def step(self):
            return script_modules()

    net = Net()
    assert ("module_", net.module_) in net.step()


def test_a_top_level_module_the_script_drops_is_not_kept():
    """An evaluation copy called once and dropped goes as it would untraced: RootNames held
    the last new top-level module (and what it absorbed) until the next one was called, so
    `tests/doctor/garbage.py --cycle snapshot --fixed` read 2.1 MiB in both of `memledger
    trace`'s passes where the script holds 1.8 MiB."""
    import gc
    import weakref

    names = RootNames()
    model = nn.Linear(4, 4)
    _call(names, model)
    copy = nn.Sequential(nn.Linear(4, 4))
    _call(names, copy)
    assert names.root is copy
    gone = weakref.ref(copy)
    gc.disable()   # freed by its reference count alone, as untraced
    try:
        del copy
        assert gone() is None and names.root is None
    finally:
        gc.enable()
    assert names.paths.get(model) == ""   # the model keeps its names


def test_a_part_called_before_its_owner_is_built_is_a_root_of_its_own():
    """botorch's `SingleTaskGP.__init__` runs `self.transform_inputs(X)`, which calls the
    `Normalize` it is handed, before `super().__init__()`: the walk for the method's owner
    (Note [A model called through its methods]) read `modules()` of a module with no
    `_modules` yet, and `trace` of every botorch model ended in exit 70 (AttributeError:
    'SingleTaskGP' object has no attribute '_modules'). That part is a top-level module of
    its own now, and the model, called later, absorbs it and takes the names."""

    class Late(nn.Module):
        def __init__(self, norm: nn.Module) -> None:
            self.prepare(norm)          # before nn.Module.__init__, as botorch does
            super().__init__()
            self.norm, self.lin = norm, nn.Linear(2, 1)

        def prepare(self, norm: nn.Module) -> torch.Tensor:
            return norm(torch.ones(1, 2))

        def forward(self, x):
            return self.lin(self.norm(x))

    def run():
        net = Late(nn.LayerNorm(2))
        net(torch.randn(3, 2)).sum().backward()
        torch.optim.SGD(net.parameters(), lr=0.1).step()

    roots, params = _traced(run)
    assert roots == []   # the LayerNorm, the model until Late ran, then renamed under it
    assert params == {"weight", "bias", "lin.weight", "lin.bias", "norm.weight", "norm.bias"}


class _Shadowed(nn.Module):
    """A wrapper as ema-pytorch's EMA is: it holds the model and a copy, and its own
    `__call__` runs the copy (Note [A wrapper of the model])."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.online_model = model
        self.ema_model = nn.Sequential(nn.Linear(4, 4))

    def __call__(self, x):
        return self.ema_model(x)


def test_a_wrapper_holding_the_model_and_its_copy_leaves_the_model_its_names():
    """Evaluated after the first step, the wrapper took the model in: its parameters and
    gradients read `online_model.0.weight` and the copy's `ema_model.0.weight` (the wrapper
    was the model from then on); evaluated before it, the wrapper was the model throughout.
    Now the model keeps `0.weight` and the copy is named by the script's `ema`."""
    for first in (False, True):
        model = nn.Sequential(nn.Linear(4, 4))
        ema = _Shadowed(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def run():
            if first:
                with torch.no_grad():
                    ema(torch.randn(2, 4))
            for _ in range(2):
                model(torch.randn(2, 4)).sum().backward()
                opt.step()
                with torch.no_grad():
                    ema(torch.randn(2, 4))

        from memledger.ledger.writer import MemorySink
        from memledger.trace.collector import Collector

        sink = MemorySink()
        with Collector(sink):
            run()
        last = {}   # the ledger reads the last name of a role
        for r in sink.records:
            if r["k"] == "role" and r["role"] in ("parameter", "gradient"):
                last[(r["sid"], r["role"])] = (r["role"], r.get("name", ""))
        assert set(last.values()) == {
            ("parameter", "0.weight"), ("parameter", "0.bias"),
            ("gradient", "0.weight"), ("gradient", "0.bias"),
            ("parameter", "ema.ema_model.0.weight"), ("parameter", "ema.ema_model.0.bias")}, \
            (first, set(last.values()))
        roots = [r["mod"] for r in sink.records if r["k"] == "root"]
        assert roots[-1] == "ema", (first, roots)


def test_a_module_whose_forward_cannot_be_called_is_a_container():
    """Note [A forward that is no function]: geoopt's manifolds set `forward =
    NotImplemented`; a module list has torch's placeholder; both have no forward, and a
    policy that selects such a module alone is refused in one line, worded by whether a
    submodule of it ran."""
    from memledger.replay.policies import parse_policy, resolve
    from memledger.trace.roots import containers

    class Ball(nn.Module):
        forward = NotImplemented

        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Parameter(torch.ones(()), requires_grad=False)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ball, self.fc = Ball(), nn.Linear(2, 2)
            self.blocks = nn.ModuleList([nn.Linear(2, 2)])

    found = containers(Net())
    assert found == {"ball": "Ball", "blocks": "ModuleList"}
    mods = [("", "Net"), ("ball", "Ball"), ("fc", "Linear"), ("blocks", "ModuleList"),
            ("blocks.0", "Linear")]
    # a glob passes over it, as over the list
    assert [r.path for r in resolve(parse_policy("offload:*"), mods, containers=found)] == \
        ["fc"]
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy("checkpoint:ball"), mods, containers=found)
    assert str(e.value) == (
        "memledger: selector 'ball' matches ball, a Ball: a module with no forward of its "
        "own, whose other methods the code calls (`ball.method(x)`), so a policy on it would "
        "do nothing; select the modules that call it instead")
    with pytest.raises(PolicyError, match="a ModuleList: a container with no forward"):
        resolve(parse_policy("checkpoint:blocks"), mods, containers=found)


class _Part(nn.Module):
    """A layer that reads a weight its model registers (Keras' layers on torch)."""

    def forward(self, x):
        w = self.__dict__.get("w")
        return x * 2 if w is None else x * w


class _BuiltOnFirstCall(nn.Module):
    """A model built as Keras 3 builds one on torch: its `call` runs as a method on the meta
    device first (its part a top-level call), then it registers its weights; a
    `named_parameters` override with an effect (Keras makes `_torch_params` there)."""

    asked = 0

    def __init__(self) -> None:
        super().__init__()
        self.part = _Part()

    def named_parameters(self, *args, **kwargs):
        type(self).asked += 1
        return super().named_parameters(*args, **kwargs)

    def call(self, x):
        return self.part(x)

    def build(self, x) -> None:
        with torch.no_grad():
            self.call(x.to("meta"))   # shape inference
        self.weights = nn.ParameterDict({"lm/w": nn.Parameter(torch.ones(4))})
        self.part.__dict__["w"] = self.weights["lm/w"]

    def forward(self, x):
        return self.call(x)


def test_a_model_that_registers_its_weights_after_its_first_call_is_the_model():
    """Notes [Parameters read without the module's own method] and [A model labelled before
    its parameters were registered] (roots.py): the hooks never call the module's own
    `named_parameters`, and the model, labelled while it held no parameter, is the model
    once it holds some: its weight named `weights.lm/w` (before: no parameter named)."""
    _BuiltOnFirstCall.asked = 0
    m = _BuiltOnFirstCall()
    x = torch.randn(2, 4)

    def run():
        m.build(x)
        m(x).sum().backward()

    roots, params = _traced(run)
    assert params == {"weights.lm/w"}
    assert _BuiltOnFirstCall.asked == 0


class _ActorCritic(nn.Module):
    """A policy as Stable-Baselines3's off-policy ones are: an actor and a critic, each
    trained by its own optimizer; acting calls the actor through the policy's method."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(4, 2))
        self.critic = nn.Sequential(nn.Linear(6, 1))

    def act(self, obs):
        return self.actor(obs)


def test_a_model_of_several_trained_parts_stays_the_model():
    """Note [A model of several trained parts]: the policy is called under no_grad (the
    rollout), then the critic with gradients, whose optimizer steps first (CrossQ, TD3).
    The critic was taken for the model: its weight read `0.weight` and the actor's
    `policy.actor.0.weight`. The policy stays the model; an EMA wrapper (whose copy no
    optimizer holds) still gives way (the test above)."""
    policy = _ActorCritic()
    critic_opt = torch.optim.SGD(policy.critic.parameters(), lr=0.1)
    actor_opt = torch.optim.SGD(policy.actor.parameters(), lr=0.1)

    def run():
        for _ in range(2):
            with torch.no_grad():
                a = policy.act(torch.randn(3, 4))
            policy.critic(torch.cat([torch.randn(3, 4), a], 1)).sum().backward()
            critic_opt.step()
            critic_opt.zero_grad()
            policy.critic(torch.cat([torch.randn(3, 4), policy.actor(torch.randn(3, 4))],
                                    1)).sum().backward()
            actor_opt.step()
            actor_opt.zero_grad()

    roots, params = _traced(run)
    assert roots == []
    assert params == {"actor.0.weight", "actor.0.bias", "critic.0.weight", "critic.0.bias"}


def test_a_child_registered_after_the_first_call_takes_its_path():
    # Note [A module registered after the first call]: a head built at the model's first
    # call, and a child given to a block later, are named by their paths; a module made
    # and registered nowhere has none
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4)))
    names = RootNames()
    assert _call(names, model) == ""
    model.head = nn.Sequential(nn.ReLU(), nn.Linear(4, 2))
    assert names.stale(model.head)
    assert names.path(model.head, top_level=False) == ("head", False)
    assert names.path(model.head[1], top_level=False) == ("head.1", False)
    model[1].add_module("late", nn.Tanh())
    loose = nn.Sequential(nn.GELU())
    assert names.path(loose, top_level=False) == (None, False)
    assert names.path(model[1].late, top_level=False) == ("1.late", False)
    assert not names.stale(loose)   # looked already: no registration since


def test_a_module_under_several_paths_is_known_by_each_second_path():
    # Note [A module under a second path]: tied layers (one block registered as layers 1
    # to 3), their submodules too, in the order torch lists paths; a module holding the
    # module it sits in (a cycle) ends the walk there; a compile wrapper's own segment
    # is no second path
    from memledger.trace.roots import module_aliases

    block = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    layers = nn.ModuleList([nn.Linear(2, 2), block, block, block])
    assert list(module_aliases(layers).items()) == [
        ("2", "1"), ("2.0", "1.0"), ("2.1", "1.1"),
        ("3", "1"), ("3.0", "1.0"), ("3.1", "1.1")]
    assert module_aliases(torch.compile(layers)) == module_aliases(layers)
    looped = nn.Sequential(nn.Linear(2, 2), nn.Module())
    looped[1].instance = looped
    assert module_aliases(looped) == {}
    twice = nn.Sequential(nn.Linear(2, 2), nn.Sequential())
    twice[1].same = twice[0]
    assert module_aliases(twice) == {"1.same": "0"}


def test_a_model_the_script_holds_and_runs_by_its_parts_is_the_model():
    """Note [A model held by the script]: the script calls block 0, then block 1, of a
    ModuleDict it binds as `model` and never calls; block 0 was the model, block 1 named
    beside it."""
    names = RootNames()
    model = nn.ModuleDict({"blocks": nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))})
    for b in model["blocks"]:
        names.path(b, top_level=True)
    assert names.model() is model and list(names.prefix.items()) == [(model, "")]
    assert [names.paths.get(b) for b in model["blocks"]] == ["blocks.0", "blocks.1"]


def test_a_wrapper_with_a_forward_around_the_called_model_is_no_holder():
    """A module with a forward of its own that holds nothing besides the called module (as
    torch.compile's, DDP, Fabric's do), the script calling the model itself: the model
    keeps its own names. A container without a forward is a root for names even then."""

    class Wrap(nn.Module):
        def __init__(self, m: nn.Module) -> None:
            super().__init__()
            self.inner = m

        def forward(self, x):
            return self.inner(x)

    names = RootNames()
    model = nn.Sequential(nn.Linear(4, 4))
    wrapped = Wrap(model)
    assert names.path(model, top_level=True)[0] == "" and names.model() is model
    assert names.paths.get(model[0]) == "0" and wrapped not in names.prefix
    names = RootNames()
    box = nn.ModuleDict({"net": model})
    assert names.path(model, top_level=True)[0] == "net" and names.model() is box


def test_a_module_holding_two_trained_models_is_the_model_and_two_apart_stay_apart():
    """A GAN's generator and discriminator held apart (and a loss module held by none) stay
    apart; bound in one ModuleList too, that list is the model, as a module holding
    several trained parts is (Note [A model of several trained parts])."""
    G, D = nn.Sequential(nn.Linear(4, 8)), nn.Sequential(nn.Linear(8, 1))
    bce = nn.BCEWithLogitsLoss()
    names = RootNames()
    for m in (G, D, bce):
        names.path(m, top_level=True)
    assert [names.prefix[m] for m in (G, D, bce)] == ["", "D", "bce"]
    nets = nn.ModuleList([G, D])
    names = RootNames()
    for m in (G, D, bce):
        names.path(m, top_level=True)
    assert names.model() is nets and [names.paths.get(m) for m in (G, D)] == ["0", "1"]
    assert names.prefix[bce] == "bce"


def test_an_ema_wrapper_is_passed_over_for_the_model_it_holds():
    """The script binds the model and an EMA wrapper of it (the model and an untrained copy,
    ema-pytorch's shape): block 0's holder is the model, not the wrapper; the copy's block,
    run later by the script, is named under the wrapper beside the model, which keeps its
    names."""
    import copy

    names = RootNames()
    model = nn.ModuleDict({"blocks": nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))})
    ema = nn.ModuleDict({"online": model, "ema_model": copy.deepcopy(model)})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    names.path(model["blocks"][0], top_level=True)
    assert names.model() is model and ema not in names.prefix
    names.path(ema["ema_model"]["blocks"][0], top_level=True)
    assert names.prefix[ema] == "ema" and names.model() is model
    assert names.paths.get(ema["ema_model"]["blocks"][0]) == "ema.ema_model.blocks.0"
    assert names.paths.get(model["blocks"][1]) == "blocks.1"
    del opt


def test_an_optimizer_of_another_model_alive_in_the_process_changes_nothing():
    """Note [A model held by the script]: an optimizer left alive by other code (an earlier
    run in the process) trains none of the held model's parameters, so it says nothing of
    which of them are an untrained copy: the ModuleDict is still the model. Failed while
    any optimizer was alive anywhere in the process (the second block read as a copy)."""
    stale = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    names = RootNames()
    model = nn.ModuleDict({"blocks": nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))})
    for b in model["blocks"]:
        names.path(b, top_level=True)
    assert names.model() is model and list(names.prefix.items()) == [(model, "")]
    del stale

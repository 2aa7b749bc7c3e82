"""Note [A model called through its methods] (trace/roots.py): a model whose forward the
script never calls, only methods that call its parts (diffusers' `vae.encode(x)`,
`vae.decode(z)`), is the model, and its parts are named under it."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import memledger


class _AE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(8, 4), nn.Linear(4, 8)

    def encode(self, x):
        return self.enc(x)

    def decode(self, z):
        return self.dec(z)


class _Sized(nn.Module):
    """Runs a part on a dummy input in its constructor to size its head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 6), nn.ReLU())
        with torch.no_grad():
            n = self.features(torch.zeros(1, 8)).shape[1]
        self.head = nn.Linear(n, 2)

    def forward(self, x):
        return self.head(self.features(x))


def _train(make, loss):
    with memledger.trace() as led:
        m = make()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            loss(m, torch.randn(2, 8)).backward()
            opt.step()
            opt.zero_grad()
    return led


def test_a_model_trained_through_its_methods_is_the_model():
    led = _train(_AE, lambda m, x: (m.decode(m.encode(x)) - x).pow(2).mean())
    assert set(led.scopes["mod"]) == {"enc", "dec"}   # not `Linear`, named beside `enc`
    assert not led.extra.get("root")
    st = led.storages
    assert set(st.loc[st["category"] == "parameter", "name"]) == \
        {"enc.weight", "enc.bias", "dec.weight", "dec.bias"}


def test_a_part_called_in_the_constructor_leaves_the_names_to_the_first_call():
    """Not its constructor: the head, made after the dummy call, read `Linear` when the
    model was named there."""
    led = _train(_Sized, lambda m, x: m(x).sum())
    step2 = led.scopes[led.scopes["step"] == 2]
    assert set(step2["mod"]) == {"", "features", "features.0", "features.1", "head"}


class _Direct(nn.Module):
    """llama2.c's TransformerBlock: `self.feed_forward.forward(x)`, not `self.feed_forward(x)`."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.feed_forward = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x):
        return x + self.feed_forward.forward(self.norm(x))


def test_a_module_whose_forward_is_called_directly_is_named_with_the_reason():
    """Note [Modules whose forward is called directly] (replay/policies.py): no module hook
    sees the call, so predict cannot place the policy; it says so and names what ran, where
    it said "matches no module" beside a list without it."""
    from memledger.errors import PolicyError
    from memledger.measure.apply import apply_policy
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    led = _train(_Direct, lambda m, x: m(x).sum())
    assert "feed_forward" not in set(led.scopes["mod"])
    with pytest.raises(PolicyError) as err:
        predict(led, [parse_policy("checkpoint:feed_forward")])
    assert str(err.value) == (
        "memledger: selector 'feed_forward' matches feed_forward, never called as a module: the "
        "code runs its work through another of its methods (`feed_forward.inverse(x)`, "
        "`feed_forward.encode(x)`) or calls its `.forward()` directly "
        "(`self.feed_forward.forward(x)`) or, for a container (an nn.ModuleList), its "
        "submodules one by one; torch's module hooks, the trace's among them, see none of "
        "these, so the trace cannot tell where its work begins and ends, and a policy acts "
        "on a module's call; select the modules inside it that run as calls: feed_forward.0, "
        "feed_forward.1, feed_forward.2 (`feed_forward.*` selects them all), or call the "
        "module itself (`self.feed_forward(x)`)")
    # a selector that matches nothing at all still lists what ran
    with pytest.raises(PolicyError, match=r"'nothere' matches no module; the modules"):
        predict(led, [parse_policy("checkpoint:nothere")])
    # the policy itself runs: measure puts it on the module's own `forward`
    m = _Direct()
    apply_policy(m, parse_policy("checkpoint:feed_forward"))
    m(torch.randn(2, 8)).sum().backward()


class _Pruned(nn.Module):
    """botorch's qLogNoisyExpectedImprovement: its constructor runs a helper with a part of
    its own, a local named as one of the model's children, called once and dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.act = nn.Linear(8, 8), nn.GELU()
        self.prune()

    def prune(self) -> None:
        act = nn.GELU()   # labelled `act` by this frame's name for it (Note [Root names])
        with torch.no_grad():
            act(torch.zeros(1, 8))

    def forward(self, x):
        return self.act(self.body(x))


def test_a_dropped_modules_label_is_not_the_models_child():
    """Note [A label the model's child takes] (trace/roots.py): the dropped `act` kept its
    `root` record, so every call of the model's own `act` read as that module's, beside
    the model: predict refused `checkpoint:act` ("selects modules of 'act', which the
    script calls beside the model") while measure applied it. Now the label is retired
    when the model, holding a child `act`, is first called, and the policy is priced."""
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    led = _train(_Pruned, lambda m, x: m(x).sum())
    assert [r["mods"] for r in led.extra["retired"]] == [["act"]]
    base = led.peak().bytes
    peaks = {p: predict(led, [parse_policy(p)]).policies[0].peak_bytes
             for p in ("offload:act", "checkpoint:act")}
    # priced (both raised PolicyError before); the peak is the optimizer's, so offload
    # moves nothing, and checkpoint adds the CPU RNG state it keeps for the re-run and the
    # one the re-run forks as it starts (Note [A re-run that stops before its first op]:
    # GELU saves only its input; `memledger measure` of the same model: 10,536 B)
    assert (base, peaks) == (712, {"offload:act": 712, "checkpoint:act": 10_536}), peaks


class _OwnCall(nn.Module):
    """gpytorch's `Module`: a `__call__` of its own runs `forward`, no torch hook sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))
        self.squash = nn.Tanh()        # what its forward calls as a module: no parameters

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        return self.squash(x) * self.scale


def test_a_model_whose_own_call_no_hook_sees_has_a_forward_and_says_why():
    """Note [A model whose own call no hook sees] (trace/collector.py): no step had a
    forward phase (the model's call unseen, its part holds no parameters), so the batch
    (2x8 fp32, 64 B per step) read `other` and predict found no call in "the traced
    forward". Note [A class with a call of its own] (replay/policies.py): `checkpoint:`
    the model's own-call part was told to call the module itself."""
    from memledger.errors import PolicyError
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = _OwnCall()

        def __call__(self, x):
            return self.forward(x)

        def forward(self, x):
            return self.inner(x)

    led = _train(Holder, lambda m, x: m(x).sum())
    assert "forward" in set(led.phases["phase"])
    st = led.storages
    assert st.loc[st["category"] == "input", "bytes"].tolist() == [64, 64]
    assert predict(led, [parse_policy("offload:inner.squash")]).policies[0].peak_bytes > 0
    with pytest.raises(PolicyError, match=r"matches inner, never called as a module: its "
                                          r"class \(_OwnCall\) has a `__call__` of its own"):
        predict(led, [parse_policy("checkpoint:inner")])


def test_a_live_modules_label_the_models_child_takes_is_given_again():
    """Note [A label the model's child takes]: a module the script still holds, called on
    its own as `act` before the model (which holds a child `act`), is labelled again by
    Note [Root names]'s next rule, its class."""
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    class Acted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.act = nn.Linear(8, 8), nn.GELU()

        def forward(self, x):
            return self.act(self.body(x))

    with memledger.trace() as led:
        act = nn.GELU()
        act(torch.zeros(1, 8))
        m = Acted()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            m(torch.randn(2, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        act(torch.zeros(1, 8))
    assert [r["mod"] for r in led.extra["root"]] == ["act", "GELU"]
    assert [r["mods"] for r in led.extra["retired"]] == [["act"]]
    assert set(led.scopes["mod"]) == {"act", "", "body", "GELU"}
    assert predict(led, [parse_policy("checkpoint:act")]).policies[0].peak_bytes > 0


class _Run(nn.Module):
    """Run through a method that calls a part without parameters between two with them."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(8, 64), nn.Linear(64, 2)
        self.act = nn.Sequential(nn.GELU(), nn.Softplus())

    def run(self, x):
        return self.out(self.act(self.inp(x)))


def test_a_part_without_parameters_between_the_methods_parts_is_priced():
    """Note [Module calls in the loss phase] (replay/prepared.py): `inp`'s end began the
    loss phase (the method's return is unseen), and `act`, holding no parameters, did not
    begin the forward again: its calls were left out of predict, which refused
    `checkpoint:act` ("matches no module; the modules the traced forward called are inp
    (Linear), out (Linear)") while measure ran it: 75,992 B and 54,552 B, predicted so
    now."""
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    with memledger.trace() as led:
        m = _Run()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            m.run(torch.randn(64, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    peaks = {p: predict(led, [parse_policy(p)]).policies[0].peak_bytes
             for p in ("offload:act", "checkpoint:act")}
    # as `memledger measure` runs the same loop as a script (2 steps): offload keeps the
    # GELU's and Softplus's saved inputs (16 KiB each) off the device; checkpoint adds the
    # CPU RNG state it keeps for the re-run at a peak its saves no longer set
    assert (led.peak().bytes, peaks) == \
        (71_448, {"offload:act": 54_552, "checkpoint:act": 75_992}), peaks


_FROZEN_ENCODER = '''
import torch, torch.nn as nn


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.encode(x)

    def encode(self, x):
        return self.lin(x) * 2


class Crf(nn.Module):   # parameters a method reads, no submodule, as pytorch-crf's CRF
    def __init__(self):
        super().__init__()
        self.transitions = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return self.score(x)

    def score(self, x):
        return x * self.transitions


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.crf, self.head = Enc(), Crf(), nn.Linear(8, 1)
        self.enc.requires_grad_(False)
        self.crf.requires_grad_(False)

    def forward(self, x):
        with torch.no_grad():   # a frozen encoder, as diffusion fine-tuning runs its VAE
            z = self.crf.score(self.enc.encode(x))
        return self.head(z)


torch.manual_seed(0)
m = M()
opt = torch.optim.SGD(m.head.parameters(), lr=0.1)
for _ in range(3):
    loss = m(torch.randn(4, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


@pytest.mark.parametrize("selector", ["enc", "crf"])
def test_a_frozen_part_run_through_its_method_is_refused_alike(tmp_path, selector):
    """Note [Work no gradient shows] (measure/apply.py): a frozen part the step runs through
    another of its methods under no_grad leaves no gradient and is never written, and
    measure, which told such a part by those, refused it as "never ran in the steps (the
    script's input never reaches them ...)" where predict, which reads the ops, said
    "never called as a module". Now both say the latter, word for word (the modules
    around it that ran included)."""
    import contextlib
    import io
    import json

    from memledger.errors import EXIT_USAGE, PolicyError
    from memledger.ledger.model import Ledger
    from memledger.measure import worker as measure_worker
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict
    from memledger.trace import worker as trace_worker

    script = tmp_path / "frozen.py"
    script.write_text(_FROZEN_ENCODER)
    led_path, out = tmp_path / "run.ledger", tmp_path / "measured.json"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert trace_worker.main(["ledger", "--out", str(led_path), "--status",
                                  str(tmp_path / "status.json"), "--steps", "2",
                                  str(script)]) == 0
        code = measure_worker.main(["--out", str(out), "--policy", f"checkpoint:{selector}",
                                    "--steps", "2", "--time-steps", "0", str(script)])
    with pytest.raises(PolicyError) as refused:
        predict(Ledger.load(led_path), [parse_policy(f"checkpoint:{selector}")])
    assert code == EXIT_USAGE
    said = json.loads(out.read_text())["error"]
    assert said == str(refused.value)
    assert f"selector '{selector}' matches {selector}, never called as a module" in said
    # Note [What an uncalled module's refusal advises] (replay/policies.py)
    assert said.endswith(
        "select the modules inside it that run as calls: enc.lin, or call the module itself "
        "(`self.enc(x)`)" if selector == "enc" else
        "no module inside it runs as a call, so none there can be selected: call the module "
        "itself (`self.crf(x)`)")


def test_a_module_the_model_makes_in_its_forward_is_not_one_of_its_modules():
    """Note [Modules the model makes in its forward] (trace/collector.py): the model holds
    `act`, a Sequential(GELU, SiLU), and makes another such Sequential on every call, traced
    as `Sequential`. Predict selected the throwaway one too: `checkpoint:@Sequential`
    1,070,240 B and `offload:@SiLU` 1,060,128 B predicted where measure, which wraps the
    model's `named_modules()` alone, measured 1,081,568 and 1,076,512; and it predicted
    `checkpoint:Sequential` (1,196,256 B) where measure said "matches no module"."""
    from tests.clients.harness import run_client

    run = run_client("train_made_in_forward.py", [],
                     ["checkpoint:@Sequential", "offload:@SiLU", "checkpoint:Sequential"])
    assert run.ledger_peak == run.allocator_peak == 1_207_584
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:@Sequential": (1_081_568, 1_081_568),
                   "offload:@SiLU": (1_076_512, 1_076_512),
                   "checkpoint:Sequential": (None, None)}
    bad = run.policies["checkpoint:Sequential"]
    # Note [A selector of a module made in the forward] (replay/policies.py): both sides
    # listed the model's modules, without the `Sequential` that `show` names; now both say
    # what it is, in the same words
    assert bad.predict_refusal == bad.measure_refusal == (
        "memledger: selector 'Sequential' matches 'Sequential', a Sequential that the "
        "model's forward makes on each call and holds nowhere (the trace names it by its "
        "caller and class); a policy acts on the model's own modules (`named_modules()`), "
        "and a module made anew in each call is none of them: the model's own forward makes "
        "it, and no policy wraps the model itself: make it once in the model's `__init__` "
        "(`self.sequential = Sequential(...)`) and select that")

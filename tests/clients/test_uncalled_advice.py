"""Refusals' advice for modules whose work never runs as a module call, on plain-torch
models (tests/clients/train_uncalled_advice.py; Note [What an uncalled module's refusal
advises], replay/policies.py): a VAE the model runs through `encode`/`decode`, a Linear
whose `.forward()` its block calls directly, a class with a `__call__` of its own."""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients

UNCALLED = ("memledger: selector {sel!r} matches {path}, never called as a module: the code "
            "runs its work through another of its methods (`{path}.inverse(x)`, "
            "`{path}.encode(x)`) or calls its `.forward()` directly (`self.{leaf}.forward(x)`) "
            "or, for a container (an nn.ModuleList), its submodules one by one; torch's module "
            "hooks, the trace's among them, see none of these, so the trace cannot tell where "
            "its work begins and ends, and a policy acts on a module's call; ")


def test_a_module_run_through_its_methods_advises_the_modules_inside_it():
    """Before: "select modules inside it that run as calls, or call the module itself
    (`self.vae(x)`); modules around it that did run: vae.dec, vae.enc, vae.dec.0" (by depth
    then name: the decoder's first Linear beside the decoder itself), and for `block.lin`,
    whose block calls `self.lin.forward(x)` and which holds no module, "... select modules
    inside it that run as calls ...; modules around it that did run: block". Now the modules
    inside it that run, and the glob that selects them (predicted = measured), or why none
    inside can be selected."""
    pols = ["checkpoint:vae", "offload:@VAE", "checkpoint:block.lin", "checkpoint:vae.*"]
    run = run_client("train_uncalled_advice.py", ["--case", "encode"], pols)
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:vae": (None, None), "offload:@VAE": (None, None),
                   "checkpoint:block.lin": (None, None), "checkpoint:vae.*": (34_828, 34_828)}
    lines = {t: p.predict_refusal for t, p in run.policies.items() if p.measured is None}
    assert lines == {t: p.measure_refusal for t, p in run.policies.items()
                     if p.measured is None}
    assert lines == {
        "checkpoint:vae": UNCALLED.format(sel="vae", path="vae", leaf="vae") +
        "select the modules inside it that run as calls: vae.dec, vae.enc (`vae.*` selects "
        "them all), or call the module itself (`self.vae(x)`)",
        "offload:@VAE": UNCALLED.format(sel="@VAE", path="vae", leaf="vae") +
        "select the modules inside it that run as calls: vae.dec, vae.enc, or call the "
        "module itself (`self.vae(x)`)",
        "checkpoint:block.lin": UNCALLED.format(sel="block.lin", path="block.lin",
                                                leaf="lin") +
        "no module inside it runs as a call, so none there can be selected: call the "
        "module itself (`self.lin(x)`) or select the module around it that runs as one, "
        "block (a policy there holds its work and more)"}


def test_a_class_with_a_call_of_its_own_advises_the_modules_inside_it():
    """Before: "select modules inside it that run as torch module calls; modules around it
    that did run: own.a, own.b" (the same list, said as around it, no glob)."""
    run = run_client("train_uncalled_advice.py", ["--case", "own-call"],
                     ["checkpoint:own", "checkpoint:own.*"])
    p = run.policies["checkpoint:own"]
    assert p.measured is None and p.predict_refusal == p.measure_refusal == (
        "memledger: selector 'own' matches own, never called as a module: its class "
        "(OwnCall) has a `__call__` of its own, as gpytorch's modules have, which runs "
        "`forward` without torch's module hooks, the trace's among them, so the trace cannot "
        "tell where its work begins and ends; select the modules inside it that run as "
        "torch module calls: own.a, own.b (`own.*` selects them all)")
    p = run.policies["checkpoint:own.*"]
    assert p.predicted == p.measured == 28_688, p


def test_a_module_with_no_call_inside_or_around_says_so():
    """No module inside or around it ran as a call: one line says none can be selected."""
    from memledger.replay.policies import own_call_message, uncalled_message

    assert uncalled_message("enc", ["enc"], ["head"]).endswith(
        "; no module inside it runs as a call, so none there can be selected: call the "
        "module itself (`self.enc(x)`)")
    assert own_call_message("gp", ["gp"], "ExactGP", ["head", "gpx.lin"]).endswith(
        "; no module inside it runs as a torch module call, so none there can be selected, "
        "and no module around it runs as one either")

"""Refusals' advice on plain-torch models (tests/clients/train_list_advice.py): a ModuleList
of ModuleLists (Note [What a container's refusal advises], replay/policies.py) and a time
MLP the script calls before the network (Note [The model named once])."""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients

HEAD = ("memledger: selector {sel!r} matches {named}, a ModuleList: a container with no "
        "forward of its own (the script calls its submodules one by one), so a policy on it "
        "would do nothing; select the modules it holds that run instead: ")


def test_a_list_of_lists_advises_the_modules_it_holds():
    """Before: "select the modules around it that run instead: layers.1.0, layers.1.1,
    layers.1.0.act" for `layers.1` (the first three by depth: a Tanh inside an item), and
    "layers.0.0, layers.0.1, layers.1.0" for `layers`, with no glob for one container. Now
    the modules each holds that run, in order, and the glob that selects them all."""
    pols = ["checkpoint:layers", "checkpoint:layers.*", "checkpoint:layers.1",
            "checkpoint:layers.*.*"]
    run = run_client("train_list_advice.py", ["--case", "lists"], pols)
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:layers": (None, None), "checkpoint:layers.*": (None, None),
                   "checkpoint:layers.1": (None, None),
                   "checkpoint:layers.*.*": (48_876, 48_876)}
    lines = {t: p.predict_refusal for t, p in run.policies.items() if p.measured is None}
    assert lines == {t: p.measure_refusal for t, p in run.policies.items()
                     if p.measured is None}
    assert lines == {
        "checkpoint:layers": HEAD.format(sel="layers", named="layers") +
        "layers.0.0, layers.0.1, layers.1.0, ... (3 more) (`layers.*.*` selects them all)",
        "checkpoint:layers.*": HEAD.format(sel="layers.*", named="layers.0, layers.1, "
                                           "layers.2") +
        "layers.0.0, layers.0.1 (`layers.*.*` selects what each of them holds)",
        "checkpoint:layers.1": HEAD.format(sel="layers.1", named="layers.1") +
        "layers.1.0, layers.1.1 (`layers.1.*` selects them all)"}


def test_the_model_beside_a_module_named_model_is_named_once():
    """Before: "put the modules the script calls (the model, model) in one nn.Module"."""
    run = run_client("train_list_advice.py", ["--case", "beside"],
                     ["checkpoint:model.layers.*.*"])
    p = run.policies["checkpoint:model.layers.*.*"]
    assert p.measured is None and p.predict_refusal == p.measure_refusal == (
        "memledger: selector 'model.layers.*.*' selects modules of 'model', which the script "
        "calls beside the model; policies act on the model alone (a Sequential: the first "
        "top-level module with parameters the script called): put it and 'model' in one "
        "nn.Module whose forward does what the script does, and select inside it")

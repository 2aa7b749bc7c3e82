"""A layer that initialises its parameters from the first batch inside its forward
(tests/clients/train_first_batch_init.py, FrEIA's ActNorm in plain torch): Note [A set-up
on the first call] in memledger/replay/first_call.py."""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client


@pytest.mark.slow
def test_a_re_run_of_a_set_up_made_under_gradients_is_refused_alike():
    """The set-up saves `scale.exp()` for a graph nobody reads; the re-run finds the flag
    cleared and saves fewer, which torch's checkpoint refuses. Before: predict priced
    `checkpoint:norm` and `selective:norm` (170,024 B), measure refused both in its
    generic line ("the region's forward depends on state outside its arguments")."""
    run = run_client("train_first_batch_init.py", ["--init", "grad"],
                     ["checkpoint:norm", "selective:norm", "checkpoint:fc1"])
    for text in ("checkpoint:norm", "selective:norm"):
        p = run.policies[text]
        assert p.predict_refusal is not None, p
        assert p.predict_refusal == p.measure_refusal
        assert f"{text} would re-run norm, whose forward call wrote its parameter " \
            "norm.bias in place (a set-up on the first batch" in p.predict_refusal
    fc1 = run.policies["checkpoint:fc1"]
    assert fc1.predicted == fc1.measured


@pytest.mark.slow
def test_a_set_up_that_saves_nothing_or_ran_before_training_is_priced():
    """Under no_grad the set-up saves nothing and torch's checkpoint runs the re-run; a
    forward under no_grad before training (the refusal's fix) sets it up outside any step:
    both predicted as measured, to the byte."""
    for argv in (["--init", "no-grad"], ["--warm"]):
        run = run_client("train_first_batch_init.py", argv,
                         ["checkpoint:norm", "selective:norm"])
        for text, p in run.policies.items():
            assert p.predicted is not None and p.predicted == p.measured, (argv, text, p)

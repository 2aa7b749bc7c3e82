"""An encoder-decoder whose two stacks are of different classes (BART, transformers, built
from a config): `plan` searches both (Note [Stacks beside the blocks], replay/plan.py).

Measured (torch 2.13.0 CPU, 2 steps, 3 + 3 layers of width 64): the baseline 9,515,312 B;
at 60 % of it `plan` searched the decoder's layers alone and said no candidate fits; both
stacks offloaded are 5,256,744 B, predicted and measured.
"""
import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]


def test_plan_searches_an_encoder_and_a_decoder_of_other_classes():
    from memledger.replay.plan import plan

    both = "offload:model.decoder.layers.*+offload:model.encoder.layers.*"
    run = run_client("train_bart.py", [], [both], steps=2)
    assert run.ledger_peak == run.allocator_peak == 9_515_312
    rep = plan(run.ledger, int(run.ledger_peak * 0.6), front_points=0)
    assert rep.blocks == [*(f"model.decoder.layers.{i}" for i in range(3)),
                          *(f"model.encoder.layers.{i}" for i in range(3))]
    assert (rep.fits, rep.policy) == (True, both), rep.policy
    assert rep.predicted_peak_bytes == run.policies[both].predicted == \
        run.policies[both].measured == 5_256_744

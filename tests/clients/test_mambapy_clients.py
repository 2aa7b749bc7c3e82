"""mambapy (tests/clients/train_mambapy.py): pure-PyTorch Mamba, its parallel scan a custom
autograd Function that clones its inputs, scans them in place and saves the clone its
output is a view of.

Measured once (`memledger trace --steps 2 --no-timing`, then `compare` with checkpoint,
selective and offload of the blocks, helper hunt38a, 2026-12-05): every mode's ledger
explains every byte of the allocator's peak, and every policy is predicted to the byte
(pscan 955.7 KiB; `checkpoint:mamba.layers.*` 660.9, `selective` 685.6, `offload` 567.2
KiB; the same in `seq`, `lm`, `jamba`, `vim`, under bf16 autocast, and at a sequence
length that pads), gradients bitwise, the doctor silent. A model trained through its
recurrent `step` method never calls its layers: a policy on them is refused by both sides.
"""

import pytest

from tests.clients.harness import ledger_pass, predicted_peak, run_client

pytest.importorskip("mambapy")
pytestmark = pytest.mark.clients


def test_generation_through_the_models_step_method_is_a_step_per_token():
    """`LM.step(token, caches)` calls the model's parts one by one, and each top-level part
    call began a forward: `--steps-by forward --steps 3` stopped after the first token's
    embedding, norm and in_proj (99 events, peak 36,896 B); now three tokens, 413 events
    (Note [A forward through the model's methods], trace/steps.py)."""
    led = ledger_pass("train_mambapy.py", ["--mode", "generate", "--steps", "8"], steps=3,
                      steps_by="forward")
    assert led.steps["ev"].tolist() == [196, 304, 412] and led.n_events == 413
    assert led.peak().bytes == 53_476


def test_a_model_trained_through_step_its_layers_refused_its_norms_priced():
    """Trained through `LM.step`, the layers are never called: predict (and measure) refuse
    a policy on them with the advice to call the module itself, which read "(`self.0(x)`)"
    for an item of a ModuleList; now `self.layers[0](x)`. Under muP the RMSNorms hold no
    parameters, and each layer's `norm`, called by `ResidualBlock.step` after the previous
    part's call ended the forward phase, was in the loss phase: predict refused
    `checkpoint:mamba.layers.*.norm` ("matches no module") while measure ran it, 375,100 B
    (`offload:` 333,884 B; `memledger measure --steps 2`); priced so now (Note [Module
    calls in the loss phase], replay/prepared.py)."""
    from memledger.errors import PolicyError
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    led = ledger_pass("train_mambapy.py", ["--mode", "step", "--mup", "--seq-len", "4"])
    with pytest.raises(PolicyError) as refused:
        predict(led, [parse_policy("checkpoint:mamba.layers.*")], bandwidth=1e9)
    assert "(`self.layers[0].forward(x)`)" in str(refused.value)
    assert "call the module itself (`self.layers[0](x)`)" in str(refused.value)
    assert predicted_peak(led, "checkpoint:mamba.layers.*.norm") == 375_100
    assert predicted_peak(led, "offload:mamba.layers.*.norm") == 333_884


def test_the_parallel_scans_saved_clone_is_predicted_to_the_byte():
    """PScan saves `X`, the clone it scans in place, whose transposed slice is the output:
    offloading the blocks moves the save while the output keeps the storage. Predicted as
    measured (the ledger explaining every byte)."""
    run = run_client("train_mambapy.py", ["--mode", "pscan", "--seq-len", "8"],
                     ["offload:mamba.layers.*"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    off = run.policies["offload:mamba.layers.*"]
    assert off.predicted == off.measured and off.measured < run.allocator_peak

"""A weight-normed layer's effective weight read between steps (tests/clients/
train_weight_read.py, plain torch): Note [A parametrized weight read is no forward],
memledger/trace/steps.py, found with pytorch-tcn (tests/clients/test_tcn_clients.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt45c, 2026-12-06, torch
2.13.0 CPU, one intra-op thread; 2 steps): the ledger 133,784 B, the allocator 133,796 B
(12 B of kernel scratch), the peak in step 2's Adam step.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]


def test_a_logged_weight_read_is_no_forward_and_its_policies_are_priced():
    """The read after `step()` switched the collector to "forward", then "loss": the next
    batch, made in that "loss", read `activation` (at the peak 24,832 B of activation, 0 of
    input); now it is `input` (16,640 B and 8,192 B), made in "other". The read itself
    stays a call the policies act on, as measure wraps it: `checkpoint:0.parametrizations.
    weight` holds the logged weight's checkpointed graph, 138,596 B both sides (read in
    "other", the replay left the call out and said 133,796 B)."""
    pols = {"checkpoint:0.parametrizations.weight": 138_596, "offload:0": 133_796,
            "offload:0.parametrizations.weight": 133_540}
    run = run_client("train_weight_read.py", [], list(pols))
    assert (run.ledger_peak, run.allocator_peak) == (133_784, 133_796)
    at = run.summary.at_peak
    assert (at["activation"], at["input"]) == (16_640, 8_192)
    batches = run.ledger.storages[run.ledger.storages.op == "randn.default"]
    assert batches.phase.tolist() == ["setup", "other"]
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_a_renorm_read_in_the_optimizer_step_stays_in_the_optimizer_phase():
    """nGPT's renorm (tests/clients/train_weight_read.py --renorm): a step post hook reads
    the sphere-parametrized weight under no_grad and copies it into the original. The read
    went to "forward": the forward's peak read 803,908 B (the step's, gradients and the
    normed copy live) and the optimizer's 802,884 B; now 542,756 B and 803,908 B (Note [A
    weight read without gradients], memledger/trace/steps.py). The policies did not move:
    the read saves nothing."""
    pols = {"checkpoint:0.parametrizations.weight": 1_596_424, "offload:0": 1_590_344}
    run = run_client("train_weight_read.py", ["--renorm"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 1_591_368
    by_phase = run.ledger.peak_by("phase")
    assert (by_phase["forward"], by_phase["optimizer"]) == (542_756, 803_908)
    normed = run.ledger.storages[(run.ledger.storages.bytes == 256 * 256 * 4)
                                 & (run.ledger.storages.module == "optimizer")]
    assert normed.phase.tolist() == ["optimizer", "optimizer"]
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_a_module_called_while_the_model_is_built_leaves_the_build_in_setup():
    """nGPT's `manual_norm_weights` (tests/clients/train_weight_read.py --built): each
    `SphereLinear.__init__` normalizes its weight by calling its own norm module. The
    first such call opened a "forward" and, returning, the "loss": the rest of the build
    (the second layer's 8,192 B weight) was made in "loss", and setup peaked at 65,536 B;
    now the build stays in setup, 132,096 B (Note [A module called while a module is
    built], memledger/trace/roots.py). Only the phases move."""
    pols = {"checkpoint:0": 157_640, "offload:2.norm": 152_584}
    run = run_client("train_weight_read.py", ["--built"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 152_584
    assert run.ledger.peak_by("phase")["setup"] == 2 * 64 * 256 * 4 + 1_024 == 132_096
    st = run.ledger.storages
    assert st[st.op == "empty.memory_format"].phase.tolist() == ["setup", "setup"]
    assert run.ledger.phases.phase.tolist()[:3] == ["setup", "forward", "loss"]
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak

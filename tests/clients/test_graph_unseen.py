"""A checkpointed call whose graph the script dropped unseen (tests/clients/
train_graph_unseen.py; Note [A graph dropped unseen], replay/engine.py): its frame and RNG
state go with its outputs, not with a later call's reads of the argument it saved.

Measured (`run_client`, the helper hunt52a, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX2),
one intra-op thread; ledger = allocator): `--keep` (1 step) 360 B; `checkpoint:g`
20,500 B (four RNG states of 5,056 B at the second filter step's Jacobian: the first
step's loss-path call, the second's reference call, held by the module, its Jacobian call
and that call's re-run fork), `selective:g` 20,516 B, each predicted = measured. The old
replay held the first step's reference call's frame to the loss's backward, which reads
its argument through the loss-path call's save: 25,556 and 25,588 B predicted."""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_graph_the_script_dropped_lets_its_checkpoint_frame_go_with_it():
    pols = {"checkpoint:g": 20_500, "selective:g": 20_516}
    run = run_client("train_graph_unseen.py", ["--keep"], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 360
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak

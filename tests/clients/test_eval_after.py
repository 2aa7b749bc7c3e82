"""A validation loss after each step's backward (tests/clients/train_eval_after.py): what
`show` calls "saved for backward" is what the step's backward reads, not an evaluation's
graph the loop keeps (Note [The saves the step's backward reads], ledger/model.py)."""

import pytest

from tests.clients.harness import ledger_pass

pytestmark = pytest.mark.clients

STEP_SAVES = {"0": 1024, "1": 1024, "(Sequential.forward)": 512, "1.fc1": 512}


@pytest.mark.parametrize("mode", ["no_grad", "kept"])
def test_saved_for_backward_is_the_steps_not_the_evaluations(mode):
    """The step's backward reads 3,072 B (a batch of 8 through two blocks); the evaluation,
    between the last step's backward and its optimizer step, runs a batch of 32. A loop
    keeping its validation loss (`kept`) kept that forward's graph through the next
    step's backward, and "saved for backward" read 15,360 B: 12,288 B of the evaluation's
    saves, which no backward reads. Under `torch.no_grad()` it read 3,072 B already."""
    from memledger.ledger.summary import summarize

    led = ledger_pass("train_eval_after.py", ["--eval", mode, "--where", "before_step"])
    acts = summarize(led).activations
    assert (acts.saved_bytes, acts.by_module) == (3_072, STEP_SAVES)

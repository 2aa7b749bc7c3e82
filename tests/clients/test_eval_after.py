"""A validation loss after each step's backward (tests/clients/train_eval_after.py): what
`show` calls "saved for backward" is what the step's backward reads, not an evaluation's
graph the loop keeps (Note [The saves the step's backward reads], ledger/model.py)."""

import pytest

from tests.clients.harness import ledger_pass

pytestmark = pytest.mark.clients

# "": `pow`'s save of the model's output, in the script (`model(x).pow(2).mean()`); read
# "(Sequential.forward)" before Note [A save just after the model's forward returned]
# (ledger/model.py): nn.Sequential's forward runs no op of its own
STEP_SAVES = {"0": 1024, "1": 1024, "": 512, "1.fc1": 512}


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


def test_an_evaluations_own_pass_inside_the_step_is_not_the_steps():
    """`--eval input_grad --where before_step`: `torch.autograd.grad` of the validation loss
    with respect to its (32, 16) input, run after the step's backward and before its
    optimizer step: a pass inside the step, begun last, which writes no `.grad`. "Saved for
    backward" read its saves, 12,288 B (the batch of 32 through two blocks), where the
    step's backward reads 3,072 B; now the step's pass is the last that wrote the
    parameters' gradients (Note [The pass that writes the gradients], ledger/model.py)."""
    from memledger.ledger.summary import summarize

    led = ledger_pass("train_eval_after.py", ["--eval", "input_grad", "--where", "before_step"])
    acts = summarize(led).activations
    assert (acts.saved_bytes, acts.by_module) == (3_072, STEP_SAVES)   # before: 12,288
    assert len(led.extra.get("wrote_grads", [])) == 2     # the steps' passes, one each


def test_the_batch_after_an_evaluation_with_gradients_is_the_batch():
    """`--eval kept` (the default `--where after_step`): the evaluation's forward runs with
    gradients after the optimizer step, and the next step's (8, 16) batch, 512 B, is made
    while its loss is the open phase. Only a forward without gradients made what followed
    it a batch candidate (Note [A batch made after an evaluation], trace/collector.py): the
    batch read `activation` (saved by `0.fc1`), 512 B in "saved for backward" (3,584 B)
    and 12,800 B of activations at the peak. Now a graph-less argument made there is the
    batch: `input` 2,560 B at the peak (the evaluation batch's 2,048 and the step's 512),
    activation 12,288, "saved for backward" 3,072 B; the peak 33,036 B either way."""
    from memledger.ledger.summary import summarize

    led = ledger_pass("train_eval_after.py", ["--eval", "kept"])
    s = summarize(led)
    assert led.peak().bytes == 33_036
    assert (s.at_peak["activation"], s.at_peak["input"]) == (12_288, 2_560)  # 12,800, 2,048
    assert (s.activations.saved_bytes, s.activations.by_module) == (3_072, STEP_SAVES)

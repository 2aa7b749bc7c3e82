"""A state cached by `copy.deepcopy(model.state_dict())` and loaded back after an
evaluation under `no_grad` (tests/clients/train_load_after_eval.py, plain torch; what
torch-lr-finder's `reset()` after a range test with a validation loader does): the cached
copy is no batch (Note [A load into the model after an evaluation], trace/collector.py)."""

import pytest

from tests.clients.harness import ledger_pass

pytestmark = pytest.mark.clients

PARAMS = (16 * 32 + 32 + 32 * 4 + 4) * 4   # 2,704 B


@pytest.mark.parametrize("argv", [[], ["--no-eval"]])
def test_a_state_loaded_after_an_evaluation_is_other_not_input(argv):
    """The peak holds the cached copy (2,704 B, `other`) and one batch (8 x 16 fp32 and 8
    int64 targets, 576 B, `input`). After the evaluation, `load_state_dict`'s
    `param.copy_(cached)` ran in the loss phase the no-grad forward left open and filed the
    copy as the batch: `input` 3,280 B, `other` 0 on the old code; without the evaluation it
    was right."""
    led = ledger_pass("train_load_after_eval.py", argv, steps=2)
    at = led.at_peak()
    assert (at["other"], at["input"]) == (PARAMS, 8 * 16 * 4 + 8 * 8) == (2_704, 576)

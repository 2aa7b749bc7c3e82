"""recurrent-memory-transformer-pytorch (tests/clients/train_rmt.py): a long sequence in
segments, memory tokens carried across them, and the wrapper's memory replay backprop,
which calls `backward` itself, twice per segment, inside its forward.

Measured (`memledger measure --steps 1`, hunt38d, 2026-12-05, torch 2.13.0 CPU) on
`--mode mrbp --dim 16 --depth 1 --seq-len 8 --segments 2 --memory 2` (4 hyper-connection
streams): `offload:transformer.layers.0.0` 172,880 B.
"""

import pytest

from tests.clients.harness import imported_first, ledger_pass, predicted_peak, skip_without

pytestmark = pytest.mark.clients
skip_without("recurrent_memory_transformer_pytorch")
_imported = imported_first("recurrent_memory_transformer_pytorch")

TINY = ["--dim", "16", "--depth", "1", "--seq-len", "8", "--segments", "2", "--memory", "2"]


def test_segments_re_run_after_a_backward_inside_the_forward_are_forward_calls():
    """`memory_replay_backprop=True`: the wrapper's forward runs the 2 segments under
    no_grad, then re-runs each with grad and calls `backward` twice on it
    (`retain_graph=True` on the loss, then the memories' gradient), all inside its own call.

    Two defects, each moving `offload:transformer.layers.0.0` (172,880 B measured):
    after the first backward the phase read "other", so the second re-run was no forward
    call and predict's offload acted on one segment of two: 223,948 B, the baseline (Note
    [A backward called inside a forward], trace/collector.py). Then 174,896 B: the
    hyper-connection's `Tanh` output, saved by the Tanh and by the `* scale` after it (both
    recorded at the Tanh's event), read once each by the first backward, was taken as read
    twice, and the second pass began inside the first (Note [Two saves at one event, read
    in one pass], ledger/model.py)."""
    led = ledger_pass("train_rmt.py", ["--mode", "mrbp", *TINY], steps=1)
    sc = led.scopes[led.scopes["mod"] == "transformer"]
    assert sc["nograd"].tolist() == [True] * 2 + [False] * 2
    assert sc["ph"].tolist() == ["forward"] * 4
    assert predicted_peak(led, "offload:transformer.layers.0.0") == 172_880


def test_the_doctor_finds_nothing_where_the_model_runs_backward_itself():
    """The wrapper's memory replay backprop returns the sum of the segments' losses, each
    backpropagated inside its forward with `retain_graph=True`; the script (the
    repository's train.py) never calls backward. The doctor warned `unused_graph`: "`wrapper`
    ran 1 forward under gradients in step 1 whose graph no backward used ... run it under
    torch.no_grad()" (Note [A call that runs backward itself], trace/doctor_unused.py)."""
    from tests.clients.harness import assert_one_doctor_error

    assert_one_doctor_error("train_rmt.py", ["--mode", "mrbp", *TINY], 2, None, "")


def test_a_batch_let_go_of_while_a_kept_graph_holds_it_leaves_under_offload():
    """The repository's train.py sums the losses the wrapper returns, graphs and all
    (`total_loss += loss`); tests/clients/train_kept_losses.py does that over 3
    micro-batches with `backward(retain_graph=True)`, each batch `x` (40 x 32 fp32, 5,120 B)
    in a variable until the next replaces it. The script held it as its backward began
    (`released` -1), so the replay held it to its free, the step's end, where the kept
    graph let go: `offload:*` predicted 133,668 B against 123,428 B measured (`memledger
    measure --steps 1`), the two earlier batches. Under offload the graph holds the copy on
    disk and the batch goes when the script lets go of it, the `unheld` record (Note [Let go
    of after backward, while a kept graph holds it], trace/collector.py)."""
    led = ledger_pass("train_kept_losses.py", [], steps=1)
    assert len(led.extra["unheld"]) >= 2
    assert predicted_peak(led, "offload:*") == 123_428

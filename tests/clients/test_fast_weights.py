"""Fast weights in a module's `_parameters` (tests/clients/train_fast_weights.py): MAML as
higher runs it, in plain torch. Each step's functional copy of the net holds clones of the
net's parameters (`p.clone()`, a `grad_fn`), then `w - lr * g`: values of the graph, which
its inner forwards save for the outer backward, never parameters."""

from tests.clients.harness import run_client


def test_cloned_fast_weights_are_activations_and_offload_moves_them_on_both_sides():
    """Note [A computed tensor in a module's parameters] (trace/collector.py). The copy's
    first call named the clones it held as parameters: at the peak (step 2's outer
    backward) `parameter` read 9,360 B, the net's 8,848 B (64 x 32 + 32 + 32 x 4 + 4
    floats) and the (4, 32) clone's 512 B, and the activations 1,932 B. The clone is an
    activation now (2,444 B), and offload moves it on both sides (measure's offloader
    left it on the device as model state: measure/apply.py `_model_state`)."""
    pols = {"offload:3": 77_276, "checkpoint:3": 81_324}
    run = run_client("train_fast_weights.py", [], list(pols), steps=2)
    assert run.ledger_peak == 76_248
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    at = run.ledger.at_peak()
    assert at["parameter"] == (64 * 32 + 32 + 32 * 4 + 4) * 4 == 8_848
    assert at["activation"] == 1_932 + 512
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak

"""A call of the model with gradients before the loop's first step
(tests/clients/train_grad_in_setup.py): a warm-up forward and backward, a sanity forward, an
`autograd.grad` or `torch.func.vjp` probe, a learning-rate finder. Note [A call with
gradients between steps] (memledger/replay/prepared.py) leaves calls of the setup phase off
the policies; Note [The call that found the model] (memledger/measure/apply.py) says when
measure starts wrapping. Checked at 1 and 2 steps under `checkpoint:*`, `offload:0` and
`selective:1` (docs/decisions.md, "Calls with gradients before the first step"): the two
sides agree on every shape, so these pin the agreement, not a fix."""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients

POLICIES = ["checkpoint:*", "offload:0", "selective:1"]


def test_a_setup_call_through_a_module_outside_the_model_runs_plainly_on_both_sides():
    """The warm-up calls the model from a lambda inside a parameterless module before the
    model's first top-level call: those calls read phase "setup" with gradients, predict
    leaves them off the policy, and measure, which found that parameterless module as the
    model for now, does not wrap them either; their 64-row graph is the run's peak, so
    every policy is 99,016 B on both sides."""
    run = run_client("train_grad_in_setup.py", ["--setup", "warmup", "--through"], POLICIES,
                     steps=2)
    assert run.ledger_peak == run.allocator_peak == 99_016
    sc = run.ledger.scopes
    setup = sc[(sc["ph"] == "setup") & ~sc["nograd"].astype(bool)]
    assert "call.Sequential.Block" in set(setup["mod"])
    for policy in POLICIES:
        assert run.policies[policy].predicted == run.policies[policy].measured == 99_016


def test_after_a_first_top_level_call_the_setup_call_is_the_policies_on_both_sides():
    """A shape check under `no_grad` first calls the model itself: from there its calls
    read "forward" (step 1), measure has wrapped it, and the same warm-up through the
    parameterless module is the policies' on both sides."""
    pols = {"checkpoint:*": 92_744, "offload:0": 82_952, "selective:1": 108_168}
    run = run_client("train_grad_in_setup.py", ["--look", "--setup", "warmup", "--through"],
                     list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 99_016
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


NO_MODEL = (
    "memledger: the policy never applied: no model ran in the 2 steps taken (--steps 2): the "
    "top-level modules the script called (call (Field)) held no parameters when first "
    "called, and a policy acts on the model, the first top-level module with parameters the "
    "script calls; call the model itself (`model(x)`, not only from inside another module) "
    "within those steps, or take more steps")


def test_no_model_in_the_steps_taken_is_said_alike(tmp_path):
    """Note [No model in the steps taken] (replay/policies.py): the LR finder's two steps
    call the model only from a lambda inside a parameterless module, so no module is the
    model over them. Predict said "selector '@Block' matches no module; the modules the
    traced forward called are (none recorded) (... not on call)", measure (no timed steps)
    "the policy never applied: the script called no module with parameters", and measure
    with a timed step (as the CLI always runs) met the model's first top-level call there
    and returned the profiled peak, taken without the policy, as the policy's: 52,360 B."""
    import json

    from memledger.measure import worker as measure_worker
    from tests.clients.harness import HERE, _call

    argv = ["--setup", "lrfind", "--through", "--batch", "4"]
    run = run_client("train_grad_in_setup.py", argv, ["checkpoint:@Block"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 52_360
    # the finder's passes, begun in setup and between steps, are followed by its optimizer
    # steps: the step's backward (Note [A backward pass outside the step], ledger/model.py)
    pk = run.summary.peak
    assert (pk.step, pk.phase, pk.backward_outside_step) == (1, "backward", None)
    got = run.policies["checkpoint:@Block"]
    assert got.predict_refusal == got.measure_refusal == NO_MODEL
    out = tmp_path / "measured.json"
    code = _call(measure_worker.main, ["--out", str(out), "--policy", "offload:0", "--steps",
                                       "2", "--time-steps", "1",
                                       str(HERE / "train_grad_in_setup.py"), "--", *argv])
    assert (code, json.loads(out.read_text())["error"]) == (2, NO_MODEL)

"""What the ledger calls copies kept across a step (tests/clients/train_held_roles.py): an
extragradient optimizer's copies of the parameters, and a clone of the weights the script
keeps from one step to the next (Notes [A copy the optimizer keeps, then the parameter]
and [Kept by the script across a step], memledger/ledger/held_roles.py). Plain torch:
cooper-optim's `ExtraAdam` and loralib's saved `lora_state_dict` (their tiers,
test_cooper_clients.py and test_loralib_clients.py, skip without the libraries).

Measured (the helper fix53b, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX2), one intra-op
thread; 2 steps, batch 8, dim 16, 2 blocks, a model of 2,244 B): the ledger and the
allocator 8,784 B on both, before and after; only the categories moved. `trace --fake
--device cpu` reads the same categories.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import ledger_pass, run_client

pytestmark = pytest.mark.clients

MODEL = 2 * (16 * 16 + 16) * 4 + (16 + 1) * 4   # 2,244 B


def test_an_optimizers_copy_is_optimizer_state_until_it_becomes_the_parameter():
    """`--extragradient`: the peak is in the second backward of step 1, with the copy of
    every parameter held beside the moved weights. Before, each copy read `parameter` under
    the name of the parameter it copies, its whole life: 4,488 B of parameters at the peak
    for a model of 2,244 B, and 4,488 B at every event of the second forward and backward.
    Now the copies are the optimizer's state (`params_copy[i]`) until `step()` frees the
    weights they replace, and the parameters are the model at every event; predict's
    breakdown says the same, and the peaks did not move."""
    pol = "offload:blocks.*"
    run = run_client("train_held_roles.py", ["--extragradient"], [pol], steps=2)
    led = run.ledger
    assert led.peak_with_scratch() == run.ledger_peak == run.allocator_peak == 8_784
    assert run.summary.at_peak == {
        "parameter": MODEL, "buffer": 0, "gradient": 1_156, "optimizer_state": MODEL,
        "activation": 1_024, "temporary": 1_572, "input": 544, "workspace": 0, "other": 0,
        "communication": 0}
    names = set(led.live_at(led.peak().event).query("category == 'optimizer_state'")["name"])
    assert names == {f"params_copy[{i}]" for i in range(6)}
    curves = led.curve_by_category()
    assert (curves.sum(axis=1).to_numpy() == led.curve()).all()
    assert curves["parameter"].max() == MODEL           # before: 2 * MODEL
    assert curves["optimizer_state"].max() == MODEL
    assert run.summary.resident["parameter"] == MODEL
    assert run.summary.resident["optimizer_state"] == 0
    p = run.policies[pol]
    assert p.predicted == p.measured == 8_344
    from memledger.replay.predict import predict
    from memledger.replay.policies import parse_policy

    at = predict(led, [parse_policy(pol)], bandwidth=1e9).policies[0].at_peak
    assert (at["parameter"], at["optimizer_state"]) == (MODEL, MODEL)   # before: 4,488, 0
    fake = ledger_pass("train_held_roles.py", ["--extragradient"], steps=2, fake_device="cpu")
    assert (fake.peak().bytes, fake.at_peak()) == (8_784, led.at_peak())


def test_a_clone_the_script_keeps_over_a_step_is_no_temporary():
    """`--keep`: the clone of the weights kept after step 1 lives over the whole of step 2,
    where the peak is (its second backward). Before: `temporary` 3,816 B at the peak (the
    clones' 2,244 beside the step's own 1,572) and 2,276 B resident at the end, where the
    step's own are 32. Now the clones read `other`; what the step makes stays
    `temporary`."""
    led = ledger_pass("train_held_roles.py", ["--keep"], steps=2)
    assert led.peak().bytes == 8_784
    s = led.summary()
    assert s.at_peak == {
        "parameter": MODEL, "buffer": 0, "gradient": 1_156, "optimizer_state": 0,
        "activation": 1_024, "temporary": 1_572, "input": 544, "workspace": 0,
        "other": MODEL, "communication": 0}
    assert (s.resident["temporary"], s.resident["other"]) == (32, MODEL)
    plain = ledger_pass("train_held_roles.py", [], steps=2).summary()
    assert (plain.at_peak["temporary"], plain.at_peak["other"]) == (1_572, 0)


def test_a_gradient_ema_the_next_step_reads_is_no_temporary():
    """`--ema` (grokfast's `gradfilter_ema`): each step's EMA of a gradient is made after the
    backward from the step before's, which the script's dict keeps until then: no storage
    lives over a whole step, but each is read by the next one (Note [Read by the next
    step]). The peak is inside step 2's filter, step 1's EMAs and some of step 2's live.
    Before: `temporary` 5,348 B at the peak and 2,276 B resident at the end (the EMAs'
    2,244 beside the loss's 32), `other` 0. Now: 2,080 and 32 `temporary`, 3,268 and
    2,244 `other` (the last step's EMAs, held at the close, made as step 1's were); the
    peak and totals as before."""
    led = ledger_pass("train_held_roles.py", ["--ema"], steps=2)
    assert led.peak().bytes == 10_380
    s = led.summary()
    assert s.at_peak == {
        "parameter": MODEL, "buffer": 0, "gradient": MODEL, "optimizer_state": 0,
        "activation": 0, "temporary": 2_080, "input": 544, "workspace": 0,
        "other": 3_268, "communication": 0}
    assert (s.resident["temporary"], s.resident["other"]) == (32, MODEL)


def test_a_gradient_the_script_keeps_past_the_next_one_is_other_from_then():
    """`--ma 2` (grokfast's `gradfilter_ma`, window 2): the script's deque keeps each step's
    gradient storage after `zero_grad()` drops `.grad` and the next backward makes a new one
    (Note [A gradient the script keeps past its step]). Before: `gradient` 5,576 B at the
    peak (step 2's filter) and 6,732 B resident at the end, 3 x the model, the gradient
    curve up to 6,732; `other` 0. Now each past gradient reads `other` from its parameter's
    next gradient on, named `<parameter> (a past gradient)`: `gradient` 2,244 and `other`
    3,332 at the peak, 2,244 and 4,488 resident, the gradient curve never above the model;
    predict's breakdown says the same, the peaks as before."""
    pol = "offload:blocks.*"
    run = run_client("train_held_roles.py", ["--ma", "2"], [pol], steps=2)
    led = run.ledger
    # `sum()` over the deque takes 12 B of kernel scratch, which the ledger explains
    assert led.peak_with_scratch() == run.allocator_peak
    assert run.ledger_peak == 10_444
    at = {c: b for c, b in run.summary.at_peak.items() if c != "workspace"}   # the scratch
    assert at == {
        "parameter": MODEL, "buffer": 0, "gradient": MODEL, "optimizer_state": 0,
        "activation": 0, "temporary": 2_080, "input": 544, "other": 3_332,
        "communication": 0}
    assert (run.summary.resident["gradient"], run.summary.resident["other"]) == (
        MODEL, 2 * MODEL)
    names = set(led.live_at(led.n_events - 1).query("category == 'other'")["name"])
    assert "blocks.0.fc.weight (a past gradient)" in names
    curves = led.curve_by_category()
    assert (curves.sum(axis=1).to_numpy() == led.curve()).all()
    assert curves["gradient"].max() == MODEL            # before: 3 * MODEL
    p = run.policies[pol]
    assert p.predicted == p.measured == run.allocator_peak
    from memledger.replay.predict import predict
    from memledger.replay.policies import parse_policy

    at = predict(led, [parse_policy(pol)], bandwidth=1e9).policies[0].at_peak
    assert (at["gradient"], at["other"]) == (MODEL, 3_332)     # before: 5,576, 0


def test_a_gradient_no_grad_holds_is_other_from_the_drop():
    """`--ma 3` (window 3: two steps only append, no gradient is rebound): `zero_grad()`
    drops each `.grad` after step 1 and the deque keeps the storages. The ledger had no
    event for the drop: they read `gradient` until each parameter's next gradient was
    made, in step 2's backward. At the peak (step 2's backward, the head's and blocks.1's
    new gradients made, blocks.0's not yet) `gradient` read 2,244 (blocks.0's kept 1,088
    among them) and `other` 1,156; from the zero_grad to the backward, 2,244 B of
    `gradient` beside no `.grad`. Now an `ungrad` record at the zero_grad's end (Note [A
    gradient dropped from .grad], trace/dropped_grads.py): `gradient` 1,156 and `other`
    2,244 at the peak, none from the zero_grad on; `model.zero_grad()` (no optimizer
    hook) is seen where step 2's forward begins. Resident as before; the fake ledger
    reads the same."""
    led = ledger_pass("train_held_roles.py", ["--ma", "3"], steps=2)
    assert led.peak().bytes == 8_784
    s = led.summary()
    assert s.at_peak == {
        "parameter": MODEL, "buffer": 0, "gradient": 1_156, "optimizer_state": 0,
        "activation": 1_024, "temporary": 1_572, "input": 544, "workspace": 0,
        "other": MODEL, "communication": 0}
    assert (s.resident["gradient"], s.resident["other"]) == (MODEL, MODEL)
    ph = led.phases
    zero = int(ph[(ph["phase"] == "zero_grad") & (ph["step"] == 2)]["ev"].iloc[0])
    fwd = int(ph[(ph["phase"] == "forward") & (ph["step"] == 2)]["ev"].iloc[0])
    for ev in (zero, fwd):
        live = led.live_at(ev)
        assert live.query("category == 'gradient'")["bytes"].sum() == 0   # before: 2,244
        past = live.query("category == 'other'")
        assert past["bytes"].sum() == MODEL
        assert "blocks.0.fc.weight (a past gradient)" in set(past["name"])
    curves = led.curve_by_category()
    assert (curves.sum(axis=1).to_numpy() == led.curve()).all()
    by_model = ledger_pass("train_held_roles.py", ["--ma", "3", "--model-zero"], steps=2)
    at = by_model.live_at(fwd)
    assert (at.query("category == 'gradient'")["bytes"].sum(),
            at.query("category == 'other'")["bytes"].sum()) == (0, MODEL)
    assert by_model.summary().at_peak == s.at_peak
    fake = ledger_pass("train_held_roles.py", ["--ma", "3"], steps=2, fake_device="cpu")
    assert fake.summary().at_peak == s.at_peak


def test_a_last_loss_made_as_the_kept_average_is_no_state():
    """`--loss-avg`: the loss is `mse + 1e-4 * l2` and the script keeps `avg = avg * 0.9 +
    loss.detach() * 0.1`, both an `add` in the script of 4 B. Both are held at the close.
    fix53f's rule for the last step read a storage held there `other` where the step before
    made one by the same op, in the same module, of the same bytes that the last step read
    (step 1's average): the last loss read `other` with the average, resident `temporary`
    0 and `other` 8. Now the last step's storage is the script's state where it was made
    from that one (Note [Read by the next step]): the average, through `avg * 0.9`; the
    loss is made from the step's own forward and stays `temporary`: 4 and 4."""
    led = ledger_pass("train_held_roles.py", ["--loss-avg"], steps=2)
    s = led.summary()
    assert (s.resident["temporary"], s.resident["other"]) == (4, 4)   # before: 0, 8
    end = led.live_at(led.n_events - 1)
    assert set(end.query("category == 'temporary'")["op"]) == {"add.Tensor"}


def test_an_ema_written_in_place_from_the_step_before_is_state():
    """`--ema-in-place`: each step's EMA is a fresh product of the gradient with the step
    before's added into it in place (`new = g * 0.1; new.add_(old, alpha=0.9)`), then read
    into the gradient (`p.grad.add_(new)`). The last step's EMAs, held at the close, were
    reached by no chain of storages made at a last read (`old`'s last read is the `add_`,
    which makes nothing) and read `temporary`: resident `temporary` 2,276 B (the EMAs'
    2,244 beside the step's own 32), `other` 0. Now a read's free record names the storage
    the op wrote in place (`into`: Note [Written in place from the step before],
    ledger/held_roles.py) and the chain goes through it: 32 and 2,244. The peak (8,784 B)
    and its categories as before; the fake ledger reads the same."""
    led = ledger_pass("train_held_roles.py", ["--ema-in-place"], steps=2)
    assert led.peak().bytes == 8_784
    s = led.summary()
    assert s.at_peak == {
        "parameter": MODEL, "buffer": 0, "gradient": 1_156, "optimizer_state": 0,
        "activation": 1_024, "temporary": 1_572, "input": 544, "workspace": 0,
        "other": MODEL, "communication": 0}
    assert (s.resident["temporary"], s.resident["other"]) == (32, MODEL)  # 2,276, 0
    fake = ledger_pass("train_held_roles.py", ["--ema-in-place"], steps=2, fake_device="cpu")
    assert (fake.summary().at_peak, fake.summary().resident) == (s.at_peak, s.resident)


def test_a_gradient_put_back_reads_other_only_while_no_grad_holds_it():
    """`--put-back`: after backward the script keeps each `.grad`, clears them, runs a
    check forward under no_grad (a batch of 32, where the peak is), puts the same tensors
    back and steps: each gradient storage is dropped, a `.grad` again, and dropped again by
    the next zero_grad. The take-back record said no event (`ev` -1) and a storage had one
    cut, so it read `gradient` until its last drop: 2,244 B of `gradient` at the peak, with
    no `.grad` set. Now the take-back says when (`at`) and the span between reads `other`
    (Note [A gradient dropped from .grad, then put back], trace/dropped_grads.py): at the
    peak `gradient` 0, `other` 2,244 (`<parameter> (a past gradient)`), predict's breakdown
    the same; `gradient` again from the put-back, resident as before."""
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    led = ledger_pass("train_held_roles.py", ["--put-back"], steps=2)
    assert led.peak().bytes == 13_260
    s = led.summary()
    at = {"parameter": MODEL, "buffer": 0, "gradient": 0, "optimizer_state": 0,
          "activation": 0, "temporary": 6_180, "input": 2_592, "workspace": 0,
          "other": MODEL, "communication": 0}
    assert s.at_peak == at                              # before: gradient 2,244, other 0
    assert (s.resident["gradient"], s.resident["other"]) == (MODEL, 0)
    names = set(led.live_at(led.peak().event).query("category == 'other'")["name"])
    assert "blocks.0.fc.weight (a past gradient)" in names
    ph = led.phases
    step = int(ph[(ph["phase"] == "optimizer") & (ph["step"] == 1)]["ev"].iloc[0])
    assert led.by_category(step)["gradient"] == MODEL  # put back: a gradient again
    curves = led.curve_by_category()
    assert (curves.sum(axis=1).to_numpy() == led.curve()).all()
    pred = predict(led, [parse_policy("offload:blocks.*")], bandwidth=1e9).policies[0]
    assert {c: b for c, b in pred.at_peak.items() if c != "workspace"} == \
        {c: b for c, b in at.items() if c != "workspace"}


@pytest.mark.parametrize("history,steps,before,after", [
    ("list", 2, (64, 0), (32, 32)), ("list", 3, (64, 32), (32, 64)),
    ("deque", 3, (64, 32), (32, 64))])
def test_a_loss_history_held_one_step_is_the_scripts(history, steps, before, after):
    """`--history list|deque`: the script keeps every loss (`losses.append(loss.detach())`
    after each backward; a `deque(maxlen=5)` as for a plateau check), 32 B each. At the
    close the loss the step before made, held one step, read `temporary` (Note [A step's
    product handed back by the next step]: a closure's loss is held so until the step
    returns) where the older ones read `other` (resident `temporary`, `other`: `before`).
    The step end's `holders` record now names what holds the step before's products, and
    one held as an item of a container is kept past the close (Note [A history the script
    keeps]): `after`; the last step's own loss stays `temporary`. The peak (in the last
    step) moves the same bytes; its sum is unchanged."""
    led = ledger_pass("train_held_roles.py", ["--history", history], steps=steps)
    s = led.summary()
    assert (s.resident["temporary"], s.resident["other"]) == after
    assert (s.at_peak["temporary"] - 1_540, s.at_peak["other"]) == after
    assert led.peak().bytes == 6_508 + 32 * steps

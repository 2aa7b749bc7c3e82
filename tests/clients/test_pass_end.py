"""What follows a backward pass directly (tests/clients/train_pass_end.py; Note [A pass's
end met first outside an op], memledger/trace/collector.py): `opt.zero_grad()` or
`opt.step()` right after `loss.backward()`, with no op between, and the next forward.

Measured (the helper fix55f, 2026-12-07, torch 2.13.0 CPU, one intra-op thread; plain
torch, Adam, a 32-64-32-1 MLP of 16,900 B, batch 16, 2 steps, ledger passes): `--order
keep` peaks at 118,064 B in the optimizer's step, before and after; only the categories
moved. The other orders read the same before and after.
"""

from __future__ import annotations

import pytest

from memledger.replay.policies import parse_policy
from memledger.replay.predict import predict
from tests.clients.harness import ledger_pass

pytestmark = pytest.mark.clients

MODEL = (32 * 64 + 64 + 64 * 32 + 32 + 32 + 1) * 4   # 16,900 B


def _at(parameter=MODEL, gradient=MODEL, optimizer_state=2 * MODEL + 24, activation=0,
        temporary=0, input=0, other=0) -> dict:
    return {"parameter": parameter, "buffer": 0, "gradient": gradient,
            "optimizer_state": optimizer_state, "activation": activation,
            "temporary": temporary, "input": input, "workspace": 0, "other": other,
            "communication": 0}


@pytest.mark.slow
def test_gradients_a_zero_grad_right_after_backward_drops_were_gradients():
    """`--order keep`: two losses a step, each one's gradients kept by the script
    (`[p.grad for p in params]`, no op) and cleared by the next `zero_grad()`, the first
    right after its backward. That zero_grad's `record_function` returned before the phase
    switch, so the first loss's pass never ended: its gradients were never named, and
    their drop never seen. At the peak (the step's `div`) they read `temporary` (33,540
    B, where the step's own are 16,640) beside the second loss's `other` (a past
    gradient, 16,900); resident, `temporary` 8,708. Now the pass ends at the
    `record_function`'s entry: both losses' gradients read `other` from their drop."""
    led = ledger_pass("train_pass_end.py", ["--order", "keep"], steps=2)
    assert led.peak().bytes == 118_064
    s = led.summary()
    assert s.at_peak == _at(temporary=16_640, other=2 * MODEL)   # before: 33,540, 16,900
    assert s.resident == _at(other=2 * MODEL)                    # before: 8,708, 25,092
    ph = led.phases
    zero = ph[(ph["phase"] == "zero_grad") & (ph["step"] == 1)]["ev"].tolist()
    past = led.live_at(zero[1]).query("category == 'other'")   # the second zero_grad
    assert past["bytes"].sum() == MODEL                          # before: 0
    assert "0.weight (a past gradient)" in set(past["name"])
    at = predict(led, [parse_policy("checkpoint:*")], bandwidth=1e9).policies[0].at_peak
    assert (at["temporary"], at["other"]) == (16_640, 2 * MODEL)
    fake = ledger_pass("train_pass_end.py", ["--order", "keep"], steps=2, fake_device="cpu")
    assert (fake.summary().at_peak, fake.summary().resident) == (s.at_peak, s.resident)


@pytest.mark.parametrize("order, peak, at", [
    ("step", 84_264, _at(temporary=16_640)),
    ("drop", 88_240, _at(activation=4_096, temporary=14_472, input=2_048)),
    ("forward", 88_240, _at(activation=4_096, temporary=14_472, input=2_048)),
])
def test_a_step_or_a_forward_right_after_backward_reads_as_before(order, peak, at):
    """`step()` right after `backward()` (the plain loop), a probe pass's gradients added
    to the step's and dropped by `zero_grad()` right after, and the next forward right
    after `backward()`: the optimizer's pre-hook names the gradients, the probe's storages
    are the step's (accumulated in place, named at the step), and a module call ends the
    pass (Note [Phases at a module call]). The pass's end now runs at the
    `record_function`'s entry: a zero-length phase `other` before `optimizer` or
    `zero_grad`, the same numbers."""
    led = ledger_pass("train_pass_end.py", ["--order", order], steps=2)
    assert led.peak().bytes == peak
    s = led.summary()
    assert s.at_peak == at
    assert s.resident == _at()
    ph = led.phases
    assert not ph[ph["phase"] == "backward"].empty
    ends = [b for a, b in zip(ph["phase"], ph["phase"][1:]) if a == "backward"]
    assert set(ends) == {"other"}   # the pass always ends before what follows begins


def test_the_doctor_reads_kept_gradients_put_back_as_used():
    """`--order keep` puts the sum of both losses' kept gradients into `.grad` before the
    step: every backward pass reaches the update. The doctor warned `dropped_update` "3 of
    6 backward passes made gradients that no optimizer.step() used" (the second backward
    found `.grad` None and the step credited it alone); now the kept gradients' passes are
    folded into the step's (Note [A gradient folded into the step's],
    memledger/trace/doctor_folded.py). The probe pass of `--order drop`, whose gradients a
    zero_grad drops, is still found (its 2 of 5 passes at 3 steps)."""
    from memledger.doctor.run import diagnose_in_process

    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / "train_pass_end.py", ["--order", "keep"], 3)
    assert outcome.code == 0, outcome.reason
    assert [f.line() for f in report.findings] == []
    report, outcome = diagnose_in_process(HERE / "train_pass_end.py", ["--order", "drop"], 3)
    (f,) = report.findings
    assert f.check == "dropped_update"
    assert (f.evidence["backward_passes"], f.evidence["dropped"]) == (5, 2)


def test_a_backward_that_is_the_scripts_last_work_leaves_gradients():
    """`--order end`: two steps, then the gradients cleared and one more backward, the
    script's last work. Its pass never ended (no op, module call, `record_function` or step
    after it; the model is freed as `main()` returns), so its new gradients were never
    named, and "resident at the end" read them `temporary`: 16,908 B (the MLP's 16,900 B of
    gradients and the last loss and its backward seed, 4 B each), no `gradient`. The
    engine's callback at the pass's last node names them now (Note [Gradients named as the
    engine finishes], memledger/trace/collector.py): `gradient` 16,900, `temporary` 8."""
    led = ledger_pass("train_pass_end.py", ["--order", "end", "--steps", "2"], steps=3)
    s = led.summary()
    assert s.resident == _at(temporary=8)              # before: gradient 0, temporary 16,908
    assert s.at_peak == _at(temporary=16_640)
    assert led.peak().bytes == 84_264
    fake = ledger_pass("train_pass_end.py", ["--order", "end", "--steps", "2"], steps=3,
                       fake_device="cpu")
    assert fake.summary().resident == s.resident

"""A running buffer the script keeps from each step's output and hands to the next step's
forward, made outside the forward (tests/clients/train_carried_buffer.py; Notes [A state
the script updates outside the forward] in memledger/ledger/carried.py and [A batch is
what no step made] in memledger/trace/collector.py).

Measured (the helper fix57b, 2026-12-07, torch 2.13.0 CPU, AMD Zen 4, one intra-op
thread; 3 steps, batch 8, dim 16): ledger = allocator 5,992 B (`--where loss`) and 5,480 B
(`update`, `after`), before and after; only the buffers' categories and names move.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import ledger_pass, run_client

pytestmark = pytest.mark.clients

BUF = 8 * 16 * 4   # one buffer, 512 B


@pytest.mark.slow   # a run_client and a fake ledger pass
def test_a_buffer_the_script_updates_in_the_loss_phase_is_carried_state():
    """`--where loss`: each step's buffer is made after its forward, before its backward,
    and the next step reads it in its forward and, last, where it makes the next buffer,
    in the loss phase. Before, read by its lifetime, each buffer was the step's
    `temporary`: resident `temporary` 1,056 B, `other` 0; at the peak (step 2's
    backward) `temporary` 2,592, `other` 0. Now it is the state the script carries
    (Note [A state the script updates outside the forward]): `temporary` until its step's
    end, `other` from there, named `buf (carried by the script)`. The prediction the same
    number."""
    pol = "offload:lin"
    run = run_client("train_carried_buffer.py", ["--where", "loss"], [pol], steps=3)
    led = run.ledger
    assert led.peak_with_scratch() == run.ledger_peak == run.allocator_peak == 5_992
    s = run.summary
    assert (s.resident["temporary"], s.resident["other"]) == (32 + BUF, BUF)  # 1,056, 0
    assert (s.at_peak["temporary"], s.at_peak["other"]) == (2_080, BUF)       # 2,592, 0
    st = led.storages
    ends = led.steps["ev"].astype(int).tolist()
    bufs = st[(st["category"] == "other") & (st["bytes"] == BUF)]
    assert bufs[["op", "cat_before", "cat_until", "name"]].values.tolist() == [
        [op, "temporary", end, "buf (carried by the script)"]
        for op, end in zip(["mul.Tensor", "add.Tensor", "add.Tensor"], ends)]
    p = run.policies[pol]
    assert p.predicted == p.measured
    fake = ledger_pass("train_carried_buffer.py", ["--where", "loss"], steps=3,
                       fake_device="cpu")
    assert (fake.peak().bytes, fake.summary().resident) == (5_992, s.resident)


@pytest.mark.parametrize("where", ["update", "after"])
def test_a_buffer_the_script_makes_outside_the_step_is_no_batch(where):
    """`--where update` (after the backward, before `opt.step()`) and `--where after`
    (after it): the buffer is made where the script makes its batch, and the next forward
    takes it as an argument, so each read `input` (at the peak `input` 1,568 B: the
    batch's 544 and two buffers; `after` resident `input` 1,056). It is made from the
    step's forward products (`z`), which no batch is (Note [A batch is what no step
    made]): now `other`, the script's state, from where it was made."""
    led = ledger_pass("train_carried_buffer.py", ["--where", where], steps=3)
    s = led.summary()
    assert led.peak().bytes == 5_480
    assert (s.at_peak["input"], s.at_peak["other"]) == (544, 2 * BUF)   # 1,568, 0
    assert (s.resident["input"], s.resident["other"]) == (544, BUF)
    st = led.storages
    bufs = st[(st["bytes"] == BUF) & (st["phase"] == "other") &
              (st["op"] != "randn.default")]
    assert bufs["category"].tolist() == ["other", "temporary", "temporary", "other"] + (
        ["temporary", "temporary", "other"] if where == "update" else [])

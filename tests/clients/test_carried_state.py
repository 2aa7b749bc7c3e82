"""What the ledger calls a hidden state the script carries into the next step once the
backward that read its saves has run (tests/clients/train_carried_state.py; Note [A state
carried into the next step], memledger/ledger/carried.py). Plain torch: HRM-pytorch's
deep-supervision segments hand theirs on so (its tier, test_hrm_clients.py, skips without
the library).

Measured (the helper fix54e, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX2), one intra-op
thread; 3 steps, batch 8, dim 16, 2 unrolled cells): the ledger and the allocator 6,508 B
(`--add`) and 9,068 B, before and after; the predictions the same numbers before and
after (only their breakdown's labels moved: `checkpoint:cell` 20,588 B, `offload:cell`
7,020 B). No kernel scratch. The helper fix55b (the last step's state by its holder, Note
[The last step's state, by its holder]): `--add --states` 7,020 B, `--grow` 16,748 B,
ledger = allocator; `checkpoint:cell` 20,588 and 34,412 B, `offload:cell` 7,532 and
17,772 B predicted = measured, as on main.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import ledger_pass, run_client

pytestmark = pytest.mark.clients

STATE = 8 * 16 * 4   # one hidden state, 512 B


def test_a_state_carried_into_the_next_step_is_other_from_its_steps_end():
    """`--add`: each step's last hidden state is saved by its graph (TanhBackward's
    result, the head's input), read by its backward, held by the script over the whole
    next step (`carried`) and read there by an `add`, which saves nothing. Before, it read
    `activation` its whole life: 1,056 B at the peak (step 2's backward), of which 512 B
    are step 1's state, and 1,056 B resident at the end (steps 2's and 3's states and the
    last output, 32 B), and `show`'s "Saved for backward" before the last backward counted
    step 2's state (1,568 B). Now it reads `other` from its step's end (the last step's
    state too: `h` held an earlier step's carried state at that step's end); the last
    output, which no next step reads, stays an activation. The replay's rules read the
    activation they read before: every prediction is the same number, its breakdown
    labelled as `show` is."""
    pol = "offload:cell"
    run = run_client("train_carried_state.py", ["--add"], [pol], steps=3)
    led = run.ledger
    assert led.peak_with_scratch() == run.ledger_peak == run.allocator_peak == 6_508
    s = run.summary
    assert (s.at_peak["activation"], s.at_peak["other"]) == (544, STATE)   # before 1,056, 0
    assert (s.resident["activation"], s.resident["other"]) == (32, 2 * STATE)  # 1,056, 0
    ev = led.peak().event
    carried = led.live_at(ev).query("category == 'other'")
    assert carried[["op", "module", "bytes"]].values.tolist() == [["tanh.default", "cell",
                                                                     STATE]]
    sid = int(carried["sid"].iloc[0])
    row = led.storages.loc[sid]
    step1_end = int(led.steps["ev"].iloc[0])
    assert (row["cat_until"], row["cat_before"]) == (step1_end, "activation")
    # an activation until its step's end, saved there and read by that step's backward
    assert led.live_at(step1_end - 1).loc[sid, "category"] == "activation"
    # `show`'s "Saved for backward" just before the last backward: step 3's own saves, not
    # step 2's carried state (before: 1,568 B)
    assert int(led.saved_before_backward()[1]["bytes"].sum()) == 1_056
    curves = led.curve_by_category()
    assert (curves.sum(axis=1).to_numpy() == led.curve()).all()
    p = run.policies[pol]
    assert p.predicted == p.measured == 7_020                        # as before
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    at = predict(led, [parse_policy(pol)], bandwidth=1e9).policies[0].at_peak
    assert (at["activation"], at["other"]) == (1_056, STATE)         # before 1,568, 0
    fake = ledger_pass("train_carried_state.py", ["--add"], steps=3, fake_device="cpu")
    assert (fake.peak().bytes, fake.at_peak(), fake.summary().resident) == (
        6_508, led.at_peak(), s.resident)


def test_a_carried_state_the_next_step_saves_again_stays_an_activation():
    """Without `--add` the next step's `h_prev @ W_h` saves the carried state again for its
    own backward: it is an activation for that step, and keeps the category its whole life
    (one change per storage): 1,056 B of activation at the peak (step 2's backward) and
    resident, as before."""
    s = ledger_pass("train_carried_state.py", [], steps=3).summary()
    assert (s.at_peak["activation"], s.at_peak["other"]) == (1_056, 0)
    assert (s.resident["activation"], s.resident["other"]) == (1_056, 0)


def test_show_names_a_carried_state_by_the_scripts_variable():
    """`--add`: the state each step carries reads `other` from its step's end (above), and
    `show` named it by the op that made it, as if the model held it: `tanh` in `cell` among
    the peak's largest tensors (name ""), and `tanh in cell` atop the idle table (512 B x 3,
    119 idle events). The script holds it, as `h` at the end it is carried from (the
    `holders` record, Note [A carried state, named by its holder]): now
    `h (carried by the script)` in both tables and in `--json`; its module stays the op's,
    and the activation it was until its step's end keeps the op's name."""
    led = ledger_pass("train_carried_state.py", ["--add"], steps=3)
    s = led.summary()
    other = [r for r in s.to_json_dict()["top_tensors"] if r["category"] == "other"]
    assert other == [{"bytes": STATE, "category": "other", "module": "cell", "shape": "8x16",
                      "dtype": "float32", "op": "tanh.default",
                      "name": "h (carried by the script)"}]             # before: name ""
    row = s.to_json_dict()["idle"][0]
    assert (row["bytes"], row["count"], row["category"], row["module"], row["name"],
            row["idle_events"]) == (STATE, 3, "other", "cell", "h (carried by the script)",
                                    119)                                # before: name ""
    step1_end = int(led.steps["ev"].iloc[0])
    sid = int(led.live_at(led.peak().event).query("category == 'other'")["sid"].iloc[0])
    assert led.live_at(step1_end - 1).loc[sid, ["category", "name", "module"]].tolist() == [
        "activation", "", "cell"]
    assert led.live_at(step1_end).loc[sid, ["category", "name", "module"]].tolist() == [
        "other", "h (carried by the script)", "cell"]
    from rich.console import Console

    from memledger.report.terminal import print_summary

    con = Console(width=200, record=True)
    print_summary(s, con, source="run.ledger")
    lines = [ln.rstrip() for ln in con.export_text().splitlines()]
    assert "  512 B │ other      │ cell     │ 8x16   │ float32 │ h (carried by the script)" \
        in lines
    assert "  512 B │ 3 │ other      │ h (carried by the script) │ 8x16   │         119" \
        in lines


@pytest.mark.slow   # two ledger passes: 10.4 s here at load 12 on 2 cores
def test_the_last_steps_state_is_what_its_name_held_in_an_earlier_step():
    """The last step has no next one to read its state (Note [The last step's state, by its
    holder]): a storage of it held at the close reads `other` where the name of the
    script's that holds it at the step's end held, at an earlier step's end, the state
    that step carried (`holders` records: Note [Who holds a saved storage at a step's end],
    trace/step_holders.py). Before, by likeness (the same op, module and bytes as a state
    an earlier step carried), both cases read wrong:
    `--add --states` (the script also holds every unrolled state as `states`): the last
    step's first unrolled state, a `tanh` in `cell` of 512 B as the carried one, held by
    `states[0]` and read by no step, read `other`: resident `activation` 32 B, `other`
    1,536 B. Now it is the step's own, as the output is: 32 + 512 and 1,024.
    `--grow` (the state keeps its past rows: 1,024, 2,048, 3,072 B in steps 1 to 3):
    the last step's state, held by `h` as each earlier step's was, had bytes no earlier
    state had and stayed `activation`: resident 3,104 B and `other` 2,048 B. Now 32 (the
    output) and 2,048 + 3,072."""
    led = ledger_pass("train_carried_state.py", ["--add", "--states"], steps=3)
    s = led.summary()
    assert led.peak().bytes == 7_020
    assert (s.resident["activation"], s.resident["other"]) == (32 + STATE, 2 * STATE)
    st = led.storages
    last_end = int(led.steps["ev"].iloc[-1])
    live = st[(st["freed"] < 0) | (st["freed"] > last_end)]
    mine = live[(live["op"] == "tanh.default") &
                (live["created"] > int(led.steps["ev"].iloc[1]))]
    # step 3's two unrolled states: the first (`states[0]`) the step's, the last (`h`) carried
    assert mine[["bytes", "category", "cat_until"]].values.tolist() == [
        [STATE, "activation", -1], [STATE, "other", last_end]]

    led = ledger_pass("train_carried_state.py", ["--grow"], steps=3)
    s = led.summary()
    assert led.peak().bytes == 16_748
    # step 2's state (32 rows, 2,048 B, held by `carried`) and step 3's (48 rows, 3,072 B)
    assert (s.resident["activation"], s.resident["other"]) == (32, 4 * STATE + 6 * STATE)
    st = led.storages
    last_end = int(led.steps["ev"].iloc[-1])
    state = st[(st["op"] == "tanh.default") & (st["bytes"] == 6 * STATE)]   # 48 rows x 16 fp32
    assert state[["category", "cat_until", "cat_before"]].values.tolist() == [
        ["other", last_end, "activation"]]


@pytest.mark.slow   # three ledger passes and a measure: 5.1 s here
def test_a_carried_state_no_op_saved_reads_as_a_saved_one():
    """`--add --residual`: each cell adds to the state (`h = h_prev + tanh(x @ W_in)`) and
    the head reads `tanh(h)`, so no op saves the state: the `add` that makes it, the next
    step's `add` that reads it and the head's `tanh` save nothing of it (accelerated-scan's
    reference scan carries its state so). Before, it read by its lifetime (Note [Kept by
    the script across a step]): step 1's state `other` from the `add` that made it in step
    1's forward (held by `carried` over the whole of step 2), steps 2's and 3's
    `temporary`, so resident `temporary` 1,056 B and `other` 0, where `--add` (whose
    `tanh` saves the state) reads 32 and 1,024. Now (Note [A state no op saved]) it reads
    as the saved one does: the step's `temporary` until its step's end, `other`, named
    `h (carried by the script)`, from there; the last step's by its holder (`h` in the
    `holders` record's `made`). Predictions: the same number (the replay's rules read the
    temporary it was), the breakdown labelled as `show` is."""
    pol = "offload:cell"
    run = run_client("train_carried_state.py", ["--add", "--residual"], [pol], steps=3)
    led = run.ledger
    assert led.peak_with_scratch() == run.ledger_peak == run.allocator_peak == 6_536
    s = run.summary
    assert (s.at_peak["temporary"], s.at_peak["other"]) == (1_056, STATE)    # as before
    assert (s.resident["temporary"], s.resident["other"]) == (32, 2 * STATE)  # 1,056, 0
    saved = ledger_pass("train_carried_state.py", ["--add"], steps=3).summary().resident
    assert (s.resident["temporary"], s.resident["other"]) == (saved["temporary"],
                                                              saved["other"])
    st = led.storages
    ends = led.steps["ev"].astype(int).tolist()
    state = st[st["op"] == "add.Tensor"].query("bytes == @STATE and category == 'other'")
    assert state[["module", "cat_before", "cat_until", "name"]].values.tolist() == [
        ["cell", "temporary", end, "h (carried by the script)"] for end in ends]
    sid = int(state.index[0])           # step 1's: before, `other` from its `add` on
    assert led.live_at(ends[0] - 1).loc[sid, ["category", "name"]].tolist() == [
        "temporary", ""]
    assert led.live_at(ends[0]).loc[sid, ["category", "name"]].tolist() == [
        "other", "h (carried by the script)"]
    curves = led.curve_by_category()
    assert (curves.sum(axis=1).to_numpy() == led.curve()).all()
    p = run.policies[pol]
    assert p.predicted == p.measured == 7_020                        # as before
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    at = predict(led, [parse_policy(pol)], bandwidth=1e9).policies[0].at_peak
    assert (at["temporary"], at["other"]) == (2_660, STATE)         # as before
    fake = ledger_pass("train_carried_state.py", ["--add", "--residual"], steps=3,
                       fake_device="cpu")
    assert (fake.peak().bytes, fake.at_peak(), fake.summary().resident) == (
        6_536, led.at_peak(), s.resident)

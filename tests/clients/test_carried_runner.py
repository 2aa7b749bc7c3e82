"""A carried state whose loop the script does not write in its own `main`
(tests/clients/train_carried_runner.py): a trainer's loop in a library, and a function of
the script called each step (Notes [A loop a library runs] in memledger/trace/
step_holders.py, [One name, one holder] in memledger/ledger/carried.py).

Measured (the helper fix56d, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (Zen 4), one intra-op
thread; 3 steps, batch 8, dim 16, 2 unrolled cells): the ledger and the allocator 8,620 B
on every runner, before and after; only the last step's state's category and the names
moved. No kernel scratch.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import ledger_pass, run_client

pytestmark = pytest.mark.clients

STATE = 8 * 16 * 4   # one hidden state, 512 B
LIB = "fit.h (carried by memledger_test_tbptt)"


def _other_names(led) -> list[tuple[int, str]]:
    return [(r["bytes"], r["name"]) for r in led.summary().to_json_dict()["top_tensors"]
            if r["category"] == "other"]


@pytest.mark.slow   # a run_client, two ledger passes and a fake one: 23 s at load 10
def test_a_state_a_librarys_loop_carries_is_read_from_the_librarys_frames():
    """`--runner library`: the loop is a trainer's `fit` in a stand-in library, which
    carries `h` from step to step. The step's frames are the library's and the script's
    frame holds no saved storage, so no `holders` record was written: the last step's
    state stayed `activation` (resident `activation` 544 B, `other` 512 B), and each
    carried state was named by nothing (`name` ""). The library's frames are read now:
    resident 32 (the last output) and 1,024 (steps 2's and 3's states), as the loop in
    the script reads; named `fit.h (carried by memledger_test_tbptt)`. The peak and every
    prediction are the same numbers (only labels move)."""
    pol = "offload:cell"
    run = run_client("train_carried_runner.py", ["--runner", "library"], [pol], steps=3)
    assert run.ledger_peak == run.allocator_peak == 8_620
    s = run.summary
    assert (s.resident["activation"], s.resident["other"]) == (32, 2 * STATE)  # 544, 512
    assert (s.at_peak["activation"], s.at_peak["other"]) == (544, STATE)       # as before
    assert _other_names(run.ledger) == [(STATE, LIB)]                          # before: ""
    idle = [(r["bytes"], r["count"], r["name"]) for r in s.to_json_dict()["idle"]
            if r["category"] == "other"]
    assert idle == [(STATE, 3, LIB)]                                   # before: 512 B x 2, ""
    p = run.policies[pol]
    assert p.predicted == p.measured
    script = ledger_pass("train_carried_runner.py", ["--runner", "script"], steps=3)
    assert (script.summary().resident, script.peak().bytes, p.predicted) == (
        s.resident, 8_620, run_client_predicted(script, pol))
    fake = ledger_pass("train_carried_runner.py", ["--runner", "library"], steps=3,
                       fake_device="cpu")
    assert (fake.summary().resident["activation"], fake.summary().resident["other"]) == (
        32, 2 * STATE)


def run_client_predicted(led, pol: str) -> int:
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    return predict(led, [parse_policy(pol)], bandwidth=1e9).policies[0].peak_bytes


def test_one_variable_name_in_two_functions_is_named_with_its_function():
    """`--runner function`: each step is `h = train_chunk(model, opt, xs, y, h)`, whose own
    `h` is the new state while `main`'s `h` holds the step before's. `show` named the state
    `h (carried by the script)`, the variable alone (fix55g), as if `main`'s `h` held it;
    now `train_chunk.h (carried by the script)`. The loop in `main` (`--runner script`)
    keeps `h`: one function holds a state under that name."""
    led = ledger_pass("train_carried_runner.py", ["--runner", "function"], steps=3)
    assert _other_names(led) == [(STATE, "train_chunk.h (carried by the script)")]  # "h (..."
    s = led.summary()
    assert (s.resident["activation"], s.resident["other"]) == (32, 2 * STATE)  # as before
    led = ledger_pass("train_carried_runner.py", ["--runner", "script"], steps=3)
    assert _other_names(led) == [(STATE, "h (carried by the script)")]


def test_a_state_the_script_and_a_library_both_hold_is_named_by_the_scripts_name():
    """`--runner dict`: the library's `fit_into` keeps `h` and writes it into the script's
    dict as it goes (`state["h"] = h`), so at each step end the library's frame (`h`,
    `state['h']`) and the script's (`state['h']`) hold the state. `show` wrote every
    holder under the script: `fit_into.state['h'], fit_into.h, main.state['h'] (carried
    by the script)` (the library's `state` also made the script's `state['h']` one of two
    holders of that name). Now the name a user acts on, the script's alone (Note [The
    holder a user acts on]): `state['h'] (carried by the script)`. Bytes as `--runner
    library`."""
    led = ledger_pass("train_carried_runner.py", ["--runner", "dict"], steps=3)
    assert _other_names(led) == [(STATE, "state['h'] (carried by the script)")]
    st = led.storages
    assert st[st["category"] == "other"]["name"].tolist() == [
        "state['h'] (carried by the script)"] * 3
    s = led.summary()
    assert (led.peak().bytes, s.resident["activation"], s.resident["other"]) == (
        8_620, 32, 2 * STATE)


def test_a_state_a_suspended_generator_holds_is_read_from_its_frame():
    """`--runner generator`: the library's `chunks` yields a loss per chunk and keeps the
    state in its own frame; the script steps between two yields, so at each step end the
    generator is suspended, no frame of the stack, and the script's `for` holds it where
    no Python API reads (its frame's value stack). Before: no holder, the last step's
    state `activation` (resident `activation` 544 B, `other` 512) and every state
    unnamed. Now the generator that ran the forward is kept (by weak reference) and its
    frame read at each step end (Note [A state a suspended generator holds]): as
    `--runner library`."""
    led = ledger_pass("train_carried_runner.py", ["--runner", "generator"], steps=3)
    assert _other_names(led) == [(STATE, "chunks.h (carried by memledger_test_tbptt)")]
    s = led.summary()
    assert (led.peak().bytes, s.resident["activation"], s.resident["other"]) == (
        8_620, 32, 2 * STATE)                                          # (544, 512)
    st = led.storages
    assert st[st["category"] == "other"]["name"].tolist() == [
        "chunks.h (carried by memledger_test_tbptt)"] * 3

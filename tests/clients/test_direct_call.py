"""A cell whose `.forward()` the model calls directly (tests/clients/train_direct_call.py),
as ncps' CfC and LTC run their cell every time step (tests/clients/test_ncps_clients.py,
which skips without ncps): plain torch, pinning Note [A forward called directly runs
plainly] (memledger/measure/apply.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt45a, 2026-12-06, torch
2.13.0 CPU; 2 steps, batch 4, 6 time steps, hidden 16): the ledger 23,428 B, equal to the
allocator, in both cases. "Before" is main at b908568.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_cell_whose_forward_is_called_directly_is_refused_alike():
    """Every time step calls `self.cell.forward(x_t, h)`: no module hook sees a call of
    `cell`, so predict refuses a policy on it; measure, whose policy was the cell's
    `forward`, ran it on those calls and measured `checkpoint:cell` 48,400 B and
    `offload:cell` 18,116 B. Both now refuse it, word for word; its Linear, called as a
    module, is still predicted as measured."""
    run = run_client("train_direct_call.py", ["--case", "direct"],
                     ["checkpoint:cell", "offload:cell", "checkpoint:cell.proj"])
    assert run.ledger_peak == run.allocator_peak == 23_428
    for text in ("checkpoint:cell", "offload:cell"):
        p = run.policies[text]
        assert p.predicted is None and p.measured is None, p
        assert p.predict_refusal == p.measure_refusal == (
            "memledger: selector 'cell' matches cell, never called as a module: the code runs "
            "its work through another of its methods (`cell.inverse(x)`, `cell.encode(x)`) or "
            "calls its `.forward()` directly (`self.cell.forward(x)`) or, for a container (an "
            "nn.ModuleList), its submodules one by one; torch's module hooks, the trace's "
            "among them, see none of these, so the trace cannot tell where its work begins "
            "and ends, and a policy acts on a module's call; select the modules inside it "
            "that run as calls: cell.proj, or call the module itself (`self.cell(x)`)")
    p = run.policies["checkpoint:cell.proj"]
    assert p.predicted == p.measured == 53_492, p


def test_a_cell_called_both_ways_is_measured_on_its_module_calls():
    """The first 3 time steps call the cell as a module, the last 3 its `.forward()`: predict
    prices the policy on the module calls it sees, and measure applied it to all six.
    Before: `checkpoint:cell` predicted 35,024 B against 48,400 B measured, `offload:cell`
    19,444 against 18,116, `selective:cell` 36,404 against 50,960. The direct calls now
    run the cell plainly under measure too."""
    pols = {"checkpoint:cell": 35_024, "offload:cell": 19_444, "selective:cell": 36_404}
    run = run_client("train_direct_call.py", ["--case", "both"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 23_428
    for text, peak in pols.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (peak, peak), (text, p)


def test_a_forward_called_directly_keeps_its_phase():
    """`model.forward(x)` (`--call forward`, as ncps' Lightning example calls its model),
    the cell's tanh an `nn.Tanh` module: every module call is a top-level one. Each return
    read as the forward's end and each Tanh as a loss module: 59 phase records in two steps
    (26 `loss`, 24 `forward`), by phase forward 21,168 B and loss 22,160 B. Now (Note
    [Parts called in a forward no hook sees], trace/collector.py) one forward per step, and
    the forward's peak is that of `model(x)`, 22,160 B; the batch the forward was handed
    is `input` as before."""
    from tests.clients.harness import ledger_pass

    called = ledger_pass("train_direct_call.py", ["--act", "module"]).summary()
    led = ledger_pass("train_direct_call.py", ["--act", "module", "--call", "forward"])
    phases = led.phases["phase"].tolist()
    assert phases.count("forward") == 2 and "loss" not in phases, phases
    s = led.summary()
    assert s.peak.bytes == called.peak.bytes == 23_428
    assert s.by_phase_peak["forward"] == called.by_phase_peak["forward"] == 22_160
    st = led.storages
    batch = st[(st["op"] == "randn.generator") & (st["shape"] == "4x6x3")]
    assert set(batch["category"]) == {"input"} and len(batch) == 2

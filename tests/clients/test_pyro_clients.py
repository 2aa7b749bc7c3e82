"""Pyro SVI loops (tests/clients/train_pyro.py): no `optimizer.step()` in the script (pyro's
optim wrapper steps one torch Adam per parameter inside `svi.step`), parameters in pyro's
param store, a guide module beside the model. Skipped without pyro.

The script's pyro modules are imported here, before any pass: in one process the first
pass alone would count what their import makes (as torch_geometric's, in
test_pyg_clients.py); a fresh process per pass (`memledger trace`) counts it in each."""

from __future__ import annotations

import pytest

from tests.clients.harness import HERE, imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("pyro")
_imported = imported_first("pyro.infer.autoguide", "pyro.nn")


def test_svi_steps_found_and_policies_exact():
    """`pyro.module("net", net)` and an `AutoDelta` guide: an SVI step is one training step
    (every per-parameter optimizer, trace/steps.py), the ledger equals the allocator, and
    each policy on the network's layers is predicted to the byte (found so at once)."""
    run = run_client("train_pyro.py", ["--case", "det", "--steps", "4"], [
        "checkpoint:layers.*", "selective:layers.*", "offload:layers.*",
        "checkpoint:layers.0+offload:layers.[1-2]"])
    assert run.summary.steps_traced == 2
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


def test_doctor_on_a_guides_parameters():
    """The guide's `sigma` belongs to no module the doctor names a network (`root` None):
    eval_mode's `int(None)` crashed the doctor, and so `compare`, as 'the script's process
    ended with status 1' (exit 3). Now: no finding."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / "train_pyro.py",
                                          ["--case", "det", "--steps", "4"], 3)
    assert outcome.code == 0, outcome.reason
    assert report.findings == [], report.findings


def test_gates_on_a_bayesian_head():
    """`hybrid`: a deterministic first layer, `PyroSample` weights after it. The capture
    read a prior's scale (`Normal(0., 0.5).expand([1])`: size 1, stride 0) as a loss
    input, and `view(torch.uint8)` refused it inside the script's `log_prob`: the baseline
    'failed' (exit 3). Now checkpoint of the deterministic layer passes bitwise, and of the
    sampled layers is refused as it must be (the re-run draws new weights outside pyro's
    trace)."""
    from memledger.verify.gates import run_gates
    from memledger.verify.runs import Variant, capture_in_process

    rep = run_gates(HERE / "train_pyro.py", ["--case", "hybrid", "--steps", "4"], [
        Variant("checkpoint:layers.0", "checkpoint:layers.0"),
        Variant("checkpoint:layers.*", "checkpoint:layers.*")], steps=2,
        runner=lambda script, argv, variant, steps, out: capture_in_process(
            script, argv, variant, steps))
    assert rep.reproducible
    first, every = rep.outcomes
    assert first.passed and first.comparison.worst_gradient.max_abs == 0.0, first.reason
    # in measure's words since the fifty-first session (was the CheckpointError's name)
    assert not every.passed and every.refused, every.reason
    assert every.reason.startswith("refused: checkpoint:layers.* cannot re-run layers.2: "
                                   "torch's checkpoint found the re-run unlike the first "
                                   "run"), every.reason

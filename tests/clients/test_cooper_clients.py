"""cooper-optim (tests/clients/train_cooper.py): a small classifier under one inequality
constraint (the rate of class 1 at most 0.3) in Cooper's `ConstrainedMinimizationProblem`,
a `DenseMultiplier` with its own `maximize=True` optimizer, each step one `roll()` of a
constrained optimizer that runs the forward, both Lagrangians' backward and both steps.

Measured (`tests/clients/harness.py run_client`, the helper hunt52b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC, one intra-op thread; ledger = allocator, every policy predicted =
measured, 2 steps): `--optimizer sim` 53,528 B (`checkpoint:blocks.*` 59,288, `offload:
blocks.*` 51,108, `selective:blocks.*` 61,336, `checkpoint:blocks.0+offload:blocks.1`
56,664, `checkpoint:head` 57,164); `alt` 53,520 B; `dual-primal` 51,072 + 12 B of kernel
scratch; `extra` 64,528 B (the parameters' copies `ExtraAdam` keeps from the extrapolation
to the step); `alt --violations --formulation augmented --constraint norm` 64,620 B;
`extra --primal sgd --constraint norm` 54,080 B. `trace --fake --device cpu` equal on
`sim`, `alt`, `extra`.
`extra` at 1 step (the fix53b helper, the same day and box): 64,504 B; at the peak
(inside `ExtraAdam.step()`) the copies of the parameters not yet stepped, 9,356 B, read
`parameter` before (19,872 B of parameters for a model and multiplier of 10,516 B) and
`optimizer_state` now (30,372 B: Adam's 21,016 and the copies; Note [A copy the optimizer
keeps, then the parameter], memledger/ledger/held_roles.py); every other number as before.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("cooper") is None:
    pytest.skip("cooper-optim is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_cooper_extragradient_is_predicted_as_measured_and_its_doctor_is_quiet():
    """`ExtrapolationConstrainedOptimizer` with `ExtraAdam` and `ExtraSGD`: two forwards
    and four backward passes a roll. The doctor said, at 2 steps, "4 of 8 backward passes
    made gradients that no optimizer.step() used" (the extrapolation moves the parameters
    along them through `p.data`: Note [Moves of several backward passes, through .data],
    trace/doctor_probe.py) and "a `DenseMultiplier` ran 1 forward under gradients in step 1
    whose graph no backward used" (the primal Lagrangian's detached clone of the
    multiplier, which saves nothing: Note [A graph that saved nothing],
    trace/doctor_unused.py); it finds nothing now. `show` read the copies of the
    parameters `ExtraAdam` keeps from its extrapolation to its step as parameters; they
    are its state now."""
    argv = ["--optimizer", "extra"]
    pols = {"checkpoint:blocks.*": 69_752, "offload:blocks.*": 64_504,
            "checkpoint:blocks.0+offload:blocks.1": 67_128}
    run = run_client("train_cooper.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 64_504
    # ExtraAdam's copies are its state until its step makes each the parameter (Note [A
    # copy the optimizer keeps, then the parameter], memledger/ledger/held_roles.py):
    # before, parameter 19,872 and optimizer_state 21,016 at the peak, 21,028 at most
    at = run.summary.at_peak
    assert (at["parameter"], at["optimizer_state"], at["temporary"]) == (10_516, 30_372, 12_448)
    assert run.ledger.curve_by_category()["parameter"].max() == 10_516
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_cooper.py", argv, 2, None, "")

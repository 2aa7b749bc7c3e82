"""pytorch-minimize (tests/clients/train_torchmin.py): `torchmin.Minimizer` as a torch
optimizer, whose `step(closure)` runs a whole minimization (the closure returns the loss;
the optimizer runs backward itself, with `create_graph=True` for the methods that take
Hessian-vector products), training a small tanh network (dim 8, 2 residual blocks).

Measured (`tests/clients/harness.py run_client`, the helper hunt52b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC, one intra-op thread; ledger = allocator, 2 steps): `--method bfgs`
(dim 16) 9,892,824 B (the inverse Hessian's n x n matrices, n = 641; every block policy
the same); `l-bfgs --dim 8` 18,728 B (`checkpoint:blocks.*` 32,584, `offload:blocks.*`
17,960, `checkpoint:blocks.0+offload:blocks.1` 26,792); `cg --dim 8` 14,348 B;
`newton-cg` 80,968 B and `trust-ncg --dim 8`: checkpoint and offload refused by predict
(a backward that builds a graph and writes `.grad`), run by measure, as documented.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("torchmin") is None:
    pytest.skip("pytorch-minimize is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_torchmin_lbfgs_is_predicted_as_measured_and_newton_cg_has_no_doctor_finding():
    """L-BFGS through `Minimizer`, 1 step of 3 iterations: a policy on every block, offload
    on both and a mix, each predicted and measured to the byte. The doctor on Newton-CG
    (its evaluations' backward and the Hessian-vector products' inside step()) said "ERROR
    zeroed_before_step the gradients of 8 parameters ... were cleared between backward and
    optimizer.step() in step 2": the step was read as the closure returned, after its
    `zero_grad()` and before the optimizer's own backward (Note [A closure that leaves
    backward to the optimizer], trace/doctor_probe.py); it finds nothing now."""
    argv = ["--method", "l-bfgs", "--dim", "8"]
    pols = {"checkpoint:blocks.*": 30_912, "offload:blocks.*": 16_288,
            "checkpoint:blocks.0+offload:blocks.1": 25_120}
    run = run_client("train_torchmin.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 17_056
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_torchmin.py", ["--method", "newton-cg", "--dim", "8"], 2,
                            None, "")

"""Note [Each pass from a fresh process's state] (tests/clients/harness.py): every pass the
harness runs in the pytest process starts from the process-wide state a fresh process has,
whatever an earlier test left: the global generators seeded by the pass's place in its
test, gradients on, float32 default dtype, no default device, deterministic algorithms and
anomaly detection off. tests/clients/train_unseeded.py leaves all of it to the process (no
seed: its init, its crop lengths and its batch order are drawn from the global generators;
its tensors in the default dtype; L-BFGS's closure calls as many as the values ask).

Measured (the helper fix54c, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX2), one intra-op
thread): 2 steps, ledger 15,293 B, allocator 15,521 B; the passes draw apart, as the CLI's
fresh processes do (each starts from OS entropy), and `show` names torch's and numpy's
generators. Before, the numbers were whatever the state before the test gave: after
`torch.manual_seed(7)` and `np.random.seed(7)` 16,561 / 15,345 B, with nothing before it
16,105 / 15,573 B in one process and 18,081 / 16,485 B later in the same one (the generators
where the last test left them), after a script's `torch.set_default_dtype(torch.float64)`
(train_e3nn.py's `--dtype float64` leaves it set) 29,465 / 29,921 B, after
`set_grad_enabled(False)` 14,049 / 15,349 B (L-BFGS runs its closure under `enable_grad`; a
plain loop's backward fails there), after `use_deterministic_algorithms(True)` 14,509 /
16,561 B.
"""

import contextlib
import io
import random

import numpy as np
import pytest
import torch

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


@contextlib.contextmanager
def _polluted():
    """The process-wide state an earlier test could leave, put back after."""
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    torch.autograd.set_detect_anomaly(True)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.use_deterministic_algorithms(False)
        torch.autograd.set_detect_anomaly(False)


def test_a_scripts_numbers_do_not_depend_on_what_ran_before_it():
    """The numbers of a fresh process's state (measured so, as the module says) after a
    test that left the generators seeded elsewhere, float64 the default dtype, gradients
    off, deterministic algorithms and anomaly detection on."""
    with _polluted(), contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_unseeded.py", [], [], steps=2)
    assert (run.ledger_peak, run.allocator_peak) == (15_293, 15_521)
    assert run.summary.measured.generators_apart == ["numpy", "torch"]

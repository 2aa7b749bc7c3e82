"""torch-ema's moving average over a model trained with madgrad's MirrorMADGRAD
(tests/clients/train_kan_ema.py --model mlp), the tier of the pykan / torch-ema / madgrad
set. pykan's KAN is left out of the tier: importing pykan (sympy, matplotlib, scikit-learn,
pandas) costs ~2 s of CPU, twice the tier's budget; what it found is pinned in plain torch
(tests/clients/test_lstsq_fit.py, tests/doctor/closure.py --lbfgs --frozen).

Measured (`tests/clients/harness.py run_client`, the helper hunt51c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, every policy
predicted = measured, none with kernel scratch):
- `--model mlp --opt mirror --ema 0.99 --decay 0.1` (1 step, the test): 45,880 B;
  `checkpoint:fc1` 50,936, `offload:fc*+checkpoint:head` 47,272, `selective:@Linear`
  61,992.
- `--model mlp --ema 0.99` (MADGRAD, momentum 0.9, 2 steps): 74,624 B; `checkpoint:fc1`
  79,680, `checkpoint:*` 95,024, `offload:fc*` 74,112, `selective:@Linear` 90,736,
  `checkpoint:fc2+offload:head` 79,664. `--opt mirror`: 67,440 B; `--momentum 0 --decay
  0.1` 53,072 B; `--decay 0.1 --decouple --accum 2 --ema 0.5` 70,272 B.
- `--model kan --opt madgrad --ema 0.9` (1 step): 172,220 B + 5,120 B of kernel scratch
  = 177,340 B; `checkpoint:act_fun.*` 180,284, `offload:act_fun.0+checkpoint:act_fun.1`
  175,228, `selective:@KANLayer` 182,844.
The doctor finds nothing on the MLP and KAN loops.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("torch_ema") is None or importlib.util.find_spec("madgrad") is None:
    pytest.skip("torch-ema or madgrad is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_an_ema_over_mirror_madgrad_is_predicted_as_measured():
    """MirrorMADGRAD with momentum and weight decay (its `grad_sum_sq`, `s`, `z` and `x0`
    state, and its step counter `k` kept under a string key of `state`), torch-ema's shadow
    copies cloned as the average is made, `ema.update()` after each step and an evaluation
    under `ema.average_parameters()` (store, copy in, restore): a policy on one layer, a mix
    and selective on every Linear, each predicted and measured to the byte; the doctor
    finds nothing (the average's in-place writes to the parameters are outside step())."""
    argv = ["--model", "mlp", "--opt", "mirror", "--ema", "0.99", "--decay", "0.1"]
    pols = {"checkpoint:fc1": 50_936, "offload:fc*+checkpoint:head": 47_272,
            "selective:@Linear": 61_992}
    run = run_client("train_kan_ema.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 45_880
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_kan_ema.py", argv, 2, None, "")

"""flow_matching (tests/clients/train_flow_matching.py): Meta's flow matching library as
its examples train: a velocity model regressed on `AffineProbPath`'s target velocity
(CondOT, cosine, VP or polynomial schedulers), a discrete flow on tokens
(`MixtureDiscreteProbPath`, `MixturePathGeneralizedKL`), and an evaluation between steps
that samples with `ODESolver` / `MixtureDiscreteEulerSolver` under `no_grad` and takes the
model's log-likelihood (`compute_likelihood`, whose divergence turns gradients on inside
torchdiffeq's own modules).

Measured (`tests/clients/harness.py run_client`, the helper hunt52d, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy
predicted = measured or refused by both), 2 steps:
- `--model tf --eval-every 1` (the tiny transformer, ODE sampling): 296,424 B;
  `checkpoint:blocks.*` 212,468 B, `selective:@Block` 278,004 B, `offload:blocks.0+
  checkpoint:blocks.1` 199,220 B, `checkpoint:blocks.*.attn` 258,388 B.
- `--model tf --eval-every 1 --likelihood --scheduler cosine` (Hutchinson divergence):
  304,264 B; `checkpoint:blocks.*` 221,192 B, `offload:blocks.*` 165,064 B,
  `selective:@Block` 286,728 B: before Note [A call with gradients between steps]
  (memledger/replay/prepared.py), each predicted at the baseline.
- `--eval-every 1 --likelihood` (the MLP, exact divergence: two `autograd.grad(...,
  create_graph=True)` through each call): 90,352 B; `checkpoint:main` (101,552 B
  measured) and `offload:main.*` (96,304 B) refused by predict as read by two
  graph-building passes, where it priced both at the baseline before.
- `--mode discrete --model tf --source mask --eval-every 1`: 314,888 B;
  `checkpoint:blocks.*` 215,116 B, `selective:@Block` 280,652 B.
The doctor finds nothing on these loops; `--bug no-zero-grad` is its one `grad_leak`.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("flow_matching") is None:
    pytest.skip("flow_matching is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # bytes move with the intra-op threads (relations hold on 2 too)


def test_a_flow_whose_evaluation_takes_the_likelihood_is_predicted_as_measured():
    """The tiny transformer (one block) trained on the CondOT path, and after every step an
    ODE sample and the log-likelihood (a Hutchinson divergence: the model called with
    gradients inside torchdiffeq's `_PerturbFunc`, then `autograd.grad`), which makes the
    step's peak. Before, `checkpoint:blocks.*` was predicted at 73,304 B and
    `offload:@Block` at the baseline (the policies left off the evaluation's calls)."""
    argv = ["--model", "tf", "--eval-every", "1", "--likelihood", "--depth", "1",
            "--batch", "8", "--seq", "4"]
    pols = {"checkpoint:blocks.*": 75_832, "offload:@Block": 60_136,
            "selective:blocks.0.attn": 73_640}
    run = run_client("train_flow_matching.py", argv, list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 67_768
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_flow_matching.py", argv, 2, None, "")

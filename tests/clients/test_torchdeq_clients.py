"""torchdeq (tests/clients/train_torchdeq.py): a deep equilibrium MLP (an injection, f =
Linear, GroupNorm, ReLU, Linear, a residual and GroupNorm, weight-normalised by
`apply_norm`, its weights made again from `_v`/`_g` by `reset_norm` in every forward), the
fixed point solved under no_grad by `get_deq`'s solver, the gradient by implicit
differentiation (`ift=True`: an autograd Function whose backward runs f again and solves
the backward fixed point by `autograd.grad` through it) or phantom gradients (`grad=N`).

Measured (`tests/clients/harness.py run_client`, the helper hunt54d, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread, 2 steps; ledger with its kernel scratch
= allocator, every policy predicted = measured):
- `--grad ift --iters 4 --batch 4` (the test): 35,780 B, no kernel scratch; `checkpoint:f`
  38,244, `offload:f` 35,780, `selective:f` 38,372 B, all refused by predict before.
- `--grad ift` (8 iterations, batch 8): ledger 40,484 B + 2,048 B of kernel scratch = 42,532 B; `checkpoint:f`
  44,516, `offload:f` 38,948, `selective:f` 46,052 B (all three refused by predict before
  Note [Read many times through another call's save], replay/engine.py);
  `checkpoint:inj+offload:head` 47,588 B. With `--jac-reg`: 48,804 B; `offload:f` 47,268
  (refused before too); `checkpoint:f` refused by predict alone (a re-run in each of two
  backward passes, the Jacobian term's graph-building one and the loss's), measured 55,844.
- `--grad hook` (`hook_ift`: the backward solve inside a hook on f(z*), through the
  forward's own call): 36,996 + 928 B; `checkpoint:f` and `offload:f` refused by predict
  alone (saves 9 passes read, inside one backward phase), measured 44,452 and 36,996;
  `selective:f` refused alike.
- `--grad 2` (phantom gradients): 39,140 B; `checkpoint:f` 46,820, `selective:f` 48,612,
  `offload:f` 37,860 B. `--grad 3 --solver anderson` 43,236; `--core sliced --n-states 2`
  47,140; `--f conv --grad 2 --norm spectral_norm` 479,460 + 18,432 B; `--solver broyden`
  42,116: every policy as measured.
`trace --fake --device cpu` reads the same ledger on each; the doctor finds nothing.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("torchdeq") is None:
    pytest.skip("torchdeq is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_deq_trained_by_implicit_differentiation_is_predicted_as_measured():
    """Implicit differentiation runs f again inside its backward and takes 4
    `autograd.grad` through that call (`--iters 4`: the solvers' max_iter); a policy on f acts on the forward's call at z*, whose
    saves one pass reads. The weight-normalised weights (activations of the forward, saved
    by every call of f) were counted as read by 4 passes through the forward's call, and
    predict refused every policy on f that measure ran."""
    argv = ["--grad", "ift", "--iters", "4", "--batch", "4"]
    pols = {"checkpoint:f": 38_244, "offload:f": 35_780, "selective:f": 38_372}
    run = run_client("train_torchdeq.py", argv, list(pols))
    assert run.ledger_peak == 35_780
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=35_780)
    for policy, peak in pols.items():
        p = run.policies[policy]
        assert p.predicted == p.measured, (policy, p.predict_refusal)
        assert_pinned(p.measured, avx2=peak)
    assert_one_doctor_error("train_torchdeq.py", argv, 2, None, "")

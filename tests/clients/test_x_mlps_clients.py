"""x-mlps-pytorch (tests/clients/train_x_mlps.py): the library's MLP variants as the trunk
of an actor-critic (advantage-weighted cross entropy on actions, reduction='none', plus an
MSE on returns): `create_mlp`, `Feedforwards` (pre-RMSNorm residual), `nFeedforwards`
(nGPT's normalized weights through `torch.nn.utils.parametrize`, or renormalized in place
after each step with `--manual-norm`), `ResidualNormedMLP` (its orthogonal residual update
in float64, FiLM conditioning). x-mlps-pytorch 0.6.9.

Measured (`tests/clients/harness.py run_client`, the helper hunt55c, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1, an AMD CPU with AVX-512 bf16; every policy predicted = measured, `--fake
--device cpu` the same ledger and predictions where it runs):
- `--net ff` (2 steps): 579,964 B + 12 B of kernel scratch = 579,976 B allocator; every
  policy over `net.layers.*` 579,976 B (the peak is outside the layers' activations).
- `--net nff`: 759,616 B; `checkpoint:net.layers.*` 635,192 B, `selective:@nFeedforward`
  637,240 B, `offload:net.layers.*` 593,724 B, `checkpoint:net.proj_in` 764,592 B,
  `offload:@NormLinear` 613,668 B. `--manual-norm`: 599,136 B; checkpoint 578,752 B,
  offload 577,428 B.
- `--net residual --orthogonal --film --accum 2 --clip` (2 steps): 229,884 B;
  `checkpoint:net.layers.*` 218,492 B, `offload:net.layers.*` 204,284 B,
  `checkpoint:net.residual_update` 232,252 B. With `--validate --optim sgd`: 192,652 B,
  five policies predicted = measured; `--fake` stops (exit 2) at the script's
  `f"{tensor:.4f}"` (formatting reads values: docs/fake.md).
- `--net ff --noisy` (Noisable: parameters deep-copied, noised, run by functional_call):
  659,844 B; `checkpoint:net.model.layers.*` 623,172 B, `selective:` 655,940 B,
  `offload:` 579,976 B, `checkpoint:net` 664,772 B, `offload:net` 579,976 B.
The doctor finds nothing on the loops (`--manual-norm`'s in-place renormalization after
the step included), and one `grad_leak` error with `--bug no-zero`.

One bug, in `--fake` (Rule 32, Note [A fake parameter's deep copy] in
trace/fake_literals.py): `--noisy --accum 2` deep-copies parameters that hold the first
micro-batch's gradients, and a fake parameter's deep copy cloned its gradient too: the
fake ledger of `--net mlp` read 12,236 B over the real one, `offload:net.model.layers.*`
17,556 B over.
"""

import pytest

from tests.clients.harness import (assert_one_doctor_error, fake_client_gaps, run_client,
                                   skip_without)

skip_without("x_mlps_pytorch")
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_normalized_feedforwards_are_predicted_as_measured():
    """`--net nff`: every weight an L2-normalized parametrization, made again at each read
    (forward and, under checkpoint, the recompute): ledger = allocator at 759,616 B;
    checkpoint, a class-selected selective and an offload of every NormLinear predicted to
    the byte."""
    pols = {"checkpoint:net.layers.*": 635_192, "selective:@nFeedforward": 637_240,
            "offload:@NormLinear": 613_668}
    run = run_client("train_x_mlps.py", ["--net", "nff"], list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 759_616
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_the_doctor_finds_gradients_never_cleared():
    """`--bug no-zero`: one `grad_leak` error at the backward line; `--net nff
    --manual-norm` (weights renormalized in place after each step) draws nothing."""
    assert_one_doctor_error("train_x_mlps.py", ["--net", "mlp", "--bug", "no-zero"], 2,
                            "grad_leak", "(loss / args.accum).backward()")
    assert_one_doctor_error("train_x_mlps.py", ["--net", "nff", "--manual-norm"], 2, None, "")


@pytest.mark.slow
def test_noisable_parameters_deep_copied_under_accumulation_are_the_same_fake():
    """`--net mlp --noisy --accum 2`: Noisable deep-copies the parameters on each noised
    forward, the second micro-batch's while they hold the first's gradients. The fake
    ledger, its categories at the peak and two policies' predictions equal the real
    run's (before Rule 32: ledger +12,236 B, activation -24,576, temporary +36,812,
    `offload:net.model.layers.*` +17,556)."""
    assert fake_client_gaps("train_x_mlps.py", ["--net", "mlp", "--noisy", "--accum", "2"],
                            ["offload:net.model.layers.*",
                             "checkpoint:net.model.layers.*"]) == {}

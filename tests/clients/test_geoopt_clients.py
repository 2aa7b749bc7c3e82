"""geoopt (tests/clients/train_geoopt.py): parameters on manifolds (`ManifoldParameter`, a
`torch.nn.Parameter` subclass), trained by geoopt's Riemannian optimizers, whose step
projects the gradient, retracts the point (a Cayley transform through `linalg.solve` on
the Stiefel manifold) and transports the momentum, then `point.copy_(new_point)`.

Measured (`tests/clients/harness.py run_client`, the helper hunt40b, 2026-12-06, torch
2.13.0 CPU):
- `--mode stiefel --batch 256` (RiemannianSGD, momentum 0.9; 2 steps): the ledger equal to
  the allocator, 312,760 B; `checkpoint:blocks.*` 256,120 B, `offload:blocks.*` 184,632 B (one thread),
  `selective:blocks.*` 288,888 B, `checkpoint:blocks.0+offload:blocks.1` 222,776 B,
  predicted and measured. With `--opt adam --euclidean --stabilize 1` (RiemannianAdam, a QR
  retraction, projecting every step): 324,424 B; `checkpoint:blocks.*` 267,784 B,
  `offload:blocks.1` 292,424 B, `selective:@StiefelBlock` 300,552 B both sides.
- `--mode stiefel` (batch 16, 1 step): the peak is the optimizer's, in the Cayley
  retraction's `linalg.solve`, 76,712 B in the ledger, 76,756 B with 44 B of kernel scratch,
  equal to the allocator.
- `--mode poincare` (Poincare embeddings of a 40-node tree, RiemannianAdam): 145,336 B.
- `--mode hyperbolic --batch 128` (Mobius linear blocks, `Distance2StereographicHyperplanes`,
  RiemannianAdam): 7,051,500 B both; `offload:blocks.*` 6,587,244 B and
  `offload:blocks.0.lin+offload:head` 6,908,096 B both sides. Left open (docs/decisions.md,
  fortieth session): `offload:planes` 7,017,956 B predicted against 6,879,684 B measured
  (geoopt's ball math is `torch.jit.script` functions, whose profiling executor runs another
  graph from the second call; with `PYTORCH_JIT=0` the two agree), and checkpoint or
  selective on any region calling them fails inside torch's own checkpoint (its early stop
  is raised through the TorchScript interpreter): the script's error, not a refusal.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("geoopt") is None:
    pytest.skip("geoopt is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # exact kernel scratch


def test_orthogonal_blocks_under_riemannian_sgd_are_predicted_as_measured():
    """An MLP whose blocks hold a Stiefel weight (`ManifoldParameter`), trained by
    RiemannianSGD with momentum: every policy on the blocks exact, and the categories by
    hand. Parameters: inp 16 x 32 + 32, per block a LayerNorm (64) and a 32 x 32 weight
    with a 32 bias, head 32 x 4 + 4: 2,916 floats, 11,664 B; the momentum buffers (one
    clone of each gradient, no step counter) as much."""
    pols = {"checkpoint:blocks.*": 256_120, "offload:blocks.*": 184_632,
            "selective:blocks.*": 288_888, "checkpoint:blocks.0+offload:blocks.1": 222_776}
    run = run_client("train_geoopt.py", ["--mode", "stiefel", "--batch", "256"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 312_760
    at = run.summary.at_peak
    assert (at["parameter"], at["optimizer_state"]) == (11_664, 11_664)
    # in blocks.1.fc's backward: the head's gradients (132 floats) and blocks.1.fc's (1,056)
    assert at["gradient"] == 4 * (132 + 32 * 32 + 32) == 4_752
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_the_step_peak_of_a_cayley_retraction():
    """Batch 16: the peak is in the optimizer's step, inside the Cayley retraction's
    `linalg.solve` of blocks.1.fc.weight. Every parameter and gradient is live (11,664 B
    each) and the momentum of all but the two parameters not stepped yet (blocks.1.fc.bias
    and the head, 164 floats): 11,008 B."""
    run = run_client("train_geoopt.py", ["--mode", "stiefel"], [], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 76_756
    peak, at = run.summary.peak, run.summary.at_peak
    assert (peak.bytes, peak.phase, peak.op) == (76_712, "optimizer", "_linalg_solve_ex.default")
    assert (at["parameter"], at["gradient"]) == (11_664, 11_664)
    assert at["optimizer_state"] == 11_664 - 4 * 164 == 11_008


def test_a_manifold_module_is_refused_alike_and_scripted_math_measures_cold():
    """geoopt's manifolds are nn.Modules whose `forward = NotImplemented` (the ball holds its
    curvature as an untrained parameter; the code calls `ball.dist`). `checkpoint:*` on the
    embedding (its only submodule the ball) was refused by predict as "never called as a
    module: ... call the module itself (`self.ball(x)`)" and by measure as "never ran in the
    steps (the script's input never reaches them ...)"; both now say it has no forward
    (Note [A forward that is no function], trace/roots.py).

    And in one process the allocator pass ran geoopt's `torch.jit.script` math already
    optimized by the ledger pass before it: 127,480 B against the ledger's 145,336 B, equal
    in the CLI's fresh processes (tests/clients/harness.py flushes scripted functions).
    Parameters: 40 nodes x 32 floats and the curvature, 5,124 B."""
    run = run_client("train_geoopt.py", ["--mode", "poincare"], ["checkpoint:*"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 145_336
    assert run.summary.at_peak["parameter"] == 4 * (40 * 32 + 1) == 5_124
    ck = run.policies["checkpoint:*"]
    assert ck.predicted is None and ck.measured is None
    assert ck.predict_refusal == ck.measure_refusal == (
        "memledger: selector '*' matches ball, a PoincareBall: a module with no forward of its "
        "own, whose other methods the code calls (`ball.method(x)`), so a policy on it would "
        "do nothing; select the modules that call it instead")


@pytest.mark.parametrize("argv", [["--mode", "stiefel", "--opt", "adam", "--euclidean",
                                   "--stabilize", "1"], ["--mode", "hyperbolic"]])
def test_the_doctor_finds_nothing_on_riemannian_loops(argv):
    """RiemannianAdam writes each point by `copy_` under no_grad and skips the ball's
    untrained curvature (no gradient, `requires_grad=False`): no finding."""
    assert_one_doctor_error("train_geoopt.py", argv, 2, None, "")

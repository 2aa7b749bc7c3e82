"""torchode 1.0.1 (tests/clients/train_torchode.py): neural ODEs solved by torchode's
parallel solver, each sample with its own time span, step size and step count; an MLP
vector field `vf` (`vf.net.*`) behind an `ODETerm`, a step method and a step-size
controller in an `AutoDiffAdjoint` (autograd through every step) or a `BacksolveAdjoint`
(a no-grad forward solve, an augmented ODE solved backwards with `torch.func.vjp` under
`vmap` inside the Function's backward). Skipped without torchode.

Measured (`tests/clients/harness.py run_client`, the helper hunt57d, 2026-12-07, torch
2.13.0 CPU, AMD Zen 4 with AVX-512 bf16, OMP_NUM_THREADS=1; 2 steps; ledger with its
kernel scratch = allocator, every policy predicted = measured):
- `--model node` (Dopri5, IntegralController, Adam): 131,146 B; `checkpoint:vf` 154,982,
  `selective:vf` 234,846, `selective:@VectorField:save=tanh` 232,414, `offload:vf`
  86,064, `checkpoint:vf.net.0+offload:vf.net.2` 232,138, `checkpoint:@Linear` 431,713.
  `checkpoint:vf` and `selective:vf` were predicted 92 B under before: each Runge-Kutta
  stage hands `vf` its time `t_nodes[i]`, which the field ignores, and the frame that
  holds it held the addcmul node behind it and the tableau's `c` it saved (Note [An
  argument's dead node, held by the frame], replay/engine.py).
- `--model node --controller pid --method tsit5 --opt sgd --clip --accum 2`: 162,575 B,
  166,960 B with kernel scratch (setup's `linalg_matrix_exp` making the data takes
  25,279 B inside itself); `checkpoint:vf` 192,619, `selective:vf` 297,699.
- `--model latent --opt sgd --clip` (encoder, 6-d latent ODE, decoder): 208,708 B;
  `checkpoint:vf` 229,408, `checkpoint:enc+offload:vf` 123,268,
  `checkpoint:@VectorField+offload:dec` 226,336, `offload:enc` 206,660.
- `--controller fixed --method euler`: 118,628 B; `checkpoint:vf` 142,116.
- `--adjoint backsolve`: 1,984,873 B; every policy on `vf` predicts and measures the
  baseline (its calls run under no_grad in forward and inside backward).
The doctor finds nothing on the loop, the `--bug clip_after_step` clip after the step.
`--fake` cannot follow the solver: its loop stops on `if continue_iterating:`, a value a
fake run has none of (docs/decisions.md, fifty-seventh session).
"""

from __future__ import annotations

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, imported_first,
                                   run_client, skip_without)

pytestmark = pytest.mark.clients
skip_without("torchode")
# Dopri5.TABLEAU and the other tableaus are made at import (Note [Tensors made at import])
_imported = imported_first("torchode")


@pytest.mark.slow
def test_an_ignored_stage_time_keeps_its_node_under_checkpoint():
    """Dopri5 with an adaptive controller: every policy on the vector field predicted to
    the byte. `checkpoint:vf` and `selective:vf` were 92 B under before (154,890 against
    154,982; 234,754 against 234,846): the frame held each stage's `t_nodes[i]`, and with
    it the addcmul node that saved the tableau's nodes `c` (28 B) and a 64 B time."""
    pols = {"checkpoint:vf": 154_982, "selective:vf": 234_846,
            "selective:@VectorField:save=tanh": 232_414, "offload:vf": 86_064,
            "checkpoint:vf.net.0+offload:vf.net.2": 232_138}
    run = run_client("train_torchode.py", ["--model", "node"], list(pols))
    assert run.ledger_peak == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=131_146)
    for policy, peak in pols.items():
        p = run.policies[policy]
        assert p.predicted == p.measured, (policy, p)
        assert_pinned(p.measured, amd_bf16=peak)


@pytest.mark.slow
def test_a_latent_ode_with_clipping_and_mixed_policies():
    """Encoder, latent ODE, decoder; SGD with clipping: mixes of checkpoint and offload,
    and a class selector, each predicted as measured."""
    pols = {"checkpoint:vf": 229_408, "checkpoint:enc+offload:vf": 123_268,
            "checkpoint:@VectorField+offload:dec": 226_336}
    run = run_client("train_torchode.py", ["--model", "latent", "--opt", "sgd", "--clip"],
                     list(pols))
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=208_708)
    for policy, peak in pols.items():
        p = run.policies[policy]
        assert p.predicted == p.measured, (policy, p)
        assert_pinned(p.measured, amd_bf16=peak)


def test_fixed_steps_every_sample_its_own_count():
    """Euler at a fixed dt: each sample's span (0.5 to 2.0) takes its own number of steps,
    the batch runs until the longest ends; `checkpoint:vf` predicted as measured."""
    run = run_client("train_torchode.py", ["--model", "node", "--controller", "fixed",
                                           "--method", "euler"], ["checkpoint:vf"])
    assert run.ledger_peak == run.allocator_peak
    p = run.policies["checkpoint:vf"]
    assert p.predicted == p.measured
    assert_pinned(run.allocator_peak, amd_bf16=118_628)
    assert_pinned(p.measured, amd_bf16=142_116)


@pytest.mark.slow
def test_backsolve_calls_take_no_policy():
    """BacksolveAdjoint: the forward solve runs under no_grad, the backward calls `vf`
    through `torch.func.vjp` inside the Function's backward, where no policy acts: each
    predicts the baseline, and measures it."""
    run = run_client("train_torchode.py", ["--model", "node", "--adjoint", "backsolve"],
                     ["checkpoint:vf", "offload:vf"])
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured == run.allocator_peak, (text, p)


def test_the_doctor_on_the_loop_and_on_a_clip_after_the_step():
    """Nothing on the correct loop; the clip after `opt.step()` is `clip_order` at its
    line."""
    assert_one_doctor_error("train_torchode.py", ["--model", "node"], 2, None, "")
    assert_one_doctor_error("train_torchode.py", ["--model", "node", "--bug",
                                                  "clip_after_step"], 2, "clip_order",
                            "nn.utils.clip_grad_norm_(model.parameters(), 1.0)")


@pytest.mark.slow
def test_the_doctor_names_the_statistics_backsolve_keeps_on_its_graph():
    """`--adjoint backsolve`: `loss` keeps its graph into the next step, and with it the
    solver statistics `BacksolveFunction` keeps on `ctx` as attributes (backward appends
    the backward solves' to them): 4,096 B a step, one `cross_step_retention` warning."""
    from memledger.doctor.run import diagnose_in_process

    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / "train_torchode.py",
                                          ["--model", "node", "--adjoint", "backsolve"], 2)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == \
        [("cross_step_retention", "warning")]
    assert report.findings[0].evidence["ctx_bytes_per_step"] == [4096, 4096]

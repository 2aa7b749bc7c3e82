"""normflows (tests/clients/train_normflows.py): `NormalizingFlow.forward_kld`, which runs
each flow layer through its `inverse` method (only the networks inside are module calls),
`reverse_kld` with ActNorm initialised by a `sample()` under gradients, a residual flow's
log-det power series taken by `autograd.grad` inside its forward, and spline flows under
`trace --fake`. Skipped without normflows."""

from __future__ import annotations

import pytest

from tests.clients.harness import fake_client_gaps, imported_first, ledger_pass, predicted_peak, \
    run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("normflows")
_imported = imported_first("normflows")   # before any pass: its import makes 8 B of tensors

# Note [The method that ran] (replay/policies.py): both sides name it (before: "through
# another of its methods (`flows.0.inverse(x)`, `flows.0.encode(x)`) or ...", guesses)
THROUGH = ("never called as a module: the code runs its work through its method `inverse` "
           "(`flows.0.inverse(...)`)")


def test_flow_layers_run_through_inverse_refused_alike_their_networks_exact_and_planned():
    """RealNVP fitted by `forward_kld`: the coupling layers run through `inverse`, never as
    module calls. predict said the script calls their `.forward()` directly; measure said
    they "never ran in the steps (the script's input never reaches them ...)". Both now
    say the same (Note [Modules run through another method], replay/policies.py); the MLP
    inside each coupling, a module call, is predicted to the byte."""
    run = run_client("train_normflows.py", ["--mode", "realnvp", "--layers", "2", "--hidden",
                                            "8", "--batch", "32"],
                     ["checkpoint:flows.*", "checkpoint:flows.*.flows.1.param_map",
                      "offload:flows.2.flows.1.param_map"])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    p = run.policies["checkpoint:flows.*"]
    assert p.predicted is None and p.measured is None, p
    assert THROUGH in p.predict_refusal and THROUGH in p.measure_refusal, p
    assert "matches flows.0, flows.2, never" in p.predict_refusal
    _plan_realnvp(run)
    p = run.policies["checkpoint:flows.*.flows.1.param_map"]
    assert p.predicted == p.measured == 23_472, p   # each frame holds a 5,056 B RNG state


def _plan_realnvp(run) -> None:
    """`plan` takes the networks inside the flow layers for its blocks (Note [Blocks inside
    items that never run], replay/plan.py): its blocks were one MLP's own layers
    (`flows.2.flows.1.param_map.net.0-4`), and at 4 layers, hidden 32, a 150 KiB budget it
    said "no candidate fits; the lowest predicted peak is 164.5 KiB" while
    `checkpoint:flows.*.flows.1.param_map` is predicted 120.8 KiB; here, at 10,000 B, no
    fit (lowest 11,224 B). Its pick now fits and is measured as predicted."""
    from memledger.replay.plan import plan

    rep = plan(run.ledger, 10_000)
    assert rep.blocks == ["flows.0.flows.1.param_map", "flows.2.flows.1.param_map"]
    assert rep.fits and rep.policy == "offload:flows.2.flows.1.param_map", rep.policy
    p = run.policies[rep.policy]
    assert rep.predicted_peak_bytes == p.predicted == p.measured == 9_328, p


def test_selective_over_actnorm_initialised_by_an_unread_sample_is_exact():
    """`reverse_kld` after the notebook's `model.sample(128)` (ActNorm's data-dependent
    initialisation, under gradients, its graph dropped): ActNorm's first call makes its
    `data_dep_init_done` buffer and later calls reuse it, but no backward reads that call,
    so nothing re-runs it. predict refused `selective:flows.*` ("a cache filled on the
    first call") while measure ran it (67,200 B; 372,020 B at 4 layers, hidden 32); now
    predicted = measured (Note [A call no backward reads is never re-run],
    replay/engine.py)."""
    run = run_client("train_normflows.py", ["--mode", "reverse", "--layers", "2", "--hidden",
                                            "8", "--batch", "32"], ["selective:flows.*"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    # ActNorm's buffer, 4 B, made by the sample before training and kept by the module
    assert any(r["mod"] == "flows.1" for r in run.ledger.extra["kept"])
    p = run.policies["selective:flows.*"]
    assert p.predicted == p.measured == 67_200, p


def test_residual_flow_log_det_series_is_measured_not_predicted():
    """`Residual(reduce_memory=True)`: inside its forward a custom Function takes a power
    series of vector-Jacobian products through the network (`autograd.grad(...,
    retain_graph=True)` per term, one with `create_graph=True`, a gradient of that) and
    the outer backward reads it again: each save read by 7 passes. The replay priced one
    re-run per pass badly (2 layers, hidden 32: `checkpoint:flows.*.iresblock.nnet`
    325,704 B predicted, 292,984 measured; `offload:` 315,520 against 244,460; here, 1
    layer, hidden 16, batch 32, one step: `checkpoint:flows.0.iresblock.nnet` 62,144
    predicted, 64,876 measured: under). Now NotPredicted (Note [Read by three backward passes or more],
    replay/engine.py): predict refuses it in one line, measure and compare run it."""
    led = ledger_pass("train_normflows.py", ["--mode", "residual", "--layers", "1",
                                             "--hidden", "16", "--batch", "32"], steps=1)
    from memledger.errors import NotPredicted, PolicyError
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    with pytest.raises(NotPredicted, match="whose saves 7 backward passes read"):
        predict(led, [parse_policy("checkpoint:flows.0.iresblock.nnet")])
    # ActNorm, beside it, runs through `inverse` too: no call of it; by its class too
    # (a `classes` record: "matches no module" before, listing the modules that ran)
    assert predicted_peak(led, "offload:flows.1") is None
    with pytest.raises(PolicyError, match="'@ActNorm' matches flows.1, " + THROUGH[:20]):
        predict(led, [parse_policy("offload:@ActNorm")])


def test_fake_spline_flow_ends_and_matches_the_real_ledger():
    """`trace --fake` of a coupled rational-quadratic spline flow hung at
    `bin_locations[..., -1] += eps` (Note [A view's node is not read],
    trace/scalars.py); it ends now, and agrees with the real ledger in peak, categories
    and a policy's prediction."""
    assert fake_client_gaps("train_normflows.py", ["--mode", "nsf", "--coupled", "--layers",
                                                   "1", "--steps", "2"],
                            ["checkpoint:flows.0.prqct.transform_net"]) == {}

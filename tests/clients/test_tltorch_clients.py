"""tensorly-torch (tests/clients/train_tltorch.py): factorized layers whose weights are CP /
Tucker / block-TT tensors (`tltorch.FactorizedTensor` modules whose factors are the
parameters), rebuilt into a dense weight in the forward (`implementation='reconstructed'`)
or contracted factor by factor (`'factorized'`); a Tucker `FactorizedConv`, `TCL` and a CP
`TRL` head; tensor dropout (a forward hook on the factorized weight drawing the ranks it
keeps with `torch.bernoulli(..., out=bool)`), the tensor lasso (a forward hook whose term
the loop adds to the loss). tensorly-torch 0.5.0 with tensorly 0.10.0.

Measured (the helper hunt57b, 2026-12-07, torch 2.13.0 CPU, OMP_NUM_THREADS=1, AMD Zen 4;
`run_client`, 2 steps; every policy predicted = measured unless said):
- `--model cnn`: ledger 204,808 B + 43,472 B of kernel scratch (the convolutions') =
  248,280 B allocator; `checkpoint:fconv` 253,336, `selective:fconv` 286,104,
  `offload:fconv` 246,840 B. `--impl reconstructed` 154.8 KiB + 75.3 KiB of scratch.
- `--model cnn --dropout 0.3 --lasso --eval-every 1`: 201,000 + 43,064 = 244,064 B;
  `checkpoint:fconv` 249,120, `offload:*` 242,504 B; `--fake` the same ledger (it raised
  in torch's fake `bernoulli.out` before Note [Bernoulli draws into a bool tensor]).
- `--model mlp`: 233,900 B (no scratch); `checkpoint:@FactorizedLinear` 190,624,
  `offload:blocks.*+checkpoint:head` 165,344 B. `--impl reconstructed`: 1,856,212 B (CP's
  rebuilt 64 x 64 weight goes through a 1024 x 85 Khatri-Rao product, 340 KiB, twice per
  layer); `checkpoint:blocks.*` 1,305,092 B.
- `--model mlp --shared --impl reconstructed --lib-checkpoint`: 3,318,600 B;
  `selective:@SubFactorizedLinear` predicted 2,482,416 B where measure refused it, before
  Note [A checkpoint met in a call, not under its path]; both refuse it now.
- `--model seq`: 95,192 B (sgd, accum 2); `offload:*` 65,792 B. `--fake` stops in one
  line (the block-TT embedding's lookup reads the token ids through `.numpy()`).
The doctor finds nothing on the loops; `--bug lasso-after-optim` one `no_optimizer`
warning (the lasso weights, made after the optimizer).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_pinned, fake_client_gaps, run_client

if importlib.util.find_spec("tltorch") is None or importlib.util.find_spec("tensorly") is None:
    pytest.skip("tensorly-torch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_tucker_conv_with_the_tensor_lasso_predicted_as_measured():
    """A Tucker-factorized conv (`implementation='factorized'`: three convolutions through
    its factors and core), a TCL and a CP TRL head; the tensor lasso on the conv's weight
    (its hook rewrites the lasso weights' `.data` in every forward). The ledger with the
    convolutions' kernel scratch is the allocator's; a checkpoint of the factorized conv
    and an offload of it under a checkpoint of the TCL, each predicted to the byte. (With
    tensor dropout too, `measure` of the offload read 12 B over in 1 run of 5: left open,
    docs/decisions.md, fifty-seventh session, hunt57b.)"""
    argv = ["--model", "cnn", "--lasso", "--batch", "2"]
    pols = {"checkpoint:fconv": 141_136, "offload:fconv+checkpoint:tcl": 134_400}
    run = run_client("train_tltorch.py", argv, list(pols), steps=2)
    assert run.ledger_peak == 109_184
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=136_080)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)


@pytest.mark.slow
def test_tensor_dropout_runs_fake_as_it_runs_for_real():
    """Tensor dropout draws its mask with `torch.bernoulli(p, out=<bool tensor>)`, which
    torch's fake kernel refused (the whole `--fake` run raised, exit 3); the fake ledger is
    now the real one: peak, categories and the policies' predictions (Note [Bernoulli
    draws into a bool tensor], memledger/trace/fake.py)."""
    argv = ["--model", "cnn", "--dropout", "0.3", "--batch", "2"]
    assert fake_client_gaps("train_tltorch.py", argv,
                            ["checkpoint:fconv", "offload:fconv"]) == {}


@pytest.mark.slow
def test_a_shared_factorized_weight_checkpointed_by_the_library_is_refused_on_both_sides():
    """`FactorizedLinear(n_layers=2, checkpointing=True)`: two layers (`get_linear(i)`, at
    blocks.0 and blocks.4) call one shared module (`stack`), whose forward checkpoints its
    contraction where its input needs a gradient (blocks.4's call, not blocks.0's). A
    selective policy on the layers nests with it: predict priced it (2,482,416 B) while
    measure refused it; both refuse it now in the same line (Note [A checkpoint met in a
    call, not under its path]). blocks.0, whose call checkpoints nothing, is predicted."""
    argv = ["--model", "mlp", "--shared", "--impl", "reconstructed", "--lib-checkpoint",
            "--layers", "2"]
    run = run_client("train_tltorch.py", argv,
                     ["selective:@SubFactorizedLinear", "checkpoint:blocks.0"], steps=1)
    sel = run.policies["selective:@SubFactorizedLinear"]
    assert sel.predicted is None and sel.measured is None
    assert sel.predict_refusal == sel.measure_refusal
    assert "would checkpoint blocks.4, and stack's forward, which runs in it, checkpoints " \
        "the function FactorizedLinear.forward.<locals>._inner_forward" in sel.predict_refusal
    ck = run.policies["checkpoint:blocks.0"]
    assert ck.predicted == ck.measured


def test_the_doctor_finds_the_lasso_applied_after_the_optimizer():
    """The loops are clean (dropout, lasso, evaluation, AdamW); the tensor lasso applied
    after the optimizer was built leaves its lasso weights (4 Parameters, one per Tucker
    mode, 64 B) out of it: backward gives them gradients no step applies."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE, _fresh_library_state, _fresh_process_state

    found = {}
    for bug in ("", "lasso-after-optim"):
        _fresh_library_state()
        _fresh_process_state()
        argv = ["--model", "cnn", "--lasso", "--batch", "2"] + (["--bug", bug] if bug else [])
        report, outcome = diagnose_in_process(HERE / "train_tltorch.py", argv, 2)
        assert outcome.code == 0, outcome.reason
        found[bug] = [(f.check, f.severity, f.evidence.get("params")) for f in report.findings]
    assert found[""] == []
    assert found["lasso-after-optim"] == [("no_optimizer", "warning", 4)]

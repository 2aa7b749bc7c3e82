"""torchmd-net (tests/clients/train_torchmdnet.py): TensorNet and the equivariant
transformer built by `create_model` from the args dict `torchmd-train` makes, on random
small molecules, energies and forces (`derivative=True`: `autograd.grad(create_graph=True)`
inside the forward, then the loss's backward through it), the library's own neighbor list
(warp's brute-force kernel as a `torch.library` custom op on CPU) and TensorNet's warp
message-passing custom ops (each with a backward op and a double-backward op).
torchmd-net 3.1.0, warp-lang 1.19.0.

Measured (`tests/clients/harness.py run_client`, the helper hunt55b, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1, 2 steps; ledger = allocator to the byte, no kernel scratch):
- `--model tensornet` (width 16, 2 x 6 atoms, forces): 1,384,606 B; `checkpoint:
  representation_model.layers.*` and `checkpoint:@Interaction` 1,341,686 B, `offload:
  representation_model.layers.*` 1,330,410 B, `checkpoint:representation_model.layers.0+
  offload:representation_model.layers.1` 1,337,854 B, each predicted = measured;
  `selective:representation_model.layers.*` refused by both (a second backward pass
  through the layer); `checkpoint:representation_model.tensor_embedding` 1,370,208 B
  (predicted 1,365,728 B before Note [A copy the force graph holds, let go with its
  node], replay/engine.py).
- `--model et` (forces): 880,426 B; five policies predicted = measured.
- `--model tensornet --energy-only`: 544,600 B; five policies, mixes included, exact.
- `--prior --scheduler --clip 1.0`, `--ema 0.5 --validate`, `--model et --energy-only
  --opt sgd --accum 2 --validate`: exact.
`trace --fake` reads the neighbor list's upper bound (every pair of `max_num_pairs`: the
warp op's fake kernel returns them all and `resize_to_fit`'s mask has no values), a
documented stand-in, so it is not compared here. The doctor finds nothing on the loop, and
one `cross_step_retention` error on `--ema-no-detach`.
"""

import pytest

from tests.clients.harness import HERE, run_client, skip_without

skip_without("torchmdnet", "warp")
pytestmark = pytest.mark.clients

SMALL = ["--width", "8", "--atoms", "5"]


@pytest.mark.slow
def test_tensornet_forces_through_a_double_backward_are_predicted_as_measured():
    """TensorNet with forces (width 16, 2 x 6 atoms): the forward's `autograd.grad(
    create_graph=True)` and the loss's backward through it, the warp custom ops' backward
    and double-backward ops. Checkpoint and offload of the interaction layers, by glob and
    by class, and checkpoint of the embedding, each predicted and measured to the byte;
    selective refused by both sides (the layers are read by two backward passes). The
    ledger is the allocator's. `checkpoint:representation_model.tensor_embedding` was
    predicted 1,365,728 B before: the force pass's re-run copy of `CZij` (70 x 16 float32,
    4,480 B), saved by its `mul`, let go one event early, before that node's broadcast sum
    (Note [A copy the force graph holds, let go with its node], replay/engine.py)."""
    pols = {"checkpoint:representation_model.layers.*": 1_341_686,
            "checkpoint:@Interaction": 1_341_686,
            "offload:representation_model.layers.*": 1_330_410,
            "checkpoint:representation_model.tensor_embedding": 1_370_208}
    sel = "selective:representation_model.layers.*"
    run = run_client("train_torchmdnet.py", ["--model", "tensornet"], [*pols, sel])
    assert run.ledger_peak == run.allocator_peak == 1_384_606
    for policy, peak in pols.items():
        assert (run.policies[policy].predicted, run.policies[policy].measured) == (peak, peak)
    refused = run.policies[sel]
    assert (refused.predicted, refused.measured) == (None, None)
    assert "second backward pass" in refused.predict_refusal
    assert "second backward pass" in refused.measure_refusal


@pytest.mark.slow
def test_equivariant_transformer_with_accumulation_and_validation_is_exact():
    """The equivariant transformer, energies alone, SGD with momentum, 2 micro-batches
    per step and a validation forward under no_grad in eval mode after each."""
    argv = ["--model", "et", *SMALL, "--energy-only", "--accum", "2", "--validate",
            "--opt", "sgd"]
    pols = {"checkpoint:representation_model.attention_layers.*": 117_956,
            "selective:@EquivariantMultiHeadAttention": 130_756,
            "offload:representation_model.attention_layers.0"
            "+checkpoint:representation_model.attention_layers.1": 111_620}
    run = run_client("train_torchmdnet.py", argv, list(pols))
    assert run.ledger_peak == run.allocator_peak == 151_668
    for policy, peak in pols.items():
        assert (run.policies[policy].predicted, run.policies[policy].measured) == (peak, peak)


@pytest.mark.slow
def test_the_loop_is_clean_and_an_ema_of_the_loss_kept_undetached_is_named():
    """The doctor finds nothing on the loop with the library's EMA of the losses (kept
    detached, as `LNNP._update_loss_with_ema` keeps it); kept undetached, step 2's
    backward fails through step 1's graph and the doctor names `ema` (its two items) at
    the line that stores them (the same rule's plain-torch pin, which names `loss` on the
    old code: tests/doctor/carried.py --cell smooth, Note [The value backwarded carries
    nothing], doctor/retention.py)."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import assert_one_doctor_error

    argv = ["--model", "et", *SMALL, "--ema", "0.5", "--validate"]
    assert_one_doctor_error("train_torchmdnet.py", argv, 2, None, "")
    report, outcome = diagnose_in_process(HERE / "train_torchmdnet.py",
                                          [*argv[:-1], "--ema-no-detach"], 3)
    assert outcome.code == 3 and "backward through the graph a second time" in outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity, f.evidence["names"]) == (
        "cross_step_retention", "error", ["ema['train_neg_dy']", "ema['train_y']"])
    lines = (HERE / "train_torchmdnet.py").read_text().splitlines()
    assert lines[f.where.line - 1].strip() == \
        "ema[name] = loss if args.ema_no_detach else loss.detach()"
    assert f.message.startswith("`ema` (`ema['train_neg_dy']`, `ema['train_y']`) carried "
                                "step 1's")

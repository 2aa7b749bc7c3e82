"""pytorch-tabnet (tests/clients/train_tabnet.py): estimators whose `fit` runs the loop, ghost
batch norm over virtual batches, sparsemax / entmax custom Functions, a sparsity loss a
pretraining network drops, an EarlyStopping callback that copies `state_dict()`, a
validation pass in eval mode without `no_grad`. Skipped without pytorch_tabnet."""

from __future__ import annotations

import pytest

from tests.clients.harness import imported_first, ledger_pass, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("pytorch_tabnet")
_imported = imported_first("pytorch_tabnet")

SMALL = ["--vbs", "64", "--n-steps", "2"]   # two decision steps, two virtual batches of 64


def test_regressor_checkpointed_whole_exact_and_its_fake_run_equal():
    """`checkpoint:tabnet` (TabNetNoEmbeddings: the encoder, the steps' sum, the head) was
    predicted 765,484 B against 766,612 B measured (1 step). The loss's `mse_loss` saves the
    region's output at the region's last event under the path "", which is also the root
    model's, whose call spans exactly the region's (no categorical columns: the embedder
    runs no op): read as the root running inside the region, the re-run came before
    `mse_loss_backward` made its (128, 2) fp32 gradient (1,024 B; Note [A boundary save by
    a shared module], replay/calls.py). And measure copied the running statistics of
    `tabnet.initial_bn`, a BatchNorm1d(12) the forward never calls (104 B; Note
    [BatchNorm under recompute], measure/apply.py). Now 766,508 = 766,508.

    The fake run logs each batch's loss through `.numpy()` inside TabNet's `fit`, and
    stopped at once; now it runs and its peak is the real ledger's (Rule 22,
    trace/fake_literals.py)."""
    run = run_client("train_tabnet.py", ["--mode", "reg", *SMALL], ["checkpoint:tabnet"],
                     steps=1)
    assert run.summary.steps_traced == 1
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 752_200
    p = run.policies["checkpoint:tabnet"]
    assert p.predicted == p.measured == 766_508, p
    st = run.ledger.storages   # entmax saves its output, an activation of its selector
    sel = st[st["module"].astype(str).str.endswith("att_transformers.0.selector")
             & (st["saves"] > 0)]
    assert set(sel["category"]) == {"activation"}
    fake = ledger_pass("train_tabnet.py", ["--mode", "reg", *SMALL], steps=1,
                       fake_device="cpu")
    assert fake.peak().bytes == run.ledger.peak().bytes


def test_pretraining_selective_holds_masks_a_dropped_loss_saved():
    """TabNetPretraining drops the encoder's sparsity loss (`steps_out, _ = self.encoder(
    ...)`), whose `mul` saved each step's entmax mask M: never unpacked, it holds M until
    that forward returns, through the decoder's forward, where the peak is.
    `selective:@AttentiveTransformer` let the two (128, 12) fp32 masks go at their last
    use: predicted 845,796 B against 858,084 B measured (1 step; 12,288 B under;
    replay/engine.py `_held_by_dead_saves`)."""
    run = run_client("train_tabnet.py", ["--mode", "pretrain", "--pre-epochs", "1", *SMALL],
                     ["selective:@AttentiveTransformer"], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 854_500
    p = run.policies["selective:@AttentiveTransformer"]
    assert p.predicted == p.measured == 858_084, p


def test_a_validation_forward_after_the_last_backward_holds_no_frame_to_the_end():
    """One epoch of 2 steps, then the script runs to its end: validation, feature
    importances (`explain`, under gradients), `predict`. The encoder's `matmul(M,
    group_matrix)` saves the group matrix, a plain module attribute live to the end, and
    the validation call's save of it, never unpacked, read as a call whose backward comes
    after the traced steps: its checkpoint frame (RNG state, 5,056 B, and its (64, 12)
    fp32 input) was held to the end, through `explain`'s peak: `checkpoint:tabnet.encoder`
    predicted 1,501,204 B against 1,493,076 B measured. Autograd let go of that save in
    forward (its `unread` record): the frame now goes then (replay/engine.py)."""
    run = run_client("train_tabnet.py", ["--mode", "clf", "--rows", "256", "--epochs", "1",
                                         *SMALL], ["checkpoint:tabnet.encoder"], steps=5)
    assert run.summary.steps_traced == 2   # the script ends after 2 of the 5 asked
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 1_493_076
    p = run.policies["checkpoint:tabnet.encoder"]
    assert p.predicted == p.measured == 1_493_076, p


def test_the_doctor_on_tabnets_fit():
    """Two epochs of 2 steps, the rest of `fit` (`explain`, EarlyStopping loading the best
    weights back), then a second `fit(..., warm_start=True)`, stopped in its first step.
    True warnings: `tabnet.initial_bn` never runs (TabNetNoEmbeddings keeps a BatchNorm its
    encoder's own does the work of), and TabNet's validation pass and feature importances
    run under gradients. Gone: EarlyStopping's `copy.deepcopy(network.state_dict())` read
    as a `.detach()` cutting `initial_bn` off the loss (cut_graph, an error, step 3) and its
    `load_state_dict` (`param.copy_` under no_grad) as an op under `torch.no_grad()` doing
    so (another, step 5; Note [A state_dict is no cut]); the validation pass's first
    BatchNorm, on the raw batch, read as a module in eval mode in a training step
    (eval_mode; Note [A validation forward under grad]); and `explain`'s submodule calls,
    top-level because `forward_masks` is no `forward`, read as four findings on one line,
    one per class (Note [Calls no variable names], doctor/unused.py). Nine findings, two of
    them errors, before; four warnings now."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(
        HERE / "train_tabnet.py", ["--mode", "clf", "--rows", "256", "--epochs", "2",
                                   "--refit", *SMALL], 5)
    assert outcome.code == 0, outcome.reason
    got = sorted((f.check, f.severity, f.evidence.get("var", ""), tuple(f.evidence["steps"]))
                 for f in report.findings)
    assert got == [("unused_graph", "warning", "", (5,)),
                   ("unused_graph", "warning", "network", (3, 5)),
                   ("unused_parameter", "warning", "", (1, 2, 3, 4)),
                   ("unused_parameter", "warning", "", (5,))], \
        [f.line() for f in report.findings]
    (anon,) = [f for f in report.findings if f.check == "unused_graph"
               and not f.evidence["var"]]
    assert set(anon.evidence["cls"].split("/")) == {"FeatTransformer", "AttentiveTransformer",
                                                    "BatchNorm1d", "ReLU"}

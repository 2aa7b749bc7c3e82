"""deepctr-torch (tests/clients/train_deepctr.py): CTR models built from feature columns
(`SparseFeat`, `DenseFeat`, `VarLenSparseFeat`), compiled with `model.compile("adam",
"binary_crossentropy")` and trained by the library's own Keras-like `fit` (its DataLoader
over one float64 table, tqdm, prints, an L2 penalty over whole embedding tables summed
into a fresh zeros tensor each step), and the same models in a loop written by hand.

Measured (2 steps, CPU): DeepFM under `fit` 72,512 B ledger = allocator; `checkpoint:dnn`
77,568 = 77,568, `offload:dnn` 68,928 = 68,928, `checkpoint:fm+offload:dnn` 72,960 =
72,960, `selective:dnn` refused alike (its ReLU is in place). DIN (behaviour sequences,
Dice with BatchNorm in the attention unit) 382,556 = 382,556; `checkpoint:attention`
354,144 = 354,144, `offload:attention` 290,204 = 290,204. DCN, xDeepFM, DIEN (GRU + AUGRU,
its auxiliary loss kept in `model.aux_loss`) and the hand loop: exact too (docs/accuracy.md,
"deepctr-torch"). Skipped without deepctr_torch."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("deepctr_torch") is None:
    pytest.skip("deepctr-torch is not installed", allow_module_level=True)

from tests.clients.harness import HERE, run_client  # noqa: E402

pytestmark = pytest.mark.clients

# DeepFM over c0..c2 (vocab 50, 60, 70; dim 4) and d0, d1, DNN (32, 16), by hand:
EMBEDDINGS = (50 + 60 + 70) * 4 * 4    # embedding_dict: vocab x dim x 4 B per feature
LINEAR = (50 + 60 + 70) * 1 * 4 + 2 * 4  # linear_model: vocab x 1 per feature, 2 dense weights
DNN = (14 * 32 + 32 + 32 * 16 + 16 + 16) * 4   # dnn.linears.0, .1 (14 = 3 x 4 + 2), dnn_linear
PARAMS = EMBEDDINGS + LINEAR + DNN + 4          # + out.bias
N_PARAMS = 3 + 3 + 1 + 4 + 1 + 1                # parameter tensors: one Adam step counter each


def test_deepfm_fit_exact_and_its_cast_batch_is_input():
    """DeepFM under `fit`: every byte of the allocator, parameters and Adam's state by hand,
    each policy predicted to the byte or refused by both sides. `fit` collates a float64
    table and hands the model `x_train.to(device).float()`: the (64, 5) float64 batch it
    casts stays referenced through the step, and read `other` in step 1 (collated in
    `setup`) and `temporary` in step 2 (collated between steps), 2,560 B at the peak, while
    its float32 copy read `input` (1,280 B); all are `input` now (Note [A batch cast before the
    model], trace/collector.py). And `fit` calls `optim.zero_grad()` after the forward,
    before the loss: zero_grad's end set the phase to `other`, so the binary cross-entropy,
    the L2 penalty's `square` of each embedding table and its sums were no loss, and the
    (64,) targets the loss read were `activation`, not the batch (Note [A zero_grad inside
    the loss])."""
    run = run_client("train_deepctr.py", ["--model", "deepfm"],
                     ["checkpoint:dnn", "offload:dnn", "checkpoint:fm+offload:dnn",
                      "selective:dnn"])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 72_512
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {"checkpoint:dnn": (77_568, 77_568), "offload:dnn": (68_928, 68_928),
                   "checkpoint:fm+offload:dnn": (72_960, 72_960),
                   "selective:dnn": (None, None)}, got
    sel = run.policies["selective:dnn"]
    assert sel.predict_refusal == sel.measure_refusal and "in place" in sel.predict_refusal
    assert PARAMS == 7_708
    end = run.ledger.resident_at_end()
    assert end["parameter"] == PARAMS
    assert end["optimizer_state"] == 2 * PARAMS + 4 * N_PARAMS == 15_468
    st = run.ledger.storages
    emb = st[st["category"] == "parameter"]
    assert sorted(emb[emb["name"].astype(str).str.startswith("embedding_dict.")]["bytes"]) \
        == [50 * 16, 60 * 16, 70 * 16]
    batches = st[(st["dtype"] == "float64") & (st["op"] == "stack.default")]
    assert list(batches["category"]) == ["input", "input"], batches
    # at the peak: the fp32 copy, both steps' fp64 batches (step 1's is still referenced),
    # both steps' (64,) targets and `model.aux_loss` (a zeros(1) attribute every loss adds:
    # read by the loss, made outside the step); `model.reg_loss` (zeros(1), made at init, a
    # plain attribute) read `other`, now a buffer by its name (Note [A tensor a module
    # holds unregistered], trace/collector.py)
    at = run.ledger.at_peak()
    assert (at["input"], at["other"], at["buffer"]) == (1_280 + 2 * 2_560 + 2 * 256 + 4, 0, 4), at
    assert list(st.loc[st["category"] == "buffer", "name"]) == ["reg_loss"]
    # `fit` clears the gradients between the forward and the loss: its loss is the loss
    bce = st[st["op"] == "binary_cross_entropy.default"]
    assert list(bce["phase"]) == ["loss", "loss"], bce


def test_din_fit_exact_under_policies_on_its_attention():
    """DIN: the behaviour sequences' embeddings shared with the item's, Dice (BatchNorm
    inside) in the attention unit, whose running statistics a checkpoint's re-run must not
    update twice."""
    run = run_client("train_deepctr.py", ["--model", "din"],
                     ["checkpoint:attention", "offload:attention"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 382_556
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {"checkpoint:attention": (354_144, 354_144),
                   "offload:attention": (290_204, 290_204)}, got
    # (64, 18) fp32 and the fp64 batches of both steps (9,216 B `other` and 9,216 B
    # `temporary` before Note [A batch cast before the model]), both steps' targets and
    # `model.aux_loss` (`activation` and `other` before Note [A zero_grad inside the loss])
    assert run.ledger.at_peak()["input"] == 4_608 + 2 * 9_216 + 2 * 256 + 4


def test_the_doctor_on_fit_with_validation_names_the_eval_mode_it_leaves():
    """`fit(validation_split=...)` evaluates after each epoch through `predict`, which calls
    `self.eval()`; `fit` called `self.train()` once, before its first epoch, so the second
    epoch trains with dropout off: a true warning, at the `fit` line, for step 4 only (3
    steps an epoch). Nothing else: not the L2 penalty over whole embedding tables, not the
    `loss.item()` calls, not the evaluation's `no_grad` forward."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(
        HERE / "train_deepctr.py", ["--model", "deepfm", "--rows", "128", "--batch", "32",
                                    "--val", "0.25", "--dropout", "0.1", "--verbose", "2"], 4)
    assert outcome.code == 0, outcome.reason
    got = [(f.check, f.severity, tuple(f.evidence["steps"])) for f in report.findings]
    assert got == [("eval_mode", "warning", (4,))], [f.line() for f in report.findings]
    assert "dnn.dropout" in report.findings[0].message

"""torchjd (tests/clients/train_torchjd.py): Jacobian descent, where the loop never calls
`loss.backward()`: `autojac.backward(losses)` keeps each parameter's Jacobian in `p.jac`,
`jac_to_grad(params, aggregator)` aggregates it into `.grad`; the autogram engine hooks the
layers and takes a Gramian inside backward.

Measured once (`tests/clients/harness.py run_client`, 2 steps, hunt38b, 2026-12-05): the
ledger explains every byte in every mode (`jd` 177,068 B, `mtl` 178,204 B, `iwrm`
1,158,344 B, `gramian` 770,184 B, `autogram --no-batch-dim` 500,876 B); checkpoint,
selective and offload of `blocks.*` predicted = measured in `jd`, `mtl`, `iwrm` and
`gramian` (775,240 / 777,288 / 770,184 B there).
"""

import pytest

from tests.clients.harness import HERE, imported_first, ledger_pass, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("torchjd")
_imported = imported_first("torchjd")

# parameters of `Net(depth=1)`: inp 10x32+32, one block of 32x64+64 and 64x32+32
TRUNK = (10 * 32 + 32) + ((32 * 64 + 64) + (64 * 32 + 32))   # 4,544


def test_the_jacobians_are_the_parameters_gradients_named_by_them():
    """`autojac.backward` sets `p.jac` as it returns and `jac_to_grad` deletes it before its
    first op, so no read at an op saw it: the Jacobians read "temporary · cat in (script)"
    and the peak held no gradient (0 B; now 2 rows x 4,610 parameters x 4 B = 36,880 B at
    depth 1, each named `<parameter>.jac`: Note [A parameter's gradients, as they are set],
    trace/param_attrs.py). A fake run's parameters are FakeTensors (`nn.Parameter` keeps a
    subclass's type): the same 36,880 B there (the `Mean` aggregator: UPGrad solves its
    quadratic program in numpy, which a fake run refuses in one line)."""
    params = TRUNK + (32 * 2 + 2)                           # the head: 32 -> 2 losses
    for fake in (None, "cpu"):
        led = ledger_pass("train_torchjd.py", ["--mode", "mean", "--depth", "1", "--batch",
                                               "4"], steps=1, fake_device=fake)
        assert led.at_peak()["gradient"] == 2 * params * 4  # bytes = rows x numel x fp32
        names = set(led.storages.loc[led.storages["category"] == "gradient", "name"])
        assert {"blocks.0.fc1.weight.jac", "head.bias.jac"} <= names
        # the aggregated vector every `.grad` is a view of (it read "inp.weight": Note
        # [One storage, the gradients of several parameters], trace/collector.py)
        assert "inp.weight (and 7 more)" in names, names


def test_every_policy_refused_keeps_compares_verdicts():
    """The autogram engine with `batch_dim=None` (three passes over the head's saves inside
    one backward phase, and forward hooks paired with the Jacobian's node): checkpoint and
    selective are refused by both sides, offload is measured, not predicted (NotPredicted).
    `predict(keep_going=True)` raised the first NotPredicted since no policy was left, and
    `compare` exited 2 with that line ("... `memledger compare` measures and judges it")
    after its gates had judged all three (Note [Every policy refused], replay/predict.py).

    One backward pass per example (`iwrm-seq`: `parallel_chunk_size=1`, each pass a
    backward phase of its own) was this test's all-refused run until the fifty-third
    session priced N such passes (Note [A re-run in each of N backward passes],
    replay/engine.py): checkpoint and offload of `blocks.*` 165,044 B, as measured (the
    peak is `jac_to_grad`'s, outside the blocks); selective stays refused."""
    from memledger.replay.policies import parse_policy
    from memledger.verify.compare import predict_judged

    led = ledger_pass("train_torchjd.py", ["--mode", "autogram", "--no-batch-dim", "--depth",
                                           "1", "--batch", "4"], steps=1)
    texts = ["checkpoint:blocks.*", "selective:blocks.*", "offload:blocks.*"]
    pred = predict_judged(led, [parse_policy(t) for t in texts],
                          {"checkpoint:blocks.*", "offload:blocks.*"})
    assert pred.policies == []
    assert [(r.policy, r.runs) for r in pred.refused] == [
        ("checkpoint:blocks.*", False), ("selective:blocks.*", False),
        ("offload:blocks.*", True)]
    led = ledger_pass("train_torchjd.py", ["--mode", "iwrm-seq", "--depth", "1", "--batch", "4"],
                      steps=1)
    pred = predict_judged(led, [parse_policy(t) for t in texts],
                          {"checkpoint:blocks.*", "offload:blocks.*"})
    assert [(p.policy, p.peak_bytes) for p in pred.policies] == [
        ("checkpoint:blocks.*", 165_044), ("offload:blocks.*", 165_044)]
    assert [(r.policy, r.runs) for r in pred.refused] == [("selective:blocks.*", False)]


def test_the_autogram_engines_hooks_refuse_a_rerun_and_its_passes_are_counted():
    """`Engine(model, batch_dim=None)` hooks each Linear: the hook counts the call and routes
    the output through `AutogramNode`, whose backward takes the layer's Jacobian. A
    checkpoint re-run fires the hook again with no node reached: at depth 2, predict priced
    `checkpoint:blocks.*` at 518,152 B and measure read 526,344 B after 1 step, with a call
    counted that no backward met; the next step's `compute_gramian` raises "Some modules
    had a forward pass without an associated backward pass" (`memledger measure --steps 1`,
    which times further steps: the script failed, exit 3). Both refuse it now, in one line
    (Note [A backward hook made by hand], trace/outside_state.py).

    And that node's `autograd.grad` reads the layer's saves again inside the Gramian's
    backward, then `losses.backward(weights)` a third time: counted as two passes (by
    phase), `offload:head` was priced with its second read-back copy held across the
    Gramian's peak, 2,048 B over measured (502,924 against 500,876, 2 steps). Three passes
    are not priced: predict says so, measure runs it (Note [Passes inside one backward
    phase], replay/prepared.py)."""
    from memledger.errors import NotPredicted
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    run = run_client("train_torchjd.py", ["--mode", "autogram", "--no-batch-dim", "--depth",
                                          "1", "--batch", "4"], ["checkpoint:blocks.*"],
                     steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    hooked = run.policies["checkpoint:blocks.*"]
    assert hooked.predicted is None and hooked.measured is None
    for why in (hooked.predict_refusal, hooked.measure_refusal):
        assert "whose blocks.0.fc1 has forward hooks paired" in why, why
    # measured, not predicted: `measure` runs it as any NotPredicted policy
    with pytest.raises(NotPredicted, match="whose saves 3 backward passes read"):
        predict(run.ledger, [parse_policy("offload:head")], bandwidth=1e9)


def test_the_doctor_says_a_kept_losses_graph_holds_the_layers_ctx_tensors():
    """torchjd's autogram loop keeps `losses` until the next step rebinds it; its spent graph
    still holds each hooked layer's inputs and outputs, which `AutogramNode` keeps as `ctx`
    attributes (backward frees only what `save_for_backward` saved): the previous step's
    27,776 B live through the next forward at depth 2 (the ledger's count). The doctor said
    nothing (a spent loss is no finding); one warning now, at `losses`, with the bytes
    (Note [A spent graph that still holds tensors], trace/doctor_retention.py). The
    autojac loops hold no such graph and stay silent (tests above, and `--mode jd`)."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(
        HERE / "train_torchjd.py", ["--mode", "autogram", "--no-batch-dim", "--depth", "1",
                                    "--batch", "4"], 1)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning"), f.line()
    assert "`del losses` after the step" in f.message
    # each hooked Linear's input and output, fp32, batch 4: x 4x10 (160) + inp's output
    # 4x32 (512, fc1's input too) + fc1's 4x64 (1,024) + the ReLU's (fc2's input, 1,024)
    # + fc2's 4x32 (512) + the block's sum (head's input, 512) + head's 4x1 (16); at batch
    # 16, 15,040 B
    assert f.evidence["ctx_bytes_per_step"] == [3_760]


def test_a_loop_that_never_aggregates_its_jacobians_trains_nothing():
    """Without `jac_to_grad`, the Jacobians stay in `p.jac`, every `optimizer.step()` finds
    `.grad` None and the model never moves; no backward accumulated a gradient (torchjd
    takes them with `autograd.grad`), and the doctor said "no findings". One error now, at
    the step, naming `.jac` and the fix (Note [A step with no gradient],
    doctor/updates.py)."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(
        HERE / "train_torchjd.py", ["--mode", "jd", "--depth", "1", "--batch", "4", "--bug",
                                    "no-aggregate"], 1)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("no_gradient", "error"), f.line()
    assert f.evidence == {"steps": [1], "params": 8, "beside_grad": ["jac"]}
    assert "jac_to_grad(params, aggregator)" in f.message

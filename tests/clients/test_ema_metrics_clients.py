"""ema-pytorch and torchmetrics in a plain loop (tests/clients/train_ema_metrics.py): an
EMA shadow updated after each `optimizer.step()` and evaluated with `ema(x)`, before or
after the first step, and metrics kept by the model's blocks whose forward updates them.
Skipped without ema-pytorch or torchmetrics."""

from __future__ import annotations

import pytest

from tests.clients.harness import fake_client_gaps, imported_first, ledger_pass, predicted_peak, \
    run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("ema_pytorch", "torchmetrics")
_imported = imported_first("ema_pytorch", "torchmetrics")


def _fc1_weights(led) -> set[tuple[str, str]]:
    st = led.storages
    return {(n, c) for n, c in zip(st["name"], st["category"]) if n.endswith("fc1.weight")}


def test_an_ema_wrapper_evaluated_leaves_the_model_its_names():
    """`EMA(model)` holds the model (`online_model`) and its copy (`ema_model`), and its
    `__call__` runs the copy. Evaluated after the first step, it took the model into
    itself: the model's later calls read `online_model.blocks.*`, predict refused
    `checkpoint:blocks.*` ("matches no module") while measure, which had named the model
    at step 1, refused `online_model.blocks.*`, and step 2's gradients read
    `EMA.online_model.blocks.0.fc1.weight`. Evaluated once before training
    (`--eval-first`), the wrapper stayed the model. Now (Note [A wrapper of the model],
    trace/roots.py) the model keeps `blocks.*` either way, the copy is `ema.ema_model.*`
    (its weights, 37,016 B, parameters of a module the script calls; Note [Root names]:
    `EMA.ema_model.*` by the wrapper's class, from ema-pytorch's own `__call__`, before),
    and the policy reads predicted = measured."""
    run = run_client("train_ema_metrics.py", ["--mode", "ema"], ["checkpoint:blocks.*"])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 251_301
    p = run.policies["checkpoint:blocks.*"]
    assert p.predicted == p.measured == 234_405, p
    first = ledger_pass("train_ema_metrics.py", ["--mode", "ema", "--eval-first"])
    assert predicted_peak(first, "checkpoint:blocks.*") == 234_405
    for led in (run.ledger, first):
        assert _fc1_weights(led) == {
            ("blocks.0.fc1.weight", "parameter"), ("blocks.1.fc1.weight", "parameter"),
            ("blocks.0.fc1.weight", "gradient"), ("blocks.1.fc1.weight", "gradient"),
            ("ema.ema_model.blocks.0.fc1.weight", "parameter"),
            ("ema.ema_model.blocks.1.fc1.weight", "parameter")}, _fc1_weights(led)
        st = led.storages
        assert st.loc[st["name"].str.startswith("ema.ema_model."), "bytes"].sum() == 37_016
        assert not st["name"].str.contains("online_model").any()


def test_a_metric_updated_in_a_blocks_forward_is_refused_for_re_runs_alike():
    """Each block updates a `MeanMetric` in its forward (`mean_value += ...`, `weight +=
    ...`: torchmetrics keeps its states as plain attributes, not buffers). Checkpoint and
    selective re-run that update, counting each batch twice (MeanMetric's `weight` 2.0
    after one step, 1.0 untouched), while the gradients stay equal: predict priced
    `checkpoint:blocks.*` at 193,216 B and `selective:blocks.*` at 213,696 B, measure ran
    both to the same bytes, compare's gates passed. Now both refuse them in one line
    (Note [State a re-run writes again], replay/stateful.py); offload, which re-runs
    nothing, stays exact."""
    run = run_client("train_ema_metrics.py", ["--mode", "metrics"],
                     ["checkpoint:blocks.*", "offload:blocks.*"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 216_380
    assert predicted_peak(run.ledger, "selective:blocks.*") is None
    for text in ("checkpoint:blocks.*",):
        p = run.policies[text]
        assert p.predicted is None and p.measured is None, p
        assert f"{text} would re-run blocks.1, whose forward writes " in p.predict_refusal
        assert "blocks.1.dead.mean_value in place" in p.measure_refusal, p.measure_refusal
    p = run.policies["offload:blocks.*"]
    assert p.predicted == p.measured == 179_004, p


def test_a_metric_updated_after_the_blocks_last_save_is_never_re_run():
    """The same metric updated on the block's output, after its last save: torch's
    checkpoint stops the re-run at that save (early stop), so the update runs once
    (MeanMetric's `weight` 1.0 after one step). predict left it alone and priced
    `selective:blocks.*` at 173,104 B in one step (the baseline's peak, which falls in
    the optimizer's first step; 216,764 B and `checkpoint:blocks.*` 192,188 B in two),
    but measure refused both, having compared the versions as the re-run started with those as the
    forward began. It now compares those as the re-run starts and ends (Note [A write
    after the last save], measure/apply.py): predicted = measured."""
    run = run_client("train_ema_metrics.py", ["--mode", "metrics", "--monitor-output"],
                     ["selective:blocks.*"], steps=1)
    p = run.policies["selective:blocks.*"]
    assert p.predicted == p.measured == 173_104, p


def test_fake_run_builds_metrics_and_agrees_with_the_real_one():
    """torchmetrics deep-copies each state's default as a metric is built (`add_state`:
    `deepcopy(torch.tensor(0.0))`), and under the fake run's mode that copy of a tensor
    holding its literal as a real `constant` failed ("Attempted to set the storage of a
    tensor on device "meta" to a storage on different device "cpu""): every `trace --fake`
    stopped at the first metric, exit 3. Now (Rule 25, trace/fake_literals.py) the fake
    ledger agrees with the real one in peak, categories and a policy's prediction
    (regression metrics: Accuracy's `bincount` has a size no fake run knows, and stops it
    in one line)."""
    assert fake_client_gaps("train_ema_metrics.py", ["--mode", "metrics", "--regression-only"],
                            ["offload:blocks.*"]) == {}


def test_a_metric_called_in_a_blocks_forward_is_refused_alike():
    """The block calls its metric (`self.dead(share)`: Metric.forward, Lightning's habit),
    which replaces its states by assignment (the old sums cloned and added to) instead of
    writing them in place: no version counter moves and no `mutated` record is written,
    so predict priced `checkpoint:blocks.*` and measure ran it (173,116 B both, in one
    step), counting each batch twice. The trace now writes a `stateful` record (`<own state>`) for a call
    that replaced its module's tensor from the one before, and measure compares what a
    re-run replaced with what it replaced (Note [State a re-run writes again]): both
    refuse it."""
    run = run_client("train_ema_metrics.py", ["--mode", "metrics", "--monitor-call"],
                     ["checkpoint:blocks.*"], steps=1)
    p = run.policies["checkpoint:blocks.*"]
    assert p.predicted is None and p.measured is None, p
    # one line on both sides since the forty-second session (predict said "writes the state
    # of blocks.1.dead (replaced from the one before) in place", measure "writes
    # blocks.1.dead.mean_value in place"): Note [A buffer replaced from the one before]
    assert p.predict_refusal == p.measure_refusal, (p.predict_refusal, p.measure_refusal)
    assert "replaces blocks.1.dead.mean_value by a tensor made from the one before" in \
        p.predict_refusal, p.predict_refusal

"""pytorch-metric-learning (tests/clients/train_pml.py): a trunk and an embedder with an
optimizer each, a miner's data-dependent pair indices, CrossBatchMemory's queue kept across
steps, a loss with weights and an optimizer of its own (ArcFace). Skipped without it."""

from __future__ import annotations

import pytest

from tests.clients.harness import HERE, imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("pytorch_metric_learning")
_imported = imported_first("pytorch_metric_learning")


def test_cross_batch_memory_is_the_loss_modules_buffer_and_policies_are_exact():
    """CrossBatchMemory's queue (`--memory` 80 embeddings of 16 floats and their labels) is
    a buffer of the loss module, made at setup and filled in place, kept to the end; what
    grows with it from step to step is the miner's pairs against its filled part. Under
    bf16 autocast the loss casts the queue to the embeddings' dtype at its first call,
    assigning the new tensor to the buffer's name: that 2,560 B queue read "temporary ·
    loss_func · _to_copy", unnamed (Note [A buffer replaced by assignment],
    trace/collector.py). Ledger = allocator, the policy predicted = measured."""
    run = run_client("train_pml.py", ["--mode", "xbm", "--autocast"],
                     ["checkpoint:blocks.0+offload:blocks.1"], steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.summary.measured.generators_apart is None   # the plain loop seeds torch's
    st = run.ledger.storages
    q = st[st["name"].isin(["loss_func.embedding_memory", "loss_func.label_memory"])]
    # fp32 at setup (replaced at the first call), its bf16 copy, the int64 labels
    assert sorted(zip(q["name"], q["dtype"], q["bytes"])) == [
        ("loss_func.embedding_memory", "bfloat16", 80 * 16 * 2),
        ("loss_func.embedding_memory", "float32", 80 * 16 * 4),
        ("loss_func.label_memory", "int64", 80 * 8)]
    assert set(q["category"]) == {"buffer"}
    kept = q[q["dtype"] != "float32"]
    assert (kept["freed"] == run.ledger.n_events).all()     # kept to the end
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


@pytest.mark.parametrize("bug", ["", "no-loss-step", "no-loss-opt"])
def test_a_loss_optimizer_that_never_steps_is_found(bug):
    """ArcFace's class centres (`loss_func.W`, 16x6 fp32 = 384 B) have an SGD of their own.
    A loop that calls its zero_grad() and forgets its step() read as fine: `zero_grad`
    reads `p.grad` to clear it, which the probe took for the script using the gradients
    (Note [A zero_grad reads no gradient], trace/doctor_probe.py): no finding before, one
    `wasted_gradients` warning naming the SGD now; the correct loop has none. Without the
    loss optimizer at all the warning told only to freeze the centres
    (`requires_grad_(False)`); for a network in training mode it offers an optimizer too."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--mode", "arcface"] + (["--bug", bug] if bug else [])
    report, outcome = diagnose_in_process(HERE / "train_pml.py", argv, 1)
    assert outcome.code == 0, outcome.reason
    found = [(f.check, f.severity, f.evidence.get("zeroed_by")) for f in report.findings]
    if not bug:
        assert found == [], [f.line() for f in report.findings]
        return
    zeroed = ["SGD"] if bug == "no-loss-step" else []
    assert found == [("wasted_gradients", "warning", zeroed)], [f.line() for f in
                                                                report.findings]
    f = report.findings[0]
    assert f.evidence["bytes"] == 16 * 6 * 4 and "`loss_func.W`" in f.message
    assert f.message.endswith(
        "call that optimizer's step() after backward" if zeroed else
        "or, if they are meant to learn (a loss with weights of its own), give them to an "
        "optimizer"), f.message


def test_the_trainers_sampler_draws_from_numpy_and_show_names_it():
    """`trainers.MetricLossOnly` with an `MPerClassSampler`, which shuffles with numpy's
    global generator (`c_f.NUMPY_RANDOM`): the script seeds torch alone, so each pass mined
    other pairs from other batches, with the same module calls; `show` said "the ledger
    counts 352 bytes (0.15%) more than the allocator saw" and nothing else. Each pass keeps
    digests of the global generators now (Note [Two passes, other random numbers?],
    trace/rng_state.py), and numpy's is named."""
    run = run_client("train_pml.py", ["--mode", "triplet", "--loop", "trainer"], [], steps=2)
    assert run.summary.steps_traced == 2
    assert "numpy" in run.summary.measured.generators_apart

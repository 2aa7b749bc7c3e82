"""Opacus DP-SGD (tests/clients/train_opacus.py): a `GradSampleModule` whose hooks store
per-sample gradients in `p.grad_sample` (batch x parameter), ghost clipping's two backward
passes, BatchMemoryManager's skipped `step()` calls. Skipped without opacus."""

from __future__ import annotations

import pytest

from tests.clients.harness import HERE, imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("opacus")
_imported = imported_first("opacus")

PAIRED = "has forward hooks paired with full backward hooks"


def _grad_sample_bytes(run) -> int:
    st = run.ledger.storages
    gs = st[st["name"].astype(str).str.endswith(".grad_sample")]
    assert set(gs["category"]) == {"gradient"}   # per-sample gradients are gradients
    return int(gs["bytes"].max())


def test_hooks_checkpoint_refused_by_predict_and_measure_offload_exact():
    """`checkpoint:_module.blocks.*` crashed the measured run ("Per sample gradient is not
    initialized": the re-run fired Opacus's forward hooks twice, its backward hooks once)
    while predict gave 315.3 KiB (Note [Hooks paired across forward and backward]). Now both
    refuse it with one line; offload and a checkpoint of a hookless ReLU are exact."""
    run = run_client("train_opacus.py", ["--mode", "hooks", "--no-poisson"], [
        "checkpoint:_module.blocks.*", "selective:_module.blocks.1",
        "offload:_module.blocks.*", "checkpoint:_module.blocks.0.1"], steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    # blocks.1.0's weight, per sample: 32 rows x 32 x 32 fp32
    assert _grad_sample_bytes(run) == 32 * 32 * 32 * 4
    for text in ("checkpoint:_module.blocks.*", "selective:_module.blocks.1"):
        p = run.policies[text]
        assert p.predicted is None and p.measured is None, p
        assert PAIRED in p.predict_refusal and PAIRED in p.measure_refusal, p
    for text in ("offload:_module.blocks.*", "checkpoint:_module.blocks.0.1"):
        p = run.policies[text]
        assert p.predicted == p.measured, (text, p)


def test_ghost_clipping_two_backwards_exact():
    """Ghost clipping: no `grad_sample`, two backward passes per step; offload exact,
    checkpoint refused (the same paired hooks compute the per-sample norms)."""
    run = run_client("train_opacus.py", ["--mode", "ghost", "--no-poisson"], [
        "offload:_module.blocks.*", "checkpoint:_module.blocks.0"], steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    st = run.ledger.storages
    assert not st["name"].astype(str).str.endswith(".grad_sample").any()
    p = run.policies["offload:_module.blocks.*"]
    assert p.predicted == p.measured, p
    p = run.policies["checkpoint:_module.blocks.0"]
    assert PAIRED in p.predict_refusal and PAIRED in p.measure_refusal, p


def test_batch_memory_manager_counts_updates_not_step_calls():
    """BatchMemoryManager: batches of 32 as physical batches of 11, 11 and 10 (at most 12),
    `step()` on each, skipped (`signal_skip_step`) on the first two. A step is an update (Notes in
    trace/steps.py): 6 `step()` calls are 2 steps; offload exact; conv + GroupNorm."""
    run = run_client("train_opacus.py", ["--bmm", "--no-poisson", "--steps", "6", "--model",
                                         "conv"], ["offload:_module.blocks.*"], steps=3)
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    # the largest: `out` (Linear(512, 3)) weight per sample, 11 rows x 3 x 512 fp32
    assert _grad_sample_bytes(run) == 11 * 3 * 512 * 4
    p = run.policies["offload:_module.blocks.*"]
    assert p.predicted == p.measured, p


def test_functorch_mode_is_traced_through_opacus_vmap_of_grad():
    """torch.func refuses saved-tensor hooks; under `grad_sample_mode="functorch"` Opacus
    calls `vmap(grad(...))` inside `loss.backward()`. The trace was refused in one line
    ("`opacus` (called by the script) at grad_sample/functorch.py:... differentiates with
    torch.func"); memledger's own hooks now step aside while the transform runs (Note
    [torch.func transforms under memledger's hooks], trace/func_transforms.py): the ledger
    equals the allocator, offload is predicted as measured and checkpoint refused alike."""
    run = run_client("train_opacus.py", ["--mode", "functorch"],
                     ["offload:_module.blocks.0", "checkpoint:_module.blocks.0"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 321_620
    off, ck = run.policies["offload:_module.blocks.0"], run.policies["checkpoint:_module.blocks.0"]
    assert (off.predicted, off.measured) == (321_620, 321_620)
    assert ck.predicted is None and ck.predict_refusal == ck.measure_refusal
    assert "forward hooks paired with full backward hooks" in ck.predict_refusal


@pytest.mark.parametrize("argv", [["--bmm", "--no-poisson", "--steps", "9"],
                                  ["--mode", "ghost"], ["--mode", "hooks"]])
def test_the_doctor_sees_per_sample_gradients_used(argv):
    """Note [Gradients beside .grad] (trace/doctor_probe.py): BatchMemoryManager's skipped
    `step()` sums each physical batch's `grad_sample` (no torch step hook fires) and ghost
    clipping's first backward only measures norms; `dropped_update` read "6 of 9" and "3
    of 6" backward passes as gradients no step used."""
    from tests.clients.harness import assert_one_doctor_error

    assert_one_doctor_error("train_opacus.py", argv, 3, None, "")


def test_expanded_weights_under_checkpoint_exact():
    """`grad_sample_mode="ew"`: the first forward runs on ExpandedWeight parameters handed
    in by `functional_call`. The re-run in backward ran on the module's plain ones, and
    torch's checkpoint raised CheckpointError: measure refused while predict gave 330,604 B.
    The re-run now reads what the first run read (Note [Parameters handed in],
    measure/apply.py): measured equals predicted (and the gradients are bitwise the
    baseline's: `memledger compare`)."""
    run = run_client("train_opacus.py", ["--mode", "ew", "--steps", "3", "--no-poisson"],
                     ["checkpoint:_module.blocks.*"], steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 325_548
    p = run.policies["checkpoint:_module.blocks.*"]
    assert p.predicted == p.measured == 330_604, p

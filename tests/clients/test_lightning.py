"""PyTorch Lightning's own Trainer runs the loop (tests/clients/train_lightning.py): the
forward and backward inside `optimizer.step(closure)`, its own zero_grad, accumulation,
clipping and bf16 autocast. Skipped without pytorch-lightning (the `dev` extra has it).

Checked by hand on every loop of the script (auto, accum, clip, bf16, manual, sched, also
with `--val --dropout 0.1`): the ledger equals the allocator and checkpoint, selective,
offload and a mix on `blocks.*` are predicted to the byte (docs/accuracy.md). The tests keep
one loop each for the ledger, the gates and the doctor: Lightning takes ~8 s to import here.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import HERE, assert_one_doctor_error, imported_first, run_client, \
    run_plainly, skip_without

pytestmark = pytest.mark.clients
skip_without("pytorch_lightning")
# imported before the first traced run: torchmetrics makes a 4 B tensor at import
# (`_EPS_SMOOTHING`), which the in-process ledger pass would see and the allocator pass not
_imported = imported_first("pytorch_lightning")

SCRIPT = "train_lightning.py"
# embed 64x32, 2 blocks of (2 LayerNorms, attention's in/out projections, a 4x MLP), head
PARAMS = (64 * 32 + 2 * (2 * 64 + 96 * 33 + 32 * 33 + 128 * 33 + 32 * 129) + 32 * 64 + 64) * 4


def test_a_fit_resumed_from_a_checkpoint_is_predicted_to_the_byte(tmp_path):
    """`trainer.fit(..., ckpt_path=...)`: the weights, AdamW's state and the loops' counters
    from `torch.load`. The ledger equals the allocator (the loaded checkpoint once read as
    347.6 KiB of garbage at the end: tensors the frames of the stop's own traceback held,
    now listed as the last step ends, before the stop unwinds the script); every policy
    predicted as it measures."""
    ckpt = tmp_path / "pl.ckpt"
    run_plainly(SCRIPT, ["--steps", "2", "--save", str(ckpt)])
    blocks = "blocks.*"
    run = run_client(SCRIPT, ["--steps", "6", "--resume", str(ckpt)], [
        f"checkpoint:{blocks}", f"selective:{blocks}", f"offload:{blocks}"])
    assert run.ledger_peak == run.allocator_peak
    at = run.summary.at_peak
    assert at["parameter"] == PARAMS and at["optimizer_state"] >= 2 * PARAMS
    assert run.summary.cycle_garbage is None
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)


def test_accumulation_under_lightning_is_predicted_to_the_byte():
    """accumulate_grad_batches=2: the first micro-batch's backward outside step(), the
    second inside its closure. Two steps are two optimizer steps of two forwards each."""
    blocks = "blocks.*"
    run = run_client(SCRIPT, ["--loop", "accum", "--steps", "3"], [
        f"checkpoint:{blocks}", f"selective:{blocks}", f"offload:{blocks}"])
    assert run.summary.steps_traced == 2
    st = run.ledger.storages
    forwards = st[st.op.str.startswith("embedding") & (st.phase == "forward")]
    assert forwards.groupby("step").size().to_dict() == {1: 2, 2: 2}
    assert run.ledger_peak == run.allocator_peak
    at = run.summary.at_peak
    assert at["parameter"] == PARAMS == 118_272
    assert at["optimizer_state"] == 2 * PARAMS + 27 * 4      # AdamW: 2 moments, 27 steps
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)
        assert p.predicted < run.ledger_peak, (text, p)


def test_the_gates_judge_the_closures_own_gradients():
    """Note [A capture's step that runs its closure] (verify/capture.py): read before the
    closure ran, Lightning's step 0 had no gradient and a perturbed activation was caught
    by the update gate, a step late; now at the gradients gate, step 0."""
    from memledger.verify.gates import run_gates
    from memledger.verify.runs import Variant, capture_in_process

    rep = run_gates(HERE / SCRIPT, ["--loop", "auto", "--steps", "3", "--dropout", "0.1"], [
        Variant("checkpoint:blocks.*", "checkpoint:blocks.*"),
        Variant("offload:blocks.*", "offload:blocks.*"),
        Variant("perturb", broken="perturb_saved", selector="blocks.1")], steps=1,
        runner=lambda script, argv, variant, steps, out: capture_in_process(
            script, argv, variant, steps))
    assert rep.reproducible
    ck, off, bad = rep.outcomes
    for o in (ck, off):
        assert o.passed and o.comparison.worst_gradient.max_abs == 0.0, o.reason
    f = bad.comparison.finding
    assert (f.gate, f.step) == ("gradients", 0) and f.name.startswith("blocks."), bad.reason


def test_lightning_fabric_model_keeps_its_own_names():
    """`fabric.setup(model)` holds the model as `_forward_module` (trace/roots.py,
    WRAPPERS): `blocks.*` selected no module before, and the gates named
    `_forward_module.blocks.1...`. Now every policy is exact and the verdict names the
    model's own parameter. (`--loop gan`, Lightning's GAN recipe, is doctored without a
    finding by hand; its mechanism is `tests/doctor/styles.py --loop gan`.)"""
    from memledger.verify.gates import run_gates
    from memledger.verify.runs import Variant, capture_in_process

    argv = ["--loop", "fabric", "--steps", "3"]
    run = run_client(SCRIPT, argv, ["checkpoint:blocks.*"])
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)
    rep = run_gates(HERE / SCRIPT, argv, [
        Variant("perturb", broken="perturb_saved", selector="blocks.1")], steps=1,
        runner=lambda script, argv, variant, steps, out: capture_in_process(
            script, argv, variant, steps))
    f = rep.outcomes[0].comparison.finding
    assert (f.gate, f.step) == ("gradients", 0) and f.name.startswith("blocks.1."), f


@pytest.mark.parametrize("argv, check, line", [
    (["--loop", "clip", "--dropout", "0.1"], None, ""),
    (["--bug", "detach"], "cut_graph", "x = x.detach()"),
    (["--bug", "retain"], "cross_step_retention", "self.losses.append(loss)"),
])
def test_the_doctor_on_lightnings_loop(argv, check, line):
    """No finding on Lightning's own machinery (clipping inside the closure; `--val`,
    validation in inference mode between steps, is clean by hand too); a cut inside the closure is cut_graph (it read as two
    unused_parameter warnings, one saying out_proj's module did not run), and a loss list
    on the LightningModule is cross_step_retention (unreported)."""
    assert_one_doctor_error(SCRIPT, [*argv, "--steps", "5"], 3, check, line)

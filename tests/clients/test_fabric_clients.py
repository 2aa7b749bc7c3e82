"""Lightning Fabric: a loop of the script's own (tests/clients/train_fabric.py, litgpt's
style): `fabric.setup` wraps the model (`_FabricModule`, the model as `_forward_module`),
`fabric.backward`, `fabric.clip_gradients`, `fabric.no_backward_sync` for accumulation,
precisions 32-true / bf16-mixed / bf16-true, `fabric.init_module(empty_init=True)`,
`fabric.save` / `fabric.load`. Skipped without the unified `lightning` package (the `dev`
extra has it).

Checked by hand (docs/accuracy.md, thirty-fourth session): every precision with and
without accumulation, clipping, init_module, a resumed run, a mid-run save and validation:
the ledger explains every byte and checkpoint, selective and offload on `transformer.h.*`
are predicted to the byte; the doctor finds nothing on the clean loops and the planted bug
on each broken one.
"""

from __future__ import annotations

import runpy
import sys

import pytest

from tests.clients.harness import HERE, assert_one_doctor_error, imported_first, run_client, \
    skip_without

pytestmark = pytest.mark.clients
skip_without("lightning")
_imported = imported_first("lightning")

SCRIPT = "train_fabric.py"
H = "transformer.h.*"
# wte 64x32, wpe 16x32, 2 blocks of (2 LayerNorms, qkv 96x33, proj 32x33, fc 128x33,
# proj 32x129), ln_f, lm_head 64x32 without bias
PARAMS = 64 * 32 + 16 * 32 + 2 * (2 * 64 + 96 * 33 + 32 * 33 + 128 * 33 + 32 * 129) \
    + 64 + 64 * 32


def test_accumulation_under_fabric_and_a_selector_through_its_wrapper():
    """`fabric.no_backward_sync(model, enabled=is_accumulating)` with `--accum 2`: a step is
    one optimizer step of two forwards. Note [Selectors through a wrapper]
    (replay/policies.py): `_forward_module.transformer.h.*`, the name `model.named_modules()`
    gives after `fabric.setup`, read "matches no module" in predict and measure both; now it
    selects the blocks `transformer.h.*` does, predicted as it measures."""
    run = run_client(SCRIPT, ["--accum", "2", "--clip"], [
        f"checkpoint:_forward_module.{H}", f"offload:_forward_module.{H}.mlp"])
    assert run.summary.steps_traced == 2
    st = run.ledger.storages
    forwards = st[st.op.str.startswith("embedding") & (st.phase == "forward")]
    assert forwards.groupby("step").size().to_dict() == {1: 4, 2: 4}   # wte + wpe, twice
    assert run.ledger_peak == run.allocator_peak == 846_096
    at = run.summary.at_peak
    assert at["parameter"] == PARAMS * 4
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)
    ps = run.policies   # `checkpoint:transformer.h.*` measures 715,152 B too
    assert ps[f"checkpoint:_forward_module.{H}"].measured == 715_152
    assert ps[f"offload:_forward_module.{H}.mlp"].measured == 739_088


def test_bf16_true_weights_made_under_init_module():
    """bf16-true: the weights in bf16, made so under `fabric.init_module(empty_init=True)`
    and loaded from a state dict. The ledger with the scratch the bf16 kernels take equals
    the allocator; each policy exact."""
    run = run_client(SCRIPT, ["--precision", "bf16-true", "--init-module"], [
        f"selective:{H}", f"offload:{H}"])
    # the scratch is 18,048 B on 2 threads (414,608 B), none after a test set 1 thread
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.summary.at_peak["parameter"] == PARAMS * 2
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)


def test_a_bf16_mixed_fabric_run_resumed_from_its_checkpoint(tmp_path, monkeypatch):
    """`fabric.load(path, {"model", "optimizer", "step"})` before the loop (AdamW's state
    from `torch.load`), then bf16-mixed: CPU autocast around `_FabricModule.forward`, its
    output cast back to float32. The ledger with the bf16 kernels' scratch equals the
    allocator; each policy exact."""
    monkeypatch.setattr(sys, "argv", [SCRIPT, "--steps", "1", "--save", str(tmp_path)])
    runpy.run_path(str(HERE / SCRIPT), run_name="__main__")
    run = run_client(SCRIPT, ["--steps", "6", "--resume", str(tmp_path), "--precision",
                              "bf16-mixed", "--clip"], [f"checkpoint:{H}", f"offload:{H}"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak   # 674,064 B on 2 threads
    assert run.summary.at_peak["parameter"] == PARAMS * 4
    assert run.summary.at_peak["optimizer_state"] >= 2 * PARAMS * 4
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)


@pytest.mark.parametrize("argv, check, line", [
    (["--accum", "2", "--clip", "--dropout", "0.1", "--eval-every", "1"], None, ""),
    (["--bug", "retain", "--accum", "2"], "cross_step_retention", "losses.append(loss)"),
])
def test_the_doctor_on_a_fabric_loop(argv, check, line):
    """No finding on Fabric's machinery (no_backward_sync, clip_gradients, validation in
    eval mode and no_grad between steps); a loss list is cross_step_retention."""
    assert_one_doctor_error(SCRIPT, [*argv, "--steps", "5"], 3, check, line)

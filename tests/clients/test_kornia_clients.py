"""kornia (tests/clients/train_kornia.py): random augmentation of images and masks inside
the step (`AugmentationSequential`, new parameters drawn from torch's global generator
every step), kornia's losses and geometry (`warp_affine` in a spatial transformer), a
small UNet in plain torch. Skipped without kornia."""

from __future__ import annotations

import pytest

from tests.clients.harness import fake_client_gaps, imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("kornia")
# kornia makes small tensors the first time these modules are imported (the script imports
# them inside `main`): in a fresh process per pass (the CLI) every pass makes them; in this
# one only the first pass would, and its ledger read 31,372 B over the allocator pass that
# followed it. Imported before the module's first test, every pass starts from the same
# state (Note [Tensors made at import], harness.py).
_imported = imported_first("kornia.augmentation", "kornia.geometry.conversions",
                           "kornia.geometry.transform", "kornia.losses")


def test_augmented_batch_in_the_step_is_the_input_and_offload_exact():
    """The UNet's batch goes through RandomAffine, ColorJitter, RandomResizedCrop and
    RandomHorizontalFlip (images and masks alike) under `no_grad` inside the step: the
    ledger explains every byte, the augmented image and mask are the step's `input` (made
    by the augmentation between steps), and offloading the decoder is exact."""
    run = run_client("train_kornia.py", ["--mode", "seg"], ["offload:up.*"], steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    st = run.ledger.storages
    inp = st[st["category"] == "input"]
    # image 4 x 3 x 16 x 16 fp32, mask 4 x 1 x 16 x 16 fp32, each made by the last `where`
    # of the flip, once per step
    assert sorted(set(inp["bytes"])) == [4 * 16 * 16 * 4, 4 * 3 * 16 * 16 * 4]
    assert set(inp["op"]) == {"where.self"} and set(inp["phase"]) == {"other"}
    p = run.policies["offload:up.*"]
    assert p.predicted == p.measured, p


def test_augmentation_inside_a_checkpointed_region_exact():
    """An augmentation as a layer of the model (`aug` between `stem` and `body`), drawing
    its parameters inside the forward: torch's checkpoint restores the generator for the
    re-run, which draws the same affine and erasing again; predicted = measured."""
    run = run_client("train_kornia.py", ["--mode", "inside"], ["checkpoint:aug"], steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    p = run.policies["checkpoint:aug"]
    assert p.predicted == p.measured, p


def test_fake_spatial_transformer_equals_the_real_run():
    """`trace --fake` of the spatial transformer (RandomAffine + RandomPerspective on the
    batch, `warp_affine` in the model) stopped at kornia's argument check (`degrees out of
    bounds`: `torch.tensor(15.0)`'s fake had no known value, Rule 3 of Note [Fake runs])
    and, past it, hung in `warp_affine` (Note [A view's node is not read],
    trace/scalars.py). Now the fake ledger is the real one: peak, categories and a
    policy's prediction."""
    assert fake_client_gaps("train_kornia.py", ["--mode", "stn"], ["checkpoint:loc"]) == {}

"""isab-pytorch 0.3.0 (tests/clients/train_isab.py): a Set Transformer of lucidrains'
Induced Set Attention Blocks (a masked set attends to m inducing points and back) and a
pooling-by-attention head written in the script, on random variable-size sets; latents
learned per block or handed in by the script and carried between blocks.

Measured (`tests/clients/harness.py run_client`, the helper hunt57e, 2026-12-08, torch
2.13.0 CPU, OMP_NUM_THREADS=1, AMD Zen 4; ledger + kernel scratch = allocator and `--fake
--device cpu` = the real ledger everywhere; 14 policies per config predicted = measured):
- default (learned latents, 2 blocks; 2 steps): 763,420 B; `checkpoint:@ISAB` 701,496,
  `offload:@ISAB` 635,496, `checkpoint:@Attention` 667,176, `selective:@ISAB` 788,488.
- `--latents carried --self-attend`: 803,640 B; `checkpoint:@ISAB` 722,500.
- `--inverted --perm 0.5 --accum 2 --clip 1 --sgd`: 1,073,784 B; `checkpoint:blocks.*`
  777,668, `checkpoint:blocks.0+offload:blocks.1` 731,248.
- `--latents carried --self-attend --inverted --perm 1 --accum 2`: 1,295,792 B;
  `selective:@ISAB:save=bmm` 971,784, `selective:@Attention:save=_softmax` 899,000.
- `--bf16 --perm 1 --blocks 1` (the model called twice in one autocast region): 430,204 B
  + 19,592 B of kernel scratch; `checkpoint:blocks.*` 395,240, predicted 409,064 before
  (Note [A later call's save of a cached cast ends no re-run], replay/engine.py).
`show` listed mse_loss's save of the model's output (32 B) under "(SetTransformer.forward)"
(Note [A save just after the model's forward returned], ledger/model.py). The doctor finds
nothing on the loops; `--bug stale` is `grad_leak`, `--bug clip-after-step` `clip_order`.
"""

import importlib.util

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, fake_client_gaps,
                                   run_client)

if importlib.util.find_spec("isab_pytorch") is None:
    pytest.skip("isab-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_carried_latents_policies_by_class_and_the_loss_save_is_the_scripts():
    """Latents handed in and carried between blocks (each ISAB returns them beside its
    output); policies by `@ISAB` / `@Attention` class and by block name predicted =
    measured; the loss's save of the model's output is the script's in `show`."""
    argv = ["--latents", "carried", "--self-attend"]
    pols = {"checkpoint:@ISAB": 722_500, "offload:blocks.0.attn1+checkpoint:blocks.1": None,
            "selective:@Attention": 830_540}
    run = run_client("train_isab.py", argv, list(pols))
    assert run.ledger_peak == 803_640
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=803_640)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        if peak is not None:
            assert_pinned(run.policies[policy].measured, amd_bf16=peak)
    by_module = run.summary.to_json_dict()["activations"]["by_module"]
    assert by_module[""] == 32 and "(SetTransformer.forward)" not in by_module


@pytest.mark.slow
def test_inverted_attention_with_permutation_loss_accumulation_and_clipping():
    argv = ["--inverted", "--perm", "0.5", "--accum", "2", "--clip", "1", "--sgd"]
    pols = {"checkpoint:blocks.*": 777_668, "checkpoint:blocks.0+offload:blocks.1": 731_248,
            "selective:@ISAB:save=bmm": None}
    run = run_client("train_isab.py", argv, list(pols))
    assert run.ledger_peak == 1_073_784
    assert_pinned(run.allocator_peak, amd_bf16=1_073_784)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        if peak is not None:
            assert_pinned(run.policies[policy].measured, amd_bf16=peak)
    assert fake_client_gaps("train_isab.py", argv, list(pols)) == {}


@pytest.mark.slow
def test_bf16_model_called_twice_rerun_stops_at_its_own_last_pack():
    """Under bf16 autocast the permutation term calls the model again in the same region:
    the second call saves the weight casts the first made (autocast's cache), and the
    first call's re-run was priced to the end of the block, through `attn2.to_out`'s kernel
    and its 20,480 B of oneDNN scratch that the real re-run (stopped at that Linear's pack)
    never calls: 409,064 B predicted against 395,240 measured."""
    argv = ["--bf16", "--perm", "1", "--blocks", "1"]
    pols = {"checkpoint:blocks.*": 395_240, "checkpoint:blocks.0.attn1": 421_764,
            "offload:@ISAB": None}
    run = run_client("train_isab.py", argv, list(pols))
    assert run.ledger_peak == 430_204
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=449_796)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        if peak is not None:
            assert_pinned(run.policies[policy].measured, amd_bf16=peak)


@pytest.mark.slow
def test_doctor_finds_nothing_then_a_stale_gradient_and_a_late_clip():
    assert_one_doctor_error("train_isab.py", ["--latents", "carried", "--accum", "2",
                                              "--clip", "1"], 3, None, "")
    assert_one_doctor_error("train_isab.py", ["--bug", "stale"], 3, "grad_leak",
                            "(loss / args.accum if args.accum > 1 else loss).backward()")
    assert_one_doctor_error("train_isab.py", ["--clip", "1", "--bug", "clip-after-step"], 3,
                            "clip_order", "torch.nn.utils.clip_grad_norm_(params, args.clip)")

"""nGPT-pytorch (tests/clients/train_ngpt.py): lucidrains' normalized transformer, every
`NormLinear`'s weight kept on the unit sphere by a `torch.nn.utils.parametrize`
parametrization (an `L2Norm` module computes it from `parametrizations.weight.original`
at each read) and written back into the original after each step by the library's
`register_step_post_hook(optim)` (a no_grad read inside `optimizer.step()`); residuals a
learned lerp, renormed; the token embedding read as a weight, never called.

Measured (`tests/clients/harness.py run_client`, the helper hunt50b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy
predicted = measured):
- default (2 steps): 594,308 B + 1,916 B of kernel scratch = 596,224 B allocator;
  `checkpoint:layers.*.*` 440,804 B, `offload:layers.*.*` 392,896 B,
  `selective:@Attention` 563,200 B, `checkpoint:@ParametrizationList` 674,576 B,
  `offload:@L2Norm` 556,816 B, `checkpoint:layers.0.0.fn.to_q.linear.parametrizations.
  weight` 601,152 B.
- `--manual --renorm manual` (no parametrization; `norm_weights_()` after the step):
  573,460 B; `checkpoint:layers.*.*` 435,940 B, `offload:layers.*.*` 390,188 B.
- `--model ntransformer`: 288,356 + 8 B; `checkpoint:layers.*.*` 183,988 B.
- `--tied --spheres 2` (1 step, the test): 577,728 B; below.
`trace --fake --device cpu` equals the real ledger on four configurations; `compare`
passes five policies bitwise; the doctor finds nothing on any loop tried.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("nGPT_pytorch") is None:
    pytest.skip("nGPT-pytorch is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]


def test_ngpt_on_two_hyperspheres_is_predicted_as_measured_and_its_renorm_is_the_steps():
    """The tied-embedding LM on two hyperspheres (each weight normed in two halves,
    chunked, stacked and concatenated back): a policy on every residual branch, a mix
    (offload on the attention branches, selective on the feed-forwards) and a checkpoint
    of the token embedding's parametrization, which the root forward reads (`token_embed.
    weight[ids]`) and the post-step hook reads again under no_grad: each predicted and
    measured to the byte.

    The hook's reads, inside `optimizer.step()`, went to "forward" (optimizer peak
    342,980 B, the renorm's normed copies left out), and the reads while the model was
    built (the library's `norm_weights_()` in each constructor) too (setup 282,408 B):
    now 345,028 B and 286,440 B (Note [A weight read without gradients], trace/steps.py;
    Note [A module called while a module is built], trace/roots.py)."""
    argv = ["--tied", "--spheres", "2"]
    pols = {"checkpoint:layers.*.*": 405_976,
            "offload:layers.*.0+selective:layers.*.1": 396_400,
            "checkpoint:token_embed.linear.parametrizations.weight": 580_224}
    run = run_client("train_ngpt.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 577_728
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    by_phase = run.ledger.peak_by("phase")
    assert (by_phase["setup"], by_phase["forward"], by_phase["optimizer"]) == \
        (286_440, 569_920, 345_028)
    assert_one_doctor_error("train_ngpt.py", argv, 2, None, "")

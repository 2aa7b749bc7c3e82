"""coconut-pytorch (tests/clients/train_coconut.py): lucidrains' Chain of Continuous
Thought: one decoder (rotary positions, hyper-connection residual streams, a value
residual, x-transformers' `Attend`) called `num_reasoning_steps + 1` times a step, each
call on the last hidden state of the one before ("the continuous thought") with the
growing key/value cache of the earlier calls; the library's own `checkpoint_sequential`
over the recurrent calls (`--lib-checkpoint`). coconut-pytorch 0.0.32 (x-transformers
2.31.10, hyper-connections 0.4.11, rotary-embedding-torch).

Measured (`tests/clients/harness.py run_client`, the helper hunt56d, 2026-12-07, torch
2.13.0 CPU, AMD Zen 4 (AVX-512 bf16), OMP_NUM_THREADS=1; ledger = allocator, every policy
predicted = measured to the byte; `--fake` the same ledger; the doctor finds nothing):
- default (3 reasoning steps, 1 latent, 2 steps): 749,720 B; `checkpoint:@Attention`
  735,126 B, `offload:model.layers.0.*` 575,639 B, `checkpoint:model.layers.0.*+offload:
  model.layers.1.*` 497,312 B, `selective:@HyperConnections` 633,952 B, `checkpoint:model`
  621,024 B, `offload:@Attend` 715,926 B; `checkpoint:model.layers.*` refused by both (a
  ModuleList).
- `--lib-checkpoint --latents 2 --learn-bot --accum 2 --clip 1 --optim adamw`: 890,054 B;
  `checkpoint:model.layers.*.*` 607,516 B (nested inside the library's checkpoint),
  `selective:model.layers.*.*` 713,668 B, `offload:model` 453,728 B.
- `--model multi --latents 2 --optim sgd --clip 0.5`: 804,584 B; `checkpoint:model.
  layers.*.*` 534,092 B, `offload:model.layers.*.*` 400,588 B.
- `--amp` (bf16 autocast) `--accum 2`: 655,048 B + 4,736 B of kernel scratch = 659,784 B;
  `selective:` refused by both (a weight's autocast cast taken from autocast's cache).
- `--ragged --latents 2 --accum 2` (prompts and answers as lists of several lengths):
  889,478 B; `checkpoint:model.layers.*.*` 603,820 B, `selective:model.layers.*.*`
  709,972 B, `offload:model` 453,648 B, `checkpoint:@Attention+offload:model.token_emb`
  859,622 B.
`--accum 2 --bug zero-in-accum`: one `dropped_update` warning at the backward's line.
`compare` without `random.seed` rejected every policy, naming the unseeded generator
(hyper-connections picks each layer's residual stream by `random.randrange`): right.
"""

import importlib.util

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, fake_client_gaps,
                                   run_client)

if importlib.util.find_spec("coconut_pytorch") is None:
    pytest.skip("coconut-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

TINY = ["--dim", "8", "--depth", "2", "--prompt", "4", "--answer", "3"]


@pytest.mark.slow
def test_recurrent_thoughts_under_the_library_checkpoint_are_predicted_as_measured():
    """The decoder called four times a step (prompt, two continuous thoughts on the
    key/value cache, the answer), the recurrent calls inside the library's own
    `checkpoint_sequential`, two latents per thought, the begin-of-thought loss, two
    accumulated micro-batches and clipping: a checkpoint of every layer (nested in the
    library's checkpoint), a checkpoint of layer 0 beside an offload of layer 1, an
    offload of the whole decoder, each predicted and measured to the byte; the ledger
    is the allocator's."""
    argv = [*TINY, "--lib-checkpoint", "--latents", "2", "--learn-bot", "--accum", "2",
            "--clip", "1"]
    pols = {"checkpoint:model.layers.*.*": 463_996,
            "checkpoint:model.layers.0.*+offload:model.layers.1.*": 418_220,
            "offload:model": 348_530}
    run = run_client("train_coconut.py", argv, list(pols), steps=2)
    assert run.ledger_peak == 547_776    # 262,144 B of it rotary's cached_freqs (8192 x 8)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=547_776)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)


@pytest.mark.slow
def test_multi_stream_coconut_fake_and_doctor():
    """The multi-stream Coconut with the README's `generate` (no_grad, eval, the key/value
    cache) after each step: `--fake` gives the real ledger and the same predictions; the
    doctor finds nothing on the loop, and finds the gradients a loop that never zeroes
    them carries into the next step, at its backward line."""
    argv = [*TINY, "--model", "multi", "--latents", "2", "--generate"]
    assert fake_client_gaps("train_coconut.py", argv,
                            ["checkpoint:model.layers.*.*", "offload:model"]) == {}
    assert_one_doctor_error("train_coconut.py", argv, 2, None, "")
    assert_one_doctor_error("train_coconut.py", [*argv, "--bug", "no-zero-grad"], 2,
                            "grad_leak",
                            "(loss / args.accum if args.accum > 1 else loss).backward()")


@pytest.mark.slow
def test_ragged_prompts_and_a_zero_grad_inside_accumulation():
    """Prompts and answers of several lengths as lists (the library pads them with -1 and
    masks): the doctor finds nothing with two accumulated micro-batches, and one
    `dropped_update` warning at the backward line when each micro-batch's zero_grad wipes
    the one before (as on train_scan.py)."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    argv = [*TINY, "--ragged", "--accum", "2"]
    assert_one_doctor_error("train_coconut.py", argv, 2, None, "")
    report, outcome = diagnose_in_process(HERE / "train_coconut.py",
                                          [*argv, "--bug", "zero-in-accum"], 2)
    assert outcome.code == 0
    assert [(f.check, f.severity) for f in report.findings] == [("dropped_update", "warning")]
    lines = (HERE / "train_coconut.py").read_text().splitlines()
    assert lines[report.findings[0].where.line - 1].strip() == \
        "(loss / args.accum if args.accum > 1 else loss).backward()"

"""ponder-transformer (tests/clients/train_ponder.py): lucidrains' `PonderTransformer`, one
`Block` (attention, feed-forward, a halting head) repeated `train_max_steps` times in
training (13 at the default lambda_p 0.2, 4 at 0.5), every repeat's hiddens stacked and
decoded, the cross-entropy weighted by the geometric halting distribution plus a KL ponder
loss; in eval mode repeated until a sampled halt.

Measured (`tests/clients/harness.py run_client`, the helper hunt49m, 2026-12-07, torch
2.13.0, an AVX2 CPU, one intra-op thread; ledger with its kernel scratch = allocator,
every policy predicted = measured):
- `--lambda-p 0.5 --clip` (1 step, the test): 128,584 B + 2,232 B of scratch = 130,816 B;
  `checkpoint:block` 82,080, `checkpoint:block.attn+offload:block.ff` 84,224,
  `selective:@Block` 125,120 B.
- `--clip` (13 repeats, 2 steps): 412,996 B + 3,676 B = 416,672 B; `checkpoint:block`
  251,104, `selective:block` 398,304, `offload:block` 172,064, `checkpoint:block.attn+
  offload:block.ff` 265,248, `checkpoint:@Attention` 415,008, `offload:to_logits` 401,696 B.
  plan's `offload:block.ff.fn.*+offload:to_logits` and `offload:block.ff.fn.[1-2]` as
  measured. `--validate`: 415,060 + 3,676 B; `checkpoint:block.ff.fn.*` 615,920 B (three
  checkpoints a repeat, each keeping its input: more, not less), `offload:@PreNorm`
  188,272 B.
- `--no-causal --lambda-p 0.5 --validate --accum 2`: 178,532 + 2,064 B; `checkpoint:block`
  135,044, `selective:block` 178,828, `checkpoint:block.to_halt_logits` 200,820 B.
`--fake` ledgers equal the real ones; the doctor finds nothing (with `--validate`).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("ponder_transformer") is None:
    pytest.skip("ponder-transformer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_pondering_block_repeated_is_predicted_as_measured():
    """Four repeats of one block, 1 step: checkpoint on the block (each of its four calls
    its own checkpoint), a mix inside it, and selective on it by class, each predicted and
    measured to the byte; the doctor finds nothing on the loop."""
    argv = ["--lambda-p", "0.5", "--clip"]
    pols = {"checkpoint:block": 82_080, "checkpoint:block.attn+offload:block.ff": 84_224,
            "selective:@Block": 125_120}
    run = run_client("train_ponder.py", argv, list(pols), steps=1)
    assert run.ledger_peak == 128_584
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=130_816)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    assert_one_doctor_error("train_ponder.py", argv, 2, None, "")

"""tranception-pytorch, token-shift-gpt and rela-transformer (tests/clients/
train_tranception.py): lucidrains' protein LM (attention whose head groups each get a
causal depthwise Conv1d of their own kernel size, 0, 3, 5 or 7, and a learned ALiBi bias,
then a ReLU-squared feed-forward), `TokenShiftGPT` and `ReLATransformer` through their
`AutoregressiveWrapper`s, tiny, Adam.

Measured (`tests/clients/harness.py run_client`, the helper hunt51d, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy predicted
= measured or refused by both, `trace --fake --device cpu` = the real ledger):
- `--model tranception` (2 steps): 243,628 B; `offload:layers.*.*` 162,388 B,
  `checkpoint:layers.*.1` 235,052 B, `selective:layers.*.1` 247,340 B, `offload:
  @DepthwiseConv1d` 232,108 B, `checkpoint:layers.*.0.to_qkv` 253,740 B;
  `checkpoint:layers.*.*`, `selective:@Attention`, `checkpoint:@LearnedAlibiPosBias`
  refused by both (Note [A cache emptied before every call], replay/emptied_cache.py).
- `--model tokenshift`: 172,800 B; `checkpoint:net.net.[0-1]` 155,456 B, `offload:` 137,600
  B, `selective:@FeedForward` 167,872 B. `--amp --accum 2`: 173,700 B + 2,552 B of kernel
  scratch = 176,252 B allocator.
- `--model rela`: 225,304 B; `checkpoint:net.layers.*.*` 180,528 B, `offload:@ReLA`
  152,856 B, `selective:@GatedRMSNorm` 218,648 B. `--mem-kv 2 --mask --relu-squared
  --clip`: 230,084 B.
`--depth 1` (the test): 142,484 B; `offload:layers.*.*` 103,188 B,
`checkpoint:layers.*.1` 147,540 B, `checkpoint:layers.*.*` refused by both.
The doctor finds nothing on the three loops; `--keep-bias` (the library's cache kept
across steps) it names as cross_step_retention before torch's "backward through the graph
a second time".
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("tranception_pytorch") is None:
    pytest.skip("tranception-pytorch is not installed", allow_module_level=True)
# one intra-op thread, as under xdist: with two, offload:layers.*.* reads 106,620 B
# (predicted = measured still), where one thread gives 103,188 B
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]


def test_a_tranception_lm_is_predicted_as_measured_and_its_emptied_alibi_cache_refused():
    """One block, two steps; the loop empties each `LearnedAlibiPosBias`'s cached bias
    (distances times learned slopes: a graph) before each forward, as the library needs to
    train past one step. Offload on the block's attention and feed-forward and a
    checkpoint on its feed-forward are predicted and measured to the byte; a checkpoint
    holding the attention is refused by both in one line (its re-run would find the bias
    cached and skip the product that saved the slopes: torch's checkpoint refuses it).
    Before, predict priced it (193,972 B at depth 2). The doctor finds nothing."""
    argv = ["--model", "tranception", "--depth", "1"]
    pols = {"offload:layers.*.*": 103_188, "checkpoint:layers.*.1": 147_540,
            "checkpoint:layers.*.*": None}
    run = run_client("train_tranception.py", argv, list(pols))
    assert run.ledger_peak == run.allocator_peak == 142_484
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    refused = run.policies["checkpoint:layers.*.*"]
    assert refused.predict_refusal == refused.measure_refusal
    assert "filled an empty buffer of layers.0.0.learned_alibi_pos_biases.3" in \
        refused.predict_refusal
    assert_one_doctor_error("train_tranception.py", argv, 2, None, "")

"""local-attention 1.11.2 (tests/clients/train_local_attn.py): lucidrains'
`LocalTransformer` as its README trains it (causal windows of 8 over 30 tokens, rotary or
xpos, dynamic position bias, hyper-connections' residual streams) and a bidirectional
stack of `LocalAttention(look_backward=1, look_forward=1, autopad=True)` blocks.

Measured (`tests/clients/harness.py run_client`, the helper hunt56c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX-512 bf16), OMP_NUM_THREADS=1; 2 steps; every policy predicted =
measured; docs/accuracy.md, "accelerated-scan and assoc-scan"):
- `--model lm` (defaults): ledger 343,584 B + 14,872 B of kernel scratch = 358,456 B;
  `checkpoint:@LocalMHA` 290,664, `selective:@LocalAttention` 354,600,
  `checkpoint:layers.*.0.branch.attn_fn` 330,024 B; `layers.*` (a ModuleList of
  ModuleLists) refused by both sides in one line.
- `--xpos --streams 2`: 569,216 + 14,872 = 584,088 B; `checkpoint:@LocalMHA` 514,264 B.
- `--dpb --accum 2 --clip 1`: 381,448 + 14,872 = 396,320 B; `checkpoint:layers.*.*`
  265,392, `offload:layers.*.*` 232,128 B.
- `--model bidir`: 243,640 B, no scratch; `checkpoint:layers.*` 188,144, `offload:
  layers.*` 158,636, `selective:layers.*.attn` 267,088 B; `--fake` the same ledger.
The doctor finds nothing on either loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("local_attention") is None:
    pytest.skip("local-attention is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_bidirectional_local_attention_blocks_are_predicted_as_measured():
    """Windows looking one back and one forward (autopad: 30 tokens padded to 32),
    checkpoint, offload and selective on the blocks and on the attention alone."""
    pols = {"checkpoint:layers.*": 188_144, "offload:layers.*": 158_636,
            "selective:layers.*.attn": 267_088}
    run = run_client("train_local_attn.py", ["--model", "bidir"], list(pols))
    assert run.ledger_peak == 243_640
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=243_640)
    for policy, peak in pols.items():
        got = run.policies[policy]
        assert got.predicted == got.measured
        assert_pinned(got.measured, amd_bf16=peak)
    assert_one_doctor_error("train_local_attn.py", ["--model", "bidir", "--accum", "2",
                                                    "--clip", "1"], 2, None, "")

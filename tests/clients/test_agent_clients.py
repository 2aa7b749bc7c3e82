"""agent-attention-pytorch (tests/clients/train_agent.py): lucidrains' `AgentTransformer`
(learned agent tokens; each layer an `AgentSelfAttention` that packs agents and tokens for
one qkv projection, lets the tokens attend to the agents and the agents to the tokens,
with talking heads (1x1 convs) and sigmoid gates, and returns new agents; a feed-forward
over both packed with einops) as a per-token tagger, Adam.

Measured (`tests/clients/harness.py run_client`, the helper hunt49k, 2026-12-07, torch
2.13.0, an AVX2 CPU, one intra-op thread; ledger = allocator to the byte, every policy
predicted = measured, `--fake --device cpu` ledgers = real ones, `compare` gradients
bitwise with dropout and a padding mask):
- `--mask --dropout 0.1` (2 steps): 179,092 B; `offload:transformer.layers.*.0+offload:
  transformer.layers.0.1` 105,444 B, `offload:transformer.layers.0.0` 148,180 B (plan's
  pick at 85%), `offload:transformer.layers.0.0+offload:transformer.layers.0.1` 129,940 B,
  `checkpoint:transformer.layers.0.0+checkpoint:transformer.layers.0.1` 144,692 B.
- `--mask` (2 steps): 170,900 B; `checkpoint:transformer.layers.*.0` 153,868 B,
  `selective:transformer.layers.0.0.to_qkv` 183,636 B, `checkpoint:transformer` 180,640 B,
  `offload:transformer.layers.*.1` 143,788 B; `transformer.layers.*` (ModuleLists)
  refused alike.
- `--amp --accum 2 --sub-ln --validate --dropout 0.2`: `offload:@AgentSelfAttention`
  134,588 B, `checkpoint:@RMSNorm` 201,084 B, `offload:embed+checkpoint:head` 181,466 B.
The doctor finds nothing on its loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("agent_attention_pytorch") is None:
    pytest.skip("agent-attention-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

L = "transformer.layers"


def test_an_agent_transformer_is_predicted_as_measured():
    """A padding mask and dropout (the re-runs draw the same numbers): a mix of offloads
    over both layers' attention and one feed-forward, checkpoint on every feed-forward, and
    selective on every attention, each predicted and measured to the byte; the doctor finds
    nothing."""
    argv = ["--mask", "--dropout", "0.1"]
    pols = {f"offload:{L}.*.0+offload:{L}.0.1": 105_444, f"checkpoint:{L}.*.1": 170_260,
            "selective:@AgentSelfAttention": 175_692}
    run = run_client("train_agent.py", argv, list(pols))
    assert run.ledger_peak == 179_092
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=179_092)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    assert_one_doctor_error("train_agent.py", argv, 2, None, "")

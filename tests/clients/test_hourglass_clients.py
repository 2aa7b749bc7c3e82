"""hourglass-transformer-pytorch (tests/clients/train_hourglass.py): an autoregressive
`HourglassTransformerLM`, the sequence shortened and lengthened again around a valley,
each level's `Transformer` holding its layers as `ModuleList([attn, ff])` items called in
halves, attention resampling at each down/up sample; the library's AutoregressiveWrapper
loss, a plain Adam loop.

Measured (`tests/clients/harness.py run_client`, 1 step, hunt45g, 2026-12-06, torch
2.13.0 CPU): nested `depth=(2, (2, 2, 2), 2)`, `--batch 8 --updown linear`: ledger
1,546,716 B = allocator; a mix (checkpoint, offload and selective on three of its
Transformers) 1,192,084 B and `checkpoint:net.transformer.valley_transformer` (the inner
hourglass whole) 1,123,524 B predicted and measured. `--updown naive` (`--batch 8`):
1,531,996 B, the same policies 1,177,364 / 1,110,724 B both sides. One level (`--flat
--batch 16`): plan's lowest, offload on all 16 halves, 444,072 B both sides.
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("hourglass_transformer_pytorch") is None:
    pytest.skip("hourglass-transformer-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

T = "net.transformer"


def test_policies_on_the_nested_hourglass_are_predicted_as_measured():
    """A mix over three of the nested Transformers' halves, and the inner hourglass
    checkpointed whole (its resampling, its valley and the Transformers around it)."""
    mix = (f"checkpoint:{T}.pre_transformer.layers.*.0+offload:{T}.post_transformer.layers.*.*"
           f"+selective:{T}.attn_resampling_pre_valley.layers.0.*")
    whole = f"checkpoint:{T}.valley_transformer"
    run = run_client("train_hourglass.py", ["--batch", "8", "--updown", "linear"],
                     [mix, whole], steps=1)
    assert run.ledger_peak == run.allocator_peak == 1_546_716
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {mix: (1_192_084, 1_192_084), whole: (1_123_524, 1_123_524)}


def test_plan_takes_both_halves_of_every_transformer_beside_the_blocks():
    """Plan took the feed-forward halves of `post_transformer` (the most saved), their
    attention halves, and the feed-forward halves of the Transformers beside them, but not
    those Transformers' attention halves: 12 blocks of 16, and `plan` said no candidate
    fits under 740,092 B (Note [Parts of the stacks beside], replay/plan.py). With all 16,
    plan's lowest, offloading every one, is predicted and measured 444,072 B (the policy
    text may differ by blocks whose offload adds the same time: timings decide it)."""
    from memledger.replay.plan import plan, repeated_blocks

    lowest = (f"offload:{T}.post_transformer.layers.0.1+offload:{T}.post_transformer.layers.*.0"
              f"+offload:{T}.pre_transformer.layers.*.1+offload:{T}.pre_transformer.layers.*.0"
              f"+offload:{T}.attn_resampling_post_valley.layers.0.*"
              f"+offload:{T}.attn_resampling_pre_valley.layers.0.*"
              f"+offload:{T}.valley_transformer.layers.*.1"
              f"+offload:{T}.valley_transformer.layers.*.0")
    run = run_client("train_hourglass.py", ["--flat", "--batch", "16"], [lowest], steps=1)
    blocks = repeated_blocks(run.ledger)
    assert len(blocks) == 16
    assert {b for b in blocks if b.endswith(".0") and "resampling" not in b} == {
        f"{T}.{t}.layers.{i}.0" for t in ("pre_transformer", "post_transformer",
                                            "valley_transformer") for i in (0, 1)}
    report = plan(run.ledger, budget_bytes=444_072, bandwidth=1e9)
    assert (report.fits, report.predicted_peak_bytes) == (True, 444_072)
    assert (run.policies[lowest].predicted, run.policies[lowest].measured) == (444_072, 444_072)

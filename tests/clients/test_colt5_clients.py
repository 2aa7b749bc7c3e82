"""CoLT5-attention (lucidrains' conditional computation transformer,
tests/clients/train_colt5.py): a `CoordinateDescentRouter` picks the tokens a heavy branch
sees by a differentiable top-k (20 iterations of coordinate descent, straight-through
scores), the heavy outputs are scattered back in place (`src[batch_range, indices] =
routed_tokens`) beside a light branch (local-attention's `LocalMHA`, a narrow feedforward).

Measured (`tests/clients/harness.py run_client`, the helper hunt47e, 2026-12-06, torch
2.13.0 CPU, CoLT5-attention 0.11.2, local-attention 1.11.2; dim 16, 2 heads of 8, window 8,
4 heavy tokens, batch 2 of 16 tokens, 3 padded, `--steps 2`): `--depth 1`, the tier below:
the ledger equal to the allocator, 156,022 B; `checkpoint:blocks.0.conditional_attn`
147,734 B (and as much with `+selective:blocks.0.conditional_ff.router`),
`offload:blocks.0.conditional_ff` 144,726 B, `selective:@CoordinateDescentRouter` 155,502 B,
predicted and measured alike; the doctor finds nothing.

One defect: `show`'s "Held after last use" (and the HTML report's) listed every Python
number the routers' coordinate descent saves for backward (`(s + b) / eps`, `eps * (...)`:
8 B wrapped doubles) as idle from its forward op to its free in backward, which reads it
(Note [A saved number read by its node], ledger/model.py; `--mode ar --rotary`: 518 numbers,
492 of them the routers', the first block's q and kv routers' rows third and fifth, above
every gradient kept past its use; the tier below: 260, 2,501,008 byte-events; now none). Pinned in plain torch by
tests/integration/test_wrapped_scalars.py.

No other defect in a hunt over every mode of the script (an encoder of
`ConditionalRoutedTransformerBlock`s with a padding mask, bf16 weights, 2 key/value routes,
score-multiplied keys and queries, cosine routing, SDPA, a heavy-token count that changes
per step, gradient accumulation, the script's own reentrant and non-reentrant checkpoint
of each block; the autoregressive attention with rotary embeddings and random routing;
`ConditionalRoutedViT`; a routed image attention on a conv net's feature map; a lone
routed feedforward; local-attention's `LocalTransformer` with hyper-connections, dynamic
position bias, xpos, `generate` after each step and a CoLT5 routed attention as its
`global_attn_layer`), about 70 policies, the fake runs
(`trace --fake --device cpu`) and the doctor: every peak and policy to the byte, refusals
said alike by both sides (docs/accuracy.md, "CoLT5-attention"). The file keeps the one
tier test, for the suite's time (2.2-2.9 s of CPU on this shared machine). Skipped without CoLT5-attention.
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, run_client

if importlib.util.find_spec("colt5_attention") is None:
    pytest.skip("CoLT5-attention is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", autouse=True)
def _imported():
    import colt5_attention  # noqa: F401  (local-attention, einops: before any pass)


def test_routed_transformer_block_peak_policies_and_doctor_exact():
    """A `ConditionalRoutedTransformerBlock` encoder with a padding mask, AdamW: the
    ledger equals the allocator; a checkpoint of the routed attention with a selective
    checkpoint of the feedforward's router, and an offload of the routed feedforward, are
    predicted to the byte; `show`'s "Held after last use" lists none of the routers' saved
    Python numbers; the doctor finds nothing."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--mode", "block", "--depth", "1"]
    policies = {"checkpoint:blocks.0.conditional_attn+selective:blocks.0.conditional_ff.router":
                147_734,
                "offload:blocks.0.conditional_ff": 144_726}
    run = run_client("train_colt5.py", argv, list(policies), steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger_peak == run.allocator_peak == 156_022
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == \
        {t: (b, b) for t, b in policies.items()}
    # Note [A saved number read by its node] (ledger/model.py): the 260 Python floats the
    # routers' coordinate descent saves (8 B each), read by their nodes in backward, were
    # listed as held after last use, 2,501,008 byte-events
    assert "(wrapped number)" not in run.ledger.idle_offenders(None)["op"].tolist()
    report, outcome = diagnose_in_process(HERE / "train_colt5.py", argv, 2)
    assert (outcome.code, report.findings) == (0, [])

"""graph-transformer-pytorch (tests/clients/train_graph_transformer.py): lucidrains'
GraphTransformer, node features and pairwise edge features through layers of
`PreNorm(Attention)` (edges added to every key and value, a node mask) behind a sigmoid
`GatedResidual`, feedforwards, one `RotaryEmbedding` shared by every layer (its 256 KiB
`cached_freqs` buffer), an adjacency matrix embedded into the edges; a node head.

Measured (`tests/clients/harness.py run_client`, the helper hunt49h, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy predicted
= measured, `trace --fake --device cpu` equal to the real ledger, `compare` bitwise):
- `--ff --rotary --adj --norm-edges --task classify --validate` (2 steps): 546,276 B;
  `checkpoint:gt.layers.*.*.0` 490,564 B, `offload:gt.layers.*.*.0` 474,276 B,
  `selective:@Attention` 554,084 B, `offload:gt.norm_edges+checkpoint:gt.layers.1.*.0`
  537,124 B; the shared rotary under its second path refused by both.
- the README's defaults (2 steps): 171,580 B; `checkpoint:gt.layers.*.*.0` 136,380 B,
  `offload:gt.layers.*.*.0` 126,268 B.
- `--no-edges --amp --ff` (2 steps): 217,480 B + 1,536 B of bf16 kernel scratch =
  219,016 B; `offload:gt.layers.*.*.*` 152,984 B.
The doctor finds nothing on its loops.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("graph_transformer_pytorch") is None:
    pytest.skip("graph-transformer-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

L = "gt.layers"


def test_a_graph_transformer_is_predicted_as_measured():
    """Edges, adjacency, feedforwards and the shared rotary embedding, node classification
    under a mask: checkpoint on every layer's two blocks' inner modules, offload on all of
    them and selective on the attentions, each predicted and measured to the byte (no
    kernel scratch in float32); the doctor finds nothing on its loop."""
    argv = ["--ff", "--rotary", "--adj", "--norm-edges", "--task", "classify"]
    pols = {f"checkpoint:{L}.*.*.0": 433_144,
            f"offload:{L}.*.*.*": 409_832,
            "selective:@Attention": 496_660}
    run = run_client("train_graph_transformer.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 488_852
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_graph_transformer.py", argv, 2, None, "")

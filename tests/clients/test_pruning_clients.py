"""torch-pruning (tests/clients/train_pruning.py): a tiny ViT (patch conv, a learned position
embedding told to the pruner as an unwrapped parameter, blocks of a hand-written multi-head
attention with one qkv `nn.Linear` and an MLP) pruned before training by `MetaPruner`
(`GroupMagnitudeImportance`, `pruning_ratio=0.5`, `prune_num_heads=True`,
`head_pruning_ratio=0.5`: every pruned layer's parameters replaced by smaller ones), the
heads the pruner left written back into each block as the README's ViT example does, then
fine-tuned with AdamW; a conv net pruned by `MetaPruner`, by hand through
`DependencyGraph.get_pruning_group(...).prune()`, between steps (a new optimizer after), and
by sparse training (`GroupNormPruner` / `BNScalePruner`, `regularize` after backward).

Measured (`tests/clients/harness.py run_client`, the helper hunt48b, 2026-12-07, torch
2.13.0 CPU, an AVX2 AMD EPYC; ledger + kernel scratch = allocator, predicted = measured):
- `--mode vit --heads-ratio 0.5 --collect` (1 step, the test): 287,832 B + 2,752 B of
  scratch = 290,584 B; `checkpoint:blocks.*` 208,216 B, `offload:blocks.0+selective:
  blocks.1.attn` 227,736 B, `offload:@Attention` 220,952 B. 2 steps: 324,900 + 2,752 B;
  245,284, 264,804 and 258,020 B. The pruner, kept by the script,
  keeps the unpruned parameters too (96,680 B of parameters at the peak, 18,472 B of them
  the model's).
- `--mode vit` (heads kept, dims pruned): 370,532 + 2,752 B; `checkpoint:blocks.*`
  281,068 B, `offload:@Attention` 291,492 B, `selective:blocks.1.mlp` 382,692 B.
- `--mode cnn --prune between` (3 steps): 1,007,648 B + 74,752 B of conv scratch;
  `checkpoint:blocks.*` 791,072 B, `offload:stem` 1,000,352 B.
- `--mode cnn --prune dg --collect`: 802,784 + 99,328 B; `checkpoint:blocks.*` 727,672 B,
  `selective:@Block` 846,456 B. Without `--collect` the dependency graph's reference cycle
  keeps its forward's graph (99.1 KiB of saves of a batch of one) to a garbage collection
  whose time differs between runs: predict and measure differ by it (decisions.md).
The doctor finds nothing on the pruned ViT's loop; on `--prune dg` it warns of the
dependency graph's forward, naming torch-pruning's line that ran it.
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, run_client

if importlib.util.find_spec("torch_pruning") is None:
    pytest.skip("torch-pruning is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_pruned_vit_is_predicted_as_measured_and_the_dependency_graphs_forward_is_named():
    """The ViT pruned (heads and dims) before training, its parameters replaced: a policy on
    every block, a mix, and offload on the hand-written attentions, each predicted and
    measured to the byte (`checkpoint:blocks.*`'s peak holds no kernel scratch: pinned; the
    others hold 4,352 B of the fused kernels' on this CPU: equal, not pinned).

    The doctor on `--prune dg` (`DependencyGraph().build_dependency(model, example_inputs)`,
    which runs the model under gradients and walks its `grad_fn`s) said "... (an evaluation
    or logging forward?); run it under torch.no_grad() or torch.inference_mode()", which
    would leave the library no graph to read. It names torch-pruning's line now and says to
    let go of what holds the graph (Note [A library's own forward from the script's line],
    trace/doctor_unused.py)."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--mode", "vit", "--heads-ratio", "0.5", "--collect"]
    pols = ["checkpoint:blocks.*", "offload:blocks.0+selective:blocks.1.attn",
            "offload:@Attention"]
    run = run_client("train_pruning.py", argv, pols, steps=1)
    assert run.ledger_peak == 287_832
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy in pols:
        assert run.policies[policy].predicted == run.policies[policy].measured
    assert run.policies["checkpoint:blocks.*"].measured == 208_216
    acts = run.summary.activations
    # 79,120 B each before Note [The saves the step's backward reads] (ledger/model.py):
    # 28,936 B of each were saves of the forward torch-pruning runs before the loop (ev
    # 68 to 160), whose graph lives on through the step's backward, which never reads it
    assert (acts.by_block["blocks.0"], acts.by_block["blocks.1"]) == (50_184, 50_184)

    report, outcome = diagnose_in_process(HERE / "train_pruning.py",
                                          ["--mode", "vit", "--prune", "dg", "--collect"], 2)
    assert outcome.code == 0, outcome.reason
    [f] = report.findings
    assert (f.check, f.severity) == ("unused_graph", "warning")
    assert f.evidence["ran_by"].startswith("torch_pruning/dependency/graph.py:")
    assert f.evidence["ran_by"].endswith("(_trace)")
    assert "run it under torch.no_grad()" not in f.message
    line = (HERE / "train_pruning.py").read_text().splitlines()[f.where.line - 1]
    assert "build_dependency(model" in line

"""PyTorch Geometric models (tests/clients/train_pyg.py) under policies: message passing by
scatter / index_add / gather, `torch_geometric.utils.softmax` over each node's in-edges,
graphs batched by `Batch.from_data_list` and pooled per graph. Skipped without
torch_geometric.

torch_geometric is imported here, before any pass: its `datasets` package makes a 76 B
tensor at import (QM9's unit conversions), which in one process only the first pass
(the ledger's) would count, reading the ledger 76 B over the allocator; a fresh process per
pass (`memledger trace`) counts it in both.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("torch_geometric")


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """torch_geometric.nn imported before the first traced run (see above); in a fixture,
    not at the module's top, where every pytest worker would pay its ~2 s of CPU to collect
    the module."""
    import torch_geometric.nn  # noqa: F401


def test_gps_small_batchnorm_scratch_stays_with_its_op():
    """GPSConv (GINE message passing + multi-head attention over each graph's nodes,
    three BatchNorms a layer) on 4 random graphs a step, mean-pooled. The baseline peaks
    in the last BatchNorm's forward, whose CPU kernel frees (2 + threads)·32·4 B of its
    own scratch inside (Note [Small scratch] in trace/allocator.py). Left to `workspace`
    (scratch under 4 KiB was), those bytes were carried to every policy: on 2 threads
    `offload:convs.*` (peak in backward, where no BatchNorm forward runs) was predicted
    745,384 B, measured 744,872 B. Now the scratch is matched to its op and every policy
    is exact."""
    run = run_client("train_pyg.py", ["--case", "gps", "--steps", "3"], [
        "checkpoint:convs.*", "selective:convs.*", "offload:convs.*"])
    assert run.allocator_peak > run.ledger_peak
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


@pytest.mark.parametrize("case, policies", [
    # full batch: GAT's per-edge attention and softmax over in-edges, attention dropout
    ("gat", ["checkpoint:convs.*", "checkpoint:convs.0+offload:convs.[1-2]"]),
    # mini-batches of graphs: TopKPooling keeps 70 % of each graph's nodes (data-dependent
    # shapes from topk and the edge filter), re-run inside a checkpoint
    ("topk_graph", ["checkpoint:convs.*+checkpoint:pools.*", "offload:pools.*"]),
])
def test_message_passing_predicted_to_the_byte(case, policies):
    """Found exact on the first try (docs/accuracy.md, "A twenty-first round"); this
    keeps them so."""
    run = run_client("train_pyg.py", ["--case", case, "--steps", "3"], policies)
    # TopKPooling's peak is in a kernel that takes scratch (measured op by op)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


def test_hetero_conv_over_node_types():
    """`HeteroConv` of SAGEConv and GATConv per edge type on a paper/author graph, papers
    classified: the last layer's author branch reaches no loss (a dead branch that saved
    the script's edge index). `hetero` builds the layers lazily (`in_channels=-1`): the
    trace failed at the first forward ("Attempted to use an uninitialized parameter"),
    then `checkpoint:convs.*` was predicted 402,820 B (Note [Lazy parameters] in
    trace/collector.py). Both, with their sizes given: `checkpoint:convs.*` 362,756 B
    (Note [A dead branch's saved inputs], replay/engine.py) and 354,948 B (Note [Which
    save an unpack reads], replay/prepared.py), `offload:convs.*` 300,164 B (Note [When a
    saved storage is released], trace/collector.py); measured 328,068 B and 302,212 B.
    The lazy model has them all (`hetero_eager` reads the same, without the first)."""
    run = run_client("train_pyg.py", ["--case", "hetero", "--steps", "3"], [
        "checkpoint:convs.*", "selective:convs.*", "offload:convs.*"])
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


def test_doctor_reads_a_dead_branch_as_unused_not_cut():
    """Note [A cut the graph goes around] (trace/doctor_probe.py): the lazy hetero model's
    last GATConv (author side) reaches no loss. PyG's softmax detaches its logits' maximum
    and subtracts it from the logits themselves, and the lazy layer sets its weight through
    `.data` before using it; the doctor blamed both ("cut by `.detach()`", "cut by
    `.data`": errors, which stop `compare`). Now one warning: their modules ran and the
    output never reached the loss."""
    from pathlib import Path

    from memledger.doctor.run import diagnose_in_process

    script = Path(__file__).resolve().parent / "train_pyg.py"
    report, outcome = diagnose_in_process(script, ["--case", "hetero", "--steps", "4"], 3)
    assert outcome.code == 0, outcome.reason
    found = [(f.check, f.severity) for f in report.findings]
    assert found == [("unused_parameter", "warning")], report.findings
    assert "convs.2.convs.<paper___rev_writes___author>.att_src" in report.findings[0].message

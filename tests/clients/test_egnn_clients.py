"""egnn-pytorch (tests/clients/train_egnn.py): lucidrains' E(n)-equivariant graph networks on
random point clouds, trained as its README writes them (a plain Adam loop denoising the
coordinates, plus a loss on the features): `EGNN` layers with a mask, `norm_coors`,
`coor_weights_clamp_value`; `EGNN_Network` with token, position, edge and adjacency-degree
embeddings, global linear attention and `num_nearest_neighbors` (`topk`, gathers);
`only_sparse_neighbors` over an adjacency matrix (`.item()` in every layer); the
torch_geometric `EGNN_Sparse_Network`; gradient accumulation, the script's own
`torch.utils.checkpoint`, bf16 autocast.

Measured (`tests/clients/harness.py run_client`, the helper hunt45d, 2026-12-06, torch
2.13.0 CPU, one thread; every one equal in predict and measure, and the ledger equal to the
allocator):
- `--mode layers` (2 EGNN layers, dim 16, 2 clouds of 16 nodes, masked): 1,704,536 B;
  `checkpoint:blocks.*` 1,027,724 B, `offload:blocks.*` 615,120 B,
  `checkpoint:blocks.0+offload:blocks.1` 1,027,724 B; `selective:blocks.*` refused by both
  alike, naming `addmm` (Note [The kept op a re-run finds changed], replay/stateful.py).
  `--accumulate 2`: 1,747,716 B, `checkpoint:blocks.*` 1,066,848 B, `offload:blocks.1`
  1,341,952 B. `--ckpt`: 1,027,724 B (926,388 B at one step), policies on the blocks
  refused alike (Note [An alternative that is refused too], replay/script_checkpoint.py);
  `--ckpt reentrant`: the doctor's one true warning, `CheckpointFunction`'s generator
  states kept by `loss` past the step (Note [The Function that keeps them]).
- `--mode network --nearest 4`: 765,840 B; `checkpoint:@EGNN` 597,000 B,
  `offload:layers.0.0+checkpoint:layers.1.1` 728,436 B; `checkpoint:layers.*` (the
  ModuleList pairs of attention and EGNN layer) refused alike as containers.
- `--mode sparse`: 717,208 B; `checkpoint:@EGNN` 506,124 B, `offload:@EGNN` 377,872 B.
- `--mode pyg`: 1,042,200 B; `checkpoint:mpnn_layers.*` 839,440 B,
  `selective:mpnn_layers.*` 903,092 B, `offload:mpnn_layers.*` 747,292 B.
- `--mode network --bf16 --coor-changes --nearest 4`: 608,708 B in the ledger, 611,780 B
  with its 3,072 B of kernel scratch, equal to the allocator; `checkpoint:@EGNN`
  531,346 B, `offload:@EGNN` 472,836 B.
The same with two intra-op threads, but for bf16's kernel scratch (hence `one_thread`).

`egnn_pytorch` imports torch_geometric (its `EGNN_Sparse` module): ~2.7 s of CPU once per
pytest worker, paid in the module fixture (the pyg tier's worker pays it already), and
torch_geometric's `datasets` makes a 76 B tensor at import that only the first pass of one
process would see (tests/clients/test_pyg_clients.py).
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, on_this_cpu, run_client

if importlib.util.find_spec("egnn_pytorch") is None:
    pytest.skip("egnn-pytorch is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # bf16 scratch

SCRIPT = "train_egnn.py"


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """egnn_pytorch (and torch_geometric behind it) imported before the first pass (see
    above); in a fixture, not at the module's top, which every worker imports to collect."""
    import egnn_pytorch  # noqa: F401


def test_egnn_layers_with_a_mask_and_clamped_coordinate_weights():
    """The README's `EGNN` layers, masked, `norm_coors`, `coor_weights_clamp_value`: every
    policy exact. selective keeps the `addmm` of each layer's `coors_mlp`, whose output
    (a view) the layer then fills and clamps in place (`coor_weights.masked_fill_(~mask,
    0.)`, `clamp_`): refused by both in one line, which now names `addmm`; before, "keeps
    an op's output ... leave that op out of save=" named none of the default list's
    kinds."""
    pols = {"checkpoint:blocks.*": 1_027_724, "offload:blocks.*": 615_120,
            "checkpoint:blocks.0+offload:blocks.1": 1_027_724}
    run = run_client(SCRIPT, ["--mode", "layers"], [*pols, "selective:blocks.*"])
    assert run.ledger_peak == run.allocator_peak == 1_704_536
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    sel = run.policies["selective:blocks.*"]
    assert sel.predicted is None and sel.measured is None
    assert sel.predict_refusal == sel.measure_refusal
    assert sel.predict_refusal.startswith(
        "memledger: selective:blocks.* keeps addmm's output in blocks.1 that is changed in "
        "place afterwards")
    assert "leave addmm out of save=" in sel.predict_refusal


def test_egnn_network_nearest_neighbours_and_global_attention():
    """`EGNN_Network`: embeddings, edges, adjacency degrees, global linear attention in
    `layers.0.0`, `num_nearest_neighbors=4`. Its layers are ModuleList pairs
    `[attention or None, EGNN]`, so `layers.*` matches containers, refused alike."""
    pols = {"checkpoint:@EGNN": 597_000, "offload:layers.0.0+checkpoint:layers.1.1": 728_436}
    run = run_client(SCRIPT, ["--mode", "network", "--nearest", "4"],
                     [*pols, "checkpoint:layers.*"])
    assert run.ledger_peak == run.allocator_peak == 765_840
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    box = run.policies["checkpoint:layers.*"]
    assert box.measured is None and box.predict_refusal == box.measure_refusal
    assert "a ModuleList: a container with no forward of its own" in box.predict_refusal


def test_sparse_neighbours_read_off_the_adjacency_in_every_layer():
    """`only_sparse_neighbors=True`: each layer reads its neighbour count off the
    adjacency matrix with `.item()` (again in a checkpoint's re-run) and makes its
    `torch.eye` mask in forward."""
    pols = {"checkpoint:@EGNN": 506_124, "offload:@EGNN": 377_872}
    run = run_client(SCRIPT, ["--mode", "sparse"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 717_208
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_egnn_sparse_network_over_torch_geometric():
    """`EGNN_Sparse_Network`: torch_geometric message passing over an `edge_index` (its
    own `propagate`), mean aggregation, a per-graph LayerNorm."""
    pols = {"checkpoint:mpnn_layers.*": 839_440, "selective:mpnn_layers.*": 903_092,
            "offload:mpnn_layers.*": 747_292}
    run = run_client(SCRIPT, ["--mode", "pyg"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 1_042_200
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_accumulation_and_the_scripts_own_checkpoint():
    """Two micro-batches per step; then the script's own `torch.utils.checkpoint` around
    each layer, where a policy on the layers is refused alike, and the checkpoint's
    refusal no longer tells to offload the layers (refused too)."""
    pols = {"checkpoint:blocks.*": 1_066_848, "offload:blocks.1": 1_341_952}
    run = run_client(SCRIPT, ["--mode", "layers", "--accumulate", "2"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 1_747_716
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    run = run_client(SCRIPT, ["--mode", "layers", "--ckpt"],
                     ["offload:blocks.*", "checkpoint:blocks.*"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 926_388
    off, ck = run.policies["offload:blocks.*"], run.policies["checkpoint:blocks.*"]
    assert off.measured is None and off.predict_refusal == off.measure_refusal
    assert "runs inside the script's own checkpoint of blocks.0" in off.predict_refusal
    # Note [An alternative that is refused too]: it told to offload the block instead
    assert ck.measured is None and ck.predict_refusal == ck.measure_refusal
    assert ck.predict_refusal.endswith("or offload a module around it")


def test_bf16_autocast_with_every_layers_coordinates():
    """bf16 autocast, the loss on every layer's coordinates (`return_coor_changes`):
    3,072 B of the bf16 matmuls' kernel scratch over the ledger, as the allocator reads
    (2,048 B on an AVX2 CPU: Note [Numbers that depend on the CPU], tests/clients/harness.py).
    Run first in its pytest worker, it read the ledger 76 B over the allocator and every
    policy 76 B over measure: egnn-pytorch makes a 76 B tensor at import, which only the
    first pass in a process saw (Note [Tensors made at import], tests/clients/harness.py)."""
    argv = ["--mode", "network", "--bf16", "--coor-changes", "--nearest", "4"]
    pols = {"checkpoint:@EGNN": on_this_cpu(bf16=531_346, avx2=527_282, amd_bf16=None),
            "offload:@EGNN": on_this_cpu(bf16=472_836, avx2=431_564, amd_bf16=None)}
    run = run_client(SCRIPT, argv, list(pols))
    assert run.ledger_peak == 608_708
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, bf16=611_780, avx2=610_756, amd_bf16=613_828)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert peak is None or run.policies[policy].measured == peak


@pytest.mark.parametrize("argv", [["--mode", "network", "--dropout", "0.1"],
                                  ["--mode", "layers", "--accumulate", "2", "--ckpt"]])
def test_the_doctor_finds_nothing_on_egnn_loops(argv):
    assert_one_doctor_error(SCRIPT, argv, 2, None, "")


def test_the_doctor_names_the_reentrant_checkpoint_that_keeps_generator_states():
    """`--ckpt reentrant`: torch's reentrant checkpoint keeps each layer call's CPU
    generator state on its ctx (2 x 5,056 B), which `loss`, kept past the step, holds to
    the next forward. A true warning, which said "a custom autograd Function" in a script
    that defines none; it names `CheckpointFunction` now (Note [The Function that keeps
    them], trace/doctor_retention.py)."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / SCRIPT, ["--mode", "layers", "--ckpt",
                                                          "reentrant"], 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence["ctx_bytes_per_step"] == [10_112, 10_112]
    assert "of tensors the autograd Function `CheckpointFunction` keeps on ctx" in f.message

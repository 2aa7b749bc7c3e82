"""se3-transformer-pytorch and triangle-multiplicative-module (tests/clients/train_se3.py):
lucidrains' SE3Transformer trained as its README's denoiser (a point cloud's noised
coordinates moved by the type-1 output), and an AlphaFold2-style pair representation
refined by `TriangleMultiplicativeModule`s (outgoing then ingoing, residual) under a
distogram head.

Measured (`tests/clients/harness.py run_client`, the helper hunt51b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy
predicted = measured; the library's 35 MiB of float64 tables, loaded at import, are
outside these numbers in-process):
- `--model pair --mask` (1 step, the test): 229,832 B; `checkpoint:blocks.*.*` 109,992 B,
  `offload:blocks.0.*+selective:blocks.1.*` 124,456 B, `selective:@TriangleMultiplicative
  Module` 200,104 B. `--mask --hidden 16 --accum 2 --validate` (2 steps): 451,872 B;
  212,440 B, 251,480 B, 376,280 B, `checkpoint:blocks.*.*.left_gate` 472,096 B.
- `--model se3` (2 steps): 16,868,188 B + 12 B of kernel scratch = 16,868,200 B;
  `checkpoint:se3.net.blocks.*.*` 14,989,152 B, `offload:se3.net.blocks.*.0` 13,333,432 B,
  `selective:@AttentionSE3` 14,990,688 B, `checkpoint:se3` 16,878,348 B,
  `checkpoint:se3.conv_in` 16,473,096 B, `selective:@PairwiseConv` 15,306,608 B,
  `checkpoint:se3.conv_out.kernel_unary.(1,1)` 16,690,536 B (`--diff-coors`).
- `--model se3 --egnn` (2 steps, the test): 1,386,388 B; `selective:se3.conv_in.
  kernel_unary.(0,1)` 1,290,644 B, `offload:se3.conv_in.kernel_unary.*` 1,042,584 B.
  Before Note [Versions read without holding the tensor] (memledger/trace/
  outside_state.py) the ledger read 1,387,924 B, 1,536 B over: the trace held conv_in's
  degree-1 output, which the first EGNN layer replaces in the dict it is handed, through
  the second layer. Before Note [Paths a ModuleDict names] (replay/policies.py) a
  selector naming `kernel_unary.(0,1)` was refused by both sides as "not a module-path
  glob". `checkpoint:se3` (the test; the helper fix52b): 1,395,800 B, predicted 1,394,264
  B before Note [Held by a container the region made] (memledger/replay/engine.py): the
  first EGNN layer's degree-1 output, kept by the next layer's `htypes` in the re-run,
  was let go as the re-run made it.
The doctor finds nothing on the pair loop; on `--model se3` it warns, rightly, that the
type-0 output path's 22 parameters get no gradient (the loss reads the type-1 output).
"""

import importlib.util
import os
import sys

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

for _lib in ("se3_transformer_pytorch", "triangle_multiplicative_module"):
    if importlib.util.find_spec(_lib) is None:
        pytest.skip(f"{_lib} is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def basis_on_disk(tmp_path_factory):
    """The library's disk cache of its Q_J matrices (`CACHE_PATH`, read once, when
    `se3_transformer_pytorch.basis` is first imported) in a folder of the test's own,
    filled before the first pass: every pass loads them, whatever $HOME holds, and nothing
    is written under $HOME (as test_equiformer_clients.py's fixture of the same name)."""
    assert "se3_transformer_pytorch.basis" not in sys.modules, \
        "se3_transformer_pytorch was imported before this tier set its CACHE_PATH"
    folder = tmp_path_factory.mktemp("equivariant_attention_se3")
    env = pytest.MonkeyPatch()
    env.setenv("CACHE_PATH", str(folder))
    env.delenv("CLEAR_CACHE", raising=False)
    try:
        import torch
        from se3_transformer_pytorch import basis

        basis.get_basis(torch.randn(1, 2, 1, 3), 1)   # num_degrees=2: degrees 0 and 1
        basis.basis_transformation_Q_J.cache_clear()
    finally:
        env.undo()
    assert basis.CACHE_PATH == str(folder) and os.listdir(folder)
    return folder


def test_a_pair_stack_and_an_se3_egnn_are_predicted_as_measured(basis_on_disk):
    """The pair representation with a padding mask: a checkpoint on every triangle module,
    offload on the first block's with selective on the second's, selective on each; the
    SE3Transformer with its EGNN trunk: the ledger equal to the allocator (1,536 B over
    before: the trace held a tensor the layer replaced in the dict it was handed), a
    policy on one pairwise convolution of a `ModuleDict` keyed `(0,1)`, and a checkpoint
    of the whole transformer (1,536 B under before: a side output the re-run's dict keeps
    let go as it was made). The doctor finds nothing on the pair loop."""
    argv = ["--model", "pair", "--mask"]
    pols = {"checkpoint:blocks.*.*": 109_992,
            "offload:blocks.0.*+selective:blocks.1.*": 124_456,
            "selective:@TriangleMultiplicativeModule": 200_104}
    run = run_client("train_se3.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 229_832
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak

    egnn = {"selective:se3.conv_in.kernel_unary.(0,1)": 1_290_644, "checkpoint:se3": 1_395_800}
    run = run_client("train_se3.py", ["--model", "se3", "--egnn"], list(egnn), steps=2)
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 1_386_388
    for policy, peak in egnn.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak

    assert_one_doctor_error("train_se3.py", argv, 2, None, "")

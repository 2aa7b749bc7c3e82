"""lambda-networks and bottleneck-transformer-pytorch (tests/clients/train_lambda_botnet.py):
small image classifiers with BatchNorm, a conv stem, residual blocks of lambda-networks'
`LambdaLayer` (BatchNorm on queries and values, a content lambda from softmaxed keys, a
position lambda from a relative position embedding indexed by a plain int64 tensor made at
init, or `--local R`: a `Conv3d` over the values), and bottleneck-transformer-pytorch's
`BottleStack` (BottleBlocks: 1x1 convs, BatchNorm, multi-head self-attention with absolute
or relative position logits, one `nn.ReLU` shared by every block) in place of a ResNet's last
stage; AdamW or SGD, accumulation, bf16 autocast, an eval-mode validation each step.

Measured (`tests/clients/harness.py run_client`, the helper hunt48j, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; every policy predicted = measured, the
ledger with its kernel scratch = the allocator), 2 steps unless said:
- `--mode lambda`: 558,232 B; `checkpoint:blocks.*` 454,748, `selective:blocks.*` 504,156,
  `offload:blocks.*` 365,556, `checkpoint:@LambdaLayer` 454,804,
  `offload:blocks.0+selective:blocks.1.lam` 449,684, `checkpoint:blocks` 577,268 B.
- `--mode lambda --local 3 --dim-u 2`: ledger 269,984 B + 52,060 B of the Conv3d's kernel
  scratch = 322,044 B allocator (two threads: + 78,972 = 348,956 B); `checkpoint:blocks.*`
  241,596, `selective:@LambdaLayer` 315,644, `offload:blocks.*.lam` 190,204 B.
- `--mode botnet`: 520,284 B; `checkpoint:stack.net.*` 537,776, `selective:` 655,196,
  `offload:` 490,396, `checkpoint:@Attention` 546,256, `offload:@Attention` 502,876 B; the
  shared ReLU: `checkpoint:stack.net.0.shortcut.2` 542,684 B, `offload:@ReLU` 520,284 B,
  `selective:stack.net.1.activation` refused alike (a second path of the shared module).
- `--mode botnet --rel-pos --no-downsample`: 910,372 B; `checkpoint:stack.net.*` 702,672 B.
The doctor finds nothing (`--validate`, `--accum 2`, `--amp --sgd`); without the script's
`model.train()` after validation it warns of the 8 BatchNorm2d run in eval mode.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("lambda_networks") is None or \
        importlib.util.find_spec("bottleneck_transformer_pytorch") is None:
    pytest.skip("lambda-networks or bottleneck-transformer-pytorch is not installed",
                allow_module_level=True)
pytestmark = pytest.mark.clients


def test_lambda_blocks_then_a_bottle_stack_are_predicted_as_measured():
    """Two LambdaBlocks with local contexts (a Conv3d position lambda) before a BottleStack
    with relative position logits, one step: a mix (checkpoint on the lambda blocks, offload
    on the first BottleBlock), selective on the LambdaLayers and offload on the attentions,
    each predicted and measured to the byte; ledger (with its kernel scratch) = allocator.
    The ReLU the library shares among the BottleBlocks saves in both; its saves count by the
    block that called it (block 0 downsamples, so saves more). The doctor finds nothing."""
    argv = ["--mode", "hybrid", "--local", "3", "--rel-pos"]
    pols = {"checkpoint:blocks.*+offload:stack.net.0": 629_056,
            "selective:@LambdaLayer": 781_440,
            "offload:@Attention": 755_136}
    run = run_client("train_lambda_botnet.py", argv, list(pols), steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=779_712)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    acts = run.summary.activations.by_block
    assert (acts["blocks.0"], acts["blocks.1"]) == (70_048, 70_048)
    assert (acts["stack.net.0"], acts["stack.net.1"]) == (217_480, 35_080)
    assert_one_doctor_error("train_lambda_botnet.py", argv, 2, None, "")

"""g-mlp-pytorch (tests/clients/train_gmlp.py): lucidrains' gMLP, blocks of a spatial gating
unit (half the channels normed and mixed along the sequence by a learned per-head matrix,
times the other half) behind `Residual(PreNorm(PreShiftTokens(gMLPBlock)))`, the survivors
of stochastic depth run through an `nn.Sequential` made in every forward; a causal LM
through the library's `AutoregressiveWrapper` (Adam, clipping) and `gMLPVision` (AdamW).

Measured (`tests/clients/harness.py run_client`, the helper hunt47g, 2026-12-06, torch
2.13.0 CPU; ledger = allocator with its kernel scratch, every policy predicted = measured):
- `--mode lm --attn 8 --circulant --heads 2 --shift 1` (1 step): 233,400 B;
  `checkpoint:net.layers.*` 154,736 B, `offload:net.layers.0+selective:net.layers.1.
  fn.fn.fn.sgu` 152,888 B, `offload:@Attention` 208,312 B. With `--act tanh` (the test):
  233,400 B; 161,656, 152,888 and 208,312 B.
- `--mode lm --attn 8` (2 steps): 271,540 B + 384 B of kernel scratch = 271,924 B
  allocator; `checkpoint:net.layers.*` 207,212 B, `selective:` 258,996 B, `offload:`
  164,524 B, `checkpoint:net` 277,060 B. `--depth 3`: 383,856 + 384 B; plan's picks
  (`offload:net.layers.1` 303,856 B, `offload:net.layers.[0-1]` 223,472 B) as measured.
- `--survival 0.5 --depth 3 --circulant --shift 1 --heads 2 --act tanh` (2 steps):
  158,764 B; `offload:@gMLPBlock` 116,972 B, `selective:@SpatialGatingUnit` 155,436 B;
  `net.layers.1`, dropped in both steps, refused alike ("never ran in the steps").
- `--mode vision --attn 8 --survival 0.5 --depth 3`: 267,800 B + 684 B; `checkpoint:
  layers.*` 205,308 B, `offload:layers.*` 162,876 B, `selective:@Attention` 294,980 B.
The doctor finds nothing on the LM loop; with `--survival 0.5` it warns (rightly) that the
dropped layers' parameters got no gradient in the steps they were dropped.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("g_mlp_pytorch") is None:
    pytest.skip("g-mlp-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

L = "net.layers"


def test_a_gmlp_lm_is_predicted_as_measured_and_its_shared_gate_saves_by_block():
    """The causal LM with the tiny attention added to the gate, a circulant spatial weight
    over two heads, a token shift, and one `nn.Tanh()` as every block's gate activation (the
    library hands the same `act` module to each): a policy on every block, a mix (offload on
    one block, selective on the other's gating unit) and offload on the tiny attentions,
    each predicted and measured to the byte; the doctor finds nothing on its loop.

    `show`'s per-block table of saved activations read `net.layers.0` 95,752 B and
    `net.layers.1` 79,368 B: the shared Tanh is named by its first path, and layer 1's
    8,192 B of tanh output (4 x 16 x 32 floats) counted in layer 0. Each block saves
    87,560 B now (Note [A shared module's saves, by the block that called it],
    ledger/summary.py); the per-module table names the one Tanh once, both blocks' saves."""
    argv = ["--mode", "lm", "--attn", "8", "--circulant", "--heads", "2", "--shift", "1",
            "--act", "tanh"]
    pols = {f"checkpoint:{L}.*": 161_656,
            f"offload:{L}.0+selective:{L}.1.fn.fn.fn.sgu": 152_888,
            "offload:@Attention": 208_312}
    run = run_client("train_gmlp.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 233_400
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    acts = run.summary.activations
    assert (acts.by_block[f"{L}.0"], acts.by_block[f"{L}.1"]) == (87_560, 87_560)
    assert acts.by_module[f"{L}.0.fn.fn.fn.sgu.act"] == 2 * 4 * 16 * 32 * 4 == 16_384
    assert_one_doctor_error("train_gmlp.py", argv, 2, None, "")

"""muon-optimizer (tests/clients/train_muon_sophia.py --opt muon): Keller Jordan's Muon as
its README builds it, `SingleDeviceMuonWithAuxAdam` with two groups: the blocks' matrices
(`use_muon=True`: a momentum buffer each; the step orthogonalises the Nesterov update by
five Newton-Schulz iterations in bf16) and everything else (`use_muon=False`: the class's
own AdamW, exp_avg and exp_avg_sq, its step a Python int), on a tiny nanoGPT with its
`lm_head` tied to the token embedding.

Measured (`tests/clients/harness.py run_client`, the helper hunt53b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, no kernel scratch,
every policy predicted = measured):
- `--opt muon` (2 steps, the test): 586,920 B at step 2's backward; `checkpoint:blocks.*`
  510,056, `offload:blocks.*` 437,928, `selective:@Block` 554,408 B,
  `checkpoint:blocks.0+offload:blocks.1` 510,056, `offload:@MLP` 504,872 B.
- `--opt muon-dist` (`MuonWithAuxAdam` in a gloo world of 1: its step all-gathers each
  matrix over the group): the same bytes. `--opt muon-split` (`SingleDeviceMuon` beside
  torch's AdamW, two optimizers): 587,000 B, and each policy 80 B over `--opt muon`'s, as
  measured: torch's AdamW keeps its step as a 4 B tensor for each of its 20 parameters.
- `--opt muon --dim 64 --batch 2`: the peak in the step, inside a Newton-Schulz iteration
  (`a * X + B @ X`): 1,479,188 B, every policy 1,479,188 B as measured.
- `--amp`, `--accum 2 --clip 1.0 --validate --untied`: docs/accuracy.md.
The doctor finds nothing on these loops; `compare` judges `checkpoint:blocks.*` and
`offload:blocks.*` OK with gradients bitwise.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("muon") is None:
    pytest.skip("muon-optimizer is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # bf16 matmuls

# the blocks' matrices (Muon: one fp32 momentum each): c_attn 96 x 32, attn.c_proj 32 x 32,
# c_fc 128 x 32, mlp.c_proj 32 x 128, two blocks
MUON_ELEMENTS = 2 * (96 * 32 + 32 * 32 + 128 * 32 + 32 * 128)
# the rest (AdamW: two fp32 moments each): the blocks' LayerNorms and biases (2 x 416), the
# tied lm_head / wte 64 x 32, wpe 16 x 32, ln_f 2 x 32
ADAM_ELEMENTS = 2 * (4 * 32 + 96 + 32 + 128 + 32) + 64 * 32 + 16 * 32 + 2 * 32


def test_muon_momenta_and_its_aux_adamw_moments_are_the_state_and_policies_as_measured():
    """The Newton-Schulz update's bf16 temporaries come and go inside the step (the peak is
    the backward's here); the state is Muon's momenta and the aux AdamW's two moments,
    4 x 24,576 + 8 x 3,456 = 125,952 B, at the peak and at the end."""
    argv = ["--opt", "muon"]
    pols = ["checkpoint:blocks.*", "offload:blocks.*", "selective:@Block"]
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_muon_sophia.py", argv, pols)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=586_920)
    state = 4 * MUON_ELEMENTS + 2 * 4 * ADAM_ELEMENTS
    assert run.summary.at_peak["optimizer_state"] == run.summary.resident["optimizer_state"] \
        == state == 125_952
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    for policy, (predicted, measured) in got.items():
        assert predicted == measured, policy
    assert_pinned(got["checkpoint:blocks.*"][0], avx2=510_056)
    assert_pinned(got["offload:blocks.*"][0], avx2=437_928)
    assert_pinned(got["selective:@Block"][0], avx2=554_408)
    with contextlib.redirect_stdout(io.StringIO()):
        assert_one_doctor_error("train_muon_sophia.py", argv, 2, None, "")

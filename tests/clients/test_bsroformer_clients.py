"""BS-RoFormer (tests/clients/train_bsroformer.py): lucidrains' band-split RoPE transformer
for music source separation, built from a config and trained on random stereo audio with
the loss its forward returns (`model(mix, target=stems)`: STFT, band split, axial
time/frequency transformers with rotary positions and hyper-connection residual streams,
mask estimation, iSTFT, L1 plus a multi-resolution STFT loss), AdamW and clipping outside.

Measured (`tests/clients/harness.py run_client`, steps 1, the helper hunt46e, 2026-12-06,
torch 2.13.0 CPU, BS-RoFormer 1.2.4) on `--length 256 --batch 1` (dim 16, depth 1, 4
streams): ledger 1,735,556 B + 1,944 B of kernel scratch = allocator 1,737,500 B;
`checkpoint:layers.*.*` 1,215,572 B, `offload:layers.*.*` 801,404 B, predicted and measured.
The default (`--length 512 --batch 2`): ledger 5,054,300 B + 9,008 B of scratch = allocator
5,063,308 B; `checkpoint:layers.*.*` 2,965,204 B, `selective:layers.*.*` 3,421,924 B,
`offload:layers.*.*` 1,400,848 B, `selective:@Attention` 4,804,556 B, both sides;
`--model mel` (MelBandRoformer: a linear-attention transformer too, dropout 0.1):
12,952,172 B + 9,008 B = 12,961,180 B, `checkpoint:layers.*.*` 5,647,236 B, both sides.
`compare --steps 2` passes `checkpoint:layers.*.*` and `selective:layers.*.*` with the
gradients bitwise equal.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("bs_roformer") is None:
    pytest.skip("BS-RoFormer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

TINY = ["--length", "256", "--batch", "1"]


@pytest.fixture(scope="module", autouse=True)
def _imported():
    import bs_roformer  # noqa: F401  (librosa, einx, PoPE: before any pass)


def test_a_rotary_cache_filled_by_the_first_call_is_checkpointed_exactly():
    """rotary-embedding-torch's `RotaryEmbedding` copies its frequencies into its
    `cached_freqs` buffer on its first call and slices the buffer on later ones. predict
    refused every policy that re-runs an attention ("`checkpoint:layers.*.*` would re-run
    layers.0.1, whose forward writes layers.0.1.layers.0.0.branch.rotary_embed.cached_freqs
    in place ...") while measure ran it (1,215,572 B here) with the gradients bitwise
    equal: the re-run reads back what the forward computed. A state the forward fills
    without reading it first is no longer refused (Note [A state the region reads before
    it writes], trace/collector.py). The doctor finds nothing on the loop."""
    run = run_client("train_bsroformer.py", TINY,
                     ["checkpoint:layers.*.*", "offload:layers.*.*"], steps=1)
    assert (run.ledger_peak, run.ledger.peak_with_scratch(), run.allocator_peak) == \
        (1_735_556, 1_737_500, 1_737_500)
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        "checkpoint:layers.*.*": (1_215_572, 1_215_572),
        "offload:layers.*.*": (801_404, 801_404)}
    assert_one_doctor_error("train_bsroformer.py", TINY, 1, None, "")

"""sinkhorn-transformer (tests/clients/train_sinkhorn.py): a `SinkhornTransformerLM` trained
through its `AutoregressiveWrapper` as the enwik8 example trains it (sorted-bucket causal
attention beside local-attention heads, chunked feed-forward, a factorized embedding,
Adam, clipping), and the README's encoder/decoder (`receives_context=True`).

Measured (`tests/clients/harness.py run_client`, the helper hunt47b, 2026-12-06, torch
2.13.0 CPU, tiny shapes: dim 16, sequence 16, buckets of 4, 16 tokens; ledger = allocator
everywhere, every policy predicted = measured or refused by both in one line; L =
net.net.sinkhorn_transformer.fn.layers.layers, E = sinkhorn_transformer.layers.layers):
- `--mode plain` (2 steps): 196,068 B; `checkpoint:L.*.*` 165,084 B, `selective:L.*.*`
  194,460 B, `offload:L.*.*` 130,132 B, `checkpoint:L.0.0+offload:L.1.*+selective:L.0.1`
  163,828 B. With `--pkm --weight-tie --accumulate 2 --validate-every 1 --len 13`:
  3,529,910 B; `checkpoint:L.*.*` 3,486,816 B, `offload:L.*.*` 3,060,118 B.
- `--mode lm --dropout 0.1` (the enwik8 model, reversible): 201,388 B; every policy on
  the reversible blocks 201,388 B (they run under no_grad in forward),
  `selective:net.net.sinkhorn_transformer` 207,468 B.
- `--mode sortcut --dropout 0.1` (random truncation, masks): 192,020 B;
  `checkpoint:net.net.sinkhorn_transformer.layers.layers.*.*` 174,726 B,
  `selective:@AttentionSortNet` 200,596 B. `--mode sinkhorn` (Gumbel-Sinkhorn):
  197,372 B; `offload:` its layers 134,764 B.
- `--mode encdec` (2 steps): 496,176 B; `checkpoint:E.*.*` 471,360 B, `offload:E.*.*`
  447,024 B, `selective:E.*.*` 503,232 B. `--reversible dec`: below.
- At dim 64, sequence 128, buckets of 16, batch 4: `plain --len 100 --dropout 0.1`
  8,813,100 B + 15,516 B of kernel scratch = 8,828,616 B allocator, four policies exact;
  `sortcut`, `sinkhorn`, `encdec` exact under three each.
- Fake runs agree with the real ones on `plain`, `lm`, `sinkhorn` and `encdec`; not on
  `sortcut`, whose truncation lengths are a draw of the fake run's own (docs/fake.md).
  `compare` on `sinkhorn --dropout 0.1`: gradients bitwise under three policies. The doctor
  finds nothing on `plain`, `sortcut`, `sinkhorn` and `encdec`, and warns, rightly, of the
  graph `loss` keeps through the reversible Function's ctx on `lm` and `encdec
  --reversible dec` (the ledger frees those bytes at `loss`'s rebinding).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("sinkhorn_transformer") is None:
    pytest.skip("sinkhorn-transformer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

TINY = ["--dim", "16", "--seq", "16", "--bucket", "4", "--tokens", "16"]
L = "net.net.sinkhorn_transformer.fn.layers.layers"
E = "sinkhorn_transformer.layers.layers"


def test_the_enwik8_loop_with_a_padded_batch():
    """The example's loop on rows shorter than whole buckets (`Autopadder` pads them on
    the left and masks the padding): ledger = allocator, two policies predicted =
    measured, the doctor clean."""
    argv = ["--mode", "plain", "--len", "13", *TINY]
    pick = f"offload:{L}.*.0+checkpoint:{L}.*.1"
    run = run_client("train_sinkhorn.py", argv, [f"selective:{L}.*.*", pick], steps=1)
    assert run.ledger_peak == run.allocator_peak == 139_768
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {f"selective:{L}.*.*": (138_016, 138_016), pick: (122_668, 122_668)}
    assert_one_doctor_error("train_sinkhorn.py", argv, 2, None, "")


def test_a_read_back_copy_is_let_go_of_when_the_saves_still_held_are_read():
    """The README's encoder/decoder with a reversible decoder (one layer each side): the
    decoder's reversible backward runs `autograd.backward(..., retain_graph=True)` into
    the encoder's output, so the encoder's graph lives to the next step. The encoder's
    attention saves its bucket-reordering matrix R three times, and two of those nodes
    die in forward (the values' einsum, whose output the library overwrites, and
    `R.abs()` under an `argmax`). measure's offloader counted three saves, read one back,
    and held the read-back R (4 x 4 x 2 fp32, 128 B) until the kept graph went, over the
    optimizer step: `offload:E.*.*` predicted 199,974 B, measured 200,102 B (at depth 2,
    367,834 B against 368,090 B). Now a record autograd lets go of tells its copy (Note
    [A save let go of unread, for the offloader], measure/offload.py; pinned in plain
    torch by tests/clients/test_handback.py)."""
    off = f"offload:{E}.*.*"
    run = run_client("train_sinkhorn.py", ["--mode", "encdec", "--reversible", "dec",
                                           "--depth", "1", *TINY], [off], steps=1)
    assert run.ledger_peak == 224_538    # at Adam's step, with 12 B of kernel scratch
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 224_550
    assert (run.policies[off].predicted, run.policies[off].measured) == (199_974, 199_974)

"""linear-attention-transformer (tests/clients/train_linattn.py): a causal
`LinearAttentionTransformerLM` (Q(KᵀV) attention with a blindspot beside local (QKᵀ)V
heads from local-attention, chunked GLU feed-forward, token shifting, axial positions,
`attend_axially`, a factorized embedding) trained through its `AutoregressiveWrapper` as
the enwik8 example trains it (Adam, clipping, `--accumulate` micro-batches, a no_grad
validation loss and `generate` between steps); its reversible variant, a product-key
memory with rotary embeddings, Linformer, and the copy task's encoder/decoder.

Measured (`tests/clients/harness.py run_client`, the helper hunt46a, 2026-12-06, torch
2.13.0 CPU, 2 steps unless said; ledger = allocator everywhere, every policy predicted =
measured; L = net.net.transformer.fn.layers.layers):
- `--mode lm`: 2,119,516 B; `checkpoint:L.*.*` 1,546,740 B, `selective:L.*.*` 1,810,716 B,
  `offload:L.*.*` 1,465,524 B, `checkpoint:L.0.0+offload:L.1.*+selective:L.2.1`
  1,644,444 B, `checkpoint:net.net.transformer` 2,124,572 B (the region's RNG state
  on top), `selective:@LocalAttention` 2,128,476 B, `checkpoint:@Chunk` 1,872,540 B.
  With `--len 27 --dropout 0.1 --accumulate 2` (the batch padded to the window and
  masked by `Autopadder`): 2,379,724 B; `checkpoint:L.*.*` 1,667,916 B, `offload:L.*.*`
  1,533,516 B, `selective:@SelfAttention` 2,164,876 B, `offload:@LocalAttention`
  2,312,780 B. plan's picks at 75 % measured as predicted (1,625,732 B, 1,466,204 B).
- `--mode rev --validate-every 1`: 707,252 B; every policy on the reversible blocks
  707,252 B (they run under no_grad in forward), `checkpoint:net.net.transformer`
  712,308 B. `compare` with `--dropout 0.1 --len 27`: gradients bitwise.
- `--mode linformer --validate-every 1`: 734,188 B; `checkpoint:` 606,820 B,
  `selective:` 728,300 B, `offload:` 571,620 B over its layers,
  `checkpoint:@LinformerSelfAttention` 662,380 B.
- `--mode pkm --dropout 0.1`: 15,519,364 B + 12 B of kernel scratch; its peak is Adam's
  update of the product-key values, which no policy moves.
- `--mode encdec` (the copy task's loop, `context` kept to the next step; policies act on
  the encoder, the first module the step trains; the decoder is named `model`; E =
  transformer.layers.layers), `--validate-every 1`: 1,997,656 B, `checkpoint:E.*.*`
  1,885,656 B, `offload:E.*.*` 1,849,048 B; `--reversible --dropout 0.1`: 1,949,552 B,
  every policy on the encoder there too; `--reversible dec --dropout 0.1` (an irreversible
  encoder, whose saves the decoder's retained backward reads once per context layer):
  2,077,952 B, `checkpoint:E.*.*` 1,957,760 B, `offload:E.*.*` 1,921,152 B, `selective:`
  refused by both (a second backward pass).
- `--mode image --seq 16 --batch 4` (`ImageLinearAttention` blocks in a CNN): 604,592 B +
  87,936 B of kernel scratch = 692,528 B allocator; `checkpoint:2` 697,584 B,
  `selective:2.fn` 730,352 B, `offload:@ImageLinearAttention` 592,544 B, `selective:*`
  740,464 B, `checkpoint:[2-5]` 697,584 B; the doctor finds nothing, fake = real.
- `--mode rev --accumulate 2`, `selective:net.net.transformer`: 791,208 B (tiny, 1 step:
  105,624 B). measure's re-run guard held the replaced `Deterministic.cpu_state` to the
  re-run's end (4,548 B over; tiny 5,056 B) until the helper guard46 (Note [A replaced
  state, judged by its digest], memledger/measure/apply.py; pinned in plain torch by
  tests/clients/test_rngstate.py).
- `--fake --device cpu` ledgers of lm, rev, linformer and encdec agree with the real ones
  under their policies. The doctor finds nothing on lm, pkm and linformer; it warns,
  rightly, of the undivided loss under `--accumulate 2`, of the copy task's `enc(src)`
  for `generate` outside no_grad, and of `loss` keeping the reversible Function's ctx
  past the step (below).
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("linear_attention_transformer") is None:
    pytest.skip("linear-attention-transformer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

TINY = ["--dim", "16", "--seq", "16", "--window", "4", "--depth", "1", "--tokens", "16"]
L = "net.net.transformer.fn.layers.layers"


def _doctor(argv: list[str], steps: int = 2):
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / "train_linattn.py", argv, steps)
    assert outcome.code == 0, outcome.reason
    return report.findings


def test_the_enwik8_loop_with_a_padded_batch():
    """The example's loop on a batch shorter than the window's multiple (`Autopadder`
    pads it and masks the padding; causal linear attention fills the masked keys and
    values in place): ledger = allocator, two policies predicted = measured, and the
    doctor finds nothing."""
    pick = f"offload:{L}.*.0+selective:{L}.*.1"
    run = run_client("train_linattn.py", ["--mode", "lm", "--len", "13", *TINY],
                     [f"checkpoint:{L}.*.*", pick], steps=1)
    assert run.ledger_peak == run.allocator_peak == 179_336
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {f"checkpoint:{L}.*.*": (152_904, 152_904), pick: (147_556, 147_556)}
    assert _doctor(["--mode", "lm", "--len", "13", *TINY]) == []


def test_a_graph_held_through_the_reversible_functions_ctx():
    """The README's encoder/decoder with `reversible=True`, trained as the copy task
    trains it, keeps `loss` and `context` to the next step: the decoder's
    `_ReversibleFunction` keeps its blocks' keyword arguments as `ctx.args` (a list of
    dicts of dicts), among them the encoder's output, whose graph (the encoder's own
    reversible Function, its final norm's saves: a retained backward ran into it) the
    decoder's graph holds through ctx alone. The warning said 4.0 KiB (the decoder's
    `ctx.y`), where the ledger frees 8,464 B at `loss`'s rebinding: 2,048 B the
    encoder's `ctx.y`, 1,024 B each the encoder's output and its norm's input, 64 + 64 B
    the norm's statistics, 128 B the source tokens, 16 B its mask. Now 8,464 B, 1,280 B
    of them saves; and `context`, which holds the encoder's part, is named beside `loss`
    (the warning told to `del loss` alone): Note [Graphs held through ctx],
    trace/doctor_retention.py."""
    found = _doctor(["--mode", "encdec", "--reversible", *TINY])
    assert [(f.check, f.severity) for f in found] == [("cross_step_retention", "warning")]
    assert found[0].evidence == {"steps": [1, 2], "ctx_bytes_per_step": [8_464, 8_464],
                                 "ctx_saved_bytes_per_step": [1_280, 1_280],
                                 "also": ["context"]}
    assert "8.3 KiB: 7.0 KiB of tensors the autograd Function `_ReversibleFunction` " \
        "keeps on ctx" in found[0].message
    assert found[0].message.endswith("`del loss, context` after the step frees them")

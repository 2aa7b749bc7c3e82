"""reformer-pytorch (tests/clients/train_reformer.py): a `ReformerLM` trained through its
`TrainingWrapper` as the enwik8 example trains it. Reversible layers run each block under
no_grad in forward and call it again inside `_ReversibleFunction.backward`; LSH attention
hashes by random rotations and sorts into buckets; a product-key memory layer; an
encoder-decoder. Ledger passes only (no allocator pass, no measure: the measured numbers
are in the docstrings, from `memledger measure ... --steps 1 -- ARGS`), for time. Skipped
without reformer_pytorch."""

from __future__ import annotations

import pytest

from tests.clients.harness import assert_one_doctor_error, imported_first, ledger_pass, \
    predicted_peak, skip_without

pytestmark = pytest.mark.clients
skip_without("reformer_pytorch")
_imported = imported_first("reformer_pytorch")

TINY = ["--dim", "16", "--seq", "16", "--tokens", "32", "--bucket", "4"]


def test_a_block_called_again_inside_backward_is_named_by_its_module():
    """Reversible layers with a product-key memory as the last block's `g`: the step's
    peak is the memory's EmbeddingBag, run again inside the reversible backward. It read
    "_embedding_bag in net.net.norm" (the LM's final LayerNorm, whose save backward had
    unpacked last); the calls a node makes name their ops now (Note [A module called
    inside backward], trace/collector.py). A policy on the blocks acts on no call (they
    run under no_grad in forward: Note [A region called inside backward],
    measure/apply.py): the baseline, as measure measures it."""
    led = ledger_pass("train_reformer.py", ["--mode", "axial", *TINY], steps=1)
    pk = led.summary().peak
    assert (pk.phase, pk.op, pk.module) == (
        "backward", "_embedding_bag.default",
        "net.net.reformer.layers.blocks.1.g.net.fn.values"), pk
    assert predicted_peak(led, "checkpoint:net.net.reformer.layers.blocks.*.f") == pk.bytes


def test_encoder_decoder_reads_the_encoder_once_per_decoder_layer():
    """`ReformerEncDec`: each decoder layer's reversible backward runs a backward through
    its attention with `retain_graph=True`, and the attention reads the encoder's output
    as keys, so the encoder's graph is read once per decoder layer. The token batch is
    saved by both embeddings: per storage 2 saves, 3 unpacks. predict refused
    `selective:dec.net.net` ("a second backward pass through it"), which measure runs
    (401,224 B), and priced `offload:enc` at 390,040 B against 389,768 B measured (the
    batch's first read-back held across both passes). Now per save (Note [Read again: by
    the save, not the storage], replay/engine.py; `_first_read_again`, ledger/model.py).
    `selective:enc` stays refused, by measure too: its own saves are read twice."""
    led = ledger_pass("train_reformer.py", ["--mode", "encdec", *TINY], steps=1)
    assert predicted_peak(led, "selective:dec.net.net") == 401_224
    assert predicted_peak(led, "offload:enc") == 389_768
    assert predicted_peak(led, "selective:enc") is None


def test_layer_dropout_on_the_irreversible_path_is_one_cut():
    """reformer-pytorch's `ReversibleSequence.forward` with `layer_dropout` picks from
    `self.blocks` (the reversible blocks, whose forward runs under no_grad) even on the
    irreversible path: nothing below the final norm gets a gradient. The doctor said so
    for the Linears and the embedding (cut_graph) and called the blocks' LayerNorms
    "unreached" (a warning: F.layer_norm hands its weight and bias over by keyword, Note
    [Parameters handed over by keyword], trace/doctor_probe.py). Now one error."""
    assert_one_doctor_error("train_reformer.py", ["--mode", "plain", "--layer-dropout", "0.5",
                                                  "--steps", "2", *TINY], 2, "cut_graph",
                            "loss = model(x, return_loss=True)")


def test_plan_takes_the_blocks_the_irreversible_path_calls():
    """`ReversibleSequence` holds each layer's attention and feed-forward twice: inside the
    reversible wrappers, `blocks.{i}.f.net` (the path `named_modules()` gives them), and as
    the `f` and `g` of `irrev_blocks.{i}`, which the irreversible path calls. plan ranked
    candidate groups by the saving module's path, so `irrev_blocks.*` saved nothing and its
    blocks were the attention halves: at 126,000 B "no candidate fits; the lowest predicted
    peak is 129,649" where `offload:...irrev_blocks.*` is predicted 123,556 B and measured
    123,556 B. Now by the saves inside each member's forward calls (Note [A block's saves,
    by its calls], replay/plan.py)."""
    from memledger.replay.plan import plan

    led = ledger_pass("train_reformer.py", ["--mode", "plain", *TINY], steps=1)
    rep = plan(led, 126_000)
    assert rep.blocks == [f"net.net.reformer.layers.irrev_blocks.{i}" for i in (0, 1)]
    assert rep.fits and rep.policy == "offload:net.net.reformer.layers.irrev_blocks.*"
    assert rep.predicted_peak_bytes == 123_556

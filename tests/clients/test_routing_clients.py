"""routing-transformer (tests/clients/train_routing.py): a `RoutingTransformerLM` trained
through its `AutoregressiveWrapper` as the enwik8 example trains it: k-means routed
attention (each layer's `Kmeans` initialises its means from the first batch through
`.data`, routes by them under no_grad, adds a commitment loss to the LM's, and a module
backward hook folds the batch's new means into them), rotary positions, chunked FF.
Skipped without routing_transformer.

Measured (`tests/clients/harness.py run_client`, the helper hunt47a, 2026-12-06, torch
2.13.0 CPU; dim 32, depth 2, seq 32, window 8, batch 2; P = net.net.routing_transformer.
layers.layers):
- `--mode lm`, 1 step: ledger = allocator = 585,546 B; `offload:P.*.*` 474,302 B,
  `checkpoint:P.*.1` (the FF halves) 508,750 B, predicted and measured; 2 steps: 804,294 B
  (804,326 B with 32 B of kernel scratch, = allocator), `offload:P.*.*` 506,818 B,
  `checkpoint:P.*.1` 727,498 B, `selective:@FeedForward` 794,506 B,
  `offload:P.0.0+checkpoint:P.1.1` 676,362 B, both sides.
- `--mode rev` (ReversibleSequence), 2 steps: 713,402 B, every policy on the blocks the
  baseline (they run under no_grad in forward: Note [A region called inside backward]).
- `--mode local` (local heads, memory key/values, tied embedding): 770,158 B + 32 B;
  `offload:P.*.*` 483,722 B, `offload:@LocalAttention` 713,470 B.
- `--mode mix --dropout 0.1` (product-key memory, mixture of experts): 6,201,286 B;
  `offload:P.*.*` 5,420,998 B, `checkpoint:P.*.1` 6,298,170 B.
- `--mode encdec`: 2,350,754 B + 3,040 B of scratch = 2,353,794 B; `offload:enc`
  1,892,482 B, `offload:dec` 1,717,894 B.
- Left open (docs/decisions.md, forty-seventh session, hunt47a): a checkpoint over a
  `Kmeans` is refused by predict (the init's write) and measured by measure (a write
  through `.data` moves no version counter, and the re-run writes nothing).
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("routing_transformer") is None:
    pytest.skip("routing-transformer is not installed", allow_module_level=True)
# one thread: the k-means init runs many tiny ops, slow across threads on a busy machine
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]

P = "net.net.routing_transformer.layers.layers"


def test_a_routed_lm_is_predicted_as_measured_and_selective_refused_alike():
    """The LM's step: the ledger equal to the allocator, two policies to the byte, and
    `selective:@SelfAttention` refused by both in one line. Its re-run finds `Kmeans`'s
    `initted` set and skips the init's ops, and torch's selective cache handed the re-run's
    first `bmm` the init's output: the script failed ("shape '[2, 2, 4, 8, 1, 8]' is
    invalid for input of size 512", exit 3) where predict refused it (Note [A write through
    .data, seen by its digest], measure/apply.py). The doctor finds nothing."""
    sel = "selective:@SelfAttention"
    pols = {f"offload:{P}.*.*": 474_302, f"checkpoint:{P}.*.1": 508_750}
    run = run_client("train_routing.py", ["--mode", "lm"], [*pols, sel], steps=1)
    assert run.ledger_peak == run.allocator_peak == 585_546
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    p = run.policies[sel]
    assert p.predicted is None is p.measured
    assert p.predict_refusal == p.measure_refusal
    assert p.measure_refusal.startswith(
        f"memledger: {sel} would re-run {P}.1.0.fn, whose forward writes "
        f"{P}.1.0.fn.global_attn.kmeans.initted in place")
    assert_one_doctor_error("train_routing.py", ["--mode", "lm", "--steps", "1"], 1, None, "")

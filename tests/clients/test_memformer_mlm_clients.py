"""memformer and mlm-pytorch (tests/clients/train_memformer_mlm.py): lucidrains' Memformer, an
encoder-decoder whose encoder reads memory slots by cross-attention and whose memory is
updated after each segment (attention over memory and encoding, a GRU cell, a
feed-forward), trained by the library's `memory_replay_backprop` (every segment but the
last run under no_grad, then each segment run again with grad from the last to the first,
two backward passes a segment with `retain_graph=True`) or by one backward through all
segments (`--mode bptt`, the memory carried, detached or not, between micro-batches); and
mlm-pytorch's `MLM` (a mask drawn in each call) around x-transformers' encoder.

Measured (`tests/clients/harness.py run_client`, the helper hunt50d, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; no kernel scratch on these runs):
- `--mode mrbp --segments 2 --sgd` (1 step, the test): 241,596 B; `offload:decoder`
  211,704 B, `checkpoint:encoder.layer_blocks.layers.*.*` 229,692 B, `selective:mem_ff`
  246,972 B, `checkpoint:encoder` 211,168 B.
- `--mode bptt --segments 2 --sgd` (1 step): 183,900 B; `offload:@Attention`
  158,004 B (predicted 157,492 B before: Note [A save backward never reads, of a storage
  that stays], memledger/replay/engine.py), `checkpoint:encoder` 180,756 B.
- `--mode mlm --random-token 0.1` (1 step): 288,656 B; `checkpoint:L.*.1` 306,032 B,
  `offload:L.*.1` 214,032 B (`L` = transformer.attn_layers.layers).
- under `--mode mrbp`, offload of a storage both backward passes of a segment read
  (the memory leaf) missed by 256-1,024 B before the fifty-first session (the helper
  fix51b: Note [Rounds of a read-back, replayed], memledger/replay/engine.py): on the
  test's run `offload:@Attention` 192,700 B (192,188 predicted before), `offload:encoder`
  190,908 B (191,164 before), `offload:*` 141,116 B; at 2 steps with 3 segments
  365,016 B, `offload:@Attention` 317,144 B (316,632 before), `offload:encoder` 314,840 B
  (315,224 before), `offload:*` 266,572 B (266,956 before).
The doctor finds nothing on these loops; on `--carry keep --accum 2` (the test: the memory
detached where a step begins, its learned first memory trained in step 1 only) it said
"cut by `.detach()`; remove the detach" (an error) before (Note [A state carried in from an
earlier step], memledger/doctor/graph.py).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("memformer") is None \
        or importlib.util.find_spec("mlm_pytorch") is None:
    pytest.skip("memformer or mlm-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

S = "train_memformer_mlm.py"


def test_memory_replay_backprop_and_a_carried_memory_are_predicted_as_measured():
    """memory_replay_backprop over two segments (its own re-run of each segment, two
    backward passes over each with retain_graph): three policies predicted and measured to
    the byte. And the doctor on a loop that carries the memory, in its graph, from one
    micro-batch to the next and detaches it where each step begins: silent (before, a
    cut_graph error blamed that detach for `memory_slots`, the learned first memory, which
    trains in step 1 only). The replay's fix (`--mode bptt`, `offload:@Attention`) is
    pinned in plain torch: tests/clients/test_handback.py, `--case shared`; the
    fifty-first session's (`offload:@Attention` here, the memory leaf both backward
    passes of a segment read: 192,188 B predicted before) in
    tests/clients/test_two_passes.py."""
    pols = {"offload:decoder": 211_704, "offload:@Attention": 192_700,
            "checkpoint:encoder.layer_blocks.layers.*.*": 229_692,
            "selective:mem_ff": 246_972}
    run = run_client(S, ["--mode", "mrbp", "--segments", "2", "--sgd"], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 241_596
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak, policy
    assert_one_doctor_error(S, ["--mode", "bptt", "--segments", "1", "--sgd", "--carry", "keep",
                                "--accum", "2"], 2, None, "")

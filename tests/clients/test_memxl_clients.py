"""memory-transformer-xl (tests/clients/train_memxl.py): lucidrains' Memory Transformer-XL,
a Transformer-XL-like LM read one segment at a time, carrying a short-term memory (the
memory layers' hidden states, detached) and a long-term memory written by a memory-attention
network (linear attention and an nBRC gate, twice) and backpropagated through time;
trained through the library's `AutoregressiveWrapper` (a generator of one loss per segment,
the optimizer stepped after each, as its enwik8 example) or by hand, memories carried from
call to call and step to step. memory-transformer-xl 0.1.0.

Measured (`tests/clients/harness.py run_client`, the helper hunt57c, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1; every ledger = the allocator, every policy predicted =
measured, `--fake` the same ledger; docs/accuracy.md, "memory-transformer-xl"):
- default (2 segments of 8 tokens, batch 2, 2 optimizer steps: one a segment): 392,084 B;
  `checkpoint:net.memory_network` 327,188 B (its re-run in the next segment's backward,
  after the step between: compare rejects it where the step changed the network's
  weights, `--truncate 1 --segments 3`), `offload:net.attn_layers.*` 347,452 B,
  `selective:@SelfAttention` 399,828 B.
- `--loop hand --accum 2 --clip --mem-kv 2 --optim adamw`: 598,756 B;
  `checkpoint:attn_layers.*` 515,876 B, `checkpoint:@GRUGating` 453,668 B,
  `offload:memory_network+selective:ff_layers.*` 465,892 B.
The doctor finds nothing on the correct loops; `--loop hand --bug no-detach` (the long-term
memory carried into the next step undetached, kept by retain_graph) is one
`cross_step_retention` at `logits, memories = net(...)` (it pointed at the line that
detaches it before: Note [A state a call hands back], doctor/source.py).
"""

import pytest

from tests.clients.harness import (HERE, assert_one_doctor_error, fake_client_gaps,
                                   run_client, skip_without)

skip_without("memory_transformer_xl")
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_segments_stepped_one_by_one_are_predicted_as_measured():
    """The enwik8 example's loop: a backward and an optimizer step per segment, the second
    segment's backward running through the memory network the first segment ran (its
    long-term memory, not detached). The memory network checkpointed (re-run in that later
    backward), attention offloaded, attention selectively checkpointed: each predicted
    and measured to the byte; the doctor finds nothing."""
    pols = {"checkpoint:net.memory_network": 327_188, "offload:net.attn_layers.*": 347_452,
            "selective:@SelfAttention": 399_828}
    run = run_client("train_memxl.py", [], list(pols), steps=2)
    assert run.ledger_peak == 392_084
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_memxl.py", [], 2, None, "")


@pytest.mark.slow
def test_memories_carried_across_steps_by_hand_are_predicted_as_measured():
    """Two calls a step by hand, memories carried from call to call and on into the next
    step (the long-term memory detached where the step begins, each backward retaining
    the graph the next call's backward runs through), two batches accumulated, clipped,
    AdamW. The model is the bare network the script calls (`attn_layers.*`, not
    `net.attn_layers.*`). `--fake` equals the real ledger; the doctor finds nothing."""
    argv = ["--loop", "hand", "--accum", "2", "--clip", "--mem-kv", "2", "--optim", "adamw"]
    pols = {"checkpoint:attn_layers.*": 515_876, "checkpoint:@GRUGating": 453_668,
            "offload:memory_network+selective:ff_layers.*": 465_892}
    run = run_client("train_memxl.py", argv, list(pols), steps=2)
    assert run.ledger_peak == 598_756
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert fake_client_gaps("train_memxl.py", argv, ["checkpoint:@GRUGating"]) == {}
    assert_one_doctor_error("train_memxl.py", argv, 2, None, "")


@pytest.mark.slow
def test_a_long_term_memory_never_detached_is_named_at_the_call_that_hands_it_back():
    """`--bug no-detach`: the long-term memory carried into every next step with its
    history; each backward (retain_graph=True) runs through every earlier step's memory
    network again. One warning at 2 steps (one boundary: kept, growth not yet seen), at
    the line that rebinds `memories` from the call that reads it, told to detach it where
    the step begins; it pointed at `memories = memories._replace(long=memories.long.
    detach())`, the line the bug skips (Note [A state a call hands back])."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--loop", "hand", "--bug", "no-detach"]
    report, outcome = diagnose_in_process(HERE / "train_memxl.py", argv, 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    lines = (HERE / "train_memxl.py").read_text().splitlines()
    assert lines[f.where.line - 1].strip() == "logits, memories = net(xi, memories=memories,"
    # the long-term memory: 2 x 4 x 16 float32 = 512 B
    assert f.evidence["bytes_per_step"] == [512]
    assert f.message.endswith("detach it where the step begins (each tensor it holds, "
                              "`memories = tuple(x.detach() for x in memories)`)")

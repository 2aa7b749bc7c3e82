"""compressive-transformer-pytorch (tests/clients/train_compressive.py): lucidrains'
Compressive Transformer, a Transformer-XL-like LM whose attention layers keep a memory of
past segments and a compressed memory (a strided `Conv1d` over what falls out of the
memory's queue), each layer behind a GRU-gated residual, with the auxiliary reconstruction
loss; trained through the library's `AutoregressiveWrapper`, a generator of one loss per
segment (memories carried between segments inside it), Adam stepped after each segment.

Measured (`tests/clients/harness.py run_client`, the helper hunt48d, 2026-12-06, torch
2.13.0 CPU; ledger = allocator, every policy predicted = measured):
- default (2 segments of 8 tokens, batch 2, 2 optimizer steps): 287,560 B;
  `checkpoint:net.attn_layers.*` 282,380 B, `selective:@SelfAttention` 306,828 B,
  `offload:net.ff_layers.*` 275,440 B.
The library's `SelfAttention.forward` detaches its `to_kv.weight` in place
(`self.to_kv.weight.detach_()`) in the first forward that compresses memory: a checkpoint's
re-run read that weight without requires_grad and measure refused every region around it
(Note [A parameter's requires_grad, as the first run had it], measure/apply.py).
The doctor warns that the same `detach_()` freezes every memory layer's `to_kv.weight`
after the first optimizer step that compresses memory (it said nothing before: Note [A
parameter detached in place], trace/doctor_probe.py).
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, run_client

if importlib.util.find_spec("compressive_transformer_pytorch") is None:
    pytest.skip("compressive-transformer-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_compressive_transformer_is_predicted_as_measured_past_its_detached_weight():
    """Two segments, memories carried between them, the reconstruction loss on: the second
    segment's forward turns off `to_kv.weight`'s requires_grad mid-forward. Checkpointed
    (whole attention layers, or selectively their `SelfAttention`), the re-run now reads the
    weight as the first run did, and is measured as predicted (measure refused both
    before: "A different number of tensors was saved during the original forward and
    recomputation"); offload of the feed-forward layers as well. The doctor's one finding is
    that freeze, a warning."""
    pols = {"checkpoint:net.attn_layers.*": 282_380,
            "selective:@SelfAttention": 306_828,
            "offload:net.ff_layers.*": 275_440}
    run = run_client("train_compressive.py", [], list(pols), steps=2)
    assert run.ledger_peak == 287_560
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / "train_compressive.py", [], 2)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == \
        [("detached_parameter", "warning")], [f.line() for f in report.findings]
    assert "`net.attn_layers.0.fn.fn.to_kv.weight`, `net.attn_layers.1.fn.fn.to_kv.weight`" \
        in report.findings[0].message


def test_the_memories_the_wrappers_generator_carries_are_named_by_it():
    """The wrapper's generator keeps each segment's memories (`new_mem`, a stack of the
    layers' inputs, 2,048 B, and an empty compressed memory) for the next segment, and is
    suspended at every step end (the optimizer steps between two yields): they read
    `other` from their step's end unnamed, and the last step's (the next batch's first
    segment) `temporary` at the close (3 steps: resident `temporary` 4,132 B, `other` 0).
    Its frame is read now (Note [A state a suspended generator holds]): named
    `forward.new_mem[0]`, and the last step's memories, held by the name that held
    segment 1's, the state it carries (resident 2,084 and 2,048). The peak as before."""
    from tests.clients.harness import ledger_pass

    led = ledger_pass("train_compressive.py", [], steps=3)
    s = led.summary()
    assert led.peak().bytes == 287_560
    assert (s.resident["temporary"], s.resident["other"]) == (2_084, 2_048)
    st = led.storages
    assert st[st["category"] == "other"][["bytes", "name"]].values.tolist() == [
        [b, f"forward.new_mem[{i}] (carried by compressive_transformer_pytorch)"]
        for b, i in ((2_048, 0), (0, 1), (2_048, 0), (0, 1))]

"""memory-efficient-attention-pytorch (tests/clients/train_memeff.py): lucidrains' chunked
attention, each (q, k) chunk's summary under torch's own reentrant checkpoint when its
inputs require grad; its plain-PyTorch flash attention (a Function that recomputes the
chunks in backward); its reversible `Transformer` under its `AutoregressiveWrapper` (Adam,
clipping) and a pre-norm stack of our own around its attentions (AdamW).

Measured (`tests/clients/harness.py run_client`, the helper hunt48c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2); 2 steps; ledger = allocator with its kernel scratch, every
policy predicted = measured or refused alike):
- `--mode lm` (memory-efficient attention in the reversible Transformer): 208,788 B (the
  ledger read 193,620 before Note [A checkpoint whose first run is in backward]); every
  policy on it 208,788 B (`checkpoint:@Attention`, `offload:net.to_logits`,
  `selective:@FeedForward`, `checkpoint:net.net.blocks.0`): the reversible forward runs
  under no_grad and saves nothing for a policy to drop. `--depth 1` 138,984 B, `--depth 3`
  270,400 B. `--attn flash`: 190,796 B.
- `--mode stack`: 197,532 + 3,832 B of kernel scratch = 201,364 B; `offload:blocks.*`
  150,932 B, `offload:@Attention` 175,508 B; `checkpoint:` / `selective:` on a block or an
  attention refused alike (the library checkpoints its chunks itself: one checkpoint would
  run inside the other). `--attn cosine --mask`: 215,020 B; `offload:blocks.*` 149,084 B.
  `--bias --mask --dropout 0.1`: 206,240 B; `offload:blocks.*` 155,808 B.
- `--mode stack --attn flash --mask`: 135,852 + 24 = 135,876 B; `checkpoint:blocks.*`
  123,436 B, `selective:blocks.*` 146,476 B, `selective:blocks.1` 142,188 B,
  `offload:blocks.*` 114,028 B, `offload:@FlashAttention` 122,540 B.
`trace --fake --device cpu` equals the real ledger on all five modes above; the doctor warns,
truly, on `lm` (`loss` keeps `_ReversibleFunction`'s `ctx.y`, 4,096 B, to the next
forward) and on `stack` and `stack --mask --bias --dropout 0.1` (it keeps
`CheckpointFunction`'s generator states, 30,336 B: six chunk checkpoints), all missed
before Note [A spent graph held below its root]; nothing on `stack --attn flash --accum 2
--validate`.
"""

import importlib.util

import pytest

from memledger.doctor.run import diagnose_in_process
from tests.clients.harness import HERE, assert_pinned, run_client

if importlib.util.find_spec("memory_efficient_attention_pytorch") is None:
    pytest.skip("memory-efficient-attention-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

PEAK = 102_436   # --depth 1, 1 step: ledger = allocator, every policy


def test_the_reversible_transformers_chunk_checkpoints_in_backward_are_in_the_ledger():
    """The library's `Transformer` with `Attention(memory_efficient=True)`: the reversible
    forward runs under no_grad, so each chunk checkpoint first runs inside
    `_ReversibleFunction.backward` and keeps its generator state (5,056 B) to its own
    backward. The ledger dropped those (15,168 B under the allocator at any depth, Note [A
    checkpoint whose first run is in backward], trace/collector.py); now it equals the
    allocator. A policy on the attention (every call of it in backward) or on the head
    changes nothing (the peak is in the reversible backward, which saves nothing a policy
    drops), predicted and measured alike."""
    argv = ["--mode", "lm", "--depth", "1"]
    pols = ["checkpoint:@Attention", "offload:net.to_logits"]
    run = run_client("train_memeff.py", argv, pols, steps=1)
    assert run.ledger_peak == run.allocator_peak == PEAK
    for policy in pols:
        assert run.policies[policy].predicted == run.policies[policy].measured == PEAK
    # `loss`, kept past the step below the scaled root `(loss / accum).backward()`,
    # holds `_ReversibleFunction`'s `ctx.y` (2 x 16 x 32 floats): a true warning, which the
    # doctor missed (Note [A spent graph held below its root], trace/doctor_retention.py)
    report, outcome = diagnose_in_process(HERE / "train_memeff.py", argv, 1)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence["ctx_bytes_per_step"] == [2 * 16 * 32 * 4]
    assert "`_ReversibleFunction` keeps on ctx" in f.message


def test_a_checkpoint_the_library_makes_is_named_as_the_librarys_to_turn_off():
    """`--mode stack`: each Attention checkpoints its chunk function `summarize_qkv_chunk`
    (memory_efficient=True), so a policy checkpoint of the block around it is refused by
    both sides. The line said "turn the script's checkpointing off", and the script has
    none: the switch is the library's (Note [A checkpoint a library makes],
    trace/script_checkpoint.py). Offloading the block is predicted as measured; the
    ledger holds 12 B of kernel scratch under the allocator here."""
    run = run_client("train_memeff.py", ["--mode", "stack", "--depth", "1"],
                     ["checkpoint:blocks.0", "offload:blocks.0"], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=76_436)
    lib = "memory_efficient_attention_pytorch"
    refused = run.policies["checkpoint:blocks.0"]
    assert refused.predict_refusal == refused.measure_refusal == (
        "memledger: checkpoint:blocks.0 would checkpoint blocks.0, and blocks.0.attn's "
        "forward, which runs in it, checkpoints the function summarize_qkv_chunk itself "
        f"(torch.utils.checkpoint at {lib}/memory_efficient_attention.py:134): one "
        f"checkpoint would run inside the other; that checkpoint is {lib}'s: turn it off "
        f"by {lib}'s own option to compare policies, or offload that module instead")
    offload = run.policies["offload:blocks.0"]
    assert offload.predicted == offload.measured == run.allocator_peak

"""feedback-transformer-pytorch (tests/clients/train_feedback.py): lucidrains' Feedback
Transformer, a causal LM run window by window in a Python loop, each window attending to a
FIFO memory of keys / values made from a learned softmax-weighted sum of every layer's
output, through one key/value `nn.Linear` every layer's attention shares and the model
registers again as `shared_kv_proj` (and calls itself, on that sum, for the memory); the
memory handed to the next step detached (`--carry`), Adam with clipping.

Measured (`tests/clients/harness.py run_client`, the helper hunt48g, 2026-12-06, torch
2.13.0 CPU, an AMD EPYC (AVX2); ledger = allocator with its kernel scratch, every policy
predicted = measured, `compare` gradients bitwise):
- `--length 4 --carry` (1 step, the test): 167,160 B + 12 B of kernel scratch = 167,172 B;
  `checkpoint:layers.*.1` 167,172 B, `offload:layers.0.0.fn.fn.to_kv` (the shared Linear:
  all its calls) 166,916 B, `selective:@Attention` 167,172 B.
- default (`--length 8`, 2 steps): 209,836 B; `checkpoint:layers.*.1` 218,252 B,
  `offload:layers.*.0` 196,924 B, `selective:layers.*.0` 242,480 B,
  `checkpoint:layers.0.0+offload:layers.1.1` 210,900 B, `checkpoint:@Attention` 235,504 B.
- `--window 1 --length 4` (every attention in the library's `SkipIf`, skipped while the
  memory is empty): 183,388 B; `checkpoint:layers.*.0` 201,100, `offload:` 180,364,
  `selective:` 202,476, `selective:@PreNorm` 227,740 B.
- `--carry --window 1 --length 5 --dropout 0.1`: 209,740 B; the shared Linear checkpointed
  229,964, offloaded 209,228, selective 230,988 B; `checkpoint:layers.*.*` 259,692 B.
- `--carry --keep-last --amp --validate --accum 2 --length 6` (bf16): 211,164 B;
  `checkpoint:@FeedForward+offload:@Attention` 211,836 B.
`trace --fake --device cpu` equals the real ledger on all of them; the doctor finds
nothing. The shared Linear's second paths are refused alike by both sides, as tied layers
are (Note [A module under a second path]).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, on_this_cpu, run_client

if importlib.util.find_spec("feedback_transformer_pytorch") is None:
    pytest.skip("feedback-transformer-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_feedback_transformer_is_predicted_as_measured_and_its_shared_kv_saves_by_caller():
    """Two windows of two tokens, the second attending to the first's memory: a policy on
    every feed-forward, offload on the shared key/value Linear (every call of it, the
    model's own among them) and selective on the attentions, each predicted and measured
    to the byte; the doctor finds nothing on the loop that carries the memory over.

    `show`'s per-block table of saved activations read `layers.0` 13,660 B and `layers.1`
    13,148 B: the model's own calls of `shared_kv_proj` (its first path is
    `layers.0.0.fn.fn.to_kv`) saved their input, the layers' weighted sum (2 windows x 2 x
    2 x 16 floats = 512 B), counted in layer 0. Now each layer saves 13,148 B and
    `shared_kv_proj` 512 B (Note [A shared module's saves, by the block that called it],
    ledger/summary.py). Of those 512 B, the last window's call (256 B) makes the memory
    for a window that never comes: its graph is kept with the carried memory, and no
    backward reads it; "saved for backward" is what the step's backward reads, 256 B (Note
    [The saves the step's backward reads], ledger/model.py)."""
    argv = ["--length", "4", "--carry"]
    # 12 B of kernel scratch in each policy's peak on the AVX2 box they were measured on
    # (Note [Numbers that depend on the CPU], tests/clients/harness.py)
    pols = {"checkpoint:layers.*.1": on_this_cpu(avx2=167_172),
            "offload:layers.0.0.fn.fn.to_kv": on_this_cpu(avx2=166_916),
            "selective:@Attention": on_this_cpu(avx2=167_172)}
    run = run_client("train_feedback.py", argv, list(pols), steps=1)
    assert run.ledger_peak == 167_160
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert peak is None or run.policies[policy].measured == peak
    blocks = run.summary.activations.by_block
    assert (blocks["layers.0"], blocks["layers.1"]) == (13_148, 13_148)
    assert blocks["shared_kv_proj"] == 2 * 2 * 16 * 4 == 256   # one window's call
    assert_one_doctor_error("train_feedback.py", argv, 2, None, "")

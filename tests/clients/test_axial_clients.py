"""axial-attention (tests/clients/train_axial.py): lucidrains' `AxialImageTransformer` as
an image classifier (a 1x1 conv stem, the transformer with its axial positional embedding,
a mean-pool linear head), reversible (the library's default: a custom autograd Function
runs every block under no_grad, keeps its output on ctx as an attribute, and rebuilds each
block's input in backward by re-running it under enable_grad, each `Deterministic` wrapper
restoring the generator state it recorded in forward under a `fork_rng`) or `--plain`.

Measured (`tests/clients/harness.py run_client`, the helper hunt49k, 2026-12-07, torch
2.13.0, an AVX2 CPU, one intra-op thread; ledger = allocator with its kernel scratch, every
policy predicted = measured, `--fake --device cpu` ledgers = real ones):
- reversible, `--depth 2` (2 steps): 460,488 B + 14,904 B of convolution scratch =
  475,392 B; `checkpoint:body.layers.blocks.*`, `offload:@SelfAttention`, `checkpoint:
  body`, `selective:@PermuteToFrom` 475,392 B (the peak is in the reversible re-run, which
  no policy moves; the blocks never run with gradients in forward, which predict says),
  `checkpoint:stem+offload:head` 480,448 B (checkpoint's generator state, 5,056 B).
- `--plain --attn` (2 steps): 622,640 + 4,096 B; `checkpoint:body.layers.blocks.*.0`
  542,736 B, `offload:@SelfAttention` 454,704 B, `selective:@PermuteToFrom` 657,072 B,
  `checkpoint:attn+offload:head` 578,544 B, `checkpoint:@ChanLayerNorm` 610,096 B.
- `--amp --accum 2 --validate --dim 16 --depth 1`: 850,564 + 123,544 B (bf16 convolutions
  on AVX2); `selective:body.layers` 1,048,796 B, the rest 974,108 B.
The doctor warns, rightly, that `loss` kept past the step holds the reversible Function's
ctx output (8,192 B a step); on `--plain` it finds nothing.
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, assert_pinned, run_client

if importlib.util.find_spec("axial_attention") is None:
    pytest.skip("axial-attention is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

B = "body.layers.blocks"


def test_a_reversible_axial_transformer_is_predicted_as_measured_and_its_states_are_not_idle():
    """One reversible layer, 2 steps: three policies predicted and measured to the byte
    (the blocks' re-run in backward holds the peak; `checkpoint:stem` adds its generator
    state), and the doctor's one warning: `loss`, kept past the step, holds the Function's
    ctx output (2 x 16 x 8 x 8 floats).

    `show`'s "Held after last use" listed the generator states the blocks' `Deterministic`
    wrappers record in forward and restore in backward (and the `fork_rng` copies around
    each re-run): read back by `torch.set_rng_state`, no op, they read idle from their
    making to their free; 7 of the table's first 8 rows at `--depth 2`. None is listed now
    (Note [A generator state's read is never seen], ledger/model.py)."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--depth", "1"]
    pols = {f"checkpoint:{B}.*": 281_964, "offload:@SelfAttention": 281_964,
            "checkpoint:stem+offload:head": 287_020}
    run = run_client("train_axial.py", argv, list(pols))
    assert run.ledger_peak == 281_960
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=281_964)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    st = run.ledger.on_device()
    states = st[st["op"] == "torch.get_rng_state"]
    assert (len(states), int(states["bytes"].sum())) == (16, 16 * 5_056)   # 4 wrappers x 2 x 2
    assert "torch.get_rng_state" not in run.ledger.idle_offenders(None)["op"].tolist()

    report, outcome = diagnose_in_process(HERE / "train_axial.py", argv, 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence["ctx_bytes_per_step"] == [8_192, 8_192]
    assert "`_ReversibleFunction`" in f.message

"""infini-transformer-pytorch (tests/clients/train_infini.py): lucidrains' Infini-Transformer,
causal attention layers that each keep a compressive memory (`Memories(kv_mem, k_norm)`)
one segment writes and the next reads; trained through the README's
`InfiniTransformerWrapper(..., detach_mems_every_num_segments=2)` with `backward=True`:
it calls `backward()` inside its own forward every two segments and at the last one, and
detaches the memories in place after each pass (two passes a step over three segments).

Measured (`tests/clients/harness.py run_client`, the helper hunt54b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, no kernel scratch
but where named, every policy predicted = measured):
- `--mode wrapper` (1 step, the test): 715,340 B; `offload:model.layers.*.*` and
  `checkpoint:model.layers.0.0+offload:model.layers.1.*` 670,872 B (673,176 B predicted
  before Note [A handed list let go of between calls], trace/collector.py: the previous
  segment's memories, handed to the model in a list the wrapper rebinds as the call
  returns, were held by the trace alone to the wrapper's return), `selective:@FeedForward`
  715,076 B. 2 steps: 783,240 B; `checkpoint:model.layers.*.*` 740,488, `offload:
  model.layers.*.*` 692,668 (694,972 before), `offload:@CausalAttention` 718,916
  (721,220 before), `selective:model.layers.*.0` 772,904, `checkpoint:model` 764,800 B.
- `--mode loss` (the wrapper's loss, one backward by the script; 2 steps): 845,464 B +
  3,072 B of kernel scratch (a `log_softmax` over the classes of a transposed (b, c, n)
  view) = 848,536 B allocator; `checkpoint:model.layers.*.*` 753,296, `offload:` 686,384,
  `selective:@CausalAttention` 830,928 B.
- `--mode carry` (the script carries the memories across segments and steps, 2 steps):
  869,720 B; `checkpoint:layers.*.*` 777,812, `offload:` 700,124, `selective:
  @CausalAttention` 846,008 B. `--detach` (a backward per segment): 748,416 B; 714,576,
  687,136 and 741,472 B.
`trace --fake --device cpu` reads the same peaks, categories and predictions. The doctor
finds nothing on the carried loop; `--accum 2 --bug no-scale` is `loss_not_divided` (read by
the weights backward gives the wrapper's losses, helper fix55e; nothing before).
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, assert_one_doctor_error, run_client

if importlib.util.find_spec("infini_transformer_pytorch") is None:
    pytest.skip("infini-transformer-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

L = "model.layers"


def test_the_readme_wrapper_with_two_backward_passes_a_step_is_predicted_as_measured():
    """Three segments, a backward pass inside the wrapper's forward after the second and
    the third, the memories detached in place between them: offload on every layer, a
    checkpoint and offload mix, and selective on the feed-forwards, each to the byte; the
    doctor finds nothing where the script carries the memories across steps itself."""
    pols = {f"offload:{L}.*.*": 670_872,
            f"checkpoint:{L}.0.0+offload:{L}.1.*": 670_872,
            "selective:@FeedForward": 715_076}
    run = run_client("train_infini.py", ["--mode", "wrapper"], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 715_340
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_infini.py", ["--mode", "carry", "--detach"], 2, None, "")


def test_the_wrapper_called_twice_a_step_without_its_scale_is_loss_not_divided():
    """`--accum 2 --bug no-scale`: two calls a step of `wrapper(seq, backward=True)` without
    `grad_accum_scale`, each running its two passes inside the library (2 then 1 of the 3
    segments, each segment's masked mean weighed by its share of the 48 tokens): passes of
    weight 2/3, 1/3, 2/3, 1/3, each call its whole mean, the gradient twice the mean. The old
    code said nothing (no pass's value is a loss's value); Note [What a backward weighs a
    loss by] (trace/doctor_probe.py). With the scale (1/3, 1/6, ...) nothing."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--mode", "wrapper", "--accum", "2"]
    report, outcome = diagnose_in_process(HERE / "train_infini.py", [*argv, "--bug", "no-scale"],
                                          2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("loss_not_divided", "warning")
    assert f.evidence == {"micro_batches": 2, "backward_passes": 4,
                          "loss_weights": [0.6667, 0.3333, 0.6667, 0.3333], "steps": [1, 2]}
    line = "loss = wrapper(batch(), backward=True, grad_accum_scale=scale)"
    assert (HERE / "train_infini.py").read_text().splitlines()[f.where.line - 1].strip() == line
    assert_one_doctor_error("train_infini.py", argv, 2, None, "")

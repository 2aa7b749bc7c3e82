"""HRM-pytorch (tests/clients/train_hrm.py): lucidrains' Hierarchical Reasoning Model, a
low-level and a high-level x-transformers `Encoder` iterated `reasoning_steps x 2` times
per forward through `CombineHiddens` (RMSNorm each of the token embedding and the hidden
states, concat, project), every iteration but the last under `torch.no_grad` (the one-step
gradient); deep supervision as the README writes it: each batch trained over 2 segments,
each its own forward, backward and Adam step, the hidden states one segment returns (a
`dict_values` view) handed to the next, which detaches them.

Measured (`tests/clients/harness.py run_client`, the helper hunt54a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger with its 4 B of kernel scratch =
allocator, every policy predicted = measured):
- `--reasoning 1` (the test, 2 steps: batch 1's two segments): 225,136 B + 4 B of kernel
  scratch = 225,140 B allocator; `checkpoint:networks.*` 222,120 B, `offload:networks.1+
  checkpoint:networks.0` 215,600 B, `offload:networks.*` 197,564 B, `selective:@Attention`
  239,988 B.
- defaults (`--reasoning 2`, 2 steps): 226,160 B + 4 B = 226,164 B, the peak in
  segment 2's forward with segment 1's carried hidden states live; `checkpoint:networks.*`
  222,120 B, `offload:networks.*` 197,564 B, `selective:networks.*` 233,392 B,
  `checkpoint:networks.0` and `offload:networks.1+checkpoint:networks.0` 215,600 B,
  `checkpoint:hidden_combiners.*` 226,484 B, `selective:@Attention` 241,012 B.
- `--act` (HRM_ACT, the Q head read under gradients at each reasoning step, 3 steps)
  227,024 B; `--act --infer` 227,032 B; `--full-grad` (every iteration under gradients)
  355,800 B, `checkpoint:networks.*` 282,544 B, `offload:networks.*` 229,124 B;
  `--opt atan2 --clip 1.0` 226,004 B; `--infer --causal --keep-hiddens` 231,472 B
  (`@Encoder` refused alike: the causal model's networks are `Decoder`s).
The doctor finds nothing on the README's loop; `--keep-hiddens` (every segment's hidden
states appended to a list) got "no findings" before Note [A view of a dict's values]
(trace/doctor_retention.py) and is the test's error now. The carried hidden states read
`other` from their segment's end (Note [A state carried into the next step], the helper
fix54e): at the tier's peak `activation` 74,112 B and `other` 2,048 B (76,160 and 0
before), resident `other` 2,048 B (`activation` before).
"""

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, run_client,
                                   skip_without)

skip_without("HRM", "x_transformers")
pytestmark = pytest.mark.clients


def test_hrm_deep_supervision_is_predicted_as_measured_and_a_kept_view_is_found():
    """Two segments of one batch (two optimizer steps), the second reading the first's
    detached hidden states: a policy on both networks, a mix, and offload of both, each
    predicted and measured to the byte. The doctor names the list that keeps each segment's
    `dict_values` of hidden states (2 tensors, 2 x 8 x 16 fp32 = 2,048 B, a step)."""
    pols = {"checkpoint:networks.*": 222_120,
            "offload:networks.1+checkpoint:networks.0": 215_600,
            "offload:networks.*": 197_564}
    argv = ["--reasoning", "1"]   # one no_grad low-level iteration, then the last
    run = run_client("train_hrm.py", argv, list(pols), steps=2)
    assert run.ledger_peak == 225_136
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=225_140)   # 4 B of kernel scratch on AVX2
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    # segment 1's two last hidden states (2 x 1,024 B), read by its backward and carried
    # into segment 2's forward (the peak): `other` from step 1's end, and segment 2's,
    # held at the close (Note [A state carried into the next step]); before, `activation`
    # 76,160 B and `other` 0 at the peak, 2,048 B of `activation` resident
    at, res = run.summary.at_peak, run.summary.resident
    assert (at["activation"], at["other"], res["activation"], res["other"]) == (
        74_112, 2_048, 0, 2_048)
    assert_one_doctor_error("train_hrm.py", [*argv, "--keep-hiddens"], 3,
                            "cross_step_retention", "kept.append(hiddens)")

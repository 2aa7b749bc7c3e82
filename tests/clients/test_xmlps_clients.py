"""x-mlps-pytorch 0.6.9 (tests/clients/train_xmlps.py): lucidrains' MLPs built as its
README builds them, on random regression targets: nGPT-style `nFeedforwards` (weights on
the hypersphere through `torch.nn.utils.parametrize`, renormed in place by the library's
`norm_weights_` after each step), `Noisable` (the parameters noised by seed and run by
`torch.func.functional_call`), `ResidualNormedMLP` with its float64 orthogonal residual,
`AttnResidualNormedMLP`, `FiLMableMLP`, `GroupedMLP`, `WeightOnlyMLP`, `Feedforwards`.

Measured (`tests/clients/harness.py run_client`, the helper hunt55a, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1, an AMD CPU with AVX-512 bf16; ledger = allocator, every policy predicted =
measured, `--fake --device cpu` the same ledger; docs/accuracy.md "x-mlps-pytorch"):
- `--model nff --norm-after-step` (2 steps): 95,820 B; `checkpoint:layers.*` 92,108 B,
  `offload:layers.*` 79,964 B, `selective:layers.0` 90,252 B.
- `--model noisable` (2 steps): 49,372 B; `checkpoint:model` 58,972 B,
  `checkpoint:model.layers.0` 62,812 B.
The doctor finds nothing on the loop; `--keep-outputs` is found, and told `.detach()`
(before: "accumulate out.item() or out.detach()", and `.item()` refuses an 8 x 16 output).
"""

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client, skip_without

skip_without("x_mlps_pytorch")
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_hypersphere_weights_renormed_in_place_are_predicted_as_measured():
    """nFeedforwards' parametrized weights (`l2norm` of the original at every read) and the
    library's `norm_weights_` copying the normed weights into the originals under no_grad
    after each step: checkpoint, offload and selective predicted and measured to the byte;
    the doctor finds nothing."""
    argv = ["--model", "nff", "--norm-after-step"]
    pols = ["checkpoint:layers.*", "offload:layers.*", "selective:layers.0"]
    run = run_client("train_xmlps.py", argv, pols, steps=2)
    assert run.ledger_peak == 95_820
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy in pols:
        assert run.policies[policy].predicted == run.policies[policy].measured, policy
    assert_one_doctor_error("train_xmlps.py", argv, 3, None, "")


def test_kept_outputs_are_told_to_detach():
    """Note [A kept tensor of several numbers] (doctor/retention.py): FiLMableMLP's 8 x 16
    outputs kept in a list, 512 B a step; the advice was `out.item()`, which refuses them."""
    from tests.clients.harness import HERE, _fresh_library_state, _fresh_process_state
    from memledger.doctor.run import diagnose_in_process

    argv = ["--model", "film", "--keep-outputs"]
    _fresh_library_state()
    _fresh_process_state()
    report, outcome = diagnose_in_process(HERE / "train_xmlps.py", argv, 3)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "error")
    lines = (HERE / "train_xmlps.py").read_text().splitlines()
    assert lines[f.where.line - 1].strip() == "kept.append(out)"
    assert f.message.endswith("each step adds 1 tensor, 512 B): every step's graph stays "
                              "reachable; accumulate out.detach() instead"), f.message

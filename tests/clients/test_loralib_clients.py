"""loralib (tests/clients/train_loralib.py): Microsoft's LoRA as its README builds a model,
a small causal transformer of `lora.Embedding`, a fused q/k/v `lora.MergedLinear(...,
enable_lora=[True, False, True])` and `lora.Linear`s, `mark_only_lora_as_trainable(model,
bias='lora_only')`, trained by adan-pytorch's `Adan` (the previous gradient and three
moments per parameter), with a validation in eval mode between steps: `model.eval()`
merges each layer's B @ A into its frozen weight in place and `model.train()` takes it
out. The same script runs discrete-key-value-bottleneck-pytorch and hyper-connections.

Measured (`tests/clients/harness.py run_client`, the helper hunt52e, 2026-12-07, torch
2.13.0 CPU, one intra-op thread, an AMD EPYC (AVX2); ledger = allocator, no kernel
scratch, every policy predicted = measured or refused by both):
- `--model lora --validate` (2 steps): 177,528 B; parameter 40,576 B, of which 10,112 B
  train, optimizer_state 40,448 B = 4 x 10,112 (Adan's `step` is a Python int);
  `checkpoint:blocks.*` 151,544 B, `offload:blocks.*` 114,624 B, `checkpoint:@MergedLinear`
  181,496 B, `checkpoint:emb` 182,072 B; `selective:@Attention` refused by both (loralib's
  `result += ...` on the kept addmm output). With `--save` (the fix53b helper, the same
  day and box): 187,640 B, the `lora_state_dict` clones kept from step 1 over step 2
  (10,112 B) `other` at the peak and at the end (Note [Kept by the script across a step],
  memledger/ledger/held_roles.py; `temporary` before: 36,744 B at the peak, 10,116 B
  resident, now 26,632 and 4); `checkpoint:blocks.*` 161,656 B, `offload:blocks.*`
  124,736 B, as before the fix.
- `--model dkvb --validate` (EMA keys): 101,081 B; `offload:bottleneck.vq` 92,889 B;
  `checkpoint:bottleneck` refused by both (the codebook's EMA written through `.data`:
  Note [A re-run's write through .data], memledger/measure/apply.py).
  `--keys frozen`: 98,789 B; `checkpoint:bottleneck` 111,633 B, `selective:bottleneck`
  115,717 B, `offload:bottleneck` 90,501 B (measure refused the first two before: Note [A
  mode the region sets itself], memledger/measure/apply.py).
- `--model hc --validate` (4 residual streams): 494,040 B; `checkpoint:layers.*` 315,160
  B, `selective:@HyperConnections` 380,184 B, `offload:layers.*` 252,888 B, plan's
  `offload:layers.[1-2]` 343,640 B. `--mhc --decorate`: 989,848 B; `checkpoint:
  branches.*` 963,736 B, `offload:branches.*` 898,264 B; `checkpoint:layers.*` refused by
  both (`decorate_branch` runs the layer's `forward` as a method).
`trace --fake --device cpu` equals the real ledger on each (once it stopped on the lora
model: Note [A factory that reads only its tensor's kind], memledger/trace/fake.py).
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("loralib") is None or importlib.util.find_spec("adan_pytorch") is None:
    pytest.skip("loralib or adan-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_lora_model_merged_between_steps_is_predicted_as_measured():
    """The evaluation between steps writes every frozen weight in place twice (merge,
    unmerge): the ledger equals the allocator, Adan's state is four times what trains, the
    LoRA weights' clones the script saves each step read `other`, two policies are
    predicted to the byte and the selective one is refused alike. Calling
    `model.train()` once before the loop instead of at each step trains step 2 on
    merged, where the forward skips the LoRA factors: the doctor said nothing; it warns
    now (Note [A forward that takes another path in eval mode], memledger/doctor/modes.py)."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    pols = {"checkpoint:blocks.*": 161_656, "offload:blocks.*": 124_736,
            "selective:@Attention": None}
    run = run_client("train_loralib.py", ["--model", "lora", "--validate", "--save"],
                     list(pols))
    assert run.ledger.peak_with_scratch() == run.ledger_peak == run.allocator_peak == 187_640
    assert run.summary.at_peak["optimizer_state"] == 4 * 10_112
    # the `lora_state_dict` clones the script keeps over step 2 are no temporary (Note
    # [Kept by the script across a step], memledger/ledger/held_roles.py; before:
    # temporary 36,744 and 10,116 B, other 0)
    assert (run.summary.at_peak["temporary"], run.summary.at_peak["other"]) == (26_632, 10_112)
    assert (run.summary.resident["temporary"], run.summary.resident["other"]) == (4, 10_112)
    for pol, peak in pols.items():
        p = run.policies[pol]
        assert (p.predicted, p.measured) == (peak, peak), p
    assert "changed in place afterwards" in run.policies["selective:@Attention"].measure_refusal

    report, outcome = diagnose_in_process(
        HERE / "train_loralib.py", ["--model", "lora", "--validate", "--train-once"], 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity, f.evidence["params"], f.evidence["steps"]) == \
        ("eval_mode", "warning", 18, [2])

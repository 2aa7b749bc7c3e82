"""siren-pytorch (tests/clients/train_siren.py): lucidrains' SirenNet (sine layers) in a
`SirenWrapper` fitting tiny random images on its coordinate grid (a buffer cloned with
`requires_grad_()` in every forward), modulated by a `Modulator` over a learned latent per
image whose hidden states multiply the sine layers' outputs in place (`x *= mod`: autograd
clones each 256 x 32 output, 32 KiB, to differentiate the modulation).

Measured (`tests/clients/harness.py run_client`, the helper hunt49h, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy predicted
= measured, `trace --fake --device cpu` equal to the real ledger, `compare` bitwise with
dropout):
- the README's defaults (2 steps): 297,456 B; `checkpoint:net.layers.*` 247,088 B,
  `offload:net.layers.*` 174,816 B, `selective:@Siren` 312,624 B, `checkpoint:net`
  302,512 B.
- `--latent 8 --images 2 --dropout 0.1 --final sigmoid --validate` (2 steps): 932,200 B;
  `checkpoint:net.layers.*` 574,396 B, `offload:net.layers.*` 415,576 B, `checkpoint:net`
  562,700 B, `checkpoint:net.layers.*.activation` 962,536 B.
- `--latent 8 --accum 2 --validate` (2 steps): 452,176 B; `offload:@Sine` 353,872 B,
  `checkpoint:net.layers.[01]+offload:net.layers.2` 335,176 B.
"""

import importlib.util

import pytest

from memledger.doctor.run import diagnose_in_process
from tests.clients.harness import HERE, assert_one_doctor_error, run_client

if importlib.util.find_spec("siren_pytorch") is None:
    pytest.skip("siren-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_modulated_siren_is_predicted_as_measured():
    """Two images, a latent each, dropout: checkpoint on every sine layer, offload on the
    sine activations, a mix, each predicted and measured to the byte; the doctor finds
    nothing on its loop, and names the latents where the optimizer leaves them out
    (`--left-out`: before, no finding; Note [A parameter no module holds])."""
    argv = ["--latent", "8", "--images", "2", "--dropout", "0.1"]
    pols = {"checkpoint:net.layers.*": 532_456,
            "offload:@Sine": 693_652,
            "checkpoint:net.layers.[01]+offload:net.layers.2": 451_732}
    run = run_client("train_siren.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 890_260
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_siren.py", argv, 2, None, "")
    report, _ = diagnose_in_process(HERE / "train_siren.py", [*argv, "--left-out"], 2)
    assert [(f.check, f.severity, f.evidence) for f in report.findings] == \
        [("no_optimizer", "warning", {"params": 1, "bytes": 2 * 8 * 4})]   # (2, 8) fp32

"""iTransformer (tests/clients/train_itransformer.py): lucidrains' iTransformer 0.8.1, series
forecasting with a token per variate, attention across the variates, the MSE returned by
the model's forward when given the targets. `iTransformer` (memory tokens, hyper-
connections, the first layer's values mixed into the later ones), `iTransformer2D` (each
layer a gate loop's associative scan, causal attention across time with one rotary
embedding every layer shares, attention across the variates; its layers `ModuleList`s
whose items never run, the model calling their three parts) and `iTransformerFFT`.

Measured (`tests/clients/harness.py run_client`, the helper hunt49a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, every policy
predicted = measured, none holding kernel scratch):
- `--model 2d --lookback 8 --time-tokens 2 --variates 4 --batch 2 --revin` (1 step, the
  test): 716,656 B; `checkpoint:layers.*.*` 464,696 B, `offload:layers.*.1+selective:
  layers.*.2` 535,216 B, `selective:@SimpleGateLoopLayer` 671,856 B.
- `--model 2d --revin` (2 steps): 2,966,124 B; `checkpoint:layers.*.*` 1,185,876 B,
  `offload:layers.*.*` 780,156 B, `selective:@TransformerBlock` 2,294,636 B.
- the default `iTransformer` (2 steps): 263,980 B; `checkpoint:layers.*.*` 164,696 B,
  `offload:layers.*.*` 123,776 B, `selective:@Attention` 258,732 B.
- `--model fft --pred 4,8` (2 steps): 193,604 B; `offload:layers.*.*` 129,708 B.
The doctor finds nothing on any of the three.
"""

import importlib.util

import pytest

from memledger.replay.plan import repeated_blocks
from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("iTransformer") is None:
    pytest.skip("iTransformer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_an_itransformer2d_is_predicted_as_measured_and_planned_across_its_layers():
    """iTransformer2D with reversible instance norm: a policy on every part of every layer,
    a mix (offload on the time-attention blocks, selective on the variate blocks) and
    selective on the gate loops, each predicted and measured to the byte; the doctor finds
    nothing on its loop.

    Its layers are `ModuleList([gate loop, time block, variate block])` that never run
    themselves. `plan` took one layer's three parts (`layers.0.0-2`, a numbered group of
    their own) as the blocks and never searched `layers.1.*`; the parts across both
    layers are its blocks now (Note [One item's parts are no stack],
    memledger/replay/plan.py)."""
    argv = ["--model", "2d", "--lookback", "8", "--time-tokens", "2", "--variates", "4",
            "--batch", "2", "--revin"]
    pols = {"checkpoint:layers.*.*": 464_696,
            "offload:layers.*.1+selective:layers.*.2": 535_216,
            "selective:@SimpleGateLoopLayer": 671_856}
    run = run_client("train_itransformer.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 716_656
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    blocks = repeated_blocks(run.ledger)
    assert {f"layers.{i}.{j}" for i in range(2) for j in range(3)} <= set(blocks)
    assert_one_doctor_error("train_itransformer.py", argv, 2, None, "")

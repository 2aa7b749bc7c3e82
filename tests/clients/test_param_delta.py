"""A low-rank update put on a frozen weight through torch's parametrizations, as peft's
`ParamWrapper` runs LoRA on a bare parameter (tests/clients/train_param_delta.py): the
update scaled in place (peft 0.22) or out of place (0.21), registered for each call
(peft's way) or once. Blocks of 2, dim 32, batch 128, AdamW on the adapters and the head;
fp32, so the bytes are the same on every CPU."""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients

REFUSED = (
    "memledger: selective:blocks.* keeps mm's output in blocks.1 that is changed in place "
    "afterwards (an inplace=True activation, `x += ...`, a mask filled in place, "
    "nn.LSTMCell's kernel), and torch's selective checkpoint cannot hand back a changed "
    "tensor; leave mm out of save=, make the change out of place, or checkpoint that "
    "module instead")


@pytest.mark.slow
def test_a_delta_scaled_in_place_is_refused_alike_and_out_of_place_priced():
    """Note [Written in place in forward] (trace/collector.py): the update `B @ A` is an
    `mm` in the selective default save list; scaled in place (`.mul_(scale)`) inside the
    block's call, torch's selective checkpoint finds the kept output changed in the re-run.
    predict and measure refuse `selective:blocks.*` in the same line, whether the
    parametrization is registered for each call (peft 0.22's `ParamWrapper` on Mixtral's
    router: test_hf_archs.py's mixtral row) or once; the line's advice, the save list
    without `mm`, is priced, as are checkpoint and offload. Scaled out of place (peft 0.21)
    selective is priced.

    The bytes: ledger = allocator 233,788; `save=addmm` 276,668; checkpoint 211,132;
    offload 181,556; out of place, selective 301,244 (24,576 B over `save=addmm`: the
    `mm` outputs it keeps too)."""
    pols = ["selective:blocks.*", "selective:blocks.*:save=addmm", "checkpoint:blocks.*",
            "offload:blocks.*"]
    run = run_client("train_param_delta.py", ["--scale", "inplace"], pols)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 233_788
    sel = run.policies["selective:blocks.*"]
    assert sel.predicted is None and sel.measured is None
    assert sel.predict_refusal == sel.measure_refusal == REFUSED
    peaks = {"selective:blocks.*:save=addmm": 276_668, "checkpoint:blocks.*": 211_132,
             "offload:blocks.*": 181_556}
    for text, peak in peaks.items():
        assert run.policies[text].predicted == run.policies[text].measured == peak, text

    once = run_client("train_param_delta.py", ["--scale", "inplace", "--how", "fixed"],
                      ["selective:blocks.*"])
    sel = once.policies["selective:blocks.*"]
    assert sel.predicted is None and sel.predict_refusal == sel.measure_refusal == REFUSED

    out = run_client("train_param_delta.py", ["--scale", "out"], ["selective:blocks.*"])
    assert out.ledger.peak_with_scratch() == out.allocator_peak == 233_788
    sel = out.policies["selective:blocks.*"]
    assert sel.predicted == sel.measured == 301_244

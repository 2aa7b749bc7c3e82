"""Predicted vs measured peak on the bundled examples: |pred - meas| / meas <= 1 %.

Each measurement is a fresh process (about 3-6 s here), so this file is marked slow. The
ledger is traced without its allocator pass: the workspace it would add is 32 bytes here.

Not asserted: `offload:blocks.*` on the CNN (see docs/accuracy.md): its peak moves into
BatchNorm's backward, whose CPU kernel allocates a 1 MiB scratch tensor that no dispatch
mode sees, so the prediction is 1 MiB (22 %) low.
"""

from __future__ import annotations

import pytest

from memledger.ledger.model import Ledger
from memledger.measure.runner import measure_script
from memledger.replay.policies import parse_policy
from memledger.replay.predict import predict
from memledger.trace.session import trace_script

CASES = {
    "examples/train_gpt.py": ["none", "checkpoint:blocks.*", "checkpoint:blocks.[0-1]",
                              "selective:blocks.*", "offload:blocks.*",
                              "checkpoint:blocks.[0-1]+offload:blocks.[2-3]"],
    "examples/train_cnn.py": ["none", "checkpoint:blocks.*", "checkpoint:blocks.[0-1]",
                              "selective:blocks.*", "checkpoint:blocks.0+offload:blocks.[1-2]"],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", list(CASES))
def test_predicted_peak_within_one_percent(script, tmp_path):
    out = tmp_path / "run.ledger"
    trace_script(script, [], out, steps=2, measure=False)   # the peak is in step 2
    pols = [parse_policy(p) for p in CASES[script]]
    rep = predict(Ledger.load(out), pols, bandwidth=1e9)
    for pol, pred in zip(pols, rep.policies):
        meas = measure_script(script, [], pol, steps=2, time_steps=1)
        err = abs(pred.peak_bytes - meas.peak_bytes) / meas.peak_bytes
        assert err <= 0.01, f"{pol.text()}: predicted {pred.peak_bytes}, measured {meas.peak_bytes}"

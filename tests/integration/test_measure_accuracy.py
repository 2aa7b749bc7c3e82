"""Predicted vs measured peak on the bundled examples: |pred - meas| / meas <= 1 %.

Each measurement is a fresh process (about 3-6 s here), so this file is marked slow. The
trace keeps its allocator pass: it records kernel scratch (Note [Kernel scratch]), without
which CNN offload is predicted 1 MiB (22 %) low at BatchNorm's backward.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

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
                              "selective:blocks.*", "offload:blocks.*",
                              "checkpoint:blocks.0+offload:blocks.[1-2]"],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", list(CASES))
def test_predicted_peak_within_one_percent(script, tmp_path):
    out = tmp_path / "run.ledger"
    trace_script(script, [], out, steps=2, timing=False)   # the peak is in step 2
    pols = [parse_policy(p) for p in CASES[script]]
    rep = predict(Ledger.load(out), pols, bandwidth=1e9)
    # peaks do not depend on timing: two measuring processes at once
    with ThreadPoolExecutor(max_workers=2) as pool:
        measured = list(pool.map(
            lambda p: measure_script(script, [], p, steps=2, time_steps=1), pols))
    for pol, pred, meas in zip(pols, rep.policies, measured):
        # docs/accuracy.md: the largest gap on the examples is 536 B (GPT checkpoint:
        # 22,474,680 predicted vs 22,474,144 measured = 0.0024 %); the claim is 0.003 %
        err = abs(pred.peak_bytes - meas.peak_bytes) / meas.peak_bytes
        assert err <= 3e-5, f"{pol.text()}: predicted {pred.peak_bytes}, measured {meas.peak_bytes}"
